#!/usr/bin/env bash
# train_gpt under mpirun (issue 11): the losses depend on the global batch and the micro-batch,
# not on how they are split among ranks and micro-steps (NOTE [data parallel trainer]), bit for
# bit; a snapshot written by 2 ranks resumes on 1 and on 4; bad set-ups stop every rank with one
# message, in seconds. Usage: test_train_gpt_mpi.sh TRAIN_GPT MPIEXEC [MPIEXEC FLAGS...]
set -u
BIN=$1 MPIEXEC=$2
shift 2
FLAGS=("$@")
. "$(dirname "$0")/common.sh"
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
np() { local n=$1; shift; timeout -k 5 120 "$MPIEXEC" -n "$n" "${FLAGS[@]}" "$BIN" "$@"; }

model=(--layers 2 --d 32 --heads 2 --seq 16 --threads 1 --dropout 0.1 --checkpoint block --json)
run=("${model[@]}" --batch 2 --global-batch 8)
# Losses of 6 steps and the weights at the end (cmp: the losses alone would hide a last-bit
# difference in the gradients, which the update shrinks below the loss's precision).
np 2 "${run[@]}" --steps 6 --save "$DIR/np2.st" > "$DIR/np2.jsonl" 2>"$DIR/err" || bad "2 ranks: $(cat "$DIR/err")"
[ "$(grep -c '"step"' "$DIR/np2.jsonl")" = 6 ] && ok "2 ranks: rank 0 alone prints, one line a step" ||
  bad "2 ranks printed: $(cat "$DIR/np2.jsonl")"
"$BIN" "${run[@]}" --steps 6 --save "$DIR/np1.st" > "$DIR/np1.jsonl" 2>"$DIR/err" || bad "1 process: $(cat "$DIR/err")"
np 4 "${run[@]}" --steps 6 --save "$DIR/np4.st" > "$DIR/np4.jsonl" 2>"$DIR/err" || bad "4 ranks: $(cat "$DIR/err")"
l2=$(losses "$DIR/np2.jsonl"); l1=$(losses "$DIR/np1.jsonl"); l4=$(losses "$DIR/np4.jsonl")
[ -n "$l2" ] && [ "$l1" = "$l2" ] && cmp -s "$DIR/np1.st" "$DIR/np2.st" &&
  ok "1 process x 4 micro-steps = 2 ranks x 2 micro-steps: losses and weights bit for bit" ||
  bad "1 process [$l1] vs 2 ranks [$l2]; weights: $(cmp "$DIR/np1.st" "$DIR/np2.st" 2>&1)"
[ -n "$l2" ] && [ "$l4" = "$l2" ] && cmp -s "$DIR/np4.st" "$DIR/np2.st" &&
  ok "4 ranks x 1 micro-step = 2 ranks x 2 micro-steps: losses and weights bit for bit" ||
  bad "4 ranks [$l4] vs 2 ranks [$l2]; weights: $(cmp "$DIR/np4.st" "$DIR/np2.st" 2>&1)"

# A Llama-family model (issue 28): the same rule, its folder's bytes included.
llama=(--model llama --layers 2 --d 32 --heads 4 --kv-heads 2 --seq 16 --threads 1 --checkpoint block --json
       --batch 2 --global-batch 8)
np 2 "${llama[@]}" --steps 4 --save "$DIR/l2" > "$DIR/l2.jsonl" 2>"$DIR/err" || bad "llama, 2 ranks: $(cat "$DIR/err")"
"$BIN" "${llama[@]}" --steps 4 --save "$DIR/l1" > "$DIR/l1.jsonl" 2>"$DIR/err" || bad "llama, 1 process: $(cat "$DIR/err")"
[ -n "$(losses "$DIR/l2.jsonl")" ] && [ "$(losses "$DIR/l1.jsonl")" = "$(losses "$DIR/l2.jsonl")" ] &&
  cmp -s "$DIR/l1/model.safetensors" "$DIR/l2/model.safetensors" &&
  ok "llama: 1 process x 4 micro-steps = 2 ranks x 2 micro-steps: losses and weights bit for bit" ||
  bad "llama: 1 process [$(losses "$DIR/l1.jsonl")] vs 2 ranks [$(losses "$DIR/l2.jsonl")]"

