#!/usr/bin/env bash
# Copies the header-only dependencies the GPU machine lacks (Eigen, Catch2, CLI11, nlohmann-json,
# with their CMake files, in /usr's layout) into .deps/usr (git-ignored), for the device tool's
# `carry: [".deps"]`. Run here, before run_gpu.sh goes to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash .ci/deps.sh build
rm -rf .deps && mkdir -p .deps/usr/include .deps/usr/share/cmake .deps/usr/lib/cmake .deps/usr/share/eigen3
cp -r /usr/include/eigen3 /usr/include/catch2 /usr/include/CLI /usr/include/nlohmann .deps/usr/include/
cp -r /usr/share/eigen3/cmake .deps/usr/share/eigen3/
cp -r /usr/lib/cmake/Catch2 .deps/usr/lib/cmake/ && cp /usr/lib/libCatch2WithMain.a .deps/usr/lib/
cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json .deps/usr/share/cmake/
grep -qx '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude
du -sh .deps
