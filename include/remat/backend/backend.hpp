#pragma once
// SPDX-License-Identifier: MIT
// What a backend must provide, checked at compile time: the primitives listed below (memory,
// copies, GEMMs, elementwise maps, reductions, the kernels of the ops not yet declared as
// structs, optimizer updates) and run(const K&) for every op kernel K of ops/kernels.hpp (NOTE
// [op kernels] in core/kernel.hpp). This file is the one list; check_backend<B>() walks all of
// it, so a missing function reads as "backend B is missing gemm(...)", not as a template dump.

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "remat/backend/update_list.hpp"
#include "remat/core/kernel.hpp"
#include "remat/core/math.hpp"
#include "remat/core/shape.hpp"
#include "remat/ops/kernels.hpp"

namespace remat {
namespace detail {
namespace sig {  // argument stand-ins, only named in unevaluated expressions
float* pf();
const float* cf();
double* pd();
std::int32_t* pi();
const std::int32_t* ci();
std::int32_t& ri();
void* pv();
const void* cv();
std::int64_t n();
const std::int64_t* cn();
std::size_t z();
float f();
bool b();
std::uint64_t u();
const float* const* cfs();
float* const* pfs();
const UpdateSlice* us();
const Shape& shape();
const int* perm();
const AttentionLayout& layout();
math::BinaryKind bk();
math::UnaryKind uk();
}  // namespace sig

// The primitives: X(function, (its arguments)). In the arguments pf/cf are float* / const
// float*, n an int64, z a size_t, f a float, b a bool (the stand-ins above).
#define REMAT_BACKEND_PRIMITIVES(X)                                                              \
  /* memory and copies */                                                                       \
  X(allocate, (z()))                                                                            \
  X(deallocate, (pv(), z()))                                                                    \
  X(copy_from_host, (pv(), cv(), z()))                                                          \
  X(copy_to_host, (pv(), cv(), z()))                                                            \
  X(copy, (pv(), cv(), z()))                                                                    \
  X(fill, (pf(), n(), f()))                                                                     \
  X(iota, (pi(), n()))                                                                          \
  X(synchronize, ())                                                                            \
  X(describe, ())                                                                               \
  /* GEMMs */                                                                                   \
  X(gemm, (b(), b(), n(), n(), n(), f(), cf(), n(), cf(), n(), f(), pf(), n()))                 \
  X(gemm_batched,                                                                               \
    (b(), b(), n(), n(), n(), f(), cf(), n(), n(), cf(), n(), n(), f(), pf(), n(), n(), n()))   \
  X(linear_forward, (pf(), cf(), cf(), cf(), cf(), n(), n(), n()))                              \
  X(linear_backward_weight, (pf(), pf(), cf(), cf(), n(), n(), n(), f()))                       \
  X(linear_gelu_forward, (pf(), pf(), cf(), cf(), cf(), n(), n(), n()))                         \
  X(linear_dgelu_backward, (pf(), pf(), cf(), cf(), cf(), n(), n(), n()))                       \
  /* elementwise */                                                                             \
  X(add_into, (pf(), cf(), n()))                                                                \
  X(broadcast_rows, (pf(), cf(), n(), n()))                                                     \
  X(binary_forward, (bk(), pf(), cf(), cf(), n(), n(), b(), b()))                               \
  X(binary_backward, (bk(), pf(), pf(), cf(), cf(), cf(), n(), n(), b(), b(), b(), b()))        \
  X(affine_forward, (pf(), cf(), n(), f(), f()))                                                \
  X(affine_backward, (pf(), cf(), n(), f()))                                                    \
  X(gelu_forward, (pf(), cf(), n()))                                                            \
  X(gelu_backward, (pf(), cf(), cf(), n(), b()))                                                \
  X(relu_forward, (pf(), cf(), n()))                                                            \
  X(relu_backward, (pf(), cf(), cf(), n()))                                                     \
  X(tanh_forward, (pf(), cf(), n()))                                                            \
  X(tanh_backward, (pf(), cf(), cf(), n()))                                                     \
  X(unary_forward, (uk(), pf(), cf(), n(), f(), f()))                                           \
  X(unary_backward, (uk(), pf(), cf(), cf(), n(), f(), f(), b()))                               \
  X(where_forward, (pf(), cf(), cf(), cf(), f(), n()))                                          \
  X(where_backward, (pf(), pf(), cf(), cf(), n(), b(), b()))                                    \
  X(dropout_forward, (pf(), cf(), n(), f(), u(), u()))                                          \
  X(dropout_backward, (pf(), cf(), n(), f(), u(), u(), b()))                                    \
  /* reductions and layout */                                                                   \
  X(reduce_forward, (pf(), cf(), n(), n(), n(), f()))                                           \
  X(reduce_backward, (pf(), cf(), n(), n(), n(), f()))                                          \
  X(max_forward, (pf(), cf(), n(), n(), n()))                                                   \
  X(max_backward, (pf(), cf(), cf(), cf(), n(), n(), n()))                                      \
  X(copy_block, (pf(), n(), n(), cf(), n(), n(), n(), n(), n(), b()))                           \
  X(permute, (pf(), cf(), shape(), perm(), b()))                                                \
  X(minmax_i32, (ci(), n(), ri(), ri()))                                                        \
  /* row kernels of neural nets */                                                              \
  X(softmax_forward, (pf(), cf(), n(), n()))                                                    \
  X(softmax_backward, (pf(), cf(), cf(), n(), n()))                                             \
  X(attention_needs_output, (n()))                                                              \
  X(attention_aux_numel, (n(), n(), n()))                                                       \
  X(attention_forward, (layout(), pf(), pf(), cf(), cf(), cf(), f(), b()))                      \
  X(attention_backward,                                                                         \
    (layout(), pf(), pf(), pf(), cf(), cf(), cf(), cf(), cf(), cf(), f(), b(), b(), b(), b()))  \
  X(embedding_forward, (pf(), cf(), ci(), n(), n()))                                            \
  X(embedding_backward, (pf(), cf(), ci(), n(), n(), n(), b()))                                 \
  /* optimizers and clipping */                                                                 \
  X(adamw_update, (pf(), cf(), pf(), pf(), n(), f(), f(), f(), f(), f(), f(), f()))             \
  X(sgd_update, (pf(), cf(), pf(), n(), f(), f(), f(), b(), b()))                               \
  X(adamw_update_many, (us(), z(), f(), f(), f(), f(), f(), f(), f()))                          \
  X(sgd_update_many, (us(), z(), f(), f(), f(), b()))                                           \
  X(sum_squares, (cf(), n()))                                                                   \
  X(sum_squares_many, (pd(), cfs(), cn(), z()))                                                 \
  X(scale, (pf(), n(), f()))                                                                    \
  X(scale_many, (pfs(), cn(), z(), f()))                                                        \
  X(clip_norm_many, (pf(), pfs(), cn(), z(), f()))

#define REMAT_DETAIL_HAS_PRIMITIVE(fn, args)                                                  \
  template <class B, class = void>                                                           \
  struct has_primitive_##fn : std::false_type {};                                            \
  template <class B>                                                                         \
  struct has_primitive_##fn<B, std::void_t<decltype(B::fn args)>> : std::true_type {};
namespace has {
using namespace sig;
REMAT_BACKEND_PRIMITIVES(REMAT_DETAIL_HAS_PRIMITIVE)
}  // namespace has
#undef REMAT_DETAIL_HAS_PRIMITIVE

template <class B>
constexpr bool has_primitives() {
#define REMAT_DETAIL_AND(fn, args) &&has::has_primitive_##fn<B>::value
  return true REMAT_BACKEND_PRIMITIVES(REMAT_DETAIL_AND);
#undef REMAT_DETAIL_AND
}
template <class B, class... K>
constexpr bool runs_kernels(KernelList<K...>) {
  return (true && ... && runs_kernel_v<B, K>);
}

template <class B, class K>
constexpr bool check_kernel() {
  static_assert(runs_kernel_v<B, K>,
                "remat: backend B is missing run(const K&) for an op kernel of ops/kernels.hpp "
                "(B and K are named in the instantiation below; NOTE [op kernels] in "
                "core/kernel.hpp)");
  return true;
}
template <class B, class... K>
constexpr bool check_kernels(KernelList<K...>) {
  return (true && ... && check_kernel<B, K>());
}

}  // namespace detail

/// Whether B provides every primitive and runs every op kernel.
template <class B>
inline constexpr bool is_backend_v =
    detail::has_primitives<B>() && detail::runs_kernels<B>(OpKernels{});

/// Put `static_assert(check_backend<MyBackend>())` next to a new backend: one readable error
/// for each function it lacks.
template <class B>
constexpr bool check_backend() {
#define REMAT_DETAIL_CHECK_PRIMITIVE(fn, args)                                              \
  static_assert(detail::has::has_primitive_##fn<B>::value,                                 \
                "remat: backend B is missing " #fn #args " (backend/backend.hpp lists " \
                "what a backend provides; pf/cf: float* / const float*, n: int64, z: size_t, "  \
                "f: float, b: bool)");
  REMAT_BACKEND_PRIMITIVES(REMAT_DETAIL_CHECK_PRIMITIVE)
#undef REMAT_DETAIL_CHECK_PRIMITIVE
  return detail::check_kernels<B>(OpKernels{});
}

}  // namespace remat
