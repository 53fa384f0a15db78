#pragma once
// SPDX-License-Identifier: MIT
// Deterministic column sums for the CUDA backend: out[c] (+)= sum over rows r of term(r, c).
// Rows are cut into a fixed number of chunks; one thread sums a (chunk, column) pair in order,
// then one thread per column adds the chunks in order. The same bits every run, and the whole
// GPU busy (one thread per column alone leaves it idle on tall matrices: 8192 x 768 rows).
// What is summed is a term: any struct with
//   __device__ float operator()(std::int64_t r, std::int64_t c, std::int64_t C) const
// giving the value at row r, column c of a (rows, C) matrix that need not exist in memory. The
// terms here: ColumnOf (a bias gradient where cuBLASLt has no epilogue) and BinaryGradColumn
// (a binary op's broadcast gradient); a fused op's CUDA kernel defines its own beside it, and
// the scratch is CudaSizes::column_sum_scratch(C) whatever the term. (The norms sum their dw
// and db inside their own kernel: NOTE [layer norm backward].)

#include <cstdint>

#include "remat/backend/cuda/launch.cuh"
#include "remat/backend/cuda/memory.cuh"
#include "remat/backend/cuda/sizes.hpp"
#include "remat/core/math.hpp"

namespace remat {
namespace cuda {

/// The matrix g (rows, C) itself.
struct ColumnOf {
  const float* g = nullptr;
  __device__ float operator()(std::int64_t r, std::int64_t c, std::int64_t C) const {
    return g[r * C + c];
  }
};

/// A binary op's gradient with respect to a (wrt_a) or b: g times the op's partial
/// derivative at (a, b), either operand repeated over the rows when broadcast (a_bc, b_bc).
struct BinaryGradColumn {
  const float* g = nullptr;  // (rows, C)
  const float* a = nullptr;
  const float* b = nullptr;
  math::BinaryKind op = math::BinaryKind::add;
  bool a_bc = false, b_bc = false, wrt_a = true;
  __device__ float operator()(std::int64_t r, std::int64_t c, std::int64_t C) const {
    const std::int64_t i = r * C + c;
    const float x = a[a_bc ? c : i], y = b[b_bc ? c : i];
    return g[i] * (wrt_a ? math::binary_grad_a(op, x, y) : math::binary_grad_b(op, x, y));
  }
};

template <class Term>
__global__ void column_partial_kernel(float* partial, Term t, std::int64_t rows, std::int64_t C) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t chunk = blockIdx.y;
  if (c >= C) return;
  const std::int64_t r0 = rows * chunk / kColumnChunks, r1 = rows * (chunk + 1) / kColumnChunks;
  float s = 0.0f;
  for (std::int64_t r = r0; r < r1; ++r) s += t(r, c, C);
  partial[chunk * C + c] = s;
}
template <int = 0>
__global__ void column_finish_kernel(float* out, const float* partial, std::int64_t C,
                                     bool accumulate) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int k = 0; k < kColumnChunks; ++k) s += partial[k * C + c];
  out[c] = accumulate ? out[c] + s : s;
}

/// out (C) += sum over the rows of the term (rows, C), deterministically (accumulate false: out =,
/// its old values never read). `partial` holds CudaSizes::column_sum_scratch(C) bytes (the
/// caller's Scratch: one per kernel call, so that the estimator's model takes the same blocks).
template <class Term>
void column_sum(float* out, const Term& t, std::int64_t rows, std::int64_t C, float* partial,
                bool accumulate = true) {
  if (C == 0) return;
  if (rows == 0) {  // an empty sum
    if (!accumulate) CudaMemory::fill(out, C, 0.0f);
    return;
  }
  const auto stream = Context::get().stream();
  const unsigned cols = static_cast<unsigned>((C + 127) / 128);
  REMAT_CUDA_LAUNCH(column_partial_kernel<Term>, dim3(cols, kColumnChunks), 128, 0, stream,
                    partial, t, rows, C);
  REMAT_CUDA_LAUNCH(column_finish_kernel<>, cols, 128, 0, stream, out, partial, C, accumulate);
}

}  // namespace cuda
}  // namespace remat
