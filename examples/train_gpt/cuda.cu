// SPDX-License-Identifier: MIT
// train_gpt --device cuda: the trainer (trainer.hpp) on the CUDA backend, one GPU. Compiled by
// nvcc into train_gpt where the build has a CUDA toolkit; compiled as host C++ against the CUDA
// emulation into train_gpt_emulated (cuda_emulated.cpp), where tests/cli compares its losses
// with the CPU's on every ctest run.
//
// The weights and snapshots move through the host (io/gpt2.hpp, io/snapshot.hpp copy each
// tensor), so a snapshot of --device cuda resumes on the CPU and the other way round.

#include <remat/cuda.hpp>

#include "trainer.hpp"

namespace train_gpt {

int train_on_cuda(const Flags& f, const CLI::App& app, dist::Comm& comm) {
  // Sums over ranks of device gradients need NCCL (remat/dist/nccl.hpp), which the trainer does
  // not take yet; one process with micro-steps (--grad-accum) runs on the device as on the CPU.
  REMAT_CHECK(comm.size() == 1, "train_gpt: --device cuda runs in one process; this run has ",
              comm.size(), " ranks (expected no mpirun with --device cuda, or --device cpu under "
              "mpirun: the sums over ranks of GPU gradients go through NCCL, not wired into "
              "train_gpt yet)");
  REMAT_CHECK(!f.zero, "train_gpt: --zero shards AdamW's moments over ranks, and --device cuda "
              "runs in one process (expected --zero only with --device cpu under mpirun)");
  REMAT_CHECK(app.count("--threads") == 0, "train_gpt: --threads ", f.threads, " sets the CPU's "
              "threads, and --device cuda trains on the GPU (leave --threads out)");
  if (!cuda::device_available()) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    REMAT_CHECK(false, "train_gpt: --device cuda: no usable CUDA device (cudaGetDeviceCount: ",
                e == cudaSuccess ? "0 devices" : cudaGetErrorString(e),
                "; expected a GPU with a driver, or --device cpu)");
  }
  return train<Cuda>(f, app, comm);
}

}  // namespace train_gpt
