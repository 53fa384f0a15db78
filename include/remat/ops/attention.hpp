#pragma once
// SPDX-License-Identifier: MIT
// Scaled dot-product attention over (..., T, D) tensors, causal or not. The backend decides
// what is kept for backward (the CPU keeps the probabilities P, BH x T x T floats).

#include <array>
#include <cmath>

#include "remat/core/apply.hpp"

namespace remat {

// o = P v,  P = softmax(q k^T / sqrt(D)) over keys, with keys j > i masked when causal.
//   dv = P^T do;  dP = do v^T;  dS = P (dP - sum_j dP P);  dq = dS k / sqrt(D);  dk = dS^T q / sqrt(D)
struct AttentionOp {
  static constexpr const char* name = "attention";
  template <class B>
  struct Saved {
    std::int64_t BH = 0, T = 0, D = 0;
    float scale = 1.0f;
    Tensor<B> q, k, v, aux;  // aux: the backend's saved statistics (P on the CPU)
    template <class F> void each(F f) const { f(q); f(k); f(v); f(aux); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& q, const Tensor<B>& k,
                           const Tensor<B>& v, bool causal) {
    for (const Tensor<B>* t : {&q, &k, &v}) detail::check_f32(name, "q, k and v", *t);
    REMAT_CHECK(q.rank() >= 2 && q.shape() == k.shape() && q.shape() == v.shape(),
                "remat::attention: q is ", q.shape().str(), ", k is ", k.shape().str(), ", v is ",
                v.shape().str(), " (expected three equal shapes (..., T, D), e.g. [B, H, T, D])");
    detail::check_nonempty(name, "q", q);
    s.T = q.shape()[-2];
    s.D = q.shape()[-1];
    s.BH = q.numel() / (s.T * s.D);
    s.scale = 1.0f / std::sqrt(static_cast<float>(s.D));
    auto o = detail::empty_like(q);
    s.aux = detail::make_tensor<B>(&q.tape(), Shape{B::attention_aux_numel(s.BH, s.T, s.D)});
    B::attention_forward(o.template data<float>(), s.aux.template data<float>(),
                         q.template data<float>(), k.template data<float>(),
                         v.template data<float>(), s.BH, s.T, s.D, s.scale, causal);
    s.q = q;
    s.k = k;
    s.v = v;
    return o;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    auto ptr = [](const Tensor<B>& t) { return t.defined() ? t.template data<float>() : nullptr; };
    B::attention_backward(ptr(dinp[0]), ptr(dinp[1]), ptr(dinp[2]), dout.template data<float>(),
                          s.q.template data<float>(), s.k.template data<float>(),
                          s.v.template data<float>(), s.aux.template data<float>(), s.BH, s.T,
                          s.D, s.scale);
  }
};

/// softmax(q k^T / sqrt(D)) v over the last two axes (T, D); `causal` masks future keys.
template <class B>
Tensor<B> attention(const Tensor<B>& q, const Tensor<B>& k, const Tensor<B>& v, bool causal = true) {
  return detail::apply<AttentionOp>(std::array<Tensor<B>, 3>{q, k, v}, causal);
}

}  // namespace remat
