// SPDX-License-Identifier: MIT
// bf16 conversions (core/bf16.hpp) against a reference written differently: the two bf16
// neighbours of x found by truncation, the nearer chosen in double arithmetic, a tie to the
// even one, beyond the largest finite value by half an ulp or more to infinity. Every one of
// the 65536 bf16 patterns round-trips; NaNs stay NaNs of the same sign.

#include "support/catch.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include <remat/core/bf16.hpp>
#include <remat/core/dtype.hpp>

using namespace remat;

namespace {

/// The nearest bf16 of a finite or infinite x, ties to even, by another route than to_bf16.
std::uint16_t reference_bf16(float x) {
  const std::uint32_t u = math::f32_bits(x);
  const std::uint16_t lo = static_cast<std::uint16_t>(u >> 16);  // toward zero
  if ((u & 0xffffu) == 0) return lo;                             // exact
  const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);   // away from zero
  const double v = std::fabs(static_cast<double>(x));
  const double a = std::fabs(static_cast<double>(math::from_bf16(bf16{lo})));
  // hi is past the largest finite value when lo is it: measure against 2^128 then
  const double b = (hi & 0x7fffu) == 0x7f80u ? std::ldexp(1.0, 128)
                                             : std::fabs(static_cast<double>(math::from_bf16(bf16{hi})));
  if (v - a < b - v) return lo;
  if (v - a > b - v) return hi;
  return (lo & 1u) ? hi : lo;
}

std::uint16_t rounded_bits(float x) { return math::to_bf16(x).bits; }

}  // namespace

TEST_CASE("bf16: the type's size and name") {
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(std::string(dtype_name(DType::bf16)) == "bf16");
  CHECK(dtype_of<bf16>::value == DType::bf16);
  CHECK(sizeof(bf16) == 2);
}

TEST_CASE("bf16: every pattern widens exactly and rounds back to itself") {
  int nans = 0;
  for (std::uint32_t p = 0; p < 65536; ++p) {
    const float f = math::from_bf16(bf16{static_cast<std::uint16_t>(p)});
    REQUIRE(math::f32_bits(f) == p << 16);
    const std::uint16_t back = rounded_bits(f);
    if (std::isnan(f)) {
      ++nans;
      REQUIRE(std::isnan(math::from_bf16(bf16{back})));
      REQUIRE((back & 0x8000u) == (p & 0x8000u));  // the sign kept
      REQUIRE((back & 0x0040u) != 0);               // quiet
    } else {
      REQUIRE(back == p);
    }
  }
  CHECK(nans == 2 * 127);  // exponent all ones, a mantissa of 7 bits not zero, both signs
}

TEST_CASE("bf16: round to nearest even, against the reference") {
  SECTION("hand-picked values") {
    const float one = 1.0f, ulp = std::ldexp(1.0f, -7);  // bf16's ulp at 1
    CHECK(rounded_bits(one + ulp / 2) == rounded_bits(one));                // tie, 1 is even: stays
    CHECK(rounded_bits(one + 3 * ulp / 2) == rounded_bits(one + 2 * ulp));  // tie, 1 + ulp is odd: up
    CHECK(rounded_bits(std::nextafter(one + ulp / 2, 2.0f)) == rounded_bits(one + ulp));  // just past: up
    CHECK(rounded_bits(-0.0f) == 0x8000u);
    CHECK(rounded_bits(std::numeric_limits<float>::infinity()) == 0x7f80u);
    CHECK(rounded_bits(-std::numeric_limits<float>::infinity()) == 0xff80u);
    CHECK(rounded_bits(std::numeric_limits<float>::max()) == 0x7f80u);   // past the largest bf16
    CHECK(rounded_bits(3.3895313892515355e38f) == 0x7f7fu);              // the largest bf16 itself
    CHECK(rounded_bits(std::numeric_limits<float>::denorm_min()) == 0);  // a subnormal to +0
    CHECK(math::round_bf16(3.14159265f) == 3.140625f);
  }
  SECTION("around every bf16 value: its midpoints and their neighbours") {
    for (std::uint32_t p = 0; p < 0x7f80u; ++p) {  // every finite non-negative bf16
      const std::uint32_t base = p << 16;
      for (std::uint32_t low : {0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
        for (const float x : {math::f32_from_bits(base | low), -math::f32_from_bits(base | low)}) {
          REQUIRE(rounded_bits(x) == reference_bf16(x));
        }
      }
    }
  }
  SECTION("a million random floats") {
    std::mt19937 g(7);
    for (int i = 0; i < 1000000; ++i) {
      const float x = math::f32_from_bits(static_cast<std::uint32_t>(g()));
      if (std::isnan(x)) {
        REQUIRE(std::isnan(math::round_bf16(x)));
        continue;
      }
      REQUIRE(rounded_bits(x) == reference_bf16(x));
    }
  }
}
