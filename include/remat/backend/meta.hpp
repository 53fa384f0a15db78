#pragma once
// SPDX-License-Identifier: MIT
// Meta<Target>: a shape-only twin of backend Target. Buffers have sizes and go through their
// own ledger (memory_stats<Meta<Target>>()), kernels compute nothing, and the kernels' scratch
// buffers are counted with Target's own size formulas. The real code path (modules, ops, the
// tape, checkpoint() with its replays, the optimizer) runs unchanged on it, so its ledger is
// the ledger Target would keep, to the byte, in microseconds. Used by remat::estimate_memory.

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "remat/backend/backend.hpp"
#include "remat/backend/update_list.hpp"
#include "remat/core/work.hpp"
#include "remat/core/error.hpp"
#include "remat/core/kernel.hpp"
#include "remat/core/memory.hpp"
#include "remat/core/shape.hpp"

namespace remat {

/// True for backends the estimator can mirror: those that publish their kernels' scratch sizes
/// (the CPU; the CUDA backend and its host-only model, CudaModel in backend/cuda/model.hpp).
template <class B, class = void>
struct has_meta_twin : std::false_type {};
template <class B>
struct has_meta_twin<B, std::void_t<decltype(B::attention_backward_scratch(AttentionLayout{})),
                                    decltype(B::cross_entropy_forward_scratch(0))>>
    : std::true_type {};
template <class B>
inline constexpr bool has_meta_twin_v = has_meta_twin<B>::value;

namespace detail {
// Optional parts of a twin: a model of the allocator's reserved bytes (a pool type with
// allocate/deallocate/reserved_bytes/...; the CUDA backend has one), and scratch formulas of
// kernels that only some backends give scratch (none means 0 bytes).
template <class B, class = void>
struct has_reserved_model : std::false_type {};
template <class B>
struct has_reserved_model<B, std::void_t<typename B::ReservedModel>> : std::true_type {};
template <class B, class = void>
struct has_binary_scratch : std::false_type {};
template <class B>
struct has_binary_scratch<B, std::void_t<decltype(B::binary_backward_scratch(0, 0, false, false))>>
    : std::true_type {};
template <class B, class = void>
struct has_attention_forward_scratch : std::false_type {};
template <class B>
struct has_attention_forward_scratch<B, std::void_t<decltype(B::attention_forward_scratch(AttentionLayout{}))>>
    : std::true_type {};
template <class B, class = void>
struct has_linear_scratch : std::false_type {};
template <class B>
struct has_linear_scratch<B, std::void_t<decltype(B::linear_forward_scratch(0, 0, 0)),
                                         decltype(B::linear_backward_weight_scratch(0, 0, 0)),
                                         decltype(B::linear_gelu_forward_scratch(0, 0, 0)),
                                         decltype(B::linear_dgelu_backward_scratch(0, 0, 0))>>
    : std::true_type {};
template <class B, class = void>
struct has_reduce_scratch : std::false_type {};
template <class B>
struct has_reduce_scratch<B, std::void_t<decltype(B::reduce_forward_scratch(0, 0, 0))>>
    : std::true_type {};
template <class B, class = void>
struct has_sum_squares_scratch : std::false_type {};
template <class B>
struct has_sum_squares_scratch<B, std::void_t<decltype(B::sum_squares_scratch(0))>>
    : std::true_type {};
}  // namespace detail

// NOTE [shape-only backend]
// - allocate() hands out one dummy address: nothing ever reads or writes through it, since
//   every kernel is empty. Values that reach the host (loss.item(), to_vector) read as zeros,
//   token range checks see ids 0, sums of squares are 0 (gradient clipping never scales).
// - Checkpoint replays still run (the tape decides what to replay, not the values), but
//   verify_values() has nothing to hash and is ignored.
// - Kernel scratch is counted through Target's *_scratch(...) formulas, which Target's kernels
//   themselves size their buffers with, so the two ledgers cannot drift apart.
// - Where Target has a ReservedModel (the CUDA caching allocator's pool over a counting
//   device), every buffer and scratch block goes through it in the same order as on Target,
//   so reserved_bytes()/peak_reserved_bytes() are what Target's allocator would reserve.
// - Every kernel adds its FLOPs and compulsory bytes to work() (core/work.hpp; 4-byte
//   floats), so the estimate also says what the step asks of the device (plan/roofline.hpp).
template <class Target>
struct Meta {
  static constexpr const char* name = "meta";
  static constexpr bool is_meta = true;
  using target = Target;

