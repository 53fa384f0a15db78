// SPDX-License-Identifier: MIT
// The CUDA emulation itself (REMAT_CUDA_EMULATION; include/remat/backend/cuda/emulation/):
// that it models what a broken kernel gets wrong (a missing barrier, a barrier or a shuffle not
// every thread reaches, a write past a buffer, a host pointer, memory nobody wrote), that its
// shuffles and votes compute what CUDA's do, that its cuBLAS keeps cuBLAS's conventions; then
// the CUDA backend's error paths with injected faults (issue 12 point 3): only
// cudaErrorMemoryAllocation is out of memory, any other error is a CudaError with CUDA's string
// and the call site, no device is a catchable error, empty_cache() creates no context and
// never throws, REMAT_CUDA_SYNC_CHECK names the kernel that faulted. ctest runs each case in a
// process of its own (catch_discover_tests), so "fresh process" cases are fresh.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <remat/core/storage.hpp>
#include <remat/cuda.hpp>

#include "support/catch.hpp"

using namespace remat;
namespace emu = remat::cuda::emu;

namespace {

/// Faults set in a test are cleared at its end, whatever happens.
struct FaultScope {
  emu::Faults& f = emu::device().faults();
  ~FaultScope() {
    emu::device().reset_faults();
    cuda::set_sync_check(false);
  }
};

struct DeviceFloats {
  explicit DeviceFloats(std::size_t n_, float v = 0.0f) : n(n_) {
    p = static_cast<float*>(Cuda::allocate(n * 4));
    const std::vector<float> h(n, v);
    Cuda::copy_from_host(p, h.data(), n * 4);
  }
  ~DeviceFloats() { Cuda::deallocate(p, n * 4); }
  std::vector<float> host() const {
    std::vector<float> h(n);
    Cuda::copy_to_host(h.data(), p, n * 4);
    return h;
  }
  std::size_t n;
  float* p;
};

cudaStream_t stream() { return cuda::Context::get().stream(); }

// A shared-memory tree sum of one block; `barrier` false drops the loop's __syncthreads (the
// bug a real GPU shows only sometimes).
template <int = 0>
__global__ void block_sum_kernel(float* out, const float* x, int n, bool barrier) {
  __shared__ float sh[256];
  sh[threadIdx.x] = static_cast<int>(threadIdx.x) < n ? x[threadIdx.x] : 0.0f;
  __syncthreads();
  for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    if (barrier) __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = sh[0];
}
template <int = 0>
__global__ void barrier_after_exit_kernel(float* y) {
  if (threadIdx.x >= 16) return;
  __syncthreads();
  y[threadIdx.x] = 1.0f;
}
template <int = 0>
__global__ void two_barriers_kernel(float* y) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  y[threadIdx.x] = 1.0f;
}
template <int = 0>
__global__ void shuffle_after_exit_kernel(float* y) {
  if (threadIdx.x == 5) return;
  y[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f * threadIdx.x, 1);
}
template <int = 0>
__global__ void partial_mask_kernel(float* y) {
  y[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1.0f * threadIdx.x, 1);
}
// out[lane * 7 + k]: shfl, shfl_up, shfl_down (width 16), shfl_xor, ballot, any, all
template <int = 0>
__global__ void warp_ops_kernel(float* out) {
  const int lane = static_cast<int>(threadIdx.x);
  float* o = out + lane * 7;
  o[0] = __shfl_sync(0xffffffffu, 10.0f * lane, 3);
  o[1] = __shfl_up_sync(0xffffffffu, 1.0f * lane, 1);
  o[2] = __shfl_down_sync(0xffffffffu, 1.0f * lane, 2, 16);
  o[3] = __shfl_xor_sync(0xffffffffu, 1.0f * lane, 5);
  o[4] = static_cast<float>(__ballot_sync(0xffffffffu, lane % 3 == 0) & 0xffffu);
  o[5] = static_cast<float>(__any_sync(0xffffffffu, lane == 7));
  o[6] = static_cast<float>(__all_sync(0xffffffffu, lane < 31));
}
template <int = 0>
__global__ void scale_n_plus_one_kernel(float* y, const float* x, int n) {
  for (int i = static_cast<int>(threadIdx.x); i <= n; i += static_cast<int>(blockDim.x)) y[i] = 2.0f * x[i];
}
template <int = 0>
__global__ void copy_kernel(float* y, const float* x, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) y[i] = x[i];
}
// reverses each block's slice through dynamic shared memory
template <int = 0>
__global__ void reverse_kernel(float* y, const float* x) {
  REMAT_DYNAMIC_SHARED(float, tile);
  const unsigned n = blockDim.x, b = blockIdx.x;
  tile[threadIdx.x] = x[b * n + threadIdx.x];
  __syncthreads();
  y[b * n + threadIdx.x] = tile[n - 1 - threadIdx.x];
}

