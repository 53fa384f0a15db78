#pragma once
// SPDX-License-Identifier: MIT
// CUDA row kernels: the norms (layer norm, RMSNorm), softmax, cross-entropy, embedding,
// reductions over an axis, block copies (slice, concat), permute, and attention. One thread block per row where a row
// needs a reduction; column sums run one thread per column over the rows in order, so they
// are deterministic (colsum.cuh). The embedding's scatter-add has no atomics either: each block
// owns a range of the table's rows and sums their tokens in sequence order (NOTE [embedding backward]).
// Attention is fused: on the tensor cores (flash_mma.cuh) for head sizes 64 and 128 with TF32 on,
// else tiled on CUDA cores (flash.cuh) for head sizes up to 128; larger heads keep P like the CPU.

#include <cfloat>
#include <cstdlib>
#include <string>
#include <cstdint>
#include <vector>

#include "remat/backend/cuda/colsum.cuh"
#include "remat/backend/cuda/flash.cuh"
#include "remat/backend/cuda/flash_mma.cuh"
#include "remat/backend/cuda/gemm.cuh"
#include "remat/backend/cuda/launch.cuh"
#include "remat/backend/cuda/memory.cuh"
#include "remat/core/shape.hpp"
#include "remat/core/math.hpp"
#include "remat/ops/activation.hpp"
#include "remat/ops/cast.hpp"
#include "remat/ops/elementwise.hpp"
#include "remat/ops/layer_norm.hpp"
#include "remat/ops/loss.hpp"
#include "remat/ops/matmul.hpp"
#include "remat/ops/rotary.hpp"

