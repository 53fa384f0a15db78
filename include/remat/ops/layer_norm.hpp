#pragma once
// SPDX-License-Identifier: MIT
// The norms over the last axis, fused: one pass forward saving the row statistics, one
// backward; their kernels are declared here (NOTE [op kernels] in core/kernel.hpp). x and y
// are f32 or bf16 (the same type; NOTE [precision policy] in ops/cast.hpp), the statistics, the
// parameters and their gradients f32, every sum in fp32; dx in x's gradient type.

#include <array>

#include "remat/core/apply.hpp"
#include "remat/core/kernel.hpp"

namespace remat {

namespace detail {
// The width C of a norm over the last axis of x, after checking x and that each parameter is [C].
template <class B>
std::int64_t norm_width(const char* op, const Tensor<B>& x, const Tensor<B>& w,
                        const Tensor<B>* b = nullptr) {
  REMAT_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16, "remat::", op, ": x is ",
              dtype_name(x.dtype()), " ", x.shape().str(), " (expected f32 or bf16)");
  check_f32(op, "weight", w);
  if (b) check_f32(op, "bias", *b);
  check_nonempty(op, "x", x);
  const std::int64_t C = x.shape()[-1];
  REMAT_CHECK(w.shape() == Shape{C} && (!b || b->shape() == Shape{C}), "remat::", op,
              ": weight is ", w.shape().str(), b ? " and bias is " + b->shape().str() : "",
              " for x ", x.shape().str(), " (expected [", C, "], the last dimension of x)");
  return C;
}
}  // namespace detail

