// SPDX-License-Identifier: MIT
// Allocation fault injection (NOTE [fault injection] in core/memory.hpp): the N-th allocation of
// a GPT training step (forward, backward, AdamW step) throws OutOfMemory, for every N and every
// checkpoint strategy. After each failure the error reaches the caller as OutOfMemory, the
// ledger is back to its pre-step live bytes, the tape is usable, and the retried step (and the
// one after it) give bitwise the losses of a run without the fault.

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;

namespace {

nn::GPTConfig tiny_gpt(const std::string& strategy) {
  nn::GPTConfig c;
  c.vocab_size = 16;
  c.block_size = 8;
  c.n_layer = 3;
  c.n_embd = 8;
  c.n_head = 2;
  c.dropout = 0.1f;  // the retry must draw the first try's masks: the caller restores the counter
  c.checkpoint = nn::CheckpointStrategy::parse(strategy);
  return c;
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

struct Trainer {
  explicit Trainer(const std::string& strategy)
      : tape(7), model(tape, tiny_gpt(strategy)), opt(model.parameters(), optim::AdamWOptions{}) {
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<std::int32_t>((i * 5 + 2) % 16);
      y[i] = static_cast<std::int32_t>((i * 3 + 1) % 16);
    }
  }
  // One training step; the caller's retry protocol after an OutOfMemory is: drop the partial
  // gradients (zero_grad) and restore the RNG counter (dropout), then run the step again.
  float step() {
    opt.zero_grad();
    auto loss = model.loss(tape.tokens({1, 8}, x), tape.tokens({1, 8}, y));
    const float l = loss.item();
    tape.backward(loss);
    opt.step();
    return l;
  }
  Tape<Cpu> tape;
  nn::GPT<Cpu> model;
  optim::AdamW<Cpu> opt;
  std::vector<std::int32_t> x = std::vector<std::int32_t>(8), y = std::vector<std::int32_t>(8);
};

}  // namespace

TEST_CASE("an allocation fault at every allocation of a GPT step leaves no trace",
          "[core][memory][fault]") {
  for (const char* strategy : {"none", "block", "save_linear", "selective", "sqrt"}) {
    INFO("strategy " << strategy);
    // The reference run, and the number of allocations in its first and second steps.
    std::vector<float> ref;
    std::int64_t allocs[2] = {0, 0}, peaks[2] = {0, 0};
    {
      Trainer t(strategy);
      for (int s = 0; s < 3; ++s) {
        t.opt.zero_grad();  // as the faulty runs measure their pre-step bytes
        const std::int64_t a0 = memory_stats<Cpu>().alloc_count;
        const std::int64_t live = memory_stats<Cpu>().live_total;
        reset_peak_memory<Cpu>();
        ref.push_back(t.step());
        if (s < 2) allocs[s] = memory_stats<Cpu>().alloc_count - a0;
        if (s < 2) peaks[s] = memory_stats<Cpu>().peak_total - live;
      }
    }
    REQUIRE(allocs[0] > 50);
    // Faults in step 1 (AdamW makes its moments lazily) and in step 2 (moments exist).
    for (int faulty = 0; faulty < 2; ++faulty) {
      for (std::int64_t n = 1; n <= allocs[faulty]; ++n) {
        INFO("fault at allocation " << n << " of " << allocs[faulty] << " in step "
                                    << faulty + 1);
        Trainer t(strategy);
        std::vector<float> got;
        if (faulty == 1) got.push_back(t.step());
        t.opt.zero_grad();
        t.tape.prune();
        const std::int64_t live0 = memory_stats<Cpu>().live_total;
        const std::uint64_t rng0 = t.tape.rng_offset();
        const std::int64_t steps0 = t.opt.steps();
        testing::fail_allocation_after<Cpu>(n);
        bool threw = false;
        try {
          t.step();
        } catch (const OutOfMemory&) {
          threw = true;
        } catch (...) {
          testing::fail_allocation_after<Cpu>(0);
          FAIL("the injected fault reached the caller as another exception type");
        }
        const bool pending = testing::allocation_fault_pending<Cpu>();
        testing::fail_allocation_after<Cpu>(0);
        REQUIRE(!pending);
        REQUIRE(threw);
        // Recovery: the caller drops the partial gradients. The nodes a failed forward left are
        // freed by prune() at once (then the ledger is exactly at its pre-step live bytes), or
        // else by the retry's first record (NOTE [graph lifetime] 5): its peak is the
        // fault-free step's. Odd n checks the one, even n the other.
        t.opt.zero_grad();
        REQUIRE(t.opt.steps() == steps0);
        if (n % 2 == 0) {
          t.tape.prune();
          REQUIRE(t.tape.num_nodes() == 0);
          REQUIRE(memory_stats<Cpu>().live_total == live0);
        }
        t.tape.set_rng_offset(rng0);
        reset_peak_memory<Cpu>();
        got.push_back(t.step());
        REQUIRE(memory_stats<Cpu>().peak_total - live0 == peaks[faulty]);
        got.push_back(t.step());
        for (std::size_t i = 0; i < got.size(); ++i) {
          INFO("step " << i + 1 << ": " << got[i] << " after the fault, " << ref[i] << " without");
          REQUIRE(bits(got[i]) == bits(ref[i]));
        }
      }
    }
  }
}