  static constexpr bool models_reserved = detail::has_reserved_model<Target>::value;

  // ---- memory ---------------------------------------------------------------------------
  static void* allocate(std::size_t bytes) {
    if constexpr (models_reserved) {
      void* p = pool().allocate(bytes);
      REMAT_CHECK(p != nullptr, "remat::Meta::allocate: the counting device refused ", bytes,
                  " bytes (expected it to have room for everything)");
      return p;
    } else {
      (void)bytes;
      return address();
    }
  }
  static void deallocate(void* p, std::size_t) noexcept {
    if constexpr (models_reserved) pool().deallocate(p);
    else (void)p;
  }
  /// What Target's allocator would reserve now and at its peak (0 without a ReservedModel).
  static std::size_t reserved_bytes() {
    if constexpr (models_reserved) return pool().reserved_bytes();
    else return 0;
  }
  static std::size_t peak_reserved_bytes() {
    if constexpr (models_reserved) return pool().peak_reserved_bytes();
    else return 0;
  }
  /// Starts a fresh model of the allocator: cached segments returned, peak reset.
  static void reset_reserved() {
    if constexpr (models_reserved) {
      pool().release_cached();
      pool().reset_peak_reserved();
    }
  }
  /// The work the kernels asked for since the last reset_work() (core/work.hpp).
  static Work& work() {
    static Work w;
    return w;
  }
  static void reset_work() { work() = Work{}; }

  static void copy_from_host(void*, const void*, std::size_t) {}
  static void copy_to_host(void* dst, const void*, std::size_t bytes) { std::memset(dst, 0, bytes); }
  static void copy(void*, const void*, std::size_t bytes) { count(WorkKind::pointwise, 0, 2.0 * bytes); }
  static void fill(float*, std::int64_t n, float) { count(WorkKind::pointwise, 0, F * n); }
  static void iota(std::int32_t*, std::int64_t n) { count(WorkKind::pointwise, 0, 4.0 * n); }
  static void synchronize() {}
  static int num_threads() { return Target::num_threads(); }
  static std::string describe() { return std::string("meta (shapes only) of ") + Target::describe(); }

  // ---- GEMM -----------------------------------------------------------------------------
  // C (m x n) = A (m x k) B (k x n) (+ C when beta != 0): 2 m n k FLOPs
  static void gemm(bool, bool, std::int64_t m, std::int64_t n, std::int64_t k, float, const float*,
                   std::int64_t, const float*, std::int64_t, float beta, float*, std::int64_t) {
    count_gemm(m, n, k, beta, 1);
  }
  static void gemm_batched(bool, bool, std::int64_t m, std::int64_t n, std::int64_t k, float,
                           const float*, std::int64_t, std::int64_t, const float*, std::int64_t,
                           std::int64_t, float beta, float*, std::int64_t, std::int64_t,
                           std::int64_t batch) {
    count_gemm(m, n, k, beta, batch);
  }
  // the dense layer's GEMMs with their bias (the Target's GEMM workspace, if it has one)
  static void linear_forward(float*, const float*, const float*, const float* b, const float* r,
                             std::int64_t rows, std::int64_t in, std::int64_t out) {
    count(WorkKind::gemm, 2.0 * rows * in * out,
          F * (rows * in + in * out + rows * out * (r ? 2 : 1) + (b ? out : 0)));
    if constexpr (detail::has_linear_scratch<Target>::value) {
      const Scratch s(Target::linear_forward_scratch(rows, in, out));
    }
  }
  static void linear_backward_weight(float*, float* db, const float*, const float*, std::int64_t rows,
                                     std::int64_t in, std::int64_t out, float beta) {
    count(WorkKind::gemm, 2.0 * rows * in * out,
          F * (rows * in + rows * out + in * out * (beta != 0.0f ? 2 : 1) + (db ? out : 0)));
    if constexpr (detail::has_linear_scratch<Target>::value) {
      const Scratch s(Target::linear_backward_weight_scratch(rows, in, out));
    }
  }

