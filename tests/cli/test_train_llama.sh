#!/usr/bin/env bash
# train_gpt with a Llama-family model (issue 28, point 5): built from flags (--model llama) or
# from a Hugging Face folder (--init-from DIR, the family read from its config.json); every
# checkpoint strategy, a planned budget among them, trains the plain run's losses bit for bit;
# --estimate; snapshots resume bit for bit; --save writes a folder that --init-from reads back
# to the same bytes; a tokenizer.json tokenizes the data and the prompt; the family's flags are
# checked. A small tokenizer is learned here (make_tiny_tokenizer), so nothing is downloaded.
# Usage: test_train_llama.sh path/to/train_gpt path/to/make_tiny_tokenizer
set -u
BIN=$1 MAKE_TOK=$2
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # ok, bad, losses, expect_early_error
# run NAME OUT ARGS...: exit 0, stdout in OUT, stderr in OUT.err
run() {
  local name=$1 out=$2; shift 2
  "$BIN" "$@" >"$out" 2>"$out.err" </dev/null
  local rc=$?
  if [ "$rc" -eq 0 ]; then ok "$name runs"; else bad "$name: exit $rc: $(tail -c 600 "$out.err")"; fi
}
same_losses() {  # NAME A B: the loss fields of two --json runs, equal as printed
  if [ -n "$(losses "$2")" ] && [ "$(losses "$2")" = "$(losses "$3")" ]; then ok "$1"; else
    bad "$1: $(losses "$2") vs $(losses "$3")"; fi
}

for i in $(seq 0 299); do
  case $((i % 3)) in
    0) printf 'the cat sat on the mat %d. ' $((i % 10)) ;;
    1) printf 'a bird in the hand is worth two in the bush. ' ;;
    2) printf "it's the fox's den; they're there.\n" ;;
  esac
done >"$DIR/my.txt"
mkdir "$DIR/tok"
"$MAKE_TOK" "$DIR/my.txt" 100 "$DIR/tok" >/dev/null || { echo "FAILED: make_tiny_tokenizer"; exit 1; }
python3 "$(dirname "${BASH_SOURCE[0]}")/tokenizer_json.py" "$DIR/tok" "$DIR/tok/tokenizer.json" ||
  { echo "FAILED: tokenizer.json"; exit 1; }
rm "$DIR/tok/encoder.json" "$DIR/tok/vocab.bpe"  # a Llama-family folder has tokenizer.json only

P=(--model llama --layers 4 --d 64 --heads 4 --kv-heads 2 --seq 128 --batch 8 --threads 1 --lr 3e-3
   --tokenizer "$DIR/tok" --data "$DIR/my.txt")
L=("${P[@]}" --json)

# From flags: every strategy trains the plain run's losses, bit for bit
run "--model llama" "$DIR/none" "${L[@]}" --steps 6
first=$(losses "$DIR/none" | awk '{print $1}') last=$(losses "$DIR/none" | awk '{print $NF}')
awk -v a="${first#*:}" -v b="${last#*:}" 'BEGIN { exit !(b < a) }' && ok "the loss falls ($first -> $last)" ||
  bad "the loss does not fall: $(losses "$DIR/none")"
grep -q 'with <|endoftext|> first' "$DIR/none.err" && ok "tokenizer.json tokenizes the data" ||
  bad "tokenizer: $(cat "$DIR/none.err")"
for s in block every:2 sqrt save_linear; do
  run "--checkpoint $s" "$DIR/$s" "${L[@]}" --steps 6 --checkpoint "$s"
  same_losses "--checkpoint $s = none" "$DIR/none" "$DIR/$s"
done

# --estimate: a row per fixed strategy; a budget between block's and none's peaks is planned
run "--estimate" "$DIR/est" "${P[@]}" --estimate
mib() { awk -v s="$1" '$1 == s { print $2 }' "$DIR/est"; }
none_mib=$(mib none) block_mib=$(mib block)
[ -n "$none_mib" ] && [ -n "$block_mib" ] && awk -v a="$block_mib" -v b="$none_mib" 'BEGIN { exit !(a < b) }' &&
  ok "--estimate: none $none_mib MiB, block $block_mib MiB" || bad "--estimate: $(cat "$DIR/est")"