// One warp multiplies A (16 x 8, row-major) by B (8 x 8, row-major, k x n) onto C (16 x 8) with
// mma.sync, each lane loading the fragments the PTX ISA assigns it (g = lane / 4, t = lane % 4).
template <int = 0>
__global__ void mma_kernel(float* d, const float* a, const float* b, const float* c, bool exit_one) {
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  if (exit_one && lane == 9) return;
  const std::uint32_t fa[4] = {cuda::tf32_bits(a[g * 8 + t]), cuda::tf32_bits(a[(g + 8) * 8 + t]),
                               cuda::tf32_bits(a[g * 8 + t + 4]), cuda::tf32_bits(a[(g + 8) * 8 + t + 4])};
  const std::uint32_t fb[2] = {cuda::tf32_bits(b[t * 8 + g]), cuda::tf32_bits(b[(t + 4) * 8 + g])};
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  cuda::mma_tf32_m16n8k8(acc, fa, fb);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}
// 32 threads copy x (256 floats) into shared memory with cp.async, 16 bytes a copy, in two
// groups (floats 0-127, then 128-255; the last thread's second copy zero-filled: valid false);
// wait: 0 waits for all, 1 leaves the newest group in flight, -1 never waits. The tile holds
// -1 before the copies; then block b writes y[256 b ..] = tile.
template <int = 0>
__global__ void cp_async_kernel(float* y, const float* x, int wait) {
  __shared__ __align__(16) float tile[256];
  const int i = static_cast<int>(threadIdx.x);
  for (int k = i; k < 256; k += 32) tile[k] = -1.0f;
  __syncthreads();
  cuda::cp_async_16(tile + 4 * i, x + 4 * i, true);
  cuda::cp_async_commit();
  cuda::cp_async_16(tile + 128 + 4 * i, x + 128 + 4 * i, i != 31);
  cuda::cp_async_commit();
  if (wait == 0) cuda::cp_async_wait<0>();
  if (wait == 1) cuda::cp_async_wait<1>();
  __syncthreads();
  for (int k = i; k < 256; k += 32) y[256 * blockIdx.x + k] = tile[k];
}
template <int = 0>
__global__ void cp_async_misaligned_kernel(const float* x) {
  __shared__ __align__(16) float tile[64];
  cuda::cp_async_16(tile + 4 * threadIdx.x, x + 4 * threadIdx.x + 1, true);
  cuda::cp_async_commit();
  cuda::cp_async_wait<0>();
}

// The emulation's fixed schedule for one test (block parity decides the order of its threads
// and when cp.async lands), whatever REMAT_CUDA_EMU_SEED says for the run.
struct FixedSchedule {
  std::uint64_t before = emu::device().schedule_seed();
  FixedSchedule() { emu::device().set_schedule_seed(0); }
  ~FixedSchedule() { emu::device().set_schedule_seed(before); }
};

template <class Fn>
std::string fault_of(Fn fn) {
  try {
    fn();
  } catch (const emu::KernelFault& e) {
    return e.what();
  }
  return "(no fault)";
}

}  // namespace

TEST_CASE("the emulation: a missing __syncthreads in a shared-memory reduction gives a wrong sum", "[cuda][emulation]") {
  const FixedSchedule fixed;  // block 0 runs its lowest thread first
  std::vector<float> h(256);
  for (int i = 0; i < 256; ++i) h[static_cast<std::size_t>(i)] = static_cast<float>(i % 7);
  double want = 0;
  for (float v : h) want += v;
  DeviceFloats x(256), out(2);
  Cuda::copy_from_host(x.p, h.data(), 256 * 4);
  REMAT_CUDA_LAUNCH(block_sum_kernel<>, 2, 256, 0, stream(), out.p, x.p, 256, true);
  CHECK(out.host()[0] == Approx(want));
  CHECK(out.host()[1] == Approx(want));  // odd blocks run the threads in the other order
  // Without the barrier, block 0 (lowest thread first: thread 0 reads sh[o] before thread o
  // added its part) is wrong. Block 1 runs the highest thread first, a valid order for this
  // tree, so it happens to be right: one reason the blocks alternate.
  REMAT_CUDA_LAUNCH(block_sum_kernel<>, 2, 256, 0, stream(), out.p, x.p, 256, false);
  CHECK(out.host()[0] != Approx(want));
}

