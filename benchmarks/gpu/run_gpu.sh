#!/usr/bin/env bash
# The one GPU command. On a machine with nvcc, cmake, cuBLAS and PyTorch but no Debian dev
# packages (carry .deps from prepare_deps.sh), it builds and runs the GPU tests first, then
# remat's and PyTorch's GPT-2 124M steps (none/block/selective) and the sequence sweep.
#
#   bash benchmarks/gpu/run_gpu.sh OUTDIR [BUDGET_SECONDS]     (budget default 420)
#
# It leaves four files in OUTDIR, whatever happens: summary.md, summary.json (one object per
# timed run: impl, checkpoint, seq, batch, tokens_per_s, step_s, reserved_bytes, peak_bytes),
# run.log and results.tar.gz (every step's own log and JSON, machine.txt). Every step runs under a timeout cut to what is
# left of the budget, so the whole run ends inside it; a failing step prints the tail of its log
# to stdout and the run goes on to the next. The build never uses -Werror (an unknown host
# compiler must not stop the run). Exit status: the GPU tests' (or the build's, if it failed).
#
# REMAT_GPU_BUILD_DIR (default build-gpu), REMAT_GPU_CMAKE_ARGS, REMAT_GPU_TARGETS (default
# "remat_cuda_tests gpt_step_cuda attention_cuda"), REMAT_GPU_TESTS_BIN, REMAT_GPU_STEP_BIN and
# REMAT_GPU_ATTN_BIN (the GPU tests, gpt_step_cuda and attention_cuda in the build) let a machine
# without a GPU prove the script's own logic with another build: tests/gpu_script/test_run_gpu.sh
# (ctest gpu_script.run_gpu).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: run_gpu.sh OUTDIR [BUDGET_SECONDS]}
BUDGET=${2:-420}
BUILD=${REMAT_GPU_BUILD_DIR:-build-gpu}
read -r -a TARGETS <<< "${REMAT_GPU_TARGETS:-remat_cuda_tests gpt_step_cuda attention_cuda}"
TESTS_BIN=${REMAT_GPU_TESTS_BIN:-$BUILD/tests/remat_cuda_tests}
STEP_BIN=${REMAT_GPU_STEP_BIN:-$BUILD/benchmarks/gpt_step_cuda}
ATTN_BIN=${REMAT_GPU_ATTN_BIN:-$BUILD/benchmarks/attention_cuda}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RAW=$(mktemp -d "${TMPDIR:-/tmp}/remat-gpu.XXXXXX")
START=$(date +%s)
: > "$OUT/run.log"

log() { echo "== [$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/run.log"; }
left() { echo $(( START + BUDGET - $(date +%s) )); }

# step NAME LIMIT OUTFILE CMD...: runs CMD with stdout to $RAW/OUTFILE and stderr to
# $RAW/NAME.log under min(LIMIT, what is left - 20 s for the bundle); returns CMD's status.
step() {
  local name=$1 limit=$2 outfile=$3
  shift 3
  local t
  t=$(( $(left) - 20 ))
  (( t > limit )) && t=$limit
  if (( t < 5 )); then
    log "$name SKIPPED: the budget is spent"
    return 124
  fi
  log "$name (limit ${t}s)"
  timeout --kill-after=5 "$t" "$@" > "$RAW/$outfile" 2> "$RAW/$name.log"
  local rc=$?
  if (( rc != 0 )); then
    if (( rc == 124 || rc == 137 )); then log "$name TIMED OUT after ${t}s"; else log "$name FAILED (exit $rc)"; fi
    echo "---- tail of $name's output ----"
    tail -n 25 "$RAW/$outfile" "$RAW/$name.log" 2>/dev/null | tee -a "$OUT/run.log"
    echo "----"
  fi
  return $rc
}

finish() {
  local rc=$1
  cp "$OUT/run.log" "$RAW/run.log"
  python3 benchmarks/gpu/summarize.py "$RAW" "$rc" "$OUT/summary.json" > "$OUT/summary.md" 2>> "$OUT/run.log" \
    || echo "# GPU run: summarize.py failed; see run.log and results.tar.gz" > "$OUT/summary.md"
  cat "$OUT/summary.md"
  cp "$OUT/run.log" "$RAW/run.log"
  tar -czf "$OUT/results.tar.gz" -C "$RAW" . && rm -rf "$RAW"
  log "done in $(( $(date +%s) - START ))s, exit $rc"
  exit "$rc"
}

{ nvidia-smi; nvcc --version; cmake --version; python3 -c 'import torch; print("torch", torch.__version__)'; \
  nproc; } > "$RAW/machine.txt" 2>&1

# shellcheck disable=SC2086  # REMAT_GPU_CMAKE_ARGS is a list of words
step configure 90 configure.txt cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" -DREMAT_WERROR=OFF -DREMAT_BUILD_EXAMPLES=OFF \
  ${REMAT_GPU_CMAKE_ARGS:-} || finish 2
