#!/usr/bin/env bash
# One go on a GPU machine that has nvcc, cmake, cuBLAS and PyTorch but no Debian dev packages
# (carry .deps from prepare_deps.sh): builds and runs the GPU tests, then remat's and PyTorch's
# GPT-2 124M benchmarks and the sequence-length sweep, writing everything under OUT, with
# summary.md at the end. About 5-8 minutes on an H200.
#   bash benchmarks/gpu/run_gpu.sh "$OUT"
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: run_gpu.sh OUTDIR}
mkdir -p "$OUT"
log() { echo "== $*" | tee -a "$OUT/run.log"; }
{ nvidia-smi; nvcc --version; cmake --version; python3 -c 'import torch; print("torch", torch.__version__)'; } \
  > "$OUT/machine.txt" 2>&1

log "configure and build (CUDA tests; CPU parts only as far as they are needed)"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" \
  -DREMAT_WERROR=ON -DREMAT_BUILD_EXAMPLES=OFF >> "$OUT/build.log" 2>&1 \
  || { log "configure FAILED (see build.log)"; exit 1; }
cmake --build build-gpu -j "$(nproc)" --target remat_cuda_tests gpt_step_cuda >> "$OUT/build.log" 2>&1 \
  || { log "build FAILED (see build.log)"; exit 1; }

log "GPU tests"
build-gpu/tests/remat_cuda_tests 2>&1 | tee "$OUT/cuda_tests.txt"
rc=${PIPESTATUS[0]}
log "GPU tests exit code $rc"

gpt2=(--layers 12 --d 768 --heads 12 --seq 1024 --batch 8 --vocab 50257)
log "remat, GPT-2 124M shapes: none, block, selective in turns"
timeout 240 build-gpu/benchmarks/gpt_step_cuda "${gpt2[@]}" --steps 10 --warmup 2 \
  --checkpoint none,block,selective > "$OUT/remat_gpt2_124m.jsonl" 2>> "$OUT/run.log" || log "remat gpt2 FAILED"
for seq in 1024 4096; do
  timeout 120 build-gpu/benchmarks/gpt_step_cuda --layers 12 --d 768 --heads 12 --seq $seq --batch 1 \
    --vocab 50257 --steps 3 --warmup 1 --checkpoint none > "$OUT/remat_seq$seq.jsonl" 2>> "$OUT/run.log" \
    || log "remat seq $seq FAILED"
done
log "PyTorch reference, GPT-2 124M shapes (L=12 d=768 heads=12 seq=1024 batch 8 vocab 50257)"
for ck in none block; do
  python3 benchmarks/torch_gpt_step.py --device cuda --layers 12 --d 768 --heads 12 --seq 1024 \
    --batch 8 --vocab 50257 --steps 10 --warmup 3 --checkpoint "$ck" \
    > "$OUT/torch_gpt2_124m_$ck.json" 2>> "$OUT/run.log" || log "torch $ck FAILED"
done
for seq in 1024 4096; do  # for the attention's memory against sequence length (eager, materialized)
  python3 benchmarks/torch_gpt_step.py --device cuda --layers 12 --d 768 --heads 12 --seq $seq \
    --batch 1 --vocab 50257 --steps 3 --warmup 1 --checkpoint none \
    > "$OUT/torch_seq$seq.json" 2>> "$OUT/run.log" || log "torch seq $seq FAILED"
done
python3 benchmarks/gpu/summarize.py "$OUT" > "$OUT/summary.md" 2>> "$OUT/run.log"
cat "$OUT/summary.md"
log "done"
exit "$rc"
