// SPDX-License-Identifier: MIT
// The tape: recording, backward, gradient accumulation, grad mode, and its errors.

#include <cmath>

#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;

TEST_CASE("f = a x^2 + b gives df/dx = 2 a x, df/da = x^2, df/db = 1", "[tape]") {
  Tape<Cpu> tape;
  auto x = tape.parameter({1}, {3.0f}), a = tape.parameter({1}, {2.0f}), b = tape.parameter({1}, {5.0f});
  auto f = sum(a * x * x + b);
  CHECK(f.item() == 23.0f);
  tape.backward(f);
  CHECK(x.grad().item() == 12.0f);
  CHECK(a.grad().item() == 9.0f);
  CHECK(b.grad().item() == 1.0f);
  CHECK(tape.num_nodes() == 0);  // the graph is gone after backward
}

TEST_CASE("gradients accumulate over backward calls until zero_grad", "[tape]") {
  Tape<Cpu> tape;
  auto w = tape.parameter({2}, {1.0f, -2.0f});
  for (int i = 0; i < 3; ++i) tape.backward(sum(w * 3.0f));
  CHECK(w.grad().to_vector() == std::vector<float>{9.0f, 9.0f});
  optim::zero_grad(std::vector<Tensor<Cpu>>{w}, /*set_to_none=*/false);
  CHECK(w.grad().to_vector() == std::vector<float>{0.0f, 0.0f});
  optim::zero_grad(std::vector<Tensor<Cpu>>{w});
  CHECK_FALSE(w.grad().defined());
}

// NOTE [fresh gradient buffers]: a buffer made for a node is written by ops that can (linear,
// matmul, elementwise: GEMM beta 0, set instead of add) and zeroed for the others; every later
// contribution adds. So: two backward passes give twice one pass; a parameter used by
// two ops gets both parts; a tensor that is both inputs of one op (x * x, a a^T) gets both.
// (Two passes give twice one pass to rounding: a gradient of several parts is summed in
// another order the second time.)
namespace {
// Every `stride`-th element of each parameter's gradient against central differences of loss().
template <class Loss>
void check_finite_differences(const std::vector<Tensor<Cpu>>& ps, Loss loss, std::size_t stride) {
  for (const auto& p : ps) {
    const auto g = p.grad().to_vector();
    for (std::size_t i = 0; i < g.size(); i += stride) {
      const float at = p.data<float>()[i], h = 1e-2f;
      double f[2];
      for (int sgn = 0; sgn < 2; ++sgn) {
        p.mutable_data<float>()[i] = at + (sgn ? -h : h);
        NoGrad ng;
        f[sgn] = loss().item();
      }
      p.mutable_data<float>()[i] = at;
      const double fd = (f[0] - f[1]) / (2.0 * h);
      CHECK(std::fabs(fd - g[i]) <= 2e-2 * (1.0 + std::fabs(fd)));
    }
  }
}
}  // namespace

TEST_CASE("a fresh gradient buffer is written once, then every contribution adds", "[tape]") {
  auto vals = [](std::size_t n, float s) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = s * rng::normal(3, n, i);
    return v;
  };
  Tape<Cpu> tape;
  auto x = tape.parameter({3, 4, 5}, vals(60, 1.0f)), w = tape.parameter({5, 6}, vals(30, 0.5f)),
       b = tape.parameter({6}, vals(6, 0.1f)), m = tape.parameter({6, 2}, vals(12, 0.3f)),
       e = tape.parameter({7, 5}, vals(35, 0.5f));
  const auto ids = tape.tokens({2, 3}, std::vector<std::int32_t>{3, 0, 3, 6, 3, 1});
  const auto targets = tape.tokens({2, 3}, std::vector<std::int32_t>{1, 2, 0, 6, 5, 3});
  const std::vector<Tensor<Cpu>> ps{x, w, b, m, e};
  // one graph: linear, a broadcast add and mul, a batched matmul whose weight's gradient is
  // summed over the batch (shared C), a matmul of a tensor with itself, and a tied embedding
  // (the head's matmul writes e's gradient, the lookup's scatter adds; the logits' gradient
  // is written by the sum and added to by the cross-entropy)
  auto loss = [&] {
    auto h = linear(x, w, b);                     // (3, 4, 6)
    auto g = (h + b) * b;                          // b broadcast twice more
    auto z = matmul(g, m);                         // (3, 4, 2): dm summed over 12 rows
    auto q = matmul(x, x, false, true);            // (3, 4, 4): x is both operands
    auto lg = matmul(embedding(e, ids), e, false, true);  // (2, 3, 7); id 3 three times
    return sum(z * z) + sum(q) + sum(x * x) + cross_entropy(lg, targets) + sum(lg);
  };
  auto grads = [&] {
    std::vector<std::vector<float>> g;
    for (const auto& p : ps) g.push_back(p.grad().to_vector());
    return g;
  };
  tape.backward(loss());
  const auto once = grads();
  tape.backward(loss());
  const auto twice = grads();
  for (std::size_t k = 0; k < ps.size(); ++k)
    for (std::size_t i = 0; i < once[k].size(); ++i)  // (sums of several parts: not exact)
      REQUIRE(std::fabs(twice[k][i] - 2.0f * once[k][i]) <= 1e-5f * (1.0f + std::fabs(once[k][i])));
  // against finite differences (the contributions of every use are all there)
  optim::zero_grad(ps);
  tape.backward(loss());
  check_finite_differences(ps, loss, 3);
}

