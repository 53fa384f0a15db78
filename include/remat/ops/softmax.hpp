#pragma once
// SPDX-License-Identifier: MIT
// Softmax over the last axis.

#include <array>

#include "remat/core/apply.hpp"

namespace remat {

// y = exp(x - max) / sum exp(x - max) over the last axis.
// dx = y (dy - sum(dy y)), so the output is what backward keeps.
struct SoftmaxOp {
  static constexpr const char* name = "softmax";
  template <class B>
  struct Saved {
    std::int64_t rows = 0, C = 0;
    Tensor<B> y;
    template <class F> void each(F f) const { f(y); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x) {
    detail::check_f32(name, "x", x);
    detail::check_nonempty(name, "x", x);
    auto y = detail::empty_like(x);
    B::softmax_forward(y.template data<float>(), x.template data<float>(),
                       x.numel() / x.shape()[-1], x.shape()[-1]);
    save(s, y, x);
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>& y, const Tensor<B>&) {
    s.C = y.shape()[-1];
    s.rows = y.numel() / s.C;
    s.y = y;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    B::softmax_backward(dinp[0].template data<float>(), s.y.template data<float>(),
                        dout.template data<float>(), s.rows, s.C);
  }
};

/// Softmax over the last axis.
template <class B> Tensor<B> softmax(const Tensor<B>& x) {
  return detail::apply<SoftmaxOp>(std::array<Tensor<B>, 1>{x});
}

}  // namespace remat
