#!/usr/bin/env bash
# The library's layers, bottom to top: a header may include headers of its own layer or of
# layers below it, never above (issue 26). This list is the one place the order is written.
# Also: no header names an application's command-line flag.
# Usage: check_layers.sh [INCLUDE_DIR]   (default: the repository's include/)
set -euo pipefail
root=${1:-"$(dirname "$0")/../../include"}
cd "$root"
layers=(
  base        # remat/config.hpp, remat/version.hpp: macros and constants
  core        # tensors, the tape, the ledger, shapes, shared scalar math
  ops         # ops: forward and backward side by side, and the kernels they ask of a backend
  backend     # the backend concept, CPU and CUDA kernels, the shape-only twin (Meta)
  checkpoint  # checkpoint(), policies
  optim       # optimizers, gradient clipping
  plan        # the estimator and the planner, for any chain of blocks
  nn          # modules and the bundled GPT (its plans and estimates)
  dist        # data parallel, ZeRO-1, MPI and NCCL
  io          # files: safetensors, snapshots, GPT-2 weights
  data        # token streams
  text        # the tokenizer
  train       # a training loop's parts for any model: steps, validation, progress, signals, outputs
  testing     # helpers for users' tests
  umbrella    # remat/remat.hpp, remat/cuda.hpp, remat/mpi.hpp
)
rank_of() {  # a header path under remat/ -> its layer's index
  local p=$1 name
  case "$p" in
    config.hpp|version.hpp) name=base ;;
    remat.hpp|cuda.hpp|mpi.hpp) name=umbrella ;;
    */*) name=${p%%/*} ;;
    *) echo "?"; return ;;
  esac
  for i in "${!layers[@]}"; do [[ ${layers[$i]} == "$name" ]] && { echo "$i"; return; }; done
  echo "?"
}
bad=0 edges=0
while IFS= read -r file; do
  from=${file#remat/}
  rf=$(rank_of "$from")
  if [[ $rf == "?" ]]; then
    echo "layering: $file is in no layer (add its folder to the list in $0)"
    bad=1
    continue
  fi
  while IFS= read -r inc; do
    [[ -z $inc ]] && continue
    ri=$(rank_of "$inc")
    edges=$((edges + 1))
    if [[ $ri == "?" ]]; then
      echo "layering: $file includes remat/$inc, which is in no layer"
      bad=1
    elif ((ri > rf)); then
      echo "layering: $file (layer ${layers[$rf]}) includes remat/$inc (layer ${layers[$ri]}, above it)"
      bad=1
    fi
  done < <(sed -n 's|^[[:space:]]*#[[:space:]]*include[[:space:]]*"remat/\([^"]*\)".*|\1|p' "$file")
done < <(find remat -type f \( -name '*.hpp' -o -name '*.cuh' -o -name '*.h' \) | sort)
if ((bad)); then
  echo "layering: FAILED (a header may include its own layer or those below: ${layers[*]})"
  exit 1
fi
# The library is generic: no header names an application's command-line flag ("--batch") in
# its comments or messages; the application that has the flag says how it maps.
flags=$(grep -rnE "(//|\").*[ (\`\"']--[a-z][a-z0-9-]+" remat || true)
if [[ -n $flags ]]; then
  echo "layering: a library header names a command-line flag (an application's, not the library's):"
  echo "$flags"
  exit 1
fi
echo "layering: ok, $edges includes between remat headers follow: ${layers[*]}"
