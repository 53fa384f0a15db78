// SPDX-License-Identifier: MIT
// The ops that compute on bf16 tensors (NOTE [precision policy] in ops/cast.hpp), each against
// an exact (double) reference of the same bf16 values with a stated bf16 tolerance.
// - matmul and linear (ops/matmul.hpp's GemmKernel; the CPU's tiles in
//   backend/cpu/typed_gemm.hpp): every output element is the exact product of the bf16 values,
//   summed in fp32 and rounded once (so it is round_bf16 of the exact result but where the
//   exact result lies within fp32's error of a rounding midpoint), an fp32 gradient buffer gets
//   the fp32 sum unrounded, bf16 outputs hold two bytes an element in the ledger and the
//   estimate, checkpointed = plain, and mixed operands are refused.
// - layer_norm and rms_norm: fp32 statistics of bf16 rows, y rounded once, dx in bf16, dw and
//   db in fp32.
// - cross_entropy: bf16 logits widened, the log-sum-exp and the loss in fp32, the gradient
//   rounded once into bf16 (written over the logits).

#include <cmath>
#include <cstring>

#include <remat/plan/estimate.hpp>
#include <remat/testing/equivalence.hpp>

#include "support/gradcheck.hpp"
#include "support/require_error.hpp"

using namespace remat;
using remat_test::require_error;
using remat_test::T;

namespace {

// The exact (double) C (M, N) = op(A) op(B) (+ bias) of row-major host matrices.
std::vector<double> product(const std::vector<float>& a, const std::vector<float>& b, bool ta,
                            bool tb, std::int64_t M, std::int64_t N, std::int64_t K,
                            const std::vector<float>& bias = {}) {
  std::vector<double> c(static_cast<std::size_t>(M * N));
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double s = bias.empty() ? 0.0 : bias[static_cast<std::size_t>(j)];
      for (std::int64_t l = 0; l < K; ++l)
        s += static_cast<double>(a[static_cast<std::size_t>(ta ? l * M + i : i * K + l)]) *
             b[static_cast<std::size_t>(tb ? j * K + l : l * N + j)];
      c[static_cast<std::size_t>(i * N + j)] = s;
    }
  return c;
}

// How a bf16 result compares with the exact one: elements that are not round_bf16(exact), and
// the largest error relative to the largest exact element (a bf16 rounding: at most 2^-8).
struct Bf16Match {
  std::size_t off = 0, n = 0;
  double worst = 0;
};
Bf16Match compare_bf16(const std::vector<float>& got, const std::vector<double>& exact) {
  Bf16Match m;
  m.n = got.size();
  double e = 0, top = 1e-30;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != math::round_bf16(static_cast<float>(exact[i]))) ++m.off;
    e = std::max(e, std::fabs(got[i] - exact[i]));
    top = std::max(top, std::fabs(exact[i]));
  }
  m.worst = e / top;
  return m;
}

// The exact (double) layer norm (or RMSNorm) of the rows of x (rows, C), and its backward for dy.
struct NormRef {
  std::vector<double> y, dx, dw, db;
};
NormRef norm_reference(bool centered, const std::vector<float>& x, const std::vector<float>& w,
                       const std::vector<float>& b, const std::vector<float>& dy,
                       std::int64_t rows, std::int64_t C, double eps) {
  NormRef r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dw.assign(static_cast<std::size_t>(C), 0.0);
  r.db.assign(static_cast<std::size_t>(C), 0.0);
  for (std::int64_t i = 0; i < rows; ++i) {
    const auto at = [&](std::int64_t j) { return static_cast<std::size_t>(i * C + j); };
    double m = 0, v = 0;
    if (centered) {
      for (std::int64_t j = 0; j < C; ++j) m += x[at(j)];
      m /= static_cast<double>(C);
    }
    for (std::int64_t j = 0; j < C; ++j) v += (x[at(j)] - m) * (x[at(j)] - m);
    const double s = 1.0 / std::sqrt(v / static_cast<double>(C) + eps);
    double mg = 0, mgx = 0;
    for (std::int64_t j = 0; j < C; ++j) {
      const double xh = (x[at(j)] - m) * s, g = dy[at(j)] * static_cast<double>(w[static_cast<std::size_t>(j)]);
      r.y[at(j)] = xh * w[static_cast<std::size_t>(j)] + (centered ? b[static_cast<std::size_t>(j)] : 0.0);
      mg += g;
      mgx += g * xh;
      r.dw[static_cast<std::size_t>(j)] += dy[at(j)] * xh;
      r.db[static_cast<std::size_t>(j)] += dy[at(j)];
    }
    mg = centered ? mg / static_cast<double>(C) : 0.0;
    mgx /= static_cast<double>(C);
    for (std::int64_t j = 0; j < C; ++j) {
      const double xh = (x[at(j)] - m) * s, g = dy[at(j)] * static_cast<double>(w[static_cast<std::size_t>(j)]);
      r.dx[at(j)] = s * (g - mg - xh * mgx);
    }
  }
  return r;
}

