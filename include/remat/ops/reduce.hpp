#pragma once
// SPDX-License-Identifier: MIT
// Reductions: sum and mean over one axis or over all elements; max over one axis.

#include <array>

#include "remat/core/apply.hpp"

namespace remat {

// y = scale * sum_k x[..., k, ...] over one axis (scale = 1 for sum, 1/n for mean).
// dx[..., k, ...] += scale dy[...]
struct ReduceOp {
  static constexpr const char* name = "reduce";
  template <class B>
  struct Saved {
    std::int64_t outer = 1, n = 1, inner = 1;
    float scale = 1.0f;
    template <class F> void each(F) const {}
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, int axis, bool all, bool keepdim,
                           bool mean) {
    detail::check_f32(mean ? "mean" : "sum", "x", x);
    const Shape out = plan(s, x, axis, all, keepdim, mean);
    auto y = detail::make_tensor<B>(&x.tape(), out);
    B::reduce_forward(y.template data<float>(), x.template data<float>(), s.outer, s.n, s.inner,
                      s.scale);
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>& x, int axis, bool all,
                   bool keepdim, bool mean) {
    plan(s, x, axis, all, keepdim, mean);
  }
  // The (outer, n, inner) view of x and the output shape.
  template <class B>
  static Shape plan(Saved<B>& s, const Tensor<B>& x, int axis, bool all, bool keepdim, bool mean) {
    const char* op = mean ? "mean" : "sum";
    Shape out;
    if (all) {
      s.n = x.numel();
      if (keepdim)
        for (int i = 0; i < x.rank(); ++i) out.push_back(1);
    } else {
      const int a = x.shape().axis(axis, op);
      s.outer = x.shape().prod(0, a);
      s.n = x.shape()[a];
      s.inner = x.shape().prod(a + 1, x.rank());
      for (int i = 0; i < x.rank(); ++i)
        if (i != a) out.push_back(x.shape()[i]);
        else if (keepdim) out.push_back(1);
    }
    REMAT_CHECK(!mean || s.n > 0, "remat::mean: the reduced axis of shape ", x.shape().str(),
                " is empty; the mean of no elements is undefined");
    s.scale = mean ? 1.0f / static_cast<float>(s.n) : 1.0f;
    return out;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    B::reduce_backward(dinp[0].template data<float>(), dout.template data<float>(), s.outer, s.n,
                       s.inner, s.scale);
  }
};

// y = max_k x[..., k, ...] over one axis.  dx[..., k*, ...] += dy[...] at the first k* where
// x equals the max (PyTorch's max(dim) picks one index too). Keeps x and y.
struct MaxOp {
  static constexpr const char* name = "max";
  template <class B>
  struct Saved {
    std::int64_t outer = 1, n = 1, inner = 1;
    Tensor<B> x, y;
    template <class F> void each(F f) const { f(x); f(y); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, int axis, bool keepdim) {
    detail::check_f32("max", "x", x);
    auto y = detail::make_tensor<B>(&x.tape(), plan(s, x, axis, keepdim));
    B::max_forward(y.template data<float>(), x.template data<float>(), s.outer, s.n, s.inner);
    save(s, y, x, axis, keepdim);
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>& y, const Tensor<B>& x, int axis, bool keepdim) {
    plan(s, x, axis, keepdim);
    s.x = x;
    s.y = y;
  }
  template <class B>
  static Shape plan(Saved<B>& s, const Tensor<B>& x, int axis, bool keepdim) {
    const int a = x.shape().axis(axis, "max");
    s.outer = x.shape().prod(0, a);
    s.n = x.shape()[a];
    s.inner = x.shape().prod(a + 1, x.rank());
    REMAT_CHECK(s.n > 0, "remat::max: axis ", axis, " of shape ", x.shape().str(),
                " is empty; the max of no elements is undefined");
    Shape out;
    for (int i = 0; i < x.rank(); ++i)
      if (i != a) out.push_back(x.shape()[i]);
      else if (keepdim) out.push_back(1);
    return out;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    B::max_backward(dinp[0].template data<float>(), s.x.template data<float>(),
                    s.y.template data<float>(), dout.template data<float>(), s.outer, s.n,
                    s.inner);
  }
};

/// Max over `axis` (negative counts from the back); keepdim leaves it as size 1. The gradient
/// goes to the first maximal element.
template <class B> Tensor<B> max(const Tensor<B>& x, int axis, bool keepdim = false) {
  return detail::apply<MaxOp>(std::array<Tensor<B>, 1>{x}, axis, keepdim);
}

/// Sum of all elements (a scalar, shape []).
template <class B> Tensor<B> sum(const Tensor<B>& x) {
  return detail::apply<ReduceOp>(std::array<Tensor<B>, 1>{x}, 0, true, false, false);
}
/// Sum over `axis` (negative counts from the back); keepdim leaves it as size 1.
template <class B> Tensor<B> sum(const Tensor<B>& x, int axis, bool keepdim = false) {
  return detail::apply<ReduceOp>(std::array<Tensor<B>, 1>{x}, axis, false, keepdim, false);
}
/// Mean of all elements (a scalar, shape []).
template <class B> Tensor<B> mean(const Tensor<B>& x) {
  return detail::apply<ReduceOp>(std::array<Tensor<B>, 1>{x}, 0, true, false, true);
}
/// Mean over `axis`.
template <class B> Tensor<B> mean(const Tensor<B>& x, int axis, bool keepdim = false) {
  return detail::apply<ReduceOp>(std::array<Tensor<B>, 1>{x}, axis, false, keepdim, true);
}

}  // namespace remat
