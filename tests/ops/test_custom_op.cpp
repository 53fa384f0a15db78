// SPDX-License-Identifier: MIT
// The public custom-op API (remat/core/custom_op.hpp, issue 26): an op written outside the
// library, with host kernels or with a backward of tensor ops, of one output or several,
// checked against finite differences, checkpointed bit for bit, and estimated to the byte by
// the shape-only twin.

#include <cmath>

#include <remat/checkpoint/policy.hpp>
#include <remat/core/custom_op.hpp>
#include <remat/plan/estimate.hpp>
#include <remat/testing/equivalence.hpp>
#include <remat/testing/gradcheck.hpp>

#include "support/gradcheck.hpp"
#include "support/require_error.hpp"

using namespace remat;
using remat_test::param;
using remat_test::require_error;
using remat_test::T;
using V = std::vector<T>;

namespace {

// y = x sigmoid(b x), a kernel of host loops; the backward needs x only.
// dy/dx = s + b x s (1 - s),  s = sigmoid(b x)
struct SwishOp {
  static constexpr const char* name = "swish";
  template <class B>
  struct Saved {
    Tensor<B> x;
    float b = 1.0f;
    template <class F> void each(F f) const { f(x); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, float b) {
    Tensor<B> y = new_tensor_like(x);
    if constexpr (has_values_v<B>) {
      const float* xs = x.template data<float>();
      float* ys = y.template data<float>();
      for (std::int64_t i = 0; i < x.numel(); ++i) ys[i] = xs[i] / (1.0f + std::exp(-b * xs[i]));
    }
    s.x = x;
    s.b = b;
    return y;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dy, std::vector<Tensor<B>>& dx) {
    if (!dx[0].defined()) return;
    if constexpr (has_values_v<B>) {
      const float* xs = s.x.template data<float>();
      const float* g = dy.template data<float>();
      float* d = dx[0].template data<float>();
      for (std::int64_t i = 0; i < s.x.numel(); ++i) {
        const float sg = 1.0f / (1.0f + std::exp(-s.b * xs[i]));
        d[i] += g[i] * (sg + s.b * xs[i] * sg * (1.0f - sg));
      }
    }
  }
};

// y = a * silu(g): SwiGLU's product of two inputs, its backward written with tensor ops
// (which the ledger and the estimate count like any others).
// da = dy silu(g);  dg = dy a sigmoid(g) (1 + g (1 - sigmoid(g)))
struct UserSwiGluOp {
  static constexpr const char* name = "swiglu";
  template <class B>
  struct Saved {
    Tensor<B> a, g;
    template <class F> void each(F f) const { f(a); f(g); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& a, const Tensor<B>& g) {
    s.a = a;
    s.g = g;
    return a * silu(g);  // (unrecorded: apply_op records this op, not its insides)
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dy, std::vector<Tensor<B>>& dx) {
    if (dx[0].defined()) add_grad(dx[0], dy * silu(s.g));
    if (dx[1].defined()) {
      const Tensor<B> sg = sigmoid(s.g);
      add_grad(dx[1], dy * s.a * sg * (1.0f + s.g * (1.0f - sg)));
    }
  }
};

template <class B>
Tensor<B> user_swiglu(const Tensor<B>& a, const Tensor<B>& g) {
  return apply_op<UserSwiGluOp>(std::array<Tensor<B>, 2>{a, g});
}

// Two outputs of one pass (NOTE [ops of several outputs]): over x (rows, C) and w (C),
// y = x w (rows, C) and each row's sum of squares q (rows).
// dx = dy w + 2 x dq (dq broadcast over the row);  dw = sum_rows dy x
struct ScaleAndSquaresOp {
  static constexpr const char* name = "scale_and_squares";
  static constexpr std::size_t outputs = 2;
  template <class B>
  struct Saved {
    Tensor<B> x, w;
    template <class F> void each(F f) const { f(x); f(w); }
  };
  template <class B>
  static std::array<Shape, 2> output_shapes(const Tensor<B>& x, const Tensor<B>& w) {
    REMAT_CHECK(x.rank() == 2 && w.shape() == Shape{x.size(1)}, "scale_and_squares: x is ",
                x.shape().str(), ", w is ", w.shape().str(), " (expected [rows, C] and [C])");
    return {x.shape(), Shape{x.size(0)}};
  }
  template <class B>
  static void forward(Saved<B>& s, std::array<Tensor<B>, 2>& y, const Tensor<B>& x,
                      const Tensor<B>& w) {
    if constexpr (has_values_v<B>) {
      const std::int64_t rows = x.size(0), C = x.size(1);
      const float *xs = x.template data<float>(), *ws = w.template data<float>();
      float *ys = y[0].template data<float>(), *qs = y[1].template data<float>();
      for (std::int64_t r = 0; r < rows; ++r) {
        float q = 0.0f;
        for (std::int64_t c = 0; c < C; ++c) {
          ys[r * C + c] = xs[r * C + c] * ws[c];
          q += xs[r * C + c] * xs[r * C + c];
        }
        qs[r] = q;
      }
    }
    s.x = x;
    s.w = w;
  }
  template <class B>
  static void backward(const Saved<B>& s, const std::array<Tensor<B>, 2>& dy,
                       std::vector<Tensor<B>>& dx) {
    if constexpr (has_values_v<B>) {
      const std::int64_t rows = s.x.size(0), C = s.x.size(1);
      const float *xs = s.x.template data<float>(), *ws = s.w.template data<float>();
      const float *g = dy[0].template data<float>(), *gq = dy[1].template data<float>();
      float* d = dx[0].defined() ? dx[0].template data<float>() : nullptr;
      float* dw = dx[1].defined() ? dx[1].template data<float>() : nullptr;
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < C; ++c) {
          if (d) d[r * C + c] += g[r * C + c] * ws[c] + 2.0f * xs[r * C + c] * gq[r];
          if (dw) dw[c] += g[r * C + c] * xs[r * C + c];
        }
    }
  }
};

template <class B>
std::array<Tensor<B>, 2> scale_and_squares(const Tensor<B>& x, const Tensor<B>& w) {
  return apply_op_n<ScaleAndSquaresOp>(std::array<Tensor<B>, 2>{x, w});
}
// Both outputs in one tensor, for the checks that take one: (rows C + rows)
template <class B>
Tensor<B> both(const Tensor<B>& x, const Tensor<B>& w) {
  const auto y = scale_and_squares(x, w);
  return concat(std::vector<Tensor<B>>{reshape(y[0], {y[0].numel()}), y[1] * 0.5f}, 0);
}

}  // namespace

TEST_CASE("a custom op of two outputs: values, gradients, an unread output, the ledger",
          "[ops][custom]") {
  Tape<Cpu> tape(5);
  const T x = param(tape, {6, 7}, 1), w = param(tape, {7}, 2);
  remat_test::gradcheck(tape, [](const V& v) { return both(v[0], v[1]); }, {x, w});
  {  // the values, against the composed ops
    const auto y = scale_and_squares(x, w);
    CHECK(y[0].shape() == Shape{6, 7});
    CHECK(y[1].shape() == Shape{6});
    const auto a = y[0].to_vector(), b = (x * w).to_vector();
    const auto q = y[1].to_vector(), r = sum(square(x), -1).to_vector();
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
    for (std::size_t i = 0; i < q.size(); ++i) CHECK(q[i] == Approx(r[i]).epsilon(1e-6));
  }
  tape.clear();
  x.clear_grad();  // (the gradient check's)
  w.clear_grad();
  {  // only the second output read: the first's gradient is zeros, so dx = 2 x and dw = 0
    tape.backward(sum(scale_and_squares(x, w)[1]));
    const auto gx = x.grad().to_vector(), xs = x.to_vector();
    for (std::size_t i = 0; i < gx.size(); ++i) CHECK(gx[i] == 2.0f * xs[i]);
    for (float g : w.grad().to_vector()) CHECK(g == 0.0f);
    x.clear_grad();
    w.clear_grad();
  }
  {  // one buffer for both outputs: one allocation, and saved by a later op it counts as saved
    const auto before = memory_stats<Cpu>();
    NoGrad off;
    const auto y = scale_and_squares(x, w);
    CHECK(memory_stats<Cpu>().alloc_count - before.alloc_count == 1);
    CHECK(memory_stats<Cpu>().live_total - before.live_total == (6 * 7 + 6) * 4);
  }
  {
    const auto before = memory_stats<Cpu>().live_of(Category::activations);
    // exp saves its input, a part of the buffer: the whole buffer becomes activations, beside
    // x and w (saved by the op; the test's params are temporaries until saved)
    const T z = exp(scale_and_squares(x, w)[1]);
    CHECK(memory_stats<Cpu>().live_of(Category::activations) - before ==
          (6 * 7 + 6) * 4 + (6 * 7 + 7) * 4);
    tape.clear();
  }
  require_error([&] { (void)scale_and_squares(x, param(tape, {5}, 3)); },
                {"scale_and_squares", "[6, 7]", "[5]"});
}

TEST_CASE("a custom op of two outputs under checkpoint() and on the shape-only twin",
          "[ops][custom]") {
  Tape<Cpu> tape(7);
  const T x = param(tape, {8, 5}, 4), w = param(tape, {5}, 5), m = param(tape, {5, 5}, 6, 0.3f);
  auto f = [&](const T& in) {
    const auto y = scale_and_squares(matmul(in, m), w);
    return matmul(y[0], m) * reshape(y[1], {8, 1});  // each output read by a later op
  };
  for (const Policy& p : {policy::recompute_all(), policy::megatron_selective(),
                          policy::save_all_but_attention()}) {
    INFO("policy " << p.name);
    const auto r = testing::compare_runs(
        tape,
        [&](bool ck) { return sum(ck ? checkpoint(CheckpointOptions{}.policy(p), f, x) : f(x)); },
        {x, w, m});
    INFO(r.detail);
    CHECK(r.equal);
  }
  auto program = [](auto& t) {
    using B = typename std::decay_t<decltype(t)>::backend;
    const Tensor<B> p = t.randn({64, 32}, 1.0f, 1, true), q = t.randn({32}, 1.0f, 2, true);
    reset_peak_memory<B>();
    const auto y = scale_and_squares(p, q);
    t.backward(sum(y[0] * 2.0f) + sum(exp(y[1] * 0.01f)));
  };
  const MemoryStats est = estimate_memory<Cpu>([&](auto& t) { program(t); });
  const MemoryStats before_real = memory_stats<Cpu>();
  {
    Tape<Cpu> t2;
    program(t2);
  }
  const MemoryStats real = memory_stats<Cpu>();
  CHECK(est.peak_total == real.peak_total - before_real.live_total);
  CHECK(est.peak_total > (64 * 32 + 64) * 4);
}

TEST_CASE("a custom op with host kernels matches finite differences and the composed version",
          "[ops][custom]") {
  Tape<Cpu> tape;
  const T x = param(tape, {4, 9}, 1, 2.0f);
  remat_test::gradcheck(tape, [](const V& v) { return apply_op<SwishOp>(v[0], 1.7f); }, {x});
  const auto a = apply_op<SwishOp>(x, 1.0f).to_vector(), b = silu(x).to_vector();
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-6));
}

