#pragma once
// SPDX-License-Identifier: MIT
// What a backend must provide, checked at compile time. A backend is a class of static
// functions over raw pointers and sizes (see cpu.hpp); each requirement below names the
// function so a missing one reads as "backend B is missing gemm(...)", not as a template dump.

#include <cstdint>
#include <type_traits>
#include <utility>

#include "remat/core/math.hpp"

namespace remat {
namespace detail {

template <class B, class = void> struct has_allocate : std::false_type {};
template <class B>
struct has_allocate<B, std::void_t<decltype(B::allocate(std::size_t{})),
                                   decltype(B::deallocate(nullptr, std::size_t{}))>>
    : std::true_type {};

template <class B, class = void> struct has_copies : std::false_type {};
template <class B>
struct has_copies<B, std::void_t<decltype(B::copy_from_host(nullptr, nullptr, std::size_t{})),
                                 decltype(B::copy_to_host(nullptr, nullptr, std::size_t{})),
                                 decltype(B::copy(nullptr, nullptr, std::size_t{})),
                                 decltype(B::fill(std::declval<float*>(), 0, 0.0f)),
                                 decltype(B::iota(std::declval<std::int32_t*>(), 0)),
                                 decltype(B::add_into(std::declval<float*>(),
                                                      std::declval<const float*>(), 0))>>
    : std::true_type {};

template <class B, class = void> struct has_gemm : std::false_type {};
template <class B>
struct has_gemm<B, std::void_t<decltype(B::gemm(false, false, 0, 0, 0, 1.0f,
                                                std::declval<const float*>(), 0,
                                                std::declval<const float*>(), 0, 0.0f,
                                                std::declval<float*>(), 0)),
                               decltype(B::gemm_batched(false, false, 0, 0, 0, 1.0f,
                                                        std::declval<const float*>(), 0, 0,
                                                        std::declval<const float*>(), 0, 0, 0.0f,
                                                        std::declval<float*>(), 0, 0, 0))>>
    : std::true_type {};

template <class B, class = void> struct has_nn_kernels : std::false_type {};
template <class B>
struct has_nn_kernels<
    B, std::void_t<decltype(B::binary_forward(math::BinaryKind::add, std::declval<float*>(),
                                              std::declval<const float*>(),
                                              std::declval<const float*>(), 0, 0, false, false)),
                   decltype(B::gelu_forward(std::declval<float*>(), std::declval<const float*>(), 0)),
                   decltype(B::unary_forward(math::UnaryKind::exp, std::declval<float*>(),
                                             std::declval<const float*>(), 0, 0.0f, 0.0f)),
                   decltype(B::where_forward(std::declval<float*>(), std::declval<const float*>(),
                                             std::declval<const float*>(),
                                             std::declval<const float*>(), 0.0f, 0)),
                   decltype(B::max_forward(std::declval<float*>(), std::declval<const float*>(),
                                           0, 0, 0)),
                   decltype(B::layer_norm_forward(std::declval<float*>(), std::declval<float*>(),
                                                  std::declval<float*>(),
                                                  std::declval<const float*>(),
                                                  std::declval<const float*>(),
                                                  std::declval<const float*>(), 0, 0, 0.0f)),
                   decltype(B::attention_aux_numel(0, 0, 0)),
                   decltype(B::cross_entropy_forward(std::declval<float*>(),
                                                     std::declval<float*>(),
                                                     std::declval<const float*>(),
                                                     std::declval<const std::int32_t*>(), 0, 0,
                                                     0)),
                   decltype(B::sum_squares_many(std::declval<double*>(),
                                                std::declval<const float* const*>(),
                                                std::declval<const std::int64_t*>(),
                                                std::size_t{})),
                   decltype(B::clip_norm_many(std::declval<float*>(), std::declval<float* const*>(),
                                              std::declval<const std::int64_t*>(), std::size_t{},
                                              0.0f))>>
    : std::true_type {};

}  // namespace detail

template <class B>
inline constexpr bool is_backend_v = detail::has_allocate<B>::value &&
                                     detail::has_copies<B>::value && detail::has_gemm<B>::value &&
                                     detail::has_nn_kernels<B>::value;

/// Put `static_assert(check_backend<MyBackend>())` next to a new backend for readable errors.
template <class B>
constexpr bool check_backend() {
  static_assert(detail::has_allocate<B>::value,
                "remat: backend B is missing allocate(size_t) / deallocate(void*, size_t)");
  static_assert(detail::has_copies<B>::value,
                "remat: backend B is missing copy_from_host / copy_to_host / copy / fill / iota / add_into");
  static_assert(detail::has_gemm<B>::value,
                "remat: backend B is missing gemm(bool, bool, M, N, K, alpha, A, lda, B, ldb, "
                "beta, C, ldc) or gemm_batched(...)");
  static_assert(detail::has_nn_kernels<B>::value,
                "remat: backend B is missing a kernel (binary_forward, gelu_forward, "
                "unary_forward, where_forward, max_forward, layer_norm_forward, attention_aux_numel, cross_entropy_forward, sum_squares_many, "
                "clip_norm_many)");
  return true;
}

}  // namespace remat