template <int = 0>
__global__ void atomic_sum_kernel(float* out, const float* x) {
  if (threadIdx.x == 0) atomicAdd(out, x[blockIdx.x]);
}

TEST_CASE("the emulation: a schedule seed runs blocks in a random order, and atomics in that order", "[cuda][emulation]") {
  // Seed 0: forwards in odd launches, backwards in even ones; any other seed: a permutation
  // that changes with the seed and the launch.
  const auto fwd = emu::block_order(5, 1, 0), bwd = emu::block_order(5, 2, 0);
  CHECK(fwd == std::vector<unsigned long long>{0, 1, 2, 3, 4});
  CHECK(bwd == std::vector<unsigned long long>{4, 3, 2, 1, 0});
  std::vector<std::vector<unsigned long long>> seen;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    auto o = emu::block_order(100, 7, seed);
    auto sorted = o;
    std::sort(sorted.begin(), sorted.end());
    for (unsigned long long i = 0; i < 100; ++i) REQUIRE(sorted[i] == i);  // a permutation
    for (const auto& s : seen) CHECK(o != s);
    seen.push_back(o);
  }
  CHECK(emu::block_order(100, 7, 3) == seen[2]);    // drawn from (seed, launch) alone
  CHECK(emu::block_order(100, 8, 3) != seen[2]);
  // A float sum by atomicAdd, one block per term, terms of mixed magnitude: its bits depend on
  // the order of the blocks, so random schedules give more than one answer.
  std::vector<float> h(64);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = (i % 3 == 0 ? 1e7f : 1.0f) * (i % 2 ? -1.0f : 1.0f) + 0.1f * i;
  DeviceFloats x(64), out(1);
  Cuda::copy_from_host(x.p, h.data(), 64 * 4);
  const std::uint64_t before = emu::device().schedule_seed();
  std::vector<float> sums;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    emu::device().set_schedule_seed(seed);
    Cuda::fill(out.p, 1, 0.0f);
    REMAT_CUDA_LAUNCH(atomic_sum_kernel<>, 64, 32, 0, stream(), out.p, x.p);
    sums.push_back(out.host()[0]);
  }
  emu::device().set_schedule_seed(before);
  std::sort(sums.begin(), sums.end());
  CHECK(std::unique(sums.begin(), sums.end()) - sums.begin() > 1);
}

TEST_CASE("the emulation: a barrier not every thread reaches is a fault, never a hang", "[cuda][emulation]") {
  DeviceFloats y(64);
  const std::string exited = fault_of([&] { REMAT_CUDA_LAUNCH(barrier_after_exit_kernel<>, 1, 64, 0, stream(), y.p); });
  CHECK(exited.find("barrier_after_exit_kernel") != std::string::npos);
  CHECK(exited.find("has exited") != std::string::npos);
  CHECK(exited.find("__syncthreads() at test_emulation.cpp:") != std::string::npos);
  const std::string two = fault_of([&] { REMAT_CUDA_LAUNCH(two_barriers_kernel<>, 1, 64, 0, stream(), y.p); });
  CHECK(two.find("divergent barrier") != std::string::npos);
  INFO(exited << "\n" << two);
}

TEST_CASE("the emulation: a shuffle needs all 32 lanes and a full mask", "[cuda][emulation]") {
  DeviceFloats y(64);
  const std::string exited = fault_of([&] { REMAT_CUDA_LAUNCH(shuffle_after_exit_kernel<>, 1, 32, 0, stream(), y.p); });
  CHECK(exited.find("__shfl_xor_sync") != std::string::npos);
  CHECK(exited.find("lane 5 has exited") != std::string::npos);
  const std::string partial = fault_of([&] { REMAT_CUDA_LAUNCH(partial_mask_kernel<>, 1, 32, 0, stream(), y.p); });
  CHECK(partial.find("mask 0x0000ffff") != std::string::npos);
  DeviceFloats out(48 * 7);
  const std::string short_warp = fault_of([&] { REMAT_CUDA_LAUNCH(warp_ops_kernel<>, 1, 48, 0, stream(), out.p); });
  CHECK(short_warp.find("in warp 1 of only 16 threads") != std::string::npos);
  INFO(exited << "\n" << partial << "\n" << short_warp);
}

