// SPDX-License-Identifier: MIT
// The GPT modules: parameter names and counts, the whole model's backward against finite
// differences, training on a learnable task, and the optimizers against their formulas.

#include <cmath>

#include "support/gradcheck.hpp"

using namespace remat;
using remat_test::T;

namespace {
nn::GPTConfig tiny() {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 6;
  c.n_layer = 2;
  c.n_embd = 8;
  c.n_head = 2;
  return c;
}
}  // namespace

TEST_CASE("GPT parameters follow the Hugging Face GPT-2 names and count", "[nn]") {
  Tape<Cpu> tape;
  auto c = tiny();
  nn::GPT<Cpu> model(tape, c);
  std::vector<std::string> names;
  for (const auto& p : model.named_parameters()) names.push_back(p.first);
  const std::vector<std::string> block = {
      "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
      "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
      "mlp.c_proj.weight", "mlp.c_proj.bias"};
  std::vector<std::string> expect = {"wte.weight", "wpe.weight"};
  for (int i = 0; i < 2; ++i)
    for (const auto& n : block) expect.push_back("h." + std::to_string(i) + "." + n);
  expect.push_back("ln_f.weight");
  expect.push_back("ln_f.bias");
  CHECK(names == expect);
  const std::int64_t C = 8, V = 11, P = 6, L = 2;
  CHECK(model.num_parameters() == V * C + P * C + L * (12 * C * C + 13 * C) + 2 * C);
  CHECK(model.parameter("h.1.attn.c_attn.weight").shape() == Shape{C, 3 * C});  // [in, out]
  CHECK(model.parameter("h.1.mlp.c_proj.weight").shape() == Shape{4 * C, C});
}

TEST_CASE("the GPT's full backward matches finite differences", "[nn][grad]") {
  Tape<Cpu> tape;
  auto c = tiny();
  c.init_std = 0.3f;  // larger weights: gradients well above the finite-difference noise
  nn::GPT<Cpu> model(tape, c);
  auto idx = tape.tokens({2, 5}, {1, 4, 2, 9, 0, 3, 3, 10, 7, 5});
  auto tgt = tape.tokens({2, 5}, {4, 2, 9, 0, 6, 3, 10, 7, 5, 1});
  std::vector<T> ps;
  for (const char* n : {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.attn.c_attn.weight",
                        "h.0.attn.c_proj.bias", "h.1.ln_2.bias", "h.1.mlp.c_fc.weight",
                        "h.1.mlp.c_proj.weight", "ln_f.weight", "ln_f.bias"})
    ps.push_back(model.parameter(n));
  remat_test::GradcheckOptions o;
  o.max_elems = 12;
  remat_test::gradcheck(tape, [&](const std::vector<T>&) { return model.loss(idx, tgt); }, ps, o);
}

TEST_CASE("a padded vocabulary is internal: zero rows, the same logits, loss and training",
          "[nn][grad]") {
  auto c = tiny();  // 11 tokens
  c.init_std = 0.3f;
  auto p = c;
  p.vocab_multiple = 8;  // 16 rows of wte
  REQUIRE(p.padded_vocab() == 16);
  Tape<Cpu> tape;
  nn::GPT<Cpu> plain(tape, c), padded(tape, p);
  const std::int64_t C = 8;
  CHECK(padded.wte.weight.shape() == Shape{16, C});
  CHECK(padded.saved_shape(0) == Shape{11, C});  // NOTE [padded parameters]
  CHECK(plain.saved_shape(0) == Shape{11, C});
  CHECK(padded.saved_shape(1) == padded.wpe.weight.shape());
  {
    const auto wp = padded.wte.weight.to_vector(), w = plain.wte.weight.to_vector();
    for (std::size_t i = 0; i < wp.size(); ++i) CHECK(wp[i] == (i < w.size() ? w[i] : 0.0f));
  }
  auto idx = tape.tokens({2, 5}, {1, 4, 2, 9, 0, 3, 3, 10, 7, 5});
  auto tgt = tape.tokens({2, 5}, {4, 2, 9, 0, 6, 3, 10, 7, 5, 1});
  {
    NoGrad ng;
    const T a = plain(idx, false), b = padded(idx, false);
    CHECK(b.shape() == Shape{2, 5, 11});  // the padding's columns cut off
    const auto av = a.to_vector(), bv = b.to_vector();
    for (std::size_t i = 0; i < av.size(); ++i) CHECK(bv[i] == Approx(av[i]).margin(1e-6));
  }
  // SGD with momentum and weight decay (AdamW would turn the attention's near-zero key-bias
  // gradients, rounding noise, into full steps): the same training; the padding's gradient is
  // zero and the padding stays exactly zero
  optim::SGD<Cpu> oa(plain.parameters(), {0.1f, 0.9f, 0.1f, false});
  optim::SGD<Cpu> ob(padded.parameters(), {0.1f, 0.9f, 0.1f, false});
  const auto padding_is_zero = [&](const T& t) {
    const auto v = t.to_vector();
    for (std::size_t i = 11 * C; i < v.size(); ++i) CHECK(v[i] == 0.0f);
  };
  for (int step = 0; step < 3; ++step) {
    auto la = plain.loss(idx, tgt), lb = padded.loss(idx, tgt);
    tape.backward(la);
    tape.backward(lb);
    padding_is_zero(padded.wte.weight.grad());
    oa.step();
    ob.step();
    oa.zero_grad();
    ob.zero_grad();
    CHECK(lb.item() == Approx(la.item()).epsilon(1e-5));
  }
  const auto np = padded.named_parameters(), na = plain.named_parameters();
  for (std::size_t i = 0; i < np.size(); ++i) {
    const auto vp = np[i].second.to_vector(), va = na[i].second.to_vector();
    INFO(np[i].first);
    for (std::size_t j = 0; j < vp.size(); ++j)
      CHECK(vp[j] == (j < va.size() ? Approx(va[j]).margin(1e-5) : Approx(0.0f).margin(0.0)));
  }
  // AdamW with weight decay leaves the padding at zero too (zero moments, zero update)
  optim::AdamW<Cpu> adamw(padded.parameters(), {1e-2f, 0.9f, 0.99f, 1e-8f, 0.1f});
  for (int step = 0; step < 2; ++step) {
    tape.backward(padded.loss(idx, tgt));
    adamw.step();
    adamw.zero_grad();
  }
  padding_is_zero(padded.wte.weight);
  // the padded model's backward against finite differences
  remat_test::GradcheckOptions o;
  o.max_elems = 12;
  remat_test::gradcheck(tape, [&](const std::vector<T>&) { return padded.loss(idx, tgt); },
                        {padded.parameter("wte.weight"), padded.parameter("ln_f.bias")}, o);
  // a bad multiple is an error before any parameter is made
  auto bad = c;
  bad.vocab_multiple = 0;
  REQUIRE_THROWS_WITH(nn::GPT<Cpu>(tape, bad), REMAT_CONTAINS("vocab_multiple 0"));
}

TEST_CASE("a tiny GPT learns a synthetic sequence task", "[nn][train]") {
  Tape<Cpu> tape;
  nn::GPTConfig c;
  c.vocab_size = 16;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_embd = 32;
  c.n_head = 4;
  nn::GPT<Cpu> model(tape, c);
  // Sequences counting up by a per-row stride: the next token is predictable from context.
  std::vector<std::int32_t> x, y;
  for (int b = 0; b < 8; ++b)
    for (int t = 0; t < 16; ++t) {
      x.push_back((b + t * (1 + b % 3)) % 16);
      y.push_back((b + (t + 1) * (1 + b % 3)) % 16);
    }
  auto idx = tape.tokens({8, 16}, x), tgt = tape.tokens({8, 16}, y);
  optim::AdamW<Cpu> opt(model.parameters(), {3e-3f, 0.9f, 0.999f, 1e-8f, 0.0f});
  float first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    auto loss = model.loss(idx, tgt);
    tape.backward(loss);
    optim::clip_grad_norm(model.parameters(), 1.0f);
    opt.step();
    opt.zero_grad();
    (step == 0 ? first : last) = loss.item();
  }
  INFO("loss " << first << " -> " << last);
  CHECK(first > 2.3f);           // about ln 16 = 2.77 at the start
  CHECK(last < 0.25f * first);   // well below: the task is learnable
}

