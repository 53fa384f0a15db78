#pragma once
// SPDX-License-Identifier: MIT
// Elementwise binary ops: add, sub, mul, div, maximum, minimum of two tensors (NumPy's
// broadcasting, in either operand order: a bias (C) or a column (B, T, 1) against (B, T, C)),
// scalar forms, operators, and comparison masks (gt, ge, lt, le, eq, ne: 1 or 0, no gradient).

#include <algorithm>
#include <array>
#include <memory>

#include "remat/core/apply.hpp"
#include "remat/core/grad_mode.hpp"
#include "remat/core/kernel.hpp"
#include "remat/core/math.hpp"
#include "remat/core/recipe.hpp"
#include "remat/ops/cast.hpp"
#include "remat/ops/matmul.hpp"
#include "remat/ops/view.hpp"

namespace remat {
namespace detail {

// NOTE [broadcasting]
// NumPy's rule, whichever operand comes first: align the shapes at their last dimension (the
// shorter is padded with leading 1s); each pair of dimensions must be equal or contain a 1, and
// the result takes the other one. add([1, 2, 3], [2, 3]) and add([2, 3], [1, 2, 3]) are both
// [1, 2, 3]; [2, 1] against [1, 3] is [2, 3].
// The kernels see three forms: equal element counts; one operand repeated over the leading
// dimensions of the result (y (outer, inner) = a op b with b (inner): a bias [C] against
// [B, T, C], or a one-element tensor); or one operand a column, one value a row of the result
// (b [B, T, 1] against [B, T, C]: what a reduction with keepdim gives, as in x * rstd or
// x - mean; BinaryOp::ColumnForward). An operand that fits none (a 1 elsewhere in the shape, as
// [2, 1, 3] against [2, 4, 3]) is first expanded to the result's shape by composite ops (a
// product with a row of ones per expanded axis), so its gradient is summed back by their
// backward, and that expansion is a tensor of the result's size that a product keeps.
struct Broadcast {
  Shape out;
  std::int64_t outer = 1, inner = 1;
  bool a_bcast = false, b_bcast = false;  // (inner), repeated over the rows
  bool a_col = false, b_col = false;      // (outer), repeated along each row
  bool a_full() const { return !a_bcast && !a_col; }
  bool b_full() const { return !b_bcast && !b_col; }
};
inline Shape strip_leading_ones(const Shape& s) {
  int i = 0;
  while (i < s.rank() - 1 && s[i] == 1) ++i;
  return s.sub(i, s.rank());
}
/// The result shape of a op b under NumPy's rule; throws when they do not broadcast.
inline Shape broadcast_shape(const char* op, const Shape& a, const Shape& b) {
  const int r = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = r; i >= 1; --i) {
    const std::int64_t da = i <= a.rank() ? a[-i] : 1, db = i <= b.rank() ? b[-i] : 1;
    REMAT_CHECK(da == db || da == 1 || db == 1, "remat::", op, ": shapes do not broadcast: a is ",
                a.str(), ", b is ", b.str(), "; dimension ", -i, " is ", da, " against ", db,
                " (NumPy's rule: aligned at the last dimension, each pair equal or one of them 1)");
    out.push_back(da == 1 ? db : da);
  }
  return out;
}
/// True when x is a block that repeats over the leading dimensions of the result `out` (or
/// all of it, or one element).
inline bool fits_rows(const Shape& x, const Shape& out) {
  return x.numel() == out.numel() || x.numel() == 1 || out.ends_with(strip_leading_ones(x));
}
/// True when x is one value a row of `out`: x's shape is out's with the last dimension 1 (leading
/// 1s aside), and the rows are longer than one.
inline bool fits_column(const Shape& x, const Shape& out) {
  const int r = out.rank();
  if (r == 0 || x.rank() == 0 || x[-1] != 1 || out[-1] == 1 || x.rank() > r) return false;
  for (int i = 2; i <= r; ++i)
    if ((i <= x.rank() ? x[-i] : 1) != out[-i]) return false;
  return true;
}
/// True when x can enter the kernels as it is against the result `out`.
inline bool fits_kernel(const Shape& x, const Shape& out) {
  return fits_rows(x, out) || fits_column(x, out);
}
/// The kernel form of a op b; both operands must fit it (fits_kernel).
inline Broadcast broadcast(const char* op, const Shape& a, const Shape& b) {
  Broadcast r;
  r.out = broadcast_shape(op, a, b);
  const std::int64_t n = r.out.numel();
  if (n == 0) {  // nothing to compute, nothing to sum
    r.outer = r.inner = 0;
    return r;
  }
  REMAT_ASSERT((a.numel() == n || b.numel() == n) && fits_kernel(a, r.out) && fits_kernel(b, r.out));
  if (a.numel() != n && !fits_rows(a, r.out)) r.a_col = true;
  else r.a_bcast = a.numel() != n;
  if (b.numel() != n && !fits_rows(b, r.out)) r.b_col = true;
  else r.b_bcast = b.numel() != n;
  if (r.a_col || r.b_col) {
    r.inner = r.out[-1];
  } else {
    r.inner = r.a_bcast ? a.numel() : r.b_bcast ? b.numel() : n;
  }
  r.outer = n / r.inner;
  return r;
}

/// x expanded to `out` (x broadcasts to it): per axis where x has 1 and out has n, the rows of
/// x as a column times a row of n ones. Composite ops, so the backward sums the copies.
template <class B>
Tensor<B> expand_to(const Tensor<B>& x, const Shape& out) {
  Shape xs;
  for (int i = x.rank(); i < out.rank(); ++i) xs.push_back(1);
  for (int i = 0; i < x.rank(); ++i) xs.push_back(x.shape()[i]);
  Tensor<B> t = reshape(x, xs);
  for (int k = 0; k < out.rank(); ++k) {
    if (xs[k] == out[k]) continue;
    const std::int64_t pre = xs.prod(0, k), post = xs.prod(k + 1, xs.rank()), n = out[k];
    Tensor<B> ones = make_tensor<B>(&x.tape(), Shape{1, n});
    B::fill(ones.template data<float>(), n, 1.0f);
    Tensor<B> m = matmul(reshape(t, Shape{pre * post, 1}), ones);  // (pre post, n)
    if (post > 1) m = permute(reshape(m, Shape{pre, post, n}), {0, 2, 1});  // (pre, n, post)
    xs[k] = n;
    t = reshape(m, xs);
  }
  return t;
}

/// a op b under NumPy's rule: expands an operand only when the kernels cannot take it as it is.
template <class Op, class B>
Tensor<B> apply_broadcast(const Tensor<B>& a, const Tensor<B>& b, math::BinaryKind kind,
                          const char* op) {
  REMAT_CHECK(a.defined() && b.defined(), "remat::", op, ": input ", a.defined() ? 1 : 0,
              " is an undefined tensor (hint: was it assigned the result of an op?)");
  a.tape().adopt_escaped(op, 0, a);  // NOTE [escaped tensors], under the op's own name
  b.tape().adopt_escaped(op, 1, b);
  const Shape out = broadcast_shape(op, a.shape(), b.shape());
  const std::int64_t n = out.numel();
  if (n == 0 || (fits_kernel(a.shape(), out) && fits_kernel(b.shape(), out) &&
                 (a.numel() == n || b.numel() == n)))
    return apply<Op>(std::array<Tensor<B>, 2>{a, b}, kind, op);
  detail::check_f32(op, "a", a);
  detail::check_f32(op, "b", b);
  Tensor<B> ea = fits_kernel(a.shape(), out) ? a : expand_to(a, out);
  const Tensor<B> eb = fits_kernel(b.shape(), out) ? b : expand_to(b, out);
  if (ea.numel() != n && eb.numel() != n) ea = expand_to(ea, out);
  return apply<Op>(std::array<Tensor<B>, 2>{ea, eb}, kind, op);
}

}  // namespace detail

