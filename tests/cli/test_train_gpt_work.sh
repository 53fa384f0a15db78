#!/usr/bin/env bash
# train_gpt never loses work (issue 14): every flag and output path is checked before the first
# step, Ctrl-C (SIGINT) and SIGTERM finish the step and write the snapshot and the weights, the
# head count travels with the weights, odd paths get a clear error (or work: pipes, --data -),
# and a Hugging Face file's BOOL mask buffers are skipped.
# Usage: test_train_gpt_work.sh path/to/train_gpt
set -u
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")  # absolute: one case runs in another folder
DIR=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; chmod -R u+w "$DIR"; rm -rf "$DIR"; }
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # ok, bad, expect_early_error

small=(--layers 1 --d 16 --heads 2 --seq 8 --batch 2 --threads 1 --vocab 256)

# expect_run NAME REGEX ARGS...: exit 0 and REGEX on stdout or stderr
expect_run() {
  local name=$1 re=$2; shift 2
  "$BIN" "$@" >"$DIR/out" 2>"$DIR/err" </dev/null
  local rc=$?
  if [ "$rc" -eq 0 ] && cat "$DIR/out" "$DIR/err" | grep -Eq -- "$re"; then ok "$name"; else
    bad "$name: exit $rc, stdout: $(head -c 300 "$DIR/out"), stderr: $(cat "$DIR/err")"; fi
}
# A background job of a non-interactive shell starts with SIGINT ignored (and train_gpt keeps
# an ignored SIGINT ignored, as shells expect): give it the default dispositions first.
# (exec: the job's pid is then the trainer's, not a subshell's)
signals_default() { exec perl -e '$SIG{INT} = $SIG{TERM} = "DEFAULT"; exec @ARGV or die "exec: $!"' -- "$@"; }
# wait_for FILE REGEX SECONDS: 0 once REGEX is in FILE, 1 after SECONDS
wait_for() {
  local i
  for ((i = 0; i < $3 * 20; ++i)); do grep -Eq -- "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  return 1
}
# finish PID SECONDS: its exit code, or 124 (and SIGKILL) when it runs longer
finish() {
  local i
  for ((i = 0; i < $2 * 20; ++i)); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$1" 2>/dev/null; then kill -9 "$1"; wait "$1" 2>/dev/null; return 124; fi
  wait "$1"
}
# no_temporaries NAME: no "*.tmp.<pid>" file anywhere under $DIR
no_temporaries() {
  local left
  left=$(find "$DIR" -name '*.tmp.*' | head -n 3)
  if [ -z "$left" ]; then ok "$1: no temporary file left"; else bad "$1: temporaries left: $left"; fi
}
# safetensors header edits (JSON::PP is in every perl): st_edit IN OUT PERL-CODE, where the
# code changes $h (the header as a hash) and may append bytes to $d (the data)
st_edit() {
  perl -MJSON::PP -e 'my ($in, $out, $code) = @ARGV; open(my $f, "<:raw", $in) or die; local $/; my $b = <$f>;
    my $n = unpack("Q<", substr($b, 0, 8)); my $h = decode_json(substr($b, 8, $n)); my $d = substr($b, 8 + $n);
    eval $code; die $@ if $@; my $j = JSON::PP->new->canonical->encode($h);
    open(my $o, ">:raw", $out) or die; print $o pack("Q<", length $j), $j, $d' "$@"
}

# ---- 1. Output paths are checked before the first step
expect_early_error "--save into a missing folder" "--save '$DIR/missing/w\.safetensors': the folder '$DIR/missing' does not exist" \
  "${small[@]}" --steps 3 --json --save "$DIR/missing/w.safetensors"
mkdir "$DIR/folder"
expect_early_error "--save onto a directory" "--save '$DIR/folder' is a directory \(expected a file path" \
  "${small[@]}" --steps 3 --json --save "$DIR/folder"
