#pragma once
// SPDX-License-Identifier: MIT
// The CUDA caching allocator and copies. Blocks come from device segments that stay reserved
// and are split and merged by the pool of backend/cuda/block_pool.hpp (NOTE [CUDA block pool]),
// so after the first step, and in every checkpoint replay, no cudaMalloc runs, and changing
// shapes reuse what is reserved. The ledger (core/memory.hpp) counts live bytes by category
// exactly; this allocator adds reserved bytes (what cudaMalloc holds) and their peak, which the
// estimator predicts by running the same pool over a device that only counts
// (backend/cuda/model.hpp). Out of memory returns the cached segments, tries again, then throws
// remat::OutOfMemory with the requested, free and reserved bytes: catchable, and the process can
// go on (with checkpointing on, say). Any other CUDA error is a remat::CudaError.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "remat/backend/cuda/block_pool.hpp"
#include "remat/backend/cuda/context.cuh"
#include "remat/backend/cuda/launch.cuh"

#include "remat/core/memory.hpp"

namespace remat {
struct Cuda;
namespace cuda {

/// The real device of the pool: cudaMalloc and cudaFree. Only cudaErrorMemoryAllocation means
/// out of memory (nullptr: the pool returns its cache and tries again, then OutOfMemory); any
/// other error (no device, a driver fault, a sticky error of an earlier kernel) throws
/// CudaError with CUDA's string and this call site.
struct CudaDevice {
  static void* reserve(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess) return p;
    (void)cudaGetLastError();  // clear the error state of this failure
    if (e == cudaErrorMemoryAllocation) return nullptr;
    throw CudaError(::remat::detail::cat("remat::Cuda::allocate: cudaMalloc of ", bytes,
                                         " bytes failed at ", __FILE__, ":", __LINE__, ": ",
                                         cudaGetErrorString(e), " (", cudaGetErrorName(e),
                                         "; hint: is a CUDA device visible? nvidia-smi)"));
  }
  static void release(void* p, std::size_t) noexcept { (void)cudaFree(p); }
};

/// The blocks a CUDA graph holds (NOTE [CUDA graph memory], graph.cuh): the pool's free blocks
/// at the end of its capture, and the capture's outputs once freed. `alive` false once the
/// graph is gone.
struct GraphHold {
  std::vector<void*> blocks;
  bool alive = true;
};

class CachingAllocator {
 public:
  static CachingAllocator& get() {
    static CachingAllocator a;
    return a;
  }

  void* allocate(std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    void* p = pool_.allocate(bytes);  // on a retry cudaFree waits for the device to finish
    if (p) {
      if (capture_) made_.emplace(p, Made{capture_, bytes});  // a replay writes here
#if defined(REMAT_CUDA_EMULATION)
      emu::device().track_block(p, bytes, PoolSizes::round(bytes));  // poison, guard, pointer checks
#endif
      return p;
    }
    std::size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw OutOfMemory(::remat::detail::cat(
        "remat::Cuda::allocate: out of GPU memory allocating ", bytes, " bytes (", free_b,
        " free of ", total_b, ", ", pool_.reserved_bytes(), " reserved by remat); hint: turn on "
        "checkpointing (block, sqrt, budget:SIZE) or lower the batch size"));
  }
  void deallocate(void* p, std::size_t) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = made_.empty() ? made_.end() : made_.find(p); it != made_.end()) {
      const std::shared_ptr<GraphHold> hold = it->second.hold;
      made_.erase(it);
      // an output of a finished capture (freed during its capture, a block is reused by what
      // the capture allocates next, in stream order): its graph keeps it, still tracked
      if (hold->alive && hold != capture_) {
        hold->blocks.push_back(p);
        return;
      }
    }
#if defined(REMAT_CUDA_EMULATION)
    emu::device().untrack_block(p);
#endif
    pool_.deallocate(p);  // stream order: a later kernel that reuses the block runs after
  }
  /// Returns every wholly free segment to the device. Never creates the backend's context
  /// (no stream, no cuBLAS handle) and never throws: it waits for the whole device, and an
  /// error there (a sticky one of an earlier kernel) is left for the next checked call.
  void empty_cache() noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (pool_.segments() == 0) return;
    (void)cudaDeviceSynchronize();  // kernels may still read blocks of the freed segments
    pool_.release_cached();
  }
  /// A CUDA graph's capture begins (NOTE [CUDA graph memory]): no segment goes back to the
  /// device until it ends, and what it allocates is `hold`'s when freed.
  void begin_capture(const std::shared_ptr<GraphHold>& hold) {
    const std::lock_guard<std::mutex> lock(mutex_);
    capture_ = hold;
    pool_.keep_segments(true);
  }
  /// The capture ends: `hold` also takes every free block, so nothing else lands where the
  /// graph's replays write (kept: the capture succeeded) or gives back what it took (not kept).
  void end_capture(const std::shared_ptr<GraphHold>& hold, bool keep) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      capture_.reset();
      pool_.keep_segments(false);
      if (keep)
        for (const auto& [p, bytes] : pool_.take_free_blocks()) {
#if defined(REMAT_CUDA_EMULATION)
          emu::device().track_block(p, bytes, bytes);  // live for the replays' pointer checks
#endif
          hold->blocks.push_back(p);
        }
#if defined(REMAT_CUDA_EMULATION)
      // The capture's outputs lose their guard bytes: in a replay, work before them in stream
      // order may have used that memory for a larger buffer, as the capture allowed.
      for (const auto& [p, m] : made_)
        if (m.hold == hold) emu::device().track_block(p, PoolSizes::round(m.bytes), PoolSizes::round(m.bytes));
