#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains the same small GPT on the CPU
# with and without checkpointing, printing peak memory, step time and loss side by side.
# Usage, from anywhere: bash examples/run.sh   (STEPS=n to change the step count)
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/deps.sh build
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target 03_checkpoint_gpt
build/examples/03_checkpoint_gpt "${STEPS:-30}" 2 8 build/checkpoint_gpt.svg
