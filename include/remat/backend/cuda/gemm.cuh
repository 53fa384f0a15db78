#pragma once
// SPDX-License-Identifier: MIT
// GEMM on row-major buffers through cuBLAS (column-major): a row-major C = op(A) op(B) is the
// column-major C^T = op(B)^T op(A)^T, so the operands swap places and keep their flags. GEMMs
// with an epilogue (a bias added, a bias gradient summed) go through cuBLASLt, column-major as
// it is (the caller maps its row-major operands: linear.cuh).

#include <cstddef>
#include <cstdint>
#include <string>

#include "remat/backend/cuda/context.cuh"
#include "remat/backend/cuda/launch.cuh"

namespace remat {
namespace cuda {

struct CudaGemm {
  // the profile's name of a cuBLAS call (profile.cuh): routine and shape
  static std::string shape_name(const char* routine, std::int64_t m, std::int64_t n, std::int64_t k) {
    return std::string(routine) + " " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  }

  /// C (M, N) = alpha op(A) op(B) + beta C, all row-major (as Cpu::gemm).
  static void gemm(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                   const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                   float* c, std::int64_t ldc) {
    if (M == 0 || N == 0) return;
    device_counters().gemms.fetch_add(1, std::memory_order_relaxed);
    const ProfileScope profile(Context::get().stream(), [&] { return shape_name("cublasSgemm", M, N, K); });
    REMAT_CUBLAS_CHECK(cublasSgemm(Context::get().cublas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
                                   static_cast<int>(M), static_cast<int>(K), &alpha, b,
                                   static_cast<int>(ldb), a, static_cast<int>(lda), &beta, c,
                                   static_cast<int>(ldc)));
  }
  /// Column-major D (m, n) = op(A) op(B) + beta C through cuBLASLt with an epilogue (C is D
  /// unless given: a matrix of D's layout, e.g. a residual added in the GEMM). GELU_AUX_BIAS
  /// adds bias, writes that GELU input to `aux` (D's layout) and GELU of it to D; DGELU
  /// multiplies by GELU'(aux), DGELU_BGRAD also writes bias (m) = the row sums of that. BIAS adds
  /// bias (m) to every column; BGRADA writes bias (m) = the row sums of op(A) over k, BGRADB
  /// bias (n) = the column sums of op(B) over k. `workspace` (device, `ws` bytes: the caller's
  /// Scratch, so the ledger counts it) is all the algorithm may use. Returns false, having run
  /// nothing, where cuBLASLt has no algorithm for this shape and epilogue (the plan remembers).
  static bool gemm_epilogue(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                            const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
                            float beta, float* D, std::int64_t ldd, cublasLtEpilogue_t epilogue,
                            float* bias, void* workspace, std::size_t ws,
                            const float* C = nullptr, float* aux = nullptr) {
    if (!C) C = D;
    auto& ctx = Context::get();
    // the alignment the matrices share (a view may start anywhere): the plan's algorithm must
    // not assume more (cuBLASLt's default is 256 bytes)
    std::uint32_t align = 256;
    for (const void* p : {static_cast<const void*>(A), static_cast<const void*>(B),
                          static_cast<const void*>(C), static_cast<const void*>(D),
                          static_cast<const void*>(aux ? aux : D)})
      while (reinterpret_cast<std::uintptr_t>(p) % align != 0) align /= 2;
    const LtKey key{ta, tb, m, n, k, lda, ldb, ldd, epilogue, ctx.tf32(), ws, align, aux ? ldd : 0};
    LtPlan& plan = ctx.lt_plans().get(ctx.lt(), key);
    if (!plan.found) return false;
    REMAT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias, sizeof bias));
    if (aux)
      REMAT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    const float alpha = 1.0f;
    device_counters().gemms.fetch_add(1, std::memory_order_relaxed);
    const ProfileScope profile(ctx.stream(), [&] {
      return shape_name("cublasLtMatmul", m, n, k) + " epilogue " + std::to_string(static_cast<int>(epilogue));
    });
    REMAT_CUBLAS_CHECK(cublasLtMatmul(ctx.lt(), plan.desc, &alpha, A, plan.a, B, plan.b, &beta, C,
                                      plan.d, D, plan.d, &plan.algo, workspace, ws, ctx.stream()));
    return true;
  }
  /// Row-major D (M, N) (fp32, leading dimension ldd) = op(A) op(B) + beta D with A and B bf16
  /// (ldA, ldB as in gemm), fp32 products and sums (cublasGemmEx, CUBLAS_COMPUTE_32F).
  static void gemm_bf16(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K,
                        const void* a, std::int64_t lda, const void* b, std::int64_t ldb,
                        float beta, float* d, std::int64_t ldd) {
    if (M == 0 || N == 0) return;
    const float alpha = 1.0f;
    device_counters().gemms.fetch_add(1, std::memory_order_relaxed);
    const ProfileScope profile(Context::get().stream(), [&] { return shape_name("cublasGemmEx bf16", M, N, K); });
    REMAT_CUBLAS_CHECK(cublasGemmEx(Context::get().cublas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
                                    static_cast<int>(M), static_cast<int>(K), &alpha, b,
                                    CUDA_R_16BF, static_cast<int>(ldb), a, CUDA_R_16BF,
                                    static_cast<int>(lda), &beta, d, CUDA_R_32F,
                                    static_cast<int>(ldd), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  /// `batch` GEMMs at strides sa, sb, sc. A shared C (sc == 0, a gradient summed over the
  /// batch) runs as a sequence on the stream, which orders the accumulation.
  static void gemm_batched(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K,
                           float alpha, const float* a, std::int64_t lda, std::int64_t sa,
                           const float* b, std::int64_t ldb, std::int64_t sb, float beta, float* c,
                           std::int64_t ldc, std::int64_t sc, std::int64_t batch) {
    if (M == 0 || N == 0 || batch == 0) return;
    if (batch == 1 || sc == 0) {
      for (std::int64_t i = 0; i < batch; ++i)
        gemm(ta, tb, M, N, K, alpha, a + i * sa, lda, b + i * sb, ldb, beta, c + i * sc, ldc);
      return;
    }
    device_counters().gemms.fetch_add(1, std::memory_order_relaxed);
    const ProfileScope profile(Context::get().stream(), [&] {
      return shape_name("cublasSgemmStridedBatched", M, N, K) + " x" + std::to_string(batch);
    });
    REMAT_CUBLAS_CHECK(cublasSgemmStridedBatched(
        Context::get().cublas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
        static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha, b,
        static_cast<int>(ldb), sb, a, static_cast<int>(lda), sa, &beta, c, static_cast<int>(ldc),
        sc, static_cast<int>(batch)));
  }
};

}  // namespace cuda
}  // namespace remat
