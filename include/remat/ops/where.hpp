#pragma once
// SPDX-License-Identifier: MIT
// where(mask, a, b): a where the mask is nonzero, else b (a tensor or a constant such as
// -infinity). Masks come from the comparisons of ops/elementwise.hpp (gt, lt, eq, ...).

#include <array>

#include "remat/core/apply.hpp"
#include "remat/ops/elementwise.hpp"

namespace remat {

// y = m != 0 ? a : b.  da += dy [m != 0];  db += dy [m == 0];  the mask has no gradient.
// Keeps only the mask; inputs: (m, a, b), or (m, a) with the constant b.
struct WhereOp {
  static constexpr const char* name = "where";
  template <class B>
  struct Saved {
    Tensor<B> m;
    template <class F> void each(F f) const { f(m); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& m, const Tensor<B>& a, const Tensor<B>& b) {
    check(m, a, &b);
    auto y = detail::empty_like(a);
    B::where_forward(y.template data<float>(), m.template data<float>(), a.template data<float>(),
                     b.template data<float>(), 0.0f, a.numel());
    s.m = m;
    return y;
  }
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& m, const Tensor<B>& a, float b) {
    check<B>(m, a, nullptr);
    auto y = detail::empty_like(a);
    B::where_forward(y.template data<float>(), m.template data<float>(), a.template data<float>(),
                     nullptr, b, a.numel());
    s.m = m;
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>& m, const Tensor<B>&,
                   const Tensor<B>&) { s.m = m; }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>& m, const Tensor<B>&, float) {
    s.m = m;
  }
  template <class B>
  static void check(const Tensor<B>& m, const Tensor<B>& a, const Tensor<B>* b) {
    detail::check_f32("where", "mask", m);
    detail::check_f32("where", "a", a);
    if (b) detail::check_f32("where", "b", *b);
    REMAT_CHECK(m.shape() == a.shape() && (!b || b->shape() == a.shape()), "remat::where: "
                "the mask ", m.shape().str(), ", a ", a.shape().str(), " and b ",
                b ? b->shape().str() : std::string("(a constant)"), " must have one shape here "
                "(remat::where broadcasts them first)");
    REMAT_CHECK(!m.requires_grad() && !m.impl()->segment_grad, "remat::where: the mask of shape ",
                m.shape().str(), " requires a gradient; a mask has none (expected a constant: "
                "a comparison such as gt(x, 0.0f), or remat::detach(mask))");
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {  // NOTE [fresh gradient buffers]
    auto out = [&](std::size_t i) {
      return i < dinp.size() && dinp[i].defined() ? dinp[i].template data<float>() : nullptr;
    };
    B::where_backward(out(1), out(2), s.m.template data<float>(), dout.template data<float>(),
                      dout.numel(), detail::fresh_at(fresh, 1), detail::fresh_at(fresh, 2));
  }
};

/// mask != 0 ? a : b elementwise. The three broadcast against each other (NumPy's rule); the
/// mask must need no gradient (a comparison, or detach()ed). Gradients flow to a and b.
template <class B>
Tensor<B> where(const Tensor<B>& mask, const Tensor<B>& a, const Tensor<B>& b) {
  REMAT_CHECK(mask.defined() && a.defined() && b.defined(), "remat::where: input ",
              !mask.defined() ? 0 : !a.defined() ? 1 : 2,
              " is an undefined tensor (hint: was it assigned the result of an op?)");
  const Shape out = detail::broadcast_shape("where", detail::broadcast_shape("where", mask.shape(),
                                            a.shape()), b.shape());
  auto full = [&](const Tensor<B>& t) { return t.shape() == out ? t : detail::expand_to(t, out); };
  return detail::apply<WhereOp>(std::array<Tensor<B>, 3>{full(mask), full(a), full(b)});
}
/// mask != 0 ? a : b for a constant b (attention's -infinity): no tensor of b is made.
template <class B>
Tensor<B> where(const Tensor<B>& mask, const Tensor<B>& a, float b) {
  REMAT_CHECK(mask.defined() && a.defined(), "remat::where: input ", mask.defined() ? 1 : 0,
              " is an undefined tensor (hint: was it assigned the result of an op?)");
  const Shape out = detail::broadcast_shape("where", mask.shape(), a.shape());
  auto full = [&](const Tensor<B>& t) { return t.shape() == out ? t : detail::expand_to(t, out); };
  return detail::apply<WhereOp>(std::array<Tensor<B>, 2>{full(mask), full(a)}, b);
}

}  // namespace remat
