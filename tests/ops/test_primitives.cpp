// SPDX-License-Identifier: MIT
// The primitives a new layer is composed of (issue 26): the unary maps of core/math.hpp,
// maximum / minimum, comparison masks, where, max over an axis, full / ones / arange. Their
// gradients against finite differences, their values against the scalar formulas, masks
// without gradients, the errors, and a block composed of them (RMSNorm, SwiGLU) checkpointed
// bit for bit and estimated to the byte; the public gradcheck against a wrong backward.

#include <cmath>
#include <limits>

#include <remat/plan/estimate.hpp>
#include <remat/testing/equivalence.hpp>
#include <remat/testing/gradcheck.hpp>

#include "support/gradcheck.hpp"
#include "support/require_error.hpp"

using namespace remat;
using remat_test::gradcheck;
using remat_test::param;
using remat_test::require_error;
using remat_test::T;
using V = std::vector<T>;

namespace {

/// A leaf requiring grad holding 2 n values spread over [lo, hi], none within `gap` of the
/// points in `avoid` (the kinks of abs and clamp).
T spread(Tape<Cpu>& tape, std::int64_t n, float lo, float hi, std::vector<float> avoid = {},
         float gap = 0.06f) {
  std::vector<float> h;
  for (std::int64_t i = 0; static_cast<std::int64_t>(h.size()) < 2 * n; ++i) {
    const float x = lo + (hi - lo) * static_cast<float>((i * 37) % 101) / 100.0f;
    bool near = false;
    for (float a : avoid) near = near || std::fabs(x - a) < gap;
    if (!near) h.push_back(x);
  }
  T t = tape.input({2, n}, h);
  t.set_requires_grad(true);
  return t;
}

template <class B>
struct LlamaMlp {  // RMSNorm, then a SwiGLU MLP with a residual, as a Llama layer has them
  Tensor<B> g, w1, w3, w2;
  LlamaMlp(Tape<B>& t, std::int64_t C, std::int64_t H)
      : g(t.full({C}, 1.0f, true)), w1(t.randn({C, H}, 0.2f, 2, true)),
        w3(t.randn({C, H}, 0.2f, 3, true)), w2(t.randn({H, C}, 0.2f, 4, true)) {}
  Tensor<B> operator()(const Tensor<B>& x) const {
    const Tensor<B> ms = mean(square(x), -1, true);
    const Tensor<B> h = x * rsqrt(ms + 1e-5f) * g;
    return x + matmul(silu(matmul(h, w1)) * matmul(h, w3), w2);
  }
};

}  // namespace

TEST_CASE("unary maps match finite differences", "[ops][grad][primitives]") {
  Tape<Cpu> tape;
  const T any = param(tape, {3, 7}, 1), pos = param(tape, {3, 7}, 2, 0.3f, 2.0f);
  gradcheck(tape, [](const V& v) { return exp(v[0]); }, {any});
  gradcheck(tape, [](const V& v) { return log(v[0]); }, {pos});
  gradcheck(tape, [](const V& v) { return sqrt(v[0]); }, {pos});
  gradcheck(tape, [](const V& v) { return rsqrt(v[0]); }, {pos});
  gradcheck(tape, [](const V& v) { return sigmoid(v[0]); }, {any});
  gradcheck(tape, [](const V& v) { return silu(v[0]); }, {any});
  gradcheck(tape, [](const V& v) { return square(v[0]); }, {any});
  gradcheck(tape, [](const V& v) { return pow(v[0], 3.0f); }, {any});
  gradcheck(tape, [](const V& v) { return pow(v[0], -1.5f); }, {pos});
  gradcheck(tape, [](const V& v) { return pow(v[0], 0.0f) * v[0]; }, {pos});  // x^0 = 1
  gradcheck(tape, [](const V& v) { return sin(v[0]); }, {any});
  gradcheck(tape, [](const V& v) { return cos(v[0]); }, {any});
  const T kinked = spread(tape, 12, -1.5f, 1.5f, {0.0f, -0.5f, 0.7f});
  gradcheck(tape, [](const V& v) { return abs(v[0]); }, {kinked});
  gradcheck(tape, [](const V& v) { return clamp(v[0], -0.5f, 0.7f); }, {kinked});
  gradcheck(tape, [](const V& v) { return exp(sin(v[0])) * silu(v[0]); }, {any});  // chained
}

