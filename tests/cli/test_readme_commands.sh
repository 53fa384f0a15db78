#!/usr/bin/env bash
# The README's commands, as written (issue 26, acceptance 5): every line of a ```sh block of
# README.md that runs build/examples/train_gpt or build/examples/tokenize (mpirun included) runs
# here and must exit 0. The files they name are made first, small: text (input.txt, train.txt,
# val.txt, my.txt), llm.c token files (train.bin), a model (model.safetensors), a "gpt2/"
# folder holding a tokenizer of GPT-2's format learned here (make_tiny_tokenizer) and a small
# model of its vocabulary, and a Llama-family folder "SmolLM2-135M/" (that tokenizer as a
# tokenizer.json, a small nn::Llama). What changes: `...` stands for a small model (the README's "the flags
# before"), `build/examples/` for the built programs, mpirun gets the test's MPI flags, a
# train_gpt command that gives no --steps trains 5 steps, not the default 50 (CI's time), and
# a `# then: --resume FILE` comment runs as the next command. Lines under srun need Slurm:
# listed, skipped.
# Usage: test_readme_commands.sh README TRAIN_GPT TOKENIZE MAKE_TINY_TOKENIZER [MPIEXEC [FLAGS...]]
set -u
README=$1 BIN=$2 TOKENIZE=$3 MAKE_TOK=$4
shift 4
MPIEXEC=${1:-}
[ $# -gt 0 ] && shift
MPI_FLAGS=("$@")
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/common.sh"  # ok, bad
cd "$DIR" || exit 1

# Text with some structure, about 40 KB (enough for --seq 256 --batch 8 in bytes, and for
# --seq 256 --batch 4 in the small tokenizer's ids)
for i in $(seq 0 999); do
  case $((i % 4)) in
    0) printf 'the cat sat on the mat %d. ' $((i % 10)) ;;
    1) printf 'a bird in the hand is worth two in the bush. ' ;;
    2) printf "it's the fox's den; they're there.\n" ;;
    3) printf 'The end of line %d.\n' "$i" ;;
  esac
done >my.txt
cp my.txt input.txt && cp my.txt train.txt && tail -c 20000 my.txt >val.txt
# train.bin: an llm.c token file of byte ids (vocab 256)
perl -e 'local $/; my @b = unpack("C*", <STDIN>); print pack("l<256", 20240520, 1, scalar(@b)), pack("S<*", @b)' \
  <my.txt >train.bin
small=(--layers 2 --d 32 --heads 2 --seq 64 --batch 4 --threads 2)
"$BIN" "${small[@]}" --steps 0 --save model.safetensors >/dev/null 2>prep.err || { bad "a model: $(cat prep.err)"; exit 1; }
mkdir gpt2
V=$("$MAKE_TOK" my.txt 300 gpt2) || { bad "make_tiny_tokenizer"; exit 1; }
"$BIN" --layers 2 --d 32 --heads 2 --seq 256 --vocab "$V" --steps 0 --save gpt2/model.safetensors \
  >/dev/null 2>prep.err || { bad "a GPT-2-style model: $(cat prep.err)"; exit 1; }
# SmolLM2-135M/: a small Llama-family folder, its tokenizer.json the tokenizer above
mkdir SmolLM2-135M
python3 "$HERE/tokenizer_json.py" gpt2 SmolLM2-135M/tokenizer.json ||
  { bad "a tokenizer.json"; exit 1; }
"$BIN" --model llama --layers 2 --d 32 --heads 2 --kv-heads 1 --seq 512 --vocab "$V" --steps 0 \
  --save SmolLM2-135M >/dev/null 2>prep.err || { bad "a Llama-family folder: $(cat prep.err)"; exit 1; }

# The commands: ```sh blocks, continuation lines joined, comments kept apart.
mapfile -t lines < <(awk '
  /^```sh/ { inblock = 1; next }
  /^```/ { inblock = 0; next }
  inblock {
    if (cont != "") { $0 = cont " " $0; cont = "" }
    if ($0 ~ /\\$/) { sub(/\\$/, ""); cont = $0; next }
    if ($0 ~ /build\/examples\/(train_gpt|tokenize)/) print
  }' "$README")
[ "${#lines[@]}" -ge 15 ] || bad "the README has ${#lines[@]} train_gpt/tokenize commands (expected 15 or more: is the extraction broken?)"

run_line() {  # run_line NAME COMMAND-TEXT: the text as bash words, the programs substituted
  local name=$1 text=$2 t0=$SECONDS
  text=${text//build\/examples\/train_gpt/\"\$BIN\"}
  text=${text//build\/examples\/tokenize/\"\$TOKENIZE\"}
  text=${text//.../\$\{small[*]\}}
  if [[ $text == *'"$BIN"'* && $text != *--steps* ]]; then
    if [[ $text == *"|"* ]]; then text=${text/|/--steps 5 |}; else text="$text --steps 5"; fi
  fi
  if [[ $text == mpirun* ]]; then
    if [ -z "$MPIEXEC" ]; then echo "skipped (no MPI in this build): $name"; return; fi
    text="\"\$MPIEXEC\" \${MPI_FLAGS[*]} ${text#mpirun}"
  fi
  if eval "$text" >out 2>err </dev/null; then ok "$name ($((SECONDS - t0)) s)"; else
    bad "$name: exit $?: $(tail -c 800 err)"; fi
}
for line in "${lines[@]}"; do
  cmd=${line%%#*}  # the comment: after the first " #" (no command here has a # of its own)
  comment=""
  [[ $line == *"#"* ]] && comment=${line#*#}
  cmd=$(echo "$cmd" | sed 's/[[:space:]]*$//')
  if [[ $cmd == srun* ]]; then echo "skipped (needs Slurm): $cmd"; continue; fi
  run_line "$cmd" "$cmd"
  if [[ $comment =~ then:\ (--resume\ [^ ]+) ]]; then  # the comment's follow-up command
    run_line "$cmd ${BASH_REMATCH[1]}" "$cmd ${BASH_REMATCH[1]}"
  fi
done
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
