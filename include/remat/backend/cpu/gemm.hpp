#pragma once
// SPDX-License-Identifier: MIT
// CPU backend, part 2: GEMM on row-major buffers through Eigen::Map. With EIGEN_USE_BLAS
// (set by CMake when OpenBLAS is found) Eigen hands these products to sgemm.

#include <cstdint>

#include <Eigen/Core>

namespace remat {
namespace cpu {

struct CpuGemm {
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ConstMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
  using MutMap = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;

  /// C (M, N) = alpha op(A) op(B) + beta C, all row-major; op(A) is (M, K), op(B) is (K, N).
  /// A is stored (M, K) or, when ta, (K, M); B is stored (K, N) or, when tb, (N, K).
  static void gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                   const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                   float* c, std::int64_t ldc) {
    if (M == 0 || N == 0) return;
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
