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

// Binary maps. maximum / minimum pass the gradient to the operand they chose (a on a tie);
// the comparisons give 1 or 0 and have no gradient (their ops detach them).
enum class BinaryKind : int { add, sub, mul, div, maximum, minimum, gt, ge, lt, le, eq, ne };

REMAT_HOST_DEVICE inline float binary(BinaryKind k, float a, float b) {
  switch (k) {
    case BinaryKind::add: return a + b;
    case BinaryKind::sub: return a - b;
    case BinaryKind::mul: return a * b;
    case BinaryKind::div: return a / b;
    case BinaryKind::maximum: return a >= b ? a : b;
    case BinaryKind::minimum: return a <= b ? a : b;
    case BinaryKind::gt: return a > b ? 1.0f : 0.0f;
    case BinaryKind::ge: return a >= b ? 1.0f : 0.0f;
    case BinaryKind::lt: return a < b ? 1.0f : 0.0f;
    case BinaryKind::le: return a <= b ? 1.0f : 0.0f;
    case BinaryKind::eq: return a == b ? 1.0f : 0.0f;
    case BinaryKind::ne: return a != b ? 1.0f : 0.0f;
  }
  return 0.0f;
}
/// d(a op b)/da
REMAT_HOST_DEVICE inline float binary_grad_a(BinaryKind k, float a, float b) {
  switch (k) {
    case BinaryKind::add: return 1.0f;
    case BinaryKind::sub: return 1.0f;
    case BinaryKind::mul: return b;
    case BinaryKind::div: return 1.0f / b;
    case BinaryKind::maximum: return a >= b ? 1.0f : 0.0f;
    case BinaryKind::minimum: return a <= b ? 1.0f : 0.0f;
    default: return 0.0f;  // comparisons
  }
}
/// d(a op b)/db
REMAT_HOST_DEVICE inline float binary_grad_b(BinaryKind k, float a, float b) {
  switch (k) {
    case BinaryKind::add: return 1.0f;
    case BinaryKind::sub: return -1.0f;
    case BinaryKind::mul: return a;
    case BinaryKind::div: return -a / (b * b);
    case BinaryKind::maximum: return a >= b ? 0.0f : 1.0f;
    case BinaryKind::minimum: return a <= b ? 0.0f : 1.0f;
    default: return 0.0f;  // comparisons
  }
}
// Unary maps y = f(x; p, q), each with its derivative beside it. p and q are the op's scalar
// attributes (pow's exponent; clamp's bounds); the others ignore them.
//   exp      y = e^x                 dy/dx = e^x
//   log      y = ln x                dy/dx = 1 / x
//   sqrt     y = x^(1/2)             dy/dx = 1 / (2 sqrt x)
//   rsqrt    y = x^(-1/2)            dy/dx = -1 / (2 x sqrt x)
//   sigmoid  y = s = 1 / (1 + e^-x)  dy/dx = s (1 - s)
//   silu     y = x s                 dy/dx = s (1 + x (1 - s))
//   abs      y = |x|                 dy/dx = sign x (0 at 0)
//   square   y = x^2                 dy/dx = 2 x
//   pow      y = x^p                 dy/dx = p x^(p-1)  (0 where p = 0)
//   clamp    y = min(max(x, p), q)   dy/dx = [p <= x <= q]
//   sin      y = sin x               dy/dx = cos x
//   cos      y = cos x               dy/dx = -sin x
enum class UnaryKind : int { exp, log, sqrt, rsqrt, sigmoid, silu, abs, square, pow, clamp, sin, cos };

inline const char* unary_name(UnaryKind k) {
  switch (k) {
    case UnaryKind::exp: return "exp";
    case UnaryKind::log: return "log";
    case UnaryKind::sqrt: return "sqrt";
    case UnaryKind::rsqrt: return "rsqrt";
    case UnaryKind::sigmoid: return "sigmoid";
    case UnaryKind::silu: return "silu";
    case UnaryKind::abs: return "abs";
    case UnaryKind::square: return "square";
    case UnaryKind::pow: return "pow";
    case UnaryKind::clamp: return "clamp";
    case UnaryKind::sin: return "sin";
    case UnaryKind::cos: return "cos";
  }
  return "unary";
}

REMAT_HOST_DEVICE inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

