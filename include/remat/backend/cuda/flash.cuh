#pragma once
// SPDX-License-Identifier: MIT
// Fused attention for the CUDA backend: never materializes the T x T matrix. Forward keeps only
// the row statistic lse_i = log sum_j exp(s_ij): B H T floats (P would be B H T T); the
// backward also reads the output O, which the op keeps (GPT's c_proj saves it anyway).
//
//   forward, row i:  online softmax over keys j (<= i when causal):
//       s = scale q_i.k_j;  m' = max(m, s);  l = l e^(m - m') + e^(s - m');
//       o = o e^(m - m') + e^(s - m') v_j;   finally o /= l, lse_i = m + log l
//   backward:  Dlt_i = dO_i . O_i;  p_ij = e^(s_ij - lse_i);  dp_ij = dO_i . v_j;
//       ds_ij = p_ij (dp_ij - Dlt_i);  dq_i += scale sum_j ds_ij k_j  (a warp per query row,
//       which also keeps Dlt_i for the next kernel: two launches in all)
//       dk_j += scale sum_i ds_ij q_i;  dv_j += sum_i p_ij dO_i      (a warp per key row)
//
// NOTE [tiled attention]: a block takes kFlashWarps consecutive rows of one (batch, head), a
// warp per row; each lane holds D/32 elements of its row (any D <= 128: lanes past D hold
// zeros). The rows the block's warps all walk (keys and values in forward and for dq; queries,
// output gradients, lse and delta for dk and dv) come in tiles of kFlashTile rows that the
// whole block loads into shared memory once, so each K/V element is read from global memory
// once per kFlashWarps rows instead of once per row. Memory stays linear in T. Every row walks
// its tiles in ascending order with the same arithmetic as a loop over global memory: each sum
// runs in a fixed order in one warp, deterministic, no atomics. This is the portable SIMT path
// (fp32 on CUDA cores), the one the emulation runs; a tensor-core (MMA) path is not written yet.

#include <cmath>
#include <cstdint>

#include "remat/backend/cuda/memory.cuh"
#include "remat/backend/cuda/sizes.hpp"
#include "remat/core/math.hpp"

