#pragma once
// SPDX-License-Identifier: MIT
// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. The numbers at (key, counter) depend on nothing else, so dropout
// replayed in a checkpoint's backward draws exactly the numbers of the first run without any
// stashed state, on every backend (the functions are __host__ __device__).

#include <cmath>
#include <cstdint>

#include "remat/config.hpp"

namespace remat {
namespace rng {

struct Philox4 {
  std::uint32_t v[4];
};

REMAT_HOST_DEVICE inline void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi,
                                      std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

/// Ten Philox rounds over counter `c` with key `k`.
REMAT_HOST_DEVICE inline Philox4 philox(Philox4 c, std::uint32_t k0, std::uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c.v[0], hi0, lo0);
    mulhilo(0xCD9E8D57u, c.v[2], hi1, lo1);
    c = Philox4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

/// Four 32-bit random words for block `block` of stream `offset` under `seed`.
REMAT_HOST_DEVICE inline Philox4 random4(std::uint64_t seed, std::uint64_t offset,
                                          std::uint64_t block) {
  const std::uint64_t ctr = offset + block;
  Philox4 c{{static_cast<std::uint32_t>(ctr), static_cast<std::uint32_t>(ctr >> 32), 0u, 0u}};
  return philox(c, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

/// The i-th uniform float in [0, 1) of stream (seed, offset): 24 random bits.
REMAT_HOST_DEVICE inline float uniform(std::uint64_t seed, std::uint64_t offset,
                                       std::uint64_t i) {
  const Philox4 r = random4(seed, offset, i / 4);
  return static_cast<float>(r.v[i % 4] >> 8) * (1.0f / 16777216.0f);
}

/// The i-th standard normal of stream (seed, offset) (Box-Muller on one Philox block).
inline float normal(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  const Philox4 r = random4(seed, offset, i);
  const double u1 = (static_cast<double>(r.v[0] >> 8) + 1.0) / 16777217.0;  // (0, 1]
  const double u2 = static_cast<double>(r.v[1] >> 8) / 16777216.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace rng
}  // namespace remat
