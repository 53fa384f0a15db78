#pragma once
// SPDX-License-Identifier: MIT
// Opt-in umbrella of the CUDA backend (target remat::cuda; compile with nvcc). remat/remat.hpp
// never includes it, so the CPU build needs no CUDA toolkit.
//
// Status: memory (caching allocator with reserved/peak bytes, OutOfMemory), copies, cuBLAS
// GEMMs and the pointwise kernels are here and tested on a device by tests/cuda; the row
// kernels (layer norm, softmax, cross-entropy, embedding, reductions, shape copies), the fused
// attention and the optimizer updates are not yet, so Tensor<Cuda> cannot run a GPT yet.

#include <string>

#include "remat/backend/cuda/context.cuh"
#include "remat/backend/cuda/error.cuh"
#include "remat/backend/cuda/gemm.cuh"
#include "remat/backend/cuda/memory.cuh"
#include "remat/backend/cuda/pointwise.cuh"

namespace remat {

/// The CUDA backend (one device, one stream). Kernels take device pointers.
struct Cuda : cuda::CudaMemory, cuda::CudaGemm, cuda::CudaPointwise {
  using cuda::CudaMemory::name;
  static std::string describe() {
    int dev = 0;
    cudaDeviceProp p{};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess)
      return "cuda: no device";
    return std::string("cuda: ") + p.name + ", sm_" + std::to_string(p.major) +
           std::to_string(p.minor) + ", fp32 GEMM " +
           (cuda::Context::get().tf32() ? "with TF32 tensor cores" : "exact");
  }
};

}  // namespace remat
