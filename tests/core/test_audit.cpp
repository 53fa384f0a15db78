// SPDX-License-Identifier: MIT
// Findings of an audit of the core with adversarial programs (issue 10), one case or more each:
// escaped interior tensors, negative shapes, the graph one backward() consumes, per-segment
// stats, broadcasting in both operand orders, the replay's seed, Megatron's policy.

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;
using T = Tensor<Cpu>;

namespace {

std::vector<float> ramp(std::int64_t n, float lo, float step) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = lo + step * static_cast<float>(i % 7);
  return v;
}
std::vector<float> grad_of(const T& t) { return t.grad().to_vector(); }

// The first row of the segment ledger with this name (nullptr if none).
const SegmentStats* row_named(Tape<Cpu>& tape, const std::string& name) {
  for (const auto& st : tape.segment_stats())
    if (st.name == name) return &st;
  return nullptr;
}

}  // namespace

// ---- 1. escaped interior tensors ----------------------------------------------------------

TEST_CASE("a tensor leaving a segment through a capture keeps its gradient path, or raises",
          "[checkpoint][audit]") {
  Tape<Cpu> tape;
  auto w = tape.parameter({2, 2}, {1.0f, 2.0f, 3.0f, 4.0f});
  auto b = tape.parameter({2}, {0.5f, -0.5f});
  auto x = tape.input({3, 2}, ramp(6, -1.0f, 0.4f));
  // The plain run, in the order of the checkpointed ones: gelu inside, then mul outside.
  auto plain = [&] {
    auto h = linear(x, w, b);
    auto g = gelu(h);
    auto m = mul(h, h);
    return sum(add(g, m));
  };
  tape.backward(plain());
  const auto gw = grad_of(w), gb = grad_of(b);
  w.clear_grad();
  b.clear_grad();
  SECTION("used by an op outside: adopted as an extra output of the segment (NOTE [escaped "
          "tensors]), gradients bitwise the plain run's") {
    T escaped;
    auto y = checkpoint(CheckpointOptions{}.name("leaky"),
                        [&](const T& in) {
                          escaped = linear(in, w, b);  // interior: no node is recorded for it
                          return gelu(escaped);
                        },
                        x);
    REQUIRE_FALSE(escaped.requires_grad());
    tape.backward(sum(add(y, mul(escaped, escaped))));
    CHECK(grad_of(w) == gw);
    CHECK(grad_of(b) == gb);
  }
  SECTION("returned unchanged by a later segment, or its input: bitwise the plain run's") {
    for (const bool as_output : {true, false}) {
      T escaped;
      auto y = checkpoint([&](const T& in) {
        escaped = linear(in, w, b);
        return gelu(escaped);
      }, x);
      T m;
      if (as_output) {  // it was dropped here: 'treated as needing no gradient in the replay'
        auto [one, esc] = checkpoint([&](const T& in) { return std::make_tuple(in * 1.0f, escaped); }, y);
        m = add(one, mul(esc, esc));
      } else {
        m = add(y, checkpoint([](const T& in) { return mul(in, in); }, escaped));
      }
      tape.backward(sum(m));
      CHECK(grad_of(w) == gw);
      CHECK(grad_of(b) == gb);
      w.clear_grad();
      b.clear_grad();
    }
  }
  SECTION("returned by the segment too: one tensor, one gradient slot") {
    T escaped;
    auto out = checkpoint([&](const T& in) {
      escaped = linear(in, w, b);
      return std::make_tuple(gelu(escaped), escaped);
    }, x);
    tape.backward(sum(add(std::get<0>(out), mul(std::get<1>(out), escaped))));
    CHECK(grad_of(w) == gw);
    CHECK(grad_of(b) == gb);
  }
  SECTION("where no gradient can reach it, the op says so") {
    T escaped;
    auto y = checkpoint(CheckpointOptions{}.name("leaky"), [&](const T& in) {
      T h = linear(in, w, b);
      if (!escaped.defined()) escaped = h;  // the first run's tensor (the replay's is recorded)
      return gelu(h);
    }, x);
    tape.backward(sum(y));  // consumes the segment's node
    REQUIRE_THROWS_WITH(mul(escaped, escaped),
                        REMAT_CONTAINS("remat::mul: input 0") && REMAT_CONTAINS("'leaky'") &&
                            REMAT_CONTAINS("capture") && REMAT_CONTAINS("not on the tape"));
    T nested;
    auto z = checkpoint(CheckpointOptions{}.name("outer"), [&](const T& in) {
      return checkpoint([&](const T& i2) {
        nested = linear(i2, w, b);  // made by a checkpoint nested in 'outer'
        return gelu(nested);
      }, in);
    }, x);
    REQUIRE_THROWS_WITH(tape.backward(sum(add(z, nested))),
                        REMAT_CONTAINS("remat::add: input 1") && REMAT_CONTAINS("'outer'") &&
                            REMAT_CONTAINS("nested"));
    // No gradient wanted, or asked not to have one: no error.
    {
      NoGrad no_grad;
      CHECK(sum(mul(escaped, escaped)).numel() == 1);
    }
    CHECK_NOTHROW(sum(mul(detach(escaped), x)));
  }
}

