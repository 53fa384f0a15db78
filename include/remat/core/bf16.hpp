#pragma once
// SPDX-License-Identifier: MIT
// bfloat16: the upper half of an IEEE-754 fp32 (sign, the same 8 exponent bits, 7 of the 23
// mantissa bits). fp32's range with 8 significant bits: what the forward's activations are
// stored in under a bf16 precision policy, while every sum is accumulated in fp32.
//
// The two conversions live here, below every backend (__host__ __device__), so that the CPU,
// the CUDA kernels and the emulation round the same way, bit for bit:
//   - bf16 -> fp32 is exact: the 16 bits become the upper half, the lower half is zero;
//   - fp32 -> bf16 rounds to nearest, ties to even (IEEE's default, as PyTorch, JAX and the
//     hardware's cvt.rn.bf16.f32 do): values past the largest bf16 (3.3895e38) by half an ulp
//     or more become infinity, subnormals round like any other value, and a NaN stays a NaN
//     (quiet, its sign and upper payload bits kept; rounding its bits could make it infinity).

#include <cstdint>
#include <cstring>

#include "remat/config.hpp"

namespace remat {

/// One bfloat16 value as stored: its 16 bits (no arithmetic: compute in fp32). Made from its
/// bits only, explicitly (bf16{0x3f80} is 1): a float never turns into one by accident.
struct bf16 {
  std::uint16_t bits = 0;
  bf16() = default;
  REMAT_HOST_DEVICE constexpr explicit bf16(std::uint16_t b) : bits(b) {}
};

namespace math {

REMAT_HOST_DEVICE inline std::uint32_t f32_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
REMAT_HOST_DEVICE inline float f32_from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

/// bf16 -> fp32, exact.
REMAT_HOST_DEVICE inline float from_bf16(bf16 h) {
  return f32_from_bits(static_cast<std::uint32_t>(h.bits) << 16);
}

/// fp32 -> bf16, round to nearest even; NaN -> quiet NaN of the same sign.
REMAT_HOST_DEVICE inline bf16 to_bf16(float x) {
  const std::uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN: keep it one (set the quiet bit)
    return bf16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
  // add just under half of the dropped ulp, plus one when the kept half is odd: a tie then
  // carries only from an odd value (to even), and a carry out of the mantissa steps the
  // exponent (the largest finite values round up to infinity)
  const std::uint32_t bias = 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>((u + bias) >> 16)};
}

/// x rounded to bf16 and widened back: the value a bf16 tensor holds for x.
REMAT_HOST_DEVICE inline float round_bf16(float x) { return from_bf16(to_bf16(x)); }

}  // namespace math
}  // namespace remat