double rel_error(const std::vector<float>& got, const std::vector<double>& exact) {
  double e = 0, m = 1e-30;
  for (std::size_t i = 0; i < got.size(); ++i) {
    e = std::max(e, std::fabs(got[i] - exact[i]));
    m = std::max(m, std::fabs(exact[i]));
  }
  return e / m;
}

std::vector<float> eye(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n * n), 0.0f);
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i * n + i)] = 1.0f;
  return v;
}

// bf16-representable random values (a bf16 tensor's widened values)
T rounded(Tape<Cpu>& tape, const Shape& s, std::uint64_t seed, bool grad = false) {
  const std::vector<float> v = tape.randn(s, 1.0f, seed).to_vector();
  std::vector<float> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = math::round_bf16(v[i]);
  const T t = tape.input(s, r);
  t.set_requires_grad(grad);
  return t;
}

}  // namespace

TEST_CASE("bf16 matmul: fp32 sums rounded once, every layout, several tiles and depth blocks",
          "[ops][bf16][matmul]") {
  Tape<Cpu> tape(1);
  // M and K past the CPU's 512 tile and depth (NOTE [bf16 GEMM tiles]): sums across blocks
  const std::int64_t M = 600, N = 70, K = 1100;
  for (int form = 0; form < 4; ++form) {
    const bool ta = form & 1, tb = form & 2;
    INFO("ta " << ta << " tb " << tb);
    const T a = rounded(tape, ta ? Shape{K, M} : Shape{M, K}, 10 + form);
    const T b = rounded(tape, tb ? Shape{N, K} : Shape{K, N}, 20 + form);
    const T c = matmul(to_dtype(a, DType::bf16), to_dtype(b, DType::bf16), ta, tb);
    REQUIRE(c.dtype() == DType::bf16);
    REQUIRE(c.shape() == (Shape{M, N}));
    const Bf16Match m = compare_bf16(c.to_vector(), product(a.to_vector(), b.to_vector(), ta, tb, M, N, K));
    INFO(m.off << " of " << m.n << " elements not round_bf16(exact); worst " << m.worst);
    // fp32 sums are ~1e-6 off the exact value: a rounding falls the other way only next to a
    // midpoint (bf16 sums between the blocks would be off at about half the elements)
    CHECK(m.off * 200 < m.n);
    CHECK(m.worst <= 1.0 / 256);
  }
}

