#pragma once
// SPDX-License-Identifier: MIT
// The byte-budget planner for a user's own model (NOTE [planning a chain of stages]).
//
//   auto build = [&](auto& tape) {   // generic over the backend: runs on Cpu and on its twin
//     using B = typename std::decay_t<decltype(tape)>::backend;
//     auto m = std::make_shared<MyModel<B>>(tape, config);
//     remat::StageProgram<B> p;
//     p.input = tape.tokens({batch, seq}, sample_ids);
//     p.stages = m->stages(targets_on(tape));   // remat::Stages<B>, plan/stages.hpp
//     p.parameters = m->parameters();
//     return p;
//   };
//   auto fit = remat::plan_stages<remat::Cpu>(build, remat::parse_bytes("300MiB", "budget"));
//   std::puts(fit.table().c_str());            // per stage: option, segment, bytes, time
//   // the training loop: the same program on the real backend, run by the plan's schedule
//   remat::Tape<remat::Cpu> tape;
//   auto p = build(tape);
//   remat::optim::AdamW<remat::Cpu> opt(p.parameters, {});
//   remat::optim::train_step(opt, [&] { return p.stages(p.input, fit.schedule); });

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "remat/backend/backend.hpp"
#include "remat/backend/meta.hpp"
#include "remat/checkpoint/checkpoint.hpp"
#include "remat/core/dtype.hpp"
#include "remat/core/error.hpp"
#include "remat/core/grad_mode.hpp"
#include "remat/core/memory.hpp"
#include "remat/core/tape.hpp"
#include "remat/ops/cast.hpp"
#include "remat/optim/adamw.hpp"
#include "remat/optim/sgd.hpp"
#include "remat/optim/train_step.hpp"
#include "remat/plan/chain.hpp"
#include "remat/plan/estimate.hpp"
#include "remat/plan/fit.hpp"
#include "remat/plan/measure.hpp"
#include "remat/plan/planner.hpp"
#include "remat/plan/stages.hpp"

namespace remat {

// NOTE [planning a chain of stages]
// A user's model reaches the planner as `build`, a generic callable that, given a Tape<B>,
// makes the model, a sample input and the stages on it and returns a StageProgram<B>. The
// planner calls it on the shape-only twin Meta<Target> (backend/meta.hpp), where every byte the
// real run allocates is counted and nothing is computed, and, to time stages, on Target itself.
//   1. stage_chain: builds once on the twin, runs one plain training step (the optimizer's
//      state appears), then measures each stage alone for each of its KeepOptions, fed a fresh
//      leaf of its input's shape: bytes it leaves saved, transient bytes in its forward and
//      backward, its forward without grad (plan/measure.hpp). Times are nominal seconds of the
//      work the twin counts (FLOPs and compulsory bytes), or with measure = true the median of
//      `repeats` runs on Target. That is the planner's chain (plan/chain.hpp).
//   2. plan::fit_budget: the DP proposes schedules, estimate_stages_step certifies each (a whole
//      training step run with it on the twin, so its peak is the real run's ledger peak to the
//      byte), and the fastest certified schedule within the budget wins, among the DP's and the
//      fixed ones (every stage kept; each checkpointable stage a segment; each kept with each
//      option).
// The real run must be the step the estimate runs: optim::train_step over stages(input,
// schedule) with the optimizer of StagePlanOptions::step, on what `build` made (a loop that
// makes each step's batch anew holds one more input while the old one lives).

/// How plan_stages measures and what a budget bounds.
struct StagePlanOptions {
  StepOptions step;       // the optimizer and clipping of the training step
  bool measure = false;   // time each stage on Target (median of `repeats`); else nominal times
  int repeats = 3;
  /// true: on the CPU the budget bounds the process's memory growth, so a plan's ledger peak
  /// plus plan::process_headroom must fit; on a backend whose allocator the estimator models
  /// (CUDA), the bytes that allocator reserves. false: the ledger alone.
  bool bound_process = true;
  bool find_leanest = false;  // certify every fixed schedule too: leanest is then the least
  int slots = 256;            // the DP's table size
};

/// A budget's plan for a user's chain, certified: `estimate` is the exact ledger of a training
/// step run with `schedule`, and its need (peak, plus headroom) is <= `budget`.
struct StagePlan {
  std::shared_ptr<const plan::Schedule> schedule;  // run it: stages(input, schedule)
  plan::Plan plan;           // the schedule with the planner's predicted time and rows
  StepEstimate estimate;     // the ledger of that schedule, to the byte
  std::string source;        // "planner", or the fixed schedule that was as fast and fit
  std::int64_t budget = 0;
  std::int64_t leanest = 0;  // the least need among the schedules certified
  std::int64_t overhead = 0; // beyond the ledger: plan::process_overhead() on the CPU, the
                             // caching allocator's reserve over its peak on a GPU
  double plan_s = 0;         // seconds spent planning

