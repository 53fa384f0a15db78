// SPDX-License-Identifier: MIT
// Every op case of tests/support/op_cases.hpp on the CPU, three ways: its gradients against
// finite differences (smooth cases), the shape-only twin's ledger against the CPU's (peak and
// allocations, kernels' scratch included), and its gradients under checkpoint() against the
// plain run's, bit for bit. tests/cuda runs the same cases on CUDA against the CPU.
#include "support/catch.hpp"

#include <cstring>

#include "remat/backend/meta.hpp"
#include "remat/checkpoint/checkpoint.hpp"
#include "remat/plan/estimate.hpp"
#include "remat/remat.hpp"
#include "remat/testing/gradcheck.hpp"
#include "support/op_cases.hpp"

using namespace remat;
using remat_test::op_cases;
using T = Tensor<Cpu>;

namespace {

// checkpoint(f, in...) over a vector of inputs
T checkpointed(const std::function<T(const std::vector<T>&)>& f, const std::vector<T>& in) {
  auto g = [&](const auto&... x) { return f(std::vector<T>{x...}); };
  switch (in.size()) {
    case 1: return checkpoint(g, in[0]);
    case 2: return checkpoint(g, in[0], in[1]);
    case 3: return checkpoint(g, in[0], in[1], in[2]);
    case 4: return checkpoint(g, in[0], in[1], in[2], in[3]);
    case 5: return checkpoint(g, in[0], in[1], in[2], in[3], in[4]);
    case 6: return checkpoint(g, in[0], in[1], in[2], in[3], in[4], in[5]);
  }
  throw std::invalid_argument("checkpointed: at most 6 inputs");
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("every op case matches finite differences on the CPU", "[ops][grad][cases]") {
  int checked = 0;
  for (const auto& c : op_cases<Cpu>()) {
    if (c.fd != remat_test::Fd::smooth) continue;
    INFO("op case " << c.name);
    Tape<Cpu> tape(11);
    const auto in = remat_test::case_inputs(tape, c);
    const auto r = testing::gradcheck(tape, c.f, in);
    INFO(r.detail);
    CHECK(r.ok);
    CHECK(r.checked > 0);
    ++checked;
  }
  CHECK(checked >= 30);
}

TEST_CASE("every op case's ledger is what the shape-only twin predicts, scratch included",
          "[ops][estimate][cases]") {
  for (const auto& c : op_cases<Cpu>()) {
    INFO("op case " << c.name);
    const auto before = memory_stats<Cpu>();
    reset_peak_memory<Cpu>();
    (void)remat_test::run_op<Cpu>(c.name);
    const std::int64_t peak = memory_stats<Cpu>().peak_total - before.live_total;
    const std::int64_t allocs = memory_stats<Cpu>().alloc_count - before.alloc_count;
    const std::int64_t meta_allocs0 = memory_stats<Meta<Cpu>>().alloc_count;
    const std::int64_t predicted = estimate_memory<Cpu>([&](auto&) {
      (void)remat_test::run_op<Meta<Cpu>>(c.name);
    }).peak_total;
    const std::int64_t predicted_allocs = memory_stats<Meta<Cpu>>().alloc_count - meta_allocs0;
    CHECK(peak == predicted);
    CHECK(allocs == predicted_allocs);
    CHECK(peak > 0);
  }
}

TEST_CASE("every op case under checkpoint() has the plain run's output and gradients, bit for bit",
          "[ops][checkpoint][cases]") {
  for (const auto& c : op_cases<Cpu>()) {
    INFO("op case " << c.name);
    Tape<Cpu> tape(11);
    const auto in = remat_test::case_inputs(tape, c);
    const std::uint64_t rng0 = tape.rng_offset();
    std::vector<std::vector<float>> runs[2];
    for (int ck = 0; ck < 2; ++ck) {
      tape.set_rng_offset(rng0);  // dropout draws the same mask in both runs
      const T out = ck ? checkpointed(c.f, in) : c.f(in);
      const auto y = out.to_vector<float>();
      runs[ck].push_back(y);
      tape.backward(out, tape.input(out.shape(), remat_test::seed_gradient(y.size())));
      for (const auto& t : in) {
        runs[ck].push_back(t.grad().to_vector<float>());
        t.clear_grad();
      }
    }
    REQUIRE(runs[0].size() == runs[1].size());
    for (std::size_t i = 0; i < runs[0].size(); ++i) {
      INFO((i == 0 ? std::string("the output") : "the gradient of input " + std::to_string(i - 1)));
      CHECK(same_bits(runs[0][i], runs[1][i]));
    }
  }
}