  // the MLP's first GEMM (writes pre) and its GELU (reads pre, writes act), and the GELU
  // gradient's GEMM
  static void linear_gelu_forward(float*, float*, const float*, const float*, const float*,
                                  std::int64_t rows, std::int64_t in, std::int64_t hidden) {
    count(WorkKind::gemm, 2.0 * rows * in * hidden,
          F * (rows * in + in * hidden + rows * hidden + hidden));
    count(WorkKind::pointwise, 20.0 * rows * hidden, F * 2 * rows * hidden);
    if constexpr (detail::has_linear_scratch<Target>::value) {
      const Scratch s(Target::linear_gelu_forward_scratch(rows, in, hidden));
    }
  }
  static void linear_dgelu_backward(float*, float* db, const float*, const float*, const float*,
                                    std::int64_t rows, std::int64_t hidden, std::int64_t out) {
    count(WorkKind::gemm, 2.0 * rows * hidden * out,
          F * (rows * out + hidden * out + 2 * rows * hidden + (db ? hidden : 0)));
    count(WorkKind::pointwise, 30.0 * rows * hidden, 0);  // GELU', in the GEMM's epilogue
    if constexpr (detail::has_linear_scratch<Target>::value) {
      const Scratch s(Target::linear_dgelu_backward_scratch(rows, hidden, out));
    }
  }