namespace remat {
namespace cuda {

constexpr int kRowThreads = 256;
// reduce_forward: a block per output while there are at most this many outputs (a thread per
// output would not fill the device) or the reduced axis is contiguous, and the axis is long
constexpr std::int64_t kReduceBlocksBelow = 1 << 16;

// Sum (or max) over the block; every thread gets the result.
template <bool Max>
__device__ inline float block_reduce(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = Max ? fmaxf(v, w) : v + w;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = Max ? -FLT_MAX : 0.0f;
  for (int i = 0; i < warps; ++i) r = Max ? fmaxf(r, shared[i]) : r + shared[i];
  return r;
}

// The norms' forward, a block a row: y = (x - mean) rstd w + b, rstd = 1 / sqrt(var + eps)
// (Centered: layer norm; mean written), or y = x rstd w, rstd = 1 / sqrt(mean(x^2) + eps)
// (RMSNorm: mean and b unused). x and y of type t (f32 or bf16: widened as read, y rounded
// once), the sums in fp32.
template <bool Centered = true>
__global__ void layer_norm_forward_kernel(void* y, float* mean, float* rstd, const void* x,
                                          const float* w, const float* b, std::int64_t C, float eps,
                                          DType t) {
  __shared__ float sh[32];
  const std::int64_t o = blockIdx.x * C;
  float m = 0.0f;
  if (Centered) {
    float s = 0;
    for (std::int64_t i = threadIdx.x; i < C; i += blockDim.x) s += math::load_f32(x, t, o + i);
    m = block_reduce<false>(s, sh) / static_cast<float>(C);
  }
  float v = 0;
  for (std::int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float d = math::load_f32(x, t, o + i) - m;
    v += d * d;
  }
  const float r = rsqrtf(block_reduce<false>(v, sh) / static_cast<float>(C) + eps);
  for (std::int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float xi = math::load_f32(x, t, o + i);
    math::store_f32(y, t, o + i, Centered ? (xi - m) * r * w[i] + b[i] : xi * r * w[i]);
  }
  if (threadIdx.x == 0) {
    if (Centered) mean[blockIdx.x] = m;
    rstd[blockIdx.x] = r;
  }
}
// NOTE [layer norm backward]
// The norms' backward (layer norm; RMSNorm with Centered false: no mean, no db, and no mean(g)
// term in dx). One launch whatever the rows (was five: dx, then two column sums of two kernels each; then
// two: the column sums' finish was a kernel of its own).
// - Block b takes the rows [rows b / K, rows (b+1) / K) of K = kRowSumChunks, in order. Per
//   row: dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w (written or added: set_dx); and
//   the chunk's partial sums of dw (dy xhat) and db (dy), each column owned by one thread, in
//   its row of the scratch.
// - The block that finishes last (a ticket from an atomic counter, after a fence that makes its
//   partial sums visible to every block) sums the K partial rows in chunk order into dw and db.
//   The counter wraps to zero at the last ticket (atomicInc), so it is zero between launches.
// Each sum has a fixed order whatever the schedule, and whichever block comes last:
// deterministic; the only atomic is the ticket.
// The blocks' ticket counter: zero between launches (the last block's atomicInc wraps it).
static __device__ unsigned layer_norm_tickets = 0;
template <int = 0>
__device__ inline void layer_norm_finish(float* dw, float* db, const float* part_w,
                                         const float* part_b, std::int64_t C, bool set_dw,
                                         bool set_db) {
  for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < kRowSumChunks; ++k) {
      if (dw) sw += part_w[k * C + c];
      if (db) sb += part_b[k * C + c];
    }
    if (dw) dw[c] = set_dw ? sw : dw[c] + sw;
    if (db) db[c] = set_db ? sb : db[c] + sb;
  }
}
template <bool Centered = true>
__global__ void layer_norm_backward_kernel(void* dx, float* dw, float* db, float* part_w,
                                           float* part_b, const void* dy, const void* x,
                                           const float* w, const float* mean, const float* rstd,
                                           std::int64_t rows, std::int64_t C, bool set_dx,
                                           bool set_dw, bool set_db, DType dxt, DType dyt,
                                           DType xt) {
  __shared__ float sh[32];
  __shared__ bool last;
  const std::int64_t chunk = blockIdx.x;
  const std::int64_t r0 = rows * chunk / gridDim.x, r1 = rows * (chunk + 1) / gridDim.x;
  float* pw = part_w ? part_w + chunk * C : nullptr;
  float* pb = part_b ? part_b + chunk * C : nullptr;
  for (std::int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    if (pw) pw[i] = 0.0f;
    if (pb) pb[i] = 0.0f;
  }
  for (std::int64_t r = r0; r < r1; ++r) {
    const float m = Centered ? mean[r] : 0.0f, s = rstd[r];
    const std::int64_t o = r * C;
    auto xv = [&](std::int64_t i) { return math::load_f32(x, xt, o + i); };
    auto gv = [&](std::int64_t i) { return math::load_f32(dy, dyt, o + i); };
    if (dx) {  // the same branch for the whole block (block_reduce synchronizes it)
      float a = 0, bsum = 0;
      for (std::int64_t i = threadIdx.x; i < C; i += blockDim.x) {
        const float g = gv(i) * w[i];
        a += g;
        bsum += g * (xv(i) - m) * s;
      }
      const float mg = Centered ? block_reduce<false>(a, sh) / static_cast<float>(C) : 0.0f;
      const float mgx = block_reduce<false>(bsum, sh) / static_cast<float>(C);
      for (std::int64_t i = threadIdx.x; i < C; i += blockDim.x) {
        const float d = s * (gv(i) * w[i] - mg - (xv(i) - m) * s * mgx);
        math::store_f32(dx, dxt, o + i, set_dx ? d : math::load_f32(dx, dxt, o + i) + d);
      }
    }
    for (std::int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      if (pw) pw[i] += gv(i) * (xv(i) - m) * s;
      if (pb) pb[i] += gv(i);
    }
  }
  if (!pw && !pb) return;  // the same for every block
  __threadfence();  // this block's partial sums, visible to whichever block comes last
  __syncthreads();
  if (threadIdx.x == 0) last = atomicInc(&layer_norm_tickets, gridDim.x - 1) == gridDim.x - 1;
  __syncthreads();
  if (last) layer_norm_finish<>(dw, db, part_w, part_b, C, set_dw, set_db);
}
// y (n) (+)= x converted between f32 and bf16 (core/bf16.hpp's rounding; a sum in fp32,
// rounded once)
template <int = 0>
__global__ void convert_kernel(void* y, DType to, const void* x, DType from, std::int64_t n,
                               bool add) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = math::load_f32(x, from, i);
    math::store_f32(y, to, i, add ? math::load_f32(y, to, i) + v : v);
  }
}
// y (rows, F) = silu(a) b (math::swiglu), a and b rows lda and ldb apart: a thread an element
template <int = 0>
__global__ void swiglu_forward_kernel(void* y, DType yt, const void* a, const void* b, DType t, std::int64_t rows,
                                      std::int64_t F, std::int64_t lda, std::int64_t ldb) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < rows * F;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / F, c = i % F;
    math::store_f32(y, yt, i, math::swiglu(math::load_f32(a, t, r * lda + c), math::load_f32(b, t, r * ldb + c)));
  }
}
// da (+)= dy b s (1 + a (1 - s)), db (+)= dy a s (math::swiglu_grad); a null output is skipped
template <int = 0>
__global__ void swiglu_backward_kernel(void* da, void* db, DType dt, const void* dy, DType dyt, const void* a,
                                       const void* b, DType t, std::int64_t rows, std::int64_t F, std::int64_t lda,
                                       std::int64_t ldb, bool set_a, bool set_b) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < rows * F;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / F, c = i % F, ia = r * lda + c, ib = r * ldb + c;
    float ga, gb;
    math::swiglu_grad(math::load_f32(a, t, ia), math::load_f32(b, t, ib), math::load_f32(dy, dyt, i), ga, gb);
    if (da) math::store_f32(da, dt, ia, set_a ? ga : math::load_f32(da, dt, ia) + ga);
    if (db) math::store_f32(db, dt, ib, set_b ? gb : math::load_f32(db, dt, ib) + gb);
  }
}
// y (batch, T, H, D) (+)= x turned pair by pair (math::rope_pair): a thread a pair (j, j + D/2)
template <int = 0>
__global__ void rope_kernel(void* y, const void* x, std::int64_t pairs, std::int64_t T, std::int64_t H,
                            std::int64_t D, std::int64_t pos0, RopeFrequencies f, bool inverse, bool add,
                            DType yt, DType xt) {
  const std::int64_t half = D / 2;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < pairs;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t j = i % half, head = i / half;  // head: (batch, t, h) flattened
    const std::int64_t o = head * D + j;
    float y0, y1;
    math::rope_pair(math::load_f32(x, xt, o), math::load_f32(x, xt, o + half), pos0 + (head / H) % T, f.f[j],
                    inverse, y0, y1);
    if (add) {
      y0 += math::load_f32(y, yt, o);
      y1 += math::load_f32(y, yt, o + half);
    }
    math::store_f32(y, yt, o, y0);
    math::store_f32(y, yt, o + half, y1);
  }
}
// c (M, N) at ldc, of type ct = acc (M, N) + bias (N) + r (M, N, at ldc; type ct) + c, each
// term only where given, rounded once (GemmKernel's finish, as the CPU's typed_gemm.hpp)
template <int = 0>
__global__ void gemm_finish_kernel(void* c, DType ct, std::int64_t ldc, const float* acc,
                                   const float* bias, const void* r, bool accumulate,
                                   std::int64_t M, std::int64_t N) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < M * N;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = i / N, col = i % N, e = row * ldc + col;
    float v = acc[i];
    if (bias) v += bias[col];
    if (r) v += math::load_f32(r, ct, e);
    if (accumulate) v += math::load_f32(c, ct, e);
    math::store_f32(c, ct, e, v);
  }
}
// y (N) (+)= the column sums of x (rows, N): a thread a column, down the rows in order in
// fp32 (the CPU's order: the same bits), rounded once to y's type
template <int = 0>
__global__ void column_sum_kernel(void* y, DType yt, const void* x, DType xt, std::int64_t rows,
                                  std::int64_t N, bool add) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= N) return;
  float v = 0.0f;
  for (std::int64_t r = 0; r < rows; ++r) v += math::load_f32(x, xt, r * N + c);
  math::store_f32(y, yt, c, add ? v + math::load_f32(y, yt, c) : v);
}
// y (rows, C) = a op b, a (a_col) or b a column (rows): one value a row
template <int = 0>
__global__ void binary_column_forward_kernel(math::BinaryKind k, float* y, const float* a,
                                             const float* b, std::int64_t rows, std::int64_t C,
                                             bool a_col) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       i < rows * C; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / C;
    y[i] = a_col ? math::binary(k, a[r], b[i]) : math::binary(k, a[i], b[r]);
  }
}
// A block a row: the full operand's gradient element by element, the column's as the row's sum
// (one block_reduce: the same order on every run).
template <int = 0>
__global__ void binary_column_backward_kernel(math::BinaryKind k, float* da, float* db,
                                              const float* dy, const float* a, const float* b,
                                              std::int64_t C, bool a_col, bool set_a, bool set_b) {
  __shared__ float sh[32];
  const std::int64_t r = blockIdx.x;
  float* dfull = a_col ? db : da;
  float* dcol = a_col ? da : db;
  const bool set_full = a_col ? set_b : set_a, set_col = a_col ? set_a : set_b;
  float sum = 0.0f;
  for (std::int64_t j = threadIdx.x; j < C; j += blockDim.x) {
    const std::int64_t i = r * C + j;
    const float av = a_col ? a[r] : a[i], bv = a_col ? b[i] : b[r], g = dy[i];
    const float ga = g * math::binary_grad_a(k, av, bv), gb = g * math::binary_grad_b(k, av, bv);
    if (dfull) {
      const float v = a_col ? gb : ga;
      dfull[i] = set_full ? v : dfull[i] + v;
    }
    sum += a_col ? ga : gb;
  }
  if (!dcol) return;  // the same for every thread of the block
  sum = block_reduce<false>(sum, sh);
  if (threadIdx.x == 0) dcol[r] = set_col ? sum : dcol[r] + sum;
}
// y[0:valid] = softmax(scale x[0:valid]), y[valid:C] = 0; valid = row % T + 1 when causal
template <int = 0>
__global__ void softmax_kernel(float* y, const float* x, std::int64_t C, float scale,
                               std::int64_t causal_T) {
  __shared__ float sh[32];
  const std::int64_t r = blockIdx.x;
  const std::int64_t valid = causal_T > 0 ? (r % causal_T) + 1 : C;
  const float* xr = x + r * C;
  float* yr = y + r * C;
  float m = -FLT_MAX;
  for (std::int64_t i = threadIdx.x; i < valid; i += blockDim.x) m = fmaxf(m, xr[i] * scale);
  m = block_reduce<true>(m, sh);
  float s = 0;
  for (std::int64_t i = threadIdx.x; i < valid; i += blockDim.x) s += expf(xr[i] * scale - m);
  const float inv = 1.0f / block_reduce<false>(s, sh);
  for (std::int64_t i = threadIdx.x; i < C; i += blockDim.x)
    yr[i] = i < valid ? expf(xr[i] * scale - m) * inv : 0.0f;
}
// dx (+)= y (dy - sum(dy y)); with `overwrite`, dx = instead (attention's dS)
template <int = 0>
__global__ void softmax_backward_kernel(float* dx, const float* y, const float* dy, std::int64_t C,
                                        bool overwrite) {
  __shared__ float sh[32];
  const std::int64_t r = blockIdx.x;
  const float *yr = y + r * C, *gr = dy + r * C;
  float s = 0;
  for (std::int64_t i = threadIdx.x; i < C; i += blockDim.x) s += yr[i] * gr[i];
  s = block_reduce<false>(s, sh);
  for (std::int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float v = yr[i] * (gr[i] - s);
    dx[r * C + i] = overwrite ? v : dx[r * C + i] + v;
  }
}
// one block a row of V classes, rows ld floats apart (columns V..ld-1: padding, never read)
template <int = 0>
__global__ void cross_entropy_forward_kernel(float* lse, float* loss, const void* logits,
                                             const std::int32_t* targets, std::int64_t V,
                                             std::int64_t ld, DType t) {
  __shared__ float sh[32];
  const std::int64_t r = blockIdx.x, o = r * ld;
  float m = -FLT_MAX;
  for (std::int64_t i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, math::load_f32(logits, t, o + i));
  m = block_reduce<true>(m, sh);
  float s = 0;
  for (std::int64_t i = threadIdx.x; i < V; i += blockDim.x) s += expf(math::load_f32(logits, t, o + i) - m);
  s = block_reduce<false>(s, sh);
  if (threadIdx.x == 0) {
    lse[r] = m + logf(s);
    loss[r] = lse[r] - math::load_f32(logits, t, o + targets[r]);
  }
}
// out[0] = (sum of x[0..n)) / n, in double: one block of kRowThreads (a power of two), each
// thread a strided part, then a tree in shared memory; a fixed order: deterministic
template <int = 0>
__global__ void mean_kernel(float* out, const float* x, std::int64_t n) {
  __shared__ double sh[kRowThreads];
  double s = 0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = static_cast<float>(sh[0] / static_cast<double>(n));
}
// scale = dloss[0] / N, read on the device (the loss's gradient never visits the host)
// dlogits may be logits itself (set): each thread reads its element, then writes it; the
// padding columns [V, ld) get 0 (written with set, else left as they are)
template <int = 0>
__global__ void cross_entropy_backward_kernel(void* dlogits, const void* logits, const float* lse,
                                              const std::int32_t* targets, std::int64_t V,
                                              std::int64_t ld, const float* dloss, std::int64_t N,
                                              bool set, DType dt, DType lt) {
  const std::int64_t r = blockIdx.x;
  const float scale = dloss[0] / static_cast<float>(N);
  for (std::int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    const std::int64_t e = r * ld + i;
    const float d = scale * (expf(math::load_f32(logits, lt, e) - lse[r]) - (i == targets[r] ? 1.0f : 0.0f));
    math::store_f32(dlogits, dt, e, set ? d : math::load_f32(dlogits, dt, e) + d);
  }
  if (set)
    for (std::int64_t i = V + threadIdx.x; i < ld; i += blockDim.x) math::store_f32(dlogits, dt, r * ld + i, 0.0f);
}
template <int = 0>
__global__ void embedding_forward_kernel(float* y, const float* w, const std::int32_t* ids,
                                         std::int64_t n, std::int64_t C) {
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < n * C;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[k] = w[static_cast<std::int64_t>(ids[k / C]) * C + k % C];
}
// NOTE [embedding backward]: dw[v, c] += dy[t, c] for every token t with ids[t] == v, in the
// order of t. A scatter with atomicAdd would sum a repeated token's rows in whatever order the
// GPU's blocks run (the last bits of wte's gradient would change from run to run, and a
// checkpointed step would differ from a plain one). Here block (x, y) owns the table's rows
// [x R, (x + 1) R) and the columns y blockDim + threadIdx: it reads the ids in chunks through
// shared memory, and each thread adds the rows of the tokens it owns in token order. Every
// element of dw has one writer and the CPU's order of summation, so CUDA and the CPU agree bit
// for bit. Cost: every block reads all n ids (n / chunk barriers); 128 row ranges keep that
// small against the scatter itself (V 50257, n 8192: 384 blocks, 3 M id reads from L1/L2).
constexpr int kEmbeddingIdChunk = 1024;
constexpr std::int64_t kEmbeddingRowRanges = 128;
template <int = 0>
__global__ void embedding_backward_kernel(float* dw, const float* dy, const std::int32_t* ids,
                                          std::int64_t n, std::int64_t rows_per_block,
                                          std::int64_t V, std::int64_t C, bool set) {
  __shared__ std::int32_t chunk[kEmbeddingIdChunk];
  const std::int64_t v0 = blockIdx.x * rows_per_block;
  const std::int64_t v1 = v0 + rows_per_block < V ? v0 + rows_per_block : V;
  const std::int64_t c = blockIdx.y * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (set && c < C)  // a fresh dw: this thread's elements start at zero
    for (std::int64_t v = v0; v < v1; ++v) dw[v * C + c] = 0.0f;
  for (std::int64_t t0 = 0; t0 < n; t0 += kEmbeddingIdChunk) {
    const int m = static_cast<int>(n - t0 < kEmbeddingIdChunk ? n - t0 : kEmbeddingIdChunk);
    __syncthreads();  // every thread is done with the previous chunk
    for (int i = threadIdx.x; i < m; i += blockDim.x) chunk[i] = ids[t0 + i];
    __syncthreads();
    if (c >= C) continue;  // (still reaches both barriers of the next chunk)
    for (int i = 0; i < m; ++i) {
      const std::int64_t v = chunk[i];
      if (v >= v0 && v < v1) dw[v * C + c] += dy[(t0 + i) * C + c];
    }
  }
}
template <int = 0>
__global__ void reduce_forward_kernel(float* y, const float* x, std::int64_t outer, std::int64_t n,
                                      std::int64_t inner, float scale) {
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < outer * inner;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t o = k / inner, i = k % inner;
    float s = 0;
    for (std::int64_t j = 0; j < n; ++j) s += x[(o * n + j) * inner + i];
    y[k] = s * scale;
  }
}
// The same with blocks of kRowThreads: `parts` blocks per output, block (k, p) summing part p
// of output k's axis (each thread a strided share, then block_reduce in a fixed order) into
// y[k * parts + p], scaled. parts = 1 for few outputs over an axis of kRowThreads or more, where
// a thread per output would leave the device idle; a long axis of few outputs (sum(x) of a
// whole tensor) is split into kReduceParts parts first, and their sums reduced by a second
// launch (parts 1) in order: deterministic either way.
template <int = 0>
__global__ void reduce_parts_kernel(float* y, const float* x, std::int64_t n, std::int64_t inner,
                                    int parts, float scale) {
  __shared__ float sh[32];
  const std::int64_t k = blockIdx.x / parts, p = blockIdx.x % parts;
  const std::int64_t o = k / inner, i = k % inner;
  const std::int64_t chunk = (n + parts - 1) / parts, j0 = p * chunk;
  const std::int64_t j1 = j0 + chunk < n ? j0 + chunk : n;
  const float* xo = x + o * n * inner + i;
  float s = 0;
  for (std::int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) s += xo[j * inner];
  s = block_reduce<false>(s, sh);
  if (threadIdx.x == 0) y[blockIdx.x] = s * scale;
}
template <int = 0>
__global__ void reduce_backward_kernel(float* dx, const float* dy, std::int64_t outer, std::int64_t n,
                                       std::int64_t inner, float scale) {
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < outer * n * inner;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dx[k] += scale * dy[(k / (n * inner)) * inner + k % inner];
}
template <int = 0>
__global__ void copy_block_kernel(float* dst, std::int64_t dst_n, std::int64_t dst_start, const float* src,
                                  std::int64_t src_n, std::int64_t src_start, std::int64_t len,
                                  std::int64_t outer, std::int64_t inner, bool accumulate) {
  const std::int64_t w = len * inner;
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < outer * w;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t o = k / w, j = k % w;
    const float v = src[(o * src_n + src_start) * inner + j];
    float& d = dst[(o * dst_n + dst_start) * inner + j];
    d = accumulate ? d + v : v;
  }
}
struct PermuteArgs {
  int rank;
  std::int64_t ydim[Shape::kMaxRank];
  std::int64_t ystride_x[Shape::kMaxRank];  // x's stride for each of y's axes
};
template <int = 0>
__global__ void permute_kernel(float* y, const float* x, std::int64_t n, PermuteArgs a, bool accumulate) {
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t rem = k, off = 0;
    for (int i = a.rank - 1; i >= 0; --i) {
      off += (rem % a.ydim[i]) * a.ystride_x[i];
      rem /= a.ydim[i];
    }
    y[k] = accumulate ? y[k] + x[off] : x[off];
  }
}

