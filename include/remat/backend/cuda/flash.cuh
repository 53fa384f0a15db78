#pragma once
// SPDX-License-Identifier: MIT
// Fused causal attention for the CUDA backend: never materializes the T x T matrix. Forward
// keeps only the row statistic lse_i = log sum_j exp(s_ij): B H T floats (P would be B H T T);
// the backward also reads the output O, which the op keeps (GPT's c_proj saves it anyway).
// One warp per row; each lane holds D/32 elements of a row (D <= 128, a multiple of 32... or
// any D <= 128: lanes past D hold zeros).
//
//   forward, row i:  online softmax over keys j (<= i when causal):
//       s = scale q_i.k_j;  m' = max(m, s);  l = l e^(m - m') + e^(s - m');
//       o = o e^(m - m') + e^(s - m') v_j;   finally o /= l, lse_i = m + log l
//   backward:  Dlt_i = dO_i . O_i;  p_ij = e^(s_ij - lse_i);  dp_ij = dO_i . v_j;
//       ds_ij = p_ij (dp_ij - Dlt_i);  dq_i += scale sum_j ds_ij k_j  (a warp per query row)
//       dk_j += scale sum_i ds_ij q_i;  dv_j += sum_i p_ij dO_i      (a warp per key row)
// Each sum runs in a fixed order in one warp: deterministic, no atomics.

#include <cmath>
#include <cstdint>

#include "remat/backend/cuda/memory.cuh"
#include "remat/backend/cuda/sizes.hpp"
#include "remat/core/math.hpp"