expect_early_error "--snapshot-path into a missing folder" "--snapshot-path '$DIR/missing/s': the folder .* does not exist" \
  "${small[@]}" --steps 3 --json --snapshot-every 1 --snapshot-path "$DIR/missing/s"
expect_early_error "--snapshot-every without --snapshot-path" "--snapshot-every 2 needs --snapshot-path" \
  "${small[@]}" --steps 3 --json --snapshot-every 2
if [ "$(id -u)" -ne 0 ]; then
  mkdir "$DIR/readonly" && chmod 555 "$DIR/readonly"
  expect_early_error "--save into a read-only folder" "--save '$DIR/readonly/w\.safetensors': cannot create a file in the folder" \
    "${small[@]}" --steps 3 --json --save "$DIR/readonly/w.safetensors"
else
  echo "skip: --save into a read-only folder (root writes anywhere; the check creates a file for real)"
fi

# ---- 2. SIGINT / SIGTERM: finish the step, write the snapshot and the weights, exit 128 + signal
long=("${small[@]}" --steps 1000000 --json)
signals_default "$BIN" "${long[@]}" --snapshot-path "$DIR/int.state" --save "$DIR/int.safetensors" \
  >"$DIR/int.out" 2>"$DIR/int.err" & pid=$!; pids+=("$pid")
if wait_for "$DIR/int.out" '"step":3,' 30; then kill -INT "$pid"; fi
finish "$pid" 30; rc=$?
step=$(sed -n 's/.*interrupted by SIGINT after step \([0-9]*\) of 1000000: the snapshot is in .*/\1/p' "$DIR/int.err")
if [ "$rc" -eq 130 ] && [ -n "$step" ] && [ -s "$DIR/int.state" ] && [ -s "$DIR/int.safetensors" ] &&
   [ "$(grep -c '"step"' "$DIR/int.out")" -eq "$step" ]; then ok "SIGINT: exit 130 after step $step with the snapshot and the weights"; else
  bad "SIGINT: exit $rc, stderr: $(cat "$DIR/int.err")"; fi
no_temporaries "SIGINT"
# The snapshot resumes at the next step, and the weights load (the head count with them).
expect_run "SIGINT: the snapshot resumes" "\"step\":$((${step:-0} + 1))," \
  "${small[@]}" --json --steps $((${step:-0} + 1)) --resume "$DIR/int.state"
expect_run "SIGINT: the weights load" "GPT 1 layers, d 16, 2 heads" \
  --threads 1 --batch 2 --seq 8 --steps 1 --init-from "$DIR/int.safetensors"

# SIGTERM, no --snapshot-path: the snapshot goes to the working folder, exit 143.
mkdir "$DIR/term"
(cd "$DIR/term" && signals_default "$BIN" "${long[@]}") >"$DIR/term.out" 2>"$DIR/term.err" & pid=$!; pids+=("$pid")
if wait_for "$DIR/term.out" '"step":2,' 30; then kill -TERM "$pid"; fi
finish "$pid" 30; rc=$?
state=$(sed -n "s/.*interrupted by SIGTERM after step [0-9]* of 1000000: the snapshot is in '\([^']*\)'.*/\1/p" "$DIR/term.err")
if [ "$rc" -eq 143 ] && [ -n "$state" ] && [ -s "$DIR/term/$state" ]; then ok "SIGTERM: exit 143, snapshot in the working folder"; else
  bad "SIGTERM: exit $rc, stderr: $(cat "$DIR/term.err")"; fi
# (the signal may land after any number of steps on a busy machine: resume up to the next one)
tstep=$(sed -n 's/.*interrupted by SIGTERM after step \([0-9]*\) of 1000000.*/\1/p' "$DIR/term.err")
expect_run "SIGTERM: the snapshot resumes" "\"step\":$((${tstep:-0} + 1))," \
  "${small[@]}" --json --steps $((${tstep:-0} + 1)) --resume "$DIR/term/$state"

