// SPDX-License-Identifier: MIT
// The planner for a user's own chain of blocks (issue 26 item 1): a Llama-style model written
// against the public API (examples/04_own_model/llama.hpp: composed RMSNorm and RoPE, grouped-
// query attention, a custom SwiGLU op) as remat::Stages, planned under byte budgets by
// remat::plan_stages, and run by the plan's schedule: the certified peak is the real ledger's
// to the byte, within the budget, and the gradients equal the plain run's bit for bit.

#include <remat/plan/fit_stages.hpp>
#include <remat/remat.hpp>

#include "../examples/04_own_model/llama.hpp"
#include "support/catch.hpp"

using namespace remat;

namespace {

struct FitSetup {
  llama::Config c;
  std::int64_t batch = 2, seq = 32;
  std::vector<std::int32_t> ids, tgt;
  FitSetup() {
    c.vocab = 64, c.dim = 32, c.heads = 4, c.kv_heads = 2, c.hidden = 48, c.layers = 6;
    c.max_seq = 32;
    for (std::int64_t i = 0; i < batch * seq; ++i) {
      ids.push_back(static_cast<std::int32_t>((i * 37 + 5) % c.vocab));
      tgt.push_back(static_cast<std::int32_t>((i * 11 + 3) % c.vocab));
    }
  }
  auto build() const {
    return [this](auto& tape) { return llama::program(tape, c, batch, seq, ids, tgt); };
  }
};

// Trains `steps` steps of the program on the CPU by `schedule` (AdamW); returns the ledger's
// peak of the last step, the losses and the parameters after.
struct RunResult {
  std::int64_t peak = 0;
  std::vector<float> losses;
  std::vector<std::vector<float>> params;
};
template <class Build>
RunResult train_cpu(Build build, const plan::Schedule& schedule, int steps) {
  RunResult r;
  REMAT_CHECK(memory_stats<Cpu>().live_total == 0, "test: the CPU ledger is not empty");
  {
    Tape<Cpu> tape(3);
    const StageProgram<Cpu> p = build(tape);
    optim::AdamW<Cpu> opt(p.parameters, {});
    const auto s = std::make_shared<const plan::Schedule>(schedule);
    for (int i = 0; i < steps; ++i) {
      reset_peak_memory<Cpu>();
      r.losses.push_back(optim::train_step(opt, [&] { return p.stages(p.input, s); }).item());
      r.peak = memory_stats<Cpu>().peak_total;
    }
    for (const auto& q : p.parameters) r.params.push_back(q.to_vector());
  }
  return r;
}

}  // namespace

TEST_CASE("Stages run any schedule with the plain run's gradients, bit for bit", "[plan][stages]") {
  const FitSetup f;
  Tape<Cpu> tape(3);
  const StageProgram<Cpu> p = f.build()(tape);
  REQUIRE(p.stages.size() == 8);  // embed, 6 blocks, head
  const plan::Chain skel = p.stages.skeleton();
  auto grads = [&](const Tensor<Cpu>& loss) {
    tape.backward(loss);
    std::vector<std::vector<float>> g;
    for (const auto& q : p.parameters) {
      g.push_back(q.grad().to_vector());
      q.clear_grad();
    }
    return std::make_pair(loss.item(), g);
  };
  const auto plain = grads(p.stages(p.input));
  CHECK(grads(p.stages(p.input, plan::keep_all(skel))) == plain);
  CHECK(grads(p.stages(p.input, plan::checkpoint_each(skel))) == plain);
  // nested segments, and blocks kept with each selective option
  plan::Schedule nested{plan::make_keep(0, 0),
                        plan::make_segment(1, 4, {plan::make_keep(1, 1),
                                                  plan::make_segment(2, 3, {plan::make_keep(2, 2),
                                                                            plan::make_keep(3, 0)}),
                                                  plan::make_keep(4, 2)}),
                        plan::make_keep(5, 1), plan::make_keep(6, 2), plan::make_keep(7, 0)};
  CHECK(grads(p.stages(p.input, nested)) == plain);
  // a schedule that does not fit the chain, and stages built wrong, are errors
  plan::Schedule short_one{plan::make_keep(0, 0), plan::make_keep(1, 0)};
  CHECK_THROWS_WITH(p.stages(p.input, short_one), Catch::Matchers::Contains("expected it to cover stages up to 7"));
  plan::Schedule embed_in_segment{plan::make_segment(0, 1, {plan::make_keep(0, 0), plan::make_keep(1, 0)})};
  for (int i = 2; i < 8; ++i) embed_in_segment.push_back(plan::make_keep(i, 0));
  CHECK_THROWS_WITH(p.stages(p.input, embed_in_segment), Catch::Matchers::Contains("can_checkpoint = false"));
  Stages<Cpu> bad;
  CHECK_THROWS_WITH(bad.add("x", Stages<Cpu>::Fn()), Catch::Matchers::Contains("has no function"));
  CHECK_THROWS_WITH(bad.add("x", [](const Tensor<Cpu>& t) { return t; },
                            {KeepOption::with(policy::save_linear())}),
                    Catch::Matchers::Contains("the first running the stage as is"));
  CHECK_THROWS_WITH(bad(p.input), Catch::Matchers::Contains("no stages"));
}

