#pragma once
// SPDX-License-Identifier: MIT
// Fused attention on the tensor cores (TF32 mma.sync m16n8k8, fp32 accumulators): the same
// maths and the same kept statistic as flash.cuh (lse, B H T floats; the backward reads O and
// writes delta), for head sizes 64 and 128 when the context allows TF32 (Context::tf32(), the
// default, as for the GEMMs). flash.cuh's SIMT kernels stay the exact-fp32 path and the
// reference. Registers, per warp of 16 rows:
//
//   forward (a block per 64 query rows, a warp per 16):
//       S = Q K^T (16 x R keys)  ->  online softmax per row (m, l)  ->  O += P V (16 x D)
//   dq (the same blocks):  delta_i = dO_i . O_i;  P = e^(scale S - lse);  dP = dO V^T;
//       dS = P (dP - delta);  dQ = scale dS K
//   dk/dv (a block per 64 key rows, a warp per 16):  S^T = K Q^T;  P^T;  dV = P^T dO;
//       dP^T = V dO^T;  dS^T = P^T (dP^T - delta);  dK = scale dS^T Q
// Two backward kernels, no atomics: every sum runs in a fixed order, the bits do not depend on
// the block schedule, and a checkpoint's replay gives the plain run's bits.
//
// NOTE [tensor-core attention]: the streamed operand (K and V in forward and dq; Q and dO in
// dk/dv) comes in tiles of R = 2048 / D rows (32 at D 64, 16 at D 128), copied with cp.async
// into one of two shared buffers while the block works on the other (copy, commit, wait for
// the older group, barrier; a barrier after the work before the buffer is refilled). Rows are
// padded to D + 4 floats, so the 32 lanes of a fragment load hit 32 different banks. The
// fixed operand of each warp (its 16 rows of Q and dO, or of K and V) is held in registers as
// A fragments, rounded to TF32 once. A product's C fragment becomes the next product's A
// fragment without a shuffle: a lane holds C columns 2t and 2t+1 and A columns t and t + 4, so
// the next product's k index runs over the keys (queries) in the order 0, 2, 4, 6, 1, 3, 5, 7
// within each 8: its B fragment reads rows 2t and 2t + 1 of the tile (b_rows_paired). Causal
// tiles that a warp's rows cannot see are skipped by that warp (it still loads and waits).

#include <cmath>
#include <cstdint>

#include "remat/backend/cuda/flash.cuh"