# A second SIGINT aborts at once (mid-step: a larger model, whose steps take a while) and
# leaves no temporary file. (A step of about a second, so that the second signal lands inside
# it on a loaded machine too.)
slow=(--layers 2 --d 256 --heads 4 --seq 512 --batch 8 --threads 1 --steps 1000000 --json)  # ~1 s steps
signals_default "$BIN" "${slow[@]}" --snapshot-path "$DIR/twice.state" --save "$DIR/twice.safetensors" \
  >"$DIR/twice.out" 2>"$DIR/twice.err" & pid=$!; pids+=("$pid")
if wait_for "$DIR/twice.out" '"step":1,' 60; then
  kill -INT "$pid"
  wait_for "$DIR/twice.err" "stopping after this step" 5
  kill -INT "$pid"
fi
finish "$pid" 5; rc=$?
if [ "$rc" -eq 130 ] && grep -q "stopping after this step" "$DIR/twice.err" &&
   ! grep -q "interrupted by SIGINT after step" "$DIR/twice.err" && [ ! -e "$DIR/twice.state" ]; then
  ok "a second SIGINT aborts at once"; else bad "second SIGINT: exit $rc, stderr: $(cat "$DIR/twice.err")"; fi
no_temporaries "second SIGINT"

# A save that fails at the end (the path became a directory during the run) writes the weights
# beside it and says where.
(cd "$DIR" && signals_default "$BIN" "${long[@]}" --save "$DIR/late.safetensors") >"$DIR/late.out" 2>"$DIR/late.err" & pid=$!; pids+=("$pid")
if wait_for "$DIR/late.out" '"step":2,' 30; then mkdir "$DIR/late.safetensors"; kill -INT "$pid"; fi
finish "$pid" 30; rc=$?
rescued=$(sed -n "s/.*saving the weights to '[^']*' failed .*; they are in '\([^']*\)' instead/\1/p" "$DIR/late.err")
if [ "$rc" -eq 130 ] && [ -n "$rescued" ] && [ -s "$rescued" ]; then ok "a failed save writes the weights elsewhere: $rescued"; else
  bad "failed save: exit $rc, stderr: $(cat "$DIR/late.err")"; fi
expect_run "the rescued weights load" "GPT 1 layers, d 16, 2 heads" --threads 1 --batch 2 --seq 8 --steps 1 --init-from "${rescued:-none}"
no_temporaries "failed save"

# ---- 3. The head count travels with the weights
"$BIN" --layers 1 --d 16 --heads 4 --seq 8 --batch 2 --threads 1 --steps 1 --save "$DIR/h4.safetensors" >/dev/null 2>"$DIR/err" ||
  bad "saving a 4-head model: $(cat "$DIR/err")"
expect_run "--init-from reads the head count from the metadata" "GPT 1 layers, d 16, 4 heads" \
  --threads 1 --batch 2 --seq 8 --steps 1 --init-from "$DIR/h4.safetensors"
expect_early_error "--heads that contradicts the file" "--heads 2 does not fit .* says 4 heads" \
  --threads 1 --batch 2 --seq 8 --steps 1 --json --heads 2 --init-from "$DIR/h4.safetensors"
mkdir "$DIR/hf"
st_edit "$DIR/h4.safetensors" "$DIR/hf/model.safetensors" 'delete $h->{__metadata__}{n_head};'
echo '{"model_type": "gpt2", "n_embd": 16, "n_head": 4, "n_layer": 1}' > "$DIR/hf/config.json"
expect_run "--init-from reads n_head from config.json beside the weights" "GPT 1 layers, d 16, 4 heads" \
  --threads 1 --batch 2 --seq 8 --steps 1 --init-from "$DIR/hf/model.safetensors"
cp "$DIR/hf/model.safetensors" "$DIR/bare.safetensors"
"$BIN" --threads 1 --batch 2 --seq 8 --steps 1 --init-from "$DIR/bare.safetensors" >"$DIR/out" 2>"$DIR/err"
if [ $? -eq 0 ] && head -n 1 "$DIR/err" | grep -Eq "assuming 1 attention heads \(d 16 / 64\): .* does not record its head count"; then
  ok "an assumed head count is said on the first line"; else bad "assumed heads: stderr: $(cat "$DIR/err")"; fi