TEST_CASE("the emulation: shuffles and votes compute what CUDA's do", "[cuda][emulation]") {
  DeviceFloats out(32 * 7);
  REMAT_CUDA_LAUNCH(warp_ops_kernel<>, 1, 32, 0, stream(), out.p);
  const auto o = out.host();
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l) ballot |= (l % 3 == 0 ? 1u : 0u) << l;
  for (int l = 0; l < 32; ++l) {
    const float* r = o.data() + l * 7;
    INFO("lane " << l);
    CHECK(r[0] == 30.0f);
    CHECK(r[1] == static_cast<float>(l >= 1 ? l - 1 : l));
    CHECK(r[2] == static_cast<float>((l % 16) + 2 < 16 ? l + 2 : l));
    CHECK(r[3] == static_cast<float>(l ^ 5));
    CHECK(r[4] == static_cast<float>(ballot & 0xffffu));
    CHECK(r[5] == 1.0f);
    CHECK(r[6] == 0.0f);
  }
}

TEST_CASE("the emulation: mma.sync multiplies the fragments of the PTX layout, with TF32 inputs", "[cuda][emulation]") {
  std::vector<float> a(16 * 8), b(8 * 8), c(16 * 8);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = rng::normal(31, 1, i);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = rng::normal(32, 1, i);
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = rng::normal(33, 1, i);
  a[5] = 1.0f + 1.0f / 4096.0f;  // 2^-12 is below half of TF32's step (2^-10): rounds to 1
  DeviceFloats da(a.size()), db(b.size()), dc(c.size()), dd(c.size());
  Cuda::copy_from_host(da.p, a.data(), a.size() * 4);
  Cuda::copy_from_host(db.p, b.data(), b.size() * 4);
  Cuda::copy_from_host(dc.p, c.data(), c.size() * 4);
  REMAT_CUDA_LAUNCH(mma_kernel<>, 1, 32, 0, stream(), dd.p, da.p, db.p, dc.p, false);
  const auto d = dd.host();
  auto tf32 = [](float x) {  // round to nearest, ties away, 10 mantissa bits
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    u = (u + 0x1000u) & ~0x1fffu;
    std::memcpy(&x, &u, 4);
    return x;
  };
  CHECK(tf32(a[5]) == 1.0f);
  double worst = 0, worst_fp32 = 0;
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      double s = c[static_cast<std::size_t>(r * 8 + n)], s32 = s;
      for (int k = 0; k < 8; ++k) {
        s += double(tf32(a[static_cast<std::size_t>(r * 8 + k)])) * tf32(b[static_cast<std::size_t>(k * 8 + n)]);
        s32 += double(a[static_cast<std::size_t>(r * 8 + k)]) * b[static_cast<std::size_t>(k * 8 + n)];
      }
      worst = std::max(worst, std::fabs(d[static_cast<std::size_t>(r * 8 + n)] - s));
      worst_fp32 = std::max(worst_fp32, std::fabs(d[static_cast<std::size_t>(r * 8 + n)] - s32));
    }
  INFO("max |d - TF32 product| " << worst << ", max |d - fp32 product| " << worst_fp32);
  CHECK(worst < 1e-5);        // the product of the TF32-rounded inputs, summed in fp32
  CHECK(worst_fp32 > 1e-5);   // and not the fp32 product: the inputs were rounded
  CHECK(worst_fp32 < 1e-2);
  // a warp-wide instruction: a lane that exited leaves the others waiting, a fault
  const std::string exited = fault_of([&] { REMAT_CUDA_LAUNCH(mma_kernel<>, 1, 32, 0, stream(), dd.p, da.p, db.p, dc.p, true); });
  CHECK(exited.find("mma.sync") != std::string::npos);
  CHECK(exited.find("lane 9 has exited") != std::string::npos);
}

