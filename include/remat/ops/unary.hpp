#pragma once
// SPDX-License-Identifier: MIT
// Elementwise unary maps: exp, log, sqrt, rsqrt, sigmoid, SiLU, abs, square, pow by a scalar,
// clamp, sin, cos. One op and one kernel pair serve them all; each map's formula and
// derivative are written once, side by side, in core/math.hpp (math::unary, math::unary_grad),
// and both backends run them. A new map costs a line in each switch there and a function here.

#include <array>

#include "remat/core/apply.hpp"
#include "remat/core/math.hpp"
#include "remat/core/recipe.hpp"

namespace remat {

// y = f(x; p, q).  dx += dy f'(x; p, q): the table in core/math.hpp (NOTE above UnaryKind).
// Keeps x: every derivative is written in x (exp's and sigmoid's would read y just as well,
// at the same bytes).
struct UnaryOp {
  static constexpr const char* name = "unary";
  template <class B>
  struct Saved {
    math::UnaryKind kind{};
    float p = 0.0f, q = 0.0f;
    SavedOperand<B> x;  // or its recipe (NOTE [saved as a recipe], core/recipe.hpp)
    std::shared_ptr<const Recipe<B>> made;  // the output's recipe, owned here when recorded
    template <class F> void each(F f) const { x.each(f); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, math::UnaryKind kind, float p,
                           float q) {
    detail::check_f32(math::unary_name(kind), "x", x);
    auto y = detail::empty_like(x);
    B::unary_forward(kind, y.template data<float>(), x.template data<float>(), x.numel(), p, q);
    save(s, y, x, kind, p, q);
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>& x, math::UnaryKind kind,
                   float p, float q) {
    s.kind = kind;
    s.p = p;
    s.q = q;
    s.x.keep(x);
  }
  // The output remade from the state, which always keeps x: y = f(x; p, q) again.
  template <class B>
  static std::shared_ptr<const Recipe<B>> recipe(const Saved<B>& s, const Tensor<B>& out) {
    return make_recipe<B>({s.x}, out,
                          [kind = s.kind, p = s.p, q = s.q](const std::vector<Tensor<B>>& in, const Tensor<B>& y) {
                            B::unary_forward(kind, y.template data<float>(),
                                             in[0].template data<float>(), y.numel(), p, q);
                          });
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {  // NOTE [fresh gradient buffers]
    const Tensor<B> x = s.x.get();  // remade here when kept as a recipe
    B::unary_backward(s.kind, dinp[0].template data<float>(), x.template data<float>(),
                      dout.template data<float>(), dout.numel(), s.p, s.q,
                      detail::fresh_at(fresh, 0));
  }
};

namespace detail {
template <class B>
Tensor<B> unary(const Tensor<B>& x, math::UnaryKind kind, float p = 0.0f, float q = 0.0f) {
  return apply<UnaryOp>(std::array<Tensor<B>, 1>{x}, kind, p, q);
}
}  // namespace detail

/// e^x elementwise.
template <class B> Tensor<B> exp(const Tensor<B>& x) { return detail::unary(x, math::UnaryKind::exp); }
/// Natural logarithm elementwise (NaN below 0, -inf at 0, as std::log).
template <class B> Tensor<B> log(const Tensor<B>& x) { return detail::unary(x, math::UnaryKind::log); }
/// Square root elementwise.
template <class B> Tensor<B> sqrt(const Tensor<B>& x) { return detail::unary(x, math::UnaryKind::sqrt); }
/// 1 / sqrt(x) elementwise (RMSNorm's scale).
template <class B> Tensor<B> rsqrt(const Tensor<B>& x) { return detail::unary(x, math::UnaryKind::rsqrt); }
/// 1 / (1 + e^-x) elementwise.
template <class B> Tensor<B> sigmoid(const Tensor<B>& x) { return detail::unary(x, math::UnaryKind::sigmoid); }
/// x sigmoid(x) elementwise (SiLU, also called swish; SwiGLU's gate).
template <class B> Tensor<B> silu(const Tensor<B>& x) { return detail::unary(x, math::UnaryKind::silu); }
/// |x| elementwise; its gradient at 0 is 0.
template <class B> Tensor<B> abs(const Tensor<B>& x) { return detail::unary(x, math::UnaryKind::abs); }
/// x^2 elementwise.
template <class B> Tensor<B> square(const Tensor<B>& x) { return detail::unary(x, math::UnaryKind::square); }
/// x^p elementwise, for a scalar exponent p (as std::pow: NaN for a negative x and a
/// non-integer p).
template <class B> Tensor<B> pow(const Tensor<B>& x, float p) {
  return detail::unary(x, math::UnaryKind::pow, p);
}
/// min(max(x, lo), hi) elementwise; the gradient passes where lo <= x <= hi.
template <class B> Tensor<B> clamp(const Tensor<B>& x, float lo, float hi) {
  REMAT_CHECK(lo <= hi, "remat::clamp: the lower bound ", lo, " is above the upper bound ", hi,
              " (for x of shape ", x.shape().str(), "); expected lo <= hi");
  return detail::unary(x, math::UnaryKind::clamp, lo, hi);
}
/// sin x elementwise.
template <class B> Tensor<B> sin(const Tensor<B>& x) { return detail::unary(x, math::UnaryKind::sin); }
/// cos x elementwise.
template <class B> Tensor<B> cos(const Tensor<B>& x) { return detail::unary(x, math::UnaryKind::cos); }

}  // namespace remat
