#pragma once
// SPDX-License-Identifier: MIT
// Fit a training step into a byte budget, for any chain: the DP (plan/planner.hpp) proposes
// schedules, an exact estimate certifies them (the caller's: a run on the shape-only twin), and
// the fastest certified schedule within the budget wins, among the DP's and a few fixed ones.
// Model-free: plan/fit_stages.hpp uses it for a user's Stages, nn/gpt_plan.hpp for the GPT.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "remat/core/error.hpp"
#include "remat/core/memory.hpp"
#include "remat/plan/chain.hpp"
#include "remat/plan/estimate.hpp"
#include "remat/plan/planner.hpp"

namespace remat::plan {

/// What the process holds beyond the ledger's peak, as a budget on the CPU reserves it: the
/// allocator keeps at most 0.5% (at least 512 KiB) over its peak of live bytes, and a planned
/// step's block may pack up to about 1% over its buffers' own peak (NOTE [CPU arena allocator],
/// NOTE [Planned step layout]): process_headroom reserves 1% (at least 1 MiB) on top of
/// process_overhead. The process grows outside the allocator by about 4 MiB (the tape's and the
/// kernels' small host vectors, code) plus OpenBLAS's packing buffer, about 1 KiB per row of the
/// tallest GEMM, which the CPU GEMM caps at kGemmPanelRows rows (NOTE [GEMM row panels] in
/// backend/cpu/gemm.hpp; a test keeps the two equal). Measured in
/// benchmarks/results/2026-11-30-planner.md and 2026-11-30-rss-vs-ledger.md.
inline constexpr std::int64_t kGemmPanelRows = 4096;
/// `gemm_rows`: the tallest GEMM's rows (kGemmPanelRows or more when not known).
inline std::int64_t process_overhead(std::int64_t gemm_rows = kGemmPanelRows) {
  return (std::int64_t{4} << 20) + 1024 * std::min(gemm_rows, kGemmPanelRows);
}
inline std::int64_t process_headroom(std::int64_t overhead, std::int64_t ledger_peak) {
  return std::max<std::int64_t>(ledger_peak / 100, std::int64_t{1} << 20) + overhead;
}

/// The margin auto_budget leaves free of the available memory: what the process holds beyond
/// the ledger (allocator slack, libraries, host buffers) and room for other processes.
inline constexpr double kAutoMargin = 0.10;

namespace detail {
template <class B, class = void>
struct has_available_memory : std::false_type {};
template <class B>
struct has_available_memory<B, std::void_t<decltype(B::available_memory())>> : std::true_type {};
}  // namespace detail

/// A budget of the memory free now on Target (checkpoint `auto`): the bytes live now plus
/// (1 - kAutoMargin) of Target::available_memory() (the host's MemAvailable and cgroup room on
/// the CPU, cudaMemGetInfo on a GPU), never above memory_limit<Target>() when one is set.
template <class Target>
std::int64_t auto_budget() {
  static_assert(detail::has_available_memory<Target>::value,
                "remat::plan::auto_budget: Target has no available_memory() (a model of a "
                "backend, such as CudaModel, cannot say what is free: give a budget)");
  const std::int64_t avail = Target::available_memory();
  REMAT_CHECK(avail > 0, "remat::plan::auto_budget: no free-memory figure on ", Target::name,
              " (/proc/meminfo and the cgroup on the CPU, cudaMemGetInfo on a GPU) "
              "(hint: give a budget in bytes instead)");
  std::int64_t budget = memory_stats<Target>().live_total +
                        static_cast<std::int64_t>(static_cast<double>(avail) * (1.0 - kAutoMargin));
  if (memory_limit<Target>() > 0) budget = std::min(budget, memory_limit<Target>());
  return budget;
}

/// A schedule with a name, offered to fit_budget beside the DP's ("block", "sqrt").
struct NamedSchedule {
  std::string name;
  Schedule schedule;
};

/// How hard fit_budget looks.
struct FitOptions {
  int slots = 256;  // the DP's table size: the estimator certifies, so a finer one buys little
  /// Also certify every fixed schedule and the DP's leanest plan, so that Fit::leanest is the
  /// smallest feasible budget known.
  bool find_leanest = false;
};

/// What fit_budget found.
struct Fit {
  bool found = false;
  Plan plan;               // the schedule, with the DP's predicted time (and rows)
  StepEstimate estimate;   // its certified ledger
  std::string source;      // "planner", or the name of the fixed schedule that won
  StepEstimate leanest;    // the certified estimate that needed the least of a budget
  std::int64_t leanest_need = std::numeric_limits<std::int64_t>::max();
};

/// The fastest schedule of `chain` whose certified need is at most `budget` bytes.
///   certify(schedule) -> StepEstimate: the exact ledger of a step run with that schedule;
///   need(estimate) -> bytes of the budget it takes (its ledger peak, plus what the process or
///                     the allocator holds beyond it);
///   grads: bytes the chain over-counts (it holds every gradient through the whole step, while
///          a gradient appears only at its stage's backward), so asks up to budget + grads may
///          still fit;
///   fixed: named schedules also tried where one could be faster.
/// Each distinct schedule is certified once. Fit::found is false when nothing fits; leanest
/// then says how close the search came.
inline Fit fit_budget(const Chain& chain, std::int64_t budget, std::int64_t grads,
                      const std::function<StepEstimate(const Schedule&)>& certify,
                      const std::function<std::int64_t(const StepEstimate&)>& need,
                      const std::vector<NamedSchedule>& fixed, const FitOptions& fo = {}) {
  PlannerOptions popt;
  popt.slots = fo.slots;
  const std::int64_t keep_all_peak = simulate(chain, keep_all(chain)).peak;
  // the table spans 0..budget + gradients (or keep-all, when less), so that the search upward
  // below can ask there
  if (budget > chain.base && budget + grads < keep_all_peak) popt.max_budget = budget + grads;
  const Planner planner(chain, popt);
  // The DP answers many asks with the same schedule (its plans change at discrete budgets), and
  // a fixed schedule may be one of them: each schedule is estimated once.
  std::map<std::string, StepEstimate> certified;
  auto certified_of = [&](const Schedule& s) -> const StepEstimate& {
    auto [it, fresh] = certified.try_emplace(describe(s));
    if (fresh) it->second = certify(s);
    return it->second;
  };
  Fit best;
  auto offer = [&](const Plan& p, const StepEstimate& e, const std::string& source) {
    const std::int64_t n = need(e);
    if (n < best.leanest_need) best.leanest = e, best.leanest_need = n;
    if (n > budget) return;
    if (best.found && p.time_s >= best.plan.time_s) return;
    best.plan = p;
    best.estimate = e;
    best.source = source;
    best.found = true;
  };
  // The DP's plan; if the estimator finds it over budget, ask again below by the excess.
  std::int64_t ask = budget;
  for (int tries = 0; tries < 24; ++tries) {
    Plan p;
    try {
      p = planner.plan(ask);
    } catch (const Error&) {
      break;
    }
    const StepEstimate& e = certified_of(p.schedule);
    offer(p, e, "planner");
    if (need(e) <= budget) break;
    ask -= std::max(need(e) - budget, planner.unit());
  }
  // Upward: the DP's model over-counts the gradients, so ask more of it while the estimator
  // still certifies its plan within the budget (bisection between the largest ask known to fit
  // and one known not to, down to a slot).
  if (best.found) {
    std::int64_t fits = ask, over = std::min(ask + grads, planner.max_budget()) + planner.unit();
    for (int tries = 0; tries < 12 && over - fits > planner.unit(); ++tries) {
      const std::int64_t mid = tries == 0 ? over - planner.unit() : fits + (over - fits) / 2;
      const Plan p = planner.plan(mid);
      const StepEstimate& e = certified_of(p.schedule);
      offer(p, e, "planner");
      (need(e) <= budget ? fits : over) = mid;
      if (tries == 0 && need(e) <= budget) break;  // the top of the table fits: done
    }
  }
  // The fixed schedules, where one could be faster than the plan (or nothing fits yet); with
  // find_leanest (or when nothing fits) all of them and the DP's leanest plan, so that
  // `leanest` is the smallest budget known to work.
  const bool all = fo.find_leanest || !best.found;
  if (all) {
    try {
      const Plan p = planner.plan(planner.min_feasible());
      offer(p, certified_of(p.schedule), "planner");
    } catch (const Error&) {
    }
  }
  for (const NamedSchedule& f : fixed) {
    Plan p;
    p.schedule = f.schedule;
    const SimResult r = simulate(chain, p.schedule);
    p.time_s = r.time_s;
    p.peak = r.peak;
    p.budget = budget;
    if (all || p.time_s < best.plan.time_s) offer(p, certified_of(p.schedule), f.name);
  }
  // The leanest plan again, from a table that spans only up to the leanest need known now: the
  // first table spans the budget (or keep-all's peak), and its slots, rounded up, can hide
  // nested plans leaner than every fixed schedule (GPT L24 d128 T1024 B8, attention keeping
  // P: with a 13 MiB slot its leanest needed 395 MiB, block 321 MiB, while a 1.3 MiB slot
  // finds one of 274 MiB; a test keeps it so).
  if (all && best.leanest_need < std::numeric_limits<std::int64_t>::max()) {
    PlannerOptions fine = popt;
    fine.max_budget = std::min(best.leanest_need + grads, keep_all_peak);
    if (fine.max_budget > chain.base) {
      try {
        const Planner lean(chain, fine);
        const Plan p = lean.plan(lean.min_feasible());
        offer(p, certified_of(p.schedule), "planner");
      } catch (const Error&) {
      }
    }
  }
  if (!best.found) return best;
  // the DP's rows describe its own schedule; a fixed one gets rows from a re-simulation
  if (best.source != "planner") best.plan = planner.describe(best.plan.schedule, budget);
  best.plan.budget = budget;  // an upward ask is the DP's business; the user's budget is this
  return best;
}

}  // namespace remat::plan