TEST_CASE("the emulation: cp.async lands at cp.async.wait_group or at once, zero-fills, and wants aligned addresses", "[cuda][emulation]") {
  const FixedSchedule fixed;  // block 0 holds its copies back, block 1 lands them at once
  std::vector<float> x(256);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) + 1.0f;
  DeviceFloats dx(256), dy(256);
  Cuda::copy_from_host(dx.p, x.data(), 256 * 4);
  REMAT_CUDA_LAUNCH(cp_async_kernel<>, 1, 32, 0, stream(), dy.p, dx.p, 0);
  auto y = dy.host();
  for (int i = 0; i < 256; ++i) {
    INFO("float " << i);
    CHECK(y[static_cast<std::size_t>(i)] == (i >= 252 ? 0.0f : x[static_cast<std::size_t>(i)]));
  }
  REMAT_CUDA_LAUNCH(cp_async_kernel<>, 1, 32, 0, stream(), dy.p, dx.p, 1);  // the newest group in flight
  y = dy.host();
  CHECK(y[0] == 1.0f);
  CHECK(y[127] == 128.0f);
  CHECK(y[128] == -1.0f);  // not landed yet
  // No wait at all, two blocks: block 0 (lowest thread first) holds its copies back, block 1
  // lands them at once; a kernel must be right at both ends (the emulation's schedule).
  DeviceFloats dy2(512);
  REMAT_CUDA_LAUNCH(cp_async_kernel<>, 2, 32, 0, stream(), dy2.p, dx.p, -1);
  y = dy2.host();
  CHECK(y[0] == -1.0f);
  CHECK(y[255] == -1.0f);
  CHECK(y[256] == 1.0f);
  CHECK(y[256 + 251] == 252.0f);
  CHECK(y[256 + 252] == 0.0f);
  const std::string misaligned = fault_of([&] { REMAT_CUDA_LAUNCH(cp_async_misaligned_kernel<>, 1, 16, 0, stream(), dx.p); });
  CHECK(misaligned.find("not aligned to 16 bytes") != std::string::npos);
  INFO(misaligned);
}

TEST_CASE("the emulation: a write past a buffer's end or a host or freed pointer is a fault", "[cuda][emulation]") {
  const int n = 1000;  // 4000 bytes: 96 guard bytes up to the pool's 512-byte rounding
  DeviceFloats x(n, 1.0f), y(n);
  REMAT_CUDA_LAUNCH(copy_kernel<>, 1, 128, 0, stream(), y.p, x.p, n);
  const std::string past = fault_of([&] { REMAT_CUDA_LAUNCH(scale_n_plus_one_kernel<>, 1, 128, 0, stream(), y.p, x.p, n); });
  CHECK(past.find("wrote past the end of a 4000-byte buffer") != std::string::npos);
  std::vector<float> host(n);
  const std::string hostp = fault_of([&] { REMAT_CUDA_LAUNCH(copy_kernel<>, 1, 128, 0, stream(), y.p, host.data(), n); });
  CHECK(hostp.find("argument 1 is not device memory") != std::string::npos);
  float* freed = static_cast<float*>(Cuda::allocate(512));
  Cuda::deallocate(freed, 512);
  const std::string after = fault_of([&] { REMAT_CUDA_LAUNCH(copy_kernel<>, 1, 128, 0, stream(), freed, x.p, 128); });
  CHECK(after.find("no live block") != std::string::npos);
  INFO(past << "\n" << hostp << "\n" << after);
}

TEST_CASE("the emulation: memory nobody wrote reads as NaN and dynamic shared memory is per block", "[cuda][emulation]") {
  float* p = static_cast<float*>(Cuda::allocate(64 * 4));
  std::vector<float> h(64);
  Cuda::copy_to_host(h.data(), p, 64 * 4);
  Cuda::deallocate(p, 64 * 4);
  for (float v : h) CHECK(std::isnan(v));
  std::vector<float> in(3 * 64);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  DeviceFloats x(in.size()), y(in.size());
  Cuda::copy_from_host(x.p, in.data(), in.size() * 4);
  REMAT_CUDA_LAUNCH(reverse_kernel<>, 3, 64, 64 * sizeof(float), stream(), y.p, x.p);
  const auto out = y.host();
  for (std::size_t b = 0; b < 3; ++b)
    for (std::size_t t = 0; t < 64; ++t) CHECK(out[b * 64 + t] == in[b * 64 + 63 - t]);
}

