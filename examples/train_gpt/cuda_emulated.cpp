// SPDX-License-Identifier: MIT
// train_gpt --device cuda against the CUDA emulation (REMAT_CUDA_EMULATION: the .cuh kernels
// compiled as host C++ and run on the CPU with CUDA's execution model): the binary
// train_gpt_emulated, a test tool (tests/cli/test_train_gpt_cuda.sh), slow, never a product.
#include "cuda.cu"