  std::int64_t peak() const noexcept { return estimate.peak(); }
  std::int64_t process_peak() const noexcept { return peak() + overhead; }
  /// One line: "2 segments; kept: 3 keep_all, 1 save_linear; certified peak 41.2 MiB".
  std::string summary() const {
    std::vector<std::pair<std::string, int>> uses;
    for (const plan::PlanRow& r : plan.rows) {
      if (r.segment != "-") continue;
      auto it = std::find_if(uses.begin(), uses.end(), [&](const auto& u) { return u.first == r.option; });
      if (it == uses.end())
        uses.emplace_back(r.option, 1);
      else
        ++it->second;
    }
    std::string s = remat::detail::cat(plan.segments, " segments; kept outside segments:");
    for (std::size_t i = 0; i < uses.size(); ++i)
      s += remat::detail::cat(i ? ", " : " ", uses[i].second, " ", uses[i].first);
    return s + "; certified peak " + format_bytes(peak());
  }
  /// The plan's table, then its certified peak by category.
  std::string table() const {
    const MemoryStats& m = estimate.step;
    return plan.table() +
           remat::detail::cat(
               "schedule from ", source, "; certified ledger peak ", format_bytes(m.peak_total),
               ", process about ", format_bytes(process_peak()), ", budget ",
               format_bytes(budget), " (", bytes_at_peak(m), ")\n");
  }
};

namespace detail {

template <class B, class Build>
StageProgram<B> build_program(Build& build, Tape<B>& tape, const char* where) {
  StageProgram<B> p = build(tape);
  REMAT_CHECK(p.stages.size() > 0, where, ": the program has no stages (hint: add them to "
              "StageProgram::stages)");
  REMAT_CHECK(p.input.defined(), where, ": the program has no input (hint: set "
              "StageProgram::input to a sample batch of the size training will use)");
  REMAT_CHECK(!p.parameters.empty(), where, ": the program has no parameters (hint: set "
              "StageProgram::parameters, e.g. model->parameters())");
  return p;
}

/// Runs one training step of `p` with `schedule` (the step the estimate certifies).
template <class B>
Tensor<B> stages_train_step(const StageProgram<B>& p,
                            const std::shared_ptr<const plan::Schedule>& schedule,
                            optim::AdamW<B>* adamw, optim::SGD<B>* sgd, float grad_clip) {
  auto loss = [&] { return p.stages(p.input, schedule); };
  return adamw ? optim::train_step(*adamw, loss, grad_clip)
               : optim::train_step(*sgd, loss, grad_clip);
}

/// Per stage and option, what the stage costs on B (plan/measure.hpp); out and can_checkpoint.
struct StageCosts {
  std::int64_t input = 0;  // |delta_0|: the input's bytes when it takes a gradient
  std::int64_t base = 0;   // bytes live through a step: parameters, optimizer state, inputs, and
                           // the parameters' gradients
  std::vector<std::int64_t> out;
  std::vector<char> can_checkpoint;
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> option_names;
  std::vector<std::vector<plan::StageCost>> cost;  // [stage][option]
};

template <class B, class Build>
StageCosts measure_stages(Build& build, const StepOptions& so, int repeats) {
  const char* fn = "remat::plan_stages";
  Tape<B> tape;
  StageProgram<B> p = build_program(build, tape, fn);
  StageCosts c;
  {
    // the stage inputs x_i, from a sweep without grad: shapes, and the values of integer ones
    // (the sweep again after the plain step, so that `base` holds none of them)
    auto sweep = [&](std::vector<Tensor<B>>& xs) {
      NoGrad off;
      xs = {p.input};
      for (std::size_t i = 0; i < p.stages.size(); ++i) xs.push_back(p.stages[i].fn(xs[i]));
      const Tensor<B> loss = xs.back();
      xs.pop_back();
      REMAT_CHECK(loss.numel() == 1, fn, ": the last stage ('",
                  p.stages[p.stages.size() - 1].name, "') returns ", loss.shape().str(),
                  " (expected the scalar loss, e.g. cross_entropy(logits, targets))");
      return loss;
    };
    std::vector<Tensor<B>> xs;
    (void)sweep(xs);
    xs.clear();
    // a plain step: the optimizer's state is made, the parameters' gradients dropped
    optim::AdamW<B> adamw(p.parameters, {});
    optim::SGD<B> sgd(p.parameters, {1e-3f, so.momentum});
    const auto all = std::make_shared<const plan::Schedule>(plan::keep_all(p.stages.skeleton()));
    (void)stages_train_step(p, all, so.optimizer == "adamw" ? &adamw : nullptr, &sgd,
                            so.grad_clip);
    B::synchronize();
    std::int64_t grads = 0;
    for (const Tensor<B>& q : p.parameters) grads += static_cast<std::int64_t>(q.bytes());
    c.base = memory_stats<B>().live_total + grads;
    const Tensor<B> loss = sweep(xs);
    const std::size_t n = p.stages.size();
    c.input = p.input.requires_grad() ? static_cast<std::int64_t>(p.input.bytes()) : 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& st = p.stages[i];
      // A bf16 stage (NOTE [precision policy] in ops/cast.hpp) runs between casts: its input
      // a bf16 copy of an f32 leaf, its output widened to f32 for the seed (leaves and
      // backward seeds are f32). Its saved bytes are corrected for the wider output below;
      // its transients may be over by the casts' copies, which the certified estimate never is.
      const DType in_t = xs[i].dtype(), out_t = i + 1 < n ? xs[i + 1].dtype() : DType::f32;
      const bool floating = in_t == DType::f32 || in_t == DType::bf16;
      Tensor<B> x = xs[i];
      if (i > 0 && floating)  // a leaf of the input's shape, taking a gradient as x_i does
        x = tape.randn(xs[i].shape(), 1.0f, 1000 + i, /*requires_grad=*/true);
      const std::int64_t in_grad = x.requires_grad() ? static_cast<std::int64_t>(x.bytes()) : 0;
      const Shape out_shape = i + 1 < n ? xs[i + 1].shape() : Shape{};
      Tensor<B> dy;
      std::int64_t widened = 0;  // the f32 output's bytes over the stage's own
      if (i + 1 < n) {
        REMAT_CHECK(out_t == DType::f32 || out_t == DType::bf16, fn, ": stage ", i, " ('", st.name,
                    "') returns ", dtype_name(out_t),
                    " (expected f32 or bf16: only the first stage may take integer ids)");
        dy = tape.randn(out_shape, 1e-3f, 2000 + i);
        c.out.push_back(static_cast<std::int64_t>(xs[i + 1].bytes()));
        widened = static_cast<std::int64_t>(dy.bytes() - xs[i + 1].bytes());
      } else {
        c.out.push_back(static_cast<std::int64_t>(loss.bytes()));
      }
      c.can_checkpoint.push_back(st.can_checkpoint && floating ? 1 : 0);
      c.names.push_back(st.name);
      c.option_names.emplace_back();
      for (const KeepOption& o : st.options) c.option_names.back().push_back(o.name);
      std::vector<plan::StageCost> per;
      for (std::size_t k = 0; k < st.options.size(); ++k) {
        const KeepOption& o = st.options[k];
        auto run = [&](const Tensor<B>& in) {
          if (!o.segment) return st.fn(in);
          return checkpoint(CheckpointOptions{}.name(st.name).policy(o.policy), st.fn, in);
        };
        auto f = [&](const Tensor<B>& in) {
          const Tensor<B> y = run(in.dtype() == in_t ? in : to_dtype(in, in_t));
          return y.dtype() == DType::bf16 ? to_dtype(y, DType::f32) : y;
        };
        plan::StageCost cost = plan::measure_stage(tape, f, x, dy, in_grad, repeats);
        cost.saved -= widened;
        per.push_back(cost);
      }
      c.cost.push_back(std::move(per));
    }
  }
  return c;
}

}  // namespace detail