# ---- 4. Every flag in its own words
expect_early_error "--lr inf" "--lr inf is out of range \(expected a finite learning rate" "${small[@]}" --steps 2 --json --lr inf
expect_early_error "--weight-decay nan" "--weight-decay nan is out of range" "${small[@]}" --steps 2 --json --weight-decay nan
expect_early_error "--grad-clip nan" "--grad-clip nan is out of range \(expected a finite gradient-norm limit > 0, or 0" "${small[@]}" --steps 2 --json --grad-clip nan
expect_early_error "--grad-clip -1" "--grad-clip -1 is out of range" "${small[@]}" --steps 2 --json --grad-clip -1
expect_early_error "--temperature nan" "--temperature nan is out of range" "${small[@]}" --steps 2 --json --sample 5 --temperature nan
expect_early_error "--snapshot-every -3" "--snapshot-every -3 is out of range" "${small[@]}" --steps 2 --json --snapshot-every -3 --snapshot-path "$DIR/neg"
expect_early_error "--sample -5" "--sample -5 is out of range" "${small[@]}" --steps 2 --json --sample -5
out=$("$BIN" "${small[@]}" --steps 2 --json --optimizer sgd --lr nan 2>&1)
if [ $? -eq 1 ] && echo "$out" | grep -q -- "--lr nan is out of range" && ! echo "$out" | grep -q AdamW; then
  ok "sgd with --lr nan blames --lr, not AdamW"; else bad "sgd --lr nan: $out"; fi
"$BIN" "${small[@]}" --steps 3 --snapshot-every 3 --snapshot-path "$DIR/s3" >/dev/null 2>"$DIR/err" || bad "snapshot at step 3: $(cat "$DIR/err")"
expect_early_error "--steps below the resumed snapshot's step" "--steps 2 is below step 3 of the snapshot" \
  "${small[@]}" --steps 2 --json --resume "$DIR/s3"
# A default is not reported as if typed: --seq 128 (the default) shortens to the file's 8
# positions, and data too short for a batch names the defaults as defaults.
expect_run "the default --seq fits the weights' positions" "seq 8, batch 2" --threads 1 --batch 2 --steps 1 --init-from "$DIR/h4.safetensors"
printf 'a short text' > "$DIR/short.txt"
expect_early_error "too little data names the defaults" "too few for one batch of --batch 8 \(the default\) x --seq 128 \(the default\)" \
  --threads 1 --layers 1 --d 16 --steps 1 --json --data "$DIR/short.txt"
# A run whose loss (or weights) become non-finite stops at that step, exit 1, and keeps the last
# snapshot, whole and loadable: 2 good steps, then a learning rate that overflows the weights.
"$BIN" "${small[@]}" --steps 2 --snapshot-every 2 --snapshot-path "$DIR/div.state" >/dev/null 2>"$DIR/err" || bad "2 good steps: $(cat "$DIR/err")"
"$BIN" "${small[@]}" --steps 50 --json --lr 1e38 --snapshot-every 1 --snapshot-path "$DIR/div.state" --resume "$DIR/div.state" \
  >"$DIR/out" 2>"$DIR/err"
rc=$?
good=$(sed -n "s/.*the last good snapshot is '[^']*' (step \([0-9]*\)).*/\1/p" "$DIR/err")
if [ "$rc" -eq 1 ] && grep -Eq "the loss of step [0-9]+ is|no longer finite after step [0-9]+" "$DIR/err" && [ "$good" = 2 ]; then
  ok "a diverged run stops naming the step"; else bad "diverged run: exit $rc, stderr: $(cat "$DIR/err") stdout: $(tail -n 2 "$DIR/out")"; fi
