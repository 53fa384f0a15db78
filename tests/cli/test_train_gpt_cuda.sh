#!/usr/bin/env bash
# train_gpt --device cuda against --device cpu (issue 12, acceptance 4), run on train_gpt_emulated:
# the trainer's CUDA instantiation (examples/train_gpt/cuda.cu) with every kernel executed on the
# CPU by the CUDA emulation. Asserts:
#   - the CUDA losses are the CPU's within a relative 1e-4 (other summation orders: the first
#     steps agree to about 1e-6), plain and with dropout, checkpointing, micro-steps, clipping, SGD;
#   - on the emulated device (its atomics run in order), checkpointed losses equal the plain
#     ones bit for bit, and a resumed run those of the uninterrupted run;
#   - snapshots and weights move between the devices (through the host): a CUDA snapshot
#     resumes on the CPU and a CPU snapshot on CUDA, weights saved on CUDA load on both;
#   - --memory-limit re-plans on the device, `auto` plans from the device's free memory (the
#     emulation reports 16 GiB); a diverged run stops; --estimate, --sample; the flags that do
#     not apply to a GPU are errors.
# What the emulation cannot show: its device memory is host memory, so host code that reads a
# device pointer directly works here and crashes on a GPU (the trainer reads weights through
# copy_to_host and to_vector only); the real-GPU run is the check for that.
# Usage: test_train_gpt_cuda.sh path/to/train_gpt_emulated
set -u
BIN=$1
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # ok, bad, losses, expect_early_error

# close NAME A B TOL: A and B (--json outputs) have the same number (>= 2) of losses, each pair
# within TOL relative; says the largest difference found.
close() {
  local name=$1 a=$2 b=$3 tol=$4 out
  out=$(paste <(grep -o '"loss":[^,]*' "$a" | cut -d: -f2) <(grep -o '"loss":[^,]*' "$b" | cut -d: -f2) |
    awk -v tol="$tol" '{ n++; if ($2 == "") { bad = 1; next }
                         d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1);
                         if (r > worst) worst = r; if (!(r <= tol)) bad = 1 }
                       END { printf "%d %.2e %d", n, worst, bad + 0 }')
  set -- $out
  if [ "$1" -ge 2 ] && [ "$3" -eq 0 ] && [ "$(losses "$a" | wc -w)" -eq "$(losses "$b" | wc -w)" ]; then
    ok "$name ($1 steps, largest relative difference $2)"; else
    bad "$name: steps $1, largest relative difference $2 (tolerance $tol): [$(losses "$a")] vs [$(losses "$b")]"; fi
}
run() {  # run NAME OUT ARGS...: a run that must succeed
  local name=$1 out=$2; shift 2
  "$BIN" "$@" --json >"$out" 2>"$DIR/err" || bad "$name: exit $?, stderr: $(cat "$DIR/err")"
}

tiny=(--layers 2 --d 32 --heads 2 --seq 16 --batch 2)
cpu=(--device cpu --threads 1)
gpu=(--device cuda)

