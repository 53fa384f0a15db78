#pragma once
// SPDX-License-Identifier: MIT
// CPU backend, part 1: buffers (64-byte aligned), copies, fills, and the thread settings that
// the other CPU kernels and the GEMM (Eigen or OpenBLAS) follow.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <Eigen/Core>

#include "remat/config.hpp"
#include "remat/core/error.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(REMAT_HAVE_OPENBLAS)
extern "C" void openblas_set_num_threads(int);
#endif

namespace remat {
namespace cpu {

inline int& threads_ref() {
  static int n = 0;  // 0: not set by the user; the libraries' defaults apply
  return n;
}

/// Runs fn(begin, end) over [0, n) in one chunk per thread when n is large enough to pay.
template <class Fn>
void parallel_for(std::int64_t n, std::int64_t grain, Fn&& fn) {
#if defined(_OPENMP)
  const int threads = omp_get_max_threads();
  if (threads > 1 && n >= 2 * grain) {
    const std::int64_t chunks = std::min<std::int64_t>(threads, n / grain);
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(chunks))
    for (std::int64_t c = 0; c < chunks; ++c) fn(n * c / chunks, n * (c + 1) / chunks);
    return;
  }
#endif
  (void)grain;
  fn(std::int64_t{0}, n);
}

// NOTE [CPU block cache]
// Freed buffers are kept, by exact (64-byte rounded) size, and handed out again: a training
// step allocates the same sizes every step, so after the first step no buffer comes from
// malloc and no page is faulted in again (with glibc, large buffers are mmapped and every
// fresh one costs page faults: 0.83 -> 1.0 s per GPT step when MALLOC_MMAP_THRESHOLD_ is low).
// The ledger (core/memory.hpp) counts live bytes only; cached_bytes() says what the cache holds
// on top, and empty_cache() returns it. REMAT_CPU_CACHE=0 in the environment turns it off.
class BlockCache {
 public:
  static BlockCache& instance() {
    static BlockCache c;
    return c;
  }
  void* take(std::size_t rounded) {
    if (!enabled_) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(rounded);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= rounded;
    return p;
  }
  bool give(void* p, std::size_t rounded) {
    if (!enabled_) return false;
    std::lock_guard<std::mutex> lock(mu_);
    free_[rounded].push_back(p);
    cached_ += rounded;
    return true;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& kv : free_)
      for (void* p : kv.second) std::free(p);
    free_.clear();
    cached_ = 0;
  }
  std::size_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }
  void set_enabled(bool on) {
    if (!on) clear();
    enabled_ = on;
  }
  bool enabled() const { return enabled_; }
  ~BlockCache() { clear(); }

 private:
  BlockCache() {
    const char* v = std::getenv("REMAT_CPU_CACHE");
    enabled_ = !(v && std::string(v) == "0");
  }
  std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0;
  bool enabled_ = true;
};

struct CpuMemory {
  static constexpr const char* name = "cpu";

  static void* allocate(std::size_t bytes) {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    if (void* p = BlockCache::instance().take(rounded)) return p;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) {  // give the cache back to the system and try once more
      BlockCache::instance().clear();
      p = std::aligned_alloc(64, rounded);
    }
    if (!p)
      throw OutOfMemory(detail::cat("remat::Cpu::allocate: out of memory allocating ", bytes,
                                    " bytes (hint: turn on checkpointing or lower the batch size)"));
    return p;
  }
  static void deallocate(void* p, std::size_t bytes) noexcept {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    bool kept = false;
    try {
      kept = BlockCache::instance().give(p, rounded);
    } catch (...) {
      kept = false;
    }
    if (!kept) std::free(p);
  }
  /// Bytes the block cache holds for reuse (not counted as live in the ledger).
  static std::size_t cached_bytes() { return BlockCache::instance().cached_bytes(); }
  /// Returns every cached block to the system.
  static void empty_cache() { BlockCache::instance().clear(); }
  /// Turns the block cache on or off (off also empties it).
  static void set_caching(bool on) { BlockCache::instance().set_enabled(on); }

  static void copy_from_host(void* dst, const void* src, std::size_t bytes) {
    std::memcpy(dst, src, bytes);
  }
  static void copy_to_host(void* dst, const void* src, std::size_t bytes) {
    std::memcpy(dst, src, bytes);
  }
  static void copy(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }
  static void fill(float* x, std::int64_t n, float v) { std::fill(x, x + n, v); }
  static void synchronize() {}

  /// Sets the threads of our kernels (OpenMP), Eigen and OpenBLAS together.
  static void set_num_threads(int n) {
    REMAT_CHECK(n >= 1, "remat::Cpu::set_num_threads: expected at least 1 thread, got ", n);
    threads_ref() = n;
#if defined(_OPENMP)
    omp_set_num_threads(n);
#endif
    Eigen::setNbThreads(n);
#if defined(REMAT_HAVE_OPENBLAS)
    openblas_set_num_threads(n);
#endif
  }
  static int num_threads() {
#if defined(_OPENMP)
    return omp_get_max_threads();
#else
    return 1;
#endif
  }
  /// Which GEMM runs: "openblas" (Eigen with EIGEN_USE_BLAS) or "eigen".
  static const char* gemm_library() {
#if defined(EIGEN_USE_BLAS)
    return "openblas";
#else
    return "eigen";
#endif
  }
  static std::string describe() {
    return std::string("cpu: eigen ") + std::to_string(EIGEN_WORLD_VERSION) + "." +
           std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION) +
           ", gemm " + gemm_library() + ", " + std::to_string(num_threads()) + " threads" +
#if defined(_OPENMP)
           ", openmp";
#else
           ", no openmp";
#endif
  }
};

}  // namespace cpu
}  // namespace remat
