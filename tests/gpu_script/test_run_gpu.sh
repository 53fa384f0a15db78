#!/usr/bin/env bash
# benchmarks/gpu/run_gpu.sh proved without a GPU (issue 12, point 7): the script's own logic with
# builds of this machine standing in for the GPU's. Three runs, each into a fresh output folder:
#   1. a build that fails (a target that does not exist): exit 2, the build's tail on stdout;
#   2. the whole run: the CUDA emulation's runtime tests stand in for the GPU tests (they pass:
#      exit 0), gpt_step_cuda and attention_cuda are missing and PyTorch has no GPU here, so
#      every benchmark step fails: each says so and prints its tail, and the run goes on;
#   3. GPU tests that hang (a stand-in that sleeps) under a budget of 45 s: the tests' step is cut
#      to what is left less 20 s for the bundle and times out (exit 124), every later step (17) is
#      skipped, and the run ends inside its budget.
# Every run must leave exactly summary.md, summary.json, run.log and results.tar.gz (at most 8 files, as the
# device tool brings back), a summary that names every step and its outcome, and a bundle with
# each step's own log.
# Usage: test_run_gpu.sh SOURCE_DIR SCRATCH_DIR   (SCRATCH_DIR: its build folder is kept between runs)
set -u
SRC=$1
SCRATCH=$2
mkdir -p "$SCRATCH"
SCRATCH=$(cd "$SCRATCH" && pwd)
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
BIN=true DIR=$DIR . "$(dirname "${BASH_SOURCE[0]}")/../cli/common.sh"  # ok, bad
if ! command -v python3 >/dev/null; then echo "SKIP: no python3 (summarize.py)"; exit 77; fi

B=$SCRATCH/build
# CUDA toolkit off (no nvcc build here), benchmarks off; the emulation (default on) gives the
# runtime tests' target.
export REMAT_GPU_BUILD_DIR=$B REMAT_GPU_CMAKE_ARGS="-DREMAT_ENABLE_CUDA=OFF -DREMAT_BUILD_BENCHMARKS=OFF"

# four_files NAME OUT: the folder holds summary.md, summary.json, run.log, results.tar.gz and
# nothing else, the summary has its title, summary.json is a JSON list (empty: no run timed here),
# the bundle holds run.log and machine.txt
four_files() {
  local name=$1 out=$2 files
  files=$(cd "$out" && ls -A | sort | tr '\n' ' ')
  if [ "$files" = "results.tar.gz run.log summary.json summary.md " ] && grep -q "^# GPU run" "$out/summary.md" &&
     python3 -c 'import json, sys; assert json.load(open(sys.argv[1])) == []' "$out/summary.json" &&
     tar -tzf "$out/results.tar.gz" | grep -q "run.log" && tar -tzf "$out/results.tar.gz" | grep -q "machine.txt"; then
    ok "$name: four files (summary.md, summary.json, run.log, results.tar.gz), a summary, a bundle"; else
    bad "$name: files [$files], summary: $(head -c 300 "$out/summary.md" 2>/dev/null)"; fi
}

# 1. A build that fails.
REMAT_GPU_TARGETS=no_such_target bash "$SRC/benchmarks/gpu/run_gpu.sh" "$DIR/out1" 300 >"$DIR/stdout1" 2>&1
rc=$?
four_files "failed build" "$DIR/out1"
if [ "$rc" -eq 2 ] && grep -q "build FAILED" "$DIR/out1/summary.md" && grep -q -- "---- tail of build's output ----" "$DIR/stdout1" &&
   grep -q "no_such_target" "$DIR/stdout1" && ! grep -q "cuda_tests" "$DIR/out1/run.log"; then
  ok "a failed build: exit 2, its tail on stdout, nothing run after it"; else
  bad "failed build: exit $rc, stdout: $(tail -n 20 "$DIR/stdout1")"; fi