namespace remat {
namespace cuda {

constexpr int kMmaWarps = 4;               // warps of a block, 16 rows each
constexpr int kMmaRows = 16 * kMmaWarps;   // rows (queries, or keys for dk/dv) of a block
constexpr int kMmaTileFloats = 2048;       // floats of one streamed tile (before padding)

template <int D>
struct MmaTile {
  static_assert(D % 32 == 0 && kMmaTileFloats % D == 0, "head size: a multiple of 32");
  static constexpr int rows = kMmaTileFloats / D;  // R
  static constexpr int stride = D + 4;             // a padded row, in floats
  static constexpr int floats = rows * stride;
};

/// The head sizes with tensor-core kernels.
inline bool mma_head_size(std::int64_t D) { return D == 64 || D == 128; }
/// The streamed rows are copied 16 bytes at a time: their base, the per-batch, per-head and
/// per-row strides must keep 16-byte alignment.
inline bool mma_aligned(const void* p, std::int64_t batch, std::int64_t head, std::int64_t row) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0 && batch % 4 == 0 && head % 4 == 0 &&
         row % 4 == 0;
}
/// Blocks of the tensor-core kernels: 64 rows of one (batch, head) each; for dk/dv
/// (`kv_heads`), of one (batch, key/value head).
inline unsigned mma_blocks(const AttentionLayout& L, bool kv_heads = false) {
  const std::int64_t heads = kv_heads ? L.KVH() : L.H;
  return static_cast<unsigned>(L.B * heads * ((L.T + kMmaRows - 1) / kMmaRows));
}
// The block's (batch x head), or (batch x key/value head) for dk/dv, and its first row.
__device__ inline void mma_block(const AttentionLayout& L, std::int64_t& bh, std::int64_t& first) {
  const std::int64_t groups = (L.T + kMmaRows - 1) / kMmaRows;
  bh = blockIdx.x / groups;
  first = (blockIdx.x % groups) * kMmaRows;
}

// Rows first .. first + R of a (batch, head)'s matrix at base (rows `stride` floats apart) into
// a padded tile, asynchronously (cp.async, 16 bytes a copy); rows at or past `end` are zeros.
// The whole block calls it; the caller commits, waits and synchronizes.
template <int D>
__device__ inline void stream_tile(float* tile, const float* base, std::int64_t stride,
                                   std::int64_t first, std::int64_t end) {
  constexpr int chunks = D / 4;
  for (int c = threadIdx.x; c < MmaTile<D>::rows * chunks; c += blockDim.x) {
    const int r = c / chunks, col = (c % chunks) * 4;
    const bool ok = first + r < end;
    cp_async_16(tile + r * MmaTile<D>::stride + col, ok ? base + (first + r) * stride + col : base, ok);
  }
}
// The K/V pipeline of forward and dq (NOTE [tensor-core attention]): the key tiles a block of
// query rows from `first_row` needs (when causal, those up to its last row), of one (batch,
// head's key/value head), into two buffers; keys at or past `keys` read as zero. The whole block calls start()
// once, then arrive(it) for it < tiles at the top of each tile's turn: it starts copying tile
// it + 1 into the other buffer, waits for tile it's own copies, synchronizes the block and
// returns tile it's buffer. The caller synchronizes again after its work on the buffer, before
// the next arrive refills it.
template <int D>
struct KvTiles {
  float (*kv)[2][MmaTile<D>::floats];  // [buffer][K, V]
  const float *k, *v;                  // the (batch, head)'s rows
  std::int64_t stride, keys, tiles;
  __device__ KvTiles(float (*kv_)[2][MmaTile<D>::floats], const float* k_, const float* v_,
                     const AttentionLayout& L, std::int64_t first_row, bool causal)
      : kv(kv_), k(k_), v(v_), stride(L.kv_row),
        keys(causal ? min64(first_row + kMmaRows, L.T) : L.T),
        tiles((keys + MmaTile<D>::rows - 1) / MmaTile<D>::rows) {}
  __device__ void load(int buf, std::int64_t first) const {
    stream_tile<D>(kv[buf][0], k, stride, first, keys);
    stream_tile<D>(kv[buf][1], v, stride, first, keys);
  }
  __device__ void start() const {
    load(0, 0);
    cp_async_commit();
  }
  __device__ int arrive(std::int64_t it) const {
    const int buf = static_cast<int>(it & 1);
    if (it + 1 < tiles) load(buf ^ 1, (it + 1) * MmaTile<D>::rows);
    cp_async_commit();
    cp_async_wait<1>();  // tile it's copies (the older group) have landed
    __syncthreads();     // ... every thread's
    return buf;
  }
};
// A fragments (TF32) of rows r0 .. r0 + 15 of a (batch, head)'s matrix at base: a[kk] covers
// columns 8 kk .. 8 kk + 7 (layout: BlockRunner::mma_tf32). Rows at or past T are zeros.
template <int D>
__device__ inline void load_a_rows(std::uint32_t (&a)[D / 8][4], const float* base,
                                   std::int64_t stride, std::int64_t r0, std::int64_t T) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float* lo = r0 + g < T ? base + (r0 + g) * stride : nullptr;
  const float* hi = r0 + g + 8 < T ? base + (r0 + g + 8) * stride : nullptr;
REMAT_UNROLL
  for (int kk = 0; kk < D / 8; ++kk) {
    a[kk][0] = tf32_bits(lo ? lo[8 * kk + t] : 0.0f);
    a[kk][1] = tf32_bits(hi ? hi[8 * kk + t] : 0.0f);
    a[kk][2] = tf32_bits(lo ? lo[8 * kk + t + 4] : 0.0f);
    a[kk][3] = tf32_bits(hi ? hi[8 * kk + t + 4] : 0.0f);
  }
}
// B fragment of a product whose k runs along the tile's columns: B[k][n] = tile[n0 + n][k0 + k]
// (S = Q K^T: n over the tile's rows, k over the head dimension).
template <int D>
__device__ inline void b_cols(std::uint32_t (&b)[2], const float* tile, int n0, int k0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float* p = tile + (n0 + g) * MmaTile<D>::stride + k0 + t;
  b[0] = tf32_bits(p[0]);
  b[1] = tf32_bits(p[4]);
}
// B fragment of a product whose k runs along the tile's rows, in the paired order of NOTE
// [tensor-core attention]: k = t is row k0 + 2t, k = t + 4 is row k0 + 2t + 1; n over columns.
template <int D>
__device__ inline void b_rows_paired(std::uint32_t (&b)[2], const float* tile, int k0, int n0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float* p = tile + (k0 + 2 * t) * MmaTile<D>::stride + n0 + g;
  b[0] = tf32_bits(p[0]);
  b[1] = tf32_bits(p[MmaTile<D>::stride]);
}
// A C fragment (columns 2t, 2t + 1 of rows g, g + 8) as the A fragment of the next product in
// the paired order.
__device__ inline void c_as_a(std::uint32_t (&a)[4], const float (&c)[4]) {
  a[0] = tf32_bits(c[0]);
  a[1] = tf32_bits(c[2]);
  a[2] = tf32_bits(c[1]);
  a[3] = tf32_bits(c[3]);
}
// A row's max and sum over the 4 lanes that hold it (lanes 4g .. 4g + 3).
__device__ inline float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ inline float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
// The product of the warp's 16 fixed rows (A fragments over D) with the R rows of a tile:
// s[nn] (16 x 8) for tile rows 8 nn .. 8 nn + 7.
template <int D>
__device__ inline void rows_times_tile(float (&s)[MmaTile<D>::rows / 8][4],
                                       const std::uint32_t (&a)[D / 8][4], const float* tile) {
REMAT_UNROLL
  for (int nn = 0; nn < MmaTile<D>::rows / 8; ++nn) {
    s[nn][0] = s[nn][1] = s[nn][2] = s[nn][3] = 0.0f;
REMAT_UNROLL
    for (int kk = 0; kk < D / 8; ++kk) {
      std::uint32_t b[2];
      b_cols<D>(b, tile, 8 * nn, 8 * kk);
      mma_tf32_m16n8k8(s[nn], a[kk], b);
    }
  }
}
// acc (16 x D) += c (16 x R, C fragments) times the tile (R x D).
template <int D>
__device__ inline void add_times_tile(float (&acc)[D / 8][4],
                                      const float (&c)[MmaTile<D>::rows / 8][4], const float* tile) {
REMAT_UNROLL
  for (int kt = 0; kt < MmaTile<D>::rows / 8; ++kt) {
    std::uint32_t a[4];
    c_as_a(a, c[kt]);
REMAT_UNROLL
    for (int nd = 0; nd < D / 8; ++nd) {
      std::uint32_t b[2];
      b_rows_paired<D>(b, tile, 8 * kt, 8 * nd);
      mma_tf32_m16n8k8(acc[nd], a, b);
    }
  }
}
// Writes (set) or adds mul * acc into rows r0 .. r0 + 15 (those below T) of a (batch, head)'s
// matrix at base.
template <int D>
__device__ inline void store_rows(float* base, std::int64_t stride, std::int64_t r0,
                                  std::int64_t T, const float (&acc)[D / 8][4], float mul, bool set) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int h = 0; h < 2; ++h) {
    const std::int64_t r = r0 + g + 8 * h;
    if (r >= T) continue;
    float* row = base + r * stride;
REMAT_UNROLL
    for (int nd = 0; nd < D / 8; ++nd)
      for (int e = 0; e < 2; ++e) {
        float& y = row[8 * nd + 2 * t + e];
        const float x = mul * acc[nd][2 * h + e];
        y = set ? x : y + x;
      }
  }
}

