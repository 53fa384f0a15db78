#!/usr/bin/env bash
# The test command: installs what is missing, configures (warnings as errors), builds
# everything and runs every test. Usage, from anywhere: bash tests/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# torch: parity with PyTorch; text: the tokenizer's reference; cli: perl for the CLI tests;
# mpi: Open MPI for the data-parallel tests (ctest -L mpi)
bash .ci/deps.sh build torch text cli mpi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DREMAT_WERROR=ON
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)"