#endif
    }
    if (!keep) release_graph(*hold);
  }
  /// The graph is gone: its blocks go back to the pool; those of its outputs still alive go
  /// back when freed.
  void release_graph(GraphHold& hold) noexcept {
    std::vector<void*> blocks;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      hold.alive = false;
      blocks.swap(hold.blocks);
    }
    for (void* p : blocks) deallocate(p, 0);
  }
  // the pool's counters under the same mutex as its changes (as the CPU arena's)
  std::size_t reserved_bytes() const noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    return pool_.reserved_bytes();
  }
  std::size_t peak_reserved_bytes() const noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    return pool_.peak_reserved_bytes();
  }
  void reset_peak_reserved() noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    pool_.reset_peak_reserved();
  }
  std::size_t cached_bytes() const noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    return pool_.cached_bytes();
  }
  std::int64_t cuda_mallocs() const noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    return pool_.device_reserves();
  }

 private:
  CachingAllocator() = default;
  mutable std::mutex mutex_;
  BlockPool<CudaDevice> pool_;
  std::shared_ptr<GraphHold> capture_;  // the capture under way, if any
  // blocks a capture made that are still in use, and the graph that keeps them when freed
  struct Made {
    std::shared_ptr<GraphHold> hold;
    std::size_t bytes;
  };
  std::unordered_map<void*, Made> made_;
};

template <int = 0>
__global__ void fill_kernel(float* x, std::int64_t n, float v) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] = v;
}
template <int = 0>
__global__ void iota_kernel(std::int32_t* x, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] = static_cast<std::int32_t>(i);
}
template <int = 0>
__global__ void add_into_kernel(float* dst, const float* src, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}

/// A kernel's scratch buffer from the caching allocator, counted in the ledger (temporaries)
/// while it lives. Freed in stream order: a later reuse waits for the kernels that read it.
class Scratch {
 public:
  explicit Scratch(std::size_t bytes) : counted_(bytes), bytes_(bytes) {
    if (bytes_ > 0) p_ = CachingAllocator::get().allocate(bytes_);  // 0 bytes take nothing
  }
  ~Scratch() {
    if (bytes_ > 0) CachingAllocator::get().deallocate(p_, bytes_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T>
  T* as() const noexcept { return static_cast<T*>(p_); }

 private:
  ::remat::detail::ScratchBytes<Cuda> counted_;
  std::size_t bytes_;
  void* p_ = nullptr;
};

/// Blocks for a grid-stride loop over n elements.
inline unsigned grid_for(std::int64_t n, unsigned block = 256) {
  const std::int64_t g = (n + block - 1) / block;
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>(g, 65535 * 8)));
}

struct CudaMemory {
  static constexpr const char* name = "cuda";
  static void* allocate(std::size_t bytes) { return CachingAllocator::get().allocate(bytes); }
  static void deallocate(void* p, std::size_t bytes) noexcept {
    CachingAllocator::get().deallocate(p, bytes);
  }
  static void copy_from_host(void* dst, const void* src, std::size_t bytes) {
    const auto s = Context::get().stream();
    REMAT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
    synchronize();  // the host buffer may go away after return
  }
  static void copy_to_host(void* dst, const void* src, std::size_t bytes) {
    const auto s = Context::get().stream();
    REMAT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    synchronize();
  }
  static void copy(void* dst, const void* src, std::size_t bytes) {
    device_counters().launches.fetch_add(1, std::memory_order_relaxed);  // a stream operation too
    REMAT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, Context::get().stream()));
  }
  static void fill(float* x, std::int64_t n, float v) {
    if (n <= 0) return;
    REMAT_CUDA_LAUNCH(fill_kernel<>, grid_for(n), 256, 0, Context::get().stream(), x, n, v);
  }
  /// x[i] = i on the device: positions need no upload (nor a host wait; a CUDA graph may hold it)
  static void iota(std::int32_t* x, std::int64_t n) {
    if (n <= 0) return;
    REMAT_CUDA_LAUNCH(iota_kernel<>, grid_for(n), 256, 0, Context::get().stream(), x, n);
  }
  static void add_into(float* dst, const float* src, std::int64_t n) {
    if (n <= 0) return;
    REMAT_CUDA_LAUNCH(add_into_kernel<>, grid_for(n), 256, 0, Context::get().stream(), dst, src, n);
  }
  /// The host waits for the stream (counted: device_counters().host_waits).
  static void synchronize() {
    device_counters().host_waits.fetch_add(1, std::memory_order_relaxed);
    REMAT_CUDA_CHECK(cudaStreamSynchronize(Context::get().stream()));
  }
  static std::size_t reserved_bytes() { return CachingAllocator::get().reserved_bytes(); }
  static std::size_t peak_reserved_bytes() { return CachingAllocator::get().peak_reserved_bytes(); }
  static void reset_peak_reserved() { CachingAllocator::get().reset_peak_reserved(); }
  /// Bytes the device can still give (checkpoint `auto`, nn::budget_of): its free memory
  /// (cudaMemGetInfo) and what the pool holds unused; 0 when the device cannot say.
  static std::int64_t available_memory() {
    std::size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return static_cast<std::int64_t>(free_b + CachingAllocator::get().cached_bytes());
  }
  static void empty_cache() { CachingAllocator::get().empty_cache(); }
  /// The estimator's model of this allocator: the same pool over a device that only counts.
  using ReservedModel = BlockPool<CountingDevice>;
};

}  // namespace cuda
}  // namespace remat
