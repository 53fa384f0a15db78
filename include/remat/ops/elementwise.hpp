#pragma once
// SPDX-License-Identifier: MIT
// Elementwise arithmetic: add, sub, mul, div of two tensors (the smaller shape broadcast over
// the leading dimensions of the larger: a bias (C) against (B, T, C)), scalar forms, operators.

#include <array>

#include "remat/core/apply.hpp"
#include "remat/ops/math.hpp"

namespace remat {
namespace detail {

// How two shapes broadcast: equal, or one is a trailing suffix of the other (leading 1s of the
// smaller ignored). out = the larger, viewed as (outer, inner); inner = numel of the smaller.
struct Broadcast {
  Shape out;
  std::int64_t outer = 1, inner = 1;
  bool a_bcast = false, b_bcast = false;
};
inline Shape strip_leading_ones(const Shape& s) {
  int i = 0;
  while (i < s.rank() - 1 && s[i] == 1) ++i;
  return s.sub(i, s.rank());
}
inline Broadcast broadcast(const char* op, const Shape& a, const Shape& b) {
  Broadcast r;
  if (a == b) {
    r.out = a;
    r.inner = a.numel();
    return r;
  }
  const Shape sa = strip_leading_ones(a), sb = strip_leading_ones(b);
  if (a.numel() >= b.numel() && a.ends_with(sb)) {
    r.out = a;
    r.b_bcast = true;
  } else if (b.numel() > a.numel() && b.ends_with(sa)) {
    r.out = b;
    r.a_bcast = true;
  } else {
    REMAT_CHECK(false, "remat::", op, ": shapes do not broadcast: a is ", a.str(), ", b is ",
                b.str(), " (expected equal shapes, or one equal to the trailing dimensions of the "
                "other, like a bias [C] against [B, T, C])");
  }
  r.inner = r.a_bcast ? a.numel() : b.numel();
  r.outer = r.inner ? r.out.numel() / r.inner : 0;
  return r;
}

}  // namespace detail

// y = a op b with trailing broadcast.
// d/da: add 1, sub 1, mul b, div 1/b;  d/db: add 1, sub -1, mul a, div -a/b^2;
// a broadcast operand's gradient is summed over the leading (broadcast) dimensions.
struct BinaryOp {
  static constexpr const char* name = "binary";
  template <class B>
  struct Saved {
    math::BinaryKind kind{};
    detail::Broadcast bc;
    Tensor<B> a, b;  // only what the gradients need: mul/div keep the other operand
    template <class F> void each(F f) const { f(a); f(b); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& a, const Tensor<B>& b,
                           math::BinaryKind kind, const char* op) {
    detail::check_f32(op, "a", a);
    detail::check_f32(op, "b", b);
    s.kind = kind;
    s.bc = detail::broadcast(op, a.shape(), b.shape());
    const auto& bc = s.bc;
    auto y = detail::make_tensor<B>(&a.tape(), bc.out);
    B::binary_forward(kind, y.template data<float>(), a.template data<float>(),
                      b.template data<float>(), bc.outer, bc.inner, bc.a_bcast, bc.b_bcast);
    keep_operands(s, a, b);
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>& a, const Tensor<B>& b,
                   math::BinaryKind kind, const char* op) {
    s.kind = kind;
    s.bc = detail::broadcast(op, a.shape(), b.shape());
    keep_operands(s, a, b);
  }
  // Keep only what the gradients read: d/da of mul needs b, d/db needs a; div needs b for
  // both and a for d/db. add and sub keep nothing.
  template <class B>
  static void keep_operands(Saved<B>& s, const Tensor<B>& a, const Tensor<B>& b) {
    const auto kind = s.kind;
    const bool ga = a.requires_grad() || a.impl()->segment_grad;
    const bool gb = b.requires_grad() || b.impl()->segment_grad;
    if (kind == math::BinaryKind::mul) {
      if (gb) s.a = a;
      if (ga) s.b = b;
    } else if (kind == math::BinaryKind::div) {
      if (gb) s.a = a;
      s.b = b;
    }
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    const float* g = dout.template data<float>();
    const float* a = s.a.defined() ? s.a.template data<float>() : g;  // g: never read
    const float* b = s.b.defined() ? s.b.template data<float>() : g;
    float* da = dinp[0].defined() ? dinp[0].template data<float>() : nullptr;
    float* db = dinp[1].defined() ? dinp[1].template data<float>() : nullptr;
    B::binary_backward(s.kind, da, db, g, a, b, s.bc.outer, s.bc.inner, s.bc.a_bcast,
                       s.bc.b_bcast);
  }
};

// y = scale x + shift.  dy/dx = scale.
struct AffineOp {
  static constexpr const char* name = "affine";
  template <class B>
  struct Saved {
    float scale = 1.0f;
    template <class F> void each(F) const {}
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, float scale, float shift) {
    detail::check_f32("affine", "x", x);
    auto y = detail::empty_like(x);
    B::affine_forward(y.template data<float>(), x.template data<float>(), x.numel(), scale, shift);
    save(s, y, x, scale, shift);
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>&, float scale, float) {
    s.scale = scale;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    B::affine_backward(dinp[0].template data<float>(), dout.template data<float>(), dout.numel(),
                       s.scale);
  }
};

/// a + b (trailing broadcast)
template <class B> Tensor<B> add(const Tensor<B>& a, const Tensor<B>& b) {
  return detail::apply<BinaryOp>(std::array<Tensor<B>, 2>{a, b}, math::BinaryKind::add, "add");
}
/// a - b (trailing broadcast)
template <class B> Tensor<B> sub(const Tensor<B>& a, const Tensor<B>& b) {
  return detail::apply<BinaryOp>(std::array<Tensor<B>, 2>{a, b}, math::BinaryKind::sub, "sub");
}
/// a * b elementwise (trailing broadcast)
template <class B> Tensor<B> mul(const Tensor<B>& a, const Tensor<B>& b) {
  return detail::apply<BinaryOp>(std::array<Tensor<B>, 2>{a, b}, math::BinaryKind::mul, "mul");
}
/// a / b elementwise (trailing broadcast)
template <class B> Tensor<B> div(const Tensor<B>& a, const Tensor<B>& b) {
  return detail::apply<BinaryOp>(std::array<Tensor<B>, 2>{a, b}, math::BinaryKind::div, "div");
}
/// scale * x + shift, elementwise
template <class B> Tensor<B> affine(const Tensor<B>& x, float scale, float shift) {
  return detail::apply<AffineOp>(std::array<Tensor<B>, 1>{x}, scale, shift);
}

template <class B> Tensor<B> operator+(const Tensor<B>& a, const Tensor<B>& b) { return add(a, b); }
template <class B> Tensor<B> operator-(const Tensor<B>& a, const Tensor<B>& b) { return sub(a, b); }
template <class B> Tensor<B> operator*(const Tensor<B>& a, const Tensor<B>& b) { return mul(a, b); }
template <class B> Tensor<B> operator/(const Tensor<B>& a, const Tensor<B>& b) { return div(a, b); }
template <class B> Tensor<B> operator+(const Tensor<B>& a, float s) { return affine(a, 1.0f, s); }
template <class B> Tensor<B> operator+(float s, const Tensor<B>& a) { return affine(a, 1.0f, s); }
template <class B> Tensor<B> operator-(const Tensor<B>& a, float s) { return affine(a, 1.0f, -s); }
template <class B> Tensor<B> operator-(float s, const Tensor<B>& a) { return affine(a, -1.0f, s); }
template <class B> Tensor<B> operator*(const Tensor<B>& a, float s) { return affine(a, s, 0.0f); }
template <class B> Tensor<B> operator*(float s, const Tensor<B>& a) { return affine(a, s, 0.0f); }
template <class B> Tensor<B> operator/(const Tensor<B>& a, float s) {
  REMAT_CHECK(s != 0.0f, "remat::div: division of a tensor of shape ", a.shape().str(),
              " by the scalar 0");
  return affine(a, 1.0f / s, 0.0f);
}
template <class B> Tensor<B> operator-(const Tensor<B>& a) { return affine(a, -1.0f, 0.0f); }

}  // namespace remat
