// SPDX-License-Identifier: MIT
// Flat buffers (NOTE [flat buffers], core/flat.hpp): parameters moved into one buffer as views,
// optimizer state laid out as the parameters, the ledger's bytes, and training unchanged bit for
// bit.

#include <remat/nn/gpt_plan.hpp>
#include <remat/remat.hpp>

#include <cstring>

#include "support/catch.hpp"

using namespace remat;

namespace {
std::int64_t live_of(Category c) { return memory_stats<Cpu>().live_of(c); }

// Two linear layers and a loose parameter: a user's model, not flattened unless asked.
struct TwoLayers : nn::Module<Cpu> {
  TwoLayers(Tape<Cpu>& tape, bool flat)
      : a(tape, 6, 10, 0.3f, 1), b(tape, 10, 3, 0.3f, 2),
        scale(add_parameter("scale", tape.randn({3}, 1.0f, 3, true))) {
    add_module("a", a);
    add_module("b", b);
    if (flat) flatten_parameters();
  }
  Tensor<Cpu> operator()(const Tensor<Cpu>& x) const { return b(gelu(a(x))) * scale; }
  nn::Linear<Cpu> a, b;
  Tensor<Cpu> scale;
};

template <class Opt>
std::vector<std::vector<float>> train(bool flat, Opt make, int steps) {
  Tape<Cpu> tape;
  TwoLayers m(tape, flat);
  auto opt = make(m.parameters());
  for (int s = 0; s < steps; ++s) {
    auto x = tape.randn({4, 6}, 1.0f, 100 + s);
    tape.backward(mean(m(x) * m(x)));
    opt.step();
    opt.zero_grad();
  }
  std::vector<std::vector<float>> out;
  for (const auto& p : m.parameters()) out.push_back(p.to_vector());
  return out;
}
}  // namespace

TEST_CASE("flatten moves tensors into one buffer of views, values and ledger kept", "[core][flat]") {
  Tape<Cpu> tape;
  auto live = [] { return memory_stats<Cpu>().live_total; };
  const std::int64_t p0 = live();
  auto a = tape.randn({3, 5}, 1.0f, 1, true), b = tape.randn({7}, 1.0f, 2, true),
       c = tape.randn({64, 2}, 1.0f, 3, true);
  const auto va = a.to_vector(), vb = b.to_vector(), vc = c.to_vector();
  const std::vector<Tensor<Cpu>> ts{a, b, c, a};  // a again: a tied weight
  CHECK(!is_flat(ts));
  const FlatLayout l = flat_layout(ts);
  CHECK(l.offset == std::vector<std::int64_t>{0, 64, 128, 0});
  CHECK(l.total == 256);
  flatten(ts);
  CHECK(is_flat(ts));
  CHECK(a.to_vector() == va);
  CHECK(b.to_vector() == vb);
  CHECK(c.to_vector() == vc);
  const auto& parent = a.storage()->parent();
  REQUIRE(parent);
  CHECK(b.storage()->parent() == parent);
  CHECK(c.storage()->parent() == parent);
  CHECK(parent->bytes() == 256 * 4);
  CHECK(b.data<float>() == static_cast<float*>(parent->data()) + 64);
  // the old buffers are gone: the tensors' bytes are the flat buffer's, counted once
  CHECK(live() - p0 == 256 * 4);
  const float* base = static_cast<const float*>(parent->data());
  int nonzero_gap = 0;
  for (std::int64_t i = 15; i < 64; ++i) nonzero_gap += base[i] != 0.0f;
  for (std::int64_t i = 71; i < 128; ++i) nonzero_gap += base[i] != 0.0f;
  CHECK(nonzero_gap == 0);
  // flat already: nothing moves
  float* before = a.data<float>();
  flatten(ts);
  CHECK(a.data<float>() == before);
  CHECK(live() - p0 == 256 * 4);
  // a view's write bumps its own version, and a view's category cannot move the ledger
  const auto v0 = a.storage()->version();
  (void)a.mutable_data<float>();
  CHECK(a.storage()->version() == v0 + 1);
  const Category was = parent->category();
  const std::int64_t in_was = live_of(was);
  a.storage()->set_category(was == Category::activations ? Category::gradients : Category::activations);
  CHECK(live_of(was) == in_was);
  CHECK(a.storage()->category() == was);
}

TEST_CASE("flatten refuses tensors made by recorded ops", "[core][flat][errors]") {
  Tape<Cpu> tape;
  auto a = tape.randn({4}, 1.0f, 1, true);
  auto y = a * a;
  REQUIRE_THROWS_WITH(flatten(std::vector<Tensor<Cpu>>{a, y}),
                      REMAT_CONTAINS("expected f32 leaves"));
  CHECK(!a.storage()->parent());  // nothing moved
}