  // ---- pointwise ------------------------------------------------------------------------
  static void add_into(float*, const float*, std::int64_t n) { count(WorkKind::pointwise, n, 3 * F * n); }
  static void broadcast_rows(float*, const float*, std::int64_t rows, std::int64_t C) {
    count(WorkKind::pointwise, 0, F * (rows * C + C));
  }
  // a broadcast operand is read once (inner elements), a full one outer x inner times
  static void binary_forward(math::BinaryKind, float*, const float*, const float*, std::int64_t outer,
                             std::int64_t inner, bool a_bc, bool b_bc) {
    const double full = static_cast<double>(outer) * inner;
    count(WorkKind::pointwise, full, F * (full * (1 + !a_bc + !b_bc) + inner * (a_bc + b_bc)));
  }
  // reads dy (and the operands for mul and div), writes each gradient asked for
  static void binary_backward(math::BinaryKind kind, float* da, float* db, const float*, const float*,
                              const float*, std::int64_t outer, std::int64_t inner, bool a_bc,
                              bool b_bc, bool = false, bool = false) {
    const double full = static_cast<double>(outer) * inner;
    const bool operands = kind != math::BinaryKind::add && kind != math::BinaryKind::sub;
    count(WorkKind::pointwise, full * ((da != nullptr) + (db != nullptr)),
          F * full * (1 + (operands ? 2 : 0) + (da && !a_bc) + (db && !b_bc)) +
              F * inner * ((da && a_bc) + (db && b_bc)));
    if constexpr (detail::has_binary_scratch<Target>::value) {
      const Scratch s(Target::binary_backward_scratch(outer, inner, da && a_bc, db && b_bc));
    } else {
      (void)da, (void)db, (void)outer, (void)inner, (void)a_bc, (void)b_bc;
    }
  }
  // unary maps: read x (and dy), write y (dx); a few FLOPs an element (GELU's tanh: about 20)
  static void affine_forward(float*, const float*, std::int64_t n, float, float) { unary(n, 2, 2); }
  static void affine_backward(float*, const float*, std::int64_t n, float) { unary(n, 1, 2); }
  static void gelu_forward(float*, const float*, std::int64_t n) { unary(n, 20, 2); }
  static void gelu_backward(float*, const float*, const float*, std::int64_t n, bool = false) { unary(n, 30, 3); }
  static void relu_forward(float*, const float*, std::int64_t n) { unary(n, 1, 2); }
  static void relu_backward(float*, const float*, const float*, std::int64_t n) { unary(n, 1, 3); }
  static void tanh_forward(float*, const float*, std::int64_t n) { unary(n, 10, 2); }
  static void tanh_backward(float*, const float*, const float*, std::int64_t n) { unary(n, 3, 3); }
  static void unary_forward(math::UnaryKind, float*, const float*, std::int64_t n, float, float) {
    unary(n, 10, 2);
  }
  static void unary_backward(math::UnaryKind, float*, const float*, const float*, std::int64_t n,
                             float, float, bool = false) { unary(n, 12, 3); }
  // reads the mask and the one or two operands, writes y
  static void where_forward(float*, const float*, const float*, const float* b, float,
                            std::int64_t n) { unary(n, 1, b ? 4 : 3); }
  // reads the mask and dy, writes (or adds into) each gradient asked for
  static void where_backward(float* da, float* db, const float*, const float*, std::int64_t n,
                             bool = false, bool = false) {
    unary(n, 1, 2 + (da != nullptr) + (db != nullptr));
  }
  static void dropout_forward(float*, const float*, std::int64_t n, float, std::uint64_t,
                              std::uint64_t) { unary(n, 20, 2); }
  static void dropout_backward(float*, const float*, std::int64_t n, float, std::uint64_t,
                               std::uint64_t, bool = false) { unary(n, 20, 2); }
  static void reduce_forward(float*, const float*, std::int64_t outer, std::int64_t len,
                             std::int64_t inner, float) {
    count(WorkKind::pointwise, 1.0 * outer * len * inner, F * (1.0 * outer * len * inner + outer * inner));
    if constexpr (detail::has_reduce_scratch<Target>::value) {  // (none when not split)
      if (const std::size_t bytes = Target::reduce_forward_scratch(outer, len, inner); bytes > 0) {
        const Scratch s(bytes);
      }
    }
  }
  static void reduce_backward(float*, const float*, std::int64_t outer, std::int64_t len,
                              std::int64_t inner, float) {
    count(WorkKind::pointwise, 1.0 * outer * len * inner, F * (2.0 * outer * len * inner + outer * inner));
  }
  static void max_forward(float*, const float*, std::int64_t outer, std::int64_t len,
                          std::int64_t inner) {
    count(WorkKind::pointwise, 1.0 * outer * len * inner, F * (1.0 * outer * len * inner + outer * inner));
  }
  // reads x up to the max (counted whole), y and dy; adds into one element per column
  static void max_backward(float*, const float*, const float*, const float*, std::int64_t outer,
                           std::int64_t len, std::int64_t inner) {
    count(WorkKind::pointwise, 1.0 * outer * len * inner, F * (1.0 * outer * len * inner + 4.0 * outer * inner));
  }
  static void copy_block(float*, std::int64_t, std::int64_t, const float*, std::int64_t,
                         std::int64_t, std::int64_t len, std::int64_t outer, std::int64_t inner,
                         bool accumulate) {
    count(WorkKind::pointwise, 0, F * (accumulate ? 3.0 : 2.0) * outer * len * inner);
  }
  static void permute(float*, const float*, const Shape& xshape, const int*, bool accumulate) {
    count(WorkKind::pointwise, 0, F * (accumulate ? 3.0 : 2.0) * xshape.numel());
  }

