#pragma once
// SPDX-License-Identifier: MIT
// Cross-entropy fused with log-softmax over class logits, averaged over tokens; its kernels are
// declared here (NOTE [op kernels] in core/kernel.hpp). Logits f32 or bf16 (read widened; the
// log-sum-exp, the loss and every sum in fp32; the gradient in the logits' gradient type,
// rounded once: NOTE [precision policy] in ops/cast.hpp).

#include <array>

#include "remat/core/apply.hpp"
#include "remat/core/kernel.hpp"

namespace remat {

// loss = mean_i (lse_i - x[i, t_i]),  lse_i = log sum_{j < V} exp x[i, j]
// dx[i, j] = dloss (softmax(x_i)_j - [j == t_i]) / N  for j < V,  0 for the padding j >= V
// x (..., ld): rows of ld logits, the first V of them classes (V = ld unless padded).
struct CrossEntropyOp {
  static constexpr const char* name = "cross_entropy";
  // loss[0] = mean_i (lse_i - x[i, t_i]) over N rows of V classes, rows ld elements of type t
  // apart (columns V..ld-1: padding, never read); lse (N) written. The loss stays in backend
  // memory (a device keeps it there until someone reads it).
  struct Forward {
    static constexpr const char* name = "cross_entropy_forward";
    float *loss, *lse;
    const void* logits;
    const std::int32_t* targets;
    std::int64_t N, V, ld;
    DType t = DType::f32;
    void work(Work& k) const {
      k.add(WorkKind::loss, 3.0 * N * V, 1.0 * dtype_size(t) * N * V + 8.0 * N);
    }
  };
  // dlogits[i, j] (+)= scale (exp(x[i, j] - lse_i) - [j == t_i]), scale = dloss[0] / N (read
  // where it is), for j < V; the padding j in [V, ld) gets 0 (written with set, else left).
  // dlogits (type dt) may be the logits (type lt) themselves with set: each element is read
  // before it is written.
  struct Backward {
    static constexpr const char* name = "cross_entropy_backward";
    void* dlogits;
    const void* logits;
    const float* lse;
    const std::int32_t* targets;
    const float* dloss;
    std::int64_t N, V, ld;
    bool set;
    DType dt = DType::f32, lt = DType::f32;
    void work(Work& k) const {
      k.add(WorkKind::loss, 3.0 * N * V,
            (1.0 * dtype_size(lt) + dtype_size(dt)) * N * V + 8.0 * N +
                (set ? 1.0 * dtype_size(dt) * N * (ld - V) : 0.0));
    }
  };
  template <class B>
  struct Saved {
    std::int64_t N = 0, V = 0, ld = 0;
    Tensor<B> logits, targets, lse;
    template <class F> void each(F f) const { f(logits); f(targets); f(lse); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& logits, const Tensor<B>& targets,
                           std::int64_t classes) {
    REMAT_CHECK(logits.dtype() == DType::f32 || logits.dtype() == DType::bf16, "remat::",
                "cross_entropy: logits are ", dtype_name(logits.dtype()), " ",
                logits.shape().str(), " (expected f32 or bf16)");
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
    run_kernel<B>(Forward{out.template data<float>(), s.lse.template data<float>(),
                          logits.template data<void>(), targets.template data<std::int32_t>(),
                          s.N, s.V, s.ld, logits.dtype()});

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
    run_kernel<B>(Backward{dinp[0].template data<void>(), s.logits.template data<void>(),
                           s.lse.template data<float>(), s.targets.template data<std::int32_t>(),
                           dout.template data<float>(), s.N, s.V, s.ld, detail::fresh_at(fresh, 0),
                           dinp[0].dtype(), s.logits.dtype()});
  }
};

/// Mean cross-entropy of logits (..., ld) against integer targets (...) over the first
/// `classes` columns of each row (0: all ld). Padding columns past `classes` (a vocabulary
/// padded for aligned GEMMs) are never read and get a zero gradient.
template <class B>
Tensor<B> cross_entropy(const Tensor<B>& logits, const Tensor<B>& targets, std::int64_t classes = 0) {
  return detail::apply<CrossEntropyOp>(std::array<Tensor<B>, 2>{logits, targets}, classes);
}

/// The loss's kernels (ops/kernels.hpp joins the families' lists).
using LossKernels = KernelList<CrossEntropyOp::Forward, CrossEntropyOp::Backward>;

}  // namespace remat
