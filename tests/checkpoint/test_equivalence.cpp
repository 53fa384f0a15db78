// SPDX-License-Identifier: MIT
// checkpoint() gives the gradients of the plain run, bit for bit on the CPU: every GPT strategy,
// with and without dropout, nested segments, policies, several outputs; fn runs exactly twice.

#include <cmath>
#include <cstring>

#include <remat/remat.hpp>

#include "support/catch.hpp"
#include "support/mlp_block.hpp"

using namespace remat;
using T = Tensor<Cpu>;

namespace {

nn::GPTConfig small_gpt(const std::string& strategy, float dropout, DType precision = DType::f32) {
  nn::GPTConfig c;
  c.precision = precision;
  c.vocab_size = 64;
  c.block_size = 16;
  c.n_layer = 4;
  c.n_embd = 32;
  c.n_head = 4;
  c.dropout = dropout;
  c.checkpoint = nn::CheckpointStrategy::parse(strategy);
  return c;
}

struct Run {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;  // of every parameter, after the last step
};

// Two training steps (SGD), so the second step's gradients depend on the first's update too.
Run train(const std::string& strategy, float dropout, DType precision = DType::f32) {
  Tape<Cpu> tape(42);
  nn::GPT<Cpu> model(tape, small_gpt(strategy, dropout, precision));
  std::vector<std::int32_t> x(2 * 16), y(2 * 16);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<std::int32_t>((i * 7 + 3) % 64);
    y[i] = static_cast<std::int32_t>((i * 5 + 1) % 64);
  }
  optim::SGD<Cpu> opt(model.parameters(), {0.1f, 0.9f});
  Run r;
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    auto loss = model.loss(tape.tokens({2, 16}, x), tape.tokens({2, 16}, y));
    tape.backward(loss);
    r.losses.push_back(loss.item());
    if (step == 0) opt.step();
  }
  for (const auto& p : model.parameters()) r.grads.push_back(p.grad().to_vector());
  return r;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void require_same(const Run& a, const Run& b) {
  REQUIRE(a.losses.size() == b.losses.size());
  for (std::size_t i = 0; i < a.losses.size(); ++i) CHECK(a.losses[i] == b.losses[i]);
  REQUIRE(a.grads.size() == b.grads.size());
  for (std::size_t i = 0; i < a.grads.size(); ++i) {
    INFO("parameter " << i);
    CHECK(bitwise_equal(a.grads[i], b.grads[i]));
  }
}

using remat_test::MlpBlock;

std::vector<std::vector<float>> grads_of(const std::vector<T>& ps) {
  std::vector<std::vector<float>> g;
  for (const auto& p : ps) g.push_back(p.grad().to_vector());
  return g;
}

}  // namespace

TEST_CASE("every GPT checkpoint strategy gives bitwise the gradients of none", "[checkpoint]") {
  for (float dropout : {0.0f, 0.2f}) {
    const Run base = train("none", dropout);
    for (const char* s : {"block", "every:2", "every:3", "sqrt", "selective"}) {
      INFO("strategy " << s << ", dropout " << dropout);
      require_same(base, train(s, dropout));
    }
  }
}

TEST_CASE("in bf16 too, every GPT checkpoint strategy gives bitwise the gradients of none",
          "[checkpoint][bf16]") {
  for (float dropout : {0.0f, 0.2f}) {
    const Run base = train("none", dropout, DType::bf16);
    // bf16 computes: the loss is not the f32 run's, but close to it
    const Run f32 = train("none", dropout);
    CHECK(base.losses[0] != f32.losses[0]);
    CHECK(std::fabs(base.losses[0] - f32.losses[0]) < 0.02f * f32.losses[0]);
    for (const char* s : {"block", "every:2", "every:3", "sqrt", "save_linear"}) {
      INFO("strategy " << s << ", dropout " << dropout);
      require_same(base, train(s, dropout, DType::bf16));
    }
  }
}