# ZeRO-1 (--zero): the same training, bit for bit, with each rank's AdamW moments halved.
np 2 "${run[@]}" --steps 6 --zero --save "$DIR/z2.st" > "$DIR/z2.jsonl" 2>"$DIR/err" || bad "2 ranks --zero: $(cat "$DIR/err")"
state() { grep -o '"optimizer_state_bytes":[0-9]*' "$1" | tail -n 1 | sed 's/.*://'; }
s2=$(state "$DIR/np2.jsonl"); z2=$(state "$DIR/z2.jsonl")
[ -n "$l2" ] && [ "$(losses "$DIR/z2.jsonl")" = "$l2" ] && cmp -s "$DIR/z2.st" "$DIR/np2.st" &&
  ok "--zero on 2 ranks: losses and weights bit for bit those without it" ||
  bad "--zero [$(losses "$DIR/z2.jsonl")] vs [$l2]; weights: $(cmp "$DIR/z2.st" "$DIR/np2.st" 2>&1)"
[ -n "$s2" ] && [ -n "$z2" ] && [ "$z2" -gt 0 ] && [ $((z2 * 10)) -le $((s2 * 6)) ] &&
  ok "--zero on 2 ranks: optimizer state $z2 bytes per rank, unsharded $s2" ||
  bad "--zero optimizer state: $z2 vs unsharded $s2"
np 2 "${run[@]}" --steps 3 --zero --snapshot-every 3 --snapshot-path "$DIR/zsnap" > /dev/null 2>"$DIR/err" ||
  bad "2 ranks --zero, first half: $(cat "$DIR/err")"
"$BIN" "${run[@]}" --steps 6 --resume "$DIR/zsnap" --save "$DIR/zr1.st" > "$DIR/zr1.jsonl" 2>"$DIR/err" ||
  bad "resume a --zero snapshot on 1: $(cat "$DIR/err")"
np 4 "${run[@]}" --steps 6 --zero --resume "$DIR/zsnap" --save "$DIR/zr4.st" > "$DIR/zr4.jsonl" 2>"$DIR/err" ||
  bad "resume a --zero snapshot on 4 --zero: $(cat "$DIR/err")"
tail3=$(grep -o '"loss":[^,]*' "$DIR/np2.jsonl" | tail -n 3 | tr '\n' ' ')
[ -n "$tail3" ] && [ "$(losses "$DIR/zr1.jsonl")" = "$tail3" ] && cmp -s "$DIR/zr1.st" "$DIR/np2.st" &&
  [ "$(losses "$DIR/zr4.jsonl")" = "$tail3" ] && cmp -s "$DIR/zr4.st" "$DIR/np2.st" &&
  ok "a --zero snapshot (gathered) resumes unsharded on 1 process and sharded on 4 ranks, bitwise" ||
  bad "--zero resume: 1 [$(losses "$DIR/zr1.jsonl")] 4 [$(losses "$DIR/zr4.jsonl")] vs [$tail3]"

# A snapshot of 2 ranks after 3 steps resumes on 1 process and on 4 ranks: steps 4-6 as before.
np 2 "${run[@]}" --steps 3 --snapshot-every 3 --snapshot-path "$DIR/snap" > /dev/null 2>"$DIR/err" ||
  bad "2 ranks, first half: $(cat "$DIR/err")"
"$BIN" "${run[@]}" --steps 6 --resume "$DIR/snap" --save "$DIR/r1.st" > "$DIR/r1.jsonl" 2>"$DIR/err" || bad "resume on 1: $(cat "$DIR/err")"
np 4 "${run[@]}" --steps 6 --resume "$DIR/snap" --save "$DIR/r4.st" > "$DIR/r4.jsonl" 2>"$DIR/err" || bad "resume on 4: $(cat "$DIR/err")"
tail3=$(grep -o '"loss":[^,]*' "$DIR/np2.jsonl" | tail -n 3 | tr '\n' ' ')
[ -n "$tail3" ] && [ "$(losses "$DIR/r1.jsonl")" = "$tail3" ] && cmp -s "$DIR/r1.st" "$DIR/np2.st" &&
  ok "a 2-rank snapshot resumes on 1 process (4 micro-steps): same losses, same weights" ||
  bad "resume on 1: [$(losses "$DIR/r1.jsonl")] vs [$tail3]"
