#pragma once
// SPDX-License-Identifier: MIT
// The CUDA caching allocator and copies. Freed blocks are kept by size (rounded to 512 bytes)
// and handed out again, so after the first step, and in every checkpoint replay, no cudaMalloc
// runs. The ledger (core/memory.hpp) counts live bytes by category exactly; this allocator adds
// reserved bytes (what cudaMalloc holds) and their peak. Out of memory empties the cache, tries
// again, then throws remat::OutOfMemory with the requested, free and reserved bytes: catchable,
// and the process can go on (with checkpointing on, say).

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "remat/backend/cuda/context.cuh"

#include "remat/core/memory.hpp"

namespace remat {
struct Cuda;
namespace cuda {

class CachingAllocator {
 public:
  static CachingAllocator& get() {
    static CachingAllocator a;
    return a;
  }
  static std::size_t round(std::size_t bytes) { return (bytes + 511) / 512 * 512; }

  void* allocate(std::size_t bytes) {
    const std::size_t r = round(bytes);
    auto it = free_.find(r);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= r;
      return p;
    }
    void* p = nullptr;
    if (cudaMalloc(&p, r) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free error state of this failure
      empty_cache();
      if (cudaMalloc(&p, r) != cudaSuccess) {
        (void)cudaGetLastError();
        std::size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        throw OutOfMemory(::remat::detail::cat(
            "remat::Cuda::allocate: out of GPU memory allocating ", bytes, " bytes (", free_b,
            " free of ", total_b, ", ", reserved_, " reserved by remat); hint: turn on "
            "checkpointing (block, sqrt) or lower the batch size"));
      }
    }
    reserved_ += r;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
    ++mallocs_;
    return p;
  }
  void deallocate(void* p, std::size_t bytes) noexcept {
    const std::size_t r = round(bytes);
    try {
      free_[r].push_back(p);
      cached_ += r;
    } catch (...) {
      cudaFree(p);
      reserved_ -= r;
    }
  }
  /// Returns every cached block to the device.
  void empty_cache() noexcept {
    cudaStreamSynchronize(Context::get().stream());
    for (auto& kv : free_)
      for (void* p : kv.second) {
        cudaFree(p);
        reserved_ -= kv.first;
      }
    free_.clear();
    cached_ = 0;
  }
  std::size_t reserved_bytes() const noexcept { return reserved_; }
  std::size_t peak_reserved_bytes() const noexcept { return peak_reserved_; }
  void reset_peak_reserved() noexcept { peak_reserved_ = reserved_; }
  std::size_t cached_bytes() const noexcept { return cached_; }
  std::int64_t cuda_mallocs() const noexcept { return mallocs_; }

 private:
  CachingAllocator() = default;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::size_t reserved_ = 0, peak_reserved_ = 0, cached_ = 0;
  std::int64_t mallocs_ = 0;
};

template <int = 0>
__global__ void fill_kernel(float* x, std::int64_t n, float v) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] = v;
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
    p_ = CachingAllocator::get().allocate(bytes);
  }
  ~Scratch() { CachingAllocator::get().deallocate(p_, bytes_); }
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
    REMAT_CUDA_CHECK(cudaStreamSynchronize(s));  // the host buffer may go away after return
  }
  static void copy_to_host(void* dst, const void* src, std::size_t bytes) {
    const auto s = Context::get().stream();
    REMAT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    REMAT_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  static void copy(void* dst, const void* src, std::size_t bytes) {
    REMAT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, Context::get().stream()));
  }
  static void fill(float* x, std::int64_t n, float v) {
    if (n <= 0) return;
    fill_kernel<><<<grid_for(n), 256, 0, Context::get().stream()>>>(x, n, v);
    REMAT_CUDA_CHECK_LAUNCH("fill");
  }
  static void add_into(float* dst, const float* src, std::int64_t n) {
    if (n <= 0) return;
    add_into_kernel<><<<grid_for(n), 256, 0, Context::get().stream()>>>(dst, src, n);
    REMAT_CUDA_CHECK_LAUNCH("add_into");
  }
  static void synchronize() { REMAT_CUDA_CHECK(cudaStreamSynchronize(Context::get().stream())); }
  static std::size_t reserved_bytes() { return CachingAllocator::get().reserved_bytes(); }
  static std::size_t peak_reserved_bytes() { return CachingAllocator::get().peak_reserved_bytes(); }
  static void empty_cache() { CachingAllocator::get().empty_cache(); }
};

}  // namespace cuda
}  // namespace remat