/// The exact ledger of training steps of build's program on Target with `schedule`: runs them
/// on the shape-only twin (StepEstimate's fields say which step each one covers).
template <class Target, class Build>
StepEstimate estimate_stages_step(Build&& build, const plan::Schedule& schedule,
                                  const StepOptions& so = {}) {
  so.check("remat::estimate_stages_step");
  using M = Meta<Target>;
  StepEstimate est;
  const double t0 = plan::detail::now_s();
  const auto s = std::make_shared<const plan::Schedule>(schedule);
  estimate_memory<Target>([&](Tape<M>& tape) {
    const StageProgram<M> p = detail::build_program(build, tape, "remat::estimate_stages_step");
    optim::AdamW<M> adamw(p.parameters, {});
    optim::SGD<M> sgd(p.parameters, {1e-3f, so.momentum});
    record_training_steps<M>(est, [&] {
      detail::stages_train_step(p, s, so.optimizer == "adamw" ? &adamw : nullptr, &sgd,
                                so.grad_clip);
    });
  });
  est.seconds = plan::detail::now_s() - t0;
  return est;
}

/// The planner's chain of build's program on Target: bytes measured on the shape-only twin
/// (exact), times from its work counts or, with o.measure, timed on Target.
template <class Target, class Build>
plan::Chain stage_chain(Build&& build, const StagePlanOptions& o = {}) {
  o.step.check("remat::stage_chain");
  detail::StageCosts bytes;
  estimate_memory<Target>([&](auto& tape) {  // measure_stages makes a tape of its own
    using M = typename std::decay_t<decltype(tape)>::backend;
    bytes = detail::measure_stages<M>(build, o.step, 1);
  });
  constexpr bool can_time = is_backend_v<Target>;
  if constexpr (can_time) {
    if (o.measure) {
      const detail::StageCosts t = detail::measure_stages<Target>(build, o.step, o.repeats);
      for (std::size_t i = 0; i < bytes.cost.size(); ++i)
        for (std::size_t k = 0; k < bytes.cost[i].size(); ++k) {
          bytes.cost[i][k].fwd_s = t.cost[i][k].fwd_s;
          bytes.cost[i][k].bwd_s = t.cost[i][k].bwd_s;
          bytes.cost[i][k].nograd_s = t.cost[i][k].nograd_s;
        }
    }
  }
  plan::Chain chain;
  chain.input = bytes.input;
  chain.base = bytes.base;
  for (std::size_t i = 0; i < bytes.cost.size(); ++i) {
    plan::Stage st;
    st.name = bytes.names[i];
    st.out = bytes.out[i];
    st.can_checkpoint = bytes.can_checkpoint[i] != 0 && i + 1 < bytes.cost.size();
    st.nograd_fwd_s = bytes.cost[i][0].nograd_s;
    st.nograd_extra = bytes.cost[i][0].nograd_extra;
    for (std::size_t k = 0; k < bytes.cost[i].size(); ++k) {
      const plan::StageCost& c = bytes.cost[i][k];
      plan::StageOption so;
      so.name = bytes.option_names[i][k];
      so.fwd_s = c.fwd_s;
      so.bwd_s = c.bwd_s;
      so.saved = std::max(c.saved, st.out);  // the output is saved too (read by the next stage)
      so.fwd_extra = c.fwd_extra;
      so.bwd_extra = c.bwd_extra;
      st.options.push_back(so);
    }
    chain.stages.push_back(std::move(st));
  }
  plan::validate(chain);
  return chain;
}