[ -n "$tail3" ] && [ "$(losses "$DIR/r4.jsonl")" = "$tail3" ] && cmp -s "$DIR/r4.st" "$DIR/np2.st" &&
  ok "a 2-rank snapshot resumes on 4 ranks: same losses, same weights" ||
  bad "resume on 4: [$(losses "$DIR/r4.jsonl")] vs [$tail3]"

# The same at one micro-step per rank: 2 ranks x 4 sequences, resumed by 1 process with 2
# micro-steps of 4 (a 4-rank resume would need micro-batches of 2: other sums inside the matrix
# products, close but not bitwise, unless --batch-invariant, below; NOTE [data parallel] 6).
run4=("${model[@]}" --batch 4 --global-batch 8)
np 2 "${run4[@]}" --steps 4 --save "$DIR/b4.st" > "$DIR/b4.jsonl" 2>"$DIR/err" || bad "2 ranks x 4: $(cat "$DIR/err")"
np 2 "${run4[@]}" --steps 2 --snapshot-every 2 --snapshot-path "$DIR/snap4" > /dev/null 2>"$DIR/err" ||
  bad "2 ranks x 4, first half: $(cat "$DIR/err")"
"$BIN" "${run4[@]}" --steps 4 --resume "$DIR/snap4" --save "$DIR/b4r.st" > "$DIR/b4r.jsonl" 2>"$DIR/err" ||
  bad "resume on 1 x 2: $(cat "$DIR/err")"
t4=$(grep -o '"loss":[^,]*' "$DIR/b4.jsonl" | tail -n 2 | tr '\n' ' ')
[ -n "$t4" ] && [ "$(losses "$DIR/b4r.jsonl")" = "$t4" ] && cmp -s "$DIR/b4r.st" "$DIR/b4.st" &&
  ok "a snapshot of 2 ranks x 4 sequences resumes on 1 process with 2 micro-steps: same losses, same weights" ||
  bad "resume 2x4 -> 1x2x4: [$(losses "$DIR/b4r.jsonl")] vs [$t4]"

# --batch-invariant (NOTE [batch-invariant]): a snapshot of 2 ranks x --batch 4 resumes on 4 ranks
# x --batch 2 and on 1 process x 2 micro-steps of --batch 4, bit for bit; all equal --batch 1 x 8
# micro-steps.
inv=("${model[@]}" --batch-invariant --global-batch 8)
np 2 "${inv[@]}" --batch 4 --steps 4 --save "$DIR/i2.st" > "$DIR/i2.jsonl" 2>"$DIR/err" || bad "2 ranks x 4 invariant: $(cat "$DIR/err")"
"$BIN" "${model[@]}" --batch 1 --global-batch 8 --steps 4 --save "$DIR/i1.st" > "$DIR/i1.jsonl" 2>"$DIR/err" ||
  bad "1 process x 8 micro-steps of 1: $(cat "$DIR/err")"
li=$(losses "$DIR/i2.jsonl")
[ -n "$li" ] && [ "$(losses "$DIR/i1.jsonl")" = "$li" ] && cmp -s "$DIR/i1.st" "$DIR/i2.st" &&
  ok "--batch-invariant: 2 ranks x --batch 4 = 1 process x 8 micro-steps of 1, bit for bit" ||
  bad "--batch-invariant 2x4 [$li] vs 1x8x1 [$(losses "$DIR/i1.jsonl")]; weights: $(cmp "$DIR/i1.st" "$DIR/i2.st" 2>&1)"
np 2 "${inv[@]}" --batch 4 --steps 2 --snapshot-every 2 --snapshot-path "$DIR/isnap" > /dev/null 2>"$DIR/err" ||
  bad "2 ranks x 4 invariant, first half: $(cat "$DIR/err")"