TEST_CASE("a GPT's parameters are flat, and its optimizer state is laid out as they are",
          "[core][flat][optim]") {
  Tape<Cpu> tape;
  nn::GPTConfig c;
  c.vocab_size = 50;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  const std::int64_t p0 = live_of(Category::parameters), s0 = live_of(Category::optimizer_state);
  nn::GPT<Cpu> model(tape, c);
  const auto params = model.parameters();
  REQUIRE(is_flat(params));
  std::int64_t floats = 0;
  for (const auto& p : params) floats += flat_round(p.numel());
  CHECK(live_of(Category::parameters) - p0 == floats * 4);
  // the planner's formulas: the flat buffer's bytes, and the gradients' (a buffer each)
  CHECK(nn::detail::gpt_parameter_bytes(c, kFlatAlign) == floats * 4);
  CHECK(nn::detail::gpt_parameter_bytes(c) == model.num_parameters() * 4);
  CHECK(floats > model.num_parameters());  // d 16: every bias and norm is padded to 64
  optim::AdamW<Cpu> adamw(params, {1e-3f});
  std::vector<std::int32_t> ids(2 * 16);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7) % 50);
  tape.backward(model.loss(tape.tokens({2, 16}, ids), tape.tokens({2, 16}, ids)));
  adamw.step();
  CHECK(live_of(Category::optimizer_state) - s0 == 2 * floats * 4);  // two buffers, no more
  const float* p_base = params.front().data<float>();
  const auto [m_base, v_base] = adamw.moments(0);
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    const auto [m, v] = adamw.moments(i);
    CHECK(m - m_base == params[i].data<float>() - p_base);
    CHECK(v - v_base == params[i].data<float>() - p_base);
  }
  // An optimizer given them in another order lays its state out as the parameters lie, not
  // in its own order, so the distance is still one for all.
  std::vector<Tensor<Cpu>> reversed(params.rbegin(), params.rend());
  optim::SGD<Cpu> sgd(reversed, {1e-3f, 0.9f});
  sgd.step();
  const std::ptrdiff_t d = sgd.momentum_buffer(0) - reversed[0].data<float>();
  for (std::size_t i = 0; i < reversed.size(); ++i) {
    INFO("reversed parameter " << i);
    CHECK(sgd.momentum_buffer(i) - reversed[i].data<float>() == d);
  }
}

TEST_CASE("training a flattened model gives the bits of the unflattened one", "[core][flat][optim]") {
  auto adamw = [](std::vector<Tensor<Cpu>> ps) { return optim::AdamW<Cpu>(ps, {1e-2f}); };
  auto sgd = [](std::vector<Tensor<Cpu>> ps) { return optim::SGD<Cpu>(ps, {0.05f, 0.9f, 0.01f, true}); };
  CHECK(train(true, adamw, 4) == train(false, adamw, 4));
  CHECK(train(true, sgd, 4) == train(false, sgd, 4));
  const auto moved = train(true, adamw, 4), start = train(true, adamw, 0);
  CHECK(moved != start);  // it trained
}

TEST_CASE("a parameter frozen at the first step gets its own state later; a failed step leaves none",
          "[core][flat][optim][fault]") {
  Tape<Cpu> tape;
  TwoLayers m(tape, true);
  const auto params = m.parameters();
  params.back().set_requires_grad(false);  // scale, frozen
  optim::AdamW<Cpu> adamw(params, {1e-2f});
  auto x = tape.randn({4, 6}, 1.0f, 9);
  tape.backward(mean(m(x) * m(x)));
  adamw.step();
  CHECK(!adamw.has_moments(params.size() - 1));
  const std::int64_t s1 = live_of(Category::optimizer_state);
  params.back().set_requires_grad(true);  // unfrozen
  adamw.zero_grad();
  tape.backward(mean(m(x) * m(x)));
  testing::fail_allocation_after<Cpu>(1);
  REQUIRE_THROWS_AS(adamw.step(), OutOfMemory);
  testing::fail_allocation_after<Cpu>(0);
  CHECK(!adamw.has_moments(params.size() - 1));
  CHECK(live_of(Category::optimizer_state) == s1);
  CHECK(adamw.steps() == 1);
  adamw.step();
  CHECK(adamw.has_moments(params.size() - 1));
  CHECK(live_of(Category::optimizer_state) - s1 == 2 * 3 * 4);  // its own two buffers of 3
}
