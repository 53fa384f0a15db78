#pragma once
// SPDX-License-Identifier: MIT
// CPU backend, part 2: GEMM on row-major buffers through Eigen::Map. With EIGEN_USE_BLAS
// (set by CMake when OpenBLAS is found) Eigen hands these products to sgemm.
//
// NOTE [GEMM row panels]
// Eigen hands a row-major product C = op(A) op(B) to the column-major sgemm as
// C^T = op(B)^T op(A)^T, so sgemm's "n" is our M. OpenBLAS packs a panel of that operand as
// wide as n into its own buffer, outside our allocator and ledger, and those pages stay
// resident: min(K, 256) floats per row of C once N is past about 640 (OpenBLAS 0.3.21, this
// machine's kernel). For the weight gradient of GPT-2's vocabulary projection (M = 50257,
// N = 768, K = 512) that was 49.7 MiB, 2.3% of a 124M step's ledger; the two other head
// products grew the process by 1.3-1.6 MiB, and at N = 640 the same product by 0.9 MiB. A product
// taller than kPanelRows runs as row panels of C instead: every element of C is the same dot
// product over the same K, so the results are unchanged, and the buffer stays under 4 MiB.

#include <algorithm>
#include <cstdint>

#include <Eigen/Core>

// A plain `-I include` build without -DEIGEN_USE_BLAS multiplies matrices with Eigen's own
// kernels, without OpenMP about 2.3x slower than OpenBLAS (the issue-26 measurement): say so
// at compile time. The CMake target remat::remat sets up OpenBLAS and OpenMP, and defines
// REMAT_NO_BLAS_NOTICE where OpenBLAS is off or missing (its configure step says so instead).
#if !defined(EIGEN_USE_BLAS) && !defined(REMAT_NO_BLAS_NOTICE)
#pragma message("remat: CPU matrix products use Eigen's own kernels (EIGEN_USE_BLAS is not defined), slower than OpenBLAS; link the CMake target remat::remat, or compile with -DEIGEN_USE_BLAS -DREMAT_HAVE_OPENBLAS=1 -fopenmp and link -lopenblas (Debian: libopenblas-openmp-dev); -DREMAT_NO_BLAS_NOTICE silences this")
#endif

namespace remat {
namespace cpu {

struct CpuGemm {
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ConstMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
  using MutMap = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;

  /// Tallest product handed to sgemm in one call (NOTE [GEMM row panels]).
  static constexpr std::int64_t kPanelRows = 4096;

  /// C (M, N) = alpha op(A) op(B) + beta C, all row-major; op(A) is (M, K), op(B) is (K, N).
  /// A is stored (M, K) or, when ta, (K, M); B is stored (K, N) or, when tb, (N, K).
  static void gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                   const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                   float* c, std::int64_t ldc) {
    if (M == 0 || N == 0) return;
    // Rows [i, i + m) of C need rows [i, i + m) of op(A): A's rows i.. (stored (M, K)) or its
    // columns i.. (stored (K, M) when ta).
    for (std::int64_t i = 0; i < M; i += kPanelRows) {
      const std::int64_t m = std::min(kPanelRows, M - i);
      panel(ta, tb, m, N, K, alpha, ta ? a + i : a + i * lda, lda, b, ldb, beta, c + i * ldc, ldc);
    }
  }

  /// One sgemm call (through Eigen): gemm() for M <= kPanelRows.
  static void panel(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                    const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                    float beta, float* c, std::int64_t ldc) {
    MutMap C(c, M, N, Eigen::OuterStride<>(ldc));
    if (beta == 0.0f)
      C.setZero();
    else if (beta != 1.0f)
      C *= beta;
    if (K == 0) return;
    ConstMap A(a, ta ? K : M, ta ? M : K, Eigen::OuterStride<>(lda));
    ConstMap Bm(b, tb ? N : K, tb ? K : N, Eigen::OuterStride<>(ldb));
    if (!ta && !tb)
      C.noalias() += alpha * A * Bm;
    else if (ta && !tb)
      C.noalias() += alpha * A.transpose() * Bm;
    else if (!ta && tb)
      C.noalias() += alpha * A * Bm.transpose();
    else
      C.noalias() += alpha * A.transpose() * Bm.transpose();
  }

  /// `batch` independent GEMMs at strides sa, sb, sc (elements). A stride of 0 reuses one
  /// matrix for every batch (a sequential loop, so a shared C accumulates safely).
  static void gemm_batched(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K,
                           float alpha, const float* a, std::int64_t lda, std::int64_t sa,
                           const float* b, std::int64_t ldb, std::int64_t sb, float beta, float* c,
                           std::int64_t ldc, std::int64_t sc, std::int64_t batch) {
    for (std::int64_t i = 0; i < batch; ++i)
      gemm(ta, tb, M, N, K, alpha, a + i * sa, lda, b + i * sb, ldb, beta, c + i * sc, ldc);
  }
};

}  // namespace cpu
}  // namespace remat