REMAT_HOST_DEVICE inline float unary(UnaryKind k, float x, float p, float q) {
  switch (k) {
    case UnaryKind::exp: return std::exp(x);
    case UnaryKind::log: return std::log(x);
    case UnaryKind::sqrt: return std::sqrt(x);
    case UnaryKind::rsqrt: return 1.0f / std::sqrt(x);
    case UnaryKind::sigmoid: return sigmoid(x);
    case UnaryKind::silu: return x * sigmoid(x);
    case UnaryKind::abs: return std::fabs(x);
    case UnaryKind::square: return x * x;
    case UnaryKind::pow: return std::pow(x, p);
    case UnaryKind::clamp: return x < p ? p : (x > q ? q : x);
    case UnaryKind::sin: return std::sin(x);
    case UnaryKind::cos: return std::cos(x);
  }
  return 0.0f;
}
/// dy/dx of unary(k, x, p, q), from x.
REMAT_HOST_DEVICE inline float unary_grad(UnaryKind k, float x, float p, float q) {
  switch (k) {
    case UnaryKind::exp: return std::exp(x);
    case UnaryKind::log: return 1.0f / x;
    case UnaryKind::sqrt: return 0.5f / std::sqrt(x);
    case UnaryKind::rsqrt: return -0.5f / (x * std::sqrt(x));
    case UnaryKind::sigmoid: {
      const float s = sigmoid(x);
      return s * (1.0f - s);
    }
    case UnaryKind::silu: {
      const float s = sigmoid(x);
      return s * (1.0f + x * (1.0f - s));
    }
    case UnaryKind::abs: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
    case UnaryKind::square: return 2.0f * x;
    case UnaryKind::pow: return p == 0.0f ? 0.0f : p * std::pow(x, p - 1.0f);
    case UnaryKind::clamp: return x >= p && x <= q ? 1.0f : 0.0f;
    case UnaryKind::sin: return std::cos(x);
    case UnaryKind::cos: return -std::sin(x);
  }
  return 0.0f;
}

/// SwiGLU's product y = silu(a) b = a sigmoid(a) b, and its gradients for dy = g:
///   da = g b s (1 + a (1 - s)),  db = g a s,  s = sigmoid(a)
REMAT_HOST_DEVICE inline float swiglu(float a, float b) { return a / (1.0f + std::exp(-a)) * b; }
REMAT_HOST_DEVICE inline void swiglu_grad(float a, float b, float g, float& da, float& db) {
  const float s = 1.0f / (1.0f + std::exp(-a));
  da = g * b * s * (1.0f + a * (1.0f - s));
  db = g * a * s;
}

/// Rotary position embedding of one pair (Hugging Face's rotate_half: x0 = x_j, x1 = x_{j+D/2})
/// at angle a = position * frequency, a float product as Hugging Face computes it:
///   y0 = x0 cos a - x1 sin a,   y1 = x1 cos a + x0 sin a
/// The rotation is orthogonal: its gradient is the rotation by -a (`inverse`).
REMAT_HOST_DEVICE inline void rope_pair(float x0, float x1, std::int64_t position, float frequency,
                                        bool inverse, float& y0, float& y1) {
  const float a = static_cast<float>(position) * frequency;
  const float c = std::cos(a), s = inverse ? -std::sin(a) : std::sin(a);
  y0 = x0 * c - x1 * s;
  y1 = x1 * c + x0 * s;
}

}  // namespace math

/// Where attention finds (batch b, head h) in its tensors: q (and dq) in one layout, k and v
/// (and dk, dv) in another, o (and its gradient) in a third; rows of T positions are `*_row`
/// apart. Grouped-query attention: G query heads share each key/value head, query head h reads
/// key/value head h / G (H / G of them; G = 1: one each, multi-head attention).
///   (B, H, T, D) contiguous:   q_batch = H T D, q_head = T D, q_row = D (k, v, o alike)
///   GPT's packed qkv (B, T, 3C) with o (B, T, C): q_batch = 3 T C, q_head = D, q_row = 3C
///     (k and v start C and 2C elements after q, in q's layout)
///   (B, T, heads, D), as projections give them: q_batch = T H D, q_head = D, q_row = H D;
///     k, v: kv_batch = T (H / G) D, kv_head = D, kv_row = (H / G) D
struct AttentionLayout {
  std::int64_t B = 1, H = 1, T = 0, D = 0;
  std::int64_t G = 1;  // query heads per key/value head
  std::int64_t q_batch = 0, q_head = 0, q_row = 0;
  std::int64_t kv_batch = 0, kv_head = 0, kv_row = 0;
  std::int64_t o_batch = 0, o_head = 0, o_row = 0;
  /// key/value heads
  REMAT_HOST_DEVICE std::int64_t KVH() const { return H / G; }
  REMAT_HOST_DEVICE std::int64_t q_offset(std::int64_t bh) const {
    return (bh / H) * q_batch + (bh % H) * q_head;
  }
  /// the key/value head that query head bh (of B H) reads
  REMAT_HOST_DEVICE std::int64_t kv_offset(std::int64_t bh) const {
    return (bh / H) * kv_batch + ((bh % H) / G) * kv_head;
  }
  REMAT_HOST_DEVICE std::int64_t o_offset(std::int64_t bh) const {
    return (bh / H) * o_batch + (bh % H) * o_head;
  }
  /// k and v in q's layout (one key/value head a query head)
  void kv_like_q() {
    G = 1;
    kv_batch = q_batch;
    kv_head = q_head;
    kv_row = q_row;
  }
};

}  // namespace remat