namespace remat {
namespace cuda {

constexpr int kFlashPerLane = kFlashMaxD / 32;
constexpr int kFlashWarps = 8;  // rows per block (a warp each)
constexpr int kFlashTile = 32;  // rows per shared-memory tile: 2 tiles of 32 x 128 floats, 32 KiB

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// lane's elements of a D-row at p: r[k] = p[lane + 32 k] (0 past D)
__device__ inline void load_row(float (&r)[kFlashPerLane], const float* p, int lane, std::int64_t D) {
REMAT_UNROLL
  for (int k = 0; k < kFlashPerLane; ++k) {
    const std::int64_t d = lane + 32 * k;
    r[k] = d < D ? p[d] : 0.0f;
  }
}
__device__ inline float dot_row(const float (&a)[kFlashPerLane], const float* p, int lane, std::int64_t D) {
  float s = 0.0f;
REMAT_UNROLL
  for (int k = 0; k < kFlashPerLane; ++k) {
    const std::int64_t d = lane + 32 * k;
    if (d < D) s += a[k] * p[d];
  }
  return warp_sum(s);
}
// tile[r * kFlashMaxD + d] = base[(first + r) * stride + d] for r < n, d < D: the whole block
// loads (consecutive threads, consecutive d: coalesced). The caller synchronizes.
__device__ inline void load_tile(float* tile, const float* base, std::int64_t stride,
                                 std::int64_t first, std::int64_t n, std::int64_t D) {
  for (std::int64_t e = threadIdx.x; e < n * D; e += blockDim.x) {
    const std::int64_t r = e / D, d = e % D;
    tile[r * kFlashMaxD + d] = base[(first + r) * stride + d];
  }
}
__device__ inline std::int64_t min64(std::int64_t a, std::int64_t b) { return a < b ? a : b; }
// Keys and values j0 .. j0 + kFlashTile (up to block_keys) of the key/value head at ko into ks
// and vs, then a barrier: the whole block calls it. Returns how many of them a row of `keys`
// keys takes (forward and dq walk the same tiles).
__device__ inline std::int64_t load_kv_tiles(float* ks, float* vs, const float* k, const float* v,
                                             const AttentionLayout& L, std::int64_t ko,
                                             std::int64_t j0, std::int64_t block_keys,
                                             std::int64_t keys) {
  const std::int64_t n = min64(kFlashTile, block_keys - j0);
  load_tile(ks, k + ko, L.kv_row, j0, n, L.D);
  load_tile(vs, v + ko, L.kv_row, j0, n, L.D);
  __syncthreads();
  return min64(n, keys - j0);
}
// The block's (batch x head) and first row: blocks run over bh, then over row groups (for
// dk/dv, bh is a (batch x key/value head)).
__device__ inline void flash_block(const AttentionLayout& L, std::int64_t& bh, std::int64_t& first) {
  const std::int64_t groups = (L.T + kFlashWarps - 1) / kFlashWarps;
  bh = blockIdx.x / groups;
  first = (blockIdx.x % groups) * kFlashWarps;
}

template <int = 0>
__global__ void flash_forward_kernel(AttentionLayout L, float* o, float* lse, const float* q,
                                     const float* k, const float* v, float scale, bool causal) {
  __shared__ float ks[kFlashTile * kFlashMaxD], vs[kFlashTile * kFlashMaxD];
  const int lane = threadIdx.x % 32;
  std::int64_t bh = 0, i0 = 0;
  flash_block(L, bh, i0);
  const std::int64_t i = i0 + threadIdx.x / 32, qo = L.q_offset(bh), ko = L.kv_offset(bh);
  const bool active = i < L.T;  // a warp past the last row still loads and synchronizes
  // keys of the block: those of its last row when causal; keys of this row
  const std::int64_t block_keys = causal ? min64(i0 + kFlashWarps, L.T) : L.T;
  const std::int64_t keys = !active ? 0 : causal ? i + 1 : L.T;
  float qi[kFlashPerLane] = {}, acc[kFlashPerLane] = {};
  if (active) load_row(qi, q + qo + i * L.q_row, lane, L.D);
  float m = -INFINITY, l = 0.0f;
  for (std::int64_t j0 = 0; j0 < block_keys; j0 += kFlashTile) {
    const std::int64_t mine = load_kv_tiles(ks, vs, k, v, L, ko, j0, block_keys, keys);
    for (std::int64_t jj = 0; jj < mine; ++jj) {
      const float s = scale * dot_row(qi, ks + jj * kFlashMaxD, lane, L.D);
      const float mn = fmaxf(m, s), c = expf(m - mn), e = expf(s - mn);
      l = l * c + e;
      const float* vj = vs + jj * kFlashMaxD;
REMAT_UNROLL
      for (int kk = 0; kk < kFlashPerLane; ++kk) {
        const std::int64_t d = lane + 32 * kk;
        acc[kk] = acc[kk] * c + (d < L.D ? e * vj[d] : 0.0f);
      }
      m = mn;
    }
    __syncthreads();  // the tile is read by every warp before the next load overwrites it
  }
  if (!active) return;
  float* oi = o + L.o_offset(bh) + i * L.o_row;
REMAT_UNROLL
  for (int kk = 0; kk < kFlashPerLane; ++kk) {
    const std::int64_t d = lane + 32 * kk;
    if (d < L.D) oi[d] = acc[kk] / l;
  }
  if (lane == 0) lse[bh * L.T + i] = m + logf(l);
}
// Dlt_i = dO_i . O_i (both in the output's layout), kept in `delta` for flash_dkdv_kernel;
// then dq_i (+)= scale sum_{j visible to i} ds_ij k_j (keys and values in tiles, as in
// forward). dq null: Dlt only. set: dq is written, not added into.
template <int = 0>
__global__ void flash_dq_kernel(AttentionLayout L, float* dq, float* delta, const float* dout,
                                const float* o, const float* q, const float* k, const float* v,
                                const float* lse, float scale, bool causal, bool set) {
  __shared__ float ks[kFlashTile * kFlashMaxD], vs[kFlashTile * kFlashMaxD];
  const int lane = threadIdx.x % 32;
  std::int64_t bh = 0, i0 = 0;
  flash_block(L, bh, i0);
  const std::int64_t i = i0 + threadIdx.x / 32, qo = L.q_offset(bh), ko = L.kv_offset(bh);
  const bool active = i < L.T;
  const std::int64_t block_keys = causal ? min64(i0 + kFlashWarps, L.T) : L.T;
  const std::int64_t keys = !active ? 0 : causal ? i + 1 : L.T;
  float qi[kFlashPerLane] = {}, gi[kFlashPerLane] = {}, acc[kFlashPerLane] = {};
  float li = 0.0f, di = 0.0f;
  if (active) {
    load_row(qi, q + qo + i * L.q_row, lane, L.D);
    load_row(gi, dout + L.o_offset(bh) + i * L.o_row, lane, L.D);
    li = lse[bh * L.T + i];
    di = dot_row(gi, o + L.o_offset(bh) + i * L.o_row, lane, L.D);
    if (lane == 0) delta[bh * L.T + i] = di;
  }
  if (!dq) return;  // the same for the whole block: no barrier is left waiting
  for (std::int64_t j0 = 0; j0 < block_keys; j0 += kFlashTile) {
    const std::int64_t mine = load_kv_tiles(ks, vs, k, v, L, ko, j0, block_keys, keys);
    for (std::int64_t jj = 0; jj < mine; ++jj) {
      const float* kj = ks + jj * kFlashMaxD;
      const float p = expf(scale * dot_row(qi, kj, lane, L.D) - li);
      const float ds = p * (dot_row(gi, vs + jj * kFlashMaxD, lane, L.D) - di);
REMAT_UNROLL
      for (int kk = 0; kk < kFlashPerLane; ++kk) {
        const std::int64_t d = lane + 32 * kk;
        if (d < L.D) acc[kk] += ds * kj[d];
      }
    }
    __syncthreads();
  }
  if (!active) return;
  float* dqi = dq + qo + i * L.q_row;
REMAT_UNROLL
  for (int kk = 0; kk < kFlashPerLane; ++kk) {
    const std::int64_t d = lane + 32 * kk;
    if (d < L.D) dqi[d] = set ? scale * acc[kk] : dqi[d] + scale * acc[kk];
  }
}
// dk_j += scale sum_{i that see j} ds_ij q_i;  dv_j += sum_i p_ij dO_i
// (a warp per key row of a key/value head; the G query heads that read it in order, each one's
// query rows, output gradients, lse and delta in tiles; set_k, set_v: written, not added into)
template <int = 0>
__global__ void flash_dkdv_kernel(AttentionLayout L, float* dk, float* dv, const float* dout,
                                  const float* q, const float* k, const float* v, const float* lse,
                                  const float* delta, float scale, bool causal, bool set_k,
                                  bool set_v) {
  __shared__ float qs[kFlashTile * kFlashMaxD], gs[kFlashTile * kFlashMaxD];
  __shared__ float ls[kFlashTile], dls[kFlashTile];
  const int lane = threadIdx.x % 32;
  std::int64_t bkv = 0, j0 = 0;
  flash_block(L, bkv, j0);
  // the group's first query head, of B H
  const std::int64_t bh0 = (bkv / L.KVH()) * L.H + (bkv % L.KVH()) * L.G;
  const std::int64_t j = j0 + threadIdx.x / 32, ko = L.kv_offset(bh0);
  const bool active = j < L.T;
  float kj[kFlashPerLane] = {}, vj[kFlashPerLane] = {}, ak[kFlashPerLane] = {}, av[kFlashPerLane] = {};
  if (active) {
    load_row(kj, k + ko + j * L.kv_row, lane, L.D);
    load_row(vj, v + ko + j * L.kv_row, lane, L.D);
  }
  for (std::int64_t bh = bh0; bh < bh0 + L.G; ++bh) {
    const std::int64_t qo = L.q_offset(bh), oo = L.o_offset(bh);
    // queries of the block: from its first key row on when causal (row j skips those below j)
    for (std::int64_t i0 = causal ? j0 : 0; i0 < L.T; i0 += kFlashTile) {
      const std::int64_t n = min64(kFlashTile, L.T - i0);
      load_tile(qs, q + qo, L.q_row, i0, n, L.D);
      load_tile(gs, dout + oo, L.o_row, i0, n, L.D);
      for (std::int64_t e = threadIdx.x; e < n; e += blockDim.x) {
        ls[e] = lse[bh * L.T + i0 + e];
        dls[e] = delta[bh * L.T + i0 + e];
      }
      __syncthreads();
      for (std::int64_t ii = active ? 0 : n; ii < n; ++ii) {
        if (causal && i0 + ii < j) continue;
        const float* qi = qs + ii * kFlashMaxD;
        const float* gi = gs + ii * kFlashMaxD;
        const float p = expf(scale * dot_row(kj, qi, lane, L.D) - ls[ii]);
        const float ds = p * (dot_row(vj, gi, lane, L.D) - dls[ii]);
REMAT_UNROLL
        for (int kk = 0; kk < kFlashPerLane; ++kk) {
          const std::int64_t d = lane + 32 * kk;
          if (d < L.D) {
            ak[kk] += ds * qi[d];
            av[kk] += p * gi[d];
          }
        }
      }
      __syncthreads();
    }
  }
  if (!active) return;
REMAT_UNROLL
  for (int kk = 0; kk < kFlashPerLane; ++kk) {
    const std::int64_t d = lane + 32 * kk;
    if (d < L.D) {
      const std::int64_t at = ko + j * L.kv_row + d;
      if (dk) dk[at] = set_k ? scale * ak[kk] : dk[at] + scale * ak[kk];
      if (dv) dv[at] = set_v ? av[kk] : dv[at] + av[kk];
    }
  }
}

/// Blocks of the tiled kernels: kFlashWarps rows of one (batch, head) each; for dk/dv
/// (`kv_heads`), of one (batch, key/value head).
inline unsigned flash_blocks(const AttentionLayout& L, bool kv_heads = false) {
  const std::int64_t heads = kv_heads ? L.KVH() : L.H;
  return static_cast<unsigned>(L.B * heads * ((L.T + kFlashWarps - 1) / kFlashWarps));
}

}  // namespace cuda
}  // namespace remat
