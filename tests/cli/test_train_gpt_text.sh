#!/usr/bin/env bash
# train_gpt on text with GPT-2's tokenizer (issue 13, point 3): `--tokenizer DIR` turns text
# data, --prompt and the --sample output into GPT-2 tokens. A small tokenizer of GPT-2's format
# is learned here (make_tiny_tokenizer), so the test needs no download; the ids must be the ones
# examples/tokenize writes, and the text must be what `tokenize --decode` makes of the ids.
# Usage: test_train_gpt_text.sh path/to/train_gpt path/to/tokenize path/to/make_tiny_tokenizer
set -u
BIN=$1 TOKENIZE=$2 MAKE_TOK=$3
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # ok, bad, expect_early_error
# run NAME OUT ARGS...: exit 0, stdout in OUT, stderr in OUT.err
run() {
  local name=$1 out=$2; shift 2
  "$BIN" "$@" >"$out" 2>"$out.err" </dev/null
  local rc=$?
  if [ "$rc" -eq 0 ]; then ok "$name runs"; else bad "$name: exit $rc: $(tail -c 600 "$out.err")"; fi
}
losses() { grep -o '"loss":[^,]*' "$1"; }
sample_of() { sed -n '/^sample: /,$p' "$1" | sed '1s/^sample: //'; }  # it may span lines
# ids_to_bin OUT IDS...: an llm.c token file (256 int32 header: magic, version, count; uint16)
ids_to_bin() { local out=$1; shift; perl -e 'print pack("l<256", 20240520, 1, scalar(@ARGV)), pack("S<*", @ARGV)' -- "$@" >"$out"; }

# English-like text with some structure to learn, and a tokenizer of GPT-2's format learned on it
for i in $(seq 0 299); do
  case $((i % 4)) in
    0) printf 'the cat sat on the mat %d. ' $((i % 10)) ;;
    1) printf 'a bird in the hand is worth two in the bush. ' ;;
    2) printf "it's the fox's den; they're there.\n" ;;
    3) printf 'The end of line %d.\n' "$i" ;;
  esac
done >"$DIR/my.txt"
mkdir "$DIR/tok"
V=$("$MAKE_TOK" "$DIR/my.txt" 120 "$DIR/tok") || { echo "FAILED: make_tiny_tokenizer"; exit 1; }
small=(--layers 2 --d 32 --heads 2 --seq 32 --batch 4 --threads 1 --lr 1e-2)

# The ids: what examples/tokenize writes (one document, <|endoftext|> first)
"$TOKENIZE" --tokenizer "$DIR/tok" -o "$DIR/my.bin" "$DIR/my.txt" >"$DIR/tokenize.out" || bad "tokenize"
n_ids=$(sed -n 's/.* -> \([0-9]*\) tokens.*/\1/p' "$DIR/tokenize.out")

# A GPT-2-layout model whose vocabulary is the tokenizer's (taken from it: no --vocab)
run "a new model takes the tokenizer's vocabulary" "$DIR/new" "${small[@]}" --tokenizer "$DIR/tok" \
  --data "$DIR/my.txt" --steps 1 --save "$DIR/model.safetensors"
grep -q "vocab $V," "$DIR/new" && ok "vocab $V from the tokenizer" || bad "vocab: $(head -n 2 "$DIR/new")"

# The acceptance command: init from weights, train on text with the tokenizer, sample text
run "--init-from --tokenizer --data my.txt --checkpoint block --sample 50" "$DIR/text" "${small[@]}" \
  --init-from "$DIR/model.safetensors" --tokenizer "$DIR/tok" --data "$DIR/my.txt" \
  --checkpoint block --steps 30 --sample 50 --json
grep -q "bytes -> $n_ids tokens" "$DIR/text.err" && ok "the text is $n_ids tokens, as tokenize writes it" ||
  bad "token count: tokenize says $n_ids, train_gpt: $(grep ' tokens' "$DIR/text.err")"
