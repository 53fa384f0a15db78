#pragma once
// SPDX-License-Identifier: MIT
// Per-element math shared by every backend (__host__ __device__): the formulas live here once,
// the CPU tests check them, and a GPU kernel only adds indexing and launch logic. It sits in
// core/, below the backends, so that no backend includes anything from ops/.

#include <cmath>
#include <cstdint>

#include "remat/config.hpp"

namespace remat {
namespace math {

inline constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluC = 0.044715f;

/// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(k (x + c x^3))).
REMAT_HOST_DEVICE inline float gelu(float x) {
  return 0.5f * x * (1.0f + std::tanh(kGeluK * (x + kGeluC * x * x * x)));
}
/// d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2),  t = tanh(k (x + c x^3)).
REMAT_HOST_DEVICE inline float gelu_grad(float x) {
  const float t = std::tanh(kGeluK * (x + kGeluC * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluC * x * x);
}

enum class BinaryKind : int { add, sub, mul, div };

REMAT_HOST_DEVICE inline float binary(BinaryKind k, float a, float b) {
  switch (k) {
    case BinaryKind::add: return a + b;
    case BinaryKind::sub: return a - b;
    case BinaryKind::mul: return a * b;
    case BinaryKind::div: return a / b;
  }
  return 0.0f;
}
/// d(a op b)/da
REMAT_HOST_DEVICE inline float binary_grad_a(BinaryKind k, float, float b) {
  switch (k) {
    case BinaryKind::add: return 1.0f;
    case BinaryKind::sub: return 1.0f;
    case BinaryKind::mul: return b;
    case BinaryKind::div: return 1.0f / b;
  }
  return 0.0f;
}
/// d(a op b)/db
REMAT_HOST_DEVICE inline float binary_grad_b(BinaryKind k, float a, float b) {
  switch (k) {
    case BinaryKind::add: return 1.0f;
    case BinaryKind::sub: return -1.0f;
    case BinaryKind::mul: return a;
    case BinaryKind::div: return -a / (b * b);
  }
  return 0.0f;
}

}  // namespace math

/// Where attention finds (batch b, head h) in its tensors: q, k and v (and their gradients)
/// share one layout, o (and its gradient) another; rows of T positions are `*_row` apart.
///   (B, H, T, D) contiguous:   q_batch = H T D, q_head = T D, q_row = D
///   GPT's packed qkv (B, T, 3C) with o (B, T, C): q_batch = 3 T C, q_head = D, q_row = 3C
///     (k and v start C and 2C elements after q)
struct AttentionLayout {
  std::int64_t B = 1, H = 1, T = 0, D = 0;
  std::int64_t q_batch = 0, q_head = 0, q_row = 0;
  std::int64_t o_batch = 0, o_head = 0, o_row = 0;
  REMAT_HOST_DEVICE std::int64_t q_offset(std::int64_t bh) const {
    return (bh / H) * q_batch + (bh % H) * q_head;
  }
  REMAT_HOST_DEVICE std::int64_t o_offset(std::int64_t bh) const {
    return (bh / H) * o_batch + (bh % H) * o_head;
  }
};

}  // namespace remat