# 2. The whole run, the emulation's runtime tests standing in for the GPU tests (built here,
# so that the hanging run below has its build done in time).
REMAT_GPU_TARGETS=remat_cuda_emu_runtime_tests REMAT_GPU_TESTS_BIN="$B/tests/remat_cuda_emu_runtime_tests" \
  REMAT_GPU_STEP_BIN="$B/benchmarks/no_gpt_step_cuda_here" REMAT_GPU_ATTN_BIN="$B/benchmarks/no_attention_cuda_here" \
  bash "$SRC/benchmarks/gpu/run_gpu.sh" "$DIR/out3" 400 >"$DIR/stdout3" 2>&1
rc=$?
four_files "whole run" "$DIR/out3"
steps="remat_gpt2 remat_gpt2_block remat_gpt2_repeat remat_profile torch_gpt2_none torch_gpt2_eager_none torch_gpt2_block torch_gpt2_eager_block remat_attention torch_attention remat_seq1024 torch_seq1024 remat_seq4096 torch_seq4096"
missing=""
for s in $steps; do
  grep -q "^- \[[0-9]*s\] $s FAILED" "$DIR/out3/summary.md" || missing="$missing $s"
  grep -q -- "---- tail of $s's output ----" "$DIR/stdout3" || missing="$missing $s(no tail)"
  tar -tzf "$DIR/out3/results.tar.gz" | grep -q "$s.log" || missing="$missing $s(no log)"
done
if [ "$rc" -eq 0 ] && grep -q "## GPU tests (exit code 0)" "$DIR/out3/summary.md" && [ -z "$missing" ] &&
   [ "$(grep -c "(no results: every step of this table failed or was skipped" "$DIR/out3/summary.md")" -eq 3 ] &&
   tar -tzf "$DIR/out3/results.tar.gz" | grep -q "cuda_tests.txt" && grep -q "done in" "$DIR/out3/run.log"; then
  ok "the whole run: tests passed (exit 0), every failing benchmark step named with its tail and log, empty tables said so, to the end"; else
  bad "whole run: exit $rc, missing:$missing, summary: $(cat "$DIR/out3/summary.md" | head -40)"; fi

# 3. GPU tests that hang, under a budget of 45 s (the build is done by now).
printf '#!/bin/sh\nexec sleep 300\n' > "$DIR/hanging_tests" && chmod +x "$DIR/hanging_tests"
START=$SECONDS
REMAT_GPU_TARGETS=remat_cuda_emu_runtime_tests REMAT_GPU_TESTS_BIN="$DIR/hanging_tests" \
  bash "$SRC/benchmarks/gpu/run_gpu.sh" "$DIR/out2" 45 >"$DIR/stdout2" 2>&1
rc=$?
took=$((SECONDS - START))
four_files "hanging tests" "$DIR/out2"
skipped=$(grep -c "SKIPPED: the budget is spent" "$DIR/out2/run.log")
# the tests' step ends 20 s before the budget does (what the bundle may need), not at its end
stopped=$(sed -n 's/^== \[\([0-9]*\)s\] cuda_tests TIMED OUT.*/\1/p' "$DIR/out2/run.log")
if [ "$rc" -eq 124 ] && grep -Eq "cuda_tests TIMED OUT after [0-9]+s" "$DIR/out2/run.log" && [ "$skipped" -eq 17 ] &&
   grep -q "## GPU tests (exit code 124)" "$DIR/out2/summary.md" && [ "$took" -le 45 ] &&
   [ "${stopped:-99}" -le 27 ]; then
  ok "hanging GPU tests: $(grep -Eo "cuda_tests TIMED OUT after [0-9]+s" "$DIR/out2/run.log") at ${stopped} s, 17 steps skipped, exit 124 after ${took} s of a 45 s budget"; else
  bad "hanging tests: exit $rc after ${took} s, $skipped skipped, run.log: $(cat "$DIR/out2/run.log")"; fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
