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
#include "remat/core/memory.hpp"
#include "remat/core/shape.hpp"

namespace remat {

/// True for backends the estimator can mirror: those that publish their kernels' scratch sizes
/// (the CPU does; the CUDA backend does not yet).
template <class B, class = void>
struct has_meta_twin : std::false_type {};
template <class B>
struct has_meta_twin<B, std::void_t<decltype(B::layer_norm_backward_scratch(0, 0)),
                                    decltype(B::attention_backward_scratch(AttentionLayout{})),
                                    decltype(B::cross_entropy_forward_scratch(0))>>
    : std::true_type {};
template <class B>
inline constexpr bool has_meta_twin_v = has_meta_twin<B>::value;

// NOTE [shape-only backend]
// - allocate() hands out one dummy address: nothing ever reads or writes through it, since
//   every kernel is empty. Values that reach the host (loss.item(), to_vector) read as zeros,
//   token range checks see ids 0, sums of squares are 0 (gradient clipping never scales).
// - Checkpoint replays still run (the tape decides what to replay, not the values), but
//   verify_values() has nothing to hash and is ignored.
// - Kernel scratch is counted through Target's *_scratch(...) formulas, which Target's kernels
//   themselves size their buffers with, so the two ledgers cannot drift apart.
template <class Target>
struct Meta {
  static constexpr const char* name = "meta";
  static constexpr bool is_meta = true;
  using target = Target;

  // ---- memory ---------------------------------------------------------------------------
  static void* allocate(std::size_t) { return address(); }
  static void deallocate(void*, std::size_t) noexcept {}
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

  // ---- pointwise ------------------------------------------------------------------------
  static void add_into(float*, const float*, std::int64_t) {}
  static void broadcast_rows(float*, const float*, std::int64_t, std::int64_t) {}
  static void binary_forward(math::BinaryKind, float*, const float*, const float*, std::int64_t,
                             std::int64_t, bool, bool) {}
  static void binary_backward(math::BinaryKind, float*, float*, const float*, const float*,
                              const float*, std::int64_t, std::int64_t, bool, bool) {}
  static void affine_forward(float*, const float*, std::int64_t, float, float) {}
  static void affine_backward(float*, const float*, std::int64_t, float) {}
  static void gelu_forward(float*, const float*, std::int64_t) {}
  static void gelu_backward(float*, const float*, const float*, std::int64_t) {}
  static void relu_forward(float*, const float*, std::int64_t) {}
  static void relu_backward(float*, const float*, const float*, std::int64_t) {}
  static void tanh_forward(float*, const float*, std::int64_t) {}
  static void tanh_backward(float*, const float*, const float*, std::int64_t) {}
  static void dropout_forward(float*, const float*, std::int64_t, float, std::uint64_t,
                              std::uint64_t) {}
  static void dropout_backward(float*, const float*, std::int64_t, float, std::uint64_t,
                               std::uint64_t) {}
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
                                  std::int64_t C) {
    const detail::ScratchBytes<Meta> counted(Target::layer_norm_backward_scratch(rows, C));
  }
  static void softmax_forward(float*, const float*, std::int64_t, std::int64_t) {}
  static void softmax_backward(float*, const float*, const float*, std::int64_t, std::int64_t) {}
  static bool attention_needs_output(std::int64_t D) { return Target::attention_needs_output(D); }
  static std::int64_t attention_aux_numel(std::int64_t BH, std::int64_t T, std::int64_t D) {
    return Target::attention_aux_numel(BH, T, D);
  }
  static void attention_forward(const AttentionLayout&, float*, float*, const float*,
                                const float*, const float*, float, bool) {}
  static void attention_backward(const AttentionLayout& L, float*, float*, float*, const float*,
                                 const float*, const float*, const float*, const float*,
                                 const float*, float, bool) {
    const detail::ScratchBytes<Meta> counted(Target::attention_backward_scratch(L));
  }
  static float cross_entropy_forward(float*, const float*, const std::int32_t*, std::int64_t N,
                                     std::int64_t) {
    const detail::ScratchBytes<Meta> counted(Target::cross_entropy_forward_scratch(N));
    return 0.0f;
  }
  static void cross_entropy_backward(float*, const float*, const float*, const std::int32_t*,
                                     std::int64_t, std::int64_t, float) {}
  static void embedding_forward(float*, const float*, const std::int32_t*, std::int64_t,
                                std::int64_t) {}
  static void embedding_backward(float*, const float*, const std::int32_t*, std::int64_t,
                                 std::int64_t) {}
  static void minmax_i32(const std::int32_t*, std::int64_t, std::int32_t& lo, std::int32_t& hi) {
    lo = hi = 0;
  }

  // ---- optimizers -----------------------------------------------------------------------
  static void adamw_update(float*, const float*, float*, float*, std::int64_t, float, float,
                           float, float, float, float, float) {}
  static void sgd_update(float*, const float*, float*, std::int64_t, float, float, float, bool,
                         bool) {}
  static double sum_squares(const float*, std::int64_t) { return 0.0; }
  static void scale(float*, std::int64_t, float) {}

 private:
  static void* address() {
    alignas(64) static unsigned char byte = 0;
    return &byte;
  }
};

}  // namespace remat
