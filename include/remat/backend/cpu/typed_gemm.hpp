#pragma once
// SPDX-License-Identifier: MIT
// CPU backend, part 5: the products with bf16 operands (MatmulOp's GemmKernel) and the fp32
// column sums of a bf16 matrix (ColumnSumKernel), on the fp32 sgemm: bf16 -> fp32 is exact, so
// only the order of the fp32 sums differs from an fp32 product of the same values.
//
// NOTE [bf16 GEMM tiles]
// Debian's OpenBLAS (0.3.21) has no bf16 GEMM, so C is made tile by tile: for each kTile x
// kTile tile of C, the blocks of op(A) (kTile x kDepth) and op(B) (kDepth x kTile) are widened
// into fp32 scratch and multiplied into an fp32 accumulator tile by sgemm, kDepth of K at a time
// (beta 1 after the first); the tile is then finished (+ bias, + residual, + C's old values)
// and rounded once to C's type. Widening costs (1/kTile + 1/kTile) of the product's 2 MNK FLOPs
// in conversions, and the scratch is at most 3 kTile^2 floats (3 MiB), counted in the ledger
// (temporaries) for the kernel's duration, whatever the matrices' sizes. The sums are in a fixed
// order (K blocks in order, each a sgemm), so a run repeats its bits on the same thread count.

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "remat/backend/cpu/gemm.hpp"
#include "remat/backend/cpu/nn.hpp"
#include "remat/core/bf16.hpp"
#include "remat/ops/matmul.hpp"

namespace remat {
namespace cpu {

struct CpuTypedGemm {
  static constexpr std::int64_t kTile = 512, kDepth = 512;

  /// dst (rows, cols), contiguous = the block of src (type t, leading dimension ld) at (r0, c0).
  static void widen(float* dst, const void* src, DType t, std::int64_t ld, std::int64_t r0,
                    std::int64_t c0, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t at = (r0 + r) * ld + c0;
      float* d = dst + r * cols;
      if (t == DType::f32) {
        std::memcpy(d, static_cast<const float*>(src) + at, sizeof(float) * static_cast<std::size_t>(cols));
      } else {
        const bf16* s = static_cast<const bf16*>(src) + at;
        for (std::int64_t j = 0; j < cols; ++j) d[j] = math::from_bf16(s[j]);
      }
    }
  }

  static std::size_t scratch(const GemmKernel& k) {
    if (k.M == 0 || k.N == 0 || k.batch == 0) return 0;
    const std::int64_t p = std::min(kTile, k.M), q = std::min(kTile, k.N),
                       d = std::min(kDepth, std::max<std::int64_t>(k.K, 1));
    return static_cast<std::size_t>(p * d + d * q + p * q) * sizeof(float);
  }

  static void run(const GemmKernel& k) {
    if (k.M == 0 || k.N == 0 || k.batch == 0) return;
    const Scratch<float> s(scratch(k) / sizeof(float));
    const std::int64_t P = std::min(kTile, k.M), Q = std::min(kTile, k.N),
                       D = std::min(kDepth, std::max<std::int64_t>(k.K, 1));
    float* at = s.data();
    float* bt = at + P * D;
    float* acc = bt + D * Q;
    // sc == 0 over several matrices: one C, the batch summed into each tile before it is finished
    const bool shared = k.sc == 0 && k.batch > 1;
    const std::int64_t outer = shared ? 1 : k.batch;
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < k.M; i += P)
        for (std::int64_t j = 0; j < k.N; j += Q) {
          const std::int64_t p = std::min(P, k.M - i), q = std::min(Q, k.N - j);
          bool first = true;
          for (std::int64_t m = shared ? 0 : o; m < (shared ? k.batch : o + 1); ++m)
            for (std::int64_t l = 0; l < k.K; l += D) {
              const std::int64_t d = std::min(D, k.K - l);
              // op(A) rows [i, i+p) x cols [l, l+d): stored rows of A, or (ta) columns
              const void* a = static_cast<const char*>(k.a) + m * k.sa * static_cast<std::int64_t>(dtype_size(k.ab));
              const void* b = static_cast<const char*>(k.b) + m * k.sb * static_cast<std::int64_t>(dtype_size(k.ab));
              if (!k.ta) widen(at, a, k.ab, k.lda, i, l, p, d);
              else widen(at, a, k.ab, k.lda, l, i, d, p);
              if (!k.tb) widen(bt, b, k.ab, k.ldb, l, j, d, q);
              else widen(bt, b, k.ab, k.ldb, j, l, q, d);
              CpuGemm::panel(k.ta, k.tb, p, q, d, 1.0f, at, k.ta ? p : d, bt, k.tb ? d : q,
                             first ? 0.0f : 1.0f, acc, q);
              first = false;
            }
          if (first) std::fill(acc, acc + p * q, 0.0f);  // K == 0
          finish(k, o, i, j, p, q, acc);
        }
  }
  // C's tile (rows [i, i+p), cols [j, j+q)) of matrix o = acc + bias + R (+ C), rounded once;
  // each term a loop of its own over a row (no test per element: the loops vectorize)
  static void finish(const GemmKernel& k, std::int64_t o, std::int64_t i, std::int64_t j,
                     std::int64_t p, std::int64_t q, float* acc) {
    auto add_row = [q](float* a, const void* src, DType t, std::int64_t at) {
      if (t == DType::bf16) {
        const bf16* s = static_cast<const bf16*>(src) + at;
        for (std::int64_t c = 0; c < q; ++c) a[c] += math::from_bf16(s[c]);
      } else {
        const float* s = static_cast<const float*>(src) + at;
        for (std::int64_t c = 0; c < q; ++c) a[c] += s[c];
      }
    };
    for (std::int64_t r = 0; r < p; ++r) {
      float* a = acc + r * q;
      const std::int64_t e = o * k.sc + (i + r) * k.ldc + j;
      if (k.bias)
        for (std::int64_t c = 0; c < q; ++c) a[c] += k.bias[j + c];
      if (k.r) add_row(a, k.r, k.ct, e);
      if (k.accumulate) add_row(a, k.c, k.ct, e);
      if (k.ct == DType::bf16) {
        bf16* out = static_cast<bf16*>(k.c) + e;
        for (std::int64_t c = 0; c < q; ++c) out[c] = math::to_bf16(a[c]);
      } else {
        std::memcpy(static_cast<float*>(k.c) + e, a, sizeof(float) * static_cast<std::size_t>(q));
      }
    }
  }

  // y (N) (+)= column sums of x (rows, N), in fp32 down the rows in order, rounded once
  static void run(const ColumnSumKernel& k) {
    constexpr std::int64_t W = 64;  // columns summed together, row by row
    parallel_for((k.N + W - 1) / W, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t c0 = b * W; c0 < std::min(e * W, k.N); c0 += W) {
        const std::int64_t w = std::min(W, k.N - c0);
        float v[W] = {};
        for (std::int64_t r = 0; r < k.rows; ++r)
          for (std::int64_t c = 0; c < w; ++c) v[c] += math::load_f32(k.x, k.xt, r * k.N + c0 + c);
        for (std::int64_t c = 0; c < w; ++c)
          math::store_f32(k.y, k.yt, c0 + c, k.add ? v[c] + math::load_f32(k.y, k.yt, c0 + c) : v[c]);
      }
    });
  }
};

}  // namespace cpu
}  // namespace remat