TEST_CASE("bf16 linear: bias and residual before the one rounding; gradients in their buffers' types",
          "[ops][bf16][matmul][grad]") {
  Tape<Cpu> tape(2);
  const std::int64_t R = 530, in = 600, out = 40;
  const T x = rounded(tape, {R, in}, 1, true), w = rounded(tape, {in, out}, 2, true);
  const T bias = tape.randn({out}, 1.0f, 3, true), r = rounded(tape, {R, out}, 4);
  const T xb = to_dtype(x, DType::bf16), wb = to_dtype(w, DType::bf16);
  const T h = linear(xb, wb, bias, to_dtype(r, DType::bf16));
  REQUIRE(h.dtype() == DType::bf16);
  REQUIRE(h.grad_dtype() == DType::bf16);
  std::vector<double> want = product(x.to_vector(), w.to_vector(), false, false, R, out, in, bias.to_vector());
  const std::vector<float> rv = r.to_vector();
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += rv[i];
  const Bf16Match m = compare_bf16(h.to_vector(), want);
  INFO(m.off << " of " << m.n << " not round_bf16(exact)");
  CHECK(m.off * 200 < m.n);
  CHECK(m.worst <= 1.0 / 256);

  // loss = sum(f32(h) * g): dh = g rounded to bf16 (h's gradient is bf16); then dW = x^T dh,
  // db = column sums of dh in x's and w's f32 buffers, and dx = dh W^T in fp32
  const T g = tape.randn({R, out}, 1.0f, 5);
  tape.backward(sum(to_dtype(h, DType::f32) * g));
  std::vector<float> dh = g.to_vector();
  for (float& v : dh) v = math::round_bf16(v);
  REQUIRE(w.grad().dtype() == DType::f32);
  REQUIRE(bias.grad().dtype() == DType::f32);
  auto rel = [](const std::vector<float>& got, const std::vector<double>& exact) {
    double e = 0, m = 1e-30;
    for (std::size_t i = 0; i < got.size(); ++i) {
      e = std::max(e, std::fabs(got[i] - exact[i]));
      m = std::max(m, std::fabs(exact[i]));
    }
    return e / m;
  };
  // fp32 sums of exact products: fp32 accuracy, far inside one bf16 step (2^-8 = 3.9e-3)
  const double ew = rel(w.grad().to_vector(), product(x.to_vector(), dh, true, false, in, out, R));
  const double ex = rel(x.grad().to_vector(), product(dh, w.to_vector(), false, true, R, in, out));
  std::vector<double> db(static_cast<std::size_t>(out), 0.0);
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t j = 0; j < out; ++j) db[static_cast<std::size_t>(j)] += dh[static_cast<std::size_t>(i * out + j)];
  const double eb = rel(bias.grad().to_vector(), db);
  INFO("rel errors dW " << ew << " dx " << ex << " db " << eb);
  CHECK(ew < 1e-5);
  CHECK(ex < 1e-5);
  CHECK(eb < 1e-5);
}

TEST_CASE("bf16 matmul: a bf16 gradient buffer is written, then added into, rounded once each",
          "[ops][bf16][matmul][grad]") {
  Tape<Cpu> tape(3);
  const std::int64_t M = 20, K = 30, N = 10;
  const T a = rounded(tape, {M, K}, 1, true), b = rounded(tape, {K, N}, 2, true);
  const T h = matmul(to_dtype(a, DType::bf16), to_dtype(b, DType::bf16));  // bf16, grad bf16
  const T c = rounded(tape, {N, N}, 3);
  const T cb = to_dtype(c, DType::bf16);
  // h is used twice: its gradient is g1 = dy1 c^T (written, rounded), then g2 added (rounded)
  const T y1 = matmul(h, cb), y2 = matmul(h, cb, false, true);
  const T s1 = tape.randn({M, N}, 1.0f, 4), s2 = tape.randn({M, N}, 1.0f, 5);
  tape.backward(sum(to_dtype(y1, DType::f32) * s1) + sum(to_dtype(y2, DType::f32) * s2));
  auto round_all = [](std::vector<float> v) {
    for (float& x : v) x = math::round_bf16(x);
    return v;
  };
  // y2 was recorded last, so its contribution reaches h's buffer first
  const std::vector<float> d1 = round_all(s1.to_vector()), d2 = round_all(s2.to_vector());
  const std::vector<double> g2 = product(d2, c.to_vector(), false, false, M, N, N);
  const std::vector<double> g1 = product(d1, c.to_vector(), false, true, M, N, N);
  std::vector<float> dh(g1.size());
  for (std::size_t i = 0; i < dh.size(); ++i)
    dh[i] = math::round_bf16(math::round_bf16(static_cast<float>(g2[i])) + static_cast<float>(g1[i]));
  // dA = dh b^T with the bf16 dh: exact products summed in fp32 (K = 10 terms here)
  const std::vector<double> da = product(dh, b.to_vector(), false, true, M, K, N);
  const std::vector<float> got = a.grad().to_vector();
  double e = 0, m = 1e-30;
  for (std::size_t i = 0; i < got.size(); ++i) {
    e = std::max(e, std::fabs(got[i] - da[i]));
    m = std::max(m, std::fabs(da[i]));
  }
  INFO("rel error " << e / m);
  CHECK(e / m < 1e-4);  // a dh other than the two roundings above would be ~1e-3 off
}

