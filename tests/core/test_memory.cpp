// SPDX-License-Identifier: MIT
// The memory ledger: exact bytes by category for a known graph, and memory that falls during
// backward as each node's saved tensors are released.

#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;

namespace {
std::int64_t act() { return memory_stats<Cpu>().live_of(Category::activations); }

// A user-defined op (identity) whose backward notes the live activation bytes: it shows when
// saved tensors are released during backward.
std::vector<std::int64_t>& probe_log() {
  static std::vector<std::int64_t> log;
  return log;
}
struct ProbeOp {
  static constexpr const char* name = "probe";
  template <class B>
  struct Saved {
    template <class F> void each(F) const {}
  };
  template <class B>
  static Tensor<B> forward(Saved<B>&, const Tensor<B>& x) {
    auto y = detail::empty_like(x);
    B::copy(y.template data<float>(), x.template data<float>(), x.bytes());
    return y;
  }
  template <class B>
  static void backward(const Saved<B>&, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    probe_log().push_back(act());
    B::add_into(dinp[0].template data<float>(), dout.template data<float>(), dout.numel());
  }
};
Tensor<Cpu> probe(const Tensor<Cpu>& x) { return detail::apply<ProbeOp>(std::array<Tensor<Cpu>, 1>{x}); }
}  // namespace

TEST_CASE("the ledger counts a known graph's bytes exactly", "[memory]") {
  const MemoryStats before = memory_stats<Cpu>();
  reset_peak_memory<Cpu>();
  const std::int64_t base = before.live_total;
  const auto live = [](Category c) { return memory_stats<Cpu>().live_of(c); };
  const std::int64_t params0 = live(Category::parameters), acts0 = live(Category::activations);
  const std::int64_t temps0 = live(Category::temporaries), grads0 = live(Category::gradients);
  {
    Tape<Cpu> tape;
    auto x = tape.input({4, 8}, std::vector<float>(32, 0.5f));          // 128 B
    auto w = tape.parameter({8, 16}, std::vector<float>(128, 0.1f));    // 512 B
    auto b = tape.parameter({16}, std::vector<float>(16, 0.0f));        //  64 B
    auto y = linear(x, w, b);   // 256 B out; saves x (for dW); w is not saved (x needs no grad)
    auto h = gelu(y);           // 256 B out; saves y
    auto loss = mean(h);        //   4 B out; saves nothing
    CHECK(live(Category::parameters) - params0 == 576);
    CHECK(live(Category::activations) - acts0 == 128 + 256);  // x and y, promoted when saved
    CHECK(live(Category::temporaries) - temps0 == 256 + 4);   // h and loss
    CHECK(memory_stats<Cpu>().live_total - base == 576 + 384 + 260);
    CHECK(tape.saved_bytes() == 384);

    tape.backward(loss);
    // dh 256 + dy 256 + dW 512 + db 64 at most live together with the forward's 1220 (the
    // seed's 4 bytes are gone once mean's backward has read them)
    CHECK(memory_stats<Cpu>().peak_total - base == 1220 + 256 + 256 + 512 + 64 - 256);
    CHECK(memory_stats<Cpu>().peak_of(Category::activations) - acts0 == 384);
    CHECK(live(Category::activations) - acts0 == 0);          // all released
    CHECK(live(Category::gradients) - grads0 == 576);         // dW and db
    CHECK(live(Category::temporaries) - temps0 == 128 + 256 + 256 + 4);  // x y h loss, still held
    CHECK(memory_stats<Cpu>().alloc_count - before.alloc_count == 3 + 3 + 1 + 2 + 2);
  }
  CHECK(memory_stats<Cpu>().live_total == base);  // everything freed with the tensors
}

TEST_CASE("a buffer saved by two ops counts once and stays an activation until both ran",
          "[memory]") {
  const std::int64_t a0 = act();
  Tape<Cpu> tape;
  auto w = tape.parameter({64}, std::vector<float>(64, 0.3f));
  auto x = w * 2.0f;            // 256 B temporary
  auto y = gelu(x) + tanh(x);   // gelu saves x, tanh saves its output (256 B)
  CHECK(act() - a0 == 256 + 256);
  tape.backward(sum(y));
  CHECK(act() - a0 == 0);
}

TEST_CASE("saved tensors are released node by node during backward", "[memory]") {
  probe_log().clear();
  const std::int64_t a0 = act();
  Tape<Cpu> tape;
  auto w = tape.parameter({1024}, std::vector<float>(1024, 0.5f));
  Tensor<Cpu> h = w;
  for (int i = 0; i < 6; ++i) h = probe(gelu(h));  // each gelu saves a 4 KiB input
  const std::int64_t at_end = act() - a0;
  CHECK(at_end == 5 * 4096);  // w is a parameter: saved but not an activation
  tape.backward(sum(h));
  REQUIRE(probe_log().size() == 6);
  // Probe k (from the back) runs after k gelu backwards have released their inputs.
  for (std::size_t k = 0; k < 6; ++k)
    CHECK(probe_log()[k] - a0 == at_end - static_cast<std::int64_t>(k) * 4096);
}

TEST_CASE("the CPU block cache reuses freed buffers and the ledger counts only live bytes",
          "[memory]") {
  Cpu::set_caching(true);
  Cpu::empty_cache();
  const std::int64_t live0 = memory_stats<Cpu>().live_total;
  {
    Tape<Cpu> tape;
    auto a = tape.zeros({1000});  // 4000 B, rounded to 4032 in the cache
  }
  CHECK(Cpu::cached_bytes() == 4032);
  CHECK(memory_stats<Cpu>().live_total == live0);
  {
    Tape<Cpu> tape;
    auto b = tape.zeros({1000});  // the same size: taken from the cache
    CHECK(Cpu::cached_bytes() == 0);
    CHECK(memory_stats<Cpu>().live_total == live0 + 4000);
  }
  Cpu::set_caching(false);  // off: empties the cache; frees go straight back to the system
  CHECK(Cpu::cached_bytes() == 0);
  { Tape<Cpu> tape; auto c = tape.zeros({1000}); }
  CHECK(Cpu::cached_bytes() == 0);
  Cpu::set_caching(true);
}