TEST_CASE("unary maps compute core/math.hpp's formulas", "[ops][primitives]") {
  Tape<Cpu> tape;
  const T x = tape.input({6}, {-2.0f, -0.5f, 0.0f, 0.25f, 1.0f, 4.0f});
  const T p = tape.input({3}, {0.25f, 1.0f, 4.0f});
  auto v = [](const T& t) { return t.to_vector(); };
  CHECK(v(rsqrt(p)) == std::vector<float>{2.0f, 1.0f, 0.5f});
  CHECK(v(sqrt(p)) == std::vector<float>{0.5f, 1.0f, 2.0f});
  CHECK(v(abs(x)) == std::vector<float>{2.0f, 0.5f, 0.0f, 0.25f, 1.0f, 4.0f});
  CHECK(v(clamp(x, -1.0f, 1.0f)) == std::vector<float>{-1.0f, -0.5f, 0.0f, 0.25f, 1.0f, 1.0f});
  CHECK(v(square(x)) == std::vector<float>{4.0f, 0.25f, 0.0f, 0.0625f, 1.0f, 16.0f});
  CHECK(v(pow(p, 2.0f)) == std::vector<float>{0.0625f, 1.0f, 16.0f});
  const auto e = v(exp(x)), l = v(log(p)), s = v(sigmoid(x)), si = v(silu(x));
  const auto xs = v(x), ps = v(p);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CHECK(e[i] == Approx(std::exp(xs[i])));
    CHECK(s[i] == Approx(1.0 / (1.0 + std::exp(-xs[i]))));
    CHECK(si[i] == Approx(xs[i] / (1.0 + std::exp(-xs[i]))).margin(1e-7));
  }
  for (std::size_t i = 0; i < ps.size(); ++i) CHECK(l[i] == Approx(std::log(ps[i])).margin(1e-7));
  // The CPU kernels are the shared formulas (the GPU's run the same ones).
  for (int k = 0; k <= static_cast<int>(math::UnaryKind::cos); ++k) {
    const auto kind = static_cast<math::UnaryKind>(k);
    std::vector<float> y(6), d(6, 0.5f), ones(6, 1.0f);
    Cpu::unary_forward(kind, y.data(), ps.data(), 3, 1.5f, 2.0f);
    Cpu::unary_backward(kind, d.data(), ps.data(), ones.data(), 3, 1.5f, 2.0f);
    for (std::size_t i = 0; i < 3; ++i) {
      INFO(math::unary_name(kind) << " at " << ps[i]);
      // (the compiler may fuse a product and a sum differently here and in the kernel)
      CHECK(y[i] == Approx(math::unary(kind, ps[i], 1.5f, 2.0f)).epsilon(1e-6));
      CHECK(d[i] == Approx(0.5f + math::unary_grad(kind, ps[i], 1.5f, 2.0f)).epsilon(1e-6));
    }
  }
}

TEST_CASE("maximum, minimum, where and max match finite differences", "[ops][grad][primitives]") {
  Tape<Cpu> tape;
  const T a = param(tape, {4, 5}, 3), b = param(tape, {4, 5}, 4), row = param(tape, {5}, 5);
  gradcheck(tape, [](const V& v) { return maximum(v[0], v[1]); }, {a, b});
  gradcheck(tape, [](const V& v) { return minimum(v[0], v[1]); }, {a, b});
  gradcheck(tape, [](const V& v) { return maximum(v[0], v[1]); }, {a, row});  // broadcast
  gradcheck(tape, [](const V& v) { return minimum(v[1], v[0]); }, {a, row});
  // The mask decides by an operand's sign (relu's way): the function jumps where that sign
  // flips, so elements within the kink of 0 are skipped.
  remat_test::GradcheckOptions kink;
  kink.kink = 0.05f;
  gradcheck(tape, [](const V& v) { return where(gt(v[0], 0.0f), v[0], v[1]); }, {a, b}, kink);
  gradcheck(tape, [](const V& v) { return where(gt(v[1], 0.0f), v[0], v[1]); }, {a, row}, kink);
  const T fixed = detach(a);  // a mask of constants, a constant b
  gradcheck(tape, [&](const V& v) { return where(lt(fixed, 0.5f), v[0] * 2.0f, -3.0f); }, {b});
  const T col = param(tape, {4, 1}, 6);  // a mask broadcast over columns
  gradcheck(tape, [&](const V& v) { return where(ge(col, 0.0f), v[0], v[1]); }, {a, b});
  // 60 distinct values 0.1 apart: no two within the finite differences' 2h of each other
  std::vector<float> distinct(60);
  for (std::size_t i = 0; i < distinct.size(); ++i)
    distinct[i] = -3.0f + 0.1f * static_cast<float>((i * 37) % 60);
  T x = tape.input({3, 4, 5}, distinct);
  x.set_requires_grad(true);
  for (int axis : {0, 1, 2, -1}) {
    gradcheck(tape, [&](const V& v) { return max(v[0], axis); }, {x});
    gradcheck(tape, [&](const V& v) { return max(v[0], axis, true) * 2.0f; }, {x});
  }
}

