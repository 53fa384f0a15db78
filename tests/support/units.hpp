#pragma once
// SPDX-License-Identifier: MIT
// Byte units the tests share (one definition: remat_tests is a unity build, tests/CMakeLists.txt).

#include <cstddef>

inline constexpr std::size_t MiB = std::size_t{1} << 20;
