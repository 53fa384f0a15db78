#pragma once
// SPDX-License-Identifier: MIT
// Layer norm over the last axis, fused: one pass forward saving the row mean and rstd.

#include <array>

#include "remat/core/apply.hpp"

namespace remat {

// y = (x - mean) rstd w + b over the last axis (C), rstd = 1 / sqrt(var + eps).
// xhat = (x - mean) rstd, g = dy w:
//   dx = rstd (g - mean(g) - xhat mean(g xhat)),  dw = sum_rows dy xhat,  db = sum_rows dy
struct LayerNormOp {
  static constexpr const char* name = "layer_norm";
  template <class B>
  struct Saved {
    std::int64_t rows = 0, C = 0;
    Tensor<B> x, w, mean, rstd;  // mean and rstd: one float per row each
    template <class F> void each(F f) const { f(x); f(w); f(mean); f(rstd); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, const Tensor<B>& w,
                           const Tensor<B>& b, float eps) {
    detail::check_f32(name, "x", x);
    detail::check_nonempty(name, "x", x);
    s.C = x.shape()[-1];
    REMAT_CHECK(w.shape() == Shape{s.C} && b.shape() == Shape{s.C}, "remat::layer_norm: weight is ",
                w.shape().str(), " and bias is ", b.shape().str(), " for x ", x.shape().str(),
                " (expected both [", s.C, "], the last dimension of x)");
    s.rows = x.numel() / s.C;
    auto y = detail::empty_like(x);
    s.mean = detail::make_tensor<B>(&x.tape(), Shape{s.rows});
    s.rstd = detail::make_tensor<B>(&x.tape(), Shape{s.rows});
    B::layer_norm_forward(y.template data<float>(), s.mean.template data<float>(),
                          s.rstd.template data<float>(), x.template data<float>(),
                          w.template data<float>(), b.template data<float>(), s.rows, s.C, eps);
    s.x = x;
    s.w = w;
    return y;
  }
  // each fresh buffer written, not added into (NOTE [fresh gradient buffers])
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {
    auto ptr = [](const Tensor<B>& t) { return t.defined() ? t.template data<float>() : nullptr; };
    B::layer_norm_backward(ptr(dinp[0]), ptr(dinp[1]), ptr(dinp[2]), dout.template data<float>(),
                           s.x.template data<float>(), s.w.template data<float>(),
                           s.mean.template data<float>(), s.rstd.template data<float>(), s.rows,
                           s.C, detail::fresh_at(fresh, 0), detail::fresh_at(fresh, 1),
                           detail::fresh_at(fresh, 2));
  }
};

/// Layer norm over the last axis with weight and bias (C); GPT-2 uses eps = 1e-5.
template <class B>
Tensor<B> layer_norm(const Tensor<B>& x, const Tensor<B>& w, const Tensor<B>& b, float eps = 1e-5f) {
  return detail::apply<LayerNormOp>(std::array<Tensor<B>, 3>{x, w, b}, eps);
}

}  // namespace remat