TEST_CASE("bf16 products: two bytes an output element in the ledger and the estimate, checkpointed = plain",
          "[ops][bf16][matmul][memory]") {
  auto program = [](auto& t) {
    using B = typename std::decay_t<decltype(t)>::backend;
    const Tensor<B> x = t.randn({4, 32, 64}, 1.0f, 1, true), w = t.randn({64, 96}, 1.0f, 2, true);
    const Tensor<B> bias = t.randn({96}, 1.0f, 3, true);
    const Tensor<B> wb = to_dtype(w, DType::bf16), xb = to_dtype(x, DType::bf16);
    reset_peak_memory<B>();
    const std::int64_t live0 = memory_stats<B>().live_total;
    const Tensor<B> h = linear(xb, wb, bias);  // (4, 32, 96) bf16
    CHECK(memory_stats<B>().live_total - live0 == 4 * 32 * 96 * 2);
    const Tensor<B> y = matmul(h, wb, false, true);  // (4, 32, 64) bf16
    t.backward(sum(to_dtype(y, DType::f32)));
  };
  Tape<Cpu> tape(4);
  program(tape);
  const std::int64_t measured = memory_stats<Cpu>().peak_total;
  const auto est = estimate_memory<Cpu>([&](auto& t) { program(t); });
  CHECK(est.peak_total == measured);

  const T x = tape.randn({2, 16, 40}, 1.0f, 5, true), w = tape.randn({40, 40}, 1.0f, 6, true);
  const T bias = tape.randn({40}, 1.0f, 7, true);
  const auto r = testing::compare_runs(
      tape,
      [&](bool ck) {
        const T wb = to_dtype(w, DType::bf16);
        auto block = [wb, &bias](const T& in) {  // wb by value: the replay runs after this returns
          const T h = linear(in, wb, bias);
          return linear(h, wb, bias, in);  // a residual block in bf16
        };
        const T xb = to_dtype(x, DType::bf16);
        const T y = ck ? checkpoint(block, xb) : block(xb);
        return sum(to_dtype(ck ? checkpoint(block, y) : block(y), DType::f32));
      },
      {x, w, bias});
  INFO(r.detail);
  CHECK(r.equal);
  // an input without a gradient: the replay skips the weight's cast (no backward reads its
  // values), and its stand-in output must still take the f32 gradient of the plain run
  const T xs = tape.randn({2, 16, 40}, 1.0f, 8);
  const auto r2 = testing::compare_runs(
      tape,
      [&](bool ck) {
        auto block = [&](const T& in) {
          return linear(to_dtype(in, DType::bf16), to_dtype(w, DType::bf16), bias);
        };
        return sum(to_dtype(ck ? checkpoint(block, xs) : block(xs), DType::f32));
      },
      {w, bias});
  INFO(r2.detail);
  CHECK(r2.equal);
}

TEST_CASE("bf16 norms: fp32 statistics, y rounded once, dx bf16 and dw, db fp32",
          "[ops][bf16][norm][grad]") {
  for (const bool centered : {true, false}) {
    INFO((centered ? "layer_norm" : "rms_norm"));
    Tape<Cpu> tape(6);
    const std::int64_t R = 37, C = 300;
    // rows with a large common offset: a mean or variance summed in bf16 would lose it
    const std::vector<float> x0 = tape.randn({R, C}, 1.0f, 1).to_vector();
    std::vector<float> xv(x0.size());
    for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = math::round_bf16(x0[i] * 0.5f + 3.0f);
    const T x = tape.input({R, C}, xv);
    x.set_requires_grad(true);
    const T w = tape.randn({C}, 0.3f, 2, true), b = tape.randn({C}, 0.3f, 3, true);
    // the bf16 input is a product's output, so its gradient is bf16 as well
    const T xb = matmul(to_dtype(x, DType::bf16), to_dtype(tape.input({C, C}, eye(C)), DType::bf16));
    const T y = centered ? layer_norm(xb, w, b) : rms_norm(xb, w, 1e-5f);
    REQUIRE(y.dtype() == DType::bf16);
    const T g = tape.randn({R, C}, 1.0f, 4);
    tape.backward(sum(to_dtype(y, DType::f32) * g));
    std::vector<float> dy = g.to_vector();
    for (float& v : dy) v = math::round_bf16(v);
    const NormRef ref = norm_reference(centered, xv, w.to_vector(), b.to_vector(), dy, R, C, 1e-5);
    const Bf16Match m = compare_bf16(y.to_vector(), ref.y);
    INFO(m.off << " of " << m.n << " y elements not round_bf16(exact); worst " << m.worst);
    CHECK(m.off * 100 < m.n);
    CHECK(m.worst <= 1.0 / 256);
    // dx passes through xb's bf16 buffer (rounded once) and the identity product: within a
    // bf16 step; dw and db: fp32 sums, far inside one
    const double ex = rel_error(x.grad().to_vector(), ref.dx), ew = rel_error(w.grad().to_vector(), ref.dw);
    INFO("rel errors dx " << ex << " dw " << ew);
    CHECK(ex <= 1.0 / 128);
    CHECK(ew < 1e-5);
    if (centered) CHECK(rel_error(b.grad().to_vector(), ref.db) < 1e-5);
  }
}

