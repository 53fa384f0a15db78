#pragma once
// SPDX-License-Identifier: MIT
// CPU backend, part 3: elementwise kernels (binary with trailing broadcast, affine, activations,
// the unary maps of core/math.hpp, where, dropout), reductions over an axis (sum, max) and
// block copies (slice, concat, permute).
// Kernel arguments go outputs, inputs, then sizes; gradient outputs accumulate (+=).

#include <algorithm>
#include <cstdint>

#include <Eigen/Core>

#include "remat/backend/cpu/memory.hpp"
#include "remat/core/rng.hpp"
#include "remat/core/shape.hpp"
#include "remat/core/math.hpp"

namespace remat {
namespace cpu {

using ArrMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrMap = Eigen::Map<const Eigen::ArrayXf>;

struct CpuPointwise {
  static constexpr std::int64_t kGrain = 16384;

  /// dst += src
  static void add_into(float* dst, const float* src, std::int64_t n) {
    parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
      ArrMap(dst + b, e - b) += ConstArrMap(src + b, e - b);
    });
  }

  /// y (rows, C) = row (C) in every row
  static void broadcast_rows(float* y, const float* row, std::int64_t rows, std::int64_t C) {
    parallel_for(rows, kGrain / (C + 1) + 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r) std::memcpy(y + r * C, row, sizeof(float) * C);
    });
  }

  // y (outer, inner) = a op b, where a (or b) is (inner) when a_bcast (b_bcast).
  static void binary_forward(math::BinaryKind k, float* y, const float* a, const float* b,
                             std::int64_t outer, std::int64_t inner, bool a_bcast, bool b_bcast) {
    parallel_for(outer, kGrain / (inner + 1) + 1, [&](std::int64_t ob, std::int64_t oe) {
      for (std::int64_t o = ob; o < oe; ++o) {
        ConstArrMap A(a + (a_bcast ? 0 : o * inner), inner);
        ConstArrMap Bv(b + (b_bcast ? 0 : o * inner), inner);
        ArrMap Y(y + o * inner, inner);
        switch (k) {
          case math::BinaryKind::add: Y = A + Bv; break;
          case math::BinaryKind::sub: Y = A - Bv; break;
          case math::BinaryKind::mul: Y = A * Bv; break;
          case math::BinaryKind::div: Y = A / Bv; break;
          default:  // selections and comparisons: the shared scalar formula
            for (std::int64_t j = 0; j < inner; ++j) Y[j] = math::binary(k, A[j], Bv[j]);
        }
      }
    });
  }
  // da += dy * d(a op b)/da (summed over outer when a is broadcast); likewise db. Either may
  // be null. Broadcast gradients are summed serially over rows so the result is deterministic.
  // set_a / set_b: da / db hold no values yet and are written (=), not added into.
  static void binary_backward(math::BinaryKind k, float* da, float* db, const float* dy,
                              const float* a, const float* b, std::int64_t outer,
                              std::int64_t inner, bool a_bcast, bool b_bcast, bool set_a = false,
                              bool set_b = false) {
    auto run = [&](float* d, bool d_bcast, bool wrt_a) {
      if (!d) return;
      if (wrt_a ? set_a : set_b) std::fill(d, d + (d_bcast ? inner : outer * inner), 0.0f);
      auto row = [&](std::int64_t o) {
        ConstArrMap A(a + (a_bcast ? 0 : o * inner), inner);
        ConstArrMap Bv(b + (b_bcast ? 0 : o * inner), inner);
        ConstArrMap G(dy + o * inner, inner);
        ArrMap D(d + (d_bcast ? 0 : o * inner), inner);
        switch (k) {
          case math::BinaryKind::add: D += G; break;
          case math::BinaryKind::sub:
            if (wrt_a) D += G;
            else D -= G;
            break;
          case math::BinaryKind::mul: D += G * (wrt_a ? Bv : A); break;
          case math::BinaryKind::div:
            if (wrt_a) D += G / Bv;
            else D -= G * A / (Bv * Bv);
            break;
          default:  // selections (comparisons have no gradient: their ops detach them)
            for (std::int64_t j = 0; j < inner; ++j)
              D[j] += G[j] * (wrt_a ? math::binary_grad_a(k, A[j], Bv[j])
                                    : math::binary_grad_b(k, A[j], Bv[j]));
        }
      };
      if (d_bcast) {
        for (std::int64_t o = 0; o < outer; ++o) row(o);
      } else {
        parallel_for(outer, kGrain / (inner + 1) + 1, [&](std::int64_t ob, std::int64_t oe) {
          for (std::int64_t o = ob; o < oe; ++o) row(o);
        });
      }
    };
    run(da, a_bcast, true);
    run(db, b_bcast, false);
  }

  /// y = scale x + shift
  static void affine_forward(float* y, const float* x, std::int64_t n, float scale, float shift) {
    parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
      ArrMap(y + b, e - b) = ConstArrMap(x + b, e - b) * scale + shift;
    });
  }
  /// dx += scale dy
  static void affine_backward(float* dx, const float* dy, std::int64_t n, float scale) {
    parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
      ArrMap(dx + b, e - b) += ConstArrMap(dy + b, e - b) * scale;
    });
  }

  // GELU (tanh approximation), vectorized through Eigen's tanh; formula as math::gelu.
  static void gelu_forward(float* y, const float* x, std::int64_t n) {
    parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
      ConstArrMap X(x + b, e - b);
      ArrMap(y + b, e - b) =
          0.5f * X * (1.0f + (math::kGeluK * (X + math::kGeluC * X.cube())).tanh());
    });
  }
  // dx += dy (0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)); as math::gelu_grad (set: =).
  // t goes through a tile on the stack: no heap buffer behind the ledger's back.
  static void gelu_backward(float* dx, const float* x, const float* dy, std::int64_t n,
                            bool set = false) {
    constexpr std::int64_t kTile = 1024;
    parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
      alignas(64) float tile[kTile];
      for (std::int64_t i = b; i < e; i += kTile) {
        const std::int64_t len = std::min(kTile, e - i);
        ConstArrMap X(x + i, len);
        ArrMap t(tile, len);
        t = (math::kGeluK * (X + math::kGeluC * X.cube())).tanh();
        auto d = ConstArrMap(dy + i, len) *
                 (0.5f * (1.0f + t) + 0.5f * X * (1.0f - t.square()) * math::kGeluK *
                                          (1.0f + 3.0f * math::kGeluC * X.square()));
        if (set) ArrMap(dx + i, len) = d;
        else ArrMap(dx + i, len) += d;
      }
    });
  }
  static void relu_forward(float* y, const float* x, std::int64_t n) {
    parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
      ArrMap(y + b, e - b) = ConstArrMap(x + b, e - b).max(0.0f);
    });
  }
  // dx += dy [x > 0]
  static void relu_backward(float* dx, const float* x, const float* dy, std::int64_t n) {
    parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
      ArrMap(dx + b, e - b) +=
          (ConstArrMap(x + b, e - b) > 0.0f).select(ConstArrMap(dy + b, e - b), 0.0f);
    });
  }
  static void tanh_forward(float* y, const float* x, std::int64_t n) {
    parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
      ArrMap(y + b, e - b) = ConstArrMap(x + b, e - b).tanh();
    });
  }
  // dx += dy (1 - y^2), from the saved output y
  static void tanh_backward(float* dx, const float* y, const float* dy, std::int64_t n) {
    parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
      ArrMap(dx + b, e - b) +=
          ConstArrMap(dy + b, e - b) * (1.0f - ConstArrMap(y + b, e - b).square());
    });
  }

  /// y = f(x; p, q), the map `k` of core/math.hpp
  static void unary_forward(math::UnaryKind k, float* y, const float* x, std::int64_t n,
                            float p, float q) {
    parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) y[i] = math::unary(k, x[i], p, q);
    });
  }
  /// dx += dy f'(x; p, q)  (set: =)
  static void unary_backward(math::UnaryKind k, float* dx, const float* x, const float* dy,
                             std::int64_t n, float p, float q, bool set = false) {
    parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const float d = dy[i] * math::unary_grad(k, x[i], p, q);
        dx[i] = set ? d : dx[i] + d;
      }
    });
  }

  /// y = m != 0 ? a : b elementwise; b null: the constant b_value
  static void where_forward(float* y, const float* m, const float* a, const float* b,
                            float b_value, std::int64_t n) {
    parallel_for(n, kGrain, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) y[i] = m[i] != 0.0f ? a[i] : (b ? b[i] : b_value);
    });
  }
  /// da += dy [m != 0], db += dy [m == 0]; either may be null (set_a / set_b: =)
  static void where_backward(float* da, float* db, const float* m, const float* dy,
                             std::int64_t n, bool set_a = false, bool set_b = false) {
    parallel_for(n, kGrain, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        const bool pick = m[i] != 0.0f;
        if (da) da[i] = (set_a ? 0.0f : da[i]) + (pick ? dy[i] : 0.0f);
        if (db) db[i] = (set_b ? 0.0f : db[i]) + (pick ? 0.0f : dy[i]);
      }
    });
  }

  /// y (outer, inner) = max over the middle axis of x (outer, n, inner); n >= 1
  static void max_forward(float* y, const float* x, std::int64_t outer, std::int64_t n,
                          std::int64_t inner) {
    parallel_for(outer, 1, [&](std::int64_t ob, std::int64_t oe) {
      for (std::int64_t o = ob; o < oe; ++o) {
        ArrMap Y(y + o * inner, inner);
        Y = ConstArrMap(x + o * n * inner, inner);
        for (std::int64_t k = 1; k < n; ++k) Y = Y.max(ConstArrMap(x + (o * n + k) * inner, inner));
      }
    });
  }
  /// dx (outer, n, inner) += dy at the first k where x equals the max y (as PyTorch's max(dim))
  static void max_backward(float* dx, const float* x, const float* y, const float* dy,
                           std::int64_t outer, std::int64_t n, std::int64_t inner) {
    parallel_for(outer * inner, kGrain / (n + 1) + 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r) {
        const std::int64_t o = r / inner, j = r % inner;
        for (std::int64_t k = 0; k < n; ++k) {
          const std::int64_t at = (o * n + k) * inner + j;
          if (x[at] == y[r]) {
            dx[at] += dy[r];
            break;
          }
        }
      }
    });
  }

  // Dropout: keep element i when uniform(seed, offset, i) >= p, scaling kept ones by 1/(1-p).
  // The mask is a pure function of (seed, offset, i), so backward regenerates it: no mask saved.
  static void dropout_forward(float* y, const float* x, std::int64_t n, float p,
                              std::uint64_t seed, std::uint64_t offset) {
    const float scale = 1.0f / (1.0f - p);
    parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i)
        y[i] = rng::uniform(seed, offset, static_cast<std::uint64_t>(i)) >= p ? x[i] * scale : 0.0f;
    });
  }
  // set: dx is written (its dropped elements 0), not added into
  static void dropout_backward(float* dx, const float* dy, std::int64_t n, float p,
                               std::uint64_t seed, std::uint64_t offset, bool set = false) {
    const float scale = 1.0f / (1.0f - p);
    parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const bool kept = rng::uniform(seed, offset, static_cast<std::uint64_t>(i)) >= p;
        if (set) dx[i] = kept ? dy[i] * scale : 0.0f;
        else if (kept) dx[i] += dy[i] * scale;
      }
    });
  }

  /// y (outer, inner) = scale * sum over the middle axis of x (outer, n, inner)
  static void reduce_forward(float* y, const float* x, std::int64_t outer, std::int64_t n,
                             std::int64_t inner, float scale) {
    parallel_for(outer, 1, [&](std::int64_t ob, std::int64_t oe) {
      for (std::int64_t o = ob; o < oe; ++o) {
        ArrMap Y(y + o * inner, inner);
        Y.setZero();
        for (std::int64_t k = 0; k < n; ++k) Y += ConstArrMap(x + (o * n + k) * inner, inner);
        Y *= scale;
      }
    });
  }
  /// dx (outer, n, inner) += scale * dy (outer, inner), broadcast over the middle axis
  static void reduce_backward(float* dx, const float* dy, std::int64_t outer, std::int64_t n,
                              std::int64_t inner, float scale) {
    parallel_for(outer * n, kGrain / (inner + 1) + 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t r = b; r < e; ++r)
        ArrMap(dx + r * inner, inner) += ConstArrMap(dy + (r / n) * inner, inner) * scale;
    });
  }

  /// For each of `outer` rows: dst[dst_start:dst_start+len] (=|+=) src[src_start:...], where a
  /// row holds dst_n (src_n) blocks of `inner` elements. Serves slice, concat and their grads.
  static void copy_block(float* dst, std::int64_t dst_n, std::int64_t dst_start, const float* src,
                         std::int64_t src_n, std::int64_t src_start, std::int64_t len,
                         std::int64_t outer, std::int64_t inner, bool accumulate) {
    const std::int64_t w = len * inner;
    if (w == 0 || outer == 0) return;  // an empty slice: no pointer may be dereferenced
    parallel_for(outer, kGrain / (w + 1) + 1, [&](std::int64_t ob, std::int64_t oe) {
      for (std::int64_t o = ob; o < oe; ++o) {
        float* d = dst + (o * dst_n + dst_start) * inner;
        const float* s = src + (o * src_n + src_start) * inner;
        if (accumulate)
          ArrMap(d, w) += ConstArrMap(s, w);
        else
          std::memcpy(d, s, static_cast<std::size_t>(w) * sizeof(float));
      }
    });
  }

  /// y = x permuted: y's axis i is x's axis perm[i]. With accumulate, y += instead.
  static void permute(float* y, const float* x, const Shape& xshape, const int* perm,
                      bool accumulate) {
    const int r = xshape.rank();
    std::int64_t xstride[Shape::kMaxRank] = {}, ydim[Shape::kMaxRank] = {}, ystride_x[Shape::kMaxRank] = {};
    std::int64_t s = 1;
    for (int i = r - 1; i >= 0; --i) {
      xstride[i] = s;
      s *= xshape[i];
    }
    for (int i = 0; i < r; ++i) {
      ydim[i] = xshape[perm[i]];
      ystride_x[i] = xstride[perm[i]];
    }
    // Copy rows of y's last axis; inner loop strides through x.
    const std::int64_t last = r ? ydim[r - 1] : 1, rows = xshape.numel() / (last ? last : 1);
    const std::int64_t lstride = r ? ystride_x[r - 1] : 1;
    parallel_for(rows, 64, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t row = rb; row < re; ++row) {
        std::int64_t rem = row, off = 0;
        for (int i = r - 2; i >= 0; --i) {
          off += (rem % ydim[i]) * ystride_x[i];
          rem /= ydim[i];
        }
        float* yr = y + row * last;
        if (accumulate)
          for (std::int64_t j = 0; j < last; ++j) yr[j] += x[off + j * lstride];
        else
          for (std::int64_t j = 0; j < last; ++j) yr[j] = x[off + j * lstride];
      }
    });
  }
};

}  // namespace cpu
}  // namespace remat