  // ---- op kernels (NOTE [op kernels] in core/kernel.hpp): what the kernel says it asks of a
  // device, and a scratch of Target's size for it, if Target takes one --------------------
  template <class K>
  static void run(const K& k) {
    k.work(work());
    if constexpr (detail::backend_has_scratch<Target, K>::value) {
      const Scratch s(Target::scratch(k));
    }
  }

  // ---- nn kernels: Target's layout decisions and scratch sizes, no arithmetic -------------
  static void softmax_forward(float*, const float*, std::int64_t rows, std::int64_t n) {
    count(WorkKind::norm, 4.0 * rows * n, F * 2.0 * rows * n);
  }
  static void softmax_backward(float*, const float*, const float*, std::int64_t rows, std::int64_t n) {
    count(WorkKind::norm, 3.0 * rows * n, F * 3.0 * rows * n);
  }
  static bool attention_needs_output(std::int64_t D) { return Target::attention_needs_output(D); }
  static std::int64_t attention_aux_numel(std::int64_t BH, std::int64_t T, std::int64_t D) {
    return Target::attention_aux_numel(BH, T, D);
  }
  // Fused: S = Q K^T and O = P V, 2 products of 2 T T D FLOPs per (batch, head), about half
  // of the pairs when causal; q, k, v in, o and lse out. Backward: dq's kernel recomputes S and
  // dP and forms dQ, dk/dv's recomputes S and dP and forms dK and dV (7 products); reads q, k,
  // v, o, dO, lse, delta, writes dq, dk, dv.
  static void attention_forward(const AttentionLayout& L, float*, float*, const float*,
                                const float*, const float*, float, bool causal) {
    count(WorkKind::attention, 2 * attention_pair_flops(L, causal), F * L.B * L.H * L.T * (4.0 * L.D + 1));
    if constexpr (detail::has_attention_forward_scratch<Target>::value) {
      const Scratch s(Target::attention_forward_scratch(L));
    } else {
      (void)L;
    }
  }
  static void attention_backward(const AttentionLayout& L, float*, float*, float*, const float*,
                                 const float*, const float*, const float*, const float*,
                                 const float*, float, bool causal, bool = false, bool = false,
                                 bool = false) {
    count(WorkKind::attention, 7 * attention_pair_flops(L, causal), F * L.B * L.H * L.T * (8.0 * L.D + 3));
    const Scratch s(Target::attention_backward_scratch(L));
  }
  // rows gathered (N of C); backward: the table's V rows written, the N gradient rows read
  static void embedding_forward(float*, const float*, const std::int32_t*, std::int64_t N,
                                std::int64_t C) {
    count(WorkKind::embedding, 0, F * 2.0 * N * C + 4.0 * N);
  }
  static void embedding_backward(float*, const float*, const std::int32_t*, std::int64_t N,
                                 std::int64_t V, std::int64_t C, bool = false) {
    count(WorkKind::embedding, 1.0 * N * C, F * (1.0 * N * C + 1.0 * V * C) + 4.0 * N);
  }
  static void minmax_i32(const std::int32_t*, std::int64_t, std::int32_t& lo, std::int32_t& hi) {
    lo = hi = 0;
  }

