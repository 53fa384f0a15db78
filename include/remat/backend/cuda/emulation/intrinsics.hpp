#pragma once
// SPDX-License-Identifier: MIT
// The device-side language of CUDA as host C++ for the emulation build: the qualifiers, the
// built-in variables (threadIdx, ...: the running fiber's, grid.hpp), __syncthreads, warp
// shuffles and votes (full-warp semantics, grid.hpp), atomics (fibers never run at once, so a
// plain read-modify-write is atomic), fences (no-ops), the math intrinsics the kernels call,
// and the tensor-core and async-copy seams of ptx.cuh: tf32_bits, mma_tf32_m16n8k8, cp_async,
// cp_async_commit, cp_async_wait (grid.hpp models them).

#include <cmath>
#include <cstdint>
#include <cstring>

#include "remat/backend/cuda/emulation/grid.hpp"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Blocks run one at a time, so a function-static variable is shared by the block's threads.
// One section holds them all, so that a block starts with them poisoned (grid.hpp).
#define __shared__ static __attribute__((section("remat_emu_shared"), aligned(16)))

#define threadIdx (static_cast<const uint3&>(::remat::cuda::emu::builtins().thread_idx))
#define blockIdx (static_cast<const uint3&>(::remat::cuda::emu::builtins().block_idx))
#define blockDim (static_cast<const dim3&>(::remat::cuda::emu::builtins().block_dim))
#define gridDim (static_cast<const dim3&>(::remat::cuda::emu::builtins().grid_dim))
constexpr int warpSize = 32;

#define REMAT_EMU_SITE (::remat::cuda::emu::Site{__FILE__, __LINE__})
#define __syncthreads() ::remat::cuda::emu::BlockRunner::get().sync_threads(REMAT_EMU_SITE)
// Blocks run one at a time, each to its end: every write is visible to the blocks after it.
#define __threadfence() static_cast<void>(0)
#define __shfl_sync(...) ::remat::cuda::emu::shfl(::remat::cuda::emu::WarpOp::shfl, REMAT_EMU_SITE, __VA_ARGS__)
#define __shfl_up_sync(...) ::remat::cuda::emu::shfl(::remat::cuda::emu::WarpOp::shfl_up, REMAT_EMU_SITE, __VA_ARGS__)
#define __shfl_down_sync(...) ::remat::cuda::emu::shfl(::remat::cuda::emu::WarpOp::shfl_down, REMAT_EMU_SITE, __VA_ARGS__)
#define __shfl_xor_sync(...) ::remat::cuda::emu::shfl(::remat::cuda::emu::WarpOp::shfl_xor, REMAT_EMU_SITE, __VA_ARGS__)
#define __ballot_sync(mask, pred) ::remat::cuda::emu::vote<unsigned>(::remat::cuda::emu::WarpOp::ballot, REMAT_EMU_SITE, mask, pred)
#define __any_sync(mask, pred) ::remat::cuda::emu::vote<int>(::remat::cuda::emu::WarpOp::any, REMAT_EMU_SITE, mask, pred)
#define __all_sync(mask, pred) ::remat::cuda::emu::vote<int>(::remat::cuda::emu::WarpOp::all, REMAT_EMU_SITE, mask, pred)

namespace remat {
namespace cuda {
namespace emu {

template <class T>
T shfl(WarpOp op, Site site, unsigned mask, T var, int lane_or_delta, int width = 32) {
  return BlockRunner::get().warp(op, site, mask, var, lane_or_delta, width);
}
template <class R>
R vote(WarpOp op, Site site, unsigned mask, int pred) {
  return static_cast<R>(BlockRunner::get().warp(op, site, mask, pred != 0 ? 1 : 0, 0, 32));
}
/// The block's dynamic shared memory (the launch's third argument), poisoned at block start.
template <class T>
T* dynamic_shared() {
  return static_cast<T*>(BlockRunner::get().dynamic_shared());
}

}  // namespace emu

// The seams of ptx.cuh, emulated (the same names and meanings; see there).
/// cvt.rna.tf32.f32: x rounded to TF32 (10 mantissa bits), to nearest, ties away from zero;
/// the low 13 bits of the result are zero.
inline std::uint32_t tf32_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu;
  return u;
}
/// d += a b on the tensor cores (one warp, TF32 inputs, fp32 accumulators; grid.hpp).
inline void mma_tf32_m16n8k8(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],
                             const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const float c[4] = {d[0], d[1], d[2], d[3]};
  emu::BlockRunner::get().mma_tf32(emu::Site{file, line}, d, a, b, c);
}
/// 16 bytes from global memory to shared memory, asynchronously; zeros when !valid.
inline void cp_async_16(void* shared, const void* global, bool valid,
                        const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  emu::BlockRunner::get().cp_async(shared, global, 16, valid, emu::Site{file, line});
}
inline void cp_async_commit() { emu::BlockRunner::get().cp_async_commit(); }
/// Waits until at most `newest_left` of this thread's committed groups are in flight.
template <int newest_left>
inline void cp_async_wait() {
  emu::BlockRunner::get().cp_async_wait(newest_left);
}

}  // namespace cuda
}  // namespace remat

template <class T>
inline T atomicAdd(T* address, T val) {
  const T old = *address;
  *address = old + val;
  return old;
}
// CUDA's wrapping increment: old >= val wraps to 0, else old + 1; returns old.
inline unsigned atomicInc(unsigned* address, unsigned val) {
  const unsigned old = *address;
  *address = old >= val ? 0u : old + 1u;
  return old;
}
template <class T>
inline T atomicMax(T* address, T val) {
  const T old = *address;
  *address = old < val ? val : old;
  return old;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
