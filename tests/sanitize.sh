#!/usr/bin/env bash
# The sanitizer stage: the whole suite (unit tests, io tests, fuzz replays, the train_gpt CLI
# tests) built with ASan+UBSan (REMAT_SANITIZE=ON) in its own build
# directory, then the examples' smoke runs, all under leak detection; any report fails it.
# tests/run.sh runs it after the plain stage. Usage, from anywhere: bash tests/sanitize.sh
#   BUILD=dir (default build-asan), JOBS=n (default nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/deps.sh build torch text cli mpi
build=${BUILD:-build-asan}
jobs=${JOBS:-$(nproc)}
# No -Werror here (the plain stage checks warnings; GCC warns differently with sanitizers),
# no benchmarks (ctest runs none), no CUDA (nvcc takes no ASan). -O1 -g1, as ASan advises:
# builds in half the time of -O2 -g, with line numbers in reports; no NDEBUG, so Eigen's own
# assertions (sizes, indices) are on as well.
mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DREMAT_SANITIZE=ON -DREMAT_ENABLE_CUDA=OFF -DREMAT_CUDA_EMULATION=OFF -DREMAT_BUILD_BENCHMARKS=OFF > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$jobs"
# halt_on_error/abort: the first report fails the test. REMAT_CPU_CACHE=0: tensors come from
# malloc, not the CPU arena, so ASan sees each buffer's bounds (core/memory.hpp).
# max_allocation_size_mb + allocator_may_return_null: a request over 4 GiB fails as
# std::bad_alloc (as under the CLI tests' `ulimit -v`, which ASan cannot run under: .ci/asan_cli.sh).
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:check_initialization_order=1:strict_init_order=1:max_allocation_size_mb=4096:allocator_may_return_null=1"
export LSAN_OPTIONS="suppressions=$PWD/.ci/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export REMAT_CPU_CACHE=0
# Left out: label consumer (separate CMake projects built without sanitizers: nothing of ours
# is instrumented there); label reference (our outputs against other programs': tiktoken on 1.1M
# code points and a 4 MB corpus, the Unicode tables, PyTorch's training run; they check values,
# which the plain stage does: 43 s of its 215 s ctest here, several times that under ASan; the
# same code runs sanitized in the unit tests, the CLI tests and the fuzz replays); the CUDA emulation, not even built (REMAT_CUDA_EMULATION=OFF above:
# its tests switch stacks with ucontext fibers, which ASan does not follow; false stack errors).
ctest --test-dir "$build" --output-on-failure -j "$jobs" -LE 'consumer|emulation|reference'
for ex in "01_scalar_grad" "02_tiny_gpt 3 1" "03_checkpoint_gpt 3 1 2 $build/checkpoint_gpt.svg" \
          "04_own_model --dim 32 --layers 2 --seq 16 --batch 2 --steps 2"; do
  echo "smoke run: $ex"
  # shellcheck disable=SC2086
  "$build"/examples/$ex > "$build/smoke.log" 2>&1 || { cat "$build/smoke.log"; exit 1; }
done
echo "sanitizer stage: passed"