step build 240 build.txt cmake --build "$BUILD" -j "$(nproc)" --target "${TARGETS[@]}" || finish 2

step cuda_tests 120 cuda_tests.txt "$TESTS_BIN"
rc=$?
log "GPU tests exit code $rc"

# GPT-2 124M shapes: L=12 d=768 heads=12 seq=1024 batch 8 vocab 50257, fp32 with TF32 GEMMs
# (and TF32 tensor-core attention). --grad-hash: each strategy's loss and gradients at the
# initial weights, hashed; a second process repeats none and block: determinism on the device
# (two runs, and checkpointed = plain, bit for bit).
gpt2=(--layers 12 --d 768 --heads 12 --seq 1024 --batch 8 --vocab 50257)
pad=(--vocab-multiple 128)  # remat's wte padded to 50304 (internal; PyTorch's runs keep 50257)
step remat_gpt2 150 remat_gpt2_124m.jsonl "$STEP_BIN" "${gpt2[@]}" "${pad[@]}" \
  --steps 10 --warmup 2 --checkpoint none,block,selective --grad-hash
# block alone: its own reserved bytes (in the run above it shares none's allocator)
step remat_gpt2_block 60 remat_gpt2_124m_block.jsonl "$STEP_BIN" "${gpt2[@]}" "${pad[@]}" \
  --steps 5 --warmup 2 --checkpoint block
step remat_gpt2_repeat 60 remat_gpt2_124m_repeat.jsonl "$STEP_BIN" "${gpt2[@]}" "${pad[@]}" \
  --steps 1 --warmup 0 --checkpoint none,block --grad-hash
# where the step's time goes: CUDA events around every kernel and cuBLAS call (slower steps,
# so timed apart from the runs above); the table by kernel and by kind is in the step's log
step remat_profile 90 remat_profile.jsonl "$STEP_BIN" "${gpt2[@]}" "${pad[@]}" \
  --steps 3 --warmup 1 --checkpoint none,block --profile
# PyTorch as a user would run it (sdpa + fused AdamW: torch_gpt_step.py's default on CUDA) and
# with eager attention (the (B, H, T, T) matrix; the 2026-11-30 baseline)
for ck in none block; do
  step "torch_gpt2_$ck" 90 "torch_gpt2_124m_$ck.json" python3 benchmarks/torch_gpt_step.py --device cuda \
    "${gpt2[@]}" --steps 10 --warmup 3 --checkpoint "$ck"
  step "torch_gpt2_eager_$ck" 90 "torch_gpt2_124m_eager_$ck.json" python3 benchmarks/torch_gpt_step.py \
    --device cuda "${gpt2[@]}" --steps 10 --warmup 3 --checkpoint "$ck" --attention eager
done
# remat in bf16 (nn::GPTConfig::precision) and PyTorch in bf16 (autocast, sdpa, fused AdamW):
# issue 27's GPU comparison
step remat_gpt2_bf16 90 remat_gpt2_124m_bf16.jsonl "$STEP_BIN" "${gpt2[@]}" "${pad[@]}" \
  --steps 10 --warmup 3 --checkpoint none,block --precision bf16
for ck in none block; do
  step "torch_gpt2_bf16_$ck" 90 "torch_gpt2_124m_bf16_$ck.json" python3 benchmarks/torch_gpt_step.py \
    --device cuda "${gpt2[@]}" --steps 10 --warmup 3 --checkpoint "$ck" --precision bf16
done
# attention alone, forward and backward (issue 12's target: PyTorch eager's time at T 1024 and
# 4096), batch 8, 12 heads of 64, causal
attn=(--batch 8 --heads 12 --seq 1024,4096 --d 64 --steps 5 --warmup 2)
step remat_attention 90 remat_attention.jsonl "$ATTN_BIN" "${attn[@]}"
step torch_attention 90 torch_attention.jsonl python3 benchmarks/torch_attention.py --device cuda "${attn[@]}"
# the attention's memory and time against sequence length (batch 1; PyTorch without
# checkpointing)
for seq in 1024 4096; do
  step "remat_seq$seq" 60 "remat_seq$seq.jsonl" "$STEP_BIN" --layers 12 --d 768 \
    --heads 12 --seq $seq --batch 1 --vocab 50257 "${pad[@]}" --steps 3 --warmup 1 \
    --checkpoint none,block,selective
  step "torch_seq$seq" 60 "torch_seq$seq.json" python3 benchmarks/torch_gpt_step.py --device cuda \
    --layers 12 --d 768 --heads 12 --seq $seq --batch 1 --vocab 50257 --steps 3 --warmup 1 --checkpoint none
done
finish "$rc"