// ---- 2. negative and overflowing shapes ---------------------------------------------------

TEST_CASE("negative or overflowing dimensions are errors at construction", "[core][audit]") {
  Tape<Cpu> tape;
  const std::int64_t big = std::int64_t{1} << 40;
  CHECK_THROWS_AS(Shape({-2, 4}), Error);
  CHECK_THROWS_AS(Shape({big, big}), Error);
  CHECK_THROWS_WITH(tape.input({-1, -1}, {1.0f}),
                    REMAT_CONTAINS("remat::Tape::input: shape [-1, -1] has a negative dimension"));
  CHECK_THROWS_AS(tape.tokens({-1, -2}, {1, 2}), Error);
  CHECK_THROWS_AS(tape.parameter({-1, -1}, {1.0f}), Error);
  CHECK_THROWS_AS(tape.parameter(Shape{4, -1}), Error);
  CHECK_THROWS_AS(tape.randn({-1, 4}, 1.0f, 1), Error);
  CHECK_THROWS_AS(nn::init::normal(tape, {-1, 4}, 1.0f, 1), Error);
  CHECK_THROWS_AS(nn::init::constant(tape, {3, -1}, 0.0f), Error);
  CHECK_THROWS_AS(tape.zeros({std::int64_t{1} << 31, std::int64_t{1} << 31, 4}), Error);
  Shape edited{2, 3};
  edited[0] = -1;  // a shape edited in place is checked where a tensor is made from it
  CHECK_THROWS_AS(tape.zeros(edited), Error);
  CHECK_THROWS_WITH(tape.zeros({-1, 4}), REMAT_CONTAINS("remat::Tape::zeros"));  // segfaulted
  // Ops: only reshape takes -1, once, as the dimension to infer.
  auto x = tape.zeros({2, 6});
  CHECK(reshape(x, {-1, 3}).shape() == Shape{4, 3});
  CHECK_THROWS_AS(reshape(x, {-1, -1}), Error);
  CHECK_THROWS_AS(reshape(x, {-1, 0}), Error);
  CHECK_THROWS_AS(slice(x, 1, 0, -1), Error);
  CHECK_THROWS_AS(split(x, 1, {-1, 7}), Error);
  // Index arithmetic that would overflow int64 is an error, not a wrapped value (slice's
  // start + len segfaulted).
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  CHECK_THROWS_WITH(slice(x, 1, max, 2), REMAT_CONTAINS("remat::slice: start 9223372036854775807"));
  CHECK_THROWS_AS(slice(x, 1, 2, max), Error);
  CHECK_THROWS_AS(slice(x, 1, max, max), Error);
  CHECK(slice(x, 1, 6, 0).numel() == 0);
  CHECK_THROWS_AS(split(x, 1, {max, max, 2}), Error);
  CHECK_THROWS_AS(split(x, 1, {6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, -66}), Error);
  // A zero dimension does not excuse the others, whatever the order.
  const std::int64_t huge = std::int64_t{1} << 62;
  CHECK_THROWS_AS(Shape({0, huge}), Error);
  CHECK_THROWS_AS(Shape({huge, 0}), Error);
  CHECK(Shape({0, std::int64_t{1} << 40}).numel() == 0);
  CHECK(Shape({std::int64_t{1} << 40, 0}).numel() == 0);
  CHECK(memory_stats<Cpu>().live_total >= 0);
}

// ---- 4. what one backward() consumes -------------------------------------------------------