TEST_CASE("fn runs exactly twice per segment per step: forward, then one replay",
          "[checkpoint]") {
  Tape<Cpu> tape;
  MlpBlock blk(tape, 8, 1);
  int calls = 0;
  auto x = tape.input({4, 8}, std::vector<float>(32, 0.5f));
  auto fn = [&](const T& in) {
    ++calls;
    return blk(in);
  };
  auto h = checkpoint(fn, x);
  h = checkpoint(fn, h);
  CHECK(calls == 2);
  tape.backward(mean(h));
  CHECK(calls == 4);
  CHECK(tape.segment_stats().size() == 2);
  CHECK(tape.segment_stats()[0].replays == 1);
  CHECK(tape.segment_stats()[1].forwards == 1);
}

TEST_CASE("captured parameters get their gradients when the inputs need none", "[checkpoint]") {
  Tape<Cpu> tape;
  MlpBlock a(tape, 8, 1), b(tape, 8, 11);
  auto x = tape.input({3, 8}, std::vector<float>(24, 0.25f));
  REQUIRE_FALSE(x.requires_grad());
  tape.backward(mean(b(a(x))));
  const auto plain = grads_of(a.params()), plain_b = grads_of(b.params());
  for (const auto& p : a.params()) p.clear_grad();
  for (const auto& p : b.params()) p.clear_grad();
  auto h = checkpoint([&](const T& in) { return a(in); }, x);
  h = checkpoint([&](const T& in) { return b(in); }, h);
  tape.backward(mean(h));
  const auto ck = grads_of(a.params()), ck_b = grads_of(b.params());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    CHECK(bitwise_equal(plain[i], ck[i]));
    CHECK(bitwise_equal(plain_b[i], ck_b[i]));
  }
}

TEST_CASE("nested checkpoints give the plain gradients", "[checkpoint]") {
  Tape<Cpu> tape(7);
  std::vector<MlpBlock> blocks;
  for (int i = 0; i < 4; ++i) blocks.emplace_back(tape, 8, 10 * i + 1);
  auto x = tape.randn({5, 8}, 1.0f, 3, /*requires_grad=*/true);
  std::vector<T> ps{x};
  for (const auto& b : blocks)
    for (const auto& p : b.params()) ps.push_back(p);
  auto run_plain = [&] {
    T h = x;
    for (const auto& b : blocks) h = dropout(b(h), 0.3f);
    return mean(h * h);
  };
  tape.set_rng_offset(0);
  tape.backward(run_plain());
  const auto plain = grads_of(ps);
  for (const auto& p : ps) p.clear_grad();

  int inner_calls = 0;
  auto pair = [&](std::size_t i) {  // an outer segment of two inner segments
    return [&, i](const T& in) {
      T h = checkpoint([&, i](const T& t) { ++inner_calls; return dropout(blocks[i](t), 0.3f); }, in);
      return checkpoint([&, i](const T& t) { ++inner_calls; return dropout(blocks[i + 1](t), 0.3f); }, h);
    };
  };
  tape.set_rng_offset(0);
  T h = checkpoint(pair(0), x);
  h = checkpoint(pair(2), h);
  tape.backward(mean(h * h));
  const auto nested = grads_of(ps);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    INFO("tensor " << i);
    CHECK(bitwise_equal(plain[i], nested[i]));
  }
  CHECK(inner_calls == 4 * 3);  // outer forward, outer replay (inner forward), inner replay
}

TEST_CASE("policies keep what they select and change no gradient", "[checkpoint][policy]") {
  Tape<Cpu> tape;
  MlpBlock blk(tape, 16, 5);
  auto x = tape.input({4, 16}, std::vector<float>(64, 0.1f));
  auto fn = [&](const T& in) {
    auto hid = tag(gelu(linear(in, blk.w1, blk.b1)), "hidden");
    return in + linear(hid, blk.w2, blk.b2);
  };
  auto p = fn(x);
  tape.backward(mean(p * p));
  const auto plain = grads_of(blk.params());
  struct Case {
    const char* what;
    Policy policy;
    std::int64_t kept, remat;  // bytes
  };
  // The second linear layer's output is never kept: only the residual add reads it, and a
  // plain run does not keep it. The replay skips that layer and the add (their outputs only
  // carry the gradient) and computes what their backward reads: the GELU's output, and what
  // that needs.
  const std::int64_t hidden = 4 * 32 * 4;
  std::vector<Case> cases = {
      {"recompute_all", policy::recompute_all(), 0, 2 * hidden},
      {"save_linear", policy::save_linear(), hidden, hidden},
      {"save_matmuls", policy::save_matmuls(), hidden, hidden},
      {"user predicate (gelu outputs)",
       policy::custom([](const OpInfo& op) { return std::strcmp(op.op, "gelu") == 0; }), hidden,
       hidden},
      {"by name", policy::save_names({"hidden"}), hidden, hidden},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    for (const auto& q : blk.params()) q.clear_grad();
    auto h = checkpoint(CheckpointOptions{}.policy(c.policy).name(c.what), fn, x);
    const SegmentStats* st = tape.find_segment_stats(c.what);  // rows are keyed by segment
    REQUIRE(st != nullptr);
    CHECK(st->forwards == 1);
    CHECK(st->kept_bytes == c.kept);
    tape.backward(mean(h * h));
    CHECK(st->remat_bytes == c.remat);
    CHECK(st->skipped_ops == 2);
    const auto g = grads_of(blk.params());
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(bitwise_equal(plain[i], g[i]));
  }
}

