#pragma once
// SPDX-License-Identifier: MIT
// CPU backend, part 4: row kernels of neural nets: layer norm, softmax, causal attention,
// cross-entropy and embedding. Shapes in comments; gradient outputs accumulate (+=).

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "remat/backend/cpu/gemm.hpp"
#include "remat/backend/cpu/memory.hpp"

namespace remat {
namespace cpu {

struct CpuNn {
  using Arr = Eigen::Map<Eigen::ArrayXf>;
  using CArr = Eigen::Map<const Eigen::ArrayXf>;

  // y (rows, C) = (x - mean) rstd w + b; saves mean (rows), rstd (rows)
  static void layer_norm_forward(float* y, float* mean, float* rstd, const float* x,
                                 const float* w, const float* b, std::int64_t rows, std::int64_t C,
                                 float eps) {
    parallel_for(rows, 16, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        CArr X(x + r * C, C);
        const float m = X.sum() / static_cast<float>(C);
        const float v = (X - m).square().sum() / static_cast<float>(C);
        const float s = 1.0f / std::sqrt(v + eps);
        Arr(y + r * C, C) = (X - m) * s * CArr(w, C) + CArr(b, C);
        mean[r] = m;
        rstd[r] = s;
      }
    });
  }
  // xhat = (x - mean) rstd, g = dy w:
  //   dx += rstd (g - mean(g) - xhat mean(g xhat)),  dw += sum_rows dy xhat,  db += sum_rows dy
  // dw and db sum per thread, then in thread order: deterministic for a fixed thread count.
  static void layer_norm_backward(float* dx, float* dw, float* db, const float* dy,
                                  const float* x, const float* w, const float* mean,
                                  const float* rstd, std::int64_t rows, std::int64_t C) {
    const int T = std::max(1, num_chunks(rows, 16));
    std::vector<float> part(static_cast<std::size_t>(2 * T * C), 0.0f);
    parallel_for_chunks(rows, T, [&](int t, std::int64_t rb, std::int64_t re) {
      Arr pw(part.data() + 2 * t * C, C), pb(part.data() + (2 * t + 1) * C, C);
      Eigen::ArrayXf xhat(C), g(C);
      for (std::int64_t r = rb; r < re; ++r) {
        CArr X(x + r * C, C), G(dy + r * C, C);
        xhat = (X - mean[r]) * rstd[r];
        g = G * CArr(w, C);
        if (dx) {
          const float mg = g.sum() / static_cast<float>(C);
          const float mgx = (g * xhat).sum() / static_cast<float>(C);
          Arr(dx + r * C, C) += rstd[r] * (g - mg - xhat * mgx);
        }
        pw += G * xhat;
        pb += G;
      }
    });
    for (int t = 0; t < T; ++t) {
      if (dw) Arr(dw, C) += CArr(part.data() + 2 * t * C, C);
      if (db) Arr(db, C) += CArr(part.data() + (2 * t + 1) * C, C);
    }
  }

