#pragma once
// SPDX-License-Identifier: MIT
// The CUDA backend's state: one stream, a cuBLAS handle bound to it and a cuBLASLt handle with
// its cached GEMM plans (gemm_lt.cuh), made on first use (RAII, function-local static). fp32
// GEMMs and the fused attention may use TF32 tensor cores (stated by describe()).

#include <string>

#include "remat/backend/cuda/error.cuh"
#include "remat/backend/cuda/lt_plans.cuh"

namespace remat {
namespace cuda {

class Context {
 public:
  static Context& get() {
    static Context c;
    return c;
  }
  cudaStream_t stream() const noexcept { return stream_; }
  cublasHandle_t cublas() const noexcept { return cublas_; }
  cublasLtHandle_t lt() const noexcept { return lt_; }
  LtPlans& lt_plans() noexcept { return lt_plans_; }
  bool tf32() const noexcept { return tf32_; }
  /// TF32 for fp32 GEMMs and fused attention on (the default) or off (exact fp32, slower).
  void set_tf32(bool on) {
    REMAT_CUBLAS_CHECK(cublasSetMathMode(cublas_, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    tf32_ = on;
  }
  /// The device has the mma.sync and cp.async instructions of flash_mma.cuh (sm_80 or newer).
  bool tensor_cores() const noexcept { return tensor_cores_; }
  /// Tensor-core attention (flash_mma.cuh) where it fits: TF32 on and a device that has it.
  bool mma_attention() const noexcept { return tf32_ && tensor_cores_; }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context() {
    lt_plans_.clear();
    if (lt_) cublasLtDestroy(lt_);
    if (cublas_) cublasDestroy(cublas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

 private:
  Context() {
    REMAT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    REMAT_CUBLAS_CHECK(cublasCreate(&cublas_));
    REMAT_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    REMAT_CUBLAS_CHECK(cublasLtCreate(&lt_));
    int dev = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
      tensor_cores_ = prop.major >= 8;
    set_tf32(true);
  }
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  LtPlans lt_plans_;
  bool tf32_ = true;
  bool tensor_cores_ = false;
};

/// True when a CUDA device can be used (the GPU tests skip otherwise).
inline bool device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace cuda
}  // namespace remat