TEST_CASE("several outputs, outputs that are inputs, and checkpoint under NoGrad",
          "[checkpoint]") {
  Tape<Cpu> tape;
  MlpBlock blk(tape, 8, 3);
  auto x = tape.randn({2, 8}, 1.0f, 9, true);
  auto plain_loss = [&](const T& a, const T& b, const T& c) { return mean(a * b) + mean(c); };
  auto three = [&](const T& in) {  // sequenced: the same op order in every run
    auto p = blk(in);
    auto q = gelu(in);
    return std::make_tuple(p, q, in);
  };
  {
    auto [p, q, r] = three(x);
    tape.backward(plain_loss(p, q, r));
  }
  const auto gx = x.grad().to_vector();
  const auto gw = blk.w1.grad().to_vector();
  x.clear_grad();
  blk.w1.clear_grad();
  auto [a, b, c] = checkpoint(three, x);
  CHECK(x.is_leaf());  // returning an input does not turn the input into a recorded tensor
  tape.backward(plain_loss(a, b, c));
  CHECK(bitwise_equal(gx, x.grad().to_vector()));
  CHECK(bitwise_equal(gw, blk.w1.grad().to_vector()));

  NoGrad ng;
  int calls = 0;
  auto y = checkpoint([&](const T& in) { ++calls; return blk(in); }, x);
  CHECK(calls == 1);
  CHECK_FALSE(y.requires_grad());
  CHECK(tape.num_nodes() == 0);
}

// NOTE [fresh gradient buffers]: a buffer made for a segment's node goes to the replay unset;
// one that no replayed op reaches must still end as zeros, not as what the memory held before.
// (Here the arena's memory may be zero anyway; the sanitizer stage's malloc fills new blocks
// with 0xbe, and the CUDA emulation's test of the same case reads NaN from unwritten memory.)
TEST_CASE("a segment input that no replayed op reaches gets a zero gradient", "[checkpoint]") {
  Tape<Cpu> tape;
  for (int round = 0; round < 3; ++round) {
    {  // freed just before: memory of the gradient buffers' size, full of non-zero values
      auto junk = tape.randn({4, 16}, 1.0f, 3 + static_cast<std::uint64_t>(round));
      auto more = tape.randn({4, 16}, 1.0f, 7);
      (void)junk;
      (void)more;
    }
    auto x = tape.randn({4, 16}, 1.0f, 5, true), u = tape.randn({4, 16}, 1.0f, 6, true);
    auto y = checkpoint([](const T& a, const T& b) { (void)b; return a * a; }, x, u);
    tape.backward(sum(y));
    const auto gx = x.grad().to_vector(), xv = x.to_vector();
    for (std::size_t i = 0; i < gx.size(); ++i) REQUIRE(gx[i] == 2.0f * xv[i]);
    CHECK(u.grad().defined());
    if (u.grad().defined())
      for (float g : u.grad().to_vector()) REQUIRE(g == 0.0f);
  }
}

