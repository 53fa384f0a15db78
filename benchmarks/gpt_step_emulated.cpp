// SPDX-License-Identifier: MIT
// gpt_step_cuda.cu compiled as host C++ against the CUDA emulation (REMAT_CUDA_EMULATION): the
// benchmark's own logic on the CPU. It measures nothing of a GPU; its launches_per_step and
// host_waits_per_step are the GPU build's (the same code sends the same work).
//
//   build/benchmarks/gpt_step_emulated --layers 12 --d 64 --heads 4 --seq 32 --batch 1
//       --vocab 256 --steps 1 --warmup 1 --checkpoint none --launch-table
#include "gpt_step_cuda.cu"
