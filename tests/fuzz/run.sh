#!/usr/bin/env bash
# Builds remat's libFuzzer targets with clang (ASan+UBSan) and runs each for a budget, --jobs at
# a time; fails on any finding (crash, uncaught non-remat exception, leak, sanitizer report,
# timeout, a single allocation over 256 MiB: inputs are at most 16 KiB, recipes build files of a
# few MB).
# Usage: bash tests/fuzz/run.sh [--time SECONDS] [--runs N] [--jobs N] [--build DIR] [--corpus DIR]
#                               [TARGET...]
#   --time 60      seconds per target (default 60; CI's fuzz stage)
#   --runs N       stop a target after N executions as well (default: no limit)
#   --jobs N       targets fuzzed at the same time, one core each (default nproc)
#   --build DIR    build directory (default build-fuzz)
#   --corpus DIR   where each target's growing corpus is kept, DIR/<target> (default DIR of the
#                  build: BUILD/corpus); the committed seeds are always read, never written
# Prints one line per target: date, executions, corpus size, outcome. A finding's input is left
# in BUILD/findings/<target>/: copy it to tests/fuzz/regressions/<target>/ with the fix.
set -euo pipefail
cd "$(dirname "$0")/../.."
time_s=60 runs=-1 build=build-fuzz corpus="" jobs=$(nproc) targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time_s=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(safetensors gpt2 snapshot llmc_tokens strategy tokenizer llama)
corpus=${corpus:-$build/corpus}
bash .ci/deps.sh build fuzz
if [ ! -f "$build/CMakeCache.txt" ]; then
  # Eigen's own GEMM and no OpenMP: every kernel instrumented, one thread.
  mkdir -p "$build"
  CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREMAT_FUZZ=ON \
    -DREMAT_WERROR=ON -DREMAT_ENABLE_CUDA=OFF -DREMAT_USE_OPENBLAS=OFF -DREMAT_USE_OPENMP=OFF \
    -DREMAT_BUILD_EXAMPLES=OFF -DREMAT_BUILD_BENCHMARKS=OFF > "$build/configure.log" 2>&1 ||
    { cat "$build/configure.log"; exit 1; }
fi
cmake --build "$build" -j "$(nproc)" --target remat_fuzzers > "$build/fuzzers.build.log" 2>&1 ||
  { tail -n 60 "$build/fuzzers.build.log"; exit 1; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fuzz_one() {  # TARGET: runs it for the budget; its summary line goes to BUILD/fuzz_TARGET.summary
  local t=$1 exe="$build/tests/fuzz/fuzz_$1" log="$build/fuzz_$1.log" max_len=16384 rc execs secs size outcome
  [ "$t" = strategy ] && max_len=256  # the seeds are up to 8 KiB; strategy texts are short
  set +e
  "$exe" "$corpus/$t" tests/fuzz/seeds/"$t" tests/fuzz/regressions/"$t" \
    -dict=tests/fuzz/dict/"$t".dict -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 \
    -max_total_time="$time_s" -runs="$runs" -print_final_stats=1 \
    -artifact_prefix="$build/findings/$t/" > "$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  secs=$(sed -n 's/^stat::.*total_time.*: *//p;s/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n1)
  size=$(find "$corpus/$t" -type f | wc -l)
  if [ $rc -eq 0 ]; then outcome="no finding"; else outcome="FINDING (exit $rc; input in $build/findings/$t/, log $log)"; fi
  {
    printf '%s  %-12s %12s execs  %6ss  corpus %5s  %s\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$t" \
      "${execs:-?}" "${secs:-?}" "$size" "$outcome"
    [ $rc -eq 0 ] || grep -E "ERROR|runtime error|terminate|SUMMARY|Test unit written" "$log" | head -n 20
  } > "$build/fuzz_$t.summary"
  echo $rc > "$build/fuzz_$t.rc"
}
for t in "${targets[@]}"; do
  [ -x "$build/tests/fuzz/fuzz_$t" ] || { echo "fuzz: no target '$t' (expected one of tests/fuzz/fuzz_*.cpp)"; exit 2; }
  mkdir -p "$corpus/$t" "$build/findings/$t"
done
# --jobs targets at a time, each single-threaded with its own corpus, log and findings
for t in "${targets[@]}"; do
  rm -f "$build/fuzz_$t.rc"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait
failed=0
for t in "${targets[@]}"; do
  cat "$build/fuzz_$t.summary"
  [ "$(cat "$build/fuzz_$t.rc" 2>/dev/null)" = 0 ] || failed=1
done
exit $failed