TEST_CASE("an impure function is caught by the replay check", "[checkpoint][errors]") {
  Tape<Cpu> tape;
  MlpBlock blk(tape, 8, 3);
  auto x = tape.input({4, 8}, std::vector<float>(32, 0.3f));
  SECTION("a counter that changes a shape") {
    int calls = 0;
    auto h = checkpoint(CheckpointOptions{}.name("block A"), [&](const T& in) {
      ++calls;
      return slice(blk(in), 0, 0, calls == 1 ? 4 : 2);
    }, x);
    REQUIRE_THROWS_WITH(tape.backward(mean(h)),
                        REMAT_CONTAINS("remat::checkpoint: replay of segment 0 ('block A') "
                                       "differs from the forward pass: op 4 (slice) ran on other "
                                       "input shapes or with other attributes in the replay than "
                                       "in the first pass"));
    REQUIRE_THROWS_WITH(tape.backward(mean(checkpoint([&](const T& in) {
                          ++calls;
                          return slice(blk(in), 0, 0, calls == 3 ? 4 : 2);
                        }, x))),
                        REMAT_CONTAINS("a cache, a counter"));
  }
  SECTION("a counter that changes an attribute") {
    float scale = 1.0f;
    auto fn = [&](const T& in) {
      scale += 1.0f;
      return blk(in * scale);
    };
    auto h = checkpoint(fn, x);
    REQUIRE_THROWS_WITH(tape.backward(mean(h)),
                        REMAT_CONTAINS("differs from the forward pass: op 0 (affine) ran on other "
                                       "input shapes or with other attributes"));
  }
  SECTION("a constant that changes values, caught bitwise in debug mode") {
    const T c = tape.full({4, 8}, 1.0f);
    auto fn = [&](const T& in) {
      c.data<float>()[0] += 1.0f;  // behind the version counter's back
      return blk(in * c);
    };
    auto h = checkpoint(CheckpointOptions{}.verify_values(true), fn, x);
    REQUIRE_THROWS_WITH(tape.backward(mean(h)),
                        REMAT_CONTAINS("differs from the forward pass: op 0 (binary, output [4, 8]) "
                                       "computed different values in the replay"));
  }
}

TEST_CASE("an exception inside fn during the replay names the segment", "[checkpoint][errors]") {
  Tape<Cpu> tape;
  MlpBlock blk(tape, 8, 3);
  auto x = tape.input({4, 8}, std::vector<float>(32, 0.3f));
  int calls = 0;
  auto h = checkpoint(CheckpointOptions{}.name("flaky"), [&](const T& in) {
    if (++calls == 2) throw std::runtime_error("disk on fire");
    return blk(in);
  }, x);
  REQUIRE_THROWS_WITH(tape.backward(mean(h)),
                      REMAT_CONTAINS("remat::checkpoint: segment 0 ('flaky') threw while replaying "
                                     "in backward: disk on fire"));
  CHECK(tape.num_nodes() == 0);  // the tape is left clean
  CHECK_FALSE(tape.in_segment());
}

TEST_CASE("backward twice through a checkpoint is an error", "[checkpoint][errors]") {
  Tape<Cpu> tape;
  MlpBlock blk(tape, 8, 3);
  auto x = tape.input({4, 8}, std::vector<float>(32, 0.3f));
  auto loss = mean(checkpoint([&](const T& in) { return blk(in); }, x));
  tape.backward(loss);
  REQUIRE_THROWS_WITH(tape.backward(loss), REMAT_CONTAINS("backward twice"));
}

TEST_CASE("checkpoint strategies parse and reject bad names", "[checkpoint]") {
  CHECK(nn::CheckpointStrategy::parse("every:3").group(8) == 3);
  CHECK(nn::CheckpointStrategy::parse("sqrt").group(16) == 4);
  CHECK(nn::CheckpointStrategy::parse("sqrt").group(64) == 8);
  CHECK(nn::CheckpointStrategy::parse("none").group(8) == 0);
  REQUIRE_THROWS_WITH(nn::CheckpointStrategy::parse("every:0"), REMAT_CONTAINS("expected every:N"));
  CHECK(nn::CheckpointStrategy::parse("every:1000000").every == 1000000);
  for (const char* bad : {"every:", "every: 2", "every:+2", "every:-2", "every:2x", "every:0x2",
                          "every:1000001", "every:99999999999999999999"})
    CHECK_THROWS_WITH(nn::CheckpointStrategy::parse(bad), REMAT_CONTAINS("expected every:N"));
  REQUIRE_THROWS_WITH(nn::CheckpointStrategy::parse("blocks"), REMAT_CONTAINS("unknown strategy 'blocks'"));
}
