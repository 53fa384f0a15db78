// SPDX-License-Identifier: MIT
// tests/cuda/test_cuda_kernels.cu compiled as host C++ against the CUDA emulation
// (REMAT_CUDA_EMULATION: include/remat/backend/cuda/emulation/): the same kernels and the same
// checks, run on the CPU with CUDA's execution model, on every machine, with no CUDA toolkit.
#include "cuda/test_cuda_kernels.cu"