# 1. The same training on both devices (with a validation loss after steps 3 and 6, computed
# under NoGrad on the device: it changes no training loss, and agrees with the CPU's).
for i in $(seq 1 12); do echo "held-out text for the validation loss, line $i"; done > "$DIR/val.txt"
val=(--val-data "$DIR/val.txt" --val-every 3 --val-batches 2)
run "cpu plain" "$DIR/cpu.jsonl" "${tiny[@]}" "${cpu[@]}" --steps 6 "${val[@]}"
run "cuda plain" "$DIR/cuda.jsonl" "${tiny[@]}" "${gpu[@]}" --steps 6 "${val[@]}"
close "AdamW: cuda losses = cpu losses" "$DIR/cpu.jsonl" "$DIR/cuda.jsonl" 1e-4
# the lines that evaluated, with val_loss in place of loss, for close()
grep '"val_loss"' "$DIR/cpu.jsonl" | sed 's/"loss":[^,]*,"val_loss"/"loss"/' > "$DIR/cpu_val.jsonl"
grep '"val_loss"' "$DIR/cuda.jsonl" | sed 's/"loss":[^,]*,"val_loss"/"loss"/' > "$DIR/cuda_val.jsonl"
close "validation loss after steps 3 and 6: cuda = cpu" "$DIR/cpu_val.jsonl" "$DIR/cuda_val.jsonl" 1e-4
rich=(--dropout 0.1 --grad-accum 2 --grad-clip 0.5 --lr 1e-3)
run "cpu rich" "$DIR/cpu_rich.jsonl" "${tiny[@]}" "${cpu[@]}" "${rich[@]}" --checkpoint block --steps 6
run "cuda rich" "$DIR/cuda_rich.jsonl" "${tiny[@]}" "${gpu[@]}" "${rich[@]}" --checkpoint block --steps 6
close "dropout, block checkpointing, 2 micro-steps, clipping: cuda = cpu" "$DIR/cpu_rich.jsonl" "$DIR/cuda_rich.jsonl" 1e-4
run "cuda rich, plain" "$DIR/cuda_rich_none.jsonl" "${tiny[@]}" "${gpu[@]}" "${rich[@]}" --checkpoint none --steps 6
if [ -s "$DIR/cuda_rich.jsonl" ] && [ "$(losses "$DIR/cuda_rich.jsonl")" = "$(losses "$DIR/cuda_rich_none.jsonl")" ]; then
  ok "on the emulated device, block checkpointing gives the plain losses bit for bit"; else
  bad "cuda block [$(losses "$DIR/cuda_rich.jsonl")] vs none [$(losses "$DIR/cuda_rich_none.jsonl")]"; fi
sgd=(--optimizer sgd --momentum 0.9 --weight-decay 0.01 --lr 0.05 --checkpoint save_linear)
run "cpu sgd" "$DIR/cpu_sgd.jsonl" "${tiny[@]}" "${cpu[@]}" "${sgd[@]}" --steps 6
run "cuda sgd" "$DIR/cuda_sgd.jsonl" "${tiny[@]}" "${gpu[@]}" "${sgd[@]}" --steps 6
close "SGD with momentum, save_linear: cuda = cpu" "$DIR/cpu_sgd.jsonl" "$DIR/cuda_sgd.jsonl" 1e-4

# 2. Snapshots and weights through the host, both ways.
run "cuda 3 steps" "$DIR/c3.jsonl" "${tiny[@]}" "${gpu[@]}" "${rich[@]}" --steps 3 --snapshot-path "$DIR/cuda.state" --save "$DIR/cuda3.safetensors"
run "cuda resumed on cuda" "$DIR/cc.jsonl" "${tiny[@]}" "${gpu[@]}" "${rich[@]}" --steps 6 --resume "$DIR/cuda.state"
if [ -s "$DIR/cc.jsonl" ] && [ "$(losses "$DIR/cc.jsonl")" = "$(tail -n 3 "$DIR/cuda_rich_none.jsonl" | grep -o '"loss":[^,]*' | tr '\n' ' ')" ]; then
  ok "a cuda snapshot resumes on (emulated) cuda bit for bit"; else
  bad "cuda resume [$(losses "$DIR/cc.jsonl")] vs uninterrupted [$(losses "$DIR/cuda_rich_none.jsonl")]"; fi
run "cuda resumed on cpu" "$DIR/cg.jsonl" "${tiny[@]}" "${cpu[@]}" "${rich[@]}" --steps 6 --resume "$DIR/cuda.state"
tail -n 3 "$DIR/cpu_rich.jsonl" > "$DIR/cpu_rich_tail.jsonl"
close "a cuda snapshot resumes on the cpu (steps 4-6)" "$DIR/cpu_rich_tail.jsonl" "$DIR/cg.jsonl" 1e-4
run "cpu 3 steps" "$DIR/g3.jsonl" "${tiny[@]}" "${cpu[@]}" "${rich[@]}" --steps 3 --snapshot-path "$DIR/cpu.state" --save "$DIR/cpu3.safetensors"
run "cpu resumed on cuda" "$DIR/gc.jsonl" "${tiny[@]}" "${gpu[@]}" "${rich[@]}" --steps 6 --resume "$DIR/cpu.state"
close "a cpu snapshot resumes on cuda (steps 4-6)" "$DIR/cpu_rich_tail.jsonl" "$DIR/gc.jsonl" 1e-4
# the weights --save wrote on cuda are those the cpu trained (not only the same file read twice)
run "cpu from cpu weights" "$DIR/ww.jsonl" "${cpu[@]}" --seq 16 --batch 2 --steps 2 --init-from "$DIR/cpu3.safetensors"
run "cpu from cuda weights" "$DIR/wc.jsonl" "${cpu[@]}" --seq 16 --batch 2 --steps 2 --init-from "$DIR/cuda3.safetensors"
run "cuda from cuda weights" "$DIR/wg.jsonl" "${gpu[@]}" --seq 16 --batch 2 --steps 2 --init-from "$DIR/cuda3.safetensors"
close "weights saved on cuda = weights saved on cpu (both loaded on the cpu)" "$DIR/ww.jsonl" "$DIR/wc.jsonl" 1e-4
close "weights saved on cuda load on cuda" "$DIR/wc.jsonl" "$DIR/wg.jsonl" 1e-4

# 3. Memory as the interface on the device: the CUDA ledger's limit re-plans the step.
mem=(--layers 6 --d 64 --heads 2 --seq 32 --batch 4 --dropout 0.1 --no-profile "${gpu[@]}")
run "cuda none" "$DIR/mnone.jsonl" "${mem[@]}" --steps 3 --checkpoint none
run "cuda limited" "$DIR/mlim.jsonl" "${mem[@]}" --steps 3 --checkpoint none --memory-limit 6.5MiB
peak=$(grep -o '"peak_bytes":[0-9]*' "$DIR/mlim.jsonl" | sed 's/.*://' | sort -n | tail -n 1)
if grep -q '"replanned"' "$DIR/mlim.jsonl" && [ "$(losses "$DIR/mlim.jsonl")" = "$(losses "$DIR/mnone.jsonl")" ] &&
   [ "${peak:-99999999}" -le 6815744 ]; then
  ok "--memory-limit re-plans on cuda, same losses bit for bit, peak $peak <= 6.5 MiB"; else
  bad "cuda re-plan: none [$(losses "$DIR/mnone.jsonl")] limited [$(losses "$DIR/mlim.jsonl")] peak $peak"; fi
"$BIN" "${mem[@]}" --steps 1 --checkpoint auto >"$DIR/auto.txt" 2>"$DIR/err" || bad "cuda auto: $(cat "$DIR/err")"
if grep -Eq "^budget 14\.[0-9]+ GiB" "$DIR/auto.txt"; then
  ok "auto on cuda plans for 90% of the device's free memory: $(grep -Eo "budget 14\.[0-9]+ GiB" "$DIR/auto.txt")"; else
  bad "cuda auto: $(head -n 3 "$DIR/auto.txt")"; fi
# (the budget counts the pool's reserved bytes: the flat parameters and moments, 1.2 MiB each,
# share one 20 MiB segment of the pool's mid-size class, NOTE [CUDA block pool])
"$BIN" "${mem[@]}" --estimate --checkpoint budget:26MiB >"$DIR/est.txt" 2>"$DIR/err" || bad "cuda --estimate: $(cat "$DIR/err")"
if grep -q "exact for the cuda ledger" "$DIR/est.txt" && grep -q "^block " "$DIR/est.txt" &&
   grep -q "certified ledger peak" "$DIR/est.txt"; then ok "--estimate on cuda"; else bad "cuda --estimate: $(cat "$DIR/est.txt")"; fi

