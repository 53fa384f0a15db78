#pragma once
// SPDX-License-Identifier: MIT
// CPU backend, part 4: row kernels of neural nets: the norms (layer norm, RMSNorm), softmax,
// causal attention, cross-entropy and embedding. Shapes in comments; gradient outputs accumulate (+=).

#include <algorithm>
#include <utility>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "remat/backend/cpu/gemm.hpp"
#include "remat/backend/cpu/memory.hpp"
#include "remat/core/math.hpp"

#include "remat/core/memory.hpp"
#include "remat/ops/activation.hpp"
#include "remat/ops/cast.hpp"
#include "remat/ops/elementwise.hpp"
#include "remat/ops/layer_norm.hpp"
#include "remat/ops/rotary.hpp"

namespace remat {
struct Cpu;
namespace cpu {

/// A kernel's scratch buffer: taken from the CPU allocator (so the process's memory follows
/// the ledger) and counted in the ledger under temporaries while it lives.
template <class T>
class Scratch {
 public:
  explicit Scratch(std::size_t n)
      : bytes_(n * sizeof(T)), counted_(bytes_),
        p_(static_cast<T*>(bytes_ ? CpuMemory::allocate(bytes_) : nullptr)) {}
  ~Scratch() {
    if (p_) CpuMemory::deallocate(p_, bytes_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return bytes_ / sizeof(T); }

 private:
  std::size_t bytes_;
  detail::ScratchBytes<Cpu> counted_;
  T* p_;
};

/// Which attention the CPU backend runs (NOTE [CPU attention paths]).
enum class AttentionPath {
  from_env,      // REMAT_CPU_ATTENTION=materialized asks for P, else fused
  fused,         // lse kept, P recomputed in backward: memory linear in T (the default)
  materialized,  // P (B H, T, T) kept
};

struct CpuNn {
  using Arr = Eigen::Map<Eigen::ArrayXf>;
  using CArr = Eigen::Map<const Eigen::ArrayXf>;

  // y (n) (+)= x converted between f32 and bf16 (core/bf16.hpp's rounding); a sum in fp32,
  // rounded once
  static void run(const CastOp::Convert& k) {
    parallel_for(k.n, 1 << 14, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const float v = math::load_f32(k.x, k.from, i);
        math::store_f32(k.y, k.to, i, k.add ? math::load_f32(k.y, k.to, i) + v : v);
      }
    });
  }

