#pragma once
// SPDX-License-Identifier: MIT
// Pointwise activations: GELU (tanh approximation, as GPT-2), ReLU, tanh, and SwiGLU's gated
// product (Llama, Qwen, SmolLM2), fused with its kernels declared here (NOTE [op kernels]).

#include <array>

#include "remat/core/apply.hpp"
#include "remat/core/kernel.hpp"
#include "remat/core/math.hpp"
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

// SwiGLU (Shazeer 2020), the MLP gate of Llama-family models: y = silu(a) b (math::swiglu)
//   da = dy b s (1 + a (1 - s)),  db = dy a s,  s = sigmoid(a)
// a and b are two tensors of one shape, or the halves of one [..., 2F] (a gate and up
// projection made by one GEMM: a = [..., :F], b = [..., F:]). Saves its inputs only: neither
// silu(a) nor sigmoid(a) is kept, backward recomputes them. f32 or bf16 (one type for a, b
// and y), the products in fp32.
struct SwiGluOp {
  static constexpr const char* name = "swiglu";
  // y (rows, F) = silu(a) b; a and b rows lda and ldb apart
  struct Forward {
    static constexpr const char* name = "swiglu_forward";
    void* y;
    const void *a, *b;
    std::int64_t rows, F, lda, ldb;
    DType yt = DType::f32, t = DType::f32;  // y's; a's and b's
    void work(Work& k) const {
      k.add(WorkKind::pointwise, 6.0 * rows * F, (1.0 * dtype_size(yt) + 2.0 * dtype_size(t)) * rows * F);
    }
  };
  // da (+)= dy b s (1 + a (1 - s)), db (+)= dy a s; rows lda / ldb apart like a / b; a null
  // output is a gradient not asked for; set_*: written (=), not added into
  struct Backward {
    static constexpr const char* name = "swiglu_backward";
    void *da, *db;
    const void *dy, *a, *b;
    std::int64_t rows, F, lda, ldb;
    bool set_a, set_b;
    DType dt = DType::f32, dyt = DType::f32, t = DType::f32;  // da's and db's; dy's; a's and b's
    void work(Work& k) const {
      k.add(WorkKind::pointwise, 12.0 * rows * F,
            (3.0 * dtype_size(dt) + dtype_size(dyt) + 2.0 * dtype_size(t)) * rows * F);
    }
  };
  template <class B>
  struct Saved {
    bool packed = false;
    std::int64_t rows = 0, F = 0;
    Tensor<B> a, b;  // packed: a is the [..., 2F] input and b undefined
    template <class F_> void each(F_ f) const {
      f(a);
      if (!packed) f(b);
    }
  };
  // two inputs, one shape
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& a, const Tensor<B>& b) {
    detail::check_float(name, "a", a);
    REMAT_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), "remat::swiglu: a is ", dtype_name(a.dtype()), " ",
                a.shape().str(), ", b is ", dtype_name(b.dtype()), " ", b.shape().str(),
                " (expected one shape and one type; hint: cast with to_dtype)");
    REMAT_CHECK(a.shape().rank() >= 1, "remat::swiglu: a is a scalar (expected [..., F])");
    s.packed = false;
    s.F = a.shape()[-1];
    s.rows = s.F == 0 ? 0 : a.numel() / s.F;
    s.a = a;
    s.b = b;
    auto y = detail::empty_like(a);
    run_kernel<B>(Forward{y.template data<void>(), a.template data<void>(), b.template data<void>(), s.rows, s.F,
                          s.F, s.F, a.dtype(), a.dtype()});
    return y;
  }
  // one input [..., 2F]: its halves
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& ab) {
    detail::check_float(name, "gate_up", ab);
    REMAT_CHECK(ab.shape().rank() >= 1 && ab.shape()[-1] % 2 == 0, "remat::swiglu: gate_up is ", ab.shape().str(),
                " (expected [..., 2F]: the gate's F columns, then the up projection's F)");
    s.packed = true;
    s.F = ab.shape()[-1] / 2;
    s.rows = s.F == 0 ? 0 : ab.numel() / (2 * s.F);
    s.a = ab;
    Shape ys = ab.shape();
    ys[-1] = s.F;
    auto y = detail::make_tensor<B>(&ab.tape(), ys, ab.dtype());
    const char* base = static_cast<const char*>(ab.template data<void>());
    run_kernel<B>(Forward{y.template data<void>(), base, base + s.F * dtype_size(ab.dtype()), s.rows, s.F, 2 * s.F,
                          2 * s.F, ab.dtype(), ab.dtype()});
    return y;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {  // NOTE [fresh gradient buffers]
    const std::int64_t ld = s.packed ? 2 * s.F : s.F;
    const std::size_t off = static_cast<std::size_t>(s.F) * dtype_size(s.a.dtype());
    const char* a = static_cast<const char*>(s.a.template data<void>());
    const char* b = s.packed ? a + off : static_cast<const char*>(s.b.template data<void>());
    void* da = dinp[0].defined() ? dinp[0].template data<void>() : nullptr;
    void* db = s.packed ? (da ? static_cast<char*>(da) + static_cast<std::size_t>(s.F) * dtype_size(dinp[0].dtype())
                              : nullptr)
                        : (dinp.size() > 1 && dinp[1].defined() ? dinp[1].template data<void>() : nullptr);
    const DType dt = dinp[0].defined() ? dinp[0].dtype() : (db ? dinp[1].dtype() : DType::f32);
    REMAT_CHECK(s.packed || !da || !db || dinp[0].dtype() == dinp[1].dtype(),
                "remat::swiglu: the gradients of a and b are ", dtype_name(dinp[0].dtype()), " and ",
                dtype_name(dinp[1].dtype()), " (expected one type)");
    run_kernel<B>(Backward{da, db, dout.template data<void>(), a, b, s.rows, s.F, ld, ld, detail::fresh_at(fresh, 0),
                           s.packed ? detail::fresh_at(fresh, 0) : detail::fresh_at(fresh, 1), dt, dout.dtype(),
                           s.a.dtype()});
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

/// SwiGLU's gated product silu(a) * b of two tensors of one shape (Llama's gate_proj and
/// up_proj outputs), fused: saves a and b, not silu(a).
template <class B> Tensor<B> swiglu(const Tensor<B>& a, const Tensor<B>& b) {
  return detail::apply<SwiGluOp>(std::array<Tensor<B>, 2>{a, b});
}
/// The same on one [..., 2F] tensor whose first F columns are the gate and last F the up
/// projection (one GEMM with gate_proj and up_proj side by side); the result is [..., F].
template <class B> Tensor<B> swiglu(const Tensor<B>& gate_up) {
  return detail::apply<SwiGluOp>(std::array<Tensor<B>, 1>{gate_up});
}

/// The activations' fused kernels (ops/kernels.hpp joins the families' lists).
using ActivationKernels = KernelList<SwiGluOp::Forward, SwiGluOp::Backward>;

}  // namespace remat