TEST_CASE("fault injection fires once, at the n-th allocation, as OutOfMemory", "[core][memory][fault]") {
  Tape<Cpu> tape;
  const std::int64_t live0 = memory_stats<Cpu>().live_total;
  testing::fail_allocation_after<Cpu>(3);
  auto a = tape.zeros({4});
  auto b = tape.zeros({4});
  REQUIRE(testing::allocation_fault_pending<Cpu>());
  REQUIRE_THROWS_AS(tape.zeros({4}), OutOfMemory);
  REQUIRE(!testing::allocation_fault_pending<Cpu>());
  REQUIRE(memory_stats<Cpu>().live_total == live0 + 32);
  auto c = tape.zeros({4});  // fires once only
  REQUIRE(memory_stats<Cpu>().live_total == live0 + 48);
  testing::fail_allocation_after<Cpu>(1);
  testing::fail_allocation_after<Cpu>(0);  // disarmed
  auto d = tape.zeros({4});
  REQUIRE_THROWS_AS(testing::fail_allocation_after<Cpu>(-1), Error);
}

TEST_CASE("a failed optimizer step leaves no half-made state", "[core][memory][fault][optim]") {
  Tape<Cpu> tape;
  std::vector<Tensor<Cpu>> params;
  for (int i = 0; i < 4; ++i) params.push_back(tape.randn({8}, 1.0f, 30 + i, true));
  auto set_grads = [&] {
    for (std::size_t i = 0; i < params.size(); ++i) tape.backward(params[i], tape.randn({8}, 1.0f, 40 + i));
  };
  for (const bool adamw : {false, true}) {
    INFO((adamw ? "AdamW" : "SGD with momentum"));
    // the first step makes the state of every parameter in 2 (AdamW) or 1 (SGD) flat buffers
    // (NOTE [flat buffers]): fail each
    const std::int64_t made = adamw ? 2 : 1;
    for (std::int64_t n = 1; n <= made; ++n) {
      INFO("fault at allocation " << n);
      optim::SGD<Cpu> sgd(params, {0.1f, 0.9f});
      optim::AdamW<Cpu> adam(params, optim::AdamWOptions{});
      for (const auto& p : params) p.clear_grad();
      set_grads();
      const std::int64_t live0 = memory_stats<Cpu>().live_total;
      const auto before = params[0].to_vector();
      testing::fail_allocation_after<Cpu>(n);
      REQUIRE_THROWS_AS(adamw ? adam.step() : sgd.step(), OutOfMemory);
      testing::fail_allocation_after<Cpu>(0);
      CHECK(memory_stats<Cpu>().live_total == live0);
      CHECK(params[0].to_vector() == before);
      for (std::size_t i = 0; i < params.size(); ++i)
        CHECK(!(adamw ? adam.has_moments(i) : sgd.has_momentum_buffer(i)));
      CHECK(adam.steps() == 0);
      (adamw ? adam.step() : sgd.step());  // the retry makes them all
      for (std::size_t i = 0; i < params.size(); ++i)
        CHECK((adamw ? adam.has_moments(i) : sgd.has_momentum_buffer(i)));
    }
  }
}
