#pragma once
// SPDX-License-Identifier: MIT
// CUDA pointwise kernels: binary with trailing broadcast, affine, GELU, ReLU, tanh, the unary
// maps of core/math.hpp, where, max over an axis, dropout, broadcast rows. The per-element math is core/math.hpp's (shared with the CPU tests) and the
// dropout masks come from the same Philox stream as the CPU's, so masks match across backends.
// Broadcast gradients are summed by deterministic column sums (colsum.cuh).

#include <cstdint>

#include "remat/backend/cuda/colsum.cuh"
#include "remat/backend/cuda/launch.cuh"
#include "remat/backend/cuda/memory.cuh"
#include "remat/core/rng.hpp"
#include "remat/core/math.hpp"

namespace remat {
namespace cuda {

#define REMAT_GRID_STRIDE(i, n)                                                           \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; \
       i < (n); i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

template <int = 0>
__global__ void binary_forward_kernel(math::BinaryKind k, float* y, const float* a, const float* b,
                                      std::int64_t outer, std::int64_t inner, bool a_bc, bool b_bc) {
  REMAT_GRID_STRIDE(i, outer * inner) {
    const std::int64_t j = i % inner;
    y[i] = math::binary(k, a[a_bc ? j : i], b[b_bc ? j : i]);
  }
}
// d (outer, inner) += g * d(a op b)/d(wrt), elementwise
template <int = 0>
__global__ void binary_grad_kernel(math::BinaryKind k, float* d, const float* g, const float* a,
                                   const float* b, std::int64_t outer, std::int64_t inner,
                                   bool a_bc, bool b_bc, bool wrt_a, bool set) {
  REMAT_GRID_STRIDE(i, outer * inner) {
    const std::int64_t j = i % inner;
    const float av = a[a_bc ? j : i], bv = b[b_bc ? j : i];
    const float v = g[i] * (wrt_a ? math::binary_grad_a(k, av, bv) : math::binary_grad_b(k, av, bv));
    d[i] = set ? v : d[i] + v;  // set: d holds no values yet (never read)
  }
}
template <int = 0>
__global__ void affine_kernel(float* y, const float* x, std::int64_t n, float scale, float shift) {
  REMAT_GRID_STRIDE(i, n) y[i] = scale * x[i] + shift;
}
template <int = 0>
__global__ void axpy_kernel(float* y, const float* x, std::int64_t n, float scale) {
  REMAT_GRID_STRIDE(i, n) y[i] += scale * x[i];
}
template <int = 0>
__global__ void gelu_forward_kernel(float* y, const float* x, std::int64_t n) {
  REMAT_GRID_STRIDE(i, n) y[i] = math::gelu(x[i]);
}
template <int = 0>
__global__ void gelu_backward_kernel(float* dx, const float* x, const float* dy, std::int64_t n,
                                     bool set) {
  REMAT_GRID_STRIDE(i, n) {
    const float d = dy[i] * math::gelu_grad(x[i]);
    dx[i] = set ? d : dx[i] + d;
  }
}
template <int = 0>
__global__ void relu_forward_kernel(float* y, const float* x, std::int64_t n) {
  REMAT_GRID_STRIDE(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
template <int = 0>
__global__ void relu_backward_kernel(float* dx, const float* x, const float* dy, std::int64_t n) {
  REMAT_GRID_STRIDE(i, n) dx[i] += x[i] > 0.0f ? dy[i] : 0.0f;
}
template <int = 0>
__global__ void tanh_forward_kernel(float* y, const float* x, std::int64_t n) {
  REMAT_GRID_STRIDE(i, n) y[i] = tanhf(x[i]);
}
template <int = 0>
__global__ void tanh_backward_kernel(float* dx, const float* y, const float* dy, std::int64_t n) {
  REMAT_GRID_STRIDE(i, n) dx[i] += dy[i] * (1.0f - y[i] * y[i]);
}
template <int = 0>
__global__ void unary_forward_kernel(math::UnaryKind k, float* y, const float* x, std::int64_t n,
                                     float p, float q) {
  REMAT_GRID_STRIDE(i, n) y[i] = math::unary(k, x[i], p, q);
}
template <int = 0>
__global__ void unary_backward_kernel(math::UnaryKind k, float* dx, const float* x,
                                      const float* dy, std::int64_t n, float p, float q, bool set) {
  REMAT_GRID_STRIDE(i, n) {
    const float d = dy[i] * math::unary_grad(k, x[i], p, q);
    dx[i] = set ? d : dx[i] + d;
  }
}
template <int = 0>
__global__ void where_forward_kernel(float* y, const float* m, const float* a, const float* b,
                                     float b_value, std::int64_t n) {
  REMAT_GRID_STRIDE(i, n) y[i] = m[i] != 0.0f ? a[i] : (b ? b[i] : b_value);
}
template <int = 0>
__global__ void where_backward_kernel(float* da, float* db, const float* m, const float* dy,
                                      std::int64_t n, bool set_a, bool set_b) {
  REMAT_GRID_STRIDE(i, n) {
    const bool pick = m[i] != 0.0f;
    if (da) da[i] = (set_a ? 0.0f : da[i]) + (pick ? dy[i] : 0.0f);
    if (db) db[i] = (set_b ? 0.0f : db[i]) + (pick ? 0.0f : dy[i]);
  }
}
// A thread per output (o, j) walks the n elements of its column: x (outer, n, inner).
template <int = 0>
__global__ void max_forward_kernel(float* y, const float* x, std::int64_t outer, std::int64_t n,
                                   std::int64_t inner) {
  REMAT_GRID_STRIDE(r, outer * inner) {
    const float* col = x + (r / inner) * n * inner + r % inner;
    float m = col[0];
    for (std::int64_t k = 1; k < n; ++k) m = fmaxf(m, col[k * inner]);
    y[r] = m;
  }
}
template <int = 0>
__global__ void max_backward_kernel(float* dx, const float* x, const float* y, const float* dy,
                                    std::int64_t outer, std::int64_t n, std::int64_t inner) {
  REMAT_GRID_STRIDE(r, outer * inner) {
    const std::int64_t base = (r / inner) * n * inner + r % inner;
    for (std::int64_t k = 0; k < n; ++k)
      if (x[base + k * inner] == y[r]) {
        dx[base + k * inner] += dy[r];
        break;
      }
  }
}
template <int = 0>
__global__ void dropout_kernel(float* out, const float* in, std::int64_t n, float p,
                               std::uint64_t seed, std::uint64_t offset, bool accumulate) {
  const float scale = 1.0f / (1.0f - p);
  REMAT_GRID_STRIDE(i, n) {
    const float v = rng::uniform(seed, offset, static_cast<std::uint64_t>(i)) >= p ? in[i] * scale : 0.0f;
    out[i] = accumulate ? out[i] + v : v;
  }
}
template <int = 0>
__global__ void broadcast_rows_kernel(float* y, const float* row, std::int64_t rows, std::int64_t C) {
  REMAT_GRID_STRIDE(i, rows * C) y[i] = row[i % C];
}

struct CudaPointwise {
  static cudaStream_t s() { return Context::get().stream(); }

  static void broadcast_rows(float* y, const float* row, std::int64_t rows, std::int64_t C) {
    if (rows * C == 0) return;
    REMAT_CUDA_LAUNCH(broadcast_rows_kernel<>, grid_for(rows * C), 256, 0, s(), y, row, rows, C);
  }
  static void binary_forward(math::BinaryKind k, float* y, const float* a, const float* b,
                             std::int64_t outer, std::int64_t inner, bool a_bc, bool b_bc) {
    if (outer * inner == 0) return;
    REMAT_CUDA_LAUNCH(binary_forward_kernel<>, grid_for(outer * inner), 256, 0, s(),
                      k, y, a, b, outer, inner, a_bc, b_bc);
  }
  // set_a / set_b: da / db hold no values yet; written (=), not added into
  static void binary_backward(math::BinaryKind k, float* da, float* db, const float* dy,
                              const float* a, const float* b, std::int64_t outer,
                              std::int64_t inner, bool a_bc, bool b_bc, bool set_a = false,
                              bool set_b = false) {
    // (0 bytes when outer * inner == 0, as in the estimator's Meta)
    const Scratch scratch(CudaSizes::binary_backward_scratch(outer, inner, da && a_bc, db && b_bc));
    auto run = [&](float* d, bool d_bc, bool wrt_a) {
      if (!d) return;
      if (d_bc) {  // summed over the rows: deterministic column sums (none: a set d is zeroed)
        const BinaryGradColumn t{dy, a, b, k, a_bc, b_bc, wrt_a};
        column_sum(d, t, outer, inner, scratch.as<float>(), !(wrt_a ? set_a : set_b));
        return;
      }
      if (outer * inner == 0) return;
      REMAT_CUDA_LAUNCH(binary_grad_kernel<>, grid_for(outer * inner), 256, 0, s(),
                        k, d, dy, a, b, outer, inner, a_bc, b_bc, wrt_a, wrt_a ? set_a : set_b);
    };
    run(da, a_bc, true);
    run(db, b_bc, false);
  }
  static void affine_forward(float* y, const float* x, std::int64_t n, float scale, float shift) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(affine_kernel<>, grid_for(n), 256, 0, s(), y, x, n, scale, shift);
  }
  static void affine_backward(float* dx, const float* dy, std::int64_t n, float scale) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(axpy_kernel<>, grid_for(n), 256, 0, s(), dx, dy, n, scale);
  }
  static void gelu_forward(float* y, const float* x, std::int64_t n) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(gelu_forward_kernel<>, grid_for(n), 256, 0, s(), y, x, n);
  }
  static void gelu_backward(float* dx, const float* x, const float* dy, std::int64_t n,
                            bool set = false) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(gelu_backward_kernel<>, grid_for(n), 256, 0, s(), dx, x, dy, n, set);
  }
  static void relu_forward(float* y, const float* x, std::int64_t n) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(relu_forward_kernel<>, grid_for(n), 256, 0, s(), y, x, n);
  }
  static void relu_backward(float* dx, const float* x, const float* dy, std::int64_t n) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(relu_backward_kernel<>, grid_for(n), 256, 0, s(), dx, x, dy, n);
  }
  static void tanh_forward(float* y, const float* x, std::int64_t n) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(tanh_forward_kernel<>, grid_for(n), 256, 0, s(), y, x, n);
  }
  static void tanh_backward(float* dx, const float* y, const float* dy, std::int64_t n) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(tanh_backward_kernel<>, grid_for(n), 256, 0, s(), dx, y, dy, n);
  }
  static void unary_forward(math::UnaryKind k, float* y, const float* x, std::int64_t n, float p,
                            float q) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(unary_forward_kernel<>, grid_for(n), 256, 0, s(), k, y, x, n, p, q);
  }
  static void unary_backward(math::UnaryKind k, float* dx, const float* x, const float* dy,
                             std::int64_t n, float p, float q, bool set = false) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(unary_backward_kernel<>, grid_for(n), 256, 0, s(), k, dx, x, dy, n, p, q,
                      set);
  }
  static void where_forward(float* y, const float* m, const float* a, const float* b,
                            float b_value, std::int64_t n) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(where_forward_kernel<>, grid_for(n), 256, 0, s(), y, m, a, b, b_value, n);
  }
  static void where_backward(float* da, float* db, const float* m, const float* dy,
                             std::int64_t n, bool set_a = false, bool set_b = false) {
    if (n == 0 || (!da && !db)) return;
    REMAT_CUDA_LAUNCH(where_backward_kernel<>, grid_for(n), 256, 0, s(), da, db, m, dy, n, set_a,
                      set_b);
  }
  static void max_forward(float* y, const float* x, std::int64_t outer, std::int64_t n,
                          std::int64_t inner) {
    if (outer * inner == 0) return;
    REMAT_CUDA_LAUNCH(max_forward_kernel<>, grid_for(outer * inner), 256, 0, s(), y, x, outer, n,
                      inner);
  }
  static void max_backward(float* dx, const float* x, const float* y, const float* dy,
                           std::int64_t outer, std::int64_t n, std::int64_t inner) {
    if (outer * inner == 0) return;
    REMAT_CUDA_LAUNCH(max_backward_kernel<>, grid_for(outer * inner), 256, 0, s(), dx, x, y, dy,
                      outer, n, inner);
  }
  static void dropout_forward(float* y, const float* x, std::int64_t n, float p, std::uint64_t seed,
                              std::uint64_t offset) {
    if (n == 0) return;
    REMAT_CHECK(p == 0.0f || !capturing_flag().load(), "remat::Cuda::dropout_forward: dropout ",
                p, " while a CUDA graph is captured (expected p = 0: the seed is drawn on the host "
                "each step, so every replay would reuse one mask; hint: dropout 0, or no graph)");
    REMAT_CUDA_LAUNCH(dropout_kernel<>, grid_for(n), 256, 0, s(), y, x, n, p, seed, offset, false);
  }
  static void dropout_backward(float* dx, const float* dy, std::int64_t n, float p,
                               std::uint64_t seed, std::uint64_t offset, bool set = false) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(dropout_kernel<>, grid_for(n), 256, 0, s(), dx, dy, n, p, seed, offset, !set);
  }
};

#undef REMAT_GRID_STRIDE

}  // namespace cuda
}  // namespace remat
