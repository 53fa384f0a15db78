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
#include "remat/core/error.hpp"
#include "remat/core/memory.hpp"
#include "remat/core/shape.hpp"

namespace remat {

/// True for backends the estimator can mirror: those that publish their kernels' scratch sizes
/// (the CPU; the CUDA backend and its host-only model, CudaModel in backend/cuda/model.hpp).
template <class B, class = void>
struct has_meta_twin : std::false_type {};
template <class B>
struct has_meta_twin<B, std::void_t<decltype(B::layer_norm_backward_scratch(0, 0)),
                                    decltype(B::attention_backward_scratch(AttentionLayout{})),
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
                                         decltype(B::linear_backward_weight_scratch(0, 0, 0))>>
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
  static void copy_from_host(void*, const void*, std::size_t) {}
  static void copy_to_host(void* dst, const void*, std::size_t bytes) { std::memset(dst, 0, bytes); }
  static void copy(void*, const void*, std::size_t) {}
  static void fill(float*, std::int64_t, float) {}
  static void synchronize() {}
  static int num_threads() { return Target::num_threads(); }
  static std::string describe() { return std::string("meta (shapes only) of ") + Target::describe(); }

  // ---- GEMM -----------------------------------------------------------------------------
  static void gemm(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                   std::int64_t, const float*, std::int64_t, float, float*, std::int64_t) {}
  static void gemm_batched(bool, bool, std::int64_t, std::int64_t, std::int64_t, float,
                           const float*, std::int64_t, std::int64_t, const float*, std::int64_t,
                           std::int64_t, float, float*, std::int64_t, std::int64_t, std::int64_t) {}
  // the dense layer's GEMMs with their bias (the Target's GEMM workspace, if it has one)
  static void linear_forward(float*, const float*, const float*, const float*, std::int64_t rows,
                             std::int64_t in, std::int64_t out) {
    if constexpr (detail::has_linear_scratch<Target>::value) {
      const Scratch s(Target::linear_forward_scratch(rows, in, out));
    }
  }
  static void linear_backward_weight(float*, float*, const float*, const float*, std::int64_t rows,
                                     std::int64_t in, std::int64_t out, float) {
    if constexpr (detail::has_linear_scratch<Target>::value) {
      const Scratch s(Target::linear_backward_weight_scratch(rows, in, out));
    }
  }

  // ---- pointwise ------------------------------------------------------------------------
  static void add_into(float*, const float*, std::int64_t) {}
  static void broadcast_rows(float*, const float*, std::int64_t, std::int64_t) {}
  static void binary_forward(math::BinaryKind, float*, const float*, const float*, std::int64_t,
                             std::int64_t, bool, bool) {}
  static void binary_backward(math::BinaryKind, float* da, float* db, const float*, const float*,
                              const float*, std::int64_t outer, std::int64_t inner, bool a_bc,
                              bool b_bc, bool = false, bool = false) {
    if constexpr (detail::has_binary_scratch<Target>::value) {
      const Scratch s(Target::binary_backward_scratch(outer, inner, da && a_bc, db && b_bc));
    } else {
      (void)da, (void)db, (void)outer, (void)inner, (void)a_bc, (void)b_bc;
    }
  }
  static void affine_forward(float*, const float*, std::int64_t, float, float) {}
  static void affine_backward(float*, const float*, std::int64_t, float) {}
  static void gelu_forward(float*, const float*, std::int64_t) {}
  static void gelu_backward(float*, const float*, const float*, std::int64_t, bool = false) {}
  static void relu_forward(float*, const float*, std::int64_t) {}
  static void relu_backward(float*, const float*, const float*, std::int64_t) {}
  static void tanh_forward(float*, const float*, std::int64_t) {}
  static void tanh_backward(float*, const float*, const float*, std::int64_t) {}
  static void dropout_forward(float*, const float*, std::int64_t, float, std::uint64_t,
                              std::uint64_t) {}
  static void dropout_backward(float*, const float*, std::int64_t, float, std::uint64_t,
                               std::uint64_t, bool = false) {}
  static void reduce_forward(float*, const float*, std::int64_t, std::int64_t, std::int64_t,
                             float) {}
  static void reduce_backward(float*, const float*, std::int64_t, std::int64_t, std::int64_t,
                              float) {}
  static void copy_block(float*, std::int64_t, std::int64_t, const float*, std::int64_t,
                         std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool) {}
  static void permute(float*, const float*, const Shape&, const int*, bool) {}

