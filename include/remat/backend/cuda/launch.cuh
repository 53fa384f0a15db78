#pragma once
// SPDX-License-Identifier: MIT
// Kernel launches, checked: REMAT_CUDA_LAUNCH(kernel, grid, block, smem, stream, args...) is
// kernel<<<grid, block, smem, stream>>>(args...) (or the emulation's launch, api.cuh) followed
// by a check that names the kernel. With REMAT_CUDA_SYNC_CHECK=1 in the environment (or
// set_sync_check(true)) every launch also synchronizes, so a kernel that faults on the device
// is named at once instead of at some later call (slow: for finding the kernel).

#include <atomic>
#include <cstdlib>

#include "remat/backend/cuda/error.cuh"

namespace remat {
namespace cuda {

inline std::atomic<bool>& sync_check_flag() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("REMAT_CUDA_SYNC_CHECK");
    return e && e[0] == '1';
  }()};
  return on;
}
/// Synchronize and check after every launch (REMAT_CUDA_SYNC_CHECK=1 sets it at start-up).
inline void set_sync_check(bool on) { sync_check_flag().store(on); }
inline bool sync_check() { return sync_check_flag().load(std::memory_order_relaxed); }

/// After a launch: a launch error (a bad configuration, no device) always throws; with the sync
/// check on, an error of the kernel's run throws too. Both name the kernel and the call site.
inline void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw CudaError(::remat::detail::cat("remat: launch of kernel ", kernel, " failed at ", file, ":",
                                         line, ": ", cudaGetErrorString(e)));
  if (!sync_check()) return;
  const cudaError_t s = cudaDeviceSynchronize();
  if (s != cudaSuccess)
    throw CudaError(::remat::detail::cat("remat: kernel ", kernel, " (launched at ", file, ":", line,
                                         ") failed on the device: ", cudaGetErrorString(s),
                                         " (found by REMAT_CUDA_SYNC_CHECK=1)"));
}

}  // namespace cuda
}  // namespace remat

/// Launches a kernel and checks the launch (and, with the sync check on, its run).
#define REMAT_CUDA_LAUNCH(kernel, grid, block, smem, stream, ...)                     \
  do {                                                                                \
    REMAT_CUDA_LAUNCH_ONLY(kernel, grid, block, smem, stream, __VA_ARGS__);           \
    ::remat::cuda::check_launch(#kernel, __FILE__, __LINE__);                         \
  } while (0)
