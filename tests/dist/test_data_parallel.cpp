// SPDX-License-Identifier: MIT
// remat::dist::DataParallel in one process (LocalComm): gradients become final where the tape
// says (NOTE [gradient contributions]), buckets are issued during backward, and gradient
// accumulation is bitwise the in-order sum of fresh micro-step gradients. The same code under
// mpirun with 1 to 4 ranks: mpi_data_parallel.cpp.

#include <cstring>
#include <string>
#include <vector>

#include <remat/dist/comm.hpp>
#include <remat/dist/data_parallel.hpp>
#include <remat/nn/gpt_plan.hpp>
#include <remat/remat.hpp>

#include "dist/fixture.hpp"
#include "support/catch.hpp"

using namespace remat;
using remat_test::T;

namespace {

dist::DataParallelOptions small_buckets() {
  dist::DataParallelOptions o;
  o.first_bucket_bytes = 4096;
  o.bucket_bytes = 16384;
  return o;
}

}  // namespace

TEST_CASE("DataParallel (one process): gradients bitwise the plain run's, buckets issued during "
          "backward, for every checkpoint strategy", "[dist]") {
  for (const char* strategy : {"none", "block", "save_linear", "sqrt", "every:2"}) {
    CAPTURE(strategy);
    const auto cfg = remat_test::tiny_gpt(strategy);
    Tape<Cpu> ta, tb;
    nn::GPT<Cpu> a(ta, cfg), b(tb, cfg);
    dist::LocalComm comm;
    dist::DataParallel<Cpu> dp(ta, a.named_parameters(), comm, small_buckets());
    REQUIRE(dp.buckets() == 0);  // planned at the first reducing backward
    for (int step = 0; step < 2; ++step) {
      optim::zero_grad(a.parameters());
      dp.backward(remat_test::micro_loss(ta, a, step, 0, 2, 16));
      remat_test::reference_gradients(tb, b, step, 1, 2, 16);
      std::string first;
      CHECK(remat_test::bitwise_equal(a, b, /*grads=*/true, &first));
      CAPTURE(first);
      const auto& st = dp.stats();
      REQUIRE(st.buckets >= 4);
      // Overlap: every bucket but those holding the embeddings (final only at the last
      // backward nodes) is issued while backward runs, in index order.
      CHECK(st.launched_in_backward >= st.buckets - 2);
      REQUIRE(!st.log.empty());
      CHECK(st.log.front().kind == dist::ReduceStats::Event::launch);
      CHECK(st.log.front().bucket == 0);
      CHECK(st.log.front().node < st.nodes_total / 2);
      int expect = 0;
      for (const auto& e : st.log)
        if (e.kind == dist::ReduceStats::Event::launch) CHECK(e.bucket == expect++);
      CHECK(expect == st.buckets);
    }
    // The tied wte is final only after the embedding's backward, the very last node: last bucket.
    const auto names = dp.bucket_names(dp.buckets() - 1);
    CHECK(std::find(names.begin(), names.end(), "wte.weight") != names.end());
  }
}

TEST_CASE("DataParallel (one process): a planner's plan (nested segments) reduces bitwise too",
          "[dist]") {
  auto cfg = remat_test::tiny_gpt("none");
  cfg.n_layer = 4;
  // A budget between block's peak and none's: the planner mixes kept blocks and segments.
  const auto none = estimate_gpt_step<Cpu>(cfg, 2, 16).peak();
  cfg.checkpoint = nn::CheckpointStrategy::parse("block");
  const auto block = estimate_gpt_step<Cpu>(cfg, 2, 16).peak();
  REQUIRE(block < none);
  nn::PlanOptions ledger_only;
  ledger_only.bound_process = false;
  cfg.checkpoint =
      nn::plan_checkpoint<Cpu>(cfg, 2, 16, (none + block) / 2, {}, {}, ledger_only).strategy;
  CAPTURE(cfg.checkpoint.str());
  Tape<Cpu> ta, tb;
  nn::GPT<Cpu> a(ta, cfg), b(tb, cfg);
  dist::LocalComm comm;
  dist::DataParallel<Cpu> dp(ta, a.named_parameters(), comm, small_buckets());
  dp.backward(remat_test::micro_loss(ta, a, 0, 0, 2, 16));
  remat_test::reference_gradients(tb, b, 0, 1, 2, 16);
  std::string first;
  CHECK(remat_test::bitwise_equal(a, b, true, &first));
  CAPTURE(first);
  CHECK(dp.stats().launched_in_backward >= dp.stats().buckets - 2);
}