  // y (rows, C) = softmax over the last axis of x
  static void softmax_forward(float* y, const float* x, std::int64_t rows, std::int64_t C) {
    parallel_for(rows, 16, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) softmax_row(y + r * C, x + r * C, C, C, 1.0f);
    });
  }
  // dx += y (dy - sum(dy y)), from the saved output y
  static void softmax_backward(float* dx, const float* y, const float* dy, std::int64_t rows,
                               std::int64_t C) {
    parallel_for(rows, 16, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        CArr Y(y + r * C, C), G(dy + r * C, C);
        const float s = (Y * G).sum();
        Arr(dx + r * C, C) += Y * (G - s);
      }
    });
  }

  /// Attention keeps the full probability matrix on the CPU: p is (BH, T, T).
  static std::int64_t attention_aux_numel(std::int64_t BH, std::int64_t T, std::int64_t) {
    return BH * T * T;
  }
  // o (BH, T, D) = P v,  P = softmax(scale q k^T) with the causal mask (j > i masked) when
  // `causal`; P is kept in p (BH, T, T).
  static void attention_forward(float* o, float* p, const float* q, const float* k,
                                const float* v, std::int64_t BH, std::int64_t T, std::int64_t D,
                                float scale, bool causal) {
    const std::int64_t TD = T * D, TT = T * T;
    CpuGemm::gemm_batched(false, true, T, T, D, 1.0f, q, D, TD, k, D, TD, 0.0f, p, T, TT, BH);
    parallel_for(BH * T, 16, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        const std::int64_t i = r % T, valid = causal ? i + 1 : T;
        softmax_row(p + r * T, p + r * T, valid, T, scale);
      }
    });
    CpuGemm::gemm_batched(false, false, T, D, T, 1.0f, p, T, TT, v, D, TD, 0.0f, o, D, TD, BH);
  }
  // dv += P^T do;  dP = do v^T;  dS = P (dP - sum(dP P));  dq += scale dS k;  dk += scale dS^T q
  static void attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                 const float* q, const float* k, const float* v, const float* p,
                                 std::int64_t BH, std::int64_t T, std::int64_t D, float scale) {
    const std::int64_t TD = T * D, TT = T * T;
    std::vector<float> ds(static_cast<std::size_t>(TT));
    for (std::int64_t h = 0; h < BH; ++h) {
      const float* P = p + h * TT;
      if (dv) CpuGemm::gemm(true, false, T, D, T, 1.0f, P, T, dout + h * TD, D, 1.0f, dv + h * TD, D);
      if (!dq && !dk) continue;
      CpuGemm::gemm(false, true, T, T, D, 1.0f, dout + h * TD, D, v + h * TD, D, 0.0f, ds.data(), T);
      for (std::int64_t i = 0; i < T; ++i) {
        Arr S(ds.data() + i * T, T);
        CArr Pr(P + i * T, T);
        const float s = (S * Pr).sum();
        S = Pr * (S - s);
      }
      if (dq) CpuGemm::gemm(false, false, T, D, T, scale, ds.data(), T, k + h * TD, D, 1.0f, dq + h * TD, D);
      if (dk) CpuGemm::gemm(true, false, T, D, T, scale, ds.data(), T, q + h * TD, D, 1.0f, dk + h * TD, D);
    }
  }

  // loss = mean_i (lse_i - logits[i, t_i]) over N rows of V classes; saves lse (N)
  static float cross_entropy_forward(float* lse, const float* logits, const std::int32_t* targets,
                                     std::int64_t N, std::int64_t V) {
    std::vector<double> part(static_cast<std::size_t>(N));
    parallel_for(N, 8, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        CArr X(logits + r * V, V);
        const float m = X.maxCoeff();
        lse[r] = m + std::log((X - m).exp().sum());
        part[static_cast<std::size_t>(r)] = static_cast<double>(lse[r]) - logits[r * V + targets[r]];
      }
    });
    double total = 0.0;
    for (double v : part) total += v;  // serial: deterministic
    return static_cast<float>(total / static_cast<double>(N));
  }
  // dlogits[i, j] += scale (exp(logits[i, j] - lse_i) - [j == t_i]),  scale = dloss / N
  static void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                                     const std::int32_t* targets, std::int64_t N, std::int64_t V,
                                     float scale) {
    parallel_for(N, 8, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        Arr(dlogits + r * V, V) += scale * (CArr(logits + r * V, V) - lse[r]).exp();
        dlogits[r * V + targets[r]] -= scale;
      }
    });
  }

  // y (n, C) = w[ids[i], :]
  static void embedding_forward(float* y, const float* w, const std::int32_t* ids, std::int64_t n,
                                std::int64_t C) {
    parallel_for(n, 64, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i)
        std::memcpy(y + i * C, w + static_cast<std::int64_t>(ids[i]) * C, sizeof(float) * C);
    });
  }
  // dw[ids[i], :] += dy[i, :]  (scatter-add, serial: rows may repeat)
  static void embedding_backward(float* dw, const float* dy, const std::int32_t* ids,
                                 std::int64_t n, std::int64_t C) {
    for (std::int64_t i = 0; i < n; ++i)
      Arr(dw + static_cast<std::int64_t>(ids[i]) * C, C) += CArr(dy + i * C, C);
  }
  /// Smallest and largest of n int32 values (n > 0), for range checks of ids and targets.
  static void minmax_i32(const std::int32_t* x, std::int64_t n, std::int32_t& lo, std::int32_t& hi) {
    lo = hi = x[0];
    for (std::int64_t i = 1; i < n; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
  }

 private:
  // y[0:valid] = softmax(scale x[0:valid]), y[valid:C] = 0 (x and y may alias)
  static void softmax_row(float* y, const float* x, std::int64_t valid, std::int64_t C,
                          float scale) {
    CArr X(x, valid);
    const float m = X.maxCoeff() * scale;
    Arr Y(y, valid);
    Y = (X * scale - m).exp();
    Y *= 1.0f / Y.sum();
    for (std::int64_t j = valid; j < C; ++j) y[j] = 0.0f;
  }
  static int num_chunks(std::int64_t n, std::int64_t grain) {
#if defined(_OPENMP)
    return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(omp_get_max_threads(), n / grain)));
#else
    (void)n;
    (void)grain;
    return 1;
#endif
  }
  template <class Fn>
  static void parallel_for_chunks(std::int64_t n, int chunks, Fn&& fn) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) num_threads(chunks)
#endif
    for (int c = 0; c < chunks; ++c) fn(c, n * c / chunks, n * (c + 1) / chunks);
  }
};

}  // namespace cpu
}  // namespace remat
