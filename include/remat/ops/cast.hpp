#pragma once
// SPDX-License-Identifier: MIT
// Element-type conversion between fp32 and bf16, the one place a value changes type: the
// rounding is core/bf16.hpp's (nearest even, NaN kept), the same on every backend.
//
// NOTE [precision policy]
// How remat computes in bf16 (issue 27; the ops that take bf16 so far: to_dtype, matmul, linear,
// layer_norm, rms_norm, cross_entropy with kernels of their own; gelu, dropout, the binary ops,
// attention and self_attention by widening, NOTE [bf16 by widening]):
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
// - gelu, dropout, the binary ops and attention: bf16 in and out (a binary op's operands of one
//   type), computed in fp32 (widened), each output rounded once; attention's log-sum-exp f32.
// - Every other op computes in f32 for now and refuses bf16 with a hint to widen.
// - A product keeps for backward the f32 parameter behind a bf16 weight copy, not the copy
//   (the cast gives the copy a recipe: NOTE [saved as a recipe]), and remakes the copy there:
//   the saved bytes are the activations', as in fp32 at half the size, for one more rounding
//   pass over the weights per step. (Autocast's weight cache keeps the copies through backward.)
// - A model chooses once: nn::Linear computes in its input's type (casting its weight per
//   forward), so a model that casts its residual stream after the embeddings runs in bf16
//   (nn::GPTConfig::precision).
// Against PyTorch's autocast: autocast casts inside each op (a weight cache per forward) and
// computes a weight's gradient in bf16 before widening it; here the casts are the model's own
// ops and dW is fp32 from the GEMM. llm.c keeps bf16 parameters and gradients with optional
// fp32 masters; here the masters and gradients are always fp32.

#include <array>

#include "remat/core/apply.hpp"
#include "remat/core/bf16.hpp"
#include "remat/core/kernel.hpp"
#include "remat/core/recipe.hpp"

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
  // Keeps x only when it is a parameter (alive anyway): the copy then has a recipe, and a
  // product that saves it keeps the parameter instead (NOTE [saved as a recipe]).
  template <class B>
  struct Saved {
    SavedOperand<B> x;
    std::shared_ptr<const Recipe<B>> made;  // the output's recipe, owned here when recorded
    template <class F> void each(F f) const { x.each(f); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, DType to) {
    auto y = detail::make_tensor<B>(&x.tape(), x.shape(), to);
    y.impl()->grad_dtype = DType::f32;
    run_kernel<B>(Convert{y.template data<void>(), to, x.template data<void>(), x.dtype(), x.numel(), false});
    if (x.category() == Category::parameters) s.x.keep(x);
    return y;
  }
  // The copy remade from the parameter: the same conversion, the same bits.
  template <class B>
  static std::shared_ptr<const Recipe<B>> recipe(const Saved<B>& s, const Tensor<B>& out) {
    if (!s.x.defined()) return nullptr;
    return make_recipe<B>({s.x}, out, [](const std::vector<Tensor<B>>& in, const Tensor<B>& y) {
      run_kernel<B>(Convert{y.template data<void>(), y.dtype(), in[0].template data<void>(),
                            in[0].dtype(), y.numel(), false});
    });
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

// NOTE [bf16 by widening]
// The ops without bf16 kernels of their own yet (gelu, dropout, the binary ops, attention)
// take bf16 tensors by widening: each bf16 input is converted to an f32 temporary (exact), the
// op's f32 kernel runs, and each output is rounded once to bf16. The op keeps its bf16 inputs
// (half the saved bytes); backward widens them and dout again, computes every gradient in an
// f32 temporary and hands it into the bf16 buffer with one rounding (added in fp32 where the
// buffer holds values). The temporaries are the op's, counted in the ledger while they live, so
// the estimate stays exact. Values are those of a bf16 kernel that computes in fp32; only
// speed is lost, which the backends' own bf16 kernels take back op by op.

/// x itself when f32, else an f32 copy of it (exact for bf16): an op's temporary.
template <class B>
Tensor<B> widened(const Tensor<B>& x) {
  if (!x.defined() || x.dtype() == DType::f32) return x;
  Tensor<B> w = make_tensor<B>(&x.tape(), x.shape(), DType::f32);
  convert_into(w, x, false);
  return w;
}
/// y (f32) as type t: y itself when t is f32, else a copy rounded once to nearest even.
template <class B>
Tensor<B> narrowed(const Tensor<B>& y, DType t) {
  if (t == DType::f32) return y;
  Tensor<B> n = make_tensor<B>(&y.tape(), y.shape(), t);
  convert_into(n, y, false);
  return n;
}
/// An input's gradient computed in f32 (NOTE [bf16 by widening]): data() is the gradient
/// buffer itself when it is f32 (set() its fresh flag), else an f32 temporary written whole
/// (set() true) that finish() hands into the buffer, added where the buffer holds values. An
/// undefined target gives a null data().
template <class B>
class F32Grad {
 public:
  F32Grad(const Tensor<B>& target, bool fresh) : target_(target), fresh_(fresh) {
    if (target.defined() && target.dtype() != DType::f32)
      temp_ = make_tensor<B>(&target.tape(), target.shape(), DType::f32);
  }
  float* data() const {
    if (temp_.defined()) return temp_.template data<float>();
    return target_.defined() ? target_.template data<float>() : nullptr;
  }
  bool set() const { return temp_.defined() || fresh_; }
  void finish() {
    if (temp_.defined()) convert_into(target_, temp_, !fresh_);
    temp_ = Tensor<B>();
  }

 private:
  Tensor<B> target_, temp_;
  bool fresh_;
};
/// Throws unless t is f32 or bf16.
template <class B>
void check_float(const char* op, const char* what, const Tensor<B>& t) {
  REMAT_CHECK(castable(t.dtype()), "remat::", op, ": ", what, " must be f32 or bf16, found ",
              dtype_name(t.dtype()), " with shape ", t.shape().str());
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