TEST_CASE("a residual add passes its output's gradient through to an operand", "[tape]") {
  // NOTE [fresh gradient buffers]: a + b and a - b hand dy itself to a (or to b) as its
  // gradient buffer when nothing else holds it; later uses of that operand add into it.
  // Against finite differences, over residual chains with every case around it: the operand
  // used again (h0 in gelu), sub, x + x (one buffer: no pass-through), a broadcast operand.
  Tape<Cpu> tape;
  std::vector<float> xv(24), wv(16), bv(4);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = 0.7f * rng::normal(5, 24, i);
  for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = 0.4f * rng::normal(6, 16, i);
  for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = 0.2f * rng::normal(7, 4, i);
  auto x = tape.parameter({2, 3, 4}, xv), w = tape.parameter({4, 4}, wv), b = tape.parameter({4}, bv);
  const std::vector<Tensor<Cpu>> ps{x, w, b};
  auto loss = [&] {
    auto h0 = linear(x, w, b);          // (2, 3, 4)
    auto r1 = h0 + gelu(h0);            // h0 passes through, then gelu's gradient adds into it
    auto r2 = r1 - tanh(r1);            // sub: r1 passes through
    auto r3 = r2 + r2;                  // one tensor twice: no pass-through
    auto r4 = gelu(r3) + r3 + b;        // b broadcast: its gradient is a column sum
    auto r5 = linear(r4, w, b) + x;     // the linear's output passes through; x is a leaf
    return sum(r5 * r5);
  };
  tape.backward(loss());
  check_finite_differences(ps, loss, 1);
  // a passed-through buffer is a plain gradient: a second backward adds the same again
  const auto once = x.grad().to_vector();
  tape.backward(loss());
  const auto twice = x.grad().to_vector();
  for (std::size_t i = 0; i < once.size(); ++i)
    REQUIRE(std::fabs(twice[i] - 2.0f * once[i]) <= 1e-5f * (1.0f + std::fabs(once[i])));
}

