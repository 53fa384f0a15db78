#pragma once
// SPDX-License-Identifier: MIT
// The tensor-core and async-copy instructions the attention kernels use (flash_mma.cuh), as
// inline PTX for sm_80 and newer (Ampere, Hopper). The emulation defines the same functions
// (emulation/intrinsics.hpp, modelled in emulation/grid.hpp); api.cuh picks one. Built for an
// older GPU they trap: the host never launches those kernels there (Context::tensor_cores()).
//   tf32_bits(x)                     cvt.rna.tf32.f32: x rounded to TF32, ties away from zero
//   mma_tf32_m16n8k8(d, a, b)        d += a b, a warp's 16x8 (x) 8x8 product, fp32 accumulators
//                                    (fragment layouts: emulation/grid.hpp, BlockRunner::mma_tf32)
//   cp_async_16(shared, global, ok)  16 bytes, global -> shared, asynchronously (zeros if !ok)
//   cp_async_commit()                this thread's copies since the last commit form a group
//   cp_async_wait<n>()               wait until at most n of its groups are in flight

#include <cstdint>

namespace remat {
namespace cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define REMAT_PTX_SM80(...) __trap()
#else
#define REMAT_PTX_SM80(...) __VA_ARGS__
#endif

__device__ __forceinline__ std::uint32_t tf32_bits(float x) {
  std::uint32_t r = 0;
  REMAT_PTX_SM80(asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)));
  return r;
}
__device__ __forceinline__ void mma_tf32_m16n8k8(float (&d)[4], const std::uint32_t (&a)[4],
                                                 const std::uint32_t (&b)[2]) {
  REMAT_PTX_SM80(asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])));
}
__device__ __forceinline__ void cp_async_16(void* shared, const void* global, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  const int src_bytes = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled, nothing is read
  REMAT_PTX_SM80(asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst),
                              "l"(global), "r"(src_bytes)
                              : "memory"));
}
__device__ __forceinline__ void cp_async_commit() {
  REMAT_PTX_SM80(asm volatile("cp.async.commit_group;" ::: "memory"));
}
template <int newest_left>
__device__ __forceinline__ void cp_async_wait() {
  REMAT_PTX_SM80(asm volatile("cp.async.wait_group %0;" ::"n"(newest_left) : "memory"));
}

#undef REMAT_PTX_SM80

}  // namespace cuda
}  // namespace remat
