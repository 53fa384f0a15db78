#pragma once
// SPDX-License-Identifier: MIT
// The library version, kept in step with project(VERSION ...) in CMakeLists.txt.

#define REMAT_VERSION_MAJOR 0
#define REMAT_VERSION_MINOR 1
#define REMAT_VERSION_PATCH 0

namespace remat {
inline constexpr const char* version_string = "0.1.0";
}  // namespace remat
