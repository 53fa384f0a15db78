#pragma once
// SPDX-License-Identifier: MIT
// Planning the checkpointing of a stack of blocks, for any model made of one (nn::GPT in
// gpt_plan.hpp, nn::Llama in llama_plan.hpp): how the chain's times are found, what a budget
// bounds, the certified plan a budget gets (CheckpointPlan), the fixed strategies tried beside
// the DP's, and fit_blocks, the search both models share once their chain is built.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "remat/core/memory.hpp"
#include "remat/nn/blocks.hpp"
#include "remat/plan/chain.hpp"
#include "remat/plan/estimate.hpp"
#include "remat/plan/fit.hpp"
#include "remat/plan/measure.hpp"
#include "remat/plan/planner.hpp"

namespace remat {
namespace nn {

/// How the chain's times are found.
struct ProfileOptions {
  bool measure = false;  // time each stage on the real backend (median of `repeats`); else
                         // nominal times: FLOP counts (GPT), the twin's work counts (Llama)
  int repeats = 3;
};

/// What a budget bounds, and how hard plan_checkpoint looks.
struct PlanOptions {
  /// true: the budget bounds what the device holds: on the CPU the process's memory growth, so
  /// a plan's ledger peak plus plan::process_headroom(the model's process_overhead, peak) must
  /// fit; on a backend whose allocator the estimator models (CUDA), the bytes that allocator
  /// reserves. false: the ledger alone (what set_memory_limit counts).
  bool bound_process = true;
  /// Also certify every fixed strategy and the DP's leanest plan, so that
  /// CheckpointPlan::leanest is the smallest feasible budget.
  bool find_leanest = false;
};

/// A budget's plan for a model's training step, certified: `estimate` is the exact ledger of
/// running `strategy` (the estimator), and its peak is <= `budget`.
struct CheckpointPlan {
  CheckpointStrategy strategy;  // for config.checkpoint: the schedule below
  std::string source;           // "planner", or the fixed strategy that was as fast and fit
  plan::Plan plan;              // the schedule with the planner's predicted time and peak
  StepEstimate estimate;        // the ledger of that schedule, to the byte
  std::int64_t budget = 0;
  std::int64_t leanest = 0;     // the least budget among the candidates tried that would fit:
                                // the smallest feasible budget with PlanOptions::find_leanest
  double plan_s = 0;            // time spent planning (profile, DP, estimates)