TEST_CASE("cross-entropy writes dlogits over its logits when nothing else holds them", "[tape]") {
  // NOTE [fresh gradient buffers], written over: the logits' buffer becomes their gradient
  // buffer. The same gradients, bit for bit, as when a held handle forbids it; one N x V
  // buffer fewer at the peak; a held tensor keeps its values; where another op saved the
  // logits nothing is overwritten, and a later contribution adds into the overwritten buffer.
  constexpr std::int64_t N = 6, C = 4, V = 50;
  std::vector<float> xv(N * C), wv(V * C);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = rng::normal(8, xv.size(), i);
  for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = 0.5f * rng::normal(9, wv.size(), i);
  Tape<Cpu> tape;
  auto x = tape.parameter({N, C}, xv), w = tape.parameter({V, C}, wv);
  const auto t = tape.tokens({N}, std::vector<std::int32_t>{3, 49, 0, 3, 17, 8});
  const std::vector<Tensor<Cpu>> ps{x, w};
  auto grads = [&] {
    std::vector<std::vector<float>> g{x.grad().to_vector(), w.grad().to_vector()};
    optim::zero_grad(ps);
    return g;
  };
  reset_peak_memory<Cpu>();
  const std::int64_t base = memory_stats<Cpu>().live_total;
  {
    auto loss = cross_entropy(matmul(x, w, false, true), t);  // the logits die unheld (a
    tape.backward(loss);  // temporary in backward's own full expression would still be held)
  }
  const std::int64_t peak_over = memory_stats<Cpu>().peak_total - base;
  const auto over = grads();

  reset_peak_memory<Cpu>();
  std::vector<float> held_before;
  {
    auto logits = matmul(x, w, false, true);
    held_before = logits.to_vector();
    tape.backward(cross_entropy(logits, t));
    CHECK(logits.to_vector() == held_before);  // not written over: the handle holds it
  }
  const std::int64_t peak_held = memory_stats<Cpu>().peak_total - base;
  CHECK(grads() == over);
  CHECK(peak_held - peak_over == N * V * 4);

  // another op saved the logits (their square): no overwrite; tanh saved only its output, so
  // there the buffer is overwritten and tanh's backward adds into it afterwards
  for (int saved_elsewhere = 0; saved_elsewhere < 2; ++saved_elsewhere) {
    auto loss = [&] {
      auto logits = matmul(x, w, false, true);
      auto other = saved_elsewhere ? sum(logits * logits) * 0.01f : sum(tanh(logits));
      auto ce = cross_entropy(logits, t);
      return ce + other;
    };
    tape.backward(loss());
    check_finite_differences(ps, loss, 7);
    optim::zero_grad(ps);
  }
}

TEST_CASE("NoGrad records nothing and its outputs need no gradient", "[tape]") {
  Tape<Cpu> tape;
  auto w = tape.parameter({2, 2}, {1, 2, 3, 4});
  {
    NoGrad guard;
    auto y = gelu(w * w);
    CHECK_FALSE(y.requires_grad());
    CHECK(tape.num_nodes() == 0);
  }
  auto y = gelu(w);
  CHECK(y.requires_grad());
  CHECK(tape.num_nodes() == 1);
  tape.clear();
}

TEST_CASE("ops on inputs that need no gradient are not recorded", "[tape]") {
  Tape<Cpu> tape;
  auto x = tape.input({3}, {1, 2, 3});
  auto y = relu(x) + 1.0f;
  CHECK_FALSE(y.requires_grad());
  CHECK(tape.num_nodes() == 0);
  REQUIRE_THROWS_WITH(tape.backward(sum(y)), REMAT_CONTAINS("does not require grad"));
}

TEST_CASE("backward twice through the same graph is an error", "[tape][errors]") {
  Tape<Cpu> tape;
  auto w = tape.parameter({2}, {1, 2});
  auto loss = sum(w * w);
  tape.backward(loss);
  REQUIRE_THROWS_AS(tape.backward(loss), Error);
  REQUIRE_THROWS_WITH(tape.backward(loss), REMAT_CONTAINS("backward twice"));
}

TEST_CASE("backward of a non-scalar needs a seed gradient of its shape", "[tape][errors]") {
  Tape<Cpu> tape;
  auto w = tape.parameter({2, 3}, {1, 2, 3, 4, 5, 6});
  auto y = w * 2.0f;
  REQUIRE_THROWS_WITH(tape.backward(y), REMAT_CONTAINS("needs a scalar (did you forget mean()?)"));
  REQUIRE_THROWS_WITH(tape.backward(y, tape.input({3}, {1, 1, 1})),
                      REMAT_CONTAINS("seed gradient has shape [3], expected the loss's shape [2, 3]"));
  tape.backward(y, tape.input({2, 3}, {1, 0, 0, 0, 0, 2}));
  CHECK(w.grad().to_vector() == std::vector<float>{2, 0, 0, 0, 0, 4});
}

