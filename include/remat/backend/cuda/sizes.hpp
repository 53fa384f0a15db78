#pragma once
// SPDX-License-Identifier: MIT
// The CUDA backend's layout decisions and kernel scratch sizes as plain C++ (no CUDA): the
// kernels size their buffers with these functions, and the estimator's shape-only twin counts
// the same bytes (backend/meta.hpp, backend/cuda/model.hpp), on any machine.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "remat/core/kernel.hpp"
#include "remat/core/math.hpp"
#include "remat/ops/loss.hpp"
#include "remat/ops/matmul.hpp"

namespace remat {
namespace cuda {

constexpr int kColumnChunks = 64;   // row chunks of a deterministic column sum (colsum.cuh)
constexpr int kRowSumChunks = 256;  // row chunks of a norm's dw/db partial sums (nn.cuh)
constexpr int kFlashMaxD = 128;     // the fused attention's largest head size (flash.cuh)
constexpr int kSumSquaresBlocks = 64;  // partial sums of sum_squares (optim.cuh)
constexpr std::size_t kSumSquaresChunk = 4096;  // buffers per round of sum_squares_many
constexpr int kReduceParts = 128;  // parts of a long reduced axis summed apart (reduce_forward)
constexpr std::int64_t kReduceSplitMin = std::int64_t(1) << 16;  // ... from this axis length
constexpr std::int64_t kReduceSplitOutputs = 64;                 // ... up to this many outputs
constexpr std::size_t kGemmWorkspaceMax = std::size_t(32) << 20;  // cuBLASLt's, at most (Hopper)

/// Which attention the CUDA backend runs: fused (flash.cuh, memory linear in T; head sizes up
/// to kFlashMaxD) or materialized (P (B H, T, T) kept, as on the CPU).
enum class AttentionPath {
  from_env,      // REMAT_CUDA_ATTENTION=materialized asks for P, else fused where it fits
  fused,         // fused where the head size fits (the default on a GPU)
  materialized,  // always P
};

struct CudaSizes {
  /// The attention path for every attention op from here on (per process; a test sets it per
  /// case). from_env (the default) reads REMAT_CUDA_ATTENTION at each call, not once. Change it
  /// between steps, never between an op's forward and its backward (they must agree on what
  /// the forward kept).
  static void set_attention_path(AttentionPath p) { attention_path_slot().store(p); }
  static AttentionPath attention_path() { return attention_path_slot().load(); }
  /// Fused attention (memory linear in T) for head sizes up to kFlashMaxD, unless the path is
  /// materialized.
  static bool flash(std::int64_t D) {
    if (D > kFlashMaxD) return false;
    switch (attention_path()) {
      case AttentionPath::fused: return true;
      case AttentionPath::materialized: return false;
      case AttentionPath::from_env: break;
    }
    const char* e = std::getenv("REMAT_CUDA_ATTENTION");
    return !(e && std::string(e) == "materialized");
  }
  /// Floats the attention op keeps besides its output: lse (B H T) fused, else P (B H T T).
  static std::int64_t attention_aux_numel(std::int64_t BH, std::int64_t T, std::int64_t D) {
    return flash(D) ? BH * T : BH * T * T;
  }
  /// The fused backward reads the output (for dO . O); the op keeps it (GPT's output projection
  /// saves the same buffer anyway, so it costs no bytes there).
  static bool attention_needs_output(std::int64_t D) { return flash(D); }

