// SPDX-License-Identifier: MIT
// Checkpointing properties that single-line bugs once broke without any test noticing (issue 9,
// point 8; tests/mutation/README.md): the boundary a segment keeps is a saved activation, the
// replay must run as many ops as the first run, save_matmuls keeps matmul outputs, and
// checkpoint_sequential makes segments.

#include <functional>
#include <vector>

#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;
using T = Tensor<Cpu>;

TEST_CASE("a segment's boundary input is held as a saved activation until backward",
          "[checkpoint][memory][mutation]") {
  Tape<Cpu> tape;
  auto x = tape.randn({4, 16}, 1.0f, 1, true);
  auto h = x * 2.0f;  // a temporary (no op saves it): only the segment keeps it
  const auto bytes = static_cast<std::int64_t>(h.bytes());
  const std::int64_t act0 = memory_stats<Cpu>().live_of(Category::activations);
  const std::size_t saved0 = tape.saved_bytes();
  auto y = checkpoint(CheckpointOptions{}.name("boundary"),
                      [](const T& in) { return gelu(in) * 3.0f; }, h);
  CHECK(memory_stats<Cpu>().live_of(Category::activations) - act0 == bytes);
  CHECK(static_cast<std::int64_t>(tape.saved_bytes() - saved0) == bytes);
  const SegmentStats* st = tape.find_segment_stats("boundary");
  REQUIRE(st != nullptr);
  CHECK(st->boundary_bytes == bytes);
  tape.backward(mean(y));
  CHECK(memory_stats<Cpu>().live_of(Category::activations) == act0);  // released after the replay
}

TEST_CASE("a replay that runs fewer ops than the first run is an error naming both counts",
          "[checkpoint][mutation]") {
  Tape<Cpu> tape;
  auto x = tape.randn({3, 4}, 1.0f, 2, true);
  int calls = 0;
  // The first run has one more op of the same shape at the end: every op the replay runs
  // matches the trace, and so does the output; only the op count tells them apart.
  auto y = checkpoint([&](const T& in) {
    auto t = gelu(in);
    if (++calls == 1) t = t * 2.0f;
    return t;
  }, x);
  REQUIRE_THROWS_WITH(tape.backward(mean(y)), REMAT_CONTAINS("the replay ran 1 ops, the first pass 2"));
}

TEST_CASE("save_matmuls keeps the output of a plain matmul, not only of linear layers",
          "[checkpoint][policy][mutation]") {
  Tape<Cpu> tape;
  auto a = tape.randn({4, 8}, 1.0f, 3, true);
  auto b = tape.randn({8, 6}, 1.0f, 4, true);
  auto fn = [&](const T& in) { return gelu(matmul(in, b)); };
  tape.backward(mean(fn(a)));
  const auto plain_a = a.grad().to_vector(), plain_b = b.grad().to_vector();
  a.clear_grad();
  b.clear_grad();
  auto y = checkpoint(CheckpointOptions{}.policy(policy::save_matmuls()).name("mm"), fn, a);
  const SegmentStats* st = tape.find_segment_stats("mm");
  REQUIRE(st != nullptr);
  CHECK(st->kept_bytes == 4 * 6 * 4);  // the (4, 6) product; the GELU is recomputed
  tape.backward(mean(y));
  CHECK(a.grad().to_vector() == plain_a);
  CHECK(b.grad().to_vector() == plain_b);
}

TEST_CASE("checkpoint_sequential replays every segment but the last once in backward",
          "[checkpoint][mutation]") {
  Tape<Cpu> tape;
  auto x = tape.randn({2, 8}, 1.0f, 5, true);
  std::vector<int> calls(6, 0);
  std::vector<std::function<T(const T&)>> blocks;
  for (std::size_t i = 0; i < calls.size(); ++i)
    blocks.emplace_back([&calls, i](const T& in) {
      ++calls[i];
      return gelu(in) * 1.5f;
    });
  auto y = checkpoint_sequential(blocks, 3, x);
  CHECK(calls == std::vector<int>{1, 1, 1, 1, 1, 1});
  CHECK(tape.saved_bytes() < 6 * x.bytes());  // the plain chain would save every block's input
  tape.backward(mean(y));
  CHECK(calls == std::vector<int>{2, 2, 2, 2, 1, 1});  // 3 segments: the last runs plainly
}