TEST_CASE("DataParallel (one process): gradient accumulation is bitwise the canonical pairwise "
          "sum of fresh micro-step gradients", "[dist]") {
  for (const char* strategy : {"none", "block"}) {
    CAPTURE(strategy);
    const auto cfg = remat_test::tiny_gpt(strategy);
    Tape<Cpu> ta, tb;
    nn::GPT<Cpu> a(ta, cfg), b(tb, cfg);
    dist::LocalComm comm;
    dist::DataParallel<Cpu> dp(ta, a.named_parameters(), comm, small_buckets());
    for (const int M : {3, 4, 6}) {
      CAPTURE(M);
      optim::zero_grad(a.parameters());
      for (int k = 0; k < M; ++k) {
        dp.backward(remat_test::micro_loss(ta, a, 0, k, 2, 16), k, M);
        if (k + 1 < M) CHECK_FALSE(a.parameters()[0].grad().defined());  // kept aside
      }
      remat_test::reference_gradients(tb, b, 0, M, 2, 16);
      std::string first;
      CHECK(remat_test::bitwise_equal(a, b, true, &first));
      CAPTURE(first);
    }
    // Wrong micro-step arguments are errors.
    REQUIRE_THROWS_WITH(dp.backward(remat_test::micro_loss(ta, a, 0, 0, 2, 16), 3, 3),
                        REMAT_CONTAINS("expected 0 <= micro_step < micro_steps"));
  }
}

// A hand-made graph with every way a parameter can reach its gradient: W used outside and
// inside two segments (twice in one), V passed to a segment as an input, N used in a nested
// segment, U never used. Each must be reduced once, after its last contribution.
TEST_CASE("DataParallel (one process): readiness with shared, nested, passed and unused "
          "parameters", "[dist]") {
  auto run = [](Tape<Cpu>& tape, std::vector<T>& ps, dist::DataParallel<Cpu>* dp) {
    std::vector<float> xs(4 * 8);
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = rng::normal(3, 0, i);
    T x = tape.input({4, 8}, xs);
    const T W = ps[0], V = ps[1], N = ps[2];
    T h = gelu(matmul(x, W));  // W outside
    h = checkpoint([W](const T& in) { return gelu(matmul(matmul(in, W), W)); }, h);  // W twice
    h = checkpoint(
        [N](const T& in, const T& v) {
          T g = gelu(matmul(in, v));
          return checkpoint([N](const T& z) { return tanh(matmul(z, N)); }, g);  // nested
        },
        h, V);
    h = checkpoint([W](const T& in) { return matmul(in, W); }, h);  // W in a second segment
    T loss = mean(h * h);
    if (dp) {
      dp->backward(loss);
    } else {
      tape.backward(loss);
    }
  };
  auto make = [](Tape<Cpu>& tape) {
    std::vector<T> ps;
    for (int i = 0; i < 4; ++i) {
      std::vector<float> v(64);
      for (std::size_t j = 0; j < v.size(); ++j) v[j] = 0.3f * rng::normal(11 + i, 0, j);
      ps.push_back(tape.parameter({8, 8}, v));
    }
    return ps;
  };
  Tape<Cpu> ta, tb;
  auto pa = make(ta), pb = make(tb);
  dist::LocalComm comm;
  dist::DataParallelOptions o;
  o.first_bucket_bytes = o.bucket_bytes = 256;  // one parameter per bucket
  dist::DataParallel<Cpu> dp(ta, {{"W", pa[0]}, {"V", pa[1]}, {"N", pa[2]}, {"U", pa[3]}}, comm, o);
  run(ta, pa, &dp);
  run(tb, pb, nullptr);
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    REQUIRE(pa[i].grad().defined());
    CHECK(std::memcmp(pa[i].grad().data<float>(), pb[i].grad().data<float>(), 256) == 0);
  }
  // U is never used: its gradient is a zero, reduced so that every rank issues the same sums.
  REQUIRE(pa[3].grad().defined());
  for (int j = 0; j < 64; ++j) CHECK(pa[3].grad().data<float>()[j] == 0.0f);
  CHECK(dp.buckets() == 4);
  // Final first: W's first use is the earliest, so it completes last of the used ones.
  CHECK(dp.bucket_names(0) == std::vector<std::string>{"N"});
  CHECK(dp.bucket_names(1) == std::vector<std::string>{"V"});
  CHECK(dp.bucket_names(2) == std::vector<std::string>{"W"});
  CHECK(dp.bucket_names(3) == std::vector<std::string>{"U"});
  CHECK(dp.stats().launched_in_backward >= 2);
}

