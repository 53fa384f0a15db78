#pragma once
// SPDX-License-Identifier: MIT
// CUDA optimizer updates (one fused kernel each, the CPU's formulas) and gradient-norm helpers.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "remat/backend/cuda/launch.cuh"
#include "remat/backend/cuda/memory.cuh"
#include "remat/backend/cuda/sizes.hpp"

namespace remat {
namespace cuda {

template <int = 0>
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, std::int64_t n, float lr,
                             float b1, float b2, float eps, float wd, float step, float sbc2) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    p[i] *= 1.0f - lr * wd;
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    p[i] -= step * m[i] / (sqrtf(v[i]) / sbc2 + eps);
  }
}
template <int = 0>
__global__ void sgd_kernel(float* p, const float* g, float* buf, std::int64_t n, float lr, float mu,
                           float wd, bool nesterov, bool first) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i] + wd * p[i];
    if (!buf) {
      p[i] -= lr * gi;
      continue;
    }
    buf[i] = first ? gi : mu * buf[i] + gi;
    p[i] -= lr * (nesterov ? gi + mu * buf[i] : buf[i]);
  }
}
// partial[b] = sum of x^2 over block b's grid-stride elements
template <int = 0>
__global__ void sum_squares_kernel(double* partial, const float* x, std::int64_t n) {
  __shared__ double sh[256];
  double s = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    s += static_cast<double>(x[i]) * x[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}
// out[k] = the sum of row k of partial (kSumSquaresBlocks each), in order from 0: the bits of
// the host's loop over the row
template <int = 0>
__global__ void sum_rows_kernel(double* out, const double* partial, std::int64_t rows) {
  const std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (k >= rows) return;
  double s = 0.0;
  for (int b = 0; b < kSumSquaresBlocks; ++b) s += partial[k * kSumSquaresBlocks + b];
  out[k] = s;
}
template <int = 0>
__global__ void scale_kernel(float* x, std::int64_t n, float s) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] *= s;
}

struct CudaOptim {
  static void adamw_update(float* p, const float* g, float* m, float* v, std::int64_t n, float lr,
                           float b1, float b2, float eps, float wd, float bc1, float bc2) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(adamw_kernel<>, grid_for(n), 256, 0, Context::get().stream(),
                      p, g, m, v, n, lr, b1, b2, eps, wd, lr / bc1, std::sqrt(bc2));
  }
  static void sgd_update(float* p, const float* g, float* buf, std::int64_t n, float lr, float mu,
                         float wd, bool nesterov, bool first) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(sgd_kernel<>, grid_for(n), 256, 0, Context::get().stream(),
                      p, g, buf, n, lr, mu, wd, nesterov, first);
  }
  /// sum of x^2 in double: fixed blocks, partial sums added on the host in order (deterministic)
  static double sum_squares(const float* x, std::int64_t n) {
    if (n == 0) return 0.0;
    constexpr unsigned kBlocks = kSumSquaresBlocks;
    const Scratch scratch(CudaSizes::sum_squares_scratch(n));
    double* partial = scratch.as<double>();
    REMAT_CUDA_LAUNCH(sum_squares_kernel<>, kBlocks, 256, 0, Context::get().stream(),
                      partial, x, n);
    std::vector<double> h(kBlocks);
    CudaMemory::copy_to_host(h.data(), partial, kBlocks * sizeof(double));
    double s = 0;
    for (double v : h) s += v;
    return s;
  }
  /// out[k] = sum_squares(xs[k], ns[k]), bit for bit, with one copy to the host per round of
  /// up to kSumSquaresChunk buffers (NOTE [host round trips]): a launch per buffer into its own
  /// row of partial sums, the rows summed on the device in the host's order.
  static void sum_squares_many(double* out, const float* const* xs, const std::int64_t* ns,
                               std::size_t count) {
    if (count == 0) return;
    constexpr unsigned kBlocks = kSumSquaresBlocks;
    const Scratch scratch(CudaSizes::sum_squares_many_scratch(count));
    double* partial = scratch.as<double>();
    double* totals = partial + std::min(count, kSumSquaresChunk) * kBlocks;
    for (std::size_t at = 0; at < count; at += kSumSquaresChunk) {
      const std::size_t n = std::min(count - at, kSumSquaresChunk);
      bool any = false;
      for (std::size_t k = 0; k < n; ++k) {
        if (ns[at + k] == 0) continue;
        REMAT_CUDA_LAUNCH(sum_squares_kernel<>, kBlocks, 256, 0, Context::get().stream(),
                          partial + k * kBlocks, xs[at + k], ns[at + k]);
        any = true;
      }
      if (any) {
        REMAT_CUDA_LAUNCH(sum_rows_kernel<>, static_cast<unsigned>((n + 255) / 256), 256, 0,
                          Context::get().stream(), totals, partial, static_cast<std::int64_t>(n));
        CudaMemory::copy_to_host(out + at, totals, n * sizeof(double));
      }
      for (std::size_t k = 0; k < n; ++k)  // an empty buffer's row was never written
        if (!any || ns[at + k] == 0) out[at + k] = 0.0;
    }
  }
  static void scale(float* x, std::int64_t n, float s) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(scale_kernel<>, grid_for(n), 256, 0, Context::get().stream(), x, n, s);
  }
};

}  // namespace cuda
}  // namespace remat
