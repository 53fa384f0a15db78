// SPDX-License-Identifier: MIT
// The Catch2 helpers users get in remat/testing/catch2.hpp: they pass on equivalent code, they
// fail on code whose gradients differ, and the memory bound bites.

#include <remat/remat.hpp>

#include "support/catch.hpp"

#include <remat/testing/catch2.hpp>

using namespace remat;
using T = Tensor<Cpu>;

namespace {
nn::GPTConfig config(const char* strategy) {
  nn::GPTConfig c;
  c.vocab_size = 32;
  c.block_size = 16;
  c.n_layer = 6;
  c.n_embd = 32;
  c.n_head = 2;
  c.dropout = 0.1f;
  c.checkpoint = nn::CheckpointStrategy::parse(strategy);
  return c;
}
}  // namespace

TEST_CASE("the helpers pass checkpointed code with dropout and bound its memory", "[checkpoint][testing]") {
  Tape<Cpu> tape;
  nn::GPT<Cpu> model(tape, config("none"));
  auto x = tape.randn({2, 16, 32}, 1.0f, 1, true);
  auto block = [&](const T& in) { return model.h[0](in); };
  REMAT_REQUIRE_CHECKPOINT_EQUIVALENT(tape, block, model.parameters(), x);

  std::vector<T> watch = model.parameters();
  watch.push_back(x);
  auto run = [&](bool ck) {
    model.config.checkpoint = nn::CheckpointStrategy::parse(ck ? "block" : "none");
    return model.blocks(x);
  };
  REMAT_REQUIRE_CHECKPOINT_SAVES(tape, run, watch, 0.5);
  REMAT_REQUIRE_PEAK_SAVED_AT_MOST(Cpu, 200000, tape.backward(mean(model.blocks(x))));
}

TEST_CASE("the helpers report a function whose gradients differ", "[checkpoint][testing]") {
  Tape<Cpu> tape;
  nn::GPT<Cpu> model(tape, config("none"));
  auto x = tape.randn({2, 16, 32}, 1.0f, 1, true);
  // A constant whose values change from call to call (written behind the version counter's
  // back); no shape or attribute changes.
  const T c = tape.full({32}, 1.0f);
  auto impure = [&](const T& in) {
    c.data<float>()[0] += 0.5f;
    return model.h[0](in * c);
  };
  const auto r = testing::checkpoint_equivalence(tape, impure, model.parameters(),
                                                 CheckpointOptions{}, x);
  CHECK_FALSE(r.equal);
  CHECK_THAT(r.detail, REMAT_CONTAINS("gradient 2 element 0"));  // h.0.ln_1.weight: wte, wpe get none
  // An attribute that changes (a scale read from a counter): the replay check names the op.
  float scale = 1.0f;
  auto counter = [&](const T& in) {
    scale += 0.5f;
    return model.h[0](in * scale);
  };
  const auto r2 = testing::checkpoint_equivalence(tape, counter, model.parameters(),
                                                  CheckpointOptions{}, x);
  CHECK_FALSE(r2.equal);
  CHECK_THAT(r2.detail, REMAT_CONTAINS("op 0 (affine) ran on other input shapes or with other "
                                       "attributes in the replay"));
  const auto ok = testing::checkpoint_equivalence(tape, [&](const T& in) { return model.h[1](in); },
                                                  model.parameters(), CheckpointOptions{}, x);
  CHECK(ok.equal);
  CHECK(ok.checkpoint_peak_saved > 0);
}

TEST_CASE("REMAT_REQUIRE_GRADCHECK passes a layer composed of primitives", "[testing][grad]") {
  Tape<Cpu> tape;
  const T x = tape.randn({3, 8}, 1.0f, 21, true), g = tape.full({8}, 1.0f, true);
  auto rms_norm = [](const std::vector<T>& v) {
    return v[0] * rsqrt(mean(square(v[0]), -1, true) + 1e-5f) * v[1];
  };
  REMAT_REQUIRE_GRADCHECK(tape, rms_norm, (std::vector<T>{x, g}));
  testing::GradcheckOptions tight;
  tight.max_elems = 4;
  REMAT_REQUIRE_GRADCHECK_WITH(tape, rms_norm, (std::vector<T>{x, g}), tight);
}
