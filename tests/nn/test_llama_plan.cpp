// SPDX-License-Identifier: MIT
// Budgets on nn::Llama (nn/llama_plan.hpp): every plan the planner certifies runs through
// Llama::blocks with the estimated ledger to the byte, inside its budget, with the losses and
// gradients of the plain run bit for bit, in f32 and bf16; the measured chain's times; an
// infeasible budget names the smallest need found.

#include <cstdint>
#include <string>
#include <vector>

#include <remat/nn/llama_plan.hpp>
#include <remat/remat.hpp>

#include "support/catch.hpp"
#include "support/require_error.hpp"

using namespace remat;

namespace {

const nn::PlanOptions kLedgerOnly{false, false}, kFindLeanest{false, true};

nn::LlamaConfig plan_llama(std::int64_t L, DType precision) {
  nn::LlamaConfig c;
  c.vocab_size = 40;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = L;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.rope.theta = 10000.0f;
  c.precision = precision;
  return c;
}

struct LlamaRun {
  std::int64_t peak = 0;  // ledger peak of the second step, relative to before the model
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;  // after the second step's backward
};

// Two AdamW steps of c (its strategy) through train_lm_step, the step the estimate runs;
// the gradients are read from a third step's backward, before the update.
LlamaRun run_llama(const nn::LlamaConfig& c, std::int64_t batch, std::int64_t seq) {
  const std::int64_t live0 = memory_stats<Cpu>().live_total;
  LlamaRun r;
  Tape<Cpu> tape(c.seed);
  nn::Llama<Cpu> model(tape, c);
  optim::AdamW<Cpu> opt(model.parameters(), {});
  std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * seq));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((5 * i + 1) % 40);
  for (int step = 0; step < 2; ++step) {
    reset_peak_memory<Cpu>();
    const auto x = tape.tokens({batch, seq}, ids), y = tape.tokens({batch, seq}, ids);
    r.losses.push_back(nn::train_lm_step(model, opt, x, y).item());
  }
  r.peak = memory_stats<Cpu>().peak_total - live0;
  const auto x = tape.tokens({batch, seq}, ids), y = tape.tokens({batch, seq}, ids);
  tape.backward(model.loss(x, y));
  for (const auto& p : model.parameters()) r.grads.push_back(p.grad().to_vector());
  return r;
}

}  // namespace

TEST_CASE("every certified Llama plan runs inside its budget with the estimated peak and plain gradients",
          "[nn][llama][plan]") {
  for (const DType precision : {DType::f32, DType::bf16}) {
    INFO(dtype_name(precision));
    const nn::LlamaConfig c = plan_llama(6, precision);
    const std::int64_t batch = 4, seq = 32;
    const LlamaRun plain = run_llama(c, batch, seq);
    const nn::CheckpointPlan any =
        nn::plan_checkpoint<Cpu>(c, batch, seq, std::int64_t{1} << 40, {}, {}, kFindLeanest);
    const std::int64_t lo = any.leanest, hi = plain.peak;
    REQUIRE(lo < hi);
    CHECK(any.peak() == plain.peak);  // an ample budget keeps everything: the plain run
    CHECK(nn::estimate_llama_step<Cpu>(c, batch, seq).peak() == plain.peak);
    const plan::Chain chain = nn::llama_chain<Cpu>(c, batch, seq);
    REQUIRE(chain.stages.size() == 8);
    CHECK(chain.stages[1].name == "model.layers.0");
    double last_time = 1e300;
    int segments = 0;
    for (int i = 0; i <= 6; ++i) {
      const std::int64_t budget = lo + (hi - lo) * i / 6;
      const nn::CheckpointPlan cp = nn::plan_checkpoint<Cpu>(c, batch, seq, budget, {}, {}, kLedgerOnly);
      nn::LlamaConfig k = c;
      k.checkpoint = cp.strategy;
      const LlamaRun run = run_llama(k, batch, seq);
      INFO("budget " << budget << " (" << i << "/6): " << cp.summary() << "\n" << cp.table());
      CHECK(cp.peak() <= budget);
      CHECK(run.peak == cp.peak());  // the estimator's prediction, to the byte
      CHECK(run.losses == plain.losses);
      CHECK(run.grads == plain.grads);
      for (const std::string& name : nn::fixed_strategies(c.num_layers)) {  // none faster that fits
        nn::LlamaConfig f = c;
        f.checkpoint = nn::CheckpointStrategy::parse(name);
        if (nn::estimate_llama_step<Cpu>(f, batch, seq).peak() > budget) continue;
        INFO("fixed " << name);
        CHECK(cp.plan.time_s <= plan::simulate(chain, nn::fixed_schedule(f.checkpoint, c.num_layers)).time_s *
                                    (1 + 1e-9));
      }
      CHECK(cp.plan.time_s <= last_time * (1 + 1e-9));  // more memory is never slower
      last_time = cp.plan.time_s;
      segments += cp.plan.segments;
    }
    CHECK(segments > 0);  // the tight budgets checkpoint something
  }
}