template <int D>
__global__ void __launch_bounds__(32 * kMmaWarps)
    flash_mma_forward_kernel(AttentionLayout L, float* o, float* lse, const float* q,
                             const float* k, const float* v, float scale, bool causal) {
  constexpr int R = MmaTile<D>::rows;
  __shared__ __align__(16) float kv[2][2][MmaTile<D>::floats];  // [buffer][K, V]
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  std::int64_t bh = 0, i0 = 0;
  mma_block(L, bh, i0);
  const std::int64_t qo = L.q_offset(bh), ko = L.kv_offset(bh), r0 = i0 + 16 * (threadIdx.x / 32);
  std::uint32_t qa[D / 8][4];
  load_a_rows<D>(qa, q + qo, L.q_row, r0, L.T);
  float acc[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g, g + 8 (l: this lane's part)
  const KvTiles<D> kt(kv, k + ko, v + ko, L, i0, causal);
  kt.start();
  for (std::int64_t it = 0; it < kt.tiles; ++it) {
    const int buf = kt.arrive(it);
    const std::int64_t j0 = it * R;
    if (!causal || j0 <= r0 + 15) {  // one of the warp's rows sees a key of the tile
      float s[R / 8][4];
      rows_times_tile<D>(s, qa, kv[buf][0]);
      float mx[2] = {-INFINITY, -INFINITY};
REMAT_UNROLL
      for (int nn = 0; nn < R / 8; ++nn)
        for (int e = 0; e < 4; ++e) {
          const std::int64_t key = j0 + 8 * nn + 2 * t + (e & 1), row = r0 + g + 8 * (e / 2);
          const bool seen = key < L.T && (!causal || key <= row);
          s[nn][e] = seen ? scale * s[nn][e] : -INFINITY;
          mx[e / 2] = fmaxf(mx[e / 2], s[nn][e]);
        }
      float corr[2], sum[2] = {0.0f, 0.0f};
      for (int h = 0; h < 2; ++h) {
        const float mn = fmaxf(m[h], quad_max(mx[h]));
        corr[h] = mn == -INFINITY ? 1.0f : expf(m[h] - mn);
        m[h] = mn;
      }
REMAT_UNROLL
      for (int nn = 0; nn < R / 8; ++nn)
        for (int e = 0; e < 4; ++e) {
          const float p = s[nn][e] == -INFINITY ? 0.0f : expf(s[nn][e] - m[e / 2]);
          s[nn][e] = p;
          sum[e / 2] += p;
        }
      for (int h = 0; h < 2; ++h) l[h] = l[h] * corr[h] + sum[h];
REMAT_UNROLL
      for (int nd = 0; nd < D / 8; ++nd)
        for (int e = 0; e < 4; ++e) acc[nd][e] *= corr[e / 2];
      add_times_tile<D>(acc, s, kv[buf][1]);  // O += P V
    }
    __syncthreads();  // every warp is done with the buffer before it is refilled
  }
  for (int h = 0; h < 2; ++h) {
    l[h] = quad_sum(l[h]);
    const float inv = 1.0f / l[h];
    for (int nd = 0; nd < D / 8; ++nd) {
      acc[nd][2 * h] *= inv;
      acc[nd][2 * h + 1] *= inv;
    }
    const std::int64_t row = r0 + g + 8 * h;
    if (t == 0 && row < L.T) lse[bh * L.T + row] = m[h] + logf(l[h]);
  }
  store_rows<D>(o + L.o_offset(bh), L.o_row, r0, L.T, acc, 1.0f, true);
}

// delta_i = dO_i . O_i for the block's rows (kept for flash_mma_dkdv_kernel), then
// dq (+)= scale dS K over the key tiles. dq null: delta only. set: dq is written, not added.
template <int D>
__global__ void __launch_bounds__(32 * kMmaWarps)
    flash_mma_dq_kernel(AttentionLayout L, float* dq, float* delta, const float* dout,
                        const float* o, const float* q, const float* k, const float* v,
                        const float* lse, float scale, bool causal, bool set) {
  constexpr int R = MmaTile<D>::rows;
  __shared__ __align__(16) float kv[2][2][MmaTile<D>::floats];  // [buffer][K, V]
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  std::int64_t bh = 0, i0 = 0;
  mma_block(L, bh, i0);
  const std::int64_t qo = L.q_offset(bh), oo = L.o_offset(bh), ko = L.kv_offset(bh);
  const std::int64_t r0 = i0 + 16 * (threadIdx.x / 32);
  float dl[2], ls[2];
  for (int h = 0; h < 2; ++h) {  // lane t sums the columns t, t + 4, ...; then the row's 4 lanes
    const std::int64_t row = r0 + g + 8 * h;
    float part = 0.0f;
    if (row < L.T)
      for (int d = t; d < D; d += 4) part += dout[oo + row * L.o_row + d] * o[oo + row * L.o_row + d];
    dl[h] = quad_sum(part);
    ls[h] = row < L.T ? lse[bh * L.T + row] : 0.0f;
    if (t == 0 && row < L.T) delta[bh * L.T + row] = dl[h];
  }
  if (!dq) return;  // the same for the whole block: no barrier is left waiting
  std::uint32_t qa[D / 8][4], ga[D / 8][4];
  load_a_rows<D>(qa, q + qo, L.q_row, r0, L.T);
  load_a_rows<D>(ga, dout + oo, L.o_row, r0, L.T);
  float acc[D / 8][4] = {};
  const KvTiles<D> kt(kv, k + ko, v + ko, L, i0, causal);
  kt.start();
  for (std::int64_t it = 0; it < kt.tiles; ++it) {
    const int buf = kt.arrive(it);
    const std::int64_t j0 = it * R;
    if (!causal || j0 <= r0 + 15) {
      float s[R / 8][4], dp[R / 8][4];
      rows_times_tile<D>(s, qa, kv[buf][0]);   // S = Q K^T
      rows_times_tile<D>(dp, ga, kv[buf][1]);  // dP = dO V^T
REMAT_UNROLL
      for (int nn = 0; nn < R / 8; ++nn)
        for (int e = 0; e < 4; ++e) {
          const std::int64_t key = j0 + 8 * nn + 2 * t + (e & 1), row = r0 + g + 8 * (e / 2);
          const bool seen = row < L.T && key < L.T && (!causal || key <= row);
          const float p = seen ? expf(scale * s[nn][e] - ls[e / 2]) : 0.0f;
          s[nn][e] = p * (dp[nn][e] - dl[e / 2]);  // dS
        }
      add_times_tile<D>(acc, s, kv[buf][0]);  // dQ += dS K
    }
    __syncthreads();
  }
  store_rows<D>(dq + qo, L.q_row, r0, L.T, acc, scale, set);
}

// dk (+)= scale dS^T Q, dv (+)= P^T dO for the block's 64 keys of a key/value head, over the
// query tiles from the block's first key on (causal) or from 0, of each of the G query heads
// that read it, in head order (one pipeline over G x tiles). set_k, set_v: written, not added.
template <int D>
__global__ void __launch_bounds__(32 * kMmaWarps)
    flash_mma_dkdv_kernel(AttentionLayout L, float* dk, float* dv, const float* dout,
                          const float* q, const float* k, const float* v, const float* lse,
                          const float* delta, float scale, bool causal, bool set_k, bool set_v) {
  constexpr int R = MmaTile<D>::rows;
  __shared__ __align__(16) float qg[2][2][MmaTile<D>::floats];  // [buffer][Q, dO]
  __shared__ float stats[2][2][R];                               // [buffer][lse, delta]
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  std::int64_t bkv = 0, j0 = 0;
  mma_block(L, bkv, j0);
  // the group's first query head, of B H
  const std::int64_t bh0 = (bkv / L.KVH()) * L.H + (bkv % L.KVH()) * L.G;
  const std::int64_t ko = L.kv_offset(bh0), c0 = j0 + 16 * (threadIdx.x / 32);
  std::uint32_t ka[D / 8][4], va[D / 8][4];
  load_a_rows<D>(ka, k + ko, L.kv_row, c0, L.T);
  load_a_rows<D>(va, v + ko, L.kv_row, c0, L.T);
  float dka[D / 8][4] = {}, dva[D / 8][4] = {};
  const std::int64_t first = causal ? j0 : 0, per_head = (L.T - first + R - 1) / R;
  const std::int64_t tiles = per_head * L.G;
  // tile it: query head bh0 + it / per_head, its query rows from first + (it % per_head) R
  auto head = [&](std::int64_t it) { return bh0 + it / per_head; };
  auto row0 = [&](std::int64_t it) { return first + (it % per_head) * R; };
  auto load = [&](int buf, std::int64_t it) {  // tile it into buffer buf
    const std::int64_t bh = head(it), i0 = row0(it);
    stream_tile<D>(qg[buf][0], q + L.q_offset(bh), L.q_row, i0, L.T);
    stream_tile<D>(qg[buf][1], dout + L.o_offset(bh), L.o_row, i0, L.T);
    for (int e = threadIdx.x; e < R; e += blockDim.x) {
      const bool ok = i0 + e < L.T;
      stats[buf][0][e] = ok ? lse[bh * L.T + i0 + e] : 0.0f;
      stats[buf][1][e] = ok ? delta[bh * L.T + i0 + e] : 0.0f;
    }
  };
  load(0, 0);
  cp_async_commit();
  for (std::int64_t it = 0; it < tiles; ++it) {
    const int buf = static_cast<int>(it & 1);
    if (it + 1 < tiles) load(buf ^ 1, it + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const std::int64_t i0 = row0(it);
    if (!causal || i0 + R - 1 >= c0) {  // a query of the tile sees one of the warp's keys
      float st[R / 8][4], dpt[R / 8][4];
      rows_times_tile<D>(st, ka, qg[buf][0]);   // S^T = K Q^T
      rows_times_tile<D>(dpt, va, qg[buf][1]);  // dP^T = V dO^T
REMAT_UNROLL
      for (int nn = 0; nn < R / 8; ++nn)
        for (int e = 0; e < 4; ++e) {
          const int ii = 8 * nn + 2 * t + (e & 1);
          const std::int64_t i = i0 + ii, key = c0 + g + 8 * (e / 2);
          const bool seen = i < L.T && key < L.T && (!causal || key <= i);
          const float p = seen ? expf(scale * st[nn][e] - stats[buf][0][ii]) : 0.0f;
          st[nn][e] = p;                                       // P^T
          dpt[nn][e] = p * (dpt[nn][e] - stats[buf][1][ii]);  // dS^T
        }
      add_times_tile<D>(dva, st, qg[buf][1]);   // dV += P^T dO
      add_times_tile<D>(dka, dpt, qg[buf][0]);  // dK += dS^T Q
    }
    __syncthreads();
  }
  if (dk) store_rows<D>(dk + ko, L.kv_row, c0, L.T, dka, scale, set_k);
  if (dv) store_rows<D>(dv + ko, L.kv_row, c0, L.T, dva, 1.0f, set_v);
}

}  // namespace cuda
}  // namespace remat