  std::int64_t peak() const noexcept { return estimate.peak(); }
  std::int64_t overhead = 0;     // beyond the ledger: the model's process_overhead(config,
                                // tokens) on the CPU, the caching allocator's reserve over
                                // its peak on a GPU
  /// The process's predicted memory growth: the ledger's peak plus the overhead.
  std::int64_t process_peak() const noexcept { return peak() + overhead; }
  /// One line: "3 segments (nested 2 deep); blocks kept with 5 keep_all, 3 save_linear".
  std::string summary() const {
    std::vector<int> uses(kBlockOptions, 0);
    int depth = 0;
    const int L = static_cast<int>(plan.rows.size()) - 2;
    auto walk = [&](const auto& self, const plan::Schedule& s, int d) -> void {
      depth = std::max(depth, d);
      for (const plan::Step& st : s) {
        if (st.kind == plan::Step::Kind::segment)
          self(self, st.inner, d + 1);
        else if (st.first >= 1 && st.first <= L && d == 0)
          ++uses[static_cast<std::size_t>(st.option)];
      }
    };
    walk(walk, plan.schedule, 0);
    std::string s = remat::detail::cat(plan.segments, " segments");
    if (depth > 1) s += remat::detail::cat(" (nested ", depth, " deep)");
    std::string kept;
    for (int k = 0; k < kBlockOptions; ++k)
      if (uses[static_cast<std::size_t>(k)] > 0)
        kept += remat::detail::cat(kept.empty() ? "" : ", ", uses[static_cast<std::size_t>(k)], " ",
                                   block_option_name(k));
    if (!kept.empty()) s += "; blocks outside segments: " + kept;
    return s + "; certified peak " + format_bytes(peak());
  }
  /// The plan's table, then its certified peak by category.
  std::string table() const {
    const MemoryStats& m = estimate.step;
    std::string s = plan.table();
    s += remat::detail::cat("schedule from ", source, "; the DP's peak above counts every gradient "
                            "through the whole step, the estimator's below is exact: certified ledger peak ",
                            format_bytes(m.peak_total), ", process about ",
                            format_bytes(process_peak()), ", budget ", format_bytes(budget),
                            " (", bytes_at_peak(m), ")\n");
    return s;
  }
};

/// The fixed strategies the planner's plan is checked against (and which it falls back to where
/// one is faster in the model and fits too).
inline std::vector<std::string> fixed_strategies(std::int64_t L) {
  std::vector<std::string> s = {"none", "selective", "block", "sqrt"};
  for (std::int64_t n = 2; n < L; n *= 2) s.push_back("every:" + std::to_string(n));
  return s;
}

using plan::kAutoMargin;

/// The bytes a budget or auto strategy plans for on Target: budget:SIZE as given (never above
/// memory_limit<Target>() when one is set); auto plan::auto_budget<Target>().
template <class Target>
std::int64_t budget_of(const CheckpointStrategy& s) {
  REMAT_CHECK(s.planned(), "remat::nn::budget_of: '", s.str(), "' is a fixed strategy (expected "
              "budget:SIZE or auto)");
  if (s.kind == CheckpointStrategy::Kind::automatic) return plan::auto_budget<Target>();
  const std::int64_t limit = memory_limit<Target>();
  return limit > 0 ? std::min(s.budget_bytes, limit) : s.budget_bytes;
}

namespace detail {

/// Where measured times disagree with the options' order: each option replays more than the one
/// before it, so it cannot be faster; where timing noise says otherwise (a 1-2% effect on a
/// shared machine), the option is put 1% behind its predecessor.
inline void order_options(plan::Stage& s) {
  for (std::size_t k = 1; k < s.options.size(); ++k) {
    plan::StageOption& o = s.options[k];
    const double floor = 1.01 * (s.options[k - 1].fwd_s + s.options[k - 1].bwd_s);
    if (o.fwd_s + o.bwd_s < floor) o.bwd_s = floor - o.fwd_s;
  }
}

/// The fastest schedule of `chain` (embedding, L blocks, head) whose step fits `budget`, among
/// the DP's and the fixed strategies': `certify(strategy)` is the estimator's exact ledger of a
/// step run with that strategy (its schedule set), `overhead` the process's bytes beyond the
/// ledger on the CPU (the model's process_overhead), `grads` the parameters' gradient bytes.
/// `what` names the model in the error thrown when nothing fits. t0: when planning began.
inline CheckpointPlan fit_blocks(const plan::Chain& chain, std::int64_t L, const CheckpointStrategy& given,
                                 std::int64_t budget, std::int64_t grads, std::int64_t overhead,
                                 const std::function<StepEstimate(const CheckpointStrategy&)>& certify,
                                 const PlanOptions& pl, const std::string& what, double t0) {
  CheckpointStrategy base = given;
  if (!base.planned()) {
    base = CheckpointStrategy{};
    base.kind = CheckpointStrategy::Kind::budget;
    base.spec = "budget:" + format_bytes(budget);
  }
  base.budget_bytes = budget;
  auto certify_schedule = [&](const plan::Schedule& s) {
    CheckpointStrategy cs = base;
    cs.schedule = std::make_shared<const plan::Schedule>(s);
    return certify(cs);
  };
  // the bytes a plan needs of the budget: its ledger peak, plus the process's headroom (the
  // CPU), or what the caching allocator reserves (a backend with a ReservedModel: the GPU)
  auto needs = [&](const StepEstimate& e) -> std::int64_t {
    if (!pl.bound_process) return e.peak();
    if (e.reserved_peak > 0) return std::max(e.peak(), e.reserved_peak);
    return e.peak() + plan::process_headroom(overhead, e.peak());
  };
  std::vector<plan::NamedSchedule> fixed;
  for (const std::string& name : fixed_strategies(L))
    fixed.push_back({name, fixed_schedule(CheckpointStrategy::parse(name), L)});
  plan::FitOptions fo;
  fo.find_leanest = pl.find_leanest;
  const plan::Fit fit = plan::fit_budget(chain, budget, grads, certify_schedule, needs, fixed, fo);
  if (!fit.found) {
    const MemoryStats& m = fit.leanest.step;
    const std::int64_t need = fit.leanest_need;
    throw Error(remat::detail::cat(
        "remat::nn::plan_checkpoint: no schedule fits a training step of ", what, " into ",
        format_bytes(budget), " (", budget, " bytes); the smallest found needs ", format_bytes(need), " (", need,
        " bytes", pl.bound_process ? remat::detail::cat(", of which ",
        format_bytes(need - m.peak_total), " held beyond the ledger") : "",
        "): ", bytes_at_peak(m),
        " (hint: raise the budget, train fewer tokens per step, or use SGD without momentum)"));
  }
  CheckpointPlan best;
  best.plan = fit.plan;
  best.estimate = fit.estimate;
  best.source = fit.source;
  best.budget = budget;
  best.overhead = best.estimate.reserved_peak > 0
                      ? best.estimate.reserved_peak - best.peak()  // the allocator's, on a GPU
                      : overhead;
  best.leanest = fit.leanest_need;
  best.strategy = base;
  best.strategy.schedule = std::make_shared<const plan::Schedule>(best.plan.schedule);
  best.plan_s = plan::detail::now_s() - t0;
  return best;
}

}  // namespace detail

}  // namespace nn
}  // namespace remat