TEST_CASE("bf16 cross-entropy: an fp32 loss of the bf16 logits, their gradient rounded once",
          "[ops][bf16][loss][grad]") {
  Tape<Cpu> tape(7);
  const std::int64_t N = 24, V = 300, ld = 304;  // padded rows: 4 columns never read
  const T x = rounded(tape, {N, ld}, 1, true);
  std::vector<std::int32_t> tv(static_cast<std::size_t>(N));
  for (std::int64_t i = 0; i < N; ++i) tv[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 37) % V);
  const T targets = tape.tokens({N}, tv);
  // bf16 logits with a bf16 gradient (a product's output): their gradient reaches x unchanged
  // through the identity (one exact term per sum)
  const T logits = matmul(to_dtype(x, DType::bf16), to_dtype(tape.input({ld, ld}, eye(ld)), DType::bf16));
  const T loss = cross_entropy(logits, targets, V);
  tape.backward(loss);
  const std::vector<float> xv = x.to_vector();
  double want = 0;
  std::vector<double> grad(xv.size(), 0.0);
  for (std::int64_t i = 0; i < N; ++i) {
    const auto at = [&](std::int64_t j) { return static_cast<std::size_t>(i * ld + j); };
    double m = -1e300, s = 0;
    for (std::int64_t j = 0; j < V; ++j) m = std::max(m, static_cast<double>(xv[at(j)]));
    for (std::int64_t j = 0; j < V; ++j) s += std::exp(xv[at(j)] - m);
    const double lse = m + std::log(s);
    want += lse - xv[at(tv[static_cast<std::size_t>(i)])];
    for (std::int64_t j = 0; j < V; ++j)
      grad[at(j)] = (std::exp(xv[at(j)] - lse) - (j == tv[static_cast<std::size_t>(i)] ? 1.0 : 0.0)) / static_cast<double>(N);
  }
  want /= static_cast<double>(N);
  INFO("loss " << loss.item() << " exact " << want);
  CHECK(std::fabs(loss.item() - want) < 1e-5 * std::fabs(want));
  const std::vector<float> g = x.grad().to_vector();
  const Bf16Match m = compare_bf16(g, grad);
  INFO(m.off << " of " << m.n << " gradient elements not round_bf16(exact); worst " << m.worst);
  CHECK(m.off * 100 < m.n);
  CHECK(m.worst <= 1.0 / 256);
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t j = V; j < ld; ++j) REQUIRE(g[static_cast<std::size_t>(i * ld + j)] == 0.0f);
}

TEST_CASE("bf16 products: errors", "[ops][bf16][matmul][errors]") {
  Tape<Cpu> tape(5);
  const T a = tape.randn({3, 4}, 1.0f, 1), b = tape.randn({4, 2}, 1.0f, 2);
  const T ab = to_dtype(a, DType::bf16), bb = to_dtype(b, DType::bf16);
  require_error([&] { (void)matmul(ab, b); },
                {"remat::matmul", "a is bf16 [3, 4]", "b is f32 [4, 2]", "both f32 or both bf16",
                 "to_dtype(b, DType::bf16)"});
  const T bias = tape.randn({2}, 1.0f, 3);
  require_error([&] { (void)linear(a, bb, bias); },
                {"remat::linear", "x is f32", "weight is bf16", "to_dtype(x, DType::bf16)"});
  require_error([&] { (void)linear(ab, bb, to_dtype(bias, DType::bf16)); },
                {"remat::linear", "bias must be f32, found bf16"});
  require_error([&] { (void)linear(ab, bb, bias, tape.randn({3, 2}, 1.0f, 4)); },
                {"remat::linear", "residual is f32 [3, 2]", "expected bf16"});
}

