// SPDX-License-Identifier: MIT
// Peak saved activations of a chain of identical GPT blocks, from the allocator's exact bytes,
// against the activation-memory formulas of Korthikanti et al. 2022, "Reducing Activation
// Recomputation in Large Transformer Models" (Section 4.1: s b h (34 + 5 a s / h) bytes per layer
// in 16-bit; here in fp32 elements, without dropout masks, and with attention fused so that only
// its probabilities, a s^2 b, are kept), and the O(sqrt L) bound of Chen et al. 2016:
//   none:       L (16 s b h + a s^2 b) 4 bytes (materialized softmax)
//   per block:  at most 1.3 r(L) of none,  r(L) = 1/L + h / (16 h + a s)
//   sqrt:       L = 16 -> 64 multiplies the peak by at most 2.3 (O(sqrt L), not O(L))

#include <cmath>

#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;

namespace {

constexpr std::int64_t kB = 2, kS = 32, kH = 32, kA = 2;  // batch, seq, width, heads

// Peak bytes of saved activations over one forward + backward of L blocks (no head).
std::int64_t peak_saved(std::int64_t L, const std::string& strategy) {
  Tape<Cpu> tape;
  nn::GPTConfig c;
  c.n_layer = L;
  c.n_embd = kH;
  c.n_head = kA;
  c.block_size = kS;
  c.checkpoint = nn::CheckpointStrategy::parse(strategy);
  nn::GPT<Cpu> model(tape, c);
  auto x = tape.randn({kB, kS, kH}, 1.0f, 5);
  const std::int64_t base = memory_stats<Cpu>().live_of(Category::activations);
  reset_peak_memory<Cpu>();
  tape.backward(mean(model.blocks(x)));
  REQUIRE(memory_stats<Cpu>().live_of(Category::activations) == base);
  return memory_stats<Cpu>().peak_of(Category::activations) - base;
}

double formula_none(std::int64_t L) {
  return static_cast<double>(L) * (16.0 * kS * kB * kH + double(kA) * kS * kS * kB) * 4.0;
}
double r(std::int64_t L) { return 1.0 / double(L) + double(kH) / (16.0 * kH + double(kA) * kS); }

}  // namespace

TEST_CASE("without checkpointing the saved bytes match the formula within 15%", "[checkpoint][memory]") {
  for (std::int64_t L : {4, 8}) {
    const double measured = static_cast<double>(peak_saved(L, "none"));
    INFO("L " << L << ": measured " << measured << " formula " << formula_none(L));
    CHECK(measured >= formula_none(L));           // the formula counts what must be kept
    CHECK(measured <= 1.15 * formula_none(L));    // and we keep little more (LN statistics)
  }
}

TEST_CASE("per-block checkpointing keeps at most 1.3 r(L) of the plain peak", "[checkpoint][memory]") {
  for (std::int64_t L : {4, 8, 16}) {
    const double none = static_cast<double>(peak_saved(L, "none"));
    for (const char* s : {"block", "selective"}) {
      const double ck = static_cast<double>(peak_saved(L, s));
      INFO("L " << L << " " << s << ": " << ck << " of " << none << " = " << ck / none
                << ", r(L) = " << r(L));
      if (std::string(s) == "block") CHECK(ck <= 1.3 * r(L) * none);
      CHECK(ck < none);
    }
  }
}

TEST_CASE("sqrt checkpointing grows as sqrt(L): L 16 -> 64 at most 2.3x", "[checkpoint][memory]") {
  const double p16 = static_cast<double>(peak_saved(16, "sqrt"));
  const double p64 = static_cast<double>(peak_saved(64, "sqrt"));
  INFO("sqrt: L=16 " << p16 << ", L=64 " << p64 << ", ratio " << p64 / p16);
  CHECK(p64 <= 2.3 * p16);
  CHECK(p64 < 0.5 * static_cast<double>(peak_saved(64, "none")));
}
