#pragma once
// SPDX-License-Identifier: MIT
// The CUDA toolkit, or its emulation on the host: the one place that chooses. With nvcc it
// includes cuda_runtime.h, cublas_v2.h and cublasLt.h; with REMAT_CUDA_EMULATION defined (plain C++, no
// CUDA toolkit at all) the same kernels compile as host code and run on the CPU with CUDA's
// execution model (backend/cuda/emulation/). The seams the kernels use:
//   REMAT_CUDA_LAUNCH(kernel, grid, block, smem, stream, args...)   (launch.cuh: and checks)
//   REMAT_UNROLL                      #pragma unroll for nvcc, nothing for a host compiler
//   REMAT_DYNAMIC_SHARED(T, name);    extern __shared__ T name[] (dynamic shared memory)
//   tf32_bits, mma_tf32_m16n8k8, cp_async_16, cp_async_commit, cp_async_wait  (ptx.cuh)

#if defined(REMAT_CUDA_EMULATION)
#include "remat/backend/cuda/emulation/cublas.hpp"
#include "remat/backend/cuda/emulation/cublaslt.hpp"
#include "remat/backend/cuda/emulation/intrinsics.hpp"
#include "remat/backend/cuda/emulation/runtime.hpp"
#define REMAT_CUDA_LAUNCH_ONLY(kernel, grid, block, smem, stream, ...) \
  ::remat::cuda::emu::launch(kernel, #kernel, grid, block, smem, stream, __VA_ARGS__)
#define REMAT_UNROLL
#define REMAT_DYNAMIC_SHARED(T, name) T* name = ::remat::cuda::emu::dynamic_shared<T>()
#else
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "remat/backend/cuda/ptx.cuh"
#define REMAT_CUDA_LAUNCH_ONLY(kernel, grid, block, smem, stream, ...) \
  kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#define REMAT_UNROLL _Pragma("unroll")
#define REMAT_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif
