// SPDX-License-Identifier: MIT
// Kernel and optimizer properties that single-line bugs once broke without any test noticing
// (issue 9, point 8; tests/mutation/README.md): kernels' scratch is in the ledger, dropout
// drops, and one AdamW or SGD (Nesterov) step equals the textbook update computed in double.

#include <cmath>
#include <vector>

#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;
using T = Tensor<Cpu>;

TEST_CASE("a kernel's scratch is counted under temporaries while it lives", "[memory][mutation]") {
  const std::int64_t before = memory_stats<Cpu>().live_of(Category::temporaries);
  {
    const cpu::Scratch<double> s(1000);
    CHECK(memory_stats<Cpu>().live_of(Category::temporaries) - before == 8000);
  }
  CHECK(memory_stats<Cpu>().live_of(Category::temporaries) == before);
  // through a kernel: cross entropy's forward sums in a scratch of doubles, one per row
  Tape<Cpu> tape;
  auto logits = tape.randn({64, 5}, 1.0f, 1);
  auto targets = tape.tokens({64}, std::vector<std::int32_t>(64, 2));
  NoGrad ng;
  reset_peak_memory<Cpu>();
  const std::int64_t live = memory_stats<Cpu>().live_of(Category::temporaries);
  (void)cross_entropy(logits, targets).item();
  const std::int64_t scratch = static_cast<std::int64_t>(Cpu::cross_entropy_forward_scratch(64));
  REQUIRE(scratch > 0);
  CHECK(memory_stats<Cpu>().peak_of(Category::temporaries) - live >= scratch);
}

TEST_CASE("dropout zeroes about p of the elements and scales the rest by 1/(1-p)",
          "[ops][dropout][mutation]") {
  Tape<Cpu> tape(11);
  const std::int64_t n = 20000;
  auto x = tape.parameter({n}, std::vector<float>(static_cast<std::size_t>(n), 1.0f));
  auto y = dropout(x, 0.3f);
  const auto v = y.to_vector();
  std::int64_t zeros = 0;
  for (float e : v) {
    if (e == 0.0f) ++zeros;
    else CHECK(e == Approx(1.0f / 0.7f));
  }
  CHECK(zeros > n * 27 / 100);
  CHECK(zeros < n * 33 / 100);
  tape.backward(sum(y));  // the same elements get no gradient
  const auto g = x.grad().to_vector();
  for (std::size_t i = 0; i < v.size(); i += 97) CHECK(g[i] == v[i]);
}

namespace {
// p, g: one parameter's values and its (fixed) gradient; returns p after `steps` steps.
std::vector<double> adamw_reference(std::vector<double> p, const std::vector<double>& g, int steps,
                                    double lr, double b1, double b2, double eps, double wd) {
  std::vector<double> m(p.size()), v(p.size());
  for (int t = 1; t <= steps; ++t)
    for (std::size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1.0 - lr * wd;  // decoupled weight decay
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  return p;
}
std::vector<double> sgd_reference(std::vector<double> p, const std::vector<double>& g, int steps,
                                  double lr, double mu, double wd, bool nesterov) {
  std::vector<double> buf(p.size());
  for (int t = 0; t < steps; ++t)
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double gi = g[i] + wd * p[i];
      buf[i] = t == 0 ? gi : mu * buf[i] + gi;
      p[i] -= lr * (nesterov ? gi + mu * buf[i] : buf[i]);
    }
  return p;
}
// Runs `steps` optimizer steps on p with the gradient g (loss = sum(p * g)).
template <class Opt>
std::vector<float> run_steps(Tape<Cpu>& tape, T& p, const std::vector<float>& g, Opt& opt, int steps) {
  auto gt = tape.input({static_cast<std::int64_t>(g.size())}, g);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    tape.backward(sum(p * gt));
    opt.step();
  }
  return p.to_vector();
}
}  // namespace

TEST_CASE("AdamW steps equal the reference update, epsilon outside the square root",
          "[optim][mutation]") {
  const std::vector<float> p0 = {1.0f, -1.0f, 0.5f}, g = {0.01f, -0.02f, 0.003f};
  for (const float wd : {0.0f, 0.1f}) {
    INFO("weight decay " << wd);
    Tape<Cpu> tape;
    auto p = tape.parameter({3}, p0);
    // eps comparable to sqrt(v): where it sits changes the step by a factor of ~3
    optim::AdamW<Cpu> opt({p}, {0.1f, 0.9f, 0.999f, 0.01f, wd});
    const auto got = run_steps(tape, p, g, opt, 3);
    const auto want = adamw_reference({1.0, -1.0, 0.5}, {0.01, -0.02, 0.003}, 3, 0.1, 0.9, 0.999, 0.01, wd);
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-5));
  }
}

TEST_CASE("SGD steps equal torch's update: momentum, Nesterov, weight decay", "[optim][mutation]") {
  const std::vector<float> p0 = {1.0f, -1.0f, 0.5f}, g = {0.5f, -0.25f, 1.0f};
  for (const bool nesterov : {false, true})
    for (const float wd : {0.0f, 0.1f}) {
      INFO("nesterov " << nesterov << ", weight decay " << wd);
      Tape<Cpu> tape;
      auto p = tape.parameter({3}, p0);
      optim::SGD<Cpu> opt({p}, {0.1f, 0.9f, wd, nesterov});
      const auto got = run_steps(tape, p, g, opt, 3);
      const auto want = sgd_reference({1.0, -1.0, 0.5}, {0.5, -0.25, 1.0}, 3, 0.1, 0.9, wd, nesterov);
      for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-5));
    }
}

TEST_CASE("layer norm's default epsilon is GPT-2's 1e-5", "[ops][mutation]") {
  // A row of small variance (1.25e-4), where epsilon moves the result: 1e-3 would shrink it 3x.
  Tape<Cpu> tape;
  const std::vector<float> xs = {0.0f, 0.01f, 0.02f, 0.03f};
  auto x = tape.input({1, 4}, xs);
  auto w = tape.input({4}, std::vector<float>(4, 1.0f));
  auto b = tape.input({4}, std::vector<float>(4, 0.0f));
  const auto y = layer_norm(x, w, b).to_vector();
  double mean = 0, var = 0;
  for (float v : xs) mean += v / 4.0;
  for (float v : xs) var += (v - mean) * (v - mean) / 4.0;
  for (std::size_t i = 0; i < xs.size(); ++i)
    CHECK(y[i] == Approx((xs[i] - mean) / std::sqrt(var + 1e-5)).epsilon(1e-4));
}

TEST_CASE("an op that saves one buffer twice counts its bytes once", "[memory][mutation]") {
  Tape<Cpu> tape;
  auto x = tape.randn({8, 8}, 1.0f, 4, true);
  const std::size_t before = tape.saved_bytes();
  auto y = x * x;  // mul saves both inputs: the same buffer
  CHECK(tape.saved_bytes() - before == x.bytes());
  tape.backward(sum(y));
}
