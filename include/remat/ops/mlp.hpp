#pragma once
// SPDX-License-Identifier: MIT
// A transformer's MLP as one op: GELU(x W1 + b1) W2 + b2, plus an optional residual. The bias
// and the GELU's gradient ride in the GEMMs (B::linear_gelu_forward, B::linear_dgelu_backward;
// cuBLASLt epilogues on the GPU), so GELU's input gradient never exists; the forward's GELU is
// core/math.hpp's on every backend, so a GELU rebuilt in backward has its bits.

#include <array>

#include "remat/core/apply.hpp"
#include "remat/core/math.hpp"

namespace remat {

// pre (R, H) = x (R, C) W1 (C, H) + b1;  act = GELU(pre);  y (R, O) = act W2 (H, O) + b2 [+ r]
//   dr = dy (passed through);  dW2 = act^T dy;  db2 = sum_rows dy
//   dpre = (dy W2^T) GELU'(pre)  (one GEMM with the GELU gradient in it, and db1 = sum_rows dpre)
//   dW1 = x^T dpre;  dx = dpre W1^T
// Saves x, pre and act: what linear, gelu, linear would save (the same bytes); x only when W1
// wants a gradient, act only when W2 does. A checkpoint policy that keeps this op keeps it
// without act (slim), rebuilt in backward from pre.
struct MlpOp {
  static constexpr const char* name = "mlp";
  template <class B>
  struct Saved {
    std::int64_t rows = 0, in = 0, hidden = 0, out = 0;
    bool residual = false;
    Tensor<B> x, w1, w2, pre, act;
    template <class F> void each(F f) const { f(x); f(w1); f(w2); f(pre); f(act); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, const Tensor<B>& w1,
                           const Tensor<B>& b1, const Tensor<B>& w2, const Tensor<B>& b2) {
    return run<B>(s, x, w1, b1, w2, b2, nullptr);
  }
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, const Tensor<B>& w1,
                           const Tensor<B>& b1, const Tensor<B>& w2, const Tensor<B>& b2,
                           const Tensor<B>& r) {
    return run<B>(s, x, w1, b1, w2, b2, &r);
  }
  template <class B>
  static Tensor<B> run(Saved<B>& s, const Tensor<B>& x, const Tensor<B>& w1, const Tensor<B>& b1,
                       const Tensor<B>& w2, const Tensor<B>& b2, const Tensor<B>* r) {
    detail::check_f32(name, "x", x);
    detail::check_f32(name, "w1", w1);
    detail::check_f32(name, "b1", b1);
    detail::check_f32(name, "w2", w2);
    detail::check_f32(name, "b2", b2);
    REMAT_CHECK(x.rank() >= 1 && w1.rank() == 2 && w2.rank() == 2 && x.shape()[-1] == w1.size(0) &&
                    w1.size(1) == w2.size(0) && b1.shape() == Shape{w1.size(1)} &&
                    b2.shape() == Shape{w2.size(1)},
                "remat::mlp: x is ", x.shape().str(), ", w1 ", w1.shape().str(), ", b1 ",
                b1.shape().str(), ", w2 ", w2.shape().str(), ", b2 ", b2.shape().str(),
                " (expected w1 [C, H] with C the last dimension of x, b1 [H], w2 [H, O], b2 [O])");
    s.in = w1.size(0);
    s.hidden = w1.size(1);
    s.out = w2.size(1);
    s.rows = x.numel() / (s.in ? s.in : 1);
    const Shape out_shape = x.shape().with(-1, s.out);
    if (r) {
      detail::check_f32(name, "residual", *r);
      REMAT_CHECK(r->shape() == out_shape, "remat::mlp: residual is ", r->shape().str(),
                  " for x ", x.shape().str(), " (expected ", out_shape.str(),
                  ", the output's shape)");
    }
    s.pre = detail::make_tensor<B>(&x.tape(), x.shape().with(-1, s.hidden));
    s.act = detail::make_tensor<B>(&x.tape(), x.shape().with(-1, s.hidden));
    B::linear_gelu_forward(s.act.template data<float>(), s.pre.template data<float>(),
                           x.template data<float>(), w1.template data<float>(),
                           b1.template data<float>(), s.rows, s.in, s.hidden);
    auto y = detail::make_tensor<B>(&x.tape(), out_shape);
    B::linear_forward(y.template data<float>(), s.act.template data<float>(),
                      w2.template data<float>(), b2.template data<float>(),
                      r ? r->template data<float>() : nullptr, s.rows, s.hidden, s.out);
    s.residual = r != nullptr;
    // keep only what the gradients read: x for dW1, act for dW2 (pre and the weights always:
    // every gradient below the GELU goes through them)
    if (!(w1.requires_grad() || w1.impl()->segment_grad)) s.x = Tensor<B>();
    else s.x = x;
    if (!(w2.requires_grad() || w2.impl()->segment_grad)) s.act = Tensor<B>();
    s.w1 = w1;
    s.w2 = w2;
    return y;
  }
  template <class B>
  static int pass_through(const Saved<B>& s) {
    return s.residual ? 5 : -1;
  }
  // Kept by a checkpoint policy (save_linear: the linear layers' outputs), the state drops act:
  // backward rebuilds it from pre (one GELU), as a replay of linear, gelu, linear would.
  template <class B>
  static void slim(Saved<B>& s) {
    s.act = Tensor<B>();
  }
  // Each fresh buffer is written (NOTE [fresh gradient buffers]); dpre is this op's scratch.
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {
    const float* dy = dout.template data<float>();
    auto ptr = [&](std::size_t i) {
      return i < dinp.size() && dinp[i].defined() ? dinp[i].template data<float>() : nullptr;
    };
    auto beta = [&](std::size_t i) { return detail::fresh_at(fresh, i) ? 0.0f : 1.0f; };
    detail::gradient_is_dout(dinp, 5, dout, fresh);  // dr = dy
    // the second layer: dW2 and db2 in one GEMM where db2 is fresh; act rebuilt if slimmed
    Tensor<B> act = s.act;
    if (ptr(3) && !act.defined()) {
      act = detail::make_tensor<B>(&dout.tape(), s.pre.shape());
      B::gelu_forward(act.template data<float>(), s.pre.template data<float>(), s.pre.numel());
    }
    if (ptr(3) && ptr(4) && detail::fresh_at(fresh, 4)) {
      B::linear_backward_weight(ptr(3), ptr(4), act.template data<float>(), dy, s.rows, s.hidden,
                                s.out, beta(3));
    } else {
      if (ptr(3))
        B::gemm(true, false, s.hidden, s.out, s.rows, 1.0f, act.template data<float>(), s.hidden,
                dy, s.out, beta(3), ptr(3), s.out);
      if (ptr(4))
        B::binary_backward(math::BinaryKind::add, nullptr, ptr(4), dy, dy, dy, s.rows, s.out,
                           false, true, false, detail::fresh_at(fresh, 4));
    }
    act = Tensor<B>();  // a rebuilt act goes before dpre comes
    if (!ptr(0) && !ptr(1) && !ptr(2)) return;
    // dpre, with db1 from the same GEMM where db1 is fresh
    auto dpre = detail::make_tensor<B>(&dout.tape(), s.pre.shape());
    float* dp = dpre.template data<float>();
    const bool db1_fresh = ptr(2) && detail::fresh_at(fresh, 2);
    B::linear_dgelu_backward(dp, db1_fresh ? ptr(2) : nullptr, dy, s.w2.template data<float>(),
                             s.pre.template data<float>(), s.rows, s.hidden, s.out);
    if (ptr(2) && !db1_fresh)
      B::binary_backward(math::BinaryKind::add, nullptr, ptr(2), dp, dp, dp, s.rows, s.hidden,
                         false, true, false, false);
    if (ptr(1))
      B::gemm(true, false, s.in, s.hidden, s.rows, 1.0f, s.x.template data<float>(), s.in, dp,
              s.hidden, beta(1), ptr(1), s.hidden);
    if (ptr(0))
      B::gemm(false, true, s.rows, s.in, s.hidden, 1.0f, dp, s.hidden,
              s.w1.template data<float>(), s.hidden, beta(0), ptr(0), s.in);
  }
};

/// GELU(x w1 + b1) w2 + b2: x (..., C), w1 (C, H), b1 (H), w2 (H, O), b2 (O) -> (..., O).
template <class B>
Tensor<B> mlp(const Tensor<B>& x, const Tensor<B>& w1, const Tensor<B>& b1, const Tensor<B>& w2,
              const Tensor<B>& b2) {
  return detail::apply<MlpOp>(std::array<Tensor<B>, 5>{x, w1, b1, w2, b2});
}
/// residual + GELU(x w1 + b1) w2 + b2, the residual added inside the second GEMM.
template <class B>
Tensor<B> mlp(const Tensor<B>& x, const Tensor<B>& w1, const Tensor<B>& b1, const Tensor<B>& w2,
              const Tensor<B>& b2, const Tensor<B>& residual) {
  return detail::apply<MlpOp>(std::array<Tensor<B>, 6>{x, w1, b1, w2, b2, residual});
}

}  // namespace remat