np 4 "${inv[@]}" --batch 2 --steps 4 --resume "$DIR/isnap" --save "$DIR/ir4.st" > "$DIR/ir4.jsonl" 2>"$DIR/err" ||
  bad "resume on 4 x 2: $(cat "$DIR/err")"
"$BIN" "${inv[@]}" --batch 4 --steps 4 --resume "$DIR/isnap" --save "$DIR/ir1.st" > "$DIR/ir1.jsonl" 2>"$DIR/err" ||
  bad "resume on 1 x 2 x 4: $(cat "$DIR/err")"
ti=$(grep -o '"loss":[^,]*' "$DIR/i2.jsonl" | tail -n 2 | tr '\n' ' ')
[ -n "$ti" ] && [ "$(losses "$DIR/ir4.jsonl")" = "$ti" ] && cmp -s "$DIR/ir4.st" "$DIR/i2.st" &&
  ok "--batch-invariant: a snapshot of 2 ranks x --batch 4 resumes on 4 ranks x --batch 2: same losses, same weights" ||
  bad "resume 2x4 -> 4x2 invariant: [$(losses "$DIR/ir4.jsonl")] vs [$ti]; weights: $(cmp "$DIR/ir4.st" "$DIR/i2.st" 2>&1)"
[ -n "$ti" ] && [ "$(losses "$DIR/ir1.jsonl")" = "$ti" ] && cmp -s "$DIR/ir1.st" "$DIR/i2.st" &&
  ok "--batch-invariant: the same snapshot resumes on 1 process x 2 micro-steps of --batch 4: same losses, same weights" ||
  bad "resume 2x4 -> 1x2x4 invariant: [$(losses "$DIR/ir1.jsonl")] vs [$ti]"

# The validation loss (NOTE [validation loss]): each rank evaluates a contiguous share of the
# batches and the ranks sum them in batch order, so 5 batches on 1, 2 and 3 ranks (shares 5;
# 3+2; 2+2+1) give the same value: with --lr 0 the weights are the same whatever the split.
for i in $(seq 1 30); do echo "held-out text for the validation loss, line $i"; done > "$DIR/val.txt"
vflags=(--val-data "$DIR/val.txt" --val-every 1 --val-batches 5)
for n in 1 2 3; do
  np $n "${model[@]}" --batch 2 --steps 2 --lr 0 "${vflags[@]}" > "$DIR/v$n.jsonl" 2>"$DIR/err" || bad "validation on $n rank(s): $(cat "$DIR/err")"
done
v1=$(grep -o '"val_loss":[^,]*' "$DIR/v1.jsonl" | tr '\n' ' ')
[ "$(echo "$v1" | wc -w)" = 2 ] && [ "$(grep -o '"val_loss":[^,]*' "$DIR/v2.jsonl" | tr '\n' ' ')" = "$v1" ] &&
  [ "$(grep -o '"val_loss":[^,]*' "$DIR/v3.jsonl" | tr '\n' ' ')" = "$v1" ] &&
  ok "validation loss of 5 batches: the same on 1, 2 and 3 ranks ($v1)" ||
  bad "validation loss by ranks: 1 [$v1] 2 [$(grep -o '"val_loss":[^,]*' "$DIR/v2.jsonl" | tr '\n' ' ')] 3 [$(grep -o '"val_loss":[^,]*' "$DIR/v3.jsonl" | tr '\n' ' ')]"
# ... and along a training run that is bitwise the same on 2 ranks and in 1 process.
np 2 "${run[@]}" --steps 3 "${vflags[@]}" > "$DIR/vt2.jsonl" 2>"$DIR/err" || bad "validation, 2 ranks training: $(cat "$DIR/err")"
"$BIN" "${run[@]}" --steps 3 "${vflags[@]}" > "$DIR/vt1.jsonl" 2>"$DIR/err" || bad "validation, 1 process training: $(cat "$DIR/err")"
vt=$(grep -o '"val_loss":[^,]*' "$DIR/vt1.jsonl" | tr '\n' ' ')
[ "$(echo "$vt" | wc -w)" = 3 ] && [ "$(grep -o '"val_loss":[^,]*' "$DIR/vt2.jsonl" | tr '\n' ' ')" = "$vt" ] &&
  [ "$(losses "$DIR/vt2.jsonl")" = "$(losses "$DIR/np2.jsonl" | cut -d' ' -f1-3) " ] &&
  ok "validation along training: 2 ranks = 1 process, and the training is the one without it" ||
  bad "validation along training: 1 [$vt] 2 [$(grep -o '"val_loss":[^,]*' "$DIR/vt2.jsonl" | tr '\n' ' ')] losses [$(losses "$DIR/vt2.jsonl")]"

