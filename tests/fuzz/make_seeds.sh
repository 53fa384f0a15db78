#!/usr/bin/env bash
# Rewrites the committed seed corpora (tests/fuzz/seeds/<target>/) with make_seeds.cpp, which
# uses the library's own writers. Run after a file format changes (ctest's fuzz.seeds.current
# fails until then). Usage: bash tests/fuzz/make_seeds.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
cmake --build "$build" --target remat_fuzz_make_seeds > /dev/null
exe=$(find "$build" -name remat_fuzz_make_seeds -type f -perm -u+x | head -n1)
"$exe" tests/fuzz/seeds
find tests/fuzz/seeds -type f | sort | xargs ls -l | awk '{print $5, $9}'