TEST_CASE("the emulation: a bad launch configuration is a CudaError naming the kernel", "[cuda][emulation]") {
  DeviceFloats y(64);
  try {
    REMAT_CUDA_LAUNCH(copy_kernel<>, 1, 2048, 0, stream(), y.p, y.p, 64);
    FAIL("no error");
  } catch (const CudaError& e) {
    const std::string m = e.what();
    CHECK(m.find("copy_kernel<>") != std::string::npos);
    CHECK(m.find("invalid configuration argument") != std::string::npos);
  }
}

TEST_CASE("the emulation: cuBLAS is column-major with cuBLAS's leading dimensions and beta", "[cuda][emulation]") {
  const int m = 3, n = 4, k = 5, ld = 7;  // padded leading dimensions
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      // op(A) is m x k: A is stored m x k (lda >= m) or k x m (lda >= k), column-major
      std::vector<float> a(static_cast<std::size_t>(ld * 8)), b(a.size()), c(a.size(), std::nanf(""));
      for (std::size_t i = 0; i < a.size(); ++i) {
        a[i] = static_cast<float>(static_cast<int>(i * 7 % 11) - 5);
        b[i] = static_cast<float>(static_cast<int>(i * 5 % 13) - 6);
      }
      auto A = [&](int i, int l) { return ta ? a[static_cast<std::size_t>(l + i * ld)] : a[static_cast<std::size_t>(i + l * ld)]; };
      auto B = [&](int l, int j) { return tb ? b[static_cast<std::size_t>(j + l * ld)] : b[static_cast<std::size_t>(l + j * ld)]; };
      DeviceFloats da(a.size()), db(b.size()), dc(c.size());
      Cuda::copy_from_host(da.p, a.data(), a.size() * 4);
      Cuda::copy_from_host(db.p, b.data(), b.size() * 4);
      Cuda::copy_from_host(dc.p, c.data(), c.size() * 4);  // NaN: beta = 0 must not read C
      const float alpha = 0.5f, beta0 = 0.0f, beta2 = 2.0f;
      auto* h = cuda::Context::get().cublas();
      const auto opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
      REQUIRE(cublasSgemm(h, opa, opb, m, n, k, &alpha, da.p, ld, db.p, ld, &beta0, dc.p, ld) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(cublasSgemm(h, opa, opb, m, n, k, &alpha, da.p, ld, db.p, ld, &beta2, dc.p, ld) == CUBLAS_STATUS_SUCCESS);
      const auto out = dc.host();
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int l = 0; l < k; ++l) s += double(A(i, l)) * B(l, j);
          CHECK(out[static_cast<std::size_t>(i + j * ld)] == Approx(0.5 * s + 2.0 * (0.5 * s)));
        }
      CHECK(std::isnan(out[static_cast<std::size_t>(m)]));  // rows past m are not written
      // a leading dimension below the stored rows is cuBLAS's CUBLAS_STATUS_INVALID_VALUE
      CHECK(cublasSgemm(h, opa, opb, m, n, k, &alpha, da.p, (ta ? k : m) - 1, db.p, ld, &beta0, dc.p, ld) ==
            CUBLAS_STATUS_INVALID_VALUE);
    }
}

TEST_CASE("the emulation: a captured stream records work with its arguments, and a graph runs it", "[cuda][emulation]") {
  DeviceFloats x(64, 1.0f), y(64, 0.0f), one(1, 1.0f);
  const float alpha = 2.0f, beta = 0.0f;
  float scale = alpha;  // a host scalar changed after the capture: the graph keeps its copy
  cudaStream_t s = stream();
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  cudaStreamCaptureStatus st{};
  REQUIRE(cudaStreamIsCapturing(s, &st) == cudaSuccess);
  CHECK(st == cudaStreamCaptureStatusActive);
  REMAT_CUDA_LAUNCH(copy_kernel<>, 1, 64, 0, s, y.p, x.p, 64);             // y = x
  REQUIRE(cublasSgemm(cuda::Context::get().cublas(), CUBLAS_OP_N, CUBLAS_OP_N, 64, 1, 1, &scale,
                      y.p, 64, one.p, 1, &beta, x.p, 64) == CUBLAS_STATUS_SUCCESS);  // x = 2 y
  REQUIRE(cudaMemsetAsync(y.p, 0, 4, s) == cudaSuccess);                 // y[0] = 0
  scale = 100.0f;
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  std::size_t nodes = 0;
  REQUIRE(cudaGraphGetNodes(g, nullptr, &nodes) == cudaSuccess);
  CHECK(nodes == 3);
  CHECK(x.host() == std::vector<float>(64, 1.0f));  // nothing ran at the capture
  CHECK(y.host() == std::vector<float>(64, 0.0f));
  cudaGraphExec_t e = nullptr;
  REQUIRE(cudaGraphInstantiate(&e, g, 0) == cudaSuccess);
  const auto launches = emu::device().launches();
  REQUIRE(cudaGraphLaunch(e, s) == cudaSuccess);
  CHECK(emu::device().launches() == launches + 1);  // the kernel, run again by the replay
  auto want_y = std::vector<float>(64, 1.0f);
  want_y[0] = 0.0f;
  CHECK(y.host() == want_y);
  CHECK(x.host() == std::vector<float>(64, 2.0f));  // alpha as captured, not 100
  REQUIRE(cudaGraphLaunch(e, s) == cudaSuccess);    // again: y = x = 2, x = 2 y = 4
  CHECK(x.host() == std::vector<float>(64, 4.0f));
  cudaGraphExecDestroy(e);
  cudaGraphDestroy(g);
}