namespace {

// The ops that take bf16 by widening (NOTE [bf16 by widening]): run f on f32 inputs, then on
// bf16 copies of the same (bf16-representable) values in a fresh tape of the same seed, each a
// bf16 activation whose gradient is bf16. The bf16 output must be round_bf16 of the f32 output,
// bit for bit, and each input's gradient round_bf16 of the f32 gradient: the op computed in
// fp32 and rounded each result once.
template <class F>
void check_widened(const std::vector<Shape>& shapes, F f) {
  std::vector<float> out[2];
  std::vector<std::vector<float>> grads[2];
  for (int bf = 0; bf < 2; ++bf) {
    Tape<Cpu> tape(7);
    std::vector<T> leaves, in;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      leaves.push_back(rounded(tape, shapes[i], 10 + i, true));
      in.push_back(bf ? to_dtype(leaves.back(), DType::bf16) +
                            to_dtype(tape.zeros(shapes[i]), DType::bf16)
                      : leaves.back());
      if (bf) REQUIRE(in.back().grad_dtype() == DType::bf16);
    }
    const T y = f(in);
    REQUIRE(y.dtype() == (bf ? DType::bf16 : DType::f32));
    const T s = rounded(tape, y.shape(), 99);  // dy, exact in bf16
    tape.backward(sum(to_dtype(y, DType::f32) * s));
    out[bf] = y.to_vector();
    for (const T& l : leaves) grads[bf].push_back(l.grad().to_vector());
  }
  auto round_all = [](std::vector<float> v) {
    for (float& x : v) x = math::round_bf16(x);
    return v;
  };
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  CHECK(same(round_all(out[0]), out[1]));
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    INFO("input " << i);
    CHECK(same(round_all(grads[0][i]), grads[1][i]));
  }
}

}  // namespace

TEST_CASE("bf16 by widening: gelu, dropout, the binary ops, attention round once, forward and back",
          "[ops][bf16][widened]") {
  SECTION("gelu") { check_widened({{6, 40}}, [](const std::vector<T>& x) { return gelu(x[0]); }); }
  SECTION("dropout") {
    check_widened({{6, 40}}, [](const std::vector<T>& x) { return dropout(x[0], 0.3f); });
  }
  SECTION("add, sub, mul, div, a row broadcast") {
    check_widened({{6, 40}, {6, 40}}, [](const std::vector<T>& x) { return x[0] + x[1]; });
    check_widened({{6, 40}, {40}}, [](const std::vector<T>& x) { return x[0] - x[1]; });
    check_widened({{6, 40}, {6, 40}}, [](const std::vector<T>& x) { return x[0] * x[1]; });
    check_widened({{6, 40}, {6, 1}}, [](const std::vector<T>& x) { return x[0] * x[1]; });
  }
  SECTION("attention, causal and not") {
    for (bool causal : {true, false})
      check_widened({{2, 3, 9, 8}, {2, 3, 9, 8}, {2, 3, 9, 8}}, [causal](const std::vector<T>& x) {
        return attention(x[0], x[1], x[2], causal);
      });
  }
  SECTION("self_attention on a packed qkv, on both CPU paths") {
    for (cpu::AttentionPath p : {cpu::AttentionPath::fused, cpu::AttentionPath::materialized}) {
      Cpu::set_attention_path(p);
      check_widened({{2, 70, 48}}, [](const std::vector<T>& x) { return self_attention(x[0], 4); });
    }
    Cpu::set_attention_path(cpu::AttentionPath::from_env);
  }
}

