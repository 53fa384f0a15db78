#pragma once
// SPDX-License-Identifier: MIT
// The CUDA backend's state: one stream and one cuBLAS handle bound to it, made on first use
// (RAII, function-local static). fp32 GEMMs may use TF32 tensor cores (stated by describe()).

#include <string>

#include "remat/backend/cuda/error.cuh"

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
  bool tf32() const noexcept { return tf32_; }
  /// TF32 for fp32 GEMMs on (the default) or off (exact fp32, slower).
  void set_tf32(bool on) {
    REMAT_CUBLAS_CHECK(cublasSetMathMode(cublas_, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    tf32_ = on;
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context() {
    if (cublas_) cublasDestroy(cublas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

 private:
  Context() {
    REMAT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    REMAT_CUBLAS_CHECK(cublasCreate(&cublas_));
    REMAT_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    set_tf32(true);
  }
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  bool tf32_ = true;
};

/// True when a CUDA device can be used (the GPU tests skip otherwise).
inline bool device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace cuda
}  // namespace remat