  // y (rows, C) = a op b with a (a_col) or b a column (rows): one value a row
  static void run(const BinaryOp::ColumnForward& k) {
    const std::int64_t C = k.C;
    parallel_for(k.rows, 16384 / (C + 1) + 1, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        const float c = k.a_col ? k.a[r] : k.b[r];
        CArr F((k.a_col ? k.b : k.a) + r * C, C);  // the full operand's row
        Arr Y(k.y + r * C, C);
        switch (k.kind) {
          case math::BinaryKind::add: Y = F + c; break;
          case math::BinaryKind::mul: Y = F * c; break;
          case math::BinaryKind::sub: Y = k.a_col ? (c - F).eval() : (F - c).eval(); break;
          case math::BinaryKind::div: Y = k.a_col ? (c / F).eval() : (F / c).eval(); break;
          default:
            for (std::int64_t j = 0; j < C; ++j)
              Y[j] = k.a_col ? math::binary(k.kind, c, F[j]) : math::binary(k.kind, F[j], c);
        }
      }
    });
  }
  // da, db (+)= dy d(a op b)/da, /db; the column's entry of a row is the sum along that row,
  // in order (the shared scalar formulas of core/math.hpp).
  static void run(const BinaryOp::ColumnBackward& k) {
    const std::int64_t C = k.C;
    parallel_for(k.rows, 16384 / (C + 1) + 1, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        const float* g = k.dy + r * C;
        const float* ar = k.a_col ? k.a + r : k.a + r * C;
        const float* br = k.a_col ? k.b + r * C : k.b + r;
        auto av = [&](std::int64_t j) { return k.a_col ? ar[0] : ar[j]; };
        auto bv = [&](std::int64_t j) { return k.a_col ? br[j] : br[0]; };
        auto one = [&](float* d, bool col, bool set, bool wrt_a) {
          if (!d) return;
          auto grad = [&](std::int64_t j) {
            return g[j] * (wrt_a ? math::binary_grad_a(k.kind, av(j), bv(j))
                                 : math::binary_grad_b(k.kind, av(j), bv(j)));
          };
          if (col) {
            float sum = 0.0f;
            for (std::int64_t j = 0; j < C; ++j) sum += grad(j);
            d[r] = set ? sum : d[r] + sum;
            return;
          }
          float* dr = d + r * C;
          for (std::int64_t j = 0; j < C; ++j) dr[j] = set ? grad(j) : dr[j] + grad(j);
        };
        one(k.da, k.a_col, k.set_a, true);
        one(k.db, !k.a_col, k.set_b, false);
      }
    });
  }

  // y (rows, C) = (x - mean) rstd w + b; saves mean (rows), rstd (rows)
  static void run(const LayerNormOp::Forward& k) {
    if (k.t != DType::f32)
      return norm_forward_typed<true>(k.y, k.mean, k.rstd, k.x, k.w, k.b, k.rows, k.C, k.eps, k.t);
    float *y = static_cast<float*>(k.y), *mean = k.mean, *rstd = k.rstd;
    const float *x = static_cast<const float*>(k.x), *w = k.w, *b = k.b;
    const std::int64_t rows = k.rows, C = k.C;
    const float eps = k.eps;
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
  // y (rows, C) = x rstd w, rstd = 1 / sqrt(mean(x^2) + eps); saves rstd (rows)
  static void run(const RmsNormOp::Forward& k) {
    if (k.t != DType::f32)
      return norm_forward_typed<false>(k.y, nullptr, k.rstd, k.x, k.w, nullptr, k.rows, k.C, k.eps, k.t);
    const std::int64_t C = k.C;
    parallel_for(k.rows, 16, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        CArr X(static_cast<const float*>(k.x) + r * C, C);
        const float s = 1.0f / std::sqrt(X.square().sum() / static_cast<float>(C) + k.eps);
        Arr(static_cast<float*>(k.y) + r * C, C) = X * s * CArr(k.w, C);
        k.rstd[r] = s;
      }
    });
  }
  // The norms' forward on bf16 rows (t): each element widened as it is read, the sums in fp32
  // in row order, y rounded once (Centered: layer norm, else RMSNorm without mean and b).
  template <bool Centered>
  static void norm_forward_typed(void* y, float* mean, float* rstd, const void* x, const float* w,
                                 const float* b, std::int64_t rows, std::int64_t C, float eps,
                                 DType t) {
    parallel_for(rows, 16, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        const std::int64_t o = r * C;
        float m = 0.0f;
        if constexpr (Centered) {
          for (std::int64_t i = 0; i < C; ++i) m += math::load_f32(x, t, o + i);
          m /= static_cast<float>(C);
        }
        float v = 0.0f;
        for (std::int64_t i = 0; i < C; ++i) {
          const float d = math::load_f32(x, t, o + i) - m;
          v += d * d;
        }
        const float s = 1.0f / std::sqrt(v / static_cast<float>(C) + eps);
        for (std::int64_t i = 0; i < C; ++i) {
          const float xh = (math::load_f32(x, t, o + i) - m) * s;
          math::store_f32(y, t, o + i, Centered ? xh * w[i] + b[i] : xh * w[i]);
        }
        if constexpr (Centered) mean[r] = m;
        rstd[r] = s;
      }
    });
  }

  // The norms' backward (NOTE [norm backward on the CPU]).
  static void run(const LayerNormOp::Backward& k) {
    norm_backward<true>(k.dx, k.dw, k.db, k.dy, k.x, k.w, k.mean, k.rstd, k.rows, k.C, k.set_dx,
                        k.set_dw, k.set_db, scratch(k), k.dxt, k.dyt, k.xt);
  }
  static void run(const RmsNormOp::Backward& k) {
    norm_backward<false>(k.dx, k.dw, nullptr, k.dy, k.x, k.w, nullptr, k.rstd, k.rows, k.C,
                         k.set_dx, k.set_dw, false, scratch(k), k.dxt, k.dyt, k.xt);
  }
  /// Bytes of the norms' backward scratch: per chunk a row of partial sums for each of dw and
  /// db (layer norm) or dw (RMSNorm), and an xhat and a g row.
  static std::size_t scratch(const LayerNormOp::Backward& k) { return norm_scratch(2, k.rows, k.C); }
  static std::size_t scratch(const RmsNormOp::Backward& k) { return norm_scratch(1, k.rows, k.C); }

  // y (rows, F) = silu(a) b (math::swiglu); a, b rows lda, ldb apart
  static void run(const SwiGluOp::Forward& k) {
    parallel_for(k.rows, 16384 / (k.F + 1) + 1, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r)
        for (std::int64_t i = 0; i < k.F; ++i)
          math::store_f32(k.y, k.yt, r * k.F + i,
                          math::swiglu(math::load_f32(k.a, k.t, r * k.lda + i), math::load_f32(k.b, k.t, r * k.ldb + i)));
    });
  }
  // da (+)= dy b s (1 + a (1 - s)), db (+)= dy a s (math::swiglu_grad)
  static void run(const SwiGluOp::Backward& k) {
    parallel_for(k.rows, 16384 / (k.F + 1) + 1, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r)
        for (std::int64_t i = 0; i < k.F; ++i) {
          float da, db;
          math::swiglu_grad(math::load_f32(k.a, k.t, r * k.lda + i), math::load_f32(k.b, k.t, r * k.ldb + i),
                            math::load_f32(k.dy, k.dyt, r * k.F + i), da, db);
          const std::int64_t ia = r * k.lda + i, ib = r * k.ldb + i;
          if (k.da) math::store_f32(k.da, k.dt, ia, k.set_a ? da : math::load_f32(k.da, k.dt, ia) + da);
          if (k.db) math::store_f32(k.db, k.dt, ib, k.set_b ? db : math::load_f32(k.db, k.dt, ib) + db);
        }
    });
  }

  // y (batch, T, H, D) (+)= x turned pair by pair (math::rope_pair): one task a (batch, t) row
  static void run(const RopeOp::Rotate& k) {
    const std::int64_t half = k.D / 2, row = k.H * k.D;
    parallel_for(k.batch * k.T, 8, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        const std::int64_t position = k.pos0 + r % k.T;
        for (std::int64_t h = 0; h < k.H; ++h) {
          const std::int64_t o = r * row + h * k.D;
          for (std::int64_t j = 0; j < half; ++j) {
            float y0, y1;
            math::rope_pair(math::load_f32(k.x, k.xt, o + j), math::load_f32(k.x, k.xt, o + j + half), position,
                            k.f.f[j], k.inverse, y0, y1);
            if (k.add) {
              y0 += math::load_f32(k.y, k.yt, o + j);
              y1 += math::load_f32(k.y, k.yt, o + j + half);
            }
            math::store_f32(k.y, k.yt, o + j, y0);
            math::store_f32(k.y, k.yt, o + j + half, y1);
          }
        }
      }
    });
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

  // NOTE [CPU attention paths]
  // fused (the default): the forward keeps only each query row's log-sum-exp, lse (B H, T),
  //   and the backward recomputes the probabilities of kRows query rows at a time from q, k
  //   and lse: saved bytes per attention are linear in T (B H T floats besides q, k, v) and
  //   the scratch is kRows x T floats per parallel chunk (2x in backward: P and dS rows).
  //   The backward's P_ij = exp(scale s_ij - lse_i) comes from the same single-threaded GEMM
  //   of the same rows as the forward's scores, so it is the same in every replay of a
  //   checkpointed segment: gradients stay bitwise those of the plain run.
  // materialized: the forward keeps P (B H, T, T), the backward reads it (no second scores
  //   GEMM): T^2 bytes, kept for comparison (REMAT_CPU_ATTENTION=materialized, or
  //   Cpu::set_attention_path).
  // The path is read at each call: change it between steps, never between an op's forward and
  // its backward (they must agree on what the forward kept). The estimator reads it too.
  static void set_attention_path(AttentionPath p) { attention_path_slot().store(p); }
  static AttentionPath attention_path() { return attention_path_slot().load(); }
  static bool attention_fused() {
    switch (attention_path()) {
      case AttentionPath::fused: return true;
      case AttentionPath::materialized: return false;
      case AttentionPath::from_env: break;
    }
    const char* e = std::getenv("REMAT_CPU_ATTENTION");
    return !(e && std::string(e) == "materialized");
  }
  /// The backward never needs the output (the row sums of dP P stand in for dO . O).
  static bool attention_needs_output(std::int64_t) { return false; }
  /// Floats the attention op keeps besides q, k, v: lse (B H T) fused, P (B H T T) materialized.
  static std::int64_t attention_aux_numel(std::int64_t BH, std::int64_t T, std::int64_t) {
    return attention_fused() ? BH * T : BH * T * T;
  }

  // o = P v per (batch, head),  P = softmax(scale q k^T) with the causal mask (j > i masked)
  // when `causal`; aux gets lse (B H, T) (fused) or P (B H, T, T) (materialized). q, k, v, o
  // are read through AttentionLayout, so packed GPT layouts (qkv (B, T, 3C) -> o (B, T, C))
  // and grouped key/value heads (query head h reads k, v head h / G) need no copies. Query
  // rows go in blocks of kRows: the rows [r0, r1) only see keys [0, r1), so each GEMM stops
  // there (about 0.6 of the full products at T = 256). The (b, h) pairs run in parallel, each
  // with single-threaded GEMMs.
  static constexpr std::int64_t kRows = 64;
  static void attention_forward(const AttentionLayout& L, float* o, float* aux, const float* q,
                                const float* k, const float* v, float scale, bool causal) {
    const std::int64_t T = L.T, D = L.D;
    const bool fused = attention_fused();
    const int chunks = num_chunks(L.B * L.H, 1);
    const Scratch<float> scratch(attention_forward_scratch(L) / sizeof(float));
    parallel_for_chunks(L.B * L.H, chunks, [&](int c, std::int64_t hb, std::int64_t he) {
      for (std::int64_t bh = hb; bh < he; ++bh) {
        const std::int64_t qo = L.q_offset(bh), ko = L.kv_offset(bh), oo = L.o_offset(bh);
        const float *Q = q + qo, *K = k + ko, *V = v + ko;
        float* O = o + oo;
        for (std::int64_t r0 = 0; r0 < T; r0 += kRows) {
          const std::int64_t r1 = std::min(T, r0 + kRows), rows = r1 - r0;
          const std::int64_t keys = causal ? r1 : T;  // keys this row block can see
          // P rows [r0, r1): in the kept P, or in this chunk's scratch (fused)
          float* P = fused ? scratch.data() + static_cast<std::size_t>(c) * kRows * T
                           : aux + bh * T * T + r0 * T;
          CpuGemm::gemm(false, true, rows, keys, D, 1.0f, Q + r0 * L.q_row, L.q_row, K, L.kv_row,
                        0.0f, P, T);
          for (std::int64_t i = 0; i < rows; ++i) {
            const float lse = softmax_row(P + i * T, P + i * T, causal ? r0 + i + 1 : T, T, scale);
            if (fused) aux[bh * T + r0 + i] = lse;
          }
          CpuGemm::gemm(false, false, rows, D, keys, 1.0f, P, T, V, L.kv_row, 0.0f,
                        O + r0 * L.o_row, L.o_row);
        }
      }
    });
  }
  // dv += P^T do;  dP = do v^T;  dS = P (dP - sum(dP P));  dq += scale dS k;  dk += scale dS^T q
  // (in the same row blocks: entries of P past the causal limit are 0 and contribute nothing).
  // Fused: P's rows are first recomputed, P_ij = exp(scale q_i k_j - lse_i). dq uses q's
  // layout, dk and dv k's, dout o's. The (batch, key/value head) pairs run in parallel; each
  // walks its G query heads in order, so dk and dv sum over them in a fixed order (G = 1: one).
  // set_q/k/v: that gradient holds no values yet; it is zeroed here, then added into (dk and
  // dv sum over the row blocks and the group's heads)
  static void attention_backward(const AttentionLayout& L, float* dq, float* dk, float* dv,
                                 const float* dout, const float*, const float* q, const float* k,
                                 const float* v, const float* aux, float scale, bool causal,
                                 bool set_q = false, bool set_k = false, bool set_v = false) {
    const std::int64_t T = L.T, D = L.D, KVH = L.KVH();
    if (dq && set_q)
      for (std::int64_t bh = 0; bh < L.B * L.H; ++bh)
        for (std::int64_t t = 0; t < T; ++t) std::fill_n(dq + L.q_offset(bh) + t * L.q_row, D, 0.0f);
    for (auto [d, set] : {std::pair<float*, bool>{dk, set_k}, {dv, set_v}})
      if (d && set)
        for (std::int64_t bh = 0; bh < L.B * L.H; bh += L.G)  // the first head of each group
          for (std::int64_t t = 0; t < T; ++t) std::fill_n(d + L.kv_offset(bh) + t * L.kv_row, D, 0.0f);
    const bool fused = attention_fused();
    const int chunks = num_chunks(L.B * KVH, 1);
    const Scratch<float> scratch(attention_backward_scratch(L) / sizeof(float));
    parallel_for_chunks(L.B * KVH, chunks, [&](int c, std::int64_t gb, std::int64_t ge) {
      float* ds = scratch.data() + static_cast<std::size_t>(c) * (fused ? 2 : 1) * kRows * T;
      float* pr = ds + kRows * T;  // fused: the recomputed P rows
      for (std::int64_t bh = gb * L.G; bh < ge * L.G; ++bh) {  // a group's heads in order
        const std::int64_t qo = L.q_offset(bh), ko = L.kv_offset(bh), oo = L.o_offset(bh);
        const float* dO = dout + oo;
        for (std::int64_t r0 = 0; r0 < T; r0 += kRows) {
          const std::int64_t r1 = std::min(T, r0 + kRows), rows = r1 - r0;
          const std::int64_t keys = causal ? r1 : T;
          const float* Pb = aux + bh * T * T + r0 * T;
          if (fused) {
            CpuGemm::gemm(false, true, rows, keys, D, 1.0f, q + qo + r0 * L.q_row, L.q_row, k + ko,
                          L.kv_row, 0.0f, pr, T);
            for (std::int64_t i = 0; i < rows; ++i) {
              const std::int64_t valid = causal ? r0 + i + 1 : T;
              Arr R(pr + i * T, valid);
              R = (R * scale - aux[bh * T + r0 + i]).exp();
              for (std::int64_t j = valid; j < keys; ++j) pr[i * T + j] = 0.0f;
            }
            Pb = pr;
          }
          const float* dOb = dO + r0 * L.o_row;
          if (dv) CpuGemm::gemm(true, false, keys, D, rows, 1.0f, Pb, T, dOb, L.o_row, 1.0f, dv + ko, L.kv_row);
          if (!dq && !dk) continue;
          CpuGemm::gemm(false, true, rows, keys, D, 1.0f, dOb, L.o_row, v + ko, L.kv_row, 0.0f, ds, keys);
          for (std::int64_t i = 0; i < rows; ++i) {
            Arr S(ds + i * keys, keys);
            CArr Pr(Pb + i * T, keys);
            const float s = (S * Pr).sum();
            S = Pr * (S - s);
          }
          if (dq) CpuGemm::gemm(false, false, rows, D, keys, scale, ds, keys, k + ko, L.kv_row, 1.0f,
                                dq + qo + r0 * L.q_row, L.q_row);
          if (dk) CpuGemm::gemm(true, false, keys, D, rows, scale, ds, keys, q + qo + r0 * L.q_row,
                                L.q_row, 1.0f, dk + ko, L.kv_row);
        }
      }
    });
  }

  /// Bytes of the P rows the fused attention_forward computes in (kRows x T per parallel
  /// chunk); 0 when materialized (it writes the kept P).
  static std::size_t attention_forward_scratch(const AttentionLayout& L) {
    if (!attention_fused()) return 0;
    return static_cast<std::size_t>(num_chunks(L.B * L.H, 1) * kRows * L.T) * sizeof(float);
  }
  /// Bytes of the dS rows attention_backward allocates (kRows x T per parallel chunk of
  /// (batch, key/value head) pairs), and of the recomputed P rows beside them when fused.
  static std::size_t attention_backward_scratch(const AttentionLayout& L) {
    const std::int64_t per_chunk = (attention_fused() ? 2 : 1) * kRows * L.T;
    return static_cast<std::size_t>(num_chunks(L.B * L.KVH(), 1) * per_chunk) * sizeof(float);
  }

  /// Bytes of the per-row losses cross_entropy_forward sums (in doubles, serially).
  static std::size_t cross_entropy_forward_scratch(std::int64_t N) {
    return static_cast<std::size_t>(N) * sizeof(double);
  }

  static std::size_t scratch(const CrossEntropyOp::Forward& k) {
    return cross_entropy_forward_scratch(k.N) + (k.t == DType::f32 ? 0 : cross_entropy_rows(k.N, k.V));
  }
  static std::size_t scratch(const CrossEntropyOp::Backward& k) {
    return k.dt == DType::f32 && k.lt == DType::f32 ? 0 : cross_entropy_rows(k.N, k.V);
  }
  /// Bytes of the fp32 rows the bf16 cross-entropy works in: one row of V per parallel chunk
  /// (an even count of floats: forward's rows follow its doubles in one scratch).
  static std::size_t cross_entropy_rows(std::int64_t N, std::int64_t V) {
    const std::size_t floats = static_cast<std::size_t>(num_chunks(N, 8)) * static_cast<std::size_t>(V);
    return (floats + floats % 2) * sizeof(float);
  }
  // The bf16 cross-entropy, in functions of their own: each row widened into this chunk's fp32
  // row, then as f32. Forward: lse and the row losses (part), in the rows (cross_entropy_rows).
  static void cross_entropy_rows_forward(const CrossEntropyOp::Forward& k, double* part, float* rows) {
    const std::int64_t N = k.N, V = k.V, ld = k.ld;
    parallel_for_chunks(N, num_chunks(N, 8), [&](int c, std::int64_t rb, std::int64_t re) {
      float* x = rows + static_cast<std::size_t>(c) * V;
      for (std::int64_t r = rb; r < re; ++r) {
        widen_row(x, k.logits, k.t, r * ld, V);
        CArr X(x, V);
        const float m = X.maxCoeff();
        k.lse[r] = m + std::log((X - m).exp().sum());
        part[r] = static_cast<double>(k.lse[r]) - x[k.targets[r]];
      }
    });
  }
  // Backward: each row read whole before it is written (dlogits may be the logits), the
  // target's term subtracted (and an old value added) before the one rounding.
  static void cross_entropy_rows_backward(const CrossEntropyOp::Backward& k, float scale,
                                          float* rows) {
    const std::int64_t N = k.N, V = k.V, ld = k.ld;
    parallel_for_chunks(N, num_chunks(N, 8), [&](int c, std::int64_t rb, std::int64_t re) {
      float* x = rows + static_cast<std::size_t>(c) * V;
      for (std::int64_t r = rb; r < re; ++r) {
        widen_row(x, k.logits, k.lt, r * ld, V);
        Arr X(x, V);
        X = scale * (X - k.lse[r]).exp();
        x[k.targets[r]] -= scale;
        for (std::int64_t i = 0; i < V; ++i) {
          const std::int64_t e = r * ld + i;
          math::store_f32(k.dlogits, k.dt, e, k.set ? x[i] : math::load_f32(k.dlogits, k.dt, e) + x[i]);
        }
        if (k.set)
          for (std::int64_t i = V; i < ld; ++i) math::store_f32(k.dlogits, k.dt, r * ld + i, 0.0f);
      }
    });
  }
  // One row of V elements of either type as fp32 in x (bf16 widened: exact).
  static void widen_row(float* x, const void* p, DType t, std::int64_t at, std::int64_t V) {
    if (t == DType::f32) {
      std::memcpy(x, static_cast<const float*>(p) + at, sizeof(float) * static_cast<std::size_t>(V));
      return;
    }
    const bf16* h = static_cast<const bf16*>(p) + at;
    for (std::int64_t i = 0; i < V; ++i) x[i] = math::from_bf16(h[i]);
  }
  // CrossEntropyOp::Forward: lse (N), the row losses summed in double, in order; bf16 logits
  // widened a row at a time into fp32 scratch (the max, then the sum of exponentials in fp32)
  static void run(const CrossEntropyOp::Forward& k) {
    const std::int64_t N = k.N, V = k.V, ld = k.ld;
    float *loss = k.loss, *lse = k.lse;
    const std::int32_t* targets = k.targets;
    // one scratch of scratch(k) bytes, as the estimate holds: N doubles, then bf16's rows
    const Scratch<double> part(scratch(k) / sizeof(double));
    if (k.t == DType::f32) {
      const float* logits = static_cast<const float*>(k.logits);
      parallel_for(N, 8, [&](std::int64_t rb, std::int64_t re) {
        for (std::int64_t r = rb; r < re; ++r) {
          CArr X(logits + r * ld, V);
          const float m = X.maxCoeff();
          lse[r] = m + std::log((X - m).exp().sum());
          part.data()[r] = static_cast<double>(lse[r]) - logits[r * ld + targets[r]];
        }
      });
    } else {
      cross_entropy_rows_forward(k, part.data(), reinterpret_cast<float*>(part.data() + N));
    }
    double total = 0.0;
    for (std::int64_t i = 0; i < N; ++i) total += part.data()[i];  // serial: deterministic
    loss[0] = static_cast<float>(total / static_cast<double>(N));
  }
  // CrossEntropyOp::Backward (dlogits may be the logits with set: each element is read before
  // it is written). bf16 logits or dlogits: a row at a time in fp32 scratch, the target's term
  // subtracted (and a gradient's old value added) before the one rounding.
  static void run(const CrossEntropyOp::Backward& k) {
    const std::int64_t N = k.N, V = k.V, ld = k.ld;
    const float* lse = k.lse;
    const std::int32_t* targets = k.targets;
    const bool set = k.set;
    const float scale = k.dloss[0] / static_cast<float>(N);
    const Scratch<float> rows(scratch(k) / sizeof(float));  // as the estimate holds (f32: none)
    if (k.dt != DType::f32 || k.lt != DType::f32) {
      cross_entropy_rows_backward(k, scale, rows.data());
      return;
    }
    float* dlogits = static_cast<float*>(k.dlogits);
    const float* logits = static_cast<const float*>(k.logits);
    parallel_for(N, 8, [&](std::int64_t rb, std::int64_t re) {
      for (std::int64_t r = rb; r < re; ++r) {
        if (set) {
          Arr(dlogits + r * ld, V) = scale * (CArr(logits + r * ld, V) - lse[r]).exp();
          Arr(dlogits + r * ld + V, ld - V).setZero();
        } else {
          Arr(dlogits + r * ld, V) += scale * (CArr(logits + r * ld, V) - lse[r]).exp();
        }
        dlogits[r * ld + targets[r]] -= scale;
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
  // dw[ids[i], :] += dy[i, :] for i in order (dw is [V, C]; serial: rows may repeat, and the
  // order of the sum is the tokens' order, as on CUDA, so both give the same bits); with set,
  // dw is zeroed first
  static void embedding_backward(float* dw, const float* dy, const std::int32_t* ids,
                                 std::int64_t n, std::int64_t V, std::int64_t C, bool set = false) {
    if (set) Arr(dw, V * C).setZero();
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
  // y[0:valid] = softmax(scale x[0:valid]), y[valid:C] = 0 (x and y may alias); returns the
  // row's log-sum-exp, log sum_j exp(scale x_j)
  static float softmax_row(float* y, const float* x, std::int64_t valid, std::int64_t C,
                           float scale) {
    CArr X(x, valid);
    const float m = X.maxCoeff() * scale;
    Arr Y(y, valid);
    Y = (X * scale - m).exp();
    const float sum = Y.sum();
    Y *= 1.0f / sum;
    for (std::int64_t j = valid; j < C; ++j) y[j] = 0.0f;
    return m + std::log(sum);
  }
  static std::atomic<AttentionPath>& attention_path_slot() {
    static std::atomic<AttentionPath> p{AttentionPath::from_env};
    return p;
  }
  static int norm_chunks(std::int64_t rows) { return std::max(1, num_chunks(rows, 16)); }
  static std::size_t norm_scratch(int sums, std::int64_t rows, std::int64_t C) {
    return static_cast<std::size_t>((sums + 2) * norm_chunks(rows) * C) * sizeof(float);
  }
  // NOTE [norm backward on the CPU]
  // xhat = (x - mean) rstd (Centered: layer norm) or x rstd (RMSNorm), g = dy w:
  //   dx (+)= rstd (g - mean(g) - xhat mean(g xhat))   (RMSNorm: without the mean(g) term),
  //   dw (+)= sum_rows dy xhat,  db (+)= sum_rows dy    (RMSNorm: no db).
  // The rows go in chunks, one a thread; each chunk sums dw and db in its own rows of the
  // scratch, then the chunks are added in order: deterministic for a fixed thread count.
  // Scratch: per chunk a row for each sum, then per chunk an xhat and a g row (no heap behind
  // the ledger). set_*: that buffer holds no values yet and is written (=), not added into.
  // x, dy and dx may be bf16 (xt, dyt, dxt): x's and dy's rows are widened into the xhat and
  // g rows, dx rounded once as it is stored.
  template <bool Centered>
  static void norm_backward(void* dx, float* dw, float* db, const void* dy, const void* x,
                            const float* w, const float* mean, const float* rstd,
                            std::int64_t rows, std::int64_t C, bool set_dx, bool set_dw,
                            bool set_db, std::size_t scratch_bytes, DType dxt, DType dyt, DType xt) {
    const int T = norm_chunks(rows), sums = Centered ? 2 : 1;
    const Scratch<float> part(scratch_bytes / sizeof(float));
    std::fill(part.data(), part.data() + sums * T * C, 0.0f);
    float* rows_of = part.data() + sums * T * C;  // the chunks' xhat and g rows
    parallel_for_chunks(rows, T, [&](int t, std::int64_t rb, std::int64_t re) {
      Arr pw(part.data() + sums * t * C, C);
      Arr xhat(rows_of + 2 * t * C, C), g(rows_of + (2 * t + 1) * C, C);
      for (std::int64_t r = rb; r < re; ++r) {
        const std::int64_t o = r * C;
        if (xt == DType::f32) xhat = CArr(static_cast<const float*>(x) + o, C);
        else for (std::int64_t i = 0; i < C; ++i) xhat[i] = math::load_f32(x, xt, o + i);
        if constexpr (Centered) xhat = (xhat - mean[r]) * rstd[r];
        else xhat = xhat * rstd[r];
        if (dyt == DType::f32) g = CArr(static_cast<const float*>(dy) + o, C);  // dy, for now
        else for (std::int64_t i = 0; i < C; ++i) g[i] = math::load_f32(dy, dyt, o + i);
        pw += g * xhat;
        if constexpr (Centered) Arr(part.data() + (2 * t + 1) * C, C) += g;
        g *= CArr(w, C);
        if (dx) {
          const float mg = Centered ? g.sum() / static_cast<float>(C) : 0.0f;
          const float mgx = (g * xhat).sum() / static_cast<float>(C);
          if (dxt == DType::f32) {
            Arr D(static_cast<float*>(dx) + o, C);
            if (set_dx) D = rstd[r] * (g - mg - xhat * mgx);
            else D += rstd[r] * (g - mg - xhat * mgx);
          } else {
            for (std::int64_t i = 0; i < C; ++i) {
              const float d = rstd[r] * (g[i] - mg - xhat[i] * mgx);
              math::store_f32(dx, dxt, o + i, set_dx ? d : math::load_f32(dx, dxt, o + i) + d);
            }
          }
        }
      }
    });
    if (dw && set_dw) std::fill(dw, dw + C, 0.0f);  // C floats: the sum's first term
    if (db && set_db) std::fill(db, db + C, 0.0f);
    for (int t = 0; t < T; ++t) {
      if (dw) Arr(dw, C) += CArr(part.data() + sums * t * C, C);
      if (db) Arr(db, C) += CArr(part.data() + (2 * t + 1) * C, C);
    }
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
