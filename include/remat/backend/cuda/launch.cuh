#pragma once
// SPDX-License-Identifier: MIT
// Kernel launches, checked: REMAT_CUDA_LAUNCH(kernel, grid, block, smem, stream, args...) is
// kernel<<<grid, block, smem, stream>>>(args...) (or the emulation's launch, api.cuh) followed
// by a check that names the kernel. With REMAT_CUDA_SYNC_CHECK=1 in the environment (or
// set_sync_check(true)) every launch also synchronizes, so a kernel that faults on the device
// is named at once instead of at some later call (slow: for finding the kernel).

#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "remat/backend/cuda/error.cuh"
#include "remat/backend/cuda/profile.cuh"

namespace remat {
namespace cuda {

/// What the host sends to the device and waits for, counted since start-up (issue 25, item 9):
/// kernel launches (REMAT_CUDA_LAUNCH), cuBLAS calls (CudaGemm) and host waits (a copy to or
/// from the host, or a synchronization, through CudaMemory). A benchmark takes differences
/// around a step: launches_per_step, host_waits_per_step. Relaxed atomics: nanoseconds.
struct DeviceCounts {
  std::int64_t launches = 0, gemms = 0, host_waits = 0;
};
struct DeviceCounters {
  std::atomic<std::int64_t> launches{0}, gemms{0}, host_waits{0};
  DeviceCounts now() const {
    return {launches.load(std::memory_order_relaxed), gemms.load(std::memory_order_relaxed),
            host_waits.load(std::memory_order_relaxed)};
  }
};
inline DeviceCounters& device_counters() {
  static DeviceCounters c;
  return c;
}

/// Whether a CUDA graph is being captured (graph.cuh sets it): the sync check waits for nothing
/// then (a wait would end the capture).
inline std::atomic<bool>& capturing_flag() {
  static std::atomic<bool> on{false};
  return on;
}

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
  device_counters().launches.fetch_add(1, std::memory_order_relaxed);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw CudaError(::remat::detail::cat("remat: launch of kernel ", kernel, " failed at ", file, ":",
                                         line, ": ", cudaGetErrorString(e)));
  if (!sync_check() || capturing_flag().load(std::memory_order_relaxed)) return;
  const cudaError_t s = cudaDeviceSynchronize();
  if (s != cudaSuccess)
    throw CudaError(::remat::detail::cat("remat: kernel ", kernel, " (launched at ", file, ":", line,
                                         ") failed on the device: ", cudaGetErrorString(s),
                                         " (found by REMAT_CUDA_SYNC_CHECK=1)"));
}

}  // namespace cuda
}  // namespace remat

/// Launches a kernel and checks the launch (and, with the sync check on, its run); with the
/// profile on (profile.cuh), between two events named after the kernel.
#define REMAT_CUDA_LAUNCH(kernel, grid, block, smem, stream, ...)                     \
  do {                                                                                \
    const ::remat::cuda::ProfileScope remat_profile_(stream, [] { return std::string(#kernel); }); \
    REMAT_CUDA_LAUNCH_ONLY(kernel, grid, block, smem, stream, __VA_ARGS__);           \
    ::remat::cuda::check_launch(#kernel, __FILE__, __LINE__);                         \
  } while (0)
