#pragma once
// SPDX-License-Identifier: MIT
// CUDA optimizer updates (one fused kernel each, the CPU's formulas; many tensors per launch:
// NOTE [multi-tensor updates]) and gradient-norm helpers.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "remat/backend/cuda/launch.cuh"
#include "remat/backend/cuda/memory.cuh"
#include "remat/backend/cuda/sizes.hpp"
#include "remat/backend/update_list.hpp"

namespace remat {
namespace cuda {

// One element of AdamW (the CPU's formula, cpu/optim.hpp): both kernels below call it, so a
// multi-tensor update gives the per-tensor update's bits.
__device__ inline void adamw_element(float& p, float g, float& m, float& v, float lr, float b1,
                                     float b2, float eps, float wd, float step, float sbc2) {
  p *= 1.0f - lr * wd;
  m = b1 * m + (1.0f - b1) * g;
  v = b2 * v + (1.0f - b2) * g * g;
  p -= step * m / (sqrtf(v) / sbc2 + eps);
}
// One element of SGD with momentum (buf null: none).
__device__ inline void sgd_element(float& p, float g, float* buf, float lr, float mu, float wd,
                                   bool nesterov, bool first) {
  const float gi = g + wd * p;
  if (!buf) {
    p -= lr * gi;
    return;
  }
  *buf = first ? gi : mu * *buf + gi;
  p -= lr * (nesterov ? gi + mu * *buf : *buf);
}
template <int = 0>
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, std::int64_t n, float lr,
                             float b1, float b2, float eps, float wd, float step, float sbc2) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    adamw_element(p[i], g[i], m[i], v[i], lr, b1, b2, eps, wd, step, sbc2);
}
template <int = 0>
__global__ void sgd_kernel(float* p, const float* g, float* buf, std::int64_t n, float lr, float mu,
                           float wd, bool nesterov, bool first) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    sgd_element(p[i], g[i], buf ? buf + i : nullptr, lr, mu, wd, nesterov, first);
}

