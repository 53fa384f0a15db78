// SPDX-License-Identifier: MIT
// to_dtype (ops/cast.hpp): f32 <-> bf16 values as core/bf16.hpp rounds them, bf16 tensors at
// two bytes an element in the ledger and in the estimate, a bf16 copy's gradient kept in fp32
// (a bf16 gradient buffer: tests/ops/test_matmul_bf16.cpp), checkpointed = plain, and
// the errors that keep bf16 out of the ops that compute in f32 only.

#include <cmath>
#include <cstring>

#include <remat/ops/cast.hpp>
#include <remat/plan/estimate.hpp>
#include <remat/testing/equivalence.hpp>

#include "support/gradcheck.hpp"
#include "support/require_error.hpp"

using namespace remat;
using remat_test::require_error;
using remat_test::T;

TEST_CASE("to_dtype: values rounded to nearest even, widened exactly", "[ops][bf16]") {
  Tape<Cpu> tape(1);
  const std::vector<float> xs = {1.0f, 1.00390625f, 1.01171875f, -3.14159265f, 1e-40f,
                                 3.4e38f, -0.0f, std::nanf(""), 65504.0f, 0.1f};
  const T x = tape.input({2, 5}, xs);
  const T h = to_dtype(x, DType::bf16);
  CHECK(h.dtype() == DType::bf16);
  CHECK(h.bytes() == 2 * 10);
  const std::vector<bf16> hb = h.to_vector<bf16>();
  const std::vector<float> hf = h.to_vector<float>();  // widened
  const std::vector<float> back = to_dtype(h, DType::f32).to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    INFO("x = " << xs[i]);
    CHECK(hb[i].bits == math::to_bf16(xs[i]).bits);
    if (std::isnan(xs[i])) {
      CHECK(std::isnan(hf[i]));
      CHECK(std::isnan(back[i]));
    } else {
      CHECK(std::memcmp(&hf[i], &back[i], 4) == 0);
      const float r = math::round_bf16(xs[i]);
      CHECK(std::memcmp(&back[i], &r, 4) == 0);
    }
  }
  CHECK(back[1] == 1.0f);            // a tie, to the even neighbour
  CHECK(back[2] == 1.015625f);       // a tie, up to the even neighbour
  CHECK(std::isinf(back[5]));        // beyond bf16's largest value
  CHECK(to_dtype(x, DType::f32).impl() == x.impl());  // already f32: x itself
  // bf16 values from the host, as a file gives them
  const T k = tape.input_bf16({2}, {math::to_bf16(2.5f), bf16{0x7fc0}});
  CHECK(k.to_vector()[0] == 2.5f);
  CHECK(std::isnan(k.to_vector()[1]));
}

TEST_CASE("to_dtype: a bf16 tensor holds two bytes an element, in the ledger and the estimate",
          "[ops][bf16][memory]") {
  auto program = [](auto& t) {
    using B = typename std::decay_t<decltype(t)>::backend;
    const Tensor<B> x = t.randn({6, 40}, 1.0f, 3, true), w = t.randn({6, 40}, 1.0f, 4);
    reset_peak_memory<B>();
    const Tensor<B> h = to_dtype(x * w, DType::bf16);  // 480 B, beside x * w's 960 B
    const Tensor<B> y = to_dtype(h, DType::f32) * w;
    t.backward(sum(y));
  };
  const std::int64_t live0 = memory_stats<Cpu>().live_total;
  {
    Tape<Cpu> tape(2);
    const T x = tape.input({6, 40}, std::vector<float>(240, 1.5f));
    const std::int64_t before = memory_stats<Cpu>().live_total;
    const T h = to_dtype(x, DType::bf16);
    CHECK(memory_stats<Cpu>().live_total - before == 2 * 240);
    CHECK(memory_stats<Cpu>().live_total - live0 == 4 * 240 + 2 * 240);
  }
  const MemoryStats est = estimate_memory<Cpu>([&](auto& t) { program(t); });
  const MemoryStats before = memory_stats<Cpu>();
  {
    Tape<Cpu> t2;
    program(t2);
  }
  CHECK(est.peak_total == memory_stats<Cpu>().peak_total - before.live_total);
  CHECK(est.peak_total > 0);
}

TEST_CASE("to_dtype: a bf16 copy of an f32 tensor passes an fp32 gradient back",
          "[ops][bf16][grad]") {
  Tape<Cpu> tape(4);
  const T x = tape.randn({3, 50}, 1.0f, 1, true), w = tape.randn({3, 50}, 1.0f, 2);
  const std::vector<float> wv = w.to_vector();
  SECTION("one use: dx = dy, unrounded") {
    const T h = to_dtype(x, DType::bf16);
    CHECK(h.dtype() == DType::bf16);
    CHECK(h.grad_dtype() == DType::f32);
    tape.backward(sum(to_dtype(h, DType::f32) * w));
    const T g = x.grad();
    CHECK(g.dtype() == DType::f32);
    const std::vector<float> gv = g.to_vector();
    std::size_t rounded = 0;
    for (std::size_t i = 0; i < gv.size(); ++i) {
      REQUIRE(gv[i] == wv[i]);
      rounded += math::round_bf16(wv[i]) != wv[i];
    }
    CHECK(rounded > gv.size() / 2);  // a bf16 gradient would have differed here
  }
  SECTION("two uses: the contributions summed in fp32") {
    const T h = to_dtype(x, DType::bf16);
    const T first = to_dtype(h, DType::f32) * w;  // recorded first, so its gradient comes last
    const T y = first + to_dtype(h, DType::f32) * 3.0f;
    tape.backward(sum(y));
    const std::vector<float> g = x.grad().to_vector();
    for (std::size_t i = 0; i < g.size(); ++i) REQUIRE(g[i] == 3.0f + wv[i]);
  }
  SECTION("through a checkpoint: the same bits as the plain run") {
    const auto r = testing::compare_runs(
        tape,
        [&](bool ck) {
          auto f = [&](const T& in) {
            const T h = to_dtype(exp(in) * w, DType::bf16);
            return to_dtype(h, DType::f32) * to_dtype(h, DType::f32);
          };
          return sum(ck ? checkpoint(f, x) : f(x));
        },
        {x});
    INFO(r.detail);
    CHECK(r.equal);
  }
}

TEST_CASE("to_dtype: errors", "[ops][bf16][errors]") {
  Tape<Cpu> tape(5);
  const T x = tape.randn({4}, 1.0f, 1, true);
  const T h = to_dtype(x, DType::bf16);
  require_error([&] { (void)exp(h); }, {"remat::exp", "must be f32, found bf16", "[4]",
                                         "to_dtype(x, DType::f32)"});
  require_error([&] { (void)to_dtype(tape.tokens({2}, {0, 1}), DType::bf16); },
                {"remat::to_dtype", "i32 -> bf16", "[2]"});
  require_error([&] { (void)to_dtype(T(), DType::bf16); }, {"remat::to_dtype", "undefined"});
  require_error([&] { tape.backward(sum(to_dtype(x, DType::f32)) + 0.0f, to_dtype(tape.input({1}, std::vector<float>{1.0f}), DType::bf16)); },
                {"remat::Tape::backward", "seed", "bf16"});
  const T leaf = tape.input_bf16({4}, std::vector<bf16>(4));
  require_error([&] { leaf.set_requires_grad(true); },
                {"remat::Tensor::set_requires_grad", "bf16 leaf", "[4]", "to_dtype"});
}
