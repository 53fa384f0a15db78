#pragma once
// SPDX-License-Identifier: MIT
// Element-type conversion between fp32 and bf16, the one place a value changes type: the
// rounding is core/bf16.hpp's (nearest even, NaN kept), the same on every backend.
//
// NOTE [precision policy]
// How remat computes in bf16 (issue 27; the ops that take bf16 so far: to_dtype, matmul, linear,
// layer_norm, rms_norm, cross_entropy):
// - Parameters, their gradients and the optimizer's state stay f32 (a bf16 leaf cannot require
//   grad). A model computes in bf16 by casting once, with a recorded op: to_dtype(w, bf16). A
//   checkpoint replay re-runs the cast like any op: there is no ambient mode to capture.
// - Such a bf16 copy of an f32 value has an f32 gradient (TensorImpl::grad_dtype): the products
//   write a weight's gradient in fp32 (x^T dy summed in fp32, never rounded to bf16), and the
//   cast hands it back unchanged.
// - Products (matmul, linear): bf16 operands, exact products summed in fp32, the output bf16,
//   rounded once to nearest even; linear's bias stays f32 and is added before that rounding,
//   its residual has the output's type. The gradient of a bf16 activation is bf16: each
//   contribution is summed in fp32 with the buffer's value and rounded once.
// - Norms (layer_norm, rms_norm): bf16 rows in and out, the mean and rstd fp32 (saved as f32),
//   weight and bias f32; every sum in fp32; dx in x's gradient type, dw and db fp32.
// - cross_entropy: bf16 logits widened as read; the log-sum-exp, the loss and its mean in fp32;
//   the logits' gradient rounded once (the target's term subtracted first), written over the
//   logits when nothing else holds them, as in f32.
// - Every other op computes in f32 for now and refuses bf16 with a hint to widen.
// Against PyTorch's autocast: autocast casts inside each op (a weight cache per forward) and
// computes a weight's gradient in bf16 before widening it; here the casts are the model's own
// ops and dW is fp32 from the GEMM. llm.c keeps bf16 parameters and gradients with optional
// fp32 masters; here the masters and gradients are always fp32.

#include <array>

#include "remat/core/apply.hpp"
#include "remat/core/bf16.hpp"
#include "remat/core/kernel.hpp"

namespace remat {

namespace detail {
inline bool castable(DType t) { return t == DType::f32 || t == DType::bf16; }
}  // namespace detail

// y = x as type `to` (f32 -> bf16 rounds to nearest even; bf16 -> f32 is exact).
// dy/dx = 1: dx (+)= dy in x's gradient type. y's gradient is f32 either way (NOTE [precision
// policy]): a bf16 copy of an f32 weight passes an fp32 gradient back unrounded, and a bf16 x
// gets its gradient rounded once to bf16, as its values were. Keeps nothing.
struct CastOp {
  static constexpr const char* name = "to_dtype";
  // y (n) = x converted from `from` to `to`; add: y += x converted, the sum taken in fp32 and
  // rounded once to `to` (a gradient added into, NOTE [fresh gradient buffers])
  struct Convert {
    static constexpr const char* name = "convert";
    void* y;
    DType to;
    const void* x;
    DType from;
    std::int64_t n;
    bool add;
    void work(Work& k) const {
      const double out = static_cast<double>(dtype_size(to)) * (add ? 2.0 : 1.0);
      k.add(WorkKind::pointwise, add ? static_cast<double>(n) : 0.0,
            static_cast<double>(n) * (out + static_cast<double>(dtype_size(from))));
    }
  };
  template <class B>
  struct Saved {
    template <class F> void each(F) const {}
  };
  template <class B>
  static Tensor<B> forward(Saved<B>&, const Tensor<B>& x, DType to) {
    auto y = detail::make_tensor<B>(&x.tape(), x.shape(), to);
    y.impl()->grad_dtype = DType::f32;
    run_kernel<B>(Convert{y.template data<void>(), to, x.template data<void>(), x.dtype(), x.numel(), false});
    return y;
  }
  template <class B>
  static void backward(const Saved<B>&, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {  // NOTE [fresh gradient buffers]
    run_kernel<B>(Convert{dinp[0].template data<void>(), dinp[0].dtype(), dout.template data<void>(),
                          dout.dtype(), dout.numel(), !detail::fresh_at(fresh, 0)});
  }
};

using CastKernels = KernelList<CastOp::Convert>;

namespace detail {
/// dst = src, or dst += src (summed in fp32, rounded once to dst's type): a gradient handed on
/// between buffers of any two of f32 and bf16.
template <class B>
void convert_into(const Tensor<B>& dst, const Tensor<B>& src, bool add) {
  run_kernel<B>(CastOp::Convert{dst.template data<void>(), dst.dtype(), src.template data<void>(),
                                src.dtype(), src.numel(), add});
}
}  // namespace detail

/// x as element type `to` (DType::f32 or DType::bf16): fp32 -> bf16 rounds to nearest even
/// (a NaN stays a NaN, values beyond bf16's range become infinities), bf16 -> fp32 is exact.
/// The gradient flows back converted to x's gradient type; the result's gradient is f32. Returns x itself when it already is `to`.
template <class B>
Tensor<B> to_dtype(const Tensor<B>& x, DType to) {
  REMAT_CHECK(x.defined(), "remat::to_dtype: x is an undefined tensor");
  REMAT_CHECK(detail::castable(x.dtype()) && detail::castable(to), "remat::to_dtype: converts ",
              "between f32 and bf16; asked for ", dtype_name(x.dtype()), " -> ", dtype_name(to),
              " (x of shape ", x.shape().str(), ")");
  if (x.dtype() == to) return x;
  return detail::apply<CastOp>(std::array<Tensor<B>, 1>{x}, to);
}

}  // namespace remat
