#!/usr/bin/env bash
# The installed package files name no library by a path of the build machine (they find
# OpenBLAS, OpenMP, CUDA and MPI again where they are used), and the headers leave out the
# CUDA emulation (test infrastructure). Usage: no_machine_paths.sh CMAKE_DIR INCLUDE_DIR
set -euo pipefail
cmake_dir=$1 include_dir=$2
[[ -f $cmake_dir/rematTargets.cmake ]] || { echo "no rematTargets.cmake in $cmake_dir"; exit 1; }
# an absolute path to a library file (.so or .a) in any installed CMake file
if grep -nE '/[^" ;]*\.(so|a)([" ;.]|$)' "$cmake_dir"/*.cmake; then
  echo "FAIL: the installed package files above name a library by an absolute path"
  exit 1
fi
if [[ -e $include_dir/remat/backend/cuda/emulation ]]; then
  echo "FAIL: the CUDA emulation is installed with the headers ($include_dir/remat/backend/cuda/emulation)"
  exit 1
fi
echo "ok: $(ls "$cmake_dir" | wc -l) package files, no library path of this machine, no emulation headers"
