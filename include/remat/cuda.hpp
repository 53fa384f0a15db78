#pragma once
// SPDX-License-Identifier: MIT
// Opt-in umbrella of the CUDA backend (target remat::cuda; compile with nvcc). remat/remat.hpp
// never includes it, so the CPU build needs no CUDA toolkit.
//
// Status: every kernel of the CPU backend has a CUDA twin, and attention is fused (flash.cuh:
// memory linear in T). tests/cuda compares them with the CPU on a device (all passed on an H200,
// benchmarks/results/2026-11-30-gpu-h200) and, compiled as host C++ with REMAT_CUDA_EMULATION
// (no CUDA toolkit; backend/cuda/emulation/), on the CPU in every ctest run.

#include <string>

#include "remat/backend/cuda/context.cuh"
#include "remat/backend/cuda/error.cuh"
#include "remat/backend/cuda/gemm.cuh"
#include "remat/backend/backend.hpp"
#include "remat/backend/cuda/memory.cuh"
#include "remat/backend/cuda/nn.cuh"
#include "remat/backend/cuda/optim.cuh"
#include "remat/backend/cuda/pointwise.cuh"
#include "remat/backend/cuda/sizes.hpp"
#include "remat/backend/meta.hpp"

namespace remat {

/// The CUDA backend (one device, one stream). Kernels take device pointers.
struct Cuda : cuda::CudaMemory, cuda::CudaSizes, cuda::CudaGemm, cuda::CudaPointwise, cuda::CudaNn,
              cuda::CudaOptim {
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

static_assert(check_backend<Cuda>(), "remat: the CUDA backend misses a backend function");
static_assert(has_meta_twin_v<Cuda> && Meta<Cuda>::models_reserved,
              "remat: the estimator cannot mirror the CUDA backend");

}  // namespace remat
