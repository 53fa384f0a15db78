#pragma once
// SPDX-License-Identifier: MIT
// Catch2 v2 (Debian's 2.13) and v3 behind one include.
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif

// REMAT_CONTAINS("text"): a string matcher for REQUIRE_THROWS_WITH in both versions.
#if __has_include(<catch2/catch_all.hpp>)
#define REMAT_CONTAINS(s) Catch::Matchers::ContainsSubstring(s)
#else
#define REMAT_CONTAINS(s) Catch::Contains(s)
#endif