TEST_CASE("comparison masks, where, max and the factories: values, shapes, no gradient",
          "[ops][primitives]") {
  Tape<Cpu> tape;
  T a = tape.input({2, 3}, {1.0f, -2.0f, 3.0f, 0.0f, 5.0f, -6.0f});
  const T b = tape.input({3}, {1.0f, 0.0f, -6.0f});
  a.set_requires_grad(true);
  const T m = gt(a, b);
  CHECK_FALSE(m.requires_grad());
  CHECK(m.shape() == Shape{2, 3});
  CHECK(m.to_vector() == std::vector<float>{0, 0, 1, 0, 1, 0});
  CHECK(ge(a, b).to_vector() == std::vector<float>{1, 0, 1, 0, 1, 1});
  CHECK(lt(a, 0.0f).to_vector() == std::vector<float>{0, 1, 0, 0, 0, 1});
  CHECK(le(a, 0.0f).to_vector() == std::vector<float>{0, 1, 0, 1, 0, 1});
  CHECK(eq(a, b).to_vector() == std::vector<float>{1, 0, 0, 0, 0, 1});
  CHECK(ne(a, b).to_vector() == std::vector<float>{0, 1, 1, 1, 1, 0});
  CHECK(maximum(a, b).to_vector() == std::vector<float>{1, 0, 3, 1, 5, -6});
  CHECK(minimum(a, b).to_vector() == std::vector<float>{1, -2, -6, 0, 0, -6});
  const float inf = std::numeric_limits<float>::infinity();
  const T masked = where(m, a, -inf);  // a causal-style mask: -inf stays -inf
  CHECK(masked.to_vector() == std::vector<float>{-inf, -inf, 3, -inf, 5, -inf});
  CHECK(where(m, a, tape.zeros({2, 3})).to_vector() == std::vector<float>{0, 0, 3, 0, 5, 0});
  CHECK(max(a, -1).to_vector() == std::vector<float>{3, 5});
  CHECK(max(a, 0, true).shape() == Shape{1, 3});
  CHECK(max(a, 0, true).to_vector() == std::vector<float>{1, 5, 3});
  // the gradient of a tie goes to the first maximal element only
  const T tie = tape.input({1, 4}, {2.0f, 7.0f, 7.0f, 1.0f});
  T tied = tie;
  tied.set_requires_grad(true);
  tape.backward(sum(max(tied, 1)));
  CHECK(tied.grad().to_vector() == std::vector<float>{0, 1, 0, 0});
  // masks from tensors that need a gradient record nothing: the tape is as long as before
  const std::size_t nodes = tape.num_nodes();
  (void)gt(a, 0.0f);
  CHECK(tape.num_nodes() == nodes);
  CHECK(tape.full({2, 2}, 2.5f).to_vector() == std::vector<float>(4, 2.5f));
  CHECK(tape.ones({3}).to_vector() == std::vector<float>(3, 1.0f));
  CHECK(tape.ones({3}, true).requires_grad());
  CHECK(tape.arange(4).to_vector() == std::vector<float>{0, 1, 2, 3});
  CHECK(tape.arange(3, 1.0f, 0.5f).to_vector() == std::vector<float>{1.0f, 1.5f, 2.0f});
  CHECK(tape.arange(0).numel() == 0);
}

TEST_CASE("the primitives' errors say what, where and what was expected", "[ops][primitives]") {
  Tape<Cpu> tape;
  const T x = tape.zeros({2, 3}), y = tape.zeros({4});
  require_error([&] { (void)clamp(x, 1.0f, -1.0f); }, {"remat::clamp", "lower bound 1",
                                                        "upper bound -1", "[2, 3]"});
  require_error([&] { (void)maximum(x, y); }, {"remat::maximum", "do not broadcast"});
  require_error([&] { (void)gt(x, y); }, {"remat::gt", "do not broadcast"});
  require_error([&] { (void)where(gt(x, 0.0f), x, y); }, {"remat::where", "do not broadcast"});
  T grad_mask = tape.zeros({2, 3}, true);
  require_error([&] { (void)where(grad_mask, x, 0.0f); }, {"remat::where", "mask", "requires a "
                                                           "gradient", "detach"});
  require_error([&] { (void)max(tape.zeros({2, 0}), 1); }, {"remat::max", "empty", "[2, 0]"});
  require_error([&] { (void)max(x, 2); }, {"max"});
  require_error([&] { (void)tape.arange(-1); }, {"remat::Tape::arange", "-1"});
  require_error([&] { (void)exp(T()); }, {"remat::unary", "undefined"});
}