namespace remat {
namespace cuda {

constexpr int kFlashPerLane = kFlashMaxD / 32;
constexpr int kFlashWarps = 4;  // rows per block

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

template <int = 0>
__global__ void flash_forward_kernel(AttentionLayout L, float* o, float* lse, const float* q,
                                     const float* k, const float* v, float scale, bool causal) {
  const int lane = threadIdx.x % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kFlashWarps + threadIdx.x / 32;
  if (row >= L.B * L.H * L.T) return;
  const std::int64_t bh = row / L.T, i = row % L.T, qo = L.q_offset(bh);
  float qi[kFlashPerLane], acc[kFlashPerLane] = {};
  load_row(qi, q + qo + i * L.q_row, lane, L.D);
  float m = -INFINITY, l = 0.0f;
  const std::int64_t keys = causal ? i + 1 : L.T;
  for (std::int64_t j = 0; j < keys; ++j) {
    const float s = scale * dot_row(qi, k + qo + j * L.q_row, lane, L.D);
    const float mn = fmaxf(m, s), c = expf(m - mn), e = expf(s - mn);
    l = l * c + e;
    const float* vj = v + qo + j * L.q_row;
REMAT_UNROLL
    for (int kk = 0; kk < kFlashPerLane; ++kk) {
      const std::int64_t d = lane + 32 * kk;
      acc[kk] = acc[kk] * c + (d < L.D ? e * vj[d] : 0.0f);
    }
    m = mn;
  }
  float* oi = o + L.o_offset(bh) + i * L.o_row;
REMAT_UNROLL
  for (int kk = 0; kk < kFlashPerLane; ++kk) {
    const std::int64_t d = lane + 32 * kk;
    if (d < L.D) oi[d] = acc[kk] / l;
  }
  if (lane == 0) lse[row] = m + logf(l);
}
// Dlt_i = dO_i . O_i  (both in the output's layout)
template <int = 0>
__global__ void flash_delta_kernel(AttentionLayout L, float* delta, const float* o, const float* dout) {
  const int lane = threadIdx.x % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kFlashWarps + threadIdx.x / 32;
  if (row >= L.B * L.H * L.T) return;
  const std::int64_t bh = row / L.T, i = row % L.T;
  const std::int64_t off = L.o_offset(bh) + i * L.o_row;
  float g[kFlashPerLane];
  load_row(g, dout + off, lane, L.D);
  const float s = dot_row(g, o + off, lane, L.D);
  if (lane == 0) delta[row] = s;
}
// dq_i += scale sum_{j visible to i} ds_ij k_j
template <int = 0>
__global__ void flash_dq_kernel(AttentionLayout L, float* dq, const float* dout, const float* q,
                                const float* k, const float* v, const float* lse, const float* delta,
                                float scale, bool causal) {
  const int lane = threadIdx.x % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kFlashWarps + threadIdx.x / 32;
  if (row >= L.B * L.H * L.T) return;
  const std::int64_t bh = row / L.T, i = row % L.T, qo = L.q_offset(bh);
  float qi[kFlashPerLane], gi[kFlashPerLane], acc[kFlashPerLane] = {};
  load_row(qi, q + qo + i * L.q_row, lane, L.D);
  load_row(gi, dout + L.o_offset(bh) + i * L.o_row, lane, L.D);
  const float li = lse[row], di = delta[row];
  const std::int64_t keys = causal ? i + 1 : L.T;
  for (std::int64_t j = 0; j < keys; ++j) {
    const float p = expf(scale * dot_row(qi, k + qo + j * L.q_row, lane, L.D) - li);
    const float ds = p * (dot_row(gi, v + qo + j * L.q_row, lane, L.D) - di);
    const float* kj = k + qo + j * L.q_row;
REMAT_UNROLL
    for (int kk = 0; kk < kFlashPerLane; ++kk) {
      const std::int64_t d = lane + 32 * kk;
      if (d < L.D) acc[kk] += ds * kj[d];
    }
  }
  float* dqi = dq + qo + i * L.q_row;
REMAT_UNROLL
  for (int kk = 0; kk < kFlashPerLane; ++kk) {
    const std::int64_t d = lane + 32 * kk;
    if (d < L.D) dqi[d] += scale * acc[kk];
  }
}
// dk_j += scale sum_{i that see j} ds_ij q_i;  dv_j += sum_i p_ij dO_i
template <int = 0>
__global__ void flash_dkdv_kernel(AttentionLayout L, float* dk, float* dv, const float* dout,
                                  const float* q, const float* k, const float* v, const float* lse,
                                  const float* delta, float scale, bool causal) {
  const int lane = threadIdx.x % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kFlashWarps + threadIdx.x / 32;
  if (row >= L.B * L.H * L.T) return;
  const std::int64_t bh = row / L.T, j = row % L.T, qo = L.q_offset(bh), oo = L.o_offset(bh);
  float kj[kFlashPerLane], vj[kFlashPerLane], ak[kFlashPerLane] = {}, av[kFlashPerLane] = {};
  load_row(kj, k + qo + j * L.q_row, lane, L.D);
  load_row(vj, v + qo + j * L.q_row, lane, L.D);
  for (std::int64_t i = causal ? j : 0; i < L.T; ++i) {
    const float* qi = q + qo + i * L.q_row;
    const float* gi = dout + oo + i * L.o_row;
    const float p = expf(scale * dot_row(kj, qi, lane, L.D) - lse[bh * L.T + i]);
    const float ds = p * (dot_row(vj, gi, lane, L.D) - delta[bh * L.T + i]);
REMAT_UNROLL
    for (int kk = 0; kk < kFlashPerLane; ++kk) {
      const std::int64_t d = lane + 32 * kk;
      if (d < L.D) {
        ak[kk] += ds * qi[d];
        av[kk] += p * gi[d];
      }
    }
  }
REMAT_UNROLL
  for (int kk = 0; kk < kFlashPerLane; ++kk) {
    const std::int64_t d = lane + 32 * kk;
    if (d < L.D) {
      if (dk) dk[qo + j * L.q_row + d] += scale * ak[kk];
      if (dv) dv[qo + j * L.q_row + d] += av[kk];
    }
  }
}

}  // namespace cuda
}  // namespace remat