TEST_CASE("the emulation: waiting for the device while capturing fails and invalidates the capture", "[cuda][emulation]") {
  DeviceFloats x(8, 1.0f);
  cudaStream_t s = stream();
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  REMAT_CUDA_LAUNCH(copy_kernel<>, 1, 8, 0, s, x.p, x.p, 8);
  CHECK(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  cudaStreamCaptureStatus st{};
  REQUIRE(cudaStreamIsCapturing(s, &st) == cudaSuccess);
  CHECK(st == cudaStreamCaptureStatusInvalidated);
  float h[8];
  CHECK(cudaMemcpy(h, x.p, sizeof h, cudaMemcpyDeviceToHost) == cudaErrorStreamCaptureImplicit);
  (void)cudaGetLastError();
  cudaGraph_t g = nullptr;
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
  CHECK(g == nullptr);
  (void)cudaGetLastError();
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureUnmatched);  // no capture now
  (void)cudaGetLastError();
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);  // and the stream works again
  CHECK(x.host() == std::vector<float>(8, 1.0f));
}

// ---- the backend's error paths, with injected faults --------------------------------------

TEST_CASE("cuda errors: no device makes the first allocation a catchable CudaError", "[cuda][errors]") {
  FaultScope faults;
  Cuda::empty_cache();  // nothing cached: the allocation must ask the device
  faults.f.device_count = 0;
  CHECK_FALSE(cuda::device_available());
  try {
    Storage<Cuda> s(4096, Category::activations);
    FAIL("no error");
  } catch (const OutOfMemory&) {
    FAIL("no device reported as out of memory");
  } catch (const CudaError& e) {
    const std::string m = e.what();
    CHECK(m.find("no CUDA-capable device is detected") != std::string::npos);
    CHECK(m.find("cudaMalloc of 2097152 bytes failed at") != std::string::npos);
    CHECK(m.find("memory.cuh:") != std::string::npos);
  }
}

TEST_CASE("cuda errors: a cudaMalloc failure other than out of memory is a CudaError with its string", "[cuda][errors]") {
  FaultScope faults;
  Cuda::empty_cache();
  faults.f.malloc_fail_in = 0;
  faults.f.malloc_error = cudaErrorInvalidValue;
  try {
    Storage<Cuda> s(4096, Category::activations);
    FAIL("no error");
  } catch (const OutOfMemory&) {
    FAIL("cudaErrorInvalidValue reported as out of memory");
  } catch (const CudaError& e) {
    CHECK(std::string(e.what()).find("invalid argument (cudaErrorInvalidValue") != std::string::npos);
  }
  Storage<Cuda> after(4096, Category::activations);  // the fault was one call: the process goes on
  CHECK(after.data() != nullptr);
}

TEST_CASE("cuda errors: only cudaErrorMemoryAllocation is OutOfMemory after one retry", "[cuda][errors]") {
  FaultScope faults;
  const std::int64_t before = Cuda::reserved_bytes();
  faults.f.malloc_fail_in = 0;
  faults.f.malloc_fail_times = 2;  // the reservation and its retry after returning the cache
  faults.f.malloc_error = cudaErrorMemoryAllocation;
  CHECK_THROWS_AS(Storage<Cuda>(std::size_t(300) << 20, Category::activations), OutOfMemory);
  CHECK(static_cast<std::int64_t>(Cuda::reserved_bytes()) <= before);
  faults.f.malloc_fail_in = 0;
  faults.f.malloc_fail_times = 1;  // one refusal: the retry succeeds
  Storage<Cuda> s(std::size_t(300) << 20, Category::activations);
  CHECK(s.data() != nullptr);
}

