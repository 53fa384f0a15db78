#pragma once
// SPDX-License-Identifier: MIT
// The cuBLAS subset remat calls, for the emulation build: a column-major reference GEMM with
// cuBLAS's argument conventions and checks (op flags, leading dimensions at least the stored
// rows, strides, alpha and beta; with beta = 0, C is not read, as cuBLAS promises), so the
// row-major to column-major mapping of gemm.cuh is tested for real. TF32 math mode rounds the
// inputs to TF32 (10 mantissa bits), as tensor cores would; the default mode is exact fp32.
// cublasGemmEx takes bf16 A and B (widened exactly) with an fp32 C and fp32 compute: the one
// mixed form remat calls.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "remat/backend/cuda/emulation/runtime.hpp"
#include "remat/core/bf16.hpp"

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 };
struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};
typedef cublasContext* cublasHandle_t;

inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  if (remat::cuda::emu::device().faults().device_count == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  *h = new cublasContext{};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->math = m;
  return CUBLAS_STATUS_SUCCESS;
}

namespace remat {
namespace cuda {
namespace emu {

/// x rounded to TF32 (8-bit exponent, 10-bit mantissa), to nearest even.
inline float to_tf32(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&x, &u, 4);
  return x;
}

/// An input element as cuBLAS's compute sees it: fp32 (TF32-rounded in TF32 mode), or a bf16
/// widened exactly.
inline float gemm_in(float x, bool tf32) { return tf32 ? to_tf32(x) : x; }
inline float gemm_in(remat::bf16 x, bool) { return remat::math::from_bf16(x); }

/// One column-major C (m, n) = alpha op(A) op(B) + beta C, with cuBLAS's checks (`run` false:
/// the checks only). A and B of element type In (float or bf16), C fp32.
template <class In>
inline cublasStatus_t gemm_reference(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                     int m, int n, int k, const float* alpha, const In* A,
                                     int lda, long long sa, const In* B, int ldb, long long sb,
                                     const float* beta, float* C, int ldc, long long sc,
                                     int batch, bool run = true) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool tA = ta != CUBLAS_OP_N, tB = tb != CUBLAS_OP_N;
  auto at_least = [](int ld, int rows) { return ld >= (rows > 1 ? rows : 1); };
  if (m < 0 || n < 0 || k < 0 || batch < 0 || !at_least(lda, tA ? k : m) ||
      !at_least(ldb, tB ? n : k) || !at_least(ldc, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  auto& dev = device();
  if (!dev.is_device(C) || (k > 0 && (!dev.is_device(A) || !dev.is_device(B))))
    return CUBLAS_STATUS_EXECUTION_FAILED;  // a host pointer: a fault on the device
  if (dev.sync_status() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (!run) return CUBLAS_STATUS_SUCCESS;  // the checks only
  const bool tf32 = h->math == CUBLAS_TF32_TENSOR_OP_MATH;
  auto in = [tf32](In x) { return gemm_in(x, tf32); };
  const double a = *alpha, b = *beta;
  std::vector<double> col(static_cast<std::size_t>(m));  // column j of op(A) op(B), in double
  for (int z = 0; z < batch; ++z) {
    const In* Az = A + z * sa;
    const In* Bz = B + z * sb;
    float* Cz = C + z * sc;
    for (int j = 0; j < n; ++j) {
      auto bv = [&](int l) {  // op(B)(l, j)
        return in(tB ? Bz[j + static_cast<long long>(l) * ldb] : Bz[l + static_cast<long long>(j) * ldb]);
      };
      if (tA) {  // op(A)(i, l) = A(l, i): a row of op(A) is a column of A, contiguous
        for (int i = 0; i < m; ++i) {
          const In* ai = Az + static_cast<long long>(i) * lda;
          double s = 0;
          for (int l = 0; l < k; ++l) s += static_cast<double>(in(ai[l])) * bv(l);
          col[static_cast<std::size_t>(i)] = s;
        }
      } else {  // op(A)(:, l) = A(:, l), contiguous: accumulate column by column
        std::fill(col.begin(), col.end(), 0.0);
        for (int l = 0; l < k; ++l) {
          const double y = bv(l);
          const In* al = Az + static_cast<long long>(l) * lda;
          for (int i = 0; i < m; ++i) col[static_cast<std::size_t>(i)] += static_cast<double>(in(al[i])) * y;
        }
      }
      float* cj = Cz + static_cast<long long>(j) * ldc;
      for (int i = 0; i < m; ++i)  // beta = 0: C is not read (it may hold NaN)
        cj[i] = static_cast<float>(b == 0.0 ? a * col[static_cast<std::size_t>(i)]
                                            : a * col[static_cast<std::size_t>(i)] + b * cj[i]);
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace emu
}  // namespace cuda
}  // namespace remat

namespace remat {
namespace cuda {
namespace emu {
/// gemm_reference now, or on a capturing stream checked now and recorded with copies of the
/// handle's mode and of alpha and beta (as cuBLAS reads host scalars when the call is made).
template <class In>
inline cublasStatus_t sgemm_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                 int n, int k, const float* alpha, const In* A, int lda,
                                 long long sa, const In* B, int ldb, long long sb,
                                 const float* beta, float* C, int ldc, long long sc, int batch) {
  if (!h || !h->stream || !h->stream->capture)
    return gemm_reference(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
  const cublasStatus_t st =
      gemm_reference(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch, false);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  cublasContext ctx{nullptr, h->math};
  const float a = *alpha, b = *beta;
  device().defer(h->stream, [=]() mutable {
    if (gemm_reference(&ctx, ta, tb, m, n, k, &a, A, lda, sa, B, ldb, sb, &b, C, ldc, sc, batch) !=
        CUBLAS_STATUS_SUCCESS)
      node_failed("cuBLAS GEMM");
  });
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace emu
}  // namespace cuda
}  // namespace remat

inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                  int m, int n, int k, const float* alpha, const float* A, int lda,
                                  const float* B, int ldb, const float* beta, float* C, int ldc) {
  return remat::cuda::emu::sgemm_call(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C,
                                      ldc, 0, 1);
}
inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                                cublasOperation_t tb, int m, int n, int k,
                                                const float* alpha, const float* A, int lda,
                                                long long sa, const float* B, int ldb,
                                                long long sb, const float* beta, float* C,
                                                int ldc, long long sc, int batch) {
  return remat::cuda::emu::sgemm_call(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C,
                                      ldc, sc, batch);
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                   int m, int n, int k, const void* alpha, const void* A,
                                   cudaDataType_t at, int lda, const void* B, cudaDataType_t bt,
                                   int ldb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (compute != CUBLAS_COMPUTE_32F || ct != CUDA_R_32F || at != bt) return CUBLAS_STATUS_NOT_SUPPORTED;
  const auto* alpha_f = static_cast<const float*>(alpha);
  const auto* beta_f = static_cast<const float*>(beta);
  if (at == CUDA_R_16BF)
    return remat::cuda::emu::sgemm_call(h, ta, tb, m, n, k, alpha_f, static_cast<const remat::bf16*>(A),
                                        lda, 0, static_cast<const remat::bf16*>(B), ldb, 0, beta_f,
                                        static_cast<float*>(C), ldc, 0, 1);
  if (at == CUDA_R_32F)
    return remat::cuda::emu::sgemm_call(h, ta, tb, m, n, k, alpha_f, static_cast<const float*>(A),
                                        lda, 0, static_cast<const float*>(B), ldb, 0, beta_f,
                                        static_cast<float*>(C), ldc, 0, 1);
  return CUBLAS_STATUS_NOT_SUPPORTED;
}
