#pragma once
// SPDX-License-Identifier: MIT
// CudaModel: the CUDA backend as the estimator sees it, in plain C++ (no CUDA toolkit, no
// device): remat::Cuda's layout decisions and kernel scratch sizes (sizes.hpp) and its caching
// allocator's pool over a device that only counts (block_pool.hpp). Meta<CudaModel> runs the
// real training code on shapes and keeps the ledger remat::Cuda would keep, plus the bytes its
// allocator would reserve, on any machine:
//
//   auto est = remat::estimate_gpt_step<remat::CudaModel>(config, batch, seq);
//   est.step.peak_total;  // the GPU ledger's peak of a training step
//   est.reserved_peak;    // what cudaMalloc would hold at its peak

#include <string>

#include "remat/backend/cuda/block_pool.hpp"
#include "remat/backend/cuda/sizes.hpp"

namespace remat {

struct CudaModel : cuda::CudaSizes {
  static constexpr const char* name = "cuda-model";
  static std::string describe() {
    return "cuda model (remat::Cuda's scratch sizes and caching allocator, no device)";
  }
  static int num_threads() { return 1; }
  using ReservedModel = cuda::BlockPool<cuda::CountingDevice>;
};

}  // namespace remat
