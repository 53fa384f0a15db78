# Shared by the command-line tests (sourced): pass/fail counting and the early-error check.
# The sourcing script sets BIN (the program under test) and DIR (a scratch folder).
fails=0 passes=0
ok() { echo "ok: $1"; passes=$((passes + 1)); }
bad() { echo "FAILED: $1"; fails=$((fails + 1)); }
# losses FILE: the "loss" fields of a --json run's lines, on one line
losses() { grep -o '"loss":[^,]*' "$1" | tr '\n' ' '; }

# expect_early_error NAME REGEX ARGS...: exit 1, REGEX on stderr, and no step trained (stdout has
# no step: the arguments pass --json where it matters, and a failed check comes before step 1)
expect_early_error() {
  local name=$1 re=$2; shift 2
  "$BIN" "$@" >"$DIR/out" 2>"$DIR/err" </dev/null
  local rc=$?
  if [ "$rc" -eq 1 ] && grep -Eq -- "$re" "$DIR/err" && ! grep -q '"step"' "$DIR/out"; then ok "$name"; else
    bad "$name: exit $rc, stdout: $(head -c 300 "$DIR/out"), stderr: $(cat "$DIR/err")"; fi
}
