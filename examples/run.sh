#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains a small GPT on the CPU, printing
# the loss, the step time and the exact memory ledger. Usage, from anywhere: bash examples/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/deps.sh build
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target 02_tiny_gpt
build/examples/02_tiny_gpt "${STEPS:-60}"
