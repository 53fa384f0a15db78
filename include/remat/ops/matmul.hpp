#pragma once
// SPDX-License-Identifier: MIT
// Matrix products: matmul (2-D and batched, with transposes) and linear (x W + b, fused), in
// f32 (the backend's GEMM primitives) or with bf16 operands (the kernel GemmKernel below:
// products and sums in fp32, each output rounded once; NOTE [precision policy] in ops/cast.hpp).

#include <array>

#include "remat/core/apply.hpp"
#include "remat/core/kernel.hpp"
#include "remat/core/math.hpp"
#include "remat/ops/cast.hpp"

namespace remat {
namespace detail {

// The GEMM layout of C = op(A) op(B) over `batch` matrices: op(A) is (M, K), op(B) is (K, N).
struct MatmulPlan {
  bool ta = false, tb = false;
  std::int64_t batch = 1, M = 0, N = 0, K = 0;
  std::int64_t sa = 0, sb = 0, sc = 0;  // batch strides (sb = 0: B shared by every batch)
  std::int64_t lda() const { return ta ? M : K; }
  std::int64_t ldb() const { return tb ? K : N; }
};

inline MatmulPlan plan_matmul(const Shape& a, const Shape& b, bool ta, bool tb, Shape& out) {
  REMAT_CHECK(a.rank() >= 2 && b.rank() >= 2, "remat::matmul: needs matrices: a is ", a.str(),
              ", b is ", b.str(), " (expected rank >= 2 for both; reshape a vector to [1, n])");
  MatmulPlan p;
  p.ta = ta;
  p.tb = tb;
  p.M = ta ? a[-1] : a[-2];
  p.K = ta ? a[-2] : a[-1];
  const std::int64_t kb = tb ? b[-1] : b[-2];
  p.N = tb ? b[-2] : b[-1];
  REMAT_CHECK(p.K == kb, "remat::matmul: inner dimensions differ: a is ", a.str(),
              (ta ? " (transposed)" : ""), ", b is ", b.str(), (tb ? " (transposed)" : ""),
              "; op(a) has ", p.K, " columns but op(b) has ", kb, " rows");
  if (b.rank() == 2) {
    p.batch = a.prod(0, a.rank() - 2);
    if (!ta) {  // fold the batch into M: one large GEMM
      p.M *= p.batch;
      p.batch = 1;
    }
  } else {
    REMAT_CHECK(a.rank() == b.rank() && a.sub(0, a.rank() - 2) == b.sub(0, b.rank() - 2),
                "remat::matmul: batch dimensions differ: a is ", a.str(), ", b is ", b.str(),
                " (expected equal leading dimensions, or b of rank 2 shared by every batch)");
    p.batch = a.prod(0, a.rank() - 2);
    p.sb = b[-1] * b[-2];
  }
  p.sa = a[-1] * a[-2];
  p.sc = (ta ? a[-1] : a[-2]) * p.N;
  out = a.sub(0, a.rank() - 2);
  out.push_back(ta ? a[-1] : a[-2]);
  out.push_back(p.N);
  return p;
}

/// The element type of a product's operands a and b: both f32, or both bf16 (the output's type).
template <class B>
DType product_dtype(const char* op, const char* an, const Tensor<B>& a, const char* bn,
                    const Tensor<B>& b) {
  REMAT_CHECK((a.dtype() == DType::f32 || a.dtype() == DType::bf16) && a.dtype() == b.dtype(),
              "remat::", op, ": ", an, " is ", dtype_name(a.dtype()), " ", a.shape().str(), " and ",
              bn, " is ", dtype_name(b.dtype()), " ", b.shape().str(), "; expected both f32 or both "
              "bf16 (hint: to_dtype(", a.dtype() == DType::f32 ? an : bn, ", DType::bf16) once, "
              "before the product)");
  return a.dtype();
}

}  // namespace detail

// C (M, N) = op(A) op(B) [+ bias (N)] [+ R (M, N)] [+ C] over `batch` matrices at strides sa,
// sb, sc, with A and B of type `ab` (bf16) and C (and R) of type `ct`: every product and sum in
// fp32, C rounded once (NOTE [precision policy] in ops/cast.hpp). Row-major, as the gemm
// primitive: A is (M, K), or (K, M) when ta; B (K, N), or (N, K) when tb. sc == 0 with
// batch > 1: one C summed over the batch (in fp32, then rounded once). The GEMM of matmul and
// linear when their operands are bf16.
struct GemmKernel {
  static constexpr const char* name = "gemm_bf16";
  void* c;
  DType ct;
  std::int64_t ldc, sc;
  const void* a;
  std::int64_t lda, sa;
  const void* b;
  std::int64_t ldb, sb;
  DType ab;
  const float* bias;  // (N) or null
  const void* r;      // of type ct, at ldc and sc; or null
  bool ta, tb;
  bool accumulate;  // C += the rest; else written
  std::int64_t M, N, K, batch;
  void work(Work& w) const {
    const double in = static_cast<double>(dtype_size(ab)), out = static_cast<double>(dtype_size(ct));
    const double mn = static_cast<double>(M) * static_cast<double>(N);
    w.add(WorkKind::gemm, 2.0 * static_cast<double>(batch) * mn * static_cast<double>(K),
          static_cast<double>(batch) *
              (in * static_cast<double>(K) * static_cast<double>(M + N) +
               out * mn * (1.0 + (accumulate ? 1.0 : 0.0) + (r ? 1.0 : 0.0))));
  }
};

// y (N) = the column sums of x (rows, N) (+ y when add), summed down the rows in fp32 in row
// order, rounded once to y's type: a bias's gradient from a bf16 dy.
struct ColumnSumKernel {
  static constexpr const char* name = "column_sum";
  void* y;
  DType yt;
  const void* x;
  DType xt;
  std::int64_t rows, N;
  bool add;
  void work(Work& w) const {
    w.add(WorkKind::pointwise, static_cast<double>(rows) * static_cast<double>(N),
          static_cast<double>(rows) * static_cast<double>(N) * static_cast<double>(dtype_size(xt)) +
              static_cast<double>(N) * static_cast<double>(dtype_size(yt)) * (add ? 2.0 : 1.0));
  }
};

using MatmulKernels = KernelList<GemmKernel, ColumnSumKernel>;

// C = op(A) op(B).
//   dA = dC op(B)^T  (stored transposed when ta: dA = op(B) dC^T)
//   dB = op(A)^T dC  (stored transposed when tb: dB = dC^T op(A))
struct MatmulOp {
  static constexpr const char* name = "matmul";
  template <class B>
  struct Saved {
    detail::MatmulPlan p;
    SavedOperand<B> a, b;  // or their recipes: a bf16 copy of a parameter keeps the parameter
    template <class F> void each(F f) const { a.each(f); b.each(f); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& a, const Tensor<B>& b, bool ta, bool tb) {
    const DType dt = detail::product_dtype("matmul", "a", a, "b", b);
    Shape out;
    s.p = detail::plan_matmul(a.shape(), b.shape(), ta, tb, out);
    auto c = detail::make_tensor<B>(&a.tape(), out, dt);
    const auto& p = s.p;
    if (dt != DType::f32) {
      run_gemm<B>(p, p.ta, p.tb, c.template data<void>(), dt, p.N, p.sc, a.template data<void>(),
               p.lda(), p.sa, b.template data<void>(), p.ldb(), p.sb, dt, false, p.M, p.N, p.K);
      keep_operands(s, a, b);
      return c;
    }
    B::gemm_batched(p.ta, p.tb, p.M, p.N, p.K, 1.0f, a.template data<float>(), p.lda(), p.sa,
                    b.template data<float>(), p.ldb(), p.sb, 0.0f, c.template data<float>(), p.N,
                    p.sc, p.batch);
    keep_operands(s, a, b);
    return c;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>& a, const Tensor<B>& b, bool ta,
                   bool tb) {
    Shape out;
    s.p = detail::plan_matmul(a.shape(), b.shape(), ta, tb, out);
    keep_operands(s, a, b);
  }
  // dA needs B and dB needs A: keep each only when the other operand wants a gradient.
  template <class B>
  static void keep_operands(Saved<B>& s, const Tensor<B>& a, const Tensor<B>& b) {
    if (b.requires_grad() || b.impl()->segment_grad) s.a.keep(a);
    if (a.requires_grad() || a.impl()->segment_grad) s.b.keep(b);
  }
  // One bf16 product (GemmKernel) over p.batch matrices.
  template <class B>
  static void run_gemm(const detail::MatmulPlan& p, bool ta, bool tb, void* c, DType ct,
                       std::int64_t ldc, std::int64_t sc, const void* a, std::int64_t lda,
                       std::int64_t sa, const void* b, std::int64_t ldb, std::int64_t sb, DType ab,
                       bool accumulate, std::int64_t M, std::int64_t N, std::int64_t K) {
    run_kernel<B>(GemmKernel{c, ct, ldc, sc, a, lda, sa, b, ldb, sb, ab, nullptr, nullptr, ta, tb,
                             accumulate, M, N, K, p.batch});
  }
  // A fresh buffer (NOTE [fresh gradient buffers]) is written with beta 0, unless the batch
  // sums into one shared matrix (stride 0 over batch > 1): that is zeroed and added into (the
  // bf16 kernel sums the batch itself). The bf16 products: the same four forms through
  // GemmKernel, each gradient in its buffer's type.
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {
    const auto& p = s.p;
    if (dout.dtype() != DType::f32) {
      const void* dc = dout.template data<void>();
      const DType dt = dout.dtype();
      if (dinp[0].defined()) {
        void* da = dinp[0].template data<void>();
        const Tensor<B> b_kept = s.b.get();  // remade here when kept as a recipe
        const void* b = b_kept.template data<void>();
        const bool acc = !detail::fresh_at(fresh, 0);
        if (!p.ta)
          run_gemm<B>(p, false, !p.tb, da, dinp[0].dtype(), p.K, p.sa, dc, p.N, p.sc, b, p.ldb(),
                      p.sb, dt, acc, p.M, p.K, p.N);
        else
          run_gemm<B>(p, p.tb, true, da, dinp[0].dtype(), p.M, p.sa, b, p.ldb(), p.sb, dc, p.N,
                      p.sc, dt, acc, p.K, p.M, p.N);
      }
      if (dinp[1].defined()) {
        void* db = dinp[1].template data<void>();
        const Tensor<B> a_kept = s.a.get();  // remade here when kept as a recipe
        const void* a = a_kept.template data<void>();
        const bool acc = !detail::fresh_at(fresh, 1);
        if (!p.tb)
          run_gemm<B>(p, !p.ta, false, db, dinp[1].dtype(), p.N, p.sb, a, p.lda(), p.sa, dc, p.N,
                      p.sc, dt, acc, p.K, p.N, p.M);
        else
          run_gemm<B>(p, true, p.ta, db, dinp[1].dtype(), p.K, p.sb, dc, p.N, p.sc, a, p.lda(),
                      p.sa, dt, acc, p.N, p.K, p.M);
      }
      return;
    }
    const float* dc = dout.template data<float>();
    auto beta = [&](std::size_t i, std::int64_t stride) {
      if (!detail::fresh_at(fresh, i)) return 1.0f;
      if (stride != 0 || p.batch == 1) return 0.0f;
      B::fill(dinp[i].template data<float>(), dinp[i].numel(), 0.0f);
      return 1.0f;
    };
    if (dinp[0].defined()) {
      float* da = dinp[0].template data<float>();
      const Tensor<B> b_kept = s.b.get();  // remade here when kept as a recipe
      const float* b = b_kept.template data<float>();
      const float ba = beta(0, p.sa);
      if (!p.ta)
        B::gemm_batched(false, !p.tb, p.M, p.K, p.N, 1.0f, dc, p.N, p.sc, b, p.ldb(), p.sb, ba,
                        da, p.K, p.sa, p.batch);
      else
        B::gemm_batched(p.tb, true, p.K, p.M, p.N, 1.0f, b, p.ldb(), p.sb, dc, p.N, p.sc, ba,
                        da, p.M, p.sa, p.batch);
    }
    if (dinp[1].defined()) {
      float* db = dinp[1].template data<float>();
      const Tensor<B> a_kept = s.a.get();  // remade here when kept as a recipe
      const float* a = a_kept.template data<float>();
      const float bb = beta(1, p.sb);
      if (!p.tb)
        B::gemm_batched(!p.ta, false, p.K, p.N, p.M, 1.0f, a, p.lda(), p.sa, dc, p.N, p.sc, bb,
                        db, p.N, p.sb, p.batch);
      else
        B::gemm_batched(true, p.ta, p.N, p.K, p.M, 1.0f, dc, p.N, p.sc, a, p.lda(), p.sa, bb,
                        db, p.K, p.sb, p.batch);
    }
  }
};

// y (R, out) = x (R, in) W (in, out) + b (out) [+ r (R, out)]   [W in the GPT-2 "Conv1D" layout]
//   dx += dy W^T;  dW += x^T dy;  db += sum_rows dy;  dr += dy
// With a residual r the sum is one GEMM (r its C operand: no separate add, no buffer for x W + b)
// and r's gradient is dy itself, passed through (NOTE [fresh gradient buffers]).
struct LinearOp {
  static constexpr const char* name = "linear";
  template <class B>
  struct Saved {
    std::int64_t rows = 0, in = 0, out = 0;
    bool residual = false;
    Tensor<B> x;
    SavedOperand<B> w;  // or its recipe: a bf16 copy of a parameter keeps the parameter
    template <class F> void each(F f) const { f(x); w.each(f); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, const Tensor<B>& w,
                           const Tensor<B>& b) {
    return run<B>(s, x, w, b, nullptr);
  }
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, const Tensor<B>& w, const Tensor<B>& b,
                           const Tensor<B>& r) {
    return run(s, x, w, b, &r);
  }
  template <class B>
  static Tensor<B> run(Saved<B>& s, const Tensor<B>& x, const Tensor<B>& w, const Tensor<B>& b,
                       const Tensor<B>* r) {
    const DType dt = detail::product_dtype("linear", "x", x, "weight", w);
    detail::check_f32("linear", "bias", b);
    REMAT_CHECK(w.rank() == 2 && x.rank() >= 1 && x.shape()[-1] == w.size(0),
                "remat::linear: x is ", x.shape().str(), ", weight is ", w.shape().str(),
                " (expected weight [in, out] with in = the last dimension of x)");
    REMAT_CHECK(b.shape() == Shape{w.size(1)}, "remat::linear: bias is ", b.shape().str(),
                ", expected [", w.size(1), "] to match weight ", w.shape().str());
    const Shape out_shape = x.shape().with(-1, w.size(1));
    if (r) {
      REMAT_CHECK(r->dtype() == dt, "remat::linear: residual is ", dtype_name(r->dtype()), " ",
                  r->shape().str(), " for ", dtype_name(dt), " x and weight (expected ",
                  dtype_name(dt), ", the output's type)");
      REMAT_CHECK(r->shape() == out_shape, "remat::linear: residual is ", r->shape().str(),
                  " for x ", x.shape().str(), " and weight ", w.shape().str(), " (expected ",
                  out_shape.str(), ", the output's shape; hint: add a broadcast residual apart)");
    }
    const std::int64_t in = w.size(0), out = w.size(1), rows = x.numel() / (in ? in : 1);
    auto y = detail::make_tensor<B>(&x.tape(), out_shape, dt);
    if (dt != DType::f32)
      run_kernel<B>(GemmKernel{y.template data<void>(), dt, out, 0, x.template data<void>(), in, 0,
                               w.template data<void>(), out, 0, dt, b.template data<float>(),
                               r ? r->template data<void>() : nullptr, false, false, false, rows,
                               out, in, 1});
    else
      B::linear_forward(y.template data<float>(), x.template data<float>(), w.template data<float>(),
                      b.template data<float>(), r ? r->template data<float>() : nullptr, rows, in,
                      out);
    save(s, y, x, w, b);
    s.residual = r != nullptr;
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>& x, const Tensor<B>& w,
                   const Tensor<B>&) {
    s.in = w.size(0);
    s.out = w.size(1);
    s.rows = x.numel() / (s.in ? s.in : 1);
    if (w.requires_grad() || w.impl()->segment_grad) s.x = x;
    if (x.requires_grad() || x.impl()->segment_grad) s.w.keep(w);
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>& y, const Tensor<B>& x, const Tensor<B>& w,
                   const Tensor<B>& b, const Tensor<B>&) {
    save(s, y, x, w, b);
    s.residual = true;
  }
  // the residual's gradient is dy unchanged
  template <class B>
  static int pass_through(const Saved<B>& s) {
    return s.residual ? 3 : -1;
  }
  // dx = dy W^T, dW = x^T dy, db = column sums of dy; each written, not added, into a fresh
  // buffer (GEMM beta 0: NOTE [fresh gradient buffers]). A fresh db comes out of dW's GEMM
  // (B::linear_backward_weight: one cuBLASLt call on the GPU); one that adds is summed apart.
  // dr = dy: nothing to do where dy passed through, else a copy (fresh) or an add.
  // bf16: dx and dW through GemmKernel in their buffers' types (dW f32 for a bf16 copy of an
  // f32 weight), db the fp32 column sums of dy.
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {
    if (dout.dtype() != DType::f32) {
      const void* dy = dout.template data<void>();
      const DType dt = dout.dtype();
      if (dinp.size() > 3 && dinp[3].defined() && !detail::passed_at(fresh, 3))
        detail::convert_into(dinp[3], dout, !detail::fresh_at(fresh, 3));
      if (dinp[0].defined()) {
        const Tensor<B> w = s.w.get();  // remade here when kept as a recipe
        run_kernel<B>(GemmKernel{dinp[0].template data<void>(), dinp[0].dtype(), s.in, 0, dy, s.out,
                                 0, w.template data<void>(), s.out, 0, dt, nullptr, nullptr,
                                 false, true, !detail::fresh_at(fresh, 0), s.rows, s.in, s.out, 1});
      }
      if (dinp[1].defined())
        run_kernel<B>(GemmKernel{dinp[1].template data<void>(), dinp[1].dtype(), s.out, 0,
                                 s.x.template data<void>(), s.in, 0, dy, s.out, 0, dt, nullptr,
                                 nullptr, true, false, !detail::fresh_at(fresh, 1), s.in, s.out,
                                 s.rows, 1});
      if (dinp[2].defined())
        run_kernel<B>(ColumnSumKernel{dinp[2].template data<void>(), dinp[2].dtype(), dy, dt,
                                      s.rows, s.out, !detail::fresh_at(fresh, 2)});
      return;
    }
    const float* dy = dout.template data<float>();
    detail::gradient_is_dout(dinp, 3, dout, fresh);
    if (dinp[0].defined()) {
      const Tensor<B> w = s.w.get();
      B::gemm(false, true, s.rows, s.in, s.out, 1.0f, dy, s.out, w.template data<float>(),
              s.out, detail::fresh_at(fresh, 0) ? 0.0f : 1.0f, dinp[0].template data<float>(), s.in);
    }
    const float beta_w = detail::fresh_at(fresh, 1) ? 0.0f : 1.0f;
    if (dinp[1].defined() && dinp[2].defined() && detail::fresh_at(fresh, 2)) {
      B::linear_backward_weight(dinp[1].template data<float>(), dinp[2].template data<float>(),
                                s.x.template data<float>(), dy, s.rows, s.in, s.out, beta_w);
      return;
    }
    if (dinp[1].defined())
      B::gemm(true, false, s.in, s.out, s.rows, 1.0f, s.x.template data<float>(), s.in, dy, s.out,
              beta_w, dinp[1].template data<float>(), s.out);
    if (dinp[2].defined())
      B::binary_backward(math::BinaryKind::add, nullptr, dinp[2].template data<float>(), dy, dy,
                         dy, s.rows, s.out, false, true, false, detail::fresh_at(fresh, 2));
  }
};

/// op(a) op(b) with op = transpose when ta / tb. a (..., M, K), b (K, N) or (..., K, N); both
/// f32, or both bf16 (the product's sums in fp32, the output bf16).
template <class B>
Tensor<B> matmul(const Tensor<B>& a, const Tensor<B>& b, bool ta = false, bool tb = false) {
  return detail::apply<MatmulOp>(std::array<Tensor<B>, 2>{a, b}, ta, tb);
}
/// x (..., in) w (in, out) + bias (out) -> (..., out), one GEMM. x and w both f32, or both
/// bf16 (the output bf16, the bias f32, added before the output's one rounding).
template <class B>
Tensor<B> linear(const Tensor<B>& x, const Tensor<B>& w, const Tensor<B>& bias) {
  return detail::apply<LinearOp>(std::array<Tensor<B>, 3>{x, w, bias});
}
/// residual (..., out) + x (..., in) w (in, out) + bias (out), one GEMM: a transformer's
/// residual connection without an add of its own (residual + linear(x, w, bias) in one op).
template <class B>
Tensor<B> linear(const Tensor<B>& x, const Tensor<B>& w, const Tensor<B>& bias,
                 const Tensor<B>& residual) {
  return detail::apply<LinearOp>(std::array<Tensor<B>, 4>{x, w, bias, residual});
}

}  // namespace remat
