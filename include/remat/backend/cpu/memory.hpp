#pragma once
// SPDX-License-Identifier: MIT
// CPU backend, part 1: buffers (64-byte aligned), copies, fills, and the thread settings that
// the other CPU kernels and the GEMM (Eigen or OpenBLAS) follow.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

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

struct CpuMemory {
  static constexpr const char* name = "cpu";

  static void* allocate(std::size_t bytes) {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    REMAT_CHECK(p != nullptr, "remat::Cpu::allocate: out of memory allocating ", bytes,
                " bytes (hint: turn on checkpointing or lower the batch size)");
    return p;
  }
  static void deallocate(void* p, std::size_t) noexcept { std::free(p); }

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