TEST_CASE("bf16 by widening: the estimate counts the temporaries, checkpointed = plain",
          "[ops][bf16][widened][memory]") {
  // a block of the widened ops with dropout, checkpointed
  // (B, T, 3C) -> (B, T, C)
  auto block = [](const auto& a) { return self_attention(dropout(gelu(a), 0.2f) * a, 4); };
  auto program = [&](auto& t) {
    using B = typename std::decay_t<decltype(t)>::backend;
    const Tensor<B> x = t.randn({4, 32, 96}, 1.0f, 1, true);
    const Tensor<B> h = to_dtype(x, DType::bf16);
    reset_peak_memory<B>();
    const std::int64_t live0 = memory_stats<B>().live_total;
    const Tensor<B> g = gelu(h);  // the f32 temporaries are gone: two bytes an element remain
    CHECK(memory_stats<B>().live_total - live0 == 4 * 32 * 96 * 2);
    const Tensor<B> y = checkpoint([&](const Tensor<B>& a) { return block(a); }, g);
    t.backward(sum(to_dtype(y, DType::f32)));
  };
  Tape<Cpu> tape(4);
  program(tape);
  const std::int64_t measured = memory_stats<Cpu>().peak_total;
  const auto est = estimate_memory<Cpu>([&](auto& t) { program(t); });
  CHECK(est.peak_total == measured);

  const T x = tape.randn({2, 16, 48}, 1.0f, 5, true);
  const auto r = testing::compare_runs(
      tape,
      [&](bool ck) {
        const T h = to_dtype(x, DType::bf16);
        return sum(to_dtype(ck ? checkpoint([&](const T& a) { return block(a); }, h) : block(h),
                            DType::f32));
      },
      {x});
  INFO(r.detail);
  CHECK(r.equal);
}

TEST_CASE("bf16 by widening: errors", "[ops][bf16][widened][errors]") {
  Tape<Cpu> tape(5);
  const T a = tape.randn({3, 4}, 1.0f, 1), b = tape.randn({3, 4}, 1.0f, 2);
  const T ab = to_dtype(a, DType::bf16);
  require_error([&] { (void)(ab + b); },
                {"remat::add", "a is bf16 [3, 4]", "b is f32 [3, 4]", "one element type"});
  require_error([&] { (void)attention(ab, ab, a); }, {"remat::attention", "v f32", "one element type"});
  require_error([&] { (void)gelu(tape.tokens({2}, {0, 1})); },
                {"remat::gelu", "must be f32 or bf16, found i32"});
  const T w1 = tape.randn({4, 8}, 1.0f, 3), b1 = tape.zeros({8}), w2 = tape.randn({8, 4}, 1.0f, 4),
          b2 = tape.zeros({4});
  require_error([&] { (void)mlp(ab, w1, b1, w2, b2); }, {"remat::mlp", "x must be f32, found bf16"});
}

TEST_CASE("bf16 by widening: a bf16 gradient written, then added into, rounded once each",
          "[ops][bf16][widened][grad]") {
  // h (bf16, its gradient bf16) feeds two GELUs: the second's gradient g2 is written into h's
  // buffer (rounded), then the first's g1 added in fp32 and rounded again
  const Shape shape{5, 33};
  auto grads = [&](bool first, bool second, bool bf) {
    Tape<Cpu> tape(2);
    const T a = rounded(tape, shape, 1, true);
    const T h = bf ? to_dtype(a, DType::bf16) + to_dtype(tape.zeros(shape), DType::bf16) : a;
    const T y1 = gelu(h), y2 = gelu(h);
    const T s1 = rounded(tape, shape, 2), s2 = rounded(tape, shape, 3);
    T loss = sum(to_dtype(y1, DType::f32) * (first ? s1 : s1 * 0.0f)) +
             sum(to_dtype(y2, DType::f32) * (second ? s2 : s2 * 0.0f));
    tape.backward(loss);
    return a.grad().to_vector();
  };
  const std::vector<float> g1 = grads(true, false, false), g2 = grads(false, true, false);
  const std::vector<float> got = grads(true, true, true);
  std::size_t off = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    off += got[i] != math::round_bf16(math::round_bf16(g2[i]) + g1[i]);
  CHECK(off == 0);
  // and not what a buffer overwritten by the second write would hold
  std::size_t first_only = 0;
  for (std::size_t i = 0; i < got.size(); ++i) first_only += got[i] == math::round_bf16(g1[i]);
  CHECK(first_only < got.size() / 2);
}