TEST_CASE("backward of one loss leaves another loss's graph on the tape valid", "[core][audit]") {
  Tape<Cpu> tape;
  auto w = tape.parameter({3}, {1.0f, 2.0f, 3.0f});
  auto v = tape.parameter({3}, {4.0f, 5.0f, 6.0f});
  auto l1 = sum(w * w);      // dl1/dw = 2 w
  auto l2 = sum(v * v * v);  // dl2/dv = 3 v^2
  tape.backward(l1);
  CHECK(grad_of(w) == std::vector<float>{2.0f, 4.0f, 6.0f});
  CHECK_FALSE(v.grad().defined());
  CHECK(tape.num_nodes() == 3);  // l2's: mul, mul, sum
  tape.backward(l2);
  CHECK(grad_of(v) == std::vector<float>{48.0f, 75.0f, 108.0f});
  CHECK(tape.num_nodes() == 0);
  // a graph is still consumed once: the same loss twice is an error
  auto l3 = sum(w * v);
  tape.backward(l3);
  CHECK_THROWS_WITH(tape.backward(l3), REMAT_CONTAINS("backward twice"));
}

TEST_CASE("two losses sharing ops: the second backward names the op it cannot pass",
          "[core][audit]") {
  Tape<Cpu> tape;
  auto w = tape.parameter({3}, {1.0f, 2.0f, 3.0f});
  auto h = gelu(w);
  auto l1 = sum(h);
  auto l2 = mean(h);
  tape.backward(l1);
  CHECK_THROWS_WITH(tape.backward(l2), REMAT_CONTAINS("input 0 of op reduce") &&
                                           REMAT_CONTAINS("earlier backward() already consumed"));
  // the tape is usable afterwards
  w.clear_grad();
  tape.backward(sum(w * w));
  CHECK(grad_of(w) == std::vector<float>{2.0f, 4.0f, 6.0f});
}

TEST_CASE("a forward without NoGrad whose result is dropped pins no activations",
          "[core][audit]") {
  Tape<Cpu> tape;
  auto w = tape.parameter({64, 64}, ramp(64 * 64, -0.1f, 0.03f));
  auto b = tape.parameter({64}, ramp(64, 0.0f, 0.01f));
  auto x = tape.input({16, 64}, ramp(16 * 64, -1.0f, 0.3f));
  const std::int64_t base = memory_stats<Cpu>().live_total;
  for (int i = 0; i < 600; ++i) {  // an evaluation loop: 1800 nodes recorded, each result dropped
    const float loss = mean(gelu(linear(x, w, b))).item();
    CHECK(std::isfinite(loss));
  }
  CHECK(tape.num_nodes() <= 512);  // pruned while recording
  // what the recorded nodes still hold: at most 512 nodes' worth (a gelu input is 4 KiB)
  CHECK(memory_stats<Cpu>().live_total - base <= 512 * 16 * 64 * 4);
  // a held result keeps its graph; backward of a leaf frees the dropped rest and runs nothing
  auto held = sum(linear(x, w, b));
  tape.backward(w, tape.input({64, 64}, std::vector<float>(64 * 64, 1.0f)));
  CHECK(tape.num_nodes() == 2);  // held's linear and sum
  CHECK(grad_of(w) == std::vector<float>(64 * 64, 1.0f));
  w.clear_grad();
  tape.backward(held);
  CHECK(tape.num_nodes() == 0);
  CHECK(memory_stats<Cpu>().live_total - base <= 64 * 64 * 4 + 64 * 4 + 4);  // grads, held
}

TEST_CASE("backward of a leaf leaves no dropped node recorded", "[core][audit]") {
  Tape<Cpu> tape;
  auto w = tape.parameter({2}, {1.0f, 2.0f});
  { auto y = w * w; }  // recorded, then dropped
  tape.backward(w, tape.input({2}, {3.0f, 4.0f}));
  CHECK(grad_of(w) == std::vector<float>{3.0f, 4.0f});
  CHECK(tape.num_nodes() == 0);
}

// ---- 5. per-segment stats -------------------------------------------------------------------