# 3b. A Llama-family model (issue 28): grouped-query attention, RMSNorm, rope and SwiGLU on the
# device; cuda = cpu, checkpointed = plain bit for bit on the device, bf16 too; its folder moves.
llama=(--model llama --layers 2 --d 32 --heads 4 --kv-heads 2 --seq 16 --batch 2 --lr 1e-3)
run "llama cpu" "$DIR/lcpu.jsonl" "${llama[@]}" "${cpu[@]}" --steps 4 --save "$DIR/lsaved"
run "llama cuda" "$DIR/lcuda.jsonl" "${llama[@]}" "${gpu[@]}" --steps 4
close "llama: cuda losses = cpu losses" "$DIR/lcpu.jsonl" "$DIR/lcuda.jsonl" 1e-4
run "llama cuda block" "$DIR/lblock.jsonl" "${llama[@]}" "${gpu[@]}" --steps 4 --checkpoint block
if [ -s "$DIR/lblock.jsonl" ] && [ "$(losses "$DIR/lblock.jsonl")" = "$(losses "$DIR/lcuda.jsonl")" ]; then
  ok "llama on the emulated device: block = none bit for bit"; else
  bad "llama cuda block [$(losses "$DIR/lblock.jsonl")] vs none [$(losses "$DIR/lcuda.jsonl")]"; fi
run "llama cuda bf16" "$DIR/lbf.jsonl" "${llama[@]}" "${gpu[@]}" --steps 4 --precision bf16
run "llama cpu bf16" "$DIR/lbfc.jsonl" "${llama[@]}" "${cpu[@]}" --steps 4 --precision bf16
close "llama bf16: cuda losses = cpu losses" "$DIR/lbfc.jsonl" "$DIR/lbf.jsonl" 1e-3
run "llama folder on cuda" "$DIR/lfold.jsonl" --init-from "$DIR/lsaved" --seq 16 --batch 2 "${gpu[@]}" --steps 2
run "llama folder on cpu" "$DIR/lfoldc.jsonl" --init-from "$DIR/lsaved" --seq 16 --batch 2 "${cpu[@]}" --steps 2
close "a Llama folder trains alike on cuda and cpu" "$DIR/lfoldc.jsonl" "$DIR/lfold.jsonl" 1e-4

# 4. A diverged run stops at its step; sampling; flags that do not apply to a GPU.
"$BIN" "${tiny[@]}" "${gpu[@]}" --steps 20 --json --lr 1e38 >"$DIR/out" 2>"$DIR/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -Eq "the loss of step [0-9]+ is|no longer finite after step [0-9]+" "$DIR/err"; then
  ok "a diverged cuda run stops naming the step"; else bad "cuda diverged run: exit $rc, stderr: $(cat "$DIR/err")"; fi
"$BIN" "${tiny[@]}" "${cpu[@]}" --steps 2 --sample 12 --temperature 0 --prompt "the " >"$DIR/scpu" 2>"$DIR/err" || bad "cpu sample: $(cat "$DIR/err")"
"$BIN" "${tiny[@]}" "${gpu[@]}" --steps 2 --sample 12 --temperature 0 --prompt "the " >"$DIR/sgpu" 2>"$DIR/err" || bad "cuda sample: $(cat "$DIR/err")"
if grep -aq "^sample: the " "$DIR/sgpu" && [ "$(grep -a '^sample:' "$DIR/sgpu")" = "$(grep -a '^sample:' "$DIR/scpu")" ]; then
  ok "--sample on cuda draws the cpu's tokens"; else bad "samples: cuda '$(grep -a sample "$DIR/sgpu")' cpu '$(grep -a sample "$DIR/scpu")'"; fi
grep -aq "cuda: remat CUDA emulation" "$DIR/sgpu" && ok "the banner names the device" || bad "banner: $(head -n 3 "$DIR/sgpu")"
expect_early_error "--threads with --device cuda" "--threads 2 sets the CPU's threads" "${tiny[@]}" "${gpu[@]}" --threads 2 --steps 1 --json
expect_early_error "--zero with --device cuda" "--zero shards AdamW's moments over ranks" "${tiny[@]}" "${gpu[@]}" --zero --steps 1 --json
expect_early_error "an unknown device" "--device tpu is not a device of this build \(expected cpu or cuda\)" "${tiny[@]}" --device tpu --steps 1 --json

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
