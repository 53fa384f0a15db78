#!/usr/bin/env bash
# Runs a command that must fail, within SECONDS, printing TEXT (an error that one rank raised).
# Usage: expect_abort.sh SECONDS TEXT COMMAND...
set -u
limit=$1 text=$2
shift 2
t0=$SECONDS
out=$(timeout -k 5 "$((limit * 2))" "$@" 2>&1)
rc=$?
took=$((SECONDS - t0))
printf '%s\n' "$out" | tail -20
echo "exit $rc after ${took} s"
[ "$rc" -ne 0 ] || { echo "FAILED: the job exited 0; expected an error"; exit 1; }
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || { echo "FAILED: the job hung (killed by timeout)"; exit 1; }
[ "$took" -le "$limit" ] || { echo "FAILED: the job took ${took} s to end (limit ${limit} s)"; exit 1; }
printf '%s\n' "$out" | grep -qF -- "$text" || { echo "FAILED: the output lacks '$text'"; exit 1; }
echo "ok: every rank ended in ${took} s with the error shown"