TEST_CASE("per-segment stats are keyed by the segment, not by creation order",
          "[checkpoint][audit]") {
  Tape<Cpu> tape;
  auto w = tape.parameter({4, 4}, ramp(16, -0.5f, 0.2f));
  auto b = tape.parameter({4}, {0.1f, 0.2f, 0.3f, 0.4f});
  auto x = tape.input({2, 4}, ramp(8, -1.0f, 0.5f));
  auto fn = [&](const T& in) { return gelu(linear(in, w, b)); };
  {  // step 1: a then b
    auto h = checkpoint(CheckpointOptions{}.name("a"), fn, x);
    h = checkpoint(CheckpointOptions{}.name("b"), fn, h);
    tape.backward(sum(h));
  }
  {  // step 2: b alone (another strategy)
    auto h = checkpoint(CheckpointOptions{}.name("b"), fn, x);
    tape.backward(sum(h));
  }
  const SegmentStats* a = row_named(tape, "a");
  const SegmentStats* bs = row_named(tape, "b");
  REQUIRE(a != nullptr);
  REQUIRE(bs != nullptr);
  CHECK(a->forwards == 1);
  CHECK(a->replays == 1);
  CHECK(bs->forwards == 2);
  CHECK(bs->replays == 2);
  // Unnamed segments of one call site in a loop: a row per position, the same every step.
  const std::size_t before = tape.segment_stats().size();
  for (int step = 0; step < 3; ++step) {
    auto h = x;
    for (int i = 0; i < 3; ++i) h = checkpoint(fn, h);
    tape.backward(sum(h));
  }
  REQUIRE(tape.segment_stats().size() == before + 3);
  for (std::size_t r = before; r < before + 3; ++r) {
    CHECK(tape.segment_stats()[r].forwards == 3);
    CHECK(tape.segment_stats()[r].replays == 3);
  }
  // The same while an unrelated recorded graph stays alive on the tape (a held evaluation
  // result): rows are numbered from 0 again after each backward, so none are added per step.
  auto held = sum(gelu(linear(x, w, b)));
  for (int step = 0; step < 3; ++step) {
    auto h = x;
    for (int i = 0; i < 3; ++i) h = checkpoint(fn, h);
    tape.backward(sum(h));
    CHECK(tape.segment_stats().size() == before + 3);
  }
  CHECK(tape.segment_stats()[before].forwards == 6);
  tape.backward(held);  // still valid
  CHECK(w.grad().defined());
}

// ---- 5b. in-place writes between forward and backward ---------------------------------------

TEST_CASE("an in-place write to anything saved or read by a segment is an error at backward",
          "[checkpoint][audit]") {
  Tape<Cpu> tape;
  auto w = tape.parameter({4, 4}, ramp(16, -0.5f, 0.2f));
  auto x = tape.parameter({2, 4}, ramp(8, -1.0f, 0.5f));
  auto c = tape.input({2, 4}, ramp(8, 0.5f, -0.25f));  // a captured constant
  auto fn = [&](const T& in) { return tanh(matmul(in, w)) * c; };
  optim::SGD<Cpu> sgd({w}, optim::SGDOptions{});
  const auto step_with_zero_grad = [&] {  // an optimizer step between forward and backward
    w.impl()->grad = tape.zeros({4, 4}).storage();
    sgd.step();
  };
  for (const bool ck : {false, true}) {
    INFO((ck ? "checkpointed" : "plain"));
    const char* where = ck ? "remat::checkpoint: segment" : "remat::Tape::backward: op matmul saved";
    {
      T l = sum(ck ? checkpoint(fn, x) : fn(x));
      step_with_zero_grad();
      REQUIRE_THROWS_WITH(tape.backward(l), REMAT_CONTAINS(where) && REMAT_CONTAINS("a parameter of shape [4, 4]") &&
                                                REMAT_CONTAINS("modified in place"));
    }
    {
      T l = sum(ck ? checkpoint(fn, x) : fn(x));
      x.mutable_data<float>()[1] += 1.0f;  // the segment's input
      REQUIRE_THROWS_WITH(tape.backward(l), REMAT_CONTAINS(where) && REMAT_CONTAINS("[2, 4]"));
    }
    if (ck) {  // a captured constant is read by the segment, though saved by no op
      T l = sum(checkpoint(fn, x));
      c.mutable_data<float>()[0] = 3.0f;
      REQUIRE_THROWS_WITH(tape.backward(l), REMAT_CONTAINS("(first in op 2, binary)"));
    }
    {  // writes after backward, or to what the graph never read, are fine
      T l = sum(ck ? checkpoint(fn, x) : fn(x));
      auto other = tape.parameter({3}, {1.0f, 2.0f, 3.0f});
      other.mutable_data<float>()[0] = 5.0f;
      tape.backward(l);
      sgd.step();
      l = sum(ck ? checkpoint(fn, x) : fn(x));  // a new forward pass after the write
      CHECK_NOTHROW(tape.backward(l));
    }
    w.clear_grad();
    x.clear_grad();
  }
  // Named parameters are named in the message.
  Tape<Cpu> t2;
  nn::Linear<Cpu> lin(t2, 4, 3, 0.3f, 9);
  auto in = t2.parameter({2, 4}, ramp(8, -1.0f, 0.5f));  // dx needs the weight
  T l = sum(gelu(lin(in)));
  lin.parameter("weight").mutable_data<float>()[0] = 2.0f;
  CHECK_THROWS_WITH(t2.backward(l), REMAT_CONTAINS("the parameter 'weight' of shape [4, 3]"));
}

