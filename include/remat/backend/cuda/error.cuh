#pragma once
// SPDX-License-Identifier: MIT
// CUDA and cuBLAS errors as exceptions: every call is checked, and a failure throws
// remat::CudaError naming the call, the file and the line. Never exit().

#include "remat/backend/cuda/api.cuh"
#include "remat/core/error.hpp"

namespace remat {

/// A failed CUDA runtime or cuBLAS call.
class CudaError : public Error {
 public:
  using Error::Error;
};

namespace detail {
inline const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(unknown)";
  }
}
}  // namespace detail
}  // namespace remat

/// Throws remat::CudaError when a CUDA runtime call fails.
#define REMAT_CUDA_CHECK(expr)                                                             \
  do {                                                                                     \
    const cudaError_t remat_err_ = (expr);                                                 \
    if (remat_err_ != cudaSuccess)                                                         \
      throw ::remat::CudaError(::remat::detail::cat("remat: CUDA call ", #expr, " failed at ", \
                                                    __FILE__, ":", __LINE__, ": ",           \
                                                    cudaGetErrorString(remat_err_)));        \
  } while (0)

/// Throws remat::CudaError when a cuBLAS call fails.
#define REMAT_CUBLAS_CHECK(expr)                                                           \
  do {                                                                                     \
    const cublasStatus_t remat_st_ = (expr);                                               \
    if (remat_st_ != CUBLAS_STATUS_SUCCESS)                                                \
      throw ::remat::CudaError(::remat::detail::cat("remat: cuBLAS call ", #expr,           \
                                                    " failed at ", __FILE__, ":", __LINE__,  \
                                                    ": ",                                    \
                                                    ::remat::detail::cublas_status_name(remat_st_))); \
  } while (0)