// y = (x - mean) rstd w + b over the last axis (C), rstd = 1 / sqrt(var + eps).
// xhat = (x - mean) rstd, g = dy w:
//   dx = rstd (g - mean(g) - xhat mean(g xhat)),  dw = sum_rows dy xhat,  db = sum_rows dy
struct LayerNormOp {
  static constexpr const char* name = "layer_norm";
  // y (rows, C) = (x - mean) rstd w + b; mean, rstd (rows) written
  struct Forward {
    static constexpr const char* name = "layer_norm_forward";
    void* y;
    float *mean, *rstd;
    const void* x;
    const float *w, *b;
    std::int64_t rows, C;
    float eps;
    DType t = DType::f32;  // x's and y's
    void work(Work& k) const {
      k.add(WorkKind::norm, 8.0 * rows * C, 2.0 * dtype_size(t) * rows * C + 4.0 * (2.0 * C + 2.0 * rows));
    }
  };
  // dx (+)= rstd (g - mean(g) - xhat mean(g xhat)), dw (+)= sum_rows dy xhat, db (+)= sum_rows
  // dy; a null output is a gradient not asked for; set_*: that buffer is written (=), not added
  // into (NOTE [fresh gradient buffers])
  struct Backward {
    static constexpr const char* name = "layer_norm_backward";
    void* dx;
    float *dw, *db;
    const void *dy, *x;
    const float *w, *mean, *rstd;
    std::int64_t rows, C;
    bool set_dx, set_dw, set_db;
    DType dxt = DType::f32, dyt = DType::f32, xt = DType::f32;
    void work(Work& k) const {
      k.add(WorkKind::norm, 12.0 * rows * C,
            (1.0 * dtype_size(dxt) + dtype_size(dyt) + dtype_size(xt)) * rows * C + 4.0 * (3.0 * C + 2.0 * rows));
    }
    RowSums row_sums() const { return {2, C, rows}; }  // dw, db
  };
  template <class B>
  struct Saved {
    std::int64_t rows = 0, C = 0;
    Tensor<B> x, w, mean, rstd;  // mean and rstd: one float per row each
    template <class F> void each(F f) const { f(x); f(w); f(mean); f(rstd); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, const Tensor<B>& w,
                           const Tensor<B>& b, float eps) {
    s.C = detail::norm_width(name, x, w, &b);
    s.rows = x.numel() / s.C;
    auto y = detail::empty_like(x);
    s.mean = detail::make_tensor<B>(&x.tape(), Shape{s.rows});
    s.rstd = detail::make_tensor<B>(&x.tape(), Shape{s.rows});
    run_kernel<B>(Forward{y.template data<void>(), s.mean.template data<float>(),
                          s.rstd.template data<float>(), x.template data<void>(),
                          w.template data<float>(), b.template data<float>(), s.rows, s.C, eps,
                          x.dtype()});
    s.x = x;
    s.w = w;
    return y;
  }
  // each fresh buffer written, not added into (NOTE [fresh gradient buffers])
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {
    auto ptr = [](const Tensor<B>& t) { return t.defined() ? t.template data<float>() : nullptr; };
    const Tensor<B>& dx = dinp[0];
    run_kernel<B>(Backward{dx.defined() ? dx.template data<void>() : nullptr, ptr(dinp[1]),
                           ptr(dinp[2]), dout.template data<void>(), s.x.template data<void>(),
                           s.w.template data<float>(), s.mean.template data<float>(),
                           s.rstd.template data<float>(), s.rows, s.C, detail::fresh_at(fresh, 0),
                           detail::fresh_at(fresh, 1), detail::fresh_at(fresh, 2),
                           dx.defined() ? dx.dtype() : DType::f32, dout.dtype(), s.x.dtype()});
  }
};

/// Layer norm over the last axis with weight and bias (C); GPT-2 uses eps = 1e-5.
template <class B>
Tensor<B> layer_norm(const Tensor<B>& x, const Tensor<B>& w, const Tensor<B>& b, float eps = 1e-5f) {
  return detail::apply<LayerNormOp>(std::array<Tensor<B>, 3>{x, w, b}, eps);
}

// RMSNorm (Zhang and Sennrich 2019; Llama, Qwen, SmolLM): y = x rstd w over the last axis (C),
// rstd = 1 / sqrt(mean(x^2) + eps). xhat = x rstd, g = dy w:
//   dx = rstd (g - xhat mean(g xhat)),  dw = sum_rows dy xhat
// (layer norm without the mean and the bias: mean(g) drops out of dx because xhat is not
// centred). Saves x, w and rstd (one float per row).
struct RmsNormOp {
  static constexpr const char* name = "rms_norm";
  // y (rows, C) = x rstd w; rstd (rows) written
  struct Forward {
    static constexpr const char* name = "rms_norm_forward";
    void* y;
    float* rstd;
    const void* x;
    const float* w;
    std::int64_t rows, C;
    float eps;
    DType t = DType::f32;  // x's and y's
    void work(Work& k) const {
      k.add(WorkKind::norm, 5.0 * rows * C, 2.0 * dtype_size(t) * rows * C + 4.0 * (C + rows));
    }
  };
  // dx (+)= rstd (g - xhat mean(g xhat)), dw (+)= sum_rows dy xhat; a null output is a
  // gradient not asked for; set_*: that buffer is written (=), not added into
  struct Backward {
    static constexpr const char* name = "rms_norm_backward";
    void* dx;
    float* dw;
    const void *dy, *x;
    const float *w, *rstd;
    std::int64_t rows, C;
    bool set_dx, set_dw;
    DType dxt = DType::f32, dyt = DType::f32, xt = DType::f32;
    void work(Work& k) const {
      k.add(WorkKind::norm, 9.0 * rows * C,
            (1.0 * dtype_size(dxt) + dtype_size(dyt) + dtype_size(xt)) * rows * C + 4.0 * (2.0 * C + rows));
    }
    RowSums row_sums() const { return {1, C, rows}; }  // dw
  };
  template <class B>
  struct Saved {
    std::int64_t rows = 0, C = 0;
    Tensor<B> x, w, rstd;  // rstd: one float per row
    template <class F> void each(F f) const { f(x); f(w); f(rstd); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, const Tensor<B>& w, float eps) {
    s.C = detail::norm_width(name, x, w);
    s.rows = x.numel() / s.C;
    auto y = detail::empty_like(x);
    s.rstd = detail::make_tensor<B>(&x.tape(), Shape{s.rows});
    run_kernel<B>(Forward{y.template data<void>(), s.rstd.template data<float>(),
                          x.template data<void>(), w.template data<float>(), s.rows, s.C, eps,
                          x.dtype()});
    s.x = x;
    s.w = w;
    return y;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {
    const Tensor<B>& dx = dinp[0];
    run_kernel<B>(Backward{dx.defined() ? dx.template data<void>() : nullptr,
                           dinp[1].defined() ? dinp[1].template data<float>() : nullptr,
                           dout.template data<void>(), s.x.template data<void>(),
                           s.w.template data<float>(), s.rstd.template data<float>(), s.rows, s.C,
                           detail::fresh_at(fresh, 0), detail::fresh_at(fresh, 1),
                           dx.defined() ? dx.dtype() : DType::f32, dout.dtype(), s.x.dtype()});
  }
};

/// RMSNorm over the last axis with a weight (C): x / sqrt(mean(x^2) + eps) * w. Llama 3 and
/// Qwen use eps = 1e-5 or 1e-6 (their configs' rms_norm_eps); SmolLM2 1e-5.
template <class B>
Tensor<B> rms_norm(const Tensor<B>& x, const Tensor<B>& w, float eps = 1e-6f) {
  return detail::apply<RmsNormOp>(std::array<Tensor<B>, 2>{x, w}, eps);
}

/// The norms' kernels (ops/kernels.hpp joins the families' lists).
using NormKernels = KernelList<LayerNormOp::Forward, LayerNormOp::Backward, RmsNormOp::Forward,
                               RmsNormOp::Backward>;

}  // namespace remat