  // ---- nn kernels: Target's layout decisions and scratch sizes, no arithmetic -------------
  static void layer_norm_forward(float*, float*, float*, const float*, const float*,
                                 const float*, std::int64_t, std::int64_t, float) {}
  static void layer_norm_backward(float*, float*, float*, const float*, const float*,
                                  const float*, const float*, const float*, std::int64_t rows,
                                  std::int64_t C, bool = false, bool = false, bool = false) {
    const Scratch s(Target::layer_norm_backward_scratch(rows, C));
  }
  static void softmax_forward(float*, const float*, std::int64_t, std::int64_t) {}
  static void softmax_backward(float*, const float*, const float*, std::int64_t, std::int64_t) {}
  static bool attention_needs_output(std::int64_t D) { return Target::attention_needs_output(D); }
  static std::int64_t attention_aux_numel(std::int64_t BH, std::int64_t T, std::int64_t D) {
    return Target::attention_aux_numel(BH, T, D);
  }
  static void attention_forward(const AttentionLayout& L, float*, float*, const float*,
                                const float*, const float*, float, bool) {
    if constexpr (detail::has_attention_forward_scratch<Target>::value) {
      const Scratch s(Target::attention_forward_scratch(L));
    } else {
      (void)L;
    }
  }
  static void attention_backward(const AttentionLayout& L, float*, float*, float*, const float*,
                                 const float*, const float*, const float*, const float*,
                                 const float*, float, bool, bool = false, bool = false,
                                 bool = false) {
    const Scratch s(Target::attention_backward_scratch(L));
  }
  static void cross_entropy_forward(float*, float*, const float*, const std::int32_t*,
                                    std::int64_t N, std::int64_t) {
    const Scratch s(Target::cross_entropy_forward_scratch(N));
  }
  static void cross_entropy_backward(float*, const float*, const float*, const std::int32_t*,
                                     std::int64_t, std::int64_t, const float*, bool = false) {}
  static void embedding_forward(float*, const float*, const std::int32_t*, std::int64_t,
                                std::int64_t) {}
  static void embedding_backward(float*, const float*, const std::int32_t*, std::int64_t,
                                 std::int64_t, std::int64_t, bool = false) {}
  static void minmax_i32(const std::int32_t*, std::int64_t, std::int32_t& lo, std::int32_t& hi) {
    lo = hi = 0;
  }

  // ---- optimizers -----------------------------------------------------------------------
  static void adamw_update(float*, const float*, float*, float*, std::int64_t, float, float,
                           float, float, float, float, float) {}
  static void sgd_update(float*, const float*, float*, std::int64_t, float, float, float, bool,
                         bool) {}
  static void adamw_update_many(const UpdateSlice*, std::size_t, float, float, float, float, float,
                                float, float) {}
  static void sgd_update_many(const UpdateSlice*, std::size_t, float, float, float, bool) {}
  static double sum_squares(const float*, std::int64_t n) {
    if constexpr (detail::has_sum_squares_scratch<Target>::value) {
      const Scratch s(Target::sum_squares_scratch(n));
    } else {
      (void)n;
    }
    return 0.0;
  }
  static void sum_squares_many(double* out, const float* const*, const std::int64_t*,
                               std::size_t count) {
    if constexpr (detail::has_sum_squares_scratch<Target>::value) {
      const Scratch s(Target::sum_squares_many_scratch(count));
    }
    for (std::size_t k = 0; k < count; ++k) out[k] = 0.0;
  }
  static void scale(float*, std::int64_t, float) {}
  static void scale_many(float* const*, const std::int64_t*, std::size_t, float) {}

 private:
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
