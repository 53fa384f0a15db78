// SPDX-License-Identifier: MIT
// "Bit for bit" beyond GPT's graph shape (NOTE [checkpoint semantics] 9): a segment's input that
// also feeds ops outside the segment (a skip connection across it), gradients accumulated over
// micro-batches into shared weights (captured, or passed as a segment input), one tensor
// passed as two inputs, and outputs that are inputs or captured tensors returned unchanged. The replay accumulates into the real gradient slots in the plain run's
// order, so every gradient is bitwise the plain run's.

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <remat/remat.hpp>
#include <remat/testing/catch2.hpp>

#include "support/catch.hpp"
#include "support/mlp_block.hpp"

using namespace remat;
using T = Tensor<Cpu>;

namespace {

// y = x + W2 gelu(W1 x + b1) + b2 (support/mlp_block.hpp): x takes two gradients inside the
// segment, so their sum and a gradient from outside are three additions whose order shows in
// the last bit.
using Mlp = remat_test::MlpBlock;

std::vector<T> with(std::vector<T> v, std::initializer_list<T> more) {
  v.insert(v.end(), more);
  return v;
}

// Seeds backward with a fixed pseudo-random gradient of out's shape.
void backward_seeded(Tape<Cpu>& tape, const T& out, std::uint64_t stream) {
  std::vector<float> seed(static_cast<std::size_t>(out.numel()));
  for (std::size_t i = 0; i < seed.size(); ++i) seed[i] = rng::normal(77, stream, i);
  tape.backward(out, tape.input(out.shape(), seed));
}

std::vector<std::vector<float>> take(const std::vector<T>& ts) {
  std::vector<std::vector<float>> g;
  for (const auto& t : ts) {
    g.push_back(t.grad().defined() ? t.grad().to_vector() : std::vector<float>());
    t.clear_grad();
  }
  return g;
}

}  // namespace

TEST_CASE("a skip connection across a segment: gradients bitwise the plain run's",
          "[checkpoint][bitwise]") {
  Tape<Cpu> tape(3);
  Mlp block(tape, 16, 100);
  SECTION("the segment's input is a leaf: y = block(x); y + x") {
    auto x = tape.randn({8, 16}, 1.0f, 5, /*requires_grad=*/true);
    auto report = testing::compare_runs(
        tape,
        [&](bool ck) {
          T y = ck ? T(checkpoint([&](const T& in) { return block(in); }, x)) : block(x);
          return y + x;
        },
        with(block.params(), {x}));
    INFO(report.detail);
    REQUIRE(report.equal);
  }
  SECTION("the segment's input is recorded, and feeds ops before and after the segment") {
    auto x0 = tape.randn({8, 16}, 1.0f, 6, true);
    auto w0 = nn::init::normal(tape, {16, 16}, 0.3f, 7);
    auto b0 = nn::init::normal(tape, {16}, 0.1f, 8);
    auto report = testing::compare_runs(
        tape,
        [&](bool ck) {
          T h = gelu(linear(x0, w0, b0));
          T before = h * 0.5f;
          T y = ck ? T(checkpoint([&](const T& in) { return block(in); }, h)) : block(h);
          return (y + h) * h + before;
        },
        with(block.params(), {x0, w0, b0}));
    INFO(report.detail);
    REQUIRE(report.equal);
  }
  SECTION("one tensor passed as two inputs of the segment") {
    auto x = tape.randn({8, 16}, 1.0f, 9, true);
    auto fn = [&](const T& a, const T& b) { return block(a) * b + a; };
    auto report = testing::compare_runs(
        tape,
        [&](bool ck) {
          T y = ck ? T(checkpoint(fn, x, x)) : fn(x, x);
          return y + x;
        },
        with(block.params(), {x}));
    INFO(report.detail);
    REQUIRE(report.equal);
  }
}

TEST_CASE("outputs that are inputs or captured tensors pass through: bitwise the plain run's",
          "[checkpoint][bitwise]") {
  Tape<Cpu> tape(6);
  auto w = nn::init::normal(tape, {16, 16}, 0.3f, 400);
  auto x0 = tape.randn({8, 16}, 1.0f, 401, true);
  for (const bool recorded : {false, true}) {
    INFO((recorded ? "the input is a recorded tensor" : "the input is a leaf"));
    // returns its input and a captured parameter unchanged, besides a computed output
    auto fn = [&](const T& a) { return std::make_tuple(gelu(matmul(a, w)), a, w); };
    auto report = testing::compare_runs(
        tape,
        [&](bool ck) {
          T h = recorded ? T(gelu(x0) * 1.3f) : x0;
          auto [p, y, wy] = ck ? checkpoint(fn, h) : fn(h);
          T skip = matmul(y, wy);  // the pass-throughs feed several ops outside
          return (y * 3.1f + gelu(y) + y * y + skip) * p + gelu(h) * 0.7f + h * 1.7f;
        },
        {x0, w});
    INFO(report.detail);
    REQUIRE(report.equal);
  }
}

