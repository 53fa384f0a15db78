#pragma once
// SPDX-License-Identifier: MIT
// Element-type conversion between fp32 and bf16, the one place a value changes type: the
// rounding is core/bf16.hpp's (nearest even, NaN kept), the same on every backend.

#include <array>

#include "remat/core/apply.hpp"
#include "remat/core/bf16.hpp"
#include "remat/core/kernel.hpp"

namespace remat {

namespace detail {
inline bool castable(DType t) { return t == DType::f32 || t == DType::bf16; }
}  // namespace detail

// y = x as type `to` (f32 -> bf16 rounds to nearest even; bf16 -> f32 is exact).
// dy/dx = 1: dx (+)= dy as x's type (a bf16 x gets its gradient rounded once to bf16, as its
// values were; an f32 x gets a bf16 dy exactly). Keeps nothing but x's type.
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
    DType from = DType::f32, to = DType::f32;
    template <class F> void each(F) const {}
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, DType to) {
    s.from = x.dtype();
    s.to = to;
    auto y = detail::make_tensor<B>(&x.tape(), x.shape(), to);
    run_kernel<B>(Convert{y.template data<void>(), to, x.template data<void>(), s.from, x.numel(), false});
    return y;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {  // NOTE [fresh gradient buffers]
    run_kernel<B>(Convert{dinp[0].template data<void>(), s.from, dout.template data<void>(), s.to,
                          dout.numel(), !detail::fresh_at(fresh, 0)});
  }
};

using CastKernels = KernelList<CastOp::Convert>;

/// x as element type `to` (DType::f32 or DType::bf16): fp32 -> bf16 rounds to nearest even
/// (a NaN stays a NaN, values beyond bf16's range become infinities), bf16 -> fp32 is exact.
/// The gradient flows back converted to x's type. Returns x itself when it already is `to`.
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