TEST_CASE("plan_stages fits a user's model into a budget: certified peak = real ledger peak",
          "[plan][stages]") {
  const FitSetup f;
  const auto build = f.build();
  StagePlanOptions o;
  o.bound_process = false;  // the ledger alone: what this test can check to the byte
  const plan::Chain chain = stage_chain<Cpu>(build, o);
  REQUIRE(chain.stages.size() == 8);
  CHECK_FALSE(chain.stages[0].can_checkpoint);  // token ids in
  CHECK(chain.stages[1].can_checkpoint);
  CHECK(chain.stages[1].options.size() == 3);
  CHECK(chain.stages[1].out == 4 * f.batch * f.seq * f.c.dim);
  for (const auto& o2 : chain.stages[1].options) CHECK(o2.fwd_s > 0);  // nominal, from the work
  // keep_all, the leanest and a budget between them
  const StepEstimate all = estimate_stages_step<Cpu>(build, plan::keep_all(chain));
  const RunResult plain = train_cpu(build, plan::keep_all(chain), 3);
  CHECK(plain.peak == all.peak());  // the estimate of a user's model, to the byte
  StagePlanOptions lean_o = o;
  lean_o.find_leanest = true;
  const StagePlan big = plan_stages<Cpu>(build, all.peak(), lean_o);
  CHECK(big.peak() <= all.peak());
  CHECK(big.plan.segments == 0);  // everything fits: the fastest schedule
  const std::int64_t leanest = big.leanest;
  CHECK(leanest < all.peak());
  for (const std::int64_t budget : {leanest, (leanest + all.peak()) / 2}) {
    INFO("budget " << budget);
    const StagePlan fit = plan_stages<Cpu>(build, budget, o);
    CHECK(fit.peak() <= budget);
    CHECK(fit.plan.segments + 0 >= 0);
    const RunResult r = train_cpu(build, *fit.schedule, 3);
    CHECK(r.peak == fit.peak());          // certified = measured, to the byte
    CHECK(r.losses == plain.losses);      // the same training, bit for bit
    CHECK(r.params == plain.params);
    CHECK(fit.table().find("certified ledger peak") != std::string::npos);
    CHECK(fit.summary().find("segments") != std::string::npos);
  }
  const StagePlan tight = plan_stages<Cpu>(build, leanest, o);
  CHECK(tight.plan.segments > 0);  // the leanest plan checkpoints
  CHECK_THROWS_WITH(plan_stages<Cpu>(build, leanest - 1, o),
                    Catch::Matchers::Contains("remat::plan_stages: no schedule fits") &&
                        Catch::Matchers::Contains("the smallest found needs"));
}

TEST_CASE("plan_stages: errors on a program built wrong", "[plan][stages]") {
  const FitSetup f;
  auto no_loss = [&](auto& tape) {  // the last stage returns logits, not a scalar
    auto p = llama::program(tape, f.c, f.batch, f.seq, f.ids, f.tgt);
    using B = typename std::decay_t<decltype(tape)>::backend;
    Stages<B> s;
    for (std::size_t i = 0; i + 1 < p.stages.size(); ++i) {
      if (i == 0)
        s.add_fixed(p.stages[i].name, p.stages[i].fn);
      else
        s.add(p.stages[i].name, p.stages[i].fn);
    }
    p.stages = s;
    return p;
  };
  CHECK_THROWS_WITH(plan_stages<Cpu>(no_loss, 1LL << 30),
                    Catch::Matchers::Contains("expected the scalar loss"));
  auto no_params = [&](auto& tape) {
    auto p = llama::program(tape, f.c, f.batch, f.seq, f.ids, f.tgt);
    p.parameters.clear();
    return p;
  };
  CHECK_THROWS_WITH(plan_stages<Cpu>(no_params, 1LL << 30),
                    Catch::Matchers::Contains("no parameters"));
}

TEST_CASE("a user's model re-planned after OutOfMemory trains on, bit for bit", "[plan][stages]") {
  const FitSetup f;
  const auto build = f.build();
  StagePlanOptions o;
  o.bound_process = false;
  const plan::Chain chain = stage_chain<Cpu>(build, o);
  const RunResult plain = train_cpu(build, plan::keep_all(chain), 2);
  // a limit the plain step cannot meet but a plan can
  const std::int64_t limit = (plain.peak + stage_chain<Cpu>(build, o).base) / 2;
  REQUIRE(limit < plain.peak);
  set_memory_limit<Cpu>(limit);
  reset_peak_memory<Cpu>();
  std::vector<float> losses;
  {
    Tape<Cpu> tape(3);
    const StageProgram<Cpu> p = build(tape);
    optim::AdamW<Cpu> opt(p.parameters, {});
    auto schedule = std::make_shared<const plan::Schedule>(plan::keep_all(chain));
    int replans = 0;
    for (int step = 0; step < 2; ++step) {
      for (int attempt = 0;; ++attempt) {
        try {
          losses.push_back(optim::train_step(opt, [&] { return p.stages(p.input, schedule); }).item());
          break;
        } catch (const OutOfMemory&) {  // drop the step, plan for the limit, run it again
          REQUIRE(attempt == 0);
          tape.clear();
          optim::zero_grad(p.parameters);
          schedule = plan_stages<Cpu>(build, memory_limit<Cpu>(), o).schedule;
          ++replans;
        }
      }
    }
    CHECK(replans == 1);
    CHECK(memory_stats<Cpu>().peak_total <= limit);
  }
  set_memory_limit<Cpu>(0);
  CHECK(losses == plain.losses);
  // auto: the memory free now, less the margin, and never above a set limit
  CHECK(plan::auto_budget<Cpu>() > memory_stats<Cpu>().live_total);
  set_memory_limit<Cpu>(123456789);
  CHECK(plan::auto_budget<Cpu>() == 123456789);
  set_memory_limit<Cpu>(0);
}