  // ---- optimizers -----------------------------------------------------------------------
  // AdamW: p, g, m, v read, p, m, v written (7 floats an element); SGD: p, g, buffer
  static void adamw_update(float*, const float*, float*, float*, std::int64_t n, float, float,
                           float, float, float, float, float) {
    count(WorkKind::optimizer, 15.0 * n, 7 * F * n);
  }
  static void sgd_update(float*, const float*, float* buf, std::int64_t n, float, float, float, bool,
                         bool) {
    count(WorkKind::optimizer, 3.0 * n, F * n * (buf ? 5 : 3));
  }
  static void adamw_update_many(const UpdateSlice* s, std::size_t count_, float, float, float, float,
                                float, float, float) {
    for (std::size_t i = 0; i < count_; ++i) adamw_update(nullptr, nullptr, nullptr, nullptr, s[i].n, 0, 0, 0, 0, 0, 0, 0);
  }
  static void sgd_update_many(const UpdateSlice* s, std::size_t count_, float, float, float, bool) {
    for (std::size_t i = 0; i < count_; ++i) sgd_update(nullptr, nullptr, s[i].m, s[i].n, 0, 0, 0, false, false);
  }
  static double sum_squares(const float*, std::int64_t n) {
    count(WorkKind::optimizer, 2.0 * n, F * n);
    if constexpr (detail::has_sum_squares_scratch<Target>::value) {
      const Scratch s(Target::sum_squares_scratch(n));
    } else {
      (void)n;
    }
    return 0.0;
  }
  static void sum_squares_many(double* out, const float* const*, const std::int64_t* n,
                               std::size_t count_) {
    for (std::size_t k = 0; k < count_; ++k) count(WorkKind::optimizer, 2.0 * n[k], F * n[k]);
    if constexpr (detail::has_sum_squares_scratch<Target>::value) {
      const Scratch s(Target::sum_squares_many_scratch(count_));
    }
    for (std::size_t k = 0; k < count_; ++k) out[k] = 0.0;
  }
  static void scale(float*, std::int64_t n, float) { count(WorkKind::optimizer, 1.0 * n, 2 * F * n); }
  static void scale_many(float* const*, const std::int64_t* n, std::size_t count_, float) {
    for (std::size_t k = 0; k < count_; ++k) scale(nullptr, n[k], 0);
  }
  // the sums of squares and the scaling, as if it clipped (the factor is not known here)
  static void clip_norm_many(float*, float* const*, const std::int64_t* n, std::size_t count_,
                             float) {
    for (std::size_t k = 0; k < count_; ++k) {
      count(WorkKind::optimizer, 2.0 * n[k], F * n[k]);
      scale(nullptr, n[k], 0);
    }
    if constexpr (detail::has_sum_squares_scratch<Target>::value) {
      const Scratch s(Target::clip_norm_many_scratch(count_));
    }
  }

 private:
  static constexpr double F = sizeof(float);
  static void count(WorkKind k, double flops, double bytes) { work().add(k, flops, bytes); }
  static void count_gemm(std::int64_t m, std::int64_t n, std::int64_t k, float beta, std::int64_t batch) {
    count(WorkKind::gemm, 2.0 * m * n * k * batch,
          F * batch * (1.0 * m * k + 1.0 * k * n + 1.0 * m * n * (beta != 0.0f ? 2 : 1)));
  }
  static void unary(std::int64_t n, double flops_each, int floats_each) {
    count(WorkKind::pointwise, flops_each * n, F * floats_each * n);
  }
  // the FLOPs of one T x T x D product per (batch, head): 2 T T D, or over the T (T + 1) / 2
  // causal pairs
  static double attention_pair_flops(const AttentionLayout& L, bool causal) {
    const double pairs = causal ? 0.5 * L.T * (L.T + 1.0) : 1.0 * L.T * L.T;
    return 2.0 * L.B * L.H * pairs * L.D;
  }
  // A kernel's scratch: counted in the ledger (temporaries) and, with a ReservedModel, taken
  // from the pool, while it lives; 0 bytes take nothing.
  class Scratch {
   public:
    explicit Scratch(std::size_t bytes) : counted_(bytes), bytes_(bytes) {
      if (bytes_ > 0) p_ = allocate(bytes_);
    }
    ~Scratch() {
      if (bytes_ > 0) deallocate(p_, bytes_);
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;

   private:
    detail::ScratchBytes<Meta> counted_;
    std::size_t bytes_;
    void* p_ = nullptr;
  };
  static auto& pool() {
    static_assert(models_reserved, "remat::Meta: Target has no ReservedModel");
    static typename Target::ReservedModel p;
    return p;
  }
  static void* address() {
    alignas(64) static unsigned char byte = 0;
    return &byte;
  }
};

}  // namespace remat