TEST_CASE("tensors of different tapes cannot meet in one op", "[tape][errors]") {
  Tape<Cpu> t1, t2;
  auto a = t1.parameter({2}, {1, 2});
  auto b = t2.parameter({2}, {3, 4});
  REQUIRE_THROWS_WITH(a + b, REMAT_CONTAINS("remat::binary: input 1 belongs to a different tape"));
  REQUIRE_THROWS_WITH(matmul(reshape(a, {1, 2}), reshape(b, {2, 1})),
                      REMAT_CONTAINS("remat::matmul: input 1 belongs to a different tape"));
  REQUIRE_THROWS_WITH(t1.backward(sum(b)), REMAT_CONTAINS("loss belongs to another tape"));
}

TEST_CASE("a tensor from a consumed graph cannot carry gradient into a new one", "[tape][errors]") {
  Tape<Cpu> tape;
  auto w = tape.parameter({2}, {1, 2});
  auto h = w * 3.0f;
  tape.backward(sum(h));
  REQUIRE_THROWS_WITH(sum(h * w), REMAT_CONTAINS("already consumed"));
  auto ok = sum(detach(h) * w);  // detach makes it a constant
  tape.backward(ok);
  CHECK(w.grad().to_vector() == std::vector<float>{3.0f + 3.0f, 3.0f + 6.0f});
}

TEST_CASE("undefined tensors are reported, not dereferenced", "[tape][errors]") {
  Tape<Cpu> tape;
  Tensor<Cpu> none;
  auto a = tape.parameter({2}, {1, 2});
  REQUIRE_THROWS_WITH(a + none, REMAT_CONTAINS("input 1 is an undefined tensor"));
  REQUIRE_THROWS_WITH(none.shape(), REMAT_CONTAINS("undefined"));
}

TEST_CASE("Philox is the published generator: known-answer vectors", "[rng]") {
  // Random123's kat_vectors for philox4x32-10: counter 0, key 0.
  const auto r = rng::philox(rng::Philox4{{0, 0, 0, 0}}, 0, 0);
  CHECK(r.v[0] == 0x6627e8d5u);
  CHECK(r.v[1] == 0xe169c58du);
  CHECK(r.v[2] == 0xbc57ac4cu);
  CHECK(r.v[3] == 0x9b00dbd8u);
  // and all-ones counter with the pi key
  const auto p = rng::philox(rng::Philox4{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
                             0xffffffffu, 0xffffffffu);
  CHECK(p.v[0] == 0x408f276du);
  CHECK(p.v[1] == 0x41c83b0eu);
  CHECK(p.v[2] == 0xa20bc7c6u);
  CHECK(p.v[3] == 0x6d5451fdu);
}

TEST_CASE("token ids with a declared range are written in place within it; positions are 0..n-1", "[tape]") {
  Tape<Cpu> tape;
  auto ids = tape.tokens({2, 3}, {0, 1, 2, 3, 4, 5}, 0, 9);
  CHECK(ids.impl()->known_lo == 0);
  CHECK(ids.impl()->known_hi == 9);  // the declared range, not the values'
  tape.write_tokens(ids, {9, 8, 7, 6, 5, 4});
  CHECK(ids.to_vector<std::int32_t>() == std::vector<std::int32_t>{9, 8, 7, 6, 5, 4});
  auto table = tape.parameter({10, 2}, std::vector<float>(20, 1.0f));
  CHECK(embedding(table, ids).shape() == Shape{2, 3, 2});  // the range check passes on 9 < 10
  CHECK_THROWS_WITH(tape.write_tokens(ids, {0, 1, 2, 3, 4, 10}),
                    Catch::Contains("id 10 at index 5 is outside the declared range [0, 9]"));
  CHECK(ids.to_vector<std::int32_t>() == std::vector<std::int32_t>{9, 8, 7, 6, 5, 4});  // untouched
  CHECK_THROWS_WITH(tape.write_tokens(ids, {1, 2}), Catch::Contains("expected an i32 tensor of as many elements"));
  CHECK_THROWS_WITH(tape.tokens({2}, {0, 12}, 0, 9), Catch::Contains("id 12 at index 1 is outside"));
  CHECK_THROWS_WITH(tape.tokens({1}, {0}, 3, 2), Catch::Contains("is empty"));
  const auto pos = tape.positions(5);
  CHECK(pos.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 1, 2, 3, 4});
  CHECK(pos.impl()->known_lo == 0);
  CHECK(pos.impl()->known_hi == 4);
}