TEST_CASE("cuda errors: a sticky error of an earlier kernel makes allocation a CudaError and not OutOfMemory", "[cuda][errors]") {
  FaultScope faults;
  DeviceFloats y(64);
  Cuda::empty_cache();
  faults.f.launch_fault_in = 0;  // the next kernel faults on the device
  Cuda::fill(y.p, 64, 1.0f);     // no sync check: the launch itself succeeds
  try {
    Storage<Cuda> s(std::size_t(64) << 20, Category::activations);
    FAIL("no error");
  } catch (const OutOfMemory&) {
    FAIL("a sticky error reported as out of memory");
  } catch (const CudaError& e) {
    CHECK(std::string(e.what()).find("an illegal memory access was encountered") != std::string::npos);
  }
}

TEST_CASE("cuda errors: empty_cache() creates no context and never throws", "[cuda][errors]") {
  FaultScope faults;
  const std::int64_t streams = emu::device().streams_created();
  { Storage<Cuda> s(4096, Category::activations); }  // cudaMalloc only: no stream, no cuBLAS
  CHECK(Cuda::reserved_bytes() > 0);
  faults.f.stream_create_fails = true;  // were a context made here, it would throw
  emu::device().set_sticky(cudaErrorIllegalAddress);  // and the device reports a fault
  Cuda::empty_cache();  // noexcept: a throw inside would terminate the process
  CHECK(emu::device().streams_created() == streams);
  CHECK(Cuda::reserved_bytes() == 0);
}

TEST_CASE("cuda errors: REMAT_CUDA_SYNC_CHECK names the kernel that faulted", "[cuda][errors]") {
  FaultScope faults;
  DeviceFloats y(1000);
  cuda::set_sync_check(true);
  faults.f.launch_fault_in = 0;
  try {
    Cuda::fill(y.p, 1000, 1.0f);
    FAIL("no error");
  } catch (const CudaError& e) {
    const std::string m = e.what();
    CHECK(m.find("kernel fill_kernel<>") != std::string::npos);
    CHECK(m.find("memory.cuh:") != std::string::npos);
    CHECK(m.find("an illegal memory access was encountered") != std::string::npos);
    CHECK(m.find("REMAT_CUDA_SYNC_CHECK") != std::string::npos);
  }
  // without it the same fault shows at the next synchronization, without the kernel's name
  emu::device().reset_faults();
  cuda::set_sync_check(false);
  faults.f.launch_fault_in = 0;
  Cuda::fill(y.p, 1000, 1.0f);
  try {
    Cuda::synchronize();
    FAIL("no error");
  } catch (const CudaError& e) {
    CHECK(std::string(e.what()).find("fill_kernel") == std::string::npos);
    CHECK(std::string(e.what()).find("cudaStreamSynchronize") != std::string::npos);
  }
}

TEST_CASE("cuda: the attention path is chosen per test and REMAT_CUDA_ATTENTION is read at each call", "[cuda]") {
  struct Restore {
    ~Restore() {
      Cuda::set_attention_path(cuda::AttentionPath::from_env);
      unsetenv("REMAT_CUDA_ATTENTION");
    }
  } restore;
  CHECK(Cuda::flash(64));
  CHECK_FALSE(Cuda::flash(256));  // past kFlashMaxD: materialized whatever the setting
  setenv("REMAT_CUDA_ATTENTION", "materialized", 1);
  CHECK_FALSE(Cuda::flash(64));  // read now, not cached at the first call
  unsetenv("REMAT_CUDA_ATTENTION");
  CHECK(Cuda::flash(64));
  Cuda::set_attention_path(cuda::AttentionPath::materialized);
  CHECK_FALSE(Cuda::flash(64));
  CHECK(Cuda::attention_aux_numel(2, 10, 64) == 2 * 10 * 10);
  Cuda::set_attention_path(cuda::AttentionPath::fused);
  setenv("REMAT_CUDA_ATTENTION", "materialized", 1);
  CHECK(Cuda::flash(64));  // an explicit choice wins over the environment
  CHECK(Cuda::attention_aux_numel(2, 10, 64) == 2 * 10);
}