// y = a op b, broadcast as NOTE [broadcasting].
// d/da: add 1, sub 1, mul b, div 1/b, maximum [a >= b], minimum [a <= b];
// d/db: add 1, sub -1, mul a, div -a/b^2, maximum [a < b], minimum [a > b]
// (core/math.hpp; comparisons have none); a broadcast operand's gradient is summed over the
// leading (broadcast) dimensions.
struct BinaryOp {
  static constexpr const char* name = "binary";
  template <class B>
  struct Saved {
    math::BinaryKind kind{};
    DType t = DType::f32;  // the operands' and the output's
    detail::Broadcast bc;
    // only what the gradients need: mul/div keep the other operand (or its recipe: NOTE
    // [saved as a recipe])
    SavedOperand<B> a, b;
    std::shared_ptr<const Recipe<B>> made;  // the output's recipe, owned here when recorded
    template <class F> void each(F f) const { a.each(f); b.each(f); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& a, const Tensor<B>& b,
                           math::BinaryKind kind, const char* op) {
    detail::check_float(op, "a", a);
    REMAT_CHECK(a.dtype() == b.dtype(), "remat::", op, ": a is ", dtype_name(a.dtype()), " ",
                a.shape().str(), ", b is ", dtype_name(b.dtype()), " ", b.shape().str(),
                " (expected one element type; hint: to_dtype one of them)");
    s.kind = kind;
    s.t = a.dtype();
    s.bc = detail::broadcast(op, a.shape(), b.shape());
    const auto& bc = s.bc;
    auto y = detail::make_tensor<B>(&a.tape(), bc.out);
    const auto af = detail::widened(a), bf = detail::widened(b);  // NOTE [bf16 by widening]
    compute<B>(kind, bc, y.template data<float>(), af.template data<float>(),
               bf.template data<float>());
    keep_operands(s, a, b);
    return detail::narrowed(y, s.t);
  }
  // y = a op b in the kernel form bc says (NOTE [broadcasting])
  template <class B>
  static void compute(math::BinaryKind kind, const detail::Broadcast& bc, float* y,
                      const float* a, const float* b) {
    if (bc.a_col || bc.b_col)
      run_kernel<B>(ColumnForward{kind, y, a, b, bc.outer, bc.inner, bc.a_col});
    else
      B::binary_forward(kind, y, a, b, bc.outer, bc.inner, bc.a_bcast, bc.b_bcast);
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>& a, const Tensor<B>& b,
                   math::BinaryKind kind, const char* op) {
    s.kind = kind;
    s.t = a.dtype();
    s.bc = detail::broadcast(op, a.shape(), b.shape());
    keep_operands(s, a, b);
  }
  // Keep only what the gradients read: d/da of mul needs b, d/db needs a; div needs b for
  // both and a for d/db; maximum and minimum compare both. add, sub and comparisons keep
  // nothing.
  template <class B>
  static void keep_operands(Saved<B>& s, const Tensor<B>& a, const Tensor<B>& b) {
    const auto kind = s.kind;
    const bool ga = a.requires_grad() || a.impl()->segment_grad;
    const bool gb = b.requires_grad() || b.impl()->segment_grad;
    if (kind == math::BinaryKind::mul) {
      if (gb) s.a.keep(a);
      if (ga) s.b.keep(b);
    } else if (kind == math::BinaryKind::div) {
      if (gb) s.a.keep(a);
      s.b.keep(b);
    } else if (kind == math::BinaryKind::maximum || kind == math::BinaryKind::minimum) {
      if (ga || gb) {
        s.a.keep(a);
        s.b.keep(b);
      }
    }
  }
  // The output remade from the state, when the state keeps both operands (NOTE [saved as a
  // recipe]): y = a op b again, the same kernel.
  template <class B>
  static std::shared_ptr<const Recipe<B>> recipe(const Saved<B>& s, const Tensor<B>& out) {
    if (!s.a.defined() || !s.b.defined() || s.t != DType::f32) return nullptr;
    return make_recipe<B>({s.a, s.b}, out,
                          [kind = s.kind, bc = s.bc](const std::vector<Tensor<B>>& in, const Tensor<B>& y) {
                            compute<B>(kind, bc, y.template data<float>(),
                                       in[0].template data<float>(), in[1].template data<float>());
                          });
  }
  // a + b, a - b: da = dy, so a's buffer may be dy itself (not broadcast); a + b's b likewise
  template <class B>
  static int pass_through(const Saved<B>& s) {
    if (s.kind == math::BinaryKind::add || s.kind == math::BinaryKind::sub) {
      if (s.bc.a_full()) return 0;
      if (s.kind == math::BinaryKind::add && s.bc.b_full()) return 1;
    }
    return -1;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {
    // bf16: every tensor widened, every gradient in f32 then handed back (NOTE [bf16 by
    // widening]); an operand kept as a recipe is remade here
    const Tensor<B> gt = detail::widened(dout);
    const Tensor<B> ta = detail::widened(s.a.get()), tb = detail::widened(s.b.get());
    const float* g = gt.template data<float>();
    const float* a = ta.defined() ? ta.template data<float>() : g;  // g: never read
    const float* b = tb.defined() ? tb.template data<float>() : g;
    auto grad = [&](std::size_t i) {  // nothing to write where dout passed through
      return detail::F32Grad<B>(!detail::passed_at(fresh, i) ? dinp[i] : Tensor<B>(),
                                detail::fresh_at(fresh, i));
    };
    detail::F32Grad<B> da = grad(0), db = grad(1);
    if (s.bc.a_col || s.bc.b_col)
      run_kernel<B>(ColumnBackward{s.kind, da.data(), db.data(), g, a, b, s.bc.outer, s.bc.inner,
                                   s.bc.a_col, da.set(), db.set()});
    else
      B::binary_backward(s.kind, da.data(), db.data(), g, a, b, s.bc.outer, s.bc.inner,
                         s.bc.a_bcast, s.bc.b_bcast, da.set(), db.set());
    da.finish();
    db.finish();
  }

  // The column form (NOTE [broadcasting]): y (rows, C) = a op b where a (a_col) or else b is a
  // column (rows), one value a row.
  struct ColumnForward {
    static constexpr const char* name = "binary_column_forward";
    math::BinaryKind kind;
    float* y;
    const float *a, *b;
    std::int64_t rows, C;
    bool a_col;
    void work(Work& w) const {
      w.add(WorkKind::pointwise, 1.0 * rows * C, 4.0 * (2.0 * rows * C + rows));
    }
  };
  // da, db += dy * d(a op b)/da, d/db, each null when not asked for; the column's gradient is
  // its row's sum, added in order along the row (deterministic, no scratch). set_a / set_b: that
  // buffer holds no values yet and is written, not added into.
  struct ColumnBackward {
    static constexpr const char* name = "binary_column_backward";
    math::BinaryKind kind;
    float *da, *db;
    const float *dy, *a, *b;
    std::int64_t rows, C;
    bool a_col, set_a, set_b;
    void work(Work& w) const {
      w.add(WorkKind::pointwise, 3.0 * rows * C, 4.0 * (4.0 * rows * C + 2.0 * rows));
    }
  };
};

/// The kernels of the elementwise family (NOTE [op kernels] in core/kernel.hpp).
using BinaryKernels = KernelList<BinaryOp::ColumnForward, BinaryOp::ColumnBackward>;

// y = scale x + shift.  dy/dx = scale.
struct AffineOp {
  static constexpr const char* name = "affine";
  template <class B>
  struct Saved {
    float scale = 1.0f;
    template <class F> void each(F) const {}
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, float scale, float shift) {
    detail::check_f32("affine", "x", x);
    auto y = detail::empty_like(x);
    B::affine_forward(y.template data<float>(), x.template data<float>(), x.numel(), scale, shift);
    save(s, y, x, scale, shift);
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>&, float scale, float) {
    s.scale = scale;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    B::affine_backward(dinp[0].template data<float>(), dout.template data<float>(), dout.numel(),
                       s.scale);
  }
};

/// a + b (NumPy broadcasting)
template <class B> Tensor<B> add(const Tensor<B>& a, const Tensor<B>& b) {
  return detail::apply_broadcast<BinaryOp>(a, b, math::BinaryKind::add, "add");
}
/// a - b (NumPy broadcasting)
template <class B> Tensor<B> sub(const Tensor<B>& a, const Tensor<B>& b) {
  return detail::apply_broadcast<BinaryOp>(a, b, math::BinaryKind::sub, "sub");
}
/// a * b elementwise (NumPy broadcasting)
template <class B> Tensor<B> mul(const Tensor<B>& a, const Tensor<B>& b) {
  return detail::apply_broadcast<BinaryOp>(a, b, math::BinaryKind::mul, "mul");
}
/// a / b elementwise (NumPy broadcasting)
template <class B> Tensor<B> div(const Tensor<B>& a, const Tensor<B>& b) {
  return detail::apply_broadcast<BinaryOp>(a, b, math::BinaryKind::div, "div");
}
/// max(a, b) elementwise (NumPy broadcasting); the gradient goes to a on a tie.
template <class B> Tensor<B> maximum(const Tensor<B>& a, const Tensor<B>& b) {
  return detail::apply_broadcast<BinaryOp>(a, b, math::BinaryKind::maximum, "maximum");
}
/// min(a, b) elementwise (NumPy broadcasting); the gradient goes to a on a tie.
template <class B> Tensor<B> minimum(const Tensor<B>& a, const Tensor<B>& b) {
  return detail::apply_broadcast<BinaryOp>(a, b, math::BinaryKind::minimum, "minimum");
}

namespace detail {
/// A comparison mask: 1.0f where a op b holds, else 0.0f; a constant (no gradient flows
/// through a comparison, so it is computed unrecorded and detached).
// Inside a checkpoint segment's first run the mask stays the segment's own tensor, as the
// comparison's output was: not listed among the buffers the segment reads from outside (NOTE
// [captured tensors]), whose versions the replay checks.
template <class B>
Tensor<B> compare(const Tensor<B>& a, const Tensor<B>& b, math::BinaryKind kind, const char* op) {
  NoGrad unrecorded;
  const Tensor<B> m = apply_broadcast<BinaryOp>(a, b, kind, op);
  Tensor<B> mask = detach(m);
  mask.impl()->first_run_serial = m.impl()->first_run_serial;
  mask.impl()->first_run_label = m.impl()->first_run_label;
  return mask;
}
template <class B>
Tensor<B> compare(const Tensor<B>& a, float b, math::BinaryKind kind, const char* op) {
  REMAT_CHECK(a.defined(), "remat::", op, ": input 0 is an undefined tensor (hint: was it "
              "assigned the result of an op?)");
  Tensor<B> s = make_tensor<B>(&a.tape(), Shape{1});
  B::fill(s.template data<float>(), 1, b);
  return compare(a, s, kind, op);
}
}  // namespace detail

/// Masks (1.0f where the comparison holds, else 0.0f; no gradient), NumPy broadcasting, for
/// where() and for arithmetic: a > b, a >= b, a < b, a <= b, a == b, a != b.
template <class B> Tensor<B> gt(const Tensor<B>& a, const Tensor<B>& b) { return detail::compare(a, b, math::BinaryKind::gt, "gt"); }
template <class B> Tensor<B> ge(const Tensor<B>& a, const Tensor<B>& b) { return detail::compare(a, b, math::BinaryKind::ge, "ge"); }
template <class B> Tensor<B> lt(const Tensor<B>& a, const Tensor<B>& b) { return detail::compare(a, b, math::BinaryKind::lt, "lt"); }
template <class B> Tensor<B> le(const Tensor<B>& a, const Tensor<B>& b) { return detail::compare(a, b, math::BinaryKind::le, "le"); }
template <class B> Tensor<B> eq(const Tensor<B>& a, const Tensor<B>& b) { return detail::compare(a, b, math::BinaryKind::eq, "eq"); }
template <class B> Tensor<B> ne(const Tensor<B>& a, const Tensor<B>& b) { return detail::compare(a, b, math::BinaryKind::ne, "ne"); }
/// The same against a scalar: gt(x, 0.0f) is 1 where x > 0.
template <class B> Tensor<B> gt(const Tensor<B>& a, float b) { return detail::compare(a, b, math::BinaryKind::gt, "gt"); }
template <class B> Tensor<B> ge(const Tensor<B>& a, float b) { return detail::compare(a, b, math::BinaryKind::ge, "ge"); }
template <class B> Tensor<B> lt(const Tensor<B>& a, float b) { return detail::compare(a, b, math::BinaryKind::lt, "lt"); }
template <class B> Tensor<B> le(const Tensor<B>& a, float b) { return detail::compare(a, b, math::BinaryKind::le, "le"); }
template <class B> Tensor<B> eq(const Tensor<B>& a, float b) { return detail::compare(a, b, math::BinaryKind::eq, "eq"); }
template <class B> Tensor<B> ne(const Tensor<B>& a, float b) { return detail::compare(a, b, math::BinaryKind::ne, "ne"); }

/// scale * x + shift, elementwise
template <class B> Tensor<B> affine(const Tensor<B>& x, float scale, float shift) {
  return detail::apply<AffineOp>(std::array<Tensor<B>, 1>{x}, scale, shift);
}

template <class B> Tensor<B> operator+(const Tensor<B>& a, const Tensor<B>& b) { return add(a, b); }
template <class B> Tensor<B> operator-(const Tensor<B>& a, const Tensor<B>& b) { return sub(a, b); }
template <class B> Tensor<B> operator*(const Tensor<B>& a, const Tensor<B>& b) { return mul(a, b); }
template <class B> Tensor<B> operator/(const Tensor<B>& a, const Tensor<B>& b) { return div(a, b); }
template <class B> Tensor<B> operator+(const Tensor<B>& a, float s) { return affine(a, 1.0f, s); }
template <class B> Tensor<B> operator+(float s, const Tensor<B>& a) { return affine(a, 1.0f, s); }
template <class B> Tensor<B> operator-(const Tensor<B>& a, float s) { return affine(a, 1.0f, -s); }
template <class B> Tensor<B> operator-(float s, const Tensor<B>& a) { return affine(a, -1.0f, s); }
template <class B> Tensor<B> operator*(const Tensor<B>& a, float s) { return affine(a, s, 0.0f); }
template <class B> Tensor<B> operator*(float s, const Tensor<B>& a) { return affine(a, s, 0.0f); }
template <class B> Tensor<B> operator/(const Tensor<B>& a, float s) {
  REMAT_CHECK(s != 0.0f, "remat::div: division of a tensor of shape ", a.shape().str(),
              " by the scalar 0");
  return affine(a, 1.0f / s, 0.0f);
}
template <class B> Tensor<B> operator-(const Tensor<B>& a) { return affine(a, -1.0f, 0.0f); }

}  // namespace remat
