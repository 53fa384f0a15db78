#pragma once
// SPDX-License-Identifier: MIT
// Opt-in umbrella of the CUDA backend (target remat::cuda; compile with nvcc). remat/remat.hpp
// never includes it, so the CPU build needs no CUDA toolkit.
//
// Status: every kernel of the CPU backend has a CUDA twin, and attention is fused and tiled
// (flash.cuh: memory linear in T). tests/cuda compares them with the CPU on a device (all passed
// on an H200 before the tiling, benchmarks/results/2026-11-30-gpu-h200) and, compiled as host
// C++ with REMAT_CUDA_EMULATION (no CUDA toolkit; backend/cuda/emulation/), on the CPU in every
// ctest run.
//
// NOTE [host round trips]: a copy to the host waits for every kernel queued before it, so a
// training step reads back only what the host needs:
// - ids and targets made by Tape::tokens carry their range (core/tensor.hpp: int_range), so
//   the embedding's and cross-entropy's range checks read nothing (any other i32 tensor is
//   read with minmax_i32);
// - the loss stays on the device: the cross-entropy kernel averages the rows there (mean_kernel),
//   its backward reads the loss's gradient there; the host reads it at loss.item();
// - clipping computes the gradient norm and its factor and scales on the device
//   (clip_norm_many, NOTE [clipping on the device]); optim::clip_grad_norm_ returns the norm
//   as a tensor, read only when printed (optim::clip_grad_norm reads it: one copy).
// A step with clipping copies to the host once (the loss) and also waits for its two
// uploads (ids and targets: copy_from_host waits, the host buffer may go away); the positions
// are made on the device (Tape::positions).
// The emulation counts them (tests/cuda, "host round trips").

#include <string>

#include "remat/backend/cuda/context.cuh"
#include "remat/backend/cuda/error.cuh"
#include "remat/backend/cuda/gemm.cuh"
#include "remat/backend/cuda/graph.cuh"
#include "remat/backend/cuda/linear.cuh"
#include "remat/backend/backend.hpp"
#include "remat/backend/cuda/memory.cuh"
#include "remat/backend/cuda/nn.cuh"
#include "remat/backend/cuda/optim.cuh"
#include "remat/backend/cuda/pointwise.cuh"
#include "remat/backend/cuda/sizes.hpp"
#include "remat/backend/meta.hpp"

namespace remat {

/// The CUDA backend (one device, one stream). Kernels take device pointers.
struct Cuda : cuda::CudaMemory, cuda::CudaSizes, cuda::CudaGemm, cuda::CudaLinear,
              cuda::CudaPointwise, cuda::CudaNn, cuda::CudaOptim {
  using cuda::CudaMemory::name;
  static std::string describe() {
    int dev = 0;
    cudaDeviceProp p{};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess)
      return "cuda: no device";
    return std::string("cuda: ") + p.name + ", sm_" + std::to_string(p.major) +
           std::to_string(p.minor) + ", fp32 GEMM " +
           (cuda::Context::get().tf32() ? "with TF32 tensor cores" : "exact") + ", attention " +
           (cuda::Context::get().mma_attention() ? "on TF32 tensor cores (head sizes 64, 128)"
                                                 : "exact on CUDA cores");
  }
};

static_assert(check_backend<Cuda>(), "remat: the CUDA backend misses a backend function");
static_assert(has_meta_twin_v<Cuda> && Meta<Cuda>::models_reserved,
              "remat: the estimator cannot mirror the CUDA backend");

}  // namespace remat