TEST_CASE("a column (a reduction kept with keepdim) broadcasts along its rows as it is",
          "[ops][primitives]") {
  // NOTE [broadcasting]: x * c with c (2, 9, 1) against x (2, 9, 16) makes y and nothing else
  // (no expansion of c to x's shape), and the product keeps x and c, not an expanded c.
  Tape<Cpu> tape(3);
  const T x = tape.randn({2, 9, 16}, 1.0f, 1, true);
  const T c = tape.randn({2, 9, 1}, 1.0f, 2, true);
  const std::int64_t live0 = memory_stats<Cpu>().live_total;
  reset_peak_memory<Cpu>();
  const T y = x * c;
  CHECK(memory_stats<Cpu>().peak_total - live0 == 4 * 2 * 9 * 16);
  CHECK(tape.saved_bytes() == 4 * (2 * 9 * 16 + 2 * 9));
  const T z = c / x - c;  // the column first, and sub's gradient sign
  const std::vector<float> xv = x.to_vector(), cv = c.to_vector(), yv = y.to_vector(),
                           zv = z.to_vector();
  for (std::size_t i = 0; i < xv.size(); ++i) {
    CHECK(yv[i] == xv[i] * cv[i / 16]);
    CHECK(zv[i] == cv[i / 16] / xv[i] - cv[i / 16]);
  }
  // a 1 inside the shape is not a column: expanded, the same values
  const T w = tape.randn({2, 1, 16}, 1.0f, 4, true);
  const std::vector<float> xw = (x * w).to_vector(), wv = w.to_vector();
  for (std::size_t i = 0; i < xv.size(); ++i) CHECK(xw[i] == xv[i] * wv[(i / (9 * 16)) * 16 + i % 16]);
}

TEST_CASE("a pointwise output that an op saves is kept as its recipe", "[ops][primitives]") {
  // NOTE [saved as a recipe]: the composed RMSNorm's x * rstd and SwiGLU's silu(a) are not kept
  // for backward (their ops' states keep x, rstd and a already); backward remakes them.
  const std::int64_t R = 18, C = 16, F = 24;
  Tape<Cpu> tape(3);
  const T x = tape.randn({2, 9, C}, 1.0f, 1, true), g = tape.randn({C}, 1.0f, 2, true);
  const T a = tape.randn({R, F}, 1.0f, 3, true), b = tape.randn({R, F}, 1.0f, 4, true);
  auto norm = [](const V& v) { return v[0] * rsqrt(mean(square(v[0]), -1, true) + 1e-5f) * v[1]; };
  auto swiglu = [](const V& v) { return silu(v[0]) * v[1]; };
  const std::int64_t live0 = memory_stats<Cpu>().live_total;
  {
    // alive: y, and the (B, T, 1) mean + eps that rsqrt keeps (rstd itself is kept as its
    // recipe too, by x * rstd's state: recipes of recipes keep their roots)
    const T y = norm({x, g});
    CHECK(memory_stats<Cpu>().live_total - live0 == 4 * (R * C + R));
    const T z = swiglu({a, b});  // alive: z alone (a and b are the inputs)
    CHECK(memory_stats<Cpu>().live_total - live0 == 4 * (R * C + R + R * F));
    CHECK_FALSE(y.impl()->recipe.expired());  // owned by the node, which is alive
    tape.backward(sum(y) + sum(z));
    CHECK(y.impl()->recipe.expired());  // the node is gone, and the recipe with it
  }
  {  // nothing recorded, no recipe
    NoGrad off;
    CHECK(silu(a).impl()->recipe.expired());
  }
  // the gradients, through remade operands, against finite differences
  gradcheck(tape, norm, {x, g});
  gradcheck(tape, swiglu, {a, b});
}

