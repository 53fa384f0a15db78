#pragma once
// SPDX-License-Identifier: MIT
// An op's kernels as values: each kernel a fused op asks of a backend is a struct of its
// arguments that also says what it asks of a device. Backends implement run(const K&); the
// shape-only twin (backend/meta.hpp) and check_backend() follow from the structs and their lists.
//
// NOTE [op kernels]
// A fused op declares its kernels beside its forward and backward (ops/layer_norm.hpp):
//   struct Forward {                                  // y (rows, C) = ...
//     static constexpr const char* name = "layer_norm_forward";
//     float* y; float* mean; ...; const float* x; ...; std::int64_t rows, C; float eps;
//     void work(Work& w) const { w.add(WorkKind::norm, 8.0 * rows * C, 4.0 * (...)); }
//     RowSums row_sums() const { return {2, C, rows}; }  // optional: C-wide sums over rows
//   };
// and runs it with run_kernel<B>(Forward{y, mean, ..., eps}). A backend implements
//   static void run(const LayerNormOp::Forward& k);             // the kernel
//   static std::size_t scratch(const LayerNormOp::Backward& k); // only if it takes scratch
// and sizes its scratch with that same function. The shape-only twin Meta<B> then needs no
// code of its own: its run(k) counts k.work() and holds a scratch of B::scratch(k) bytes, so
// the estimator keeps B's ledger to the byte. On CUDA one rule sizes the scratch of every
// kernel that declares row_sums() (the partial sums of a deterministic column sum:
// CudaSizes::scratch in backend/cuda/sizes.hpp), so such a kernel needs no formula there.
// Each op family lists its kernels (NormKernels in ops/layer_norm.hpp), ops/kernels.hpp joins
// the lists, and check_backend<B>() (backend/backend.hpp) asks B for each.
// A new fused op costs four places: the op with its kernels in its family's header (ops/), its
// CPU kernel (backend/cpu/nn.hpp), its CUDA kernel (backend/cuda/nn.cuh) and one line in the
// op cases (tests/support/op_cases.hpp), which checks it against finite differences, the
// estimate against the ledger, checkpointed against plain, and CUDA against the CPU. A new
// family header adds two lines more: its kernel list in ops/kernels.hpp and its include in
// remat/remat.hpp.
// Kernel arguments go outputs, inputs, sizes, flags; a null output is a gradient not asked for.
//
// The backend primitives (memory, copies, GEMMs, elementwise maps, reductions, optimizer
// updates) are the fixed interface below every op; they are listed in backend/backend.hpp.

#include <cstdint>
#include <type_traits>
#include <utility>

#include "remat/core/work.hpp"

namespace remat {

/// A kernel's sums over `rows` rows of C-wide vectors (a norm's dw and db): `count` vectors
/// of `width` floats. A backend that sums rows in parts for determinism keeps partial rows.
struct RowSums {
  std::int64_t count = 0, width = 0, rows = 0;
};

/// The kernels of an op family, and of the library (ops/kernels.hpp).
template <class... K>
struct KernelList {};

namespace detail {
template <class... L>
struct join_kernels;
template <>
struct join_kernels<> {
  using type = KernelList<>;
};
template <class... A>
struct join_kernels<KernelList<A...>> {
  using type = KernelList<A...>;
};
template <class... A, class... C, class... L>
struct join_kernels<KernelList<A...>, KernelList<C...>, L...> {
  using type = typename join_kernels<KernelList<A..., C...>, L...>::type;
};

template <class B, class K, class = void>
struct backend_runs : std::false_type {};
template <class B, class K>
struct backend_runs<B, K, std::void_t<decltype(B::run(std::declval<const K&>()))>>
    : std::true_type {};

template <class B, class K, class = void>
struct backend_has_scratch : std::false_type {};
template <class B, class K>
struct backend_has_scratch<B, K, std::void_t<decltype(B::scratch(std::declval<const K&>()))>>
    : std::true_type {};

template <class K, class = void>
struct has_row_sums : std::false_type {};
template <class K>
struct has_row_sums<K, std::void_t<decltype(std::declval<const K&>().row_sums())>>
    : std::true_type {};
}  // namespace detail

/// The kernel lists joined into one.
template <class... L>
using JoinKernels = typename detail::join_kernels<L...>::type;

/// Whether backend B runs kernel K.
template <class B, class K>
inline constexpr bool runs_kernel_v = detail::backend_runs<B, K>::value;

/// Runs op kernel K on backend B (NOTE [op kernels]).
template <class B, class K>
void run_kernel(const K& k) {
  static_assert(runs_kernel_v<B, K>,
                "remat: the backend has no run(const K&) for this op kernel (B and K are named in "
                "the instantiation below); add it beside the backend's other op kernels (NOTE "
                "[op kernels] in core/kernel.hpp)");
  B::run(k);
}

}  // namespace remat