// ---- 6. broadcasting ------------------------------------------------------------------------

namespace {

// Host reference of NumPy broadcasting: the flat index in x (shape xs) of the element that
// position `o` of the result (shape out) reads.
std::int64_t source_index(const Shape& xs, const Shape& out, std::int64_t o) {
  std::int64_t idx = 0, stride = 1;
  for (int i = 1; i <= out.rank(); ++i) {
    const std::int64_t coord = o % out[-i];
    o /= out[-i];
    if (i <= xs.rank()) {
      if (xs[-i] != 1) idx += coord * stride;
      stride *= xs[-i];
    }
  }
  return idx;
}

}  // namespace

TEST_CASE("broadcasting follows NumPy's rule in both operand orders, for every binary op",
          "[ops][audit]") {
  struct Pair {
    Shape a, b, out;
  };
  const std::vector<Pair> pairs = {
      {{1, 2, 3}, {2, 3}, {1, 2, 3}}, {{2, 3}, {3}, {2, 3}},       {{2, 1}, {1, 3}, {2, 3}},
      {{4, 1, 3}, {2, 3}, {4, 2, 3}}, {{1}, {2, 3}, {2, 3}},       {{2, 3}, {2, 3}, {2, 3}},
      {{3, 1}, {3, 4}, {3, 4}},       {{2, 1, 4}, {3, 1}, {2, 3, 4}}};
  using Fn = std::function<T(const T&, const T&)>;
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"add", [](const T& a, const T& b) { return add(a, b); }},
      {"sub", [](const T& a, const T& b) { return sub(a, b); }},
      {"mul", [](const T& a, const T& b) { return mul(a, b); }},
      {"div", [](const T& a, const T& b) { return div(a, b); }}};
  for (const auto& p : pairs)
    for (int order = 0; order < 2; ++order) {
      const Shape sa = order ? p.b : p.a, sb = order ? p.a : p.b;
      for (const auto& op : ops) {
        INFO(op.first << "(" << sa.str() << ", " << sb.str() << ")");
        Tape<Cpu> tape;
        auto a = tape.parameter(sa, ramp(sa.numel(), 0.5f, 0.25f));
        auto b = tape.parameter(sb, ramp(sb.numel(), 0.75f, 0.125f));
        auto r = tape.input(p.out, ramp(p.out.numel(), -1.0f, 0.375f));  // dL/dy
        auto y = op.second(a, b);
        REQUIRE(y.shape() == p.out);
        tape.backward(sum(mul(y, r)));
        // reference values and gradients on the host
        const auto av = a.to_vector(), bv = b.to_vector(), rv = r.to_vector(), yv = y.to_vector();
        std::vector<double> ga(av.size(), 0.0), gb(bv.size(), 0.0);
        for (std::int64_t o = 0; o < p.out.numel(); ++o) {
          const auto ia = static_cast<std::size_t>(source_index(sa, p.out, o));
          const auto ib = static_cast<std::size_t>(source_index(sb, p.out, o));
          const double x1 = av[ia], x2 = bv[ib], g = rv[static_cast<std::size_t>(o)];
          const std::string name = op.first;
          double want = 0, da = 0, db = 0;
          if (name == "add") {
            want = x1 + x2, da = 1, db = 1;
          } else if (name == "sub") {
            want = x1 - x2, da = 1, db = -1;
          } else if (name == "mul") {
            want = x1 * x2, da = x2, db = x1;
          } else {
            want = x1 / x2, da = 1 / x2, db = -x1 / (x2 * x2);
          }
          CHECK(yv[static_cast<std::size_t>(o)] == Approx(want).epsilon(1e-6));
          ga[ia] += g * da;
          gb[ib] += g * db;
        }
        const auto dA = grad_of(a), dB = grad_of(b);
        for (std::size_t i = 0; i < ga.size(); ++i) CHECK(dA[i] == Approx(ga[i]).epsilon(1e-5).margin(1e-6));
        for (std::size_t i = 0; i < gb.size(); ++i) CHECK(dB[i] == Approx(gb[i]).epsilon(1e-5).margin(1e-6));
      }
    }
  Tape<Cpu> tape;
  auto a = tape.zeros({2, 3}), b = tape.zeros({3, 2});
  CHECK_THROWS_WITH(add(a, b), REMAT_CONTAINS("remat::add: shapes do not broadcast"));
  CHECK_THROWS_WITH(add(b, a), REMAT_CONTAINS("remat::add: shapes do not broadcast"));
}

