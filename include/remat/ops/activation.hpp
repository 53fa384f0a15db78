#pragma once
// SPDX-License-Identifier: MIT
// Pointwise activations: GELU (tanh approximation, as GPT-2), ReLU, tanh.

#include <array>

#include "remat/core/apply.hpp"
#include "remat/ops/cast.hpp"

namespace remat {

// GELU, tanh approximation: y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi).
// dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2),  t = tanh(k (x + 0.044715 x^3))
struct GeluOp {
  static constexpr const char* name = "gelu";
  template <class B>
  struct Saved {
    Tensor<B> x;  // backward needs the input only
    template <class F> void each(F f) const { f(x); }
  };
  // x f32 or bf16; y of x's type (NOTE [bf16 by widening])
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x) {
    detail::check_float(name, "x", x);
    const auto xf = detail::widened(x);
    auto y = detail::empty_like(xf);
    B::gelu_forward(y.template data<float>(), xf.template data<float>(), x.numel());
    save(s, y, x);
    return detail::narrowed(y, x.dtype());
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>& x) { s.x = x; }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {  // NOTE [fresh gradient buffers]
    const auto xf = detail::widened(s.x), g = detail::widened(dout);
    detail::F32Grad<B> dx(dinp[0], detail::fresh_at(fresh, 0));
    B::gelu_backward(dx.data(), xf.template data<float>(), g.template data<float>(), dout.numel(),
                     dx.set());
    dx.finish();
  }
};

// y = max(x, 0).  dy/dx = [x > 0]
struct ReluOp {
  static constexpr const char* name = "relu";
  template <class B>
  struct Saved {
    Tensor<B> x;
    template <class F> void each(F f) const { f(x); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x) {
    detail::check_f32(name, "x", x);
    auto y = detail::empty_like(x);
    B::relu_forward(y.template data<float>(), x.template data<float>(), x.numel());
    save(s, y, x);
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>& x) { s.x = x; }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    B::relu_backward(dinp[0].template data<float>(), s.x.template data<float>(),
                     dout.template data<float>(), dout.numel());
  }
};

// y = tanh(x).  dy/dx = 1 - y^2, so the output is what backward keeps.
struct TanhOp {
  static constexpr const char* name = "tanh";
  template <class B>
  struct Saved {
    Tensor<B> y;
    template <class F> void each(F f) const { f(y); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x) {
    detail::check_f32(name, "x", x);
    auto y = detail::empty_like(x);
    B::tanh_forward(y.template data<float>(), x.template data<float>(), x.numel());
    save(s, y, x);
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>& y, const Tensor<B>&) { s.y = y; }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    B::tanh_backward(dinp[0].template data<float>(), s.y.template data<float>(),
                     dout.template data<float>(), dout.numel());
  }
};

/// GELU (tanh approximation) elementwise; shape is preserved.
template <class B> Tensor<B> gelu(const Tensor<B>& x) {
  return detail::apply<GeluOp>(std::array<Tensor<B>, 1>{x});
}
/// max(x, 0) elementwise.
template <class B> Tensor<B> relu(const Tensor<B>& x) {
  return detail::apply<ReluOp>(std::array<Tensor<B>, 1>{x});
}
/// tanh elementwise.
template <class B> Tensor<B> tanh(const Tensor<B>& x) {
  return detail::apply<TanhOp>(std::array<Tensor<B>, 1>{x});
}

}  // namespace remat
