#pragma once
// SPDX-License-Identifier: MIT
// CPU backend, part 5: optimizer updates and gradient-norm helpers, one pass over each tensor.

#include <cmath>
#include <cstdint>

#include <Eigen/Core>

#include "remat/backend/cpu/memory.hpp"
#include "remat/backend/update_list.hpp"

namespace remat {
namespace cpu {

struct CpuOptim {
  // AdamW (Loshchilov & Hutter), as torch.optim.AdamW:
  //   p -= lr wd p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
  //   p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps),  bc_i = 1 - b_i^t
  static void adamw_update(float* p, const float* g, float* m, float* v, std::int64_t n, float lr,
                           float b1, float b2, float eps, float wd, float bc1, float bc2) {
    const float step = lr / bc1, sbc2 = std::sqrt(bc2), decay = 1.0f - lr * wd;
    parallel_for(n, 16384, [&](std::int64_t b, std::int64_t e) {
      using A = Eigen::Map<Eigen::ArrayXf>;
      A P(p + b, e - b), M(m + b, e - b), V(v + b, e - b);
      const Eigen::Map<const Eigen::ArrayXf> G(g + b, e - b);
      P *= decay;
      M = b1 * M + (1.0f - b1) * G;
      V = b2 * V + (1.0f - b2) * G.square();
      P -= step * M / (V.sqrt() / sbc2 + eps);
    });
  }
  // SGD with momentum, as torch.optim.SGD (dampening 0):
  //   g' = g + wd p;  buf = first ? g' : mu buf + g';  p -= lr (nesterov ? g' + mu buf : buf)
  static void sgd_update(float* p, const float* g, float* buf, std::int64_t n, float lr, float mu,
                         float wd, bool nesterov, bool first) {
    parallel_for(n, 16384, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const float gi = g[i] + wd * p[i];
        if (!buf) {
          p[i] -= lr * gi;
          continue;
        }
        buf[i] = first ? gi : mu * buf[i] + gi;
        p[i] -= lr * (nesterov ? gi + mu * buf[i] : buf[i]);
      }
    });
  }
  /// adamw_update on each slice, in order (the same bits as one call per tensor)
  static void adamw_update_many(const UpdateSlice* s, std::size_t count, float lr, float b1,
                                float b2, float eps, float wd, float bc1, float bc2) {
    for (std::size_t k = 0; k < count; ++k)
      adamw_update(s[k].p, s[k].g, s[k].m, s[k].v, s[k].n, lr, b1, b2, eps, wd, bc1, bc2);
  }
  /// sgd_update on each slice, in order
  static void sgd_update_many(const UpdateSlice* s, std::size_t count, float lr, float mu, float wd,
                              bool nesterov) {
    for (std::size_t k = 0; k < count; ++k)
      sgd_update(s[k].p, s[k].g, s[k].m, s[k].n, lr, mu, wd, nesterov, s[k].first);
  }
  /// sum of x^2 in double (serial: deterministic)
  static double sum_squares(const float* x, std::int64_t n) {
    double s = 0.0;
    for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
    return s;
  }
  /// out[k] = sum_squares(xs[k], ns[k]) for k < count: one call for many buffers, so that a
  /// device returns all the sums in one copy (the gradient norm: NOTE [host round trips]).
  static void sum_squares_many(double* out, const float* const* xs, const std::int64_t* ns,
                               std::size_t count) {
    for (std::size_t k = 0; k < count; ++k) out[k] = sum_squares(xs[k], ns[k]);
  }
  static void scale(float* x, std::int64_t n, float s) {
    parallel_for(n, 16384, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) x[i] *= s;
    });
  }
  /// scale() of every buffer xs[k] (ns[k] floats)
  static void scale_many(float* const* xs, const std::int64_t* ns, std::size_t count, float s) {
    for (std::size_t k = 0; k < count; ++k) scale(xs[k], ns[k], s);
  }
  /// norm[0] = the global norm of the count buffers (their sums of squares added in order),
  /// and each is scaled by max_norm / (norm + 1e-6) when that is < 1 (optim::clip_grad_norm_).
  static void clip_norm_many(float* norm, float* const* xs, const std::int64_t* ns,
                             std::size_t count, float max_norm) {
    double total = 0.0;
    for (std::size_t k = 0; k < count; ++k) total += sum_squares(xs[k], ns[k]);
    norm[0] = static_cast<float>(std::sqrt(total));
    const float factor = max_norm / (norm[0] + 1e-6f);
    if (factor < 1.0f) scale_many(xs, ns, count, factor);
  }
};

}  // namespace cpu
}  // namespace remat