# A SIGTERM to one rank (as a scheduler sends) stops every rank after the same step: rank 0
# writes the snapshot of that step and says so once, every rank exits 143 within seconds, and
# the snapshot resumes at the next step. The ranks are found as mpirun's children (Open MPI).
timeout -k 5 120 "$MPIEXEC" -n 2 "${FLAGS[@]}" "$BIN" "${run[@]}" --steps 100000 --snapshot-path "$DIR/sig.state" \
  > "$DIR/sig.jsonl" 2>"$DIR/sig.err" &
tpid=$!
for _ in $(seq 600); do grep -q '"step"' "$DIR/sig.jsonl" 2>/dev/null && break; sleep 0.05; done
grep -q '"step"' "$DIR/sig.jsonl" || bad "no step within 30 s of starting 2 ranks: $(cat "$DIR/sig.err")"
# children PID: "pid name" of each child process, from /proc (no procps on a minimal machine)
children() {
  local f pid name state ppid rest
  for f in /proc/[0-9]*/stat; do
    { read -r pid name state ppid rest < "$f"; } 2>/dev/null || continue
    [ "$ppid" = "$1" ] && echo "$pid ${name//[()]/}"
  done
}
mpid=$(children "$tpid" | awk 'NR == 1 {print $1}')
victim=$(children "${mpid:-0}" | awk -v n="$(basename "$BIN")" '$2 == n {print $1}' | sort -n | tail -n 1)
t0=$SECONDS
[ -n "$victim" ] && kill -TERM "$victim"
wait "$tpid"
rc=$?
steps=$(grep -c '"step"' "$DIR/sig.jsonl")
said=$(grep -c "interrupted by SIGTERM after step $steps of" "$DIR/sig.err")
"$BIN" "${run[@]}" --steps $((steps + 1)) --resume "$DIR/sig.state" > "$DIR/sig2.jsonl" 2>"$DIR/err"
[ -n "$victim" ] && [ "$rc" -eq 143 ] && [ "$said" = 1 ] && [ $((SECONDS - t0)) -le 20 ] &&
  [ "$(grep -o '"step":[0-9]*' "$DIR/sig2.jsonl")" = "\"step\":$((steps + 1))" ] &&
  ok "SIGTERM to one of 2 ranks: both stop after step $steps, one message, exit $rc, the snapshot resumes at step $((steps + 1))" ||
  bad "SIGTERM to rank pid '$victim': exit $rc after $((SECONDS - t0)) s, $steps steps, $said messages: $(cat "$DIR/sig.err"); resumed: $(cat "$DIR/sig2.jsonl" "$DIR/err")"

# Bad set-ups: one message (from rank 0), every rank gone in seconds.
t0=$SECONDS
np 2 "${model[@]}" --global-batch 6 --batch 4 --steps 2 > "$DIR/out" 2>"$DIR/err"
rc=$?
n=$(grep -c "is not a multiple of 2 rank" "$DIR/err")
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$n" = 1 ] && [ $((SECONDS - t0)) -le 20 ] &&
  ok "a global batch that does not divide: one message, exit $rc in $((SECONDS - t0)) s" ||
  bad "global batch 6 on 2 x 4: exit $rc, $n messages: $(cat "$DIR/err")"
t0=$SECONDS
np 2 "${run[@]}" --data - --steps 2 < /dev/null > "$DIR/out" 2>"$DIR/err"
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "reaches rank 0 only" "$DIR/err" && [ $((SECONDS - t0)) -le 20 ] &&
  ok "--data - under mpirun is refused" || bad "--data - on 2 ranks: exit $rc: $(cat "$DIR/err")"
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