// NOTE [multi-tensor updates]: an optimizer step over a model's parameters (GPT-2 124M: 148
// tensors) launched one kernel per tensor; AdamW alone was 148 launches a step. Here one launch
// takes up to kListTensors tensors, passed by value as a kernel parameter (UpdateList, about
// 1.8 KB of CUDA's 4 KB; nothing to upload, no host wait). Block b works on chunk
// b - first_block[k] of tensor k (first_block is the running sum of each tensor's
// ceil(n / kListChunk) blocks), kListChunk elements per block; finding k is a scan of at most
// kListTensors entries. Each element is updated by adamw_element / sgd_element, as by the
// per-tensor kernels, so the bits do not change.
constexpr int kListTensors = 32;
constexpr std::int64_t kListChunk = 4096;
struct UpdateList {
  UpdateSlice t[kListTensors];
  std::int64_t first_block[kListTensors + 1];
  int count;
};
// The tensor of the running block and the chunk it owns: elements [begin, end) of tensor *k.
__device__ inline void list_chunk(const UpdateList& a, int* k, std::int64_t* begin, std::int64_t* end) {
  const std::int64_t b = blockIdx.x;
  int i = 0;
  while (i + 1 < a.count && b >= a.first_block[i + 1]) ++i;
  *k = i;
  *begin = (b - a.first_block[i]) * kListChunk;
  *end = *begin + kListChunk < a.t[i].n ? *begin + kListChunk : a.t[i].n;
}
template <int = 0>
__global__ void adamw_list_kernel(UpdateList a, float lr, float b1, float b2, float eps, float wd,
                                  float step, float sbc2) {
  int k;
  std::int64_t begin, end;
  list_chunk(a, &k, &begin, &end);
  const UpdateSlice& s = a.t[k];
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    adamw_element(s.p[i], s.g[i], s.m[i], s.v[i], lr, b1, b2, eps, wd, step, sbc2);
}
template <int = 0>
__global__ void sgd_list_kernel(UpdateList a, float lr, float mu, float wd, bool nesterov) {
  int k;
  std::int64_t begin, end;
  list_chunk(a, &k, &begin, &end);
  const UpdateSlice& s = a.t[k];
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    sgd_element(s.p[i], s.g[i], s.m ? s.m + i : nullptr, lr, mu, wd, nesterov, s.first);
}
// NOTE [multi-tensor updates], flat state: when an optimizer's state lies at one distance from
// every parameter (optim::flat_state over flattened parameters: NOTE [flat buffers] in
// core/flat.hpp), a tensor needs only its gradient, its parameter and its length in the table:
// 24 bytes, so kFlatTensors tensors fit one launch's parameters (GPT-2 124M's 148 all do), and
// the state is found as parameter + dm (+ dv) bytes. Block b finds its tensor by binary search
// of first_block; the element updates are adamw_element / sgd_element again.
constexpr int kFlatTensors = 160;
struct FlatEntry {
  const float* g;
  float* p;
  std::int32_t n;            // elements (a tensor of 2^31 or more goes the list way)
  std::int32_t first_block;  // running sum of the earlier entries' ceil(n / kListChunk)
};
struct FlatUpdateList {
  FlatEntry t[kFlatTensors];
  std::int32_t count, blocks;
};
static_assert(sizeof(FlatUpdateList) <= 4000, "a kernel's parameters: at most 4 KB");
__device__ inline void flat_chunk(const FlatUpdateList& a, int* k, std::int64_t* begin,
                                  std::int64_t* end) {
  const std::int32_t b = static_cast<std::int32_t>(blockIdx.x);
  int lo = 0, hi = a.count - 1;  // the last entry whose first_block <= b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.t[mid].first_block <= b) lo = mid;
    else hi = mid - 1;
  }
  *k = lo;
  *begin = static_cast<std::int64_t>(b - a.t[lo].first_block) * kListChunk;
  *end = *begin + kListChunk < a.t[lo].n ? *begin + kListChunk : a.t[lo].n;
}
template <class T>
__device__ inline T* at_distance(T* p, std::int64_t bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<char*>(p) + bytes);
}
template <int = 0>
__global__ void adamw_flat_kernel(FlatUpdateList a, std::int64_t dm, std::int64_t dv, float lr,
                                  float b1, float b2, float eps, float wd, float step, float sbc2) {
  int k;
  std::int64_t begin, end;
  flat_chunk(a, &k, &begin, &end);
  float* p = a.t[k].p;
  const float* g = a.t[k].g;
  float* m = at_distance(p, dm);
  float* v = at_distance(p, dv);
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    adamw_element(p[i], g[i], m[i], v[i], lr, b1, b2, eps, wd, step, sbc2);
}
template <int = 0>
__global__ void sgd_flat_kernel(FlatUpdateList a, std::int64_t dm, bool momentum, float lr,
                                float mu, float wd, bool nesterov, bool first) {
  int k;
  std::int64_t begin, end;
  flat_chunk(a, &k, &begin, &end);
  float* p = a.t[k].p;
  const float* g = a.t[k].g;
  float* buf = momentum ? at_distance(p, dm) : nullptr;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    sgd_element(p[i], g[i], buf ? buf + i : nullptr, lr, mu, wd, nesterov, first);
}
// partial[b] = sum of x^2 over block b's grid-stride elements
// Block `j` of `blocks` (256 threads) sums x^2 over its grid-stride share of x in double:
// *out. One order per (j, blocks), whichever kernel runs it.
__device__ inline void sum_squares_block(double* out, const float* x, std::int64_t n,
                                         std::int64_t j, std::int64_t blocks, double* sh) {
  double s = 0;
  for (std::int64_t i = j * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += blocks * blockDim.x)
    s += static_cast<double>(x[i]) * x[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}
template <int = 0>
__global__ void sum_squares_kernel(double* partial, const float* x, std::int64_t n) {
  __shared__ double sh[256];
  sum_squares_block(partial + blockIdx.x, x, n, blockIdx.x, gridDim.x, sh);
}
// Up to kListTensors buffers in one launch, kSumSquaresBlocks blocks each: buffer k's partial
// sums go to its row of `partial`, the same bits as sum_squares_kernel's (one launch each).
struct SquaresList {
  const float* x[kListTensors];
  std::int64_t n[kListTensors];
  std::int64_t row[kListTensors];
  int count;
};
template <int = 0>
__global__ void sum_squares_list_kernel(double* partial, SquaresList l) {
  __shared__ double sh[256];
  const std::int64_t k = blockIdx.x / kSumSquaresBlocks, j = blockIdx.x % kSumSquaresBlocks;
  sum_squares_block(partial + l.row[k] * kSumSquaresBlocks + j, l.x[k], l.n[k], j,
                    kSumSquaresBlocks, sh);
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
// NOTE [clipping on the device]: norm[0] = sqrt(sum of the buffers' totals, in their order),
// factor[0] = max_norm / (norm + 1e-6): optim::clip_grad_norm's numbers, in its order (the same
// bits as the host's), but nothing goes to the host; the scaling reads the factor there.
template <int = 0>
__global__ void clip_factor_kernel(float* norm, float* factor, const double* totals,
                                   std::int64_t count, float max_norm) {
  double t = 0.0;
  for (std::int64_t k = 0; k < count; ++k) t += totals[k];
  const float n = static_cast<float>(std::sqrt(t));
  norm[0] = n;
  factor[0] = max_norm / (n + 1e-6f);
}
// x *= factor[0] when factor[0] < 1 (torch.nn.utils.clip_grad_norm_'s rule)
template <int = 0>
__global__ void clip_list_kernel(UpdateList a, const float* factor) {
  const float s = factor[0];
  if (!(s < 1.0f)) return;
  int k;
  std::int64_t begin, end;
  list_chunk(a, &k, &begin, &end);
  float* x = a.t[k].p;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) x[i] *= s;
}
template <int = 0>
__global__ void scale_kernel(float* x, std::int64_t n, float s) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] *= s;
}
// x *= s over each slice's buffer p, kListTensors buffers per launch (clipping's factor)
template <int = 0>
__global__ void scale_list_kernel(UpdateList a, float s) {
  int k;
  std::int64_t begin, end;
  list_chunk(a, &k, &begin, &end);
  float* x = a.t[k].p;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) x[i] *= s;
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
  /// adamw_update of every slice: kFlatTensors per launch when the moments lie at one distance
  /// from the parameters (flat state), else kListTensors (NOTE [multi-tensor updates])
  static void adamw_update_many(const UpdateSlice* s, std::size_t count, float lr, float b1,
                                float b2, float eps, float wd, float bc1, float bc2) {
    const float step = lr / bc1, sbc2 = std::sqrt(bc2);
    std::int64_t dm = 0, dv = 0;
    if (flat_distances(s, count, true, &dm, &dv)) {
      for_flat(s, count, [&](const FlatUpdateList& a) {
        REMAT_CUDA_LAUNCH(adamw_flat_kernel<>, static_cast<unsigned>(a.blocks), 256, 0,
                          Context::get().stream(), a, dm, dv, lr, b1, b2, eps, wd, step, sbc2);
      });
      return;
    }
    for_lists(s, count, [&](const UpdateList& a, unsigned blocks) {
      REMAT_CUDA_LAUNCH(adamw_list_kernel<>, blocks, 256, 0, Context::get().stream(), a, lr, b1, b2,
                        eps, wd, step, sbc2);
    });
  }
  /// sgd_update of every slice: kFlatTensors per launch when the momentum buffers lie at one
  /// distance from the parameters (or there are none), else kListTensors
  static void sgd_update_many(const UpdateSlice* s, std::size_t count, float lr, float mu, float wd,
                              bool nesterov) {
    std::int64_t dm = 0, dv = 0;
    if (const UpdateSlice* f = flat_distances(s, count, false, &dm, &dv)) {
      const bool momentum = f->m != nullptr, first = f->first;
      for_flat(s, count, [&](const FlatUpdateList& a) {
        REMAT_CUDA_LAUNCH(sgd_flat_kernel<>, static_cast<unsigned>(a.blocks), 256, 0,
                          Context::get().stream(), a, dm, momentum, lr, mu, wd, nesterov, first);
      });
      return;
    }
    for_lists(s, count, [&](const UpdateList& a, unsigned blocks) {
      REMAT_CUDA_LAUNCH(sgd_list_kernel<>, blocks, 256, 0, Context::get().stream(), a, lr, mu, wd,
                        nesterov);
    });
  }
  /// Whether the flat kernels serve these slices: some are non-empty, none has 2^31 elements or
  /// more, and every one's m (and v, with_v) lies at the same distance in bytes from its p: *dm,
  /// *dv (SGD: all with momentum or none, all first or none). Returns the first non-empty
  /// slice when they do (the others are as it is), else null.
  static const UpdateSlice* flat_distances(const UpdateSlice* s, std::size_t count, bool with_v,
                                           std::int64_t* dm, std::int64_t* dv) {
    const UpdateSlice* f = s;
    while (f < s + count && f->n == 0) ++f;
    if (f == s + count) return nullptr;
    auto distance = [](const float* x, const float* p) {
      return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(x) -
                                       reinterpret_cast<std::uintptr_t>(p));
    };
    *dm = f->m ? distance(f->m, f->p) : 0;
    *dv = with_v ? distance(f->v, f->p) : 0;
    for (std::size_t k = 0; k < count; ++k) {
      const UpdateSlice& x = s[k];
      if (x.n == 0) continue;
      if (x.n >= (std::int64_t{1} << 31) || (x.m == nullptr) != (f->m == nullptr) || x.first != f->first)
        return nullptr;
      if (x.m && distance(x.m, x.p) != *dm) return nullptr;
      if (with_v && distance(x.v, x.p) != *dv) return nullptr;
    }
    return f;
  }
  /// Groups the non-empty slices into FlatUpdateLists of up to kFlatTensors and calls
  /// launch(list) for each.
  template <class Launch>
  static void for_flat(const UpdateSlice* s, std::size_t count, Launch launch) {
    FlatUpdateList a{};
    auto flush = [&] {
      if (a.count == 0) return;
      launch(a);
      a = FlatUpdateList{};
    };
    for (std::size_t k = 0; k < count; ++k) {
      if (s[k].n == 0) continue;
      const auto chunks = static_cast<std::int32_t>((s[k].n + kListChunk - 1) / kListChunk);
      a.t[a.count] = {s[k].g, s[k].p, static_cast<std::int32_t>(s[k].n), a.blocks};
      a.blocks += chunks;
      if (++a.count == kFlatTensors) flush();
    }
    flush();
  }
  /// Groups the non-empty slices into UpdateLists of up to kListTensors and calls
  /// launch(list, blocks) for each.
  template <class Launch>
  static void for_lists(const UpdateSlice* s, std::size_t count, Launch launch) {
    UpdateList a{};
    auto flush = [&] {
      if (a.count == 0) return;
      launch(a, static_cast<unsigned>(a.first_block[a.count]));
      a = UpdateList{};
    };
    for (std::size_t k = 0; k < count; ++k) {
      if (s[k].n == 0) continue;
      a.t[a.count] = s[k];
      a.first_block[a.count + 1] = a.first_block[a.count] + (s[k].n + kListChunk - 1) / kListChunk;
      ++a.count;
      if (a.count == kListTensors) flush();
    }
    flush();
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
  /// up to kSumSquaresChunk buffers (NOTE [host round trips]): each buffer's partial sums into
  /// its own row (kListTensors buffers per launch), the rows summed on the device in the
  /// host's order.
  static void sum_squares_many(double* out, const float* const* xs, const std::int64_t* ns,
                               std::size_t count) {
    if (count == 0) return;
    const Scratch scratch(CudaSizes::sum_squares_many_scratch(count));
    double* partial = scratch.as<double>();
    double* totals = partial + std::min(count, kSumSquaresChunk) * kSumSquaresBlocks;
    for (std::size_t at = 0; at < count; at += kSumSquaresChunk) {
      const std::size_t n = std::min(count - at, kSumSquaresChunk);
      const bool any = squares_round(totals, partial, xs + at, ns + at, n);
      if (any) CudaMemory::copy_to_host(out + at, totals, n * sizeof(double));
      for (std::size_t k = 0; k < n; ++k)  // an empty buffer's row was never written
        if (!any || ns[at + k] == 0) out[at + k] = 0.0;
    }
  }
  /// Clips on the device (NOTE [clipping on the device]): norm[0] = the global norm of the
  /// count buffers (none empty), and each is scaled by max_norm / (norm + 1e-6) when that is
  /// < 1. Launches: ceil(count / 32) partial sums, 1 total per round, 1 factor, ceil(count /
  /// 32) scalings; no copy to the host.
  static void clip_norm_many(float* norm, float* const* xs, const std::int64_t* ns,
                             std::size_t count, float max_norm) {
    const Scratch scratch(CudaSizes::clip_norm_many_scratch(count));
    double* totals = scratch.as<double>();
    double* partial = totals + count;
    float* factor =
        reinterpret_cast<float*>(partial + std::min(count, kSumSquaresChunk) * kSumSquaresBlocks);
    for (std::size_t at = 0; at < count; at += kSumSquaresChunk) {
      const std::size_t n = std::min(count - at, kSumSquaresChunk);
      for (std::size_t k = 0; k < n; ++k) REMAT_ASSERT(ns[at + k] > 0);
      squares_round(totals + at, partial, xs + at, ns + at, n);
    }
    REMAT_CUDA_LAUNCH(clip_factor_kernel<>, 1, 1, 0, Context::get().stream(), norm, factor, totals,
                      static_cast<std::int64_t>(count), max_norm);
    const std::vector<UpdateSlice> slices = slices_of(xs, ns, count);
    for_lists(slices.data(), count, [&](const UpdateList& a, unsigned blocks) {
      REMAT_CUDA_LAUNCH(clip_list_kernel<>, blocks, 256, 0, Context::get().stream(), a, factor);
    });
  }
  static void scale(float* x, std::int64_t n, float s) {
    if (n == 0) return;
    REMAT_CUDA_LAUNCH(scale_kernel<>, grid_for(n), 256, 0, Context::get().stream(), x, n, s);
  }
  /// scale() of every buffer xs[k] (ns[k] floats), kListTensors per launch
  static void scale_many(float* const* xs, const std::int64_t* ns, std::size_t count, float s) {
    const std::vector<UpdateSlice> slices = slices_of(xs, ns, count);
    for_lists(slices.data(), count, [&](const UpdateList& a, unsigned blocks) {
      REMAT_CUDA_LAUNCH(scale_list_kernel<>, blocks, 256, 0, Context::get().stream(), a, s);
    });
  }

 private:
  /// One round of at most kSumSquaresChunk buffers: their sums of squares into totals[0, n)
  /// (kListTensors buffers per launch into partial's rows, then one launch of row totals).
  /// Empty buffers are skipped and their rows left unwritten; false when all were empty.
  static bool squares_round(double* totals, double* partial, const float* const* xs,
                            const std::int64_t* ns, std::size_t n) {
    bool any = false;
    SquaresList l{};
    auto flush = [&] {
      if (l.count == 0) return;
      REMAT_CUDA_LAUNCH(sum_squares_list_kernel<>, static_cast<unsigned>(l.count) * kSumSquaresBlocks,
                        256, 0, Context::get().stream(), partial, l);
      l = SquaresList{};
    };
    for (std::size_t k = 0; k < n; ++k) {
      if (ns[k] == 0) continue;
      l.x[l.count] = xs[k];
      l.n[l.count] = ns[k];
      l.row[l.count] = static_cast<std::int64_t>(k);
      if (++l.count == kListTensors) flush();
      any = true;
    }
    flush();
    if (any)
      REMAT_CUDA_LAUNCH(sum_rows_kernel<>, static_cast<unsigned>((n + 255) / 256), 256, 0,
                        Context::get().stream(), totals, partial, static_cast<std::int64_t>(n));
    return any;
  }
  /// Buffers as update slices (pointer and length) for for_lists.
  static std::vector<UpdateSlice> slices_of(float* const* xs, const std::int64_t* ns,
                                            std::size_t count) {
    std::vector<UpdateSlice> slices(count);
    for (std::size_t k = 0; k < count; ++k) {
      slices[k].p = xs[k];
      slices[k].n = ns[k];
    }
    return slices;
  }
};

}  // namespace cuda
}  // namespace remat