TEST_CASE("a custom op with a backward of tensor ops: gradients, checkpoint, estimate",
          "[ops][custom]") {
  Tape<Cpu> tape(3);
  const T a = param(tape, {3, 10}, 2), g = param(tape, {3, 10}, 3);
  remat_test::gradcheck(tape, [](const V& v) { return user_swiglu(v[0], v[1]); }, {a, g});
  // The op's forward ran ops inside, but the tape recorded one node, not four.
  const std::size_t before = tape.num_nodes();
  const T y = user_swiglu(a, g);
  CHECK(tape.num_nodes() == before + 1);
  CHECK(y.requires_grad());
  tape.clear();

  // Inside checkpoint(): the replay runs it again; gradients bitwise the plain run's.
  const T w = param(tape, {10, 10}, 4, 0.3f);
  const auto r = testing::compare_runs(
      tape,
      [&](bool ck) {
        auto f = [&](const T& in) { return matmul(user_swiglu(in, apply_op<SwishOp>(in, 1.0f)), w); };
        return sum(ck ? checkpoint(f, a) : f(a));
      },
      {a, w});
  INFO(r.detail);
  CHECK(r.equal);

  // The shape-only twin runs the same ops (no values): its peak is the CPU ledger's.
  auto program = [](auto& t) {
    using B = typename std::decay_t<decltype(t)>::backend;
    const Tensor<B> p = t.randn({64, 32}, 1.0f, 1, true), q = t.randn({64, 32}, 1.0f, 2, true);
    reset_peak_memory<B>();
    t.backward(sum(apply_op<SwishOp>(user_swiglu(p, q), 0.5f)));
  };
  const MemoryStats est = estimate_memory<Cpu>([&](auto& t) { program(t); });
  const MemoryStats before_real = memory_stats<Cpu>();
  {
    Tape<Cpu> t2;
    program(t2);
  }
  const MemoryStats real = memory_stats<Cpu>();
  CHECK(est.peak_total == real.peak_total - before_real.live_total);
  // at the peak, the backward's own temporaries (sigmoid(g), products) are on top of the state
  CHECK(est.peak_total > 4 * 64 * 32 * 4);
}

TEST_CASE("the custom-op helpers check what they are given", "[ops][custom]") {
  Tape<Cpu> tape;
  T grad = tape.zeros({2, 3});
  require_error([&] { add_grad(grad, tape.zeros({4})); },
                {"remat::add_grad", "[4]", "[2, 3]", "6 elements"});
  T none;
  add_grad(none, tape.zeros({4}));  // an input that needs no gradient: nothing to add
  require_error([&] { (void)apply_op<SwishOp>(T(), 1.0f); }, {"remat::swish", "undefined"});
  require_error([&] { (void)new_tensor(tape, Shape{2, -1}); }, {"remat::new_tensor"});
  CHECK(new_tensor(tape, {2, 5}).shape() == Shape{2, 5});
  CHECK(new_tensor_like(grad).bytes() == 24);
}