TEST_CASE("a measured Llama chain takes a one-layer model's times for every layer", "[nn][llama][plan]") {
  const nn::LlamaConfig c = plan_llama(3, DType::f32);
  const plan::Chain shape_only = nn::llama_chain<Cpu>(c, 2, 16);
  const plan::Chain timed = nn::llama_chain<Cpu>(c, 2, 16, {}, {true, 1});
  REQUIRE(timed.stages.size() == shape_only.stages.size());
  CHECK(timed.base == shape_only.base);
  for (std::size_t i = 0; i < timed.stages.size(); ++i) {
    INFO("stage " << timed.stages[i].name);
    CHECK(timed.stages[i].out == shape_only.stages[i].out);
    for (std::size_t k = 0; k < timed.stages[i].options.size(); ++k) {
      CHECK(timed.stages[i].options[k].saved == shape_only.stages[i].options[k].saved);  // bytes stay exact
      CHECK(timed.stages[i].options[k].fwd_s > 0);
      if (k > 0)  // each option replays more than the one before it
        CHECK(timed.stages[i].options[k].fwd_s + timed.stages[i].options[k].bwd_s >
              timed.stages[i].options[k - 1].fwd_s + timed.stages[i].options[k - 1].bwd_s);
    }
  }
  for (std::size_t i = 2; i + 1 < timed.stages.size(); ++i)
    CHECK(timed.stages[i].options[0].fwd_s == timed.stages[1].options[0].fwd_s);
}

TEST_CASE("a Llama budget nothing fits names the smallest need and where its bytes go", "[nn][llama][plan]") {
  const nn::LlamaConfig c = plan_llama(4, DType::f32);
  const nn::CheckpointPlan any = nn::plan_checkpoint<Cpu>(c, 2, 16, std::int64_t{1} << 40, {}, {}, kFindLeanest);
  CHECK_NOTHROW(nn::plan_checkpoint<Cpu>(c, 2, 16, any.leanest, {}, {}, kLedgerOnly));
  remat_test::require_error(
      [&] { nn::plan_checkpoint<Cpu>(c, 2, 16, any.leanest - 1, {}, {}, kLedgerOnly); },
      {"remat::nn::plan_checkpoint", "no schedule fits a training step of llama (4 layers, d 32, batch 2, seq 16)",
       "(" + std::to_string(any.leanest) + " bytes)", "hint:"});
  nn::LlamaConfig planned = c;
  planned.checkpoint = nn::CheckpointStrategy::parse("budget:1MiB");
  Tape<Cpu> tape;
  const nn::Llama<Cpu> m(tape, planned);
  const auto ids = tape.tokens({1, 4}, {1, 2, 3, 4});
  remat_test::require_error([&] { (void)m.loss(ids, ids); },
                            {"remat::nn::Llama", "'budget:1MiB' has no plan yet", "llama_plan.hpp"});
}

TEST_CASE("the Llama chain's simulated peak brackets the estimator's for every fixed strategy",
          "[nn][llama][plan]") {
  // The chain holds every gradient through the whole step; the real step makes each at its
  // layer's backward: so the certified peak is at most the chain's, and at least the chain's
  // less the gradients, within 2% (the measured stages' transients are approximate: a bf16
  // stage is measured between casts). A chain whose options or bytes disagreed with what
  // Llama::blocks runs would leave that bracket.
  for (const DType precision : {DType::f32, DType::bf16}) {
    INFO(dtype_name(precision));
    const nn::LlamaConfig c = plan_llama(6, precision);
    const plan::Chain chain = nn::llama_chain<Cpu>(c, 4, 32);
    const std::int64_t grads = nn::detail::llama_gradient_bytes<Cpu>(c);
    for (const std::string& name : nn::fixed_strategies(c.num_layers)) {
      INFO(name);
      nn::LlamaConfig f = c;
      f.checkpoint = nn::CheckpointStrategy::parse(name);
      const std::int64_t est = nn::estimate_llama_step<Cpu>(f, 4, 32).peak();
      const std::int64_t sim = plan::simulate(chain, nn::fixed_schedule(f.checkpoint, c.num_layers)).peak;
      CHECK(static_cast<double>(sim - grads) <= 1.02 * static_cast<double>(est));
      CHECK(est <= sim);
    }
  }
}