/// The fixed schedules plan_stages also certifies: every stage kept as is; each checkpointable
/// stage (but the last) a segment of its own; every stage kept with option k, for each k > 0.
inline std::vector<plan::NamedSchedule> fixed_stage_schedules(const plan::Chain& c) {
  std::vector<plan::NamedSchedule> out;
  plan::Schedule plain;
  for (std::size_t i = 0; i < c.stages.size(); ++i)
    plain.push_back(plan::make_keep(static_cast<int>(i), 0));
  out.push_back({"keep_all", plain});
  out.push_back({"checkpoint_each", plan::checkpoint_each(c)});
  std::size_t K = 0;
  for (const plan::Stage& s : c.stages) K = std::max(K, s.options.size());
  for (std::size_t k = 1; k < K; ++k) {
    plan::Schedule s;
    std::string name;
    for (std::size_t i = 0; i < c.stages.size(); ++i) {
      const bool has = k < c.stages[i].options.size();
      s.push_back(plan::make_keep(static_cast<int>(i), has ? static_cast<int>(k) : 0));
      if (has && name.empty()) name = c.stages[i].options[k].name;
    }
    out.push_back({"each " + name, s});
  }
  return out;
}

/// The fastest schedule of build's program on Target whose training step needs at most
/// `budget` bytes, by the estimator's exact count (NOTE [planning a chain of stages]). Throws
/// remat::Error naming the smallest need found and where its bytes go when nothing fits.
/// After an OutOfMemory, plan again for memory_limit<Target>() and rerun the step.
template <class Target, class Build>
StagePlan plan_stages(Build&& build, std::int64_t budget, const StagePlanOptions& o = {}) {
  const double t0 = plan::detail::now_s();
  const plan::Chain chain = stage_chain<Target>(build, o);
  std::int64_t grads = 0;
  estimate_memory<Target>([&](auto& tape) {
    const auto p = detail::build_program(build, tape, "remat::plan_stages");
    for (const auto& q : p.parameters) grads += static_cast<std::int64_t>(q.bytes());
  });
  auto certify = [&](const plan::Schedule& s) { return estimate_stages_step<Target>(build, s, o.step); };
  auto need = [&](const StepEstimate& e) -> std::int64_t {
    if (!o.bound_process) return e.peak();
    if (e.reserved_peak > 0) return std::max(e.peak(), e.reserved_peak);
    return e.peak() + plan::process_headroom(plan::process_overhead(), e.peak());
  };
  plan::FitOptions fo;
  fo.slots = o.slots;
  fo.find_leanest = o.find_leanest;
  const plan::Fit fit =
      plan::fit_budget(chain, budget, grads, certify, need, fixed_stage_schedules(chain), fo);
  if (!fit.found) {
    const MemoryStats& m = fit.leanest.step;
    throw Error(remat::detail::cat(
        "remat::plan_stages: no schedule fits a training step of ", chain.stages.size(),
        " stages into ", format_bytes(budget), " (", budget, " bytes); the smallest found needs ",
        format_bytes(fit.leanest_need), " (", fit.leanest_need, " bytes): ", bytes_at_peak(m),
        " (hint: raise the budget, train fewer tokens per step, cut the model into more stages, "
        "or give stages leaner KeepOptions)"));
  }
  StagePlan r;
  r.plan = fit.plan;
  r.estimate = fit.estimate;
  r.source = fit.source;
  r.budget = budget;
  r.leanest = fit.leanest_need;
  r.overhead = r.estimate.reserved_peak > 0 ? r.estimate.reserved_peak - r.peak()
                                            : plan::process_overhead();
  r.schedule = std::make_shared<const plan::Schedule>(r.plan.schedule);
  r.plan_s = plan::detail::now_s() - t0;
  return r;
}

}  // namespace remat