TEST_CASE("AdamW and SGD follow their update formulas", "[optim]") {
  Tape<Cpu> tape;
  auto p = tape.parameter({2}, {1.0f, -2.0f});
  auto q = tape.parameter({2}, {1.0f, -2.0f});
  optim::AdamW<Cpu> adam({p}, {0.1f, 0.9f, 0.99f, 1e-8f, 0.5f});
  optim::SGD<Cpu> sgd({q}, {0.1f, 0.9f, 0.0f, false});
  double pr[2] = {1.0, -2.0}, m[2] = {0, 0}, v[2] = {0, 0}, qr[2] = {1.0, -2.0}, buf[2] = {0, 0};
  for (int t = 1; t <= 3; ++t) {
    tape.backward(sum(p * p * 1.5f));  // g = 3 p
    tape.backward(sum(q * q * 1.5f));
    double gp[2] = {3 * pr[0], 3 * pr[1]}, gq[2] = {3 * qr[0], 3 * qr[1]};
    adam.step();
    sgd.step();
    adam.zero_grad();
    sgd.zero_grad();
    for (int i = 0; i < 2; ++i) {
      pr[i] *= 1.0 - 0.1 * 0.5;
      m[i] = 0.9 * m[i] + 0.1 * gp[i];
      v[i] = 0.99 * v[i] + 0.01 * gp[i] * gp[i];
      const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.99, t));
      pr[i] -= 0.1 * mh / (std::sqrt(vh) + 1e-8);
      buf[i] = t == 1 ? gq[i] : 0.9 * buf[i] + gq[i];
      qr[i] -= 0.1 * buf[i];
    }
  }
  const auto pv = p.to_vector(), qv = q.to_vector();
  for (int i = 0; i < 2; ++i) {
    CHECK(pv[i] == Approx(pr[i]).epsilon(1e-5));
    CHECK(qv[i] == Approx(qr[i]).epsilon(1e-5));
  }
}

TEST_CASE("clip_grad_norm scales the global norm down to the limit", "[optim]") {
  Tape<Cpu> tape;
  auto a = tape.parameter({2}, {3.0f, 0.0f}), b = tape.parameter({1}, {4.0f});
  tape.backward(sum(a * a * 0.5f) + sum(b * b * 0.5f));  // grads (3, 0) and (4): norm 5
  const float before = optim::clip_grad_norm<Cpu>({a, b}, 1.0f);
  CHECK(before == Approx(5.0f));
  CHECK(optim::grad_norm<Cpu>({a, b}) == Approx(1.0f).epsilon(1e-5));
  CHECK(a.grad().to_vector()[0] == Approx(0.6f).epsilon(1e-5));
  // clip_grad_norm_ leaves the norm in a tensor; under the limit nothing is scaled
  const auto ga = a.grad().to_vector();
  const Tensor<Cpu> norm = optim::clip_grad_norm_<Cpu>({a, b}, 2.0f);
  CHECK(norm.shape() == Shape{});
  CHECK(norm.item() == Approx(1.0f).epsilon(1e-5));
  CHECK(a.grad().to_vector() == ga);
  CHECK(optim::clip_grad_norm<Cpu>({}, 1.0f) == 0.0f);
  REQUIRE_THROWS_WITH(optim::clip_grad_norm_<Cpu>({}, 1.0f), REMAT_CONTAINS("no parameters"));
  REQUIRE_THROWS_WITH(optim::clip_grad_norm_<Cpu>({a}, 0.0f), REMAT_CONTAINS("expected > 0"));
}
