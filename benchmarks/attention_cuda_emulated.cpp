// SPDX-License-Identifier: MIT
// attention_cuda.cu compiled as host C++ against the CUDA emulation (REMAT_CUDA_EMULATION): the
// benchmark's own logic, run by ctest at a tiny size; it measures nothing of a GPU.
#include "attention_cuda.cu"
