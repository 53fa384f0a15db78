#pragma once
// SPDX-License-Identifier: MIT
// Cross-entropy fused with log-softmax over class logits, averaged over tokens.

#include <array>

#include "remat/core/apply.hpp"

namespace remat {

// loss = mean_i (lse_i - x[i, t_i]),  lse_i = log sum_{j < V} exp x[i, j]
// dx[i, j] = dloss (softmax(x_i)_j - [j == t_i]) / N  for j < V,  0 for the padding j >= V
// x (..., ld): rows of ld logits, the first V of them classes (V = ld unless padded).
struct CrossEntropyOp {
  static constexpr const char* name = "cross_entropy";
  template <class B>
  struct Saved {
    std::int64_t N = 0, V = 0, ld = 0;
    Tensor<B> logits, targets, lse;
    template <class F> void each(F f) const { f(logits); f(targets); f(lse); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& logits, const Tensor<B>& targets,
                           std::int64_t classes) {
    detail::check_f32(name, "logits", logits);
    detail::check_nonempty(name, "logits", logits);
    REMAT_CHECK(targets.dtype() == DType::i32, "remat::cross_entropy: targets must be i32 class "
                "indices, found ", dtype_name(targets.dtype()), " (hint: make them with tape.tokens)");
    s.ld = logits.shape()[-1];
    s.N = logits.numel() / s.ld;
    REMAT_CHECK(classes >= 0 && classes <= s.ld, "remat::cross_entropy: classes is ", classes,
                " for logits ", logits.shape().str(), " (expected 1..", s.ld, " classes, the first "
                "of each row, or 0 for all ", s.ld, ")");
    s.V = classes == 0 ? s.ld : classes;
    REMAT_CHECK(targets.numel() == s.N && targets.shape() == logits.shape().sub(0, logits.rank() - 1),
                "remat::cross_entropy: logits are ", logits.shape().str(), ", targets are ",
                targets.shape().str(), " (expected targets ",
                logits.shape().sub(0, logits.rank() - 1).str(), ": one class per row of logits)");
    const auto [lo, hi] = detail::int_range(targets);
    REMAT_CHECK(lo >= 0 && hi < s.V, "remat::cross_entropy: target ", (lo < 0 ? lo : hi),
                " is out of range for ", s.V, " classes (expected 0 <= target < ", s.V, ")");
    s.lse = detail::make_tensor<B>(&logits.tape(), Shape{s.N});
    auto out = detail::make_tensor<B>(&logits.tape(), Shape{});
    B::cross_entropy_forward(out.template data<float>(), s.lse.template data<float>(),
                             logits.template data<float>(), targets.template data<std::int32_t>(),
                             s.N, s.V, s.ld);  // the loss stays in backend memory

    s.logits = logits;
    s.targets = targets;
    return out;
  }
  // dlogits may be written over the logits (the tape decides: nothing else may hold them), so
  // the step never holds both N x ld buffers at once; each element is read, then written.
  template <class B>
  static int grad_over_saved(const Saved<B>& s, const Tensor<B>*& t) {
    t = &s.logits;
    return 0;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {  // NOTE [fresh gradient buffers]
    B::cross_entropy_backward(dinp[0].template data<float>(), s.logits.template data<float>(),
                              s.lse.template data<float>(), s.targets.template data<std::int32_t>(),
                              s.N, s.V, s.ld, dout.template data<float>(),  // dloss: on the backend
                              detail::fresh_at(fresh, 0));
  }
};

/// Mean cross-entropy of logits (..., ld) against integer targets (...) over the first
/// `classes` columns of each row (0: all ld). Padding columns past `classes` (a vocabulary
/// padded for aligned GEMMs) are never read and get a zero gradient.
template <class B>
Tensor<B> cross_entropy(const Tensor<B>& logits, const Tensor<B>& targets, std::int64_t classes = 0) {
  return detail::apply<CrossEntropyOp>(std::array<Tensor<B>, 2>{logits, targets}, classes);
}

}  // namespace remat