  /// A column sum over `C` columns: kColumnChunks partial rows.
  static std::size_t column_sum_scratch(std::int64_t C) {
    return static_cast<std::size_t>(kColumnChunks * C) * sizeof(float);
  }
  /// The workspace a cuBLASLt GEMM with an (m, n) output gets from the pool (gemm_lt.cuh):
  /// room for k split in up to 4 parts, at most kGemmWorkspaceMax (NVIDIA's advice for Hopper).
  static std::size_t gemm_workspace(std::int64_t m, std::int64_t n) {
    const auto want = static_cast<std::size_t>(m * n) * 4 * sizeof(float);
    return want < kGemmWorkspaceMax ? want : kGemmWorkspaceMax;
  }
  /// linear_forward: the workspace of its GEMM (output out x rows, column-major).
  static std::size_t linear_forward_scratch(std::int64_t rows, std::int64_t, std::int64_t out) {
    return rows * out == 0 ? 0 : gemm_workspace(out, rows);
  }
  /// linear_backward_weight: the workspace of the weight's GEMM (out x in), or, where cuBLASLt
  /// has no bias-gradient epilogue for it, a column sum's scratch: whichever is larger, so the
  /// ledger does not depend on cuBLASLt's answer.
  static std::size_t linear_backward_weight_scratch(std::int64_t rows, std::int64_t in,
                                                    std::int64_t out) {
    if (rows * out == 0) return 0;
    const std::size_t ws = in == 0 ? 0 : gemm_workspace(out, in), cs = column_sum_scratch(out);
    return ws > cs ? ws : cs;
  }
  /// linear_gelu_forward: the workspace of its GEMM (output hidden x rows).
  static std::size_t linear_gelu_forward_scratch(std::int64_t rows, std::int64_t in,
                                                 std::int64_t hidden) {
    return linear_forward_scratch(rows, in, hidden);
  }
  /// linear_dgelu_backward: the workspace of its GEMM (hidden x rows), or, where cuBLASLt has
  /// no GELU-gradient epilogue for it, a column sum's scratch: whichever is larger.
  static std::size_t linear_dgelu_backward_scratch(std::int64_t rows, std::int64_t hidden,
                                                   std::int64_t out) {
    if (rows * hidden == 0) return 0;
    const std::size_t ws = out == 0 ? 0 : gemm_workspace(hidden, rows), cs = column_sum_scratch(hidden);
    return ws > cs ? ws : cs;
  }
  /// An op kernel that sums C-wide rows (RowSums, NOTE [op kernels] in core/kernel.hpp: a
  /// norm's dw and db): a row of partial sums per sum and row chunk, taken whenever there are
  /// rows (as on the CPU). Its CUDA kernel finishes the sums in chunk order (NOTE [layer norm
  /// backward]).
  template <class K, std::enable_if_t<detail::has_row_sums<K>::value, int> = 0>
  static std::size_t scratch(const K& k) {
    const RowSums r = k.row_sums();
    return r.rows == 0 ? 0 : static_cast<std::size_t>(r.count * kRowSumChunks * r.width) * sizeof(float);
  }
  /// A bf16 product (GemmKernel) that cuBLAS cannot write as it is (a bf16 C, a bias or a
  /// residual to add before the rounding): one fp32 (M, N) matrix that cuBLAS writes and a
  /// kernel finishes into C, matrix by matrix (gemm.cuh). An fp32 C without them: none.
  static std::size_t scratch(const GemmKernel& k) {
    if (k.M * k.N * k.batch == 0 || (k.ct == DType::f32 && !k.bias && !k.r)) return 0;
    return static_cast<std::size_t>(k.M * k.N) * sizeof(float);
  }
  /// binary_backward column-sums the gradient of a broadcast operand (da, then db, through one
  /// scratch).
  static std::size_t binary_backward_scratch(std::int64_t outer, std::int64_t inner,
                                             bool da_summed, bool db_summed) {
    return outer * inner == 0 || !(da_summed || db_summed) ? 0 : column_sum_scratch(inner);
  }
  /// Fused: delta = rowsum(dO . O), B H T floats; materialized: dS of one batch row, H T T.
  static std::size_t attention_backward_scratch(const AttentionLayout& L) {
    const std::int64_t n = flash(L.D) ? L.B * L.H * L.T : L.H * L.T * L.T;
    return static_cast<std::size_t>(n) * sizeof(float);
  }
  /// The per-row losses, averaged on the device (mean_kernel).
  static std::size_t cross_entropy_forward_scratch(std::int64_t N) {
    return static_cast<std::size_t>(N) * sizeof(float);
  }
  static std::size_t scratch(const CrossEntropyOp::Forward& k) { return cross_entropy_forward_scratch(k.N); }
  /// reduce_forward (a sum or mean over an axis): whether each output's axis is split into
  /// kReduceParts parts summed by blocks of their own, then added in order (few outputs over a
  /// long axis: sum(x) of a whole tensor), and the partial sums' bytes (0 when not split).
  static bool reduce_split(std::int64_t outer, std::int64_t n, std::int64_t inner) {
    return n >= kReduceSplitMin && outer * inner <= kReduceSplitOutputs;
  }
  static std::size_t reduce_forward_scratch(std::int64_t outer, std::int64_t n, std::int64_t inner) {
    return reduce_split(outer, n, inner)
               ? static_cast<std::size_t>(outer * inner * kReduceParts) * sizeof(float)
               : 0;
  }
  /// The partial sums of squares, one double per block.
  static std::size_t sum_squares_scratch(std::int64_t n) {
    return n == 0 ? 0 : kSumSquaresBlocks * sizeof(double);
  }
  /// sum_squares_many: per buffer of a round (at most kSumSquaresChunk), a row of partial
  /// sums and its total.
  static std::size_t sum_squares_many_scratch(std::size_t count) {
    return (count < kSumSquaresChunk ? count : kSumSquaresChunk) * (kSumSquaresBlocks + 1) *
           sizeof(double);
  }
  /// clip_norm_many: every buffer's total, the partial sums of a round, and the factor.
  static std::size_t clip_norm_many_scratch(std::size_t count) {
    return (count + (count < kSumSquaresChunk ? count : kSumSquaresChunk) * kSumSquaresBlocks + 1) *
           sizeof(double);
  }

 private:
  static std::atomic<AttentionPath>& attention_path_slot() {
    static std::atomic<AttentionPath> p{AttentionPath::from_env};
    return p;
  }
};

}  // namespace cuda
}  // namespace remat