TEST_CASE("gradients accumulated over micro-batches into shared weights: bitwise the plain run's",
          "[checkpoint][bitwise]") {
  Tape<Cpu> tape(4);
  Mlp block(tape, 16, 200);
  auto w = nn::init::normal(tape, {16, 32}, 0.3f, 300);  // shared by both micro-batches
  std::vector<T> xs = {tape.randn({8, 16}, 1.0f, 11, true), tape.randn({8, 16}, 1.0f, 12, true)};
  const std::vector<T> watch = with(block.params(), {w, xs[0], xs[1]});
  for (const bool as_input : {true, false}) {
    INFO((as_input ? "the shared weight is a segment input" : "the shared weight is captured"));
    // the shared weight is used twice inside the segment
    auto fn_in = [&](const T& x, const T& wt) { return gelu(matmul(block(x), wt)) * matmul(x, wt); };
    auto fn_cap = [&](const T& x) { return gelu(matmul(block(x), w)) * matmul(x, w); };
    auto run = [&](bool ck) {
      for (std::size_t mb = 0; mb < xs.size(); ++mb) {
        T out;
        if (!ck)
          out = fn_in(xs[mb], w);
        else if (as_input)
          out = checkpoint(fn_in, xs[mb], w);
        else
          out = checkpoint(fn_cap, xs[mb]);
        // the weight also takes a gradient outside the segment, before it in program order
        backward_seeded(tape, out + matmul(xs[mb], w), mb);
      }
      return take(watch);
    };
    const auto plain = run(false);
    const auto ckpt = run(true);
    REQUIRE(plain.size() == ckpt.size());
    for (std::size_t i = 0; i < plain.size(); ++i) {
      INFO("gradient " << i);
      REQUIRE(plain[i].size() == ckpt[i].size());
      REQUIRE(std::memcmp(plain[i].data(), ckpt[i].data(), plain[i].size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("the equivalence helper names the first differing element, bit exact, and the count",
          "[checkpoint][testing]") {
  Tape<Cpu> tape(5);
  auto x = tape.randn({4, 8}, 1.0f, 13, true);
  // Not a checkpoint at all: the "checkpointed" run scales by 1 + 2^-20, so most elements move
  // by an ulp or two while printing the same at six digits.
  auto report = testing::compare_runs(
      tape, [&](bool ck) { return x * (ck ? 1.0f + 1.0f / 1048576.0f : 1.0f); }, {x});
  REQUIRE(!report.equal);
  INFO(report.detail);
  CHECK(report.detail.find("gradient 0 element 0:") != std::string::npos);
  CHECK(report.detail.find(" of 32 elements differ") != std::string::npos);
  CHECK(report.detail.find("0x") != std::string::npos);  // the bit patterns
  // equal runs report equal
  auto same = testing::compare_runs(tape, [&](bool) { return x * 2.0f; }, {x});
  REQUIRE(same.equal);
}

TEST_CASE("tensors recorded outside and captured by segments: bitwise the plain run's",
          "[checkpoint][bitwise]") {
  // s = f(w), computed once per step and read by every block (weight norm, a LoRA merge):
  // backward must reach s's producer through the segments (w.grad stayed undefined), and
  // s's gradient must sum in the plain order when s is also used outside.
  Tape<Cpu> tape(8);
  auto w = nn::init::normal(tape, {16, 16}, 0.3f, 500);
  auto a = nn::init::normal(tape, {16, 4}, 0.3f, 501);
  auto b = nn::init::normal(tape, {4, 16}, 0.3f, 502);
  auto x = tape.randn({8, 16}, 1.0f, 503, true);
  for (const bool also_outside : {false, true})
    for (const int blocks : {1, 3}) {
      INFO("blocks " << blocks << (also_outside ? ", s also used after the segments" : ""));
      auto report = testing::compare_runs(
          tape,
          [&](bool ck) {
            T s = w + matmul(a, b) * 0.5f;  // the merged weight
            // captured by value: the segments replay after this lambda has returned
            auto fn = [s](const T& in) { return gelu(matmul(in, s)) + in; };
            T h = x;
            for (int i = 0; i < blocks; ++i) h = ck ? T(checkpoint(fn, h)) : fn(h);
            return also_outside ? h + matmul(h, s) : h;
          },
          {w, a, b, x});
      INFO(report.detail);
      REQUIRE(report.equal);  // an undefined w.grad (no path to s's producer) differs too
    }
}

TEST_CASE("a tensor returned twice is one output with one gradient slot: bitwise",
          "[checkpoint][bitwise]") {
  Tape<Cpu> tape(9);
  auto w = nn::init::normal(tape, {128}, 0.3f, 600);
  auto x = tape.randn({128}, 1.0f, 601, true);
  auto fn = [&](const T& in) {
    T t = tanh(in) * w;
    return std::make_tuple(t, gelu(t), t);
  };
  auto report = testing::compare_runs(
      tape,
      [&](bool ck) {
        auto [p, g, q] = ck ? checkpoint(fn, x) : fn(x);
        return p * p + q * tanh(q) + g * p;  // consumers of both handles, interleaved
      },
      {w, x});
  INFO(report.detail);
  REQUIRE(report.equal);
}