TEST_CASE("a block composed of primitives: checkpointed = plain bit for bit, estimated to the "
          "byte", "[ops][primitives][checkpoint]") {
  // RMSNorm and SwiGLU from primitives, as a user writes a Llama layer before any fused op.
  Tape<Cpu> tape(5);
  const std::int64_t C = 16, H = 40;
  const LlamaMlp<Cpu> blk(tape, C, H);
  const T x = tape.randn({2, 9, C}, 1.0f, 5, true);
  const std::vector<T> watch = {blk.g, blk.w1, blk.w3, blk.w2, x};
  const auto r = testing::compare_runs(
      tape,
      [&](bool ck) {
        const T h = ck ? checkpoint([&](const T& in) { return blk(in); }, x) : blk(x);
        return sum(max(where(gt(h, 0.0f), h, -1.0f), -1));
      },
      watch);
  INFO(r.detail);
  CHECK(r.equal);
  CHECK(r.checkpoint_peak_saved < r.plain_peak_saved);

  // The shape-only twin runs the same code: its ledger equals the CPU's to the byte.
  auto program = [&](auto& t) {
    using B = typename std::decay_t<decltype(t)>::backend;
    const LlamaMlp<B> b(t, C, H);
    const Tensor<B> in = t.randn({2, 9, C}, 1.0f, 5, true);
    reset_peak_memory<B>();
    const Tensor<B> mask = gt(in, 0.0f);
    t.backward(sum(max(where(mask, b(in), -1.0f), -1)));
  };
  const MemoryStats est = estimate_memory<Cpu>([&](auto& t) { program(t); });
  const MemoryStats before = memory_stats<Cpu>();
  {
    Tape<Cpu> t2;
    program(t2);
  }
  const MemoryStats real = memory_stats<Cpu>();
  CHECK(est.peak_total == real.peak_total - before.live_total);
  CHECK(est.peak_total > 0);
}

namespace {
// y = x^2 with a backward that forgets the 2 (dx += dy x): the public gradcheck must say so.
struct WrongSquareOp {
  static constexpr const char* name = "wrong_square";
  template <class B>
  struct Saved {
    Tensor<B> x;
    template <class F> void each(F f) const { f(x); }
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x) {
    auto y = detail::empty_like(x);
    B::binary_forward(math::BinaryKind::mul, y.template data<float>(), x.template data<float>(),
                      x.template data<float>(), 1, x.numel(), false, false);
    s.x = x;
    return y;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    B::binary_backward(math::BinaryKind::mul, dinp[0].template data<float>(), nullptr,
                       dout.template data<float>(), s.x.template data<float>(),
                       s.x.template data<float>(), 1, s.x.numel(), false, false);
  }
};
}  // namespace

TEST_CASE("the public gradcheck passes a right backward and names a wrong one",
          "[ops][grad][primitives]") {
  Tape<Cpu> tape;
  const T x = param(tape, {3, 5}, 8);
  const auto right = testing::gradcheck(tape, [](const V& v) { return square(v[0]); }, {x});
  INFO(right.detail);
  CHECK(right.ok);
  CHECK(right.checked == 15);
  CHECK(right.mismatches == 0);
  const auto wrong = testing::gradcheck(
      tape, [](const V& v) { return detail::apply<WrongSquareOp>(std::array<T, 1>{v[0]}); }, {x});
  CHECK_FALSE(wrong.ok);
  CHECK(wrong.mismatches > 5);  // half the gradient: all but the elements near 0
  CHECK(wrong.detail.find("input 0 [3, 5] element ") != std::string::npos);
  const T constant = tape.zeros({3});
  const auto none = testing::gradcheck(tape, [](const V& v) { return exp(v[0]); }, {constant});
  CHECK_FALSE(none.ok);
  CHECK(none.detail.find("needs no gradient") != std::string::npos);
  // An input the output does not depend on: reported, not crashed on.
  const T unused = param(tape, {2}, 9);
  const auto lost = testing::gradcheck(tape, [](const V& v) { return exp(v[0]); }, {x, unused});
  CHECK_FALSE(lost.ok);
  CHECK(lost.detail.find("input 1 ([2]) requires a gradient but got none") != std::string::npos);
}

TEST_CASE("a mask made inside a checkpointed segment is freed with the segment's interior",
          "[ops][primitives][checkpoint]") {
  // A comparison's mask is a constant (detached) made inside the segment: nothing of it may
  // outlive the first run, and the replay makes it again for the gradient.
  Tape<Cpu> tape;
  const T x = tape.randn({64, 64}, 1.0f, 1, true);
  const std::int64_t before = memory_stats<Cpu>().live_total;
  T y = checkpoint([](const T& in) { return where(gt(in, 0.0f), in * 2.0f, in); }, x);
  CHECK(memory_stats<Cpu>().live_total - before == 64 * 64 * 4);  // y only
  tape.backward(sum(y));
  const auto g = x.grad().to_vector(), xs = x.to_vector();
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == (xs[i] > 0.0f ? 2.0f : 1.0f));
}