TEST_CASE("DataParallel: bad set-ups are errors", "[dist]") {
  Tape<Cpu> tape;
  dist::LocalComm comm;
  T p = tape.parameter({2}, {1.0f, 2.0f});
  T c = tape.input({2}, {1.0f, 2.0f});
  REQUIRE_THROWS_WITH(dist::DataParallel<Cpu>(tape, std::vector<T>{}, comm),
                      REMAT_CONTAINS("no parameters"));
  REQUIRE_THROWS_WITH(dist::DataParallel<Cpu>(tape, std::vector<T>{c}, comm),
                      REMAT_CONTAINS("is not an f32 leaf that requires grad"));
  REQUIRE_THROWS_WITH(dist::DataParallel<Cpu>(tape, std::vector<T>{p, p}, comm),
                      REMAT_CONTAINS("listed twice"));
}

TEST_CASE("PairwiseSum: the canonical order at every count, including odd ones", "[dist]") {
  // With 2 or 4 summands a reversed order gives the same bits (a + b == b + a); only odd
  // counts and uneven trees tell the order apart, so each count is checked against the tree
  // NOTE [reduction order] writes out, on values whose sum depends on it.
  const std::vector<float> g = {1e8f, -1e8f, 3.25f, 1.0f / 3.0f, 0.1f, 7.5e7f, -7.5e7f};
  const auto add = [](float a, float b) { return a + b; };
  const auto sum_of = [&](std::size_t n) {
    dist::PairwiseSum<float> s;
    for (std::size_t i = 0; i < n; ++i) s.push(g[i], add);
    return s.finish(add);
  };
  const auto bits = [](float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  volatile float g0 = g[0], g1 = g[1], g2 = g[2], g3 = g[3], g4 = g[4], g5 = g[5], g6 = g[6];
  CHECK(bits(sum_of(3)) == bits((g0 + g1) + g2));
  CHECK(bits(sum_of(5)) == bits(((g0 + g1) + (g2 + g3)) + g4));
  CHECK(bits(sum_of(6)) == bits(((g0 + g1) + (g2 + g3)) + (g4 + g5)));
  CHECK(bits(sum_of(7)) == bits(((g0 + g1) + (g2 + g3)) + ((g4 + g5) + g6)));
  // The order matters for these values: the same summands the other way round differ.
  CHECK(bits(sum_of(3)) != bits((g2 + g1) + g0));
  CHECK(bits(sum_of(5)) != bits(((g4 + g3) + (g2 + g1)) + g0));
}
