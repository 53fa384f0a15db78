#!/usr/bin/env bash
# Runs a CLI test script (tests/cli/*.sh) against an ASan build (ctest does, in the sanitizer
# stage: tests/sanitize.sh). ASan reserves terabytes of shadow address space at start, so a
# binary cannot start under the `ulimit -v` some cases set; in the copy run here those
# `ulimit -v "$VLIMIT";` commands are no-ops, and ASan's own allocator cap stands in for them
# (max_allocation_size_mb=4096 with allocator_may_return_null=1, set by tests/sanitize.sh: a
# larger request fails as std::bad_alloc, as it would under the 4 GiB limit).
# Usage: asan_cli.sh SCRIPT ARGS...
set -euo pipefail
script=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
copy=$work/$(basename "$script")
cp "$(dirname "$script")/common.sh" "$work/"  # what the scripts source from beside them
sed 's/ulimit -v "\$VLIMIT";/:;/' "$script" > "$copy"
REMAT_CLI_ASAN=1 bash "$copy" "$@"  # the script skips the system-limit cases (ASan's shadow is not ours)