first=$(losses "$DIR/text" | head -n 1 | cut -d: -f2) last=$(losses "$DIR/text" | tail -n 1 | cut -d: -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' && ok "the loss falls ($first -> $last)" ||
  bad "the loss did not fall by 1: $first -> $last"
sample_of "$DIR/text" | grep -q '^The ' && ok "the sample is text after the prompt 'The '" ||
  bad "sample: $(grep sample "$DIR/text")"
words=$(sample_of "$DIR/text" | grep -oE '\b(the|cat|sat|on|mat|bird|in|hand|is|worth|two|bush|end|of|line)\b' | wc -l)
[ "$words" -ge 3 ] && ok "the sample has words of the text ($words)" || bad "sample has $words known words: $(sample_of "$DIR/text")"

# The same ids from the .bin: the same training, step for step, and the same sample text
run "--data my.bin --tokenizer" "$DIR/bin" "${small[@]}" --init-from "$DIR/model.safetensors" \
  --tokenizer "$DIR/tok" --data "$DIR/my.bin" --checkpoint block --steps 30 --sample 50 --json
[ "$(losses "$DIR/text")" = "$(losses "$DIR/bin")" ] && ok "text and .bin give the same losses" ||
  bad "losses differ between the text and the .bin"
[ "$(sample_of "$DIR/text")" = "$(sample_of "$DIR/bin")" ] && ok "text and .bin give the same sample" ||
  bad "samples differ: '$(sample_of "$DIR/text")' vs '$(sample_of "$DIR/bin")'"

# Without the tokenizer the prompt and the sample are ids: the tokenizer's text is their decoding
printf 'The ' >"$DIR/prompt.txt"
"$TOKENIZE" --tokenizer "$DIR/tok" --no-eot -o "$DIR/prompt.bin" "$DIR/prompt.txt" >/dev/null
prompt_ids=$(od -An -tu2 -j1024 -v "$DIR/prompt.bin" | xargs)
run "ids: --prompt '$prompt_ids'" "$DIR/ids" "${small[@]}" --init-from "$DIR/model.safetensors" \
  --data "$DIR/my.bin" --checkpoint block --steps 30 --sample 50 --json --prompt "$prompt_ids"
read -r -a sampled <<<"$(sample_of "$DIR/ids")"
[ "${#sampled[@]}" -eq 50 ] && ok "50 ids sampled" || bad "sampled ${#sampled[@]} ids: $(sample_of "$DIR/ids")"
ids_to_bin "$DIR/sampled.bin" "${sampled[@]}"
decoded=$("$TOKENIZE" --tokenizer "$DIR/tok" --decode "$DIR/sampled.bin" |
  python3 -c 'import sys; sys.stdout.write("The " + sys.stdin.buffer.read().decode("utf-8", "replace"))')
[ "$decoded" = "$(sample_of "$DIR/text")" ] && ok "the sample text is tokenize --decode of the sampled ids" ||
  bad "decoded ids '$decoded' vs sample '$(sample_of "$DIR/text")'"

# Standard input, an empty prompt (a document's start), a tokenizer.json given as a file
"$BIN" "${small[@]}" --tokenizer "$DIR/tok" --data - --steps 1 --json <"$DIR/my.txt" >"$DIR/stdin" 2>"$DIR/stdin.err"
grep -q "standard input: .* -> $n_ids tokens" "$DIR/stdin.err" && ok "--data - is tokenized too" ||
  bad "--data -: $(cat "$DIR/stdin.err")"
run "--prompt ''" "$DIR/empty" "${small[@]}" --init-from "$DIR/model.safetensors" --tokenizer "$DIR/tok" \
  --data "$DIR/my.bin" --steps 2 --sample 20 --prompt ""
grep -q '^sample: ' "$DIR/empty" && ok "an empty prompt samples from <|endoftext|>" || bad "no sample: $(cat "$DIR/empty")"
python3 "$(dirname "${BASH_SOURCE[0]}")/tokenizer_json.py" "$DIR/tok" "$DIR/hf.json" || bad "tokenizer.json"
python3 -c 'import json, sys; v = json.load(open(sys.argv[1], encoding="utf-8")); v.pop("<|endoftext|>")
json.dump(v, open(sys.argv[2], "w", encoding="utf-8"))' "$DIR/tok/encoder.json" "$DIR/noeot.json"
run "--tokenizer FILE.json" "$DIR/hf" "${small[@]}" --init-from "$DIR/model.safetensors" \
  --tokenizer "$DIR/hf.json" --data "$DIR/my.txt" --checkpoint block --steps 30 --sample 50 --json
[ "$(sample_of "$DIR/hf")" = "$(sample_of "$DIR/text")" ] && ok "tokenizer.json gives the same run" ||
  bad "tokenizer.json sample '$(sample_of "$DIR/hf")'"

# llm.c pads GPT-2's vocabulary (50257 -> 50304): padded ids are never sampled (nor decoded).
# Near-uniform sampling over 200 tokens would draw one of the 7 padded ids with odds ~98%.
run "padded vocabulary" "$DIR/pad" "${small[@]}" --tokenizer "$DIR/tok" --vocab $((V + 7)) \
  --data "$DIR/my.bin" --steps 1 --sample 200 --temperature 1000
grep -q '^sample: The ' "$DIR/pad" && ok "padded ids are never drawn" || bad "pad: $(cat "$DIR/pad" "$DIR/pad.err")"

# Errors, before step 1
expect_early_error "no tokenizer there" "no tokenizer files in '$DIR/none'" "${small[@]}" --tokenizer "$DIR/none" --json
mkdir "$DIR/noeot" && cp "$DIR/tok/vocab.bpe" "$DIR/noeot/" && cp "$DIR/noeot.json" "$DIR/noeot/encoder.json"
expect_early_error "a tokenizer without <|endoftext|>" "has no <\|endoftext\|>" "${small[@]}" --tokenizer "$DIR/noeot" --json
expect_early_error "--vocab below the tokenizer's" "--vocab 300 is smaller than the $V tokens" "${small[@]}" \
  --tokenizer "$DIR/tok" --vocab 300 --json
"$BIN" "${small[@]}" --vocab 256 --steps 1 --save "$DIR/bytes.safetensors" >/dev/null 2>&1
expect_early_error "a model smaller than the tokenizer" "has 256 token embeddings but the tokenizer in .* has $V tokens" \
  --init-from "$DIR/bytes.safetensors" --tokenizer "$DIR/tok" --json --threads 1
expect_early_error "ids prompt: not a number" "--prompt '12 abc' is not token ids: at character 4, expected" "${small[@]}" \
  --vocab "$V" --data "$DIR/my.bin" --sample 5 --prompt "12 abc" --json
expect_early_error "ids prompt: out of the vocabulary" "expected an id 0..$((V - 1))" "${small[@]}" \
  --vocab "$V" --data "$DIR/my.bin" --sample 5 --prompt "5 99999999999999999999" --json
expect_early_error "text data beyond a byte model" "the data has token id .* but the vocabulary has 300" "${small[@]}" \
  --vocab 300 --data "$DIR/my.bin" --json

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