struct CudaNn {
  static cudaStream_t s() { return Context::get().stream(); }

  static void run(const CastOp::Convert& k) {
    if (k.n == 0) return;
    REMAT_CUDA_LAUNCH(convert_kernel<>, grid_for(k.n), 256, 0, s(), k.y, k.to, k.x, k.from, k.n,
                      k.add);
  }
  // cuBLAS writes fp32 (cublasGemmEx); a C it cannot write as it is gets an fp32 matrix and
  // gemm_finish_kernel (CudaSizes::scratch(GemmKernel)), matrix by matrix; a shared C
  // (sc == 0) sums the batch with beta 1.
  static void run(const GemmKernel& k) {
    if (k.M == 0 || k.N == 0 || k.batch == 0) return;
    const Scratch acc(CudaSizes::scratch(k));
    const bool direct = acc.as<float>() == nullptr;
    const bool shared = k.sc == 0 && k.batch > 1;
    const std::size_t e = dtype_size(k.ab);
    for (std::int64_t o = 0; o < (shared ? 1 : k.batch); ++o) {
      float* d = direct ? static_cast<float*>(k.c) + o * k.sc : acc.as<float>();
      const std::int64_t ldd = direct ? k.ldc : k.N;
      for (std::int64_t m = shared ? 0 : o; m < (shared ? k.batch : o + 1); ++m) {
        const bool first = m == (shared ? 0 : o);
        const float beta = !first || (direct && k.accumulate) ? 1.0f : 0.0f;
        CudaGemm::gemm_bf16(k.ta, k.tb, k.M, k.N, k.K, static_cast<const char*>(k.a) + m * k.sa * e,
                            k.lda, static_cast<const char*>(k.b) + m * k.sb * e, k.ldb, beta, d, ldd);
      }
      if (!direct) {
        const std::size_t c = dtype_size(k.ct);
        REMAT_CUDA_LAUNCH(gemm_finish_kernel<>, grid_for(k.M * k.N), 256, 0, s(),
                          static_cast<char*>(k.c) + o * k.sc * c, k.ct, k.ldc, acc.as<float>(),
                          k.bias, k.r ? static_cast<const char*>(k.r) + o * k.sc * c : nullptr,
                          k.accumulate, k.M, k.N);
      }
    }
  }
  static void run(const ColumnSumKernel& k) {
    if (k.N == 0) return;
    REMAT_CUDA_LAUNCH(column_sum_kernel<>, static_cast<unsigned>((k.N + 255) / 256), 256, 0, s(),
                      k.y, k.yt, k.x, k.xt, k.rows, k.N, k.add);
  }
  static void run(const BinaryOp::ColumnForward& k) {
    if (k.rows * k.C == 0) return;
    REMAT_CUDA_LAUNCH(binary_column_forward_kernel<>, grid_for(k.rows * k.C), 256, 0, s(), k.kind,
                      k.y, k.a, k.b, k.rows, k.C, k.a_col);
  }
  static void run(const BinaryOp::ColumnBackward& k) {
    if (k.rows == 0 || (!k.da && !k.db)) return;
    REMAT_CUDA_LAUNCH(binary_column_backward_kernel<>, static_cast<unsigned>(k.rows), kRowThreads,
                      0, s(), k.kind, k.da, k.db, k.dy, k.a, k.b, k.C, k.a_col, k.set_a, k.set_b);
  }
  static void run(const SwiGluOp::Forward& k) {
    if (k.rows * k.F == 0) return;
    REMAT_CUDA_LAUNCH(swiglu_forward_kernel<>, grid_for(k.rows * k.F), 256, 0, s(), k.y, k.yt, k.a, k.b, k.t, k.rows,
                      k.F, k.lda, k.ldb);
  }
  static void run(const SwiGluOp::Backward& k) {
    if (k.rows * k.F == 0 || (!k.da && !k.db)) return;
    REMAT_CUDA_LAUNCH(swiglu_backward_kernel<>, grid_for(k.rows * k.F), 256, 0, s(), k.da, k.db, k.dt, k.dy, k.dyt,
                      k.a, k.b, k.t, k.rows, k.F, k.lda, k.ldb, k.set_a, k.set_b);
  }
  static void run(const RopeOp::Rotate& k) {
    const std::int64_t pairs = k.batch * k.T * k.H * (k.D / 2);
    if (pairs == 0) return;
    REMAT_CUDA_LAUNCH(rope_kernel<>, grid_for(pairs), 256, 0, s(), k.y, k.x, pairs, k.T, k.H, k.D, k.pos0, k.f,
                      k.inverse, k.add, k.yt, k.xt);
  }
  static void run(const LayerNormOp::Forward& k) {
    if (k.rows == 0) return;
    REMAT_CUDA_LAUNCH(layer_norm_forward_kernel<true>, static_cast<unsigned>(k.rows), kRowThreads,
                      0, s(), k.y, k.mean, k.rstd, k.x, k.w, k.b, k.C, k.eps, k.t);
  }
  static void run(const RmsNormOp::Forward& k) {
    if (k.rows == 0) return;
    REMAT_CUDA_LAUNCH(layer_norm_forward_kernel<false>, static_cast<unsigned>(k.rows), kRowThreads,
                      0, s(), k.y, nullptr, k.rstd, k.x, k.w, nullptr, k.C, k.eps, k.t);
  }
  // set_*: that buffer holds no values yet and is written, not added into (NOTE [fresh
  // gradient buffers]); NOTE [layer norm backward] for the one launch
  static void run(const LayerNormOp::Backward& k) {
    norm_backward<true>(k.dx, k.dw, k.db, k.dy, k.x, k.w, k.mean, k.rstd, k.rows, k.C, k.set_dx,
                        k.set_dw, k.set_db, CudaSizes::scratch(k), k.dxt, k.dyt, k.xt);
  }
  static void run(const RmsNormOp::Backward& k) {
    norm_backward<false>(k.dx, k.dw, nullptr, k.dy, k.x, k.w, nullptr, k.rstd, k.rows, k.C,
                         k.set_dx, k.set_dw, false, CudaSizes::scratch(k), k.dxt, k.dyt, k.xt);
  }
  // The norms' backward: one launch, the partial sums of dw (and db) in the scratch.
  template <bool Centered>
  static void norm_backward(void* dx, float* dw, float* db, const void* dy, const void* x,
                            const float* w, const float* mean, const float* rstd,
                            std::int64_t rows, std::int64_t C, bool set_dx, bool set_dw,
                            bool set_db, std::size_t scratch_bytes, DType dxt, DType dyt, DType xt) {
    if (rows == 0 || C == 0) {  // empty sums: a written dw or db is zero
      if (dw && set_dw) CudaMemory::fill(dw, C, 0.0f);
      if (db && set_db) CudaMemory::fill(db, C, 0.0f);
      return;
    }
    const Scratch scratch(scratch_bytes);
    float* part_w = dw ? scratch.as<float>() : nullptr;
    float* part_b = db ? scratch.as<float>() + kRowSumChunks * C : nullptr;
    REMAT_CUDA_LAUNCH(layer_norm_backward_kernel<Centered>, static_cast<unsigned>(kRowSumChunks),
                      kRowThreads, 0, s(), dx, dw, db, part_w, part_b, dy, x, w, mean, rstd, rows,
                      C, set_dx, set_dw, set_db, dxt, dyt, xt);
  }
  static void softmax_forward(float* y, const float* x, std::int64_t rows, std::int64_t C) {
    if (rows == 0) return;
    REMAT_CUDA_LAUNCH(softmax_kernel<>, static_cast<unsigned>(rows), kRowThreads, 0, s(),
                      y, x, C, 1.0f, 0);
  }
  static void softmax_backward(float* dx, const float* y, const float* dy, std::int64_t rows, std::int64_t C) {
    if (rows == 0) return;
    REMAT_CUDA_LAUNCH(softmax_backward_kernel<>, static_cast<unsigned>(rows), kRowThreads, 0, s(),
                      dx, y, dy, C, false);
  }
  /// loss[0] = the mean of the rows' losses, left on the device (NOTE [host round trips]).
  static void run(const CrossEntropyOp::Forward& k) {
    const Scratch scratch(CudaSizes::scratch(k));
    float* rows = scratch.as<float>();
    REMAT_CUDA_LAUNCH(cross_entropy_forward_kernel<>, static_cast<unsigned>(k.N), kRowThreads, 0,
                      s(), k.lse, rows, k.logits, k.targets, k.V, k.ld, k.t);
    REMAT_CUDA_LAUNCH(mean_kernel<>, 1, kRowThreads, 0, s(), k.loss, rows, k.N);
  }
  static void run(const CrossEntropyOp::Backward& k) {
    if (k.N == 0) return;
    REMAT_CUDA_LAUNCH(cross_entropy_backward_kernel<>, static_cast<unsigned>(k.N), kRowThreads, 0,
                      s(), k.dlogits, k.logits, k.lse, k.targets, k.V, k.ld, k.dloss, k.N, k.set,
                      k.dt, k.lt);
  }
  static void embedding_forward(float* y, const float* w, const std::int32_t* ids, std::int64_t n, std::int64_t C) {
    if (n * C == 0) return;
    REMAT_CUDA_LAUNCH(embedding_forward_kernel<>, grid_for(n * C), 256, 0, s(), y, w, ids, n, C);
  }
  // dw [V, C] += scatter of dy [n, C] by ids, deterministic (NOTE [embedding backward]); with
  // set, dw = (each block zeroes its rows first)
  static void embedding_backward(float* dw, const float* dy, const std::int32_t* ids, std::int64_t n,
                                 std::int64_t V, std::int64_t C, bool set = false) {
    if (V * C == 0) return;
    if (n == 0) {  // an empty scatter: a written dw is zero
      if (set) CudaMemory::fill(dw, V * C, 0.0f);
      return;
    }
    const std::int64_t ranges = V < kEmbeddingRowRanges ? V : kEmbeddingRowRanges;
    const std::int64_t rows = (V + ranges - 1) / ranges;
    const dim3 grid(static_cast<unsigned>((V + rows - 1) / rows), static_cast<unsigned>((C + 255) / 256));
    REMAT_CUDA_LAUNCH(embedding_backward_kernel<>, grid, 256, 0, s(), dw, dy, ids, n, rows, V, C,
                      set);
  }
  /// Range check of ids and targets made on the device (those from Tape::tokens carry their
  /// range: NOTE [host round trips]): read them on the host.
  static void minmax_i32(const std::int32_t* x, std::int64_t n, std::int32_t& lo, std::int32_t& hi) {
    std::vector<std::int32_t> h(static_cast<std::size_t>(n));
    CudaMemory::copy_to_host(h.data(), x, h.size() * 4);
    lo = hi = h[0];
    for (auto v : h) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  static void reduce_forward(float* y, const float* x, std::int64_t outer, std::int64_t n,
                             std::int64_t inner, float scale) {
    if (outer * inner == 0) return;
    // (sums over many rows, like a bias gradient's, use column_sum in pointwise.cuh)
    const std::int64_t outputs = outer * inner;
    if (CudaSizes::reduce_split(outer, n, inner)) {
      const Scratch scratch(CudaSizes::reduce_forward_scratch(outer, n, inner));
      float* partial = scratch.as<float>();
      REMAT_CUDA_LAUNCH(reduce_parts_kernel<>, static_cast<unsigned>(outputs * kReduceParts),
                        kRowThreads, 0, s(), partial, x, n, inner, kReduceParts, 1.0f);
      REMAT_CUDA_LAUNCH(reduce_parts_kernel<>, static_cast<unsigned>(outputs), kRowThreads, 0, s(),
                        y, partial, std::int64_t{kReduceParts}, std::int64_t{1}, 1, scale);
      return;
    }
    if (n >= kRowThreads && (inner == 1 || outputs <= kReduceBlocksBelow)) {
      REMAT_CUDA_LAUNCH(reduce_parts_kernel<>, static_cast<unsigned>(outputs), kRowThreads, 0, s(),
                        y, x, n, inner, 1, scale);
      return;
    }
    REMAT_CUDA_LAUNCH(reduce_forward_kernel<>, grid_for(outer * inner), 256, 0, s(),
                      y, x, outer, n, inner, scale);
  }
  static void reduce_backward(float* dx, const float* dy, std::int64_t outer, std::int64_t n,
                              std::int64_t inner, float scale) {
    if (outer * n * inner == 0) return;
    REMAT_CUDA_LAUNCH(reduce_backward_kernel<>, grid_for(outer * n * inner), 256, 0, s(),
                      dx, dy, outer, n, inner, scale);
  }
  static void copy_block(float* dst, std::int64_t dst_n, std::int64_t dst_start, const float* src,
                         std::int64_t src_n, std::int64_t src_start, std::int64_t len,
                         std::int64_t outer, std::int64_t inner, bool accumulate) {
    if (outer * len * inner == 0) return;
    REMAT_CUDA_LAUNCH(copy_block_kernel<>, grid_for(outer * len * inner), 256, 0, s(),
                      dst, dst_n, dst_start, src, src_n, src_start, len, outer, inner, accumulate);
  }
  static void permute(float* y, const float* x, const Shape& xshape, const int* perm, bool accumulate) {
    PermuteArgs a{};
    a.rank = xshape.rank();
    std::int64_t stride[Shape::kMaxRank] = {}, st = 1;
    for (int i = a.rank - 1; i >= 0; --i) {
      stride[i] = st;
      st *= xshape[i];
    }
    for (int i = 0; i < a.rank; ++i) {
      a.ydim[i] = xshape[perm[i]];
      a.ystride_x[i] = stride[perm[i]];
    }
    const std::int64_t n = xshape.numel();
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(permute_kernel<>, grid_for(n), 256, 0, s(), y, x, n, a, accumulate);
  }

  // Attention: fused (flash.cuh) for head sizes up to 128, keeping lse (B H T floats);
  // else, or with REMAT_CUDA_ATTENTION=materialized, P (B H, T, T) is kept as on the CPU.
  // The choice and the scratch sizes: CudaSizes (sizes.hpp). Fused attention runs on the tensor
  // cores where mma_fits (the same kept bytes; TF32, so Context::set_tf32(false) asks for the
  // exact SIMT kernels).
  static bool mma_fits(const AttentionLayout& L, const float* q, const float* k, const float* v) {
    return Context::get().mma_attention() && mma_head_size(L.D) &&
           mma_aligned(q, L.q_batch, L.q_head, L.q_row) &&
           mma_aligned(k, L.kv_batch, L.kv_head, L.kv_row) &&
           mma_aligned(v, L.kv_batch, L.kv_head, L.kv_row);
  }
  static void attention_forward(const AttentionLayout& L, float* o, float* p, const float* q,
                                const float* k, const float* v, float scale, bool causal) {
    const std::int64_t T = L.T, D = L.D, TT = T * T;
    if (CudaSizes::flash(D) && mma_fits(L, q, k, v)) {  // NOTE [tensor-core attention]
      if (D == 64)
        REMAT_CUDA_LAUNCH(flash_mma_forward_kernel<64>, mma_blocks(L), 32 * kMmaWarps, 0, s(),
                          L, o, p, q, k, v, scale, causal);
      else
        REMAT_CUDA_LAUNCH(flash_mma_forward_kernel<128>, mma_blocks(L), 32 * kMmaWarps, 0, s(),
                          L, o, p, q, k, v, scale, causal);
      return;
    }
    if (CudaSizes::flash(D)) {  // NOTE [tiled attention] (flash.cuh)
      REMAT_CUDA_LAUNCH(flash_forward_kernel<>, flash_blocks(L), 32 * kFlashWarps, 0, s(),
                        L, o, p, q, k, v, scale, causal);
      return;
    }
    // A batch row's heads in G batched GEMMs: the g-th of each group (heads g, G + g, ...)
    // with the key/value heads in order (G = 1: all heads in one)
    const std::int64_t G = L.G, KVH = L.KVH();
    for (std::int64_t b = 0; b < L.B; ++b) {
      float* P = p + b * L.H * TT;
      for (std::int64_t g = 0; g < G; ++g) {
        const std::int64_t qo = b * L.q_batch + g * L.q_head, ko = b * L.kv_batch;
        CudaGemm::gemm_batched(false, true, T, T, D, 1.0f, q + qo, L.q_row, G * L.q_head, k + ko,
                               L.kv_row, L.kv_head, 0.0f, P + g * TT, T, G * TT, KVH);
      }
      REMAT_CUDA_LAUNCH(softmax_kernel<>, static_cast<unsigned>(L.H * T), kRowThreads, 0, s(),
                        P, P, T, scale, causal ? T : 0);
      for (std::int64_t g = 0; g < G; ++g) {
        const std::int64_t oo = b * L.o_batch + g * L.o_head, ko = b * L.kv_batch;
        CudaGemm::gemm_batched(false, false, T, D, T, 1.0f, P + g * TT, T, G * TT, v + ko, L.kv_row,
                               L.kv_head, 0.0f, o + oo, L.o_row, G * L.o_head, KVH);
      }
    }
  }
  // set_q/k/v: that gradient holds no values yet and is written, not added into
  static void attention_backward(const AttentionLayout& L, float* dq, float* dk, float* dv,
                                 const float* dout, const float* o, const float* q, const float* k,
                                 const float* v, const float* p, float scale, bool causal,
                                 bool set_q = false, bool set_k = false, bool set_v = false) {
    const std::int64_t T = L.T, D = L.D, TT = T * T;
    if (CudaSizes::flash(D)) {
      const Scratch scratch(CudaSizes::attention_backward_scratch(L));  // B H T floats: delta
      float* delta = scratch.as<float>();
      if (!dq && !dk && !dv) return;
      if (mma_fits(L, q, k, v) && mma_aligned(dout, L.o_batch, L.o_head, L.o_row)) {
        if (D == 64) {
          REMAT_CUDA_LAUNCH(flash_mma_dq_kernel<64>, mma_blocks(L), 32 * kMmaWarps, 0, s(),
                            L, dq, delta, dout, o, q, k, v, p, scale, causal, set_q);
          if (dk || dv) REMAT_CUDA_LAUNCH(flash_mma_dkdv_kernel<64>, mma_blocks(L, true), 32 * kMmaWarps, 0, s(),
                            L, dk, dv, dout, q, k, v, p, delta, scale, causal, set_k, set_v);
        } else {
          REMAT_CUDA_LAUNCH(flash_mma_dq_kernel<128>, mma_blocks(L), 32 * kMmaWarps, 0, s(),
                            L, dq, delta, dout, o, q, k, v, p, scale, causal, set_q);
          if (dk || dv) REMAT_CUDA_LAUNCH(flash_mma_dkdv_kernel<128>, mma_blocks(L, true), 32 * kMmaWarps, 0, s(),
                            L, dk, dv, dout, q, k, v, p, delta, scale, causal, set_k, set_v);
        }
        return;
      }
      REMAT_CUDA_LAUNCH(flash_dq_kernel<>, flash_blocks(L), 32 * kFlashWarps, 0, s(),
                        L, dq, delta, dout, o, q, k, v, p, scale, causal, set_q);
      if (dk || dv) REMAT_CUDA_LAUNCH(flash_dkdv_kernel<>, flash_blocks(L, true), 32 * kFlashWarps, 0, s(),
                        L, dk, dv, dout, q, k, v, p, delta, scale, causal, set_k, set_v);
      return;
    }
    // as in forward, G batched GEMMs per product: the g-th head of every group at once; dk and
    // dv add the group's heads in order (the first writes when set)
    const Scratch scratch(CudaSizes::attention_backward_scratch(L));  // H T T floats
    float* ds = scratch.as<float>();
    const std::int64_t G = L.G, KVH = L.KVH();
    for (std::int64_t b = 0; b < L.B; ++b) {
      const std::int64_t ko = b * L.kv_batch;
      const float* P = p + b * L.H * TT;
      if (dv)
        for (std::int64_t g = 0; g < G; ++g)
          CudaGemm::gemm_batched(true, false, T, D, T, 1.0f, P + g * TT, T, G * TT,
                                 dout + b * L.o_batch + g * L.o_head, L.o_row, G * L.o_head,
                                 set_v && g == 0 ? 0.0f : 1.0f, dv + ko, L.kv_row, L.kv_head, KVH);
      if (!dq && !dk) continue;
      for (std::int64_t g = 0; g < G; ++g)
        CudaGemm::gemm_batched(false, true, T, T, D, 1.0f, dout + b * L.o_batch + g * L.o_head,
                               L.o_row, G * L.o_head, v + ko, L.kv_row, L.kv_head, 0.0f, ds + g * TT,
                               T, G * TT, KVH);
      REMAT_CUDA_LAUNCH(softmax_backward_kernel<>, static_cast<unsigned>(L.H * T),
                        kRowThreads, 0, s(),
                        ds, P, ds, T, true);
      for (std::int64_t g = 0; g < G; ++g) {
        const std::int64_t qo = b * L.q_batch + g * L.q_head;
        if (dq)
          CudaGemm::gemm_batched(false, false, T, D, T, scale, ds + g * TT, T, G * TT, k + ko,
                                 L.kv_row, L.kv_head, set_q ? 0.0f : 1.0f, dq + qo, L.q_row,
                                 G * L.q_head, KVH);
        if (dk)
          CudaGemm::gemm_batched(true, false, T, D, T, scale, ds + g * TT, T, G * TT, q + qo,
                                 L.q_row, G * L.q_head, set_k && g == 0 ? 0.0f : 1.0f, dk + ko,
                                 L.kv_row, L.kv_head, KVH);
      }
    }
  }
};

}  // namespace cuda
}  // namespace remat