expect_run "the last good snapshot loads" "GPT 1 layers" "${small[@]}" --steps "${good:-0}" --resume "$DIR/div.state"

# ---- 5. Odd paths: directories, pipes, standard input
expect_early_error "a directory as --data" "--data '$DIR/folder' is a directory \(expected a text file, an llm.c .bin file, or - for standard input\)" \
  "${small[@]}" --steps 1 --json --data "$DIR/folder"
expect_early_error "a directory as --init-from" "--init-from '$DIR/hf' is a directory \(expected a GPT-2 weights file.*did you mean '$DIR/hf/model.safetensors'" \
  --threads 1 --steps 1 --json --init-from "$DIR/hf"
text=$(for i in $(seq 1 20); do echo "the cat sat on the mat $i"; done)
out=$(echo "$text" | "$BIN" "${small[@]}" --steps 2 --json --data /dev/stdin 2>&1)
if [ $? -eq 0 ] && echo "$out" | grep -q '"step":2,'; then ok "--data /dev/stdin from a pipe"; else bad "--data /dev/stdin: $out"; fi
out=$(echo "$text" | "$BIN" "${small[@]}" --steps 2 --json --data - 2>&1)
if [ $? -eq 0 ] && echo "$out" | grep -q '"step":2,'; then ok "--data - reads standard input"; else bad "--data -: $out"; fi

# ---- 6. Hugging Face BOOL buffers are skipped and reported; a BOOL parameter is an error
st_edit "$DIR/h4.safetensors" "$DIR/hfbool.safetensors" \
  'my $e = length $d; $h->{"h.0.attn.bias"} = {dtype => "BOOL", shape => [1, 1, 8, 8], data_offsets => [$e, $e + 64]}; $d .= "\1" x 64;'
expect_run "a BOOL h.0.attn.bias is skipped and reported" "skipped 1 tensor\(s\) of .* h\.0\.attn\.bias \(BOOL\)" \
  --threads 1 --batch 2 --seq 8 --steps 1 --init-from "$DIR/hfbool.safetensors"
st_edit "$DIR/h4.safetensors" "$DIR/boolparam.safetensors" \
  'my $e = length $d; $h->{"h.0.ln_1.bias"} = {dtype => "BOOL", shape => [16], data_offsets => [$e, $e + 16]}; $d .= "\1" x 16;'
expect_early_error "a BOOL parameter is an error" "tensor 'h\.0\.ln_1\.bias' of .* has dtype BOOL \(expected F32, F16 or BF16: the model uses this tensor\)" \
  --threads 1 --batch 2 --seq 8 --steps 1 --json --init-from "$DIR/boolparam.safetensors"

# ---- 7. A GPT-2 file missing a tensor, or with one under two names, is refused (issue 24: a
# 3-layer file missing h.1.ln_1.weight trained as a 1-layer model)
st_edit "$DIR/h4.safetensors" "$DIR/missing.safetensors" 'delete $h->{"h.0.ln_1.weight"};'
expect_early_error "a GPT-2 file missing one tensor" "'$DIR/missing\.safetensors' has no tensor 'h\.0\.ln_1\.weight', but it has tensors of 1 layer" \
  --threads 1 --batch 2 --seq 8 --steps 1 --json --init-from "$DIR/missing.safetensors"
st_edit "$DIR/h4.safetensors" "$DIR/two_names.safetensors" 'my ($b, $e) = @{$h->{"ln_f.bias"}{data_offsets}}; my $n = length $d;
  $d .= substr($d, $b, $e - $b); $h->{"transformer.ln_f.bias"} = {dtype => "F32", shape => [16], data_offsets => [$n, $n + $e - $b]};'
expect_early_error "a GPT-2 tensor under two names" "has tensor 'ln_f\.bias' twice, as 'ln_f\.bias' and as 'transformer\.ln_f\.bias'" \
  --threads 1 --batch 2 --seq 8 --steps 1 --json --init-from "$DIR/two_names.safetensors"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