# the budget bounds the process: the ledger's peak plus a few MiB of headroom (plan::process_headroom)
budget=$(awk -v a="$block_mib" -v b="$none_mib" 'BEGIN { printf "%.1fMiB", (a + b) / 2 + 5.5 }')
run "--checkpoint budget:$budget" "$DIR/budget" "${P[@]}" --steps 6 --checkpoint "budget:$budget"
grep -Eq "^checkpoint budget:.*segments" "$DIR/budget" && ok "the budget is planned" ||
  bad "no plan: $(head -c 600 "$DIR/budget")"
grep -Eq "^checkpoint budget:.*: 0 segments; blocks outside segments: 4 keep_all" "$DIR/budget" &&
  bad "the budget keeps everything: $(grep '^checkpoint' "$DIR/budget")" || ok "the budget checkpoints"
run "--checkpoint budget (json)" "$DIR/budget.json" "${L[@]}" --steps 6 --checkpoint "budget:$budget"
same_losses "budget:$budget = none" "$DIR/none" "$DIR/budget.json"

# bf16: checkpointed = plain, bit for bit
run "--precision bf16" "$DIR/bf" "${L[@]}" --steps 3 --precision bf16
run "--precision bf16 --checkpoint block" "$DIR/bfb" "${L[@]}" --steps 3 --precision bf16 --checkpoint block
same_losses "bf16: block = none" "$DIR/bf" "$DIR/bfb"

# Snapshots resume bit for bit; --grad-accum runs the summed step
run "snapshot" "$DIR/a" "${L[@]}" --steps 3 --snapshot-path "$DIR/s.state"
run "resume" "$DIR/b" "${L[@]}" --steps 6 --resume "$DIR/s.state"
[ "$(losses "$DIR/a")$(losses "$DIR/b")" = "$(losses "$DIR/none")" ] && ok "resume = the uninterrupted run" ||
  bad "resume: $(losses "$DIR/a") + $(losses "$DIR/b") vs $(losses "$DIR/none")"
run "--grad-accum 2" "$DIR/acc" "${L[@]}" --steps 2 --grad-accum 2

# --save writes a Hugging Face folder; --init-from reads it (the family from its config.json)
run "--save DIR" "$DIR/save" "${L[@]}" --steps 2 --save "$DIR/saved"
[ -f "$DIR/saved/config.json" ] && [ -f "$DIR/saved/model.safetensors" ] && grep -q '"model_type": "llama"' "$DIR/saved/config.json" &&
  ok "--save wrote config.json and model.safetensors" || bad "--save: $(ls "$DIR/saved" 2>&1)"
run "--init-from DIR" "$DIR/again" --init-from "$DIR/saved" --tokenizer "$DIR/tok" --data "$DIR/my.txt" --seq 128 \
  --threads 1 --steps 0 --save "$DIR/saved2" --json
cmp -s "$DIR/saved/model.safetensors" "$DIR/saved2/model.safetensors" && ok "--init-from DIR --save DIR2: the same bytes" ||
  bad "the weights changed on the way through"
run "--init-from DIR --sample" "$DIR/sample" --init-from "$DIR/saved/" --tokenizer "$DIR/tok/tokenizer.json" \
  --data "$DIR/my.txt" --seq 64 --batch 2 --threads 1 --steps 1 --sample 12 --prompt "the cat"
grep -q '^sample: the cat' "$DIR/sample" && grep -q '^llama 4 layers, d 64, 4 heads / 2 key/value heads' "$DIR/sample" &&
  ok "a folder's model trains and samples from a text prompt" || bad "sample: $(cat "$DIR/sample")"

# The family's flags, checked before anything trains
expect_early_error "--dropout with llama" "--dropout .* applies to GPT-2" "${L[@]}" --dropout 0.1
expect_early_error "--kv-heads with gpt" "--kv-heads and --ffn shape a Llama" --layers 2 --d 64 --kv-heads 2 --json
expect_early_error "kv heads that do not divide" "4 attention heads and 3 key/value heads" --model llama --layers 2 \
  --d 64 --heads 4 --kv-heads 3 --json
expect_early_error "--layers against the folder" "--layers 5 does not fit .*config.json says 4" \
  --init-from "$DIR/saved" --layers 5 --json
touch "$DIR/afile"
expect_early_error "--save onto a file" "is a file \(expected a folder" "${L[@]}" --save "$DIR/afile"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