// ---- 7. the replay's seed -------------------------------------------------------------------

TEST_CASE("a replay draws the first run's dropout masks even after set_seed",
          "[checkpoint][audit]") {
  auto run = [](bool ck) {
    Tape<Cpu> tape(7);
    auto w = tape.parameter({8, 8}, ramp(64, -0.3f, 0.1f));
    auto b = tape.parameter({8}, ramp(8, 0.0f, 0.05f));
    auto x = tape.input({4, 8}, ramp(32, -1.0f, 0.35f));
    auto fn = [&](const T& in) { return dropout(gelu(linear(in, w, b)), 0.5f); };
    auto y = ck ? checkpoint(fn, x) : fn(x);
    auto loss = sum(mul(y, y));
    tape.set_seed(99);  // between the forward pass and backward
    tape.backward(loss);
    CHECK(tape.seed() == 99);
    return std::make_pair(grad_of(w), grad_of(b));
  };
  const auto plain = run(false), ck = run(true);
  CHECK(plain.first == ck.first);
  CHECK(plain.second == ck.second);
}

// ---- 8. policies ----------------------------------------------------------------------------

TEST_CASE("megatron_selective recomputes only the attention core, save_linear more",
          "[checkpoint][audit]") {
  nn::GPTConfig c;
  c.n_embd = 16;
  c.n_head = 2;
  c.block_size = 8;
  const std::int64_t B = 2, Tn = 8, C = 16;
  Tape<Cpu> tape;
  nn::Block<Cpu> blk(tape, c, 3);
  auto x = tape.input({B, Tn, C}, ramp(B * Tn * C, -1.0f, 0.3f));
  auto fn = [&](const T& in) { return blk(in); };
  auto y0 = fn(x);
  tape.backward(mean(mul(y0, y0)));
  std::vector<std::vector<float>> plain;
  for (const auto& p : blk.parameters()) {
    plain.push_back(grad_of(p));
    p.clear_grad();
  }
  const std::int64_t attn_out = B * Tn * C * 4;  // self_attention's output, the only replayed op
  for (const Policy& pol : {policy::megatron_selective(), policy::save_linear()}) {
    INFO(pol.name);
    auto y = checkpoint(CheckpointOptions{}.name(pol.name).policy(pol), fn, x);
    tape.backward(mean(mul(y, y)));
    std::size_t i = 0;
    for (const auto& p : blk.parameters()) {
      CHECK(grad_of(p) == plain[i++]);
      p.clear_grad();
    }
    const SegmentStats* st = row_named(tape, pol.name);
    REQUIRE(st != nullptr);
    if (pol.name == "megatron_selective")
      CHECK(st->remat_bytes == attn_out);
    else
      CHECK(st->remat_bytes == 3 * attn_out);  // two layer norms and attention (the MLP is kept)
  }
  // the CLI name of save_linear: "selective" still parses, as a deprecated alias
  CHECK(nn::CheckpointStrategy::parse("selective").kind == nn::CheckpointStrategy::Kind::save_linear);
  CHECK(nn::CheckpointStrategy::parse("selective").str() == "selective");
  CHECK(nn::CheckpointStrategy::parse("save_linear").str() == "save_linear");
}
