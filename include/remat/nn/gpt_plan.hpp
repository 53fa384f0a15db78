#pragma once
// SPDX-License-Identifier: MIT
// Fit a GPT training step into a byte budget: the GPT as a planner chain (embedding, blocks,
// head; per block the options of nn::block_option_name), measured on the shape-only backend
// (bytes, exact) and, optionally, on the real one (times); the DP's plan certified by the
// estimator; and the memory that is free now, for the `auto` strategy.
//
//   auto cp = nn::plan_checkpoint<Cpu>(config, batch, seq, parse_bytes("300MiB", "budget"));
//   config.checkpoint = cp.strategy;      // GPT::blocks runs cp.plan.schedule via checkpoint()
//   std::puts(cp.table().c_str());        // per block: option, segment, bytes kept, time

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "remat/core/grad_mode.hpp"
#include "remat/nn/gpt.hpp"
#include "remat/nn/gpt_estimate.hpp"
#include "remat/plan/chain.hpp"
#include "remat/plan/fit.hpp"
#include "remat/plan/measure.hpp"
#include "remat/plan/planner.hpp"

namespace remat {
namespace nn {

/// How the chain's times are found.
struct ProfileOptions {
  bool measure = false;  // time each stage on the real backend (median of `repeats`); else FLOPs
  int repeats = 3;
};

namespace detail {

using plan::StageCost;
using plan::measure_stage;
using plan::detail::now_s;

/// The costs of the chain's stage kinds: the embedding, a block per option, the head.
struct GptCosts {
  StageCost embedding, head;
  std::vector<StageCost> block;  // one per block option
};

// Measures every stage kind of config c at batch x seq on backend B (a one-block GPT).
template <class B>
GptCosts measure_gpt(const GPTConfig& c, std::int64_t batch, std::int64_t seq, int repeats) {
  GPTConfig one = c;
  one.n_layer = 1;
  one.checkpoint = CheckpointStrategy{};
  Tape<B> tape(c.seed);
  GPT<B> model(tape, one);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * seq));
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<std::int32_t>((i * 7919) % static_cast<std::size_t>(c.vocab_size));
  const Tensor<B> idx = tape.tokens({batch, seq}, ids), tgt = tape.tokens({batch, seq}, ids);
  const Tensor<B> x = tape.randn({batch, seq, c.n_embd}, 1.0f, c.seed + 3, /*requires_grad=*/true);
  const Tensor<B> dy = tape.randn({batch, seq, c.n_embd}, 1e-3f, c.seed + 4);
  const std::int64_t act = static_cast<std::int64_t>(x.bytes());
  GptCosts g;
  g.embedding = measure_stage(tape, [&](const Tensor<B>& i) { return model.embed(i); }, idx, dy, 0,
                              repeats);
  g.head = measure_stage(tape,
                         [&](const Tensor<B>& h) {
                           return cross_entropy(model.head(h), tgt, c.vocab_size);
                         },
                         x, Tensor<B>(), act, repeats);
  const Block<B>* blk = &model.h[0];
  for (int k = 0; k < kBlockOptions; ++k) {
    if (k == 0) {
      g.block.push_back(measure_stage(tape, [&](const Tensor<B>& h) { return (*blk)(h); }, x, dy,
                                      act, repeats));
    } else {
      const CheckpointOptions o = CheckpointOptions{}.name("h.0").policy(block_policy(k));
      g.block.push_back(measure_stage(
          tape, [&](const Tensor<B>& h) { return checkpoint(o, [blk](const Tensor<B>& in) { return (*blk)(in); }, h); },
          x, dy, act, repeats));
    }
  }
  return g;
}

// FLOP counts of the stage kinds (multiply-adds x 2), for times when nothing is measured.
// Block: 24 C^2 per token in the four linear layers, 2 T C per token in causal attention.
// Options 1 and 2 replay attention and the norms (and 2 also GELU) before their backward.
inline void flop_times(const GPTConfig& c, std::int64_t batch, std::int64_t seq, GptCosts& g) {
  const double N = double(batch) * double(seq), C = double(c.n_embd), T = double(seq);
  const double rate = 50e9;  // a nominal flop/s: only the ratios matter to the plan
  const double lin = 24.0 * N * C * C, att = 2.0 * N * T * C, pw = 40.0 * N * C;
  const double block_f = lin + att + pw;
  for (std::size_t k = 0; k < g.block.size(); ++k) {
    StageCost& s = g.block[k];
    s.fwd_s = block_f / rate;
    s.nograd_s = s.fwd_s;
    s.bwd_s = 2.0 * block_f / rate;
    if (k == 1) s.bwd_s += (att + 0.5 * pw) / rate;
    if (k == 2) s.bwd_s += (att + pw) / rate;
  }
  const double head_f = 2.0 * N * C * double(c.padded_vocab()) + 10.0 * N * double(c.vocab_size);
  g.head.fwd_s = g.head.nograd_s = head_f / rate;
  g.head.bwd_s = 2.0 * head_f / rate;
  g.embedding.fwd_s = g.embedding.nograd_s = 2.0 * N * C / rate;
  g.embedding.bwd_s = 2.0 * N * C / rate;
}

inline plan::StageOption to_option(const std::string& name, const StageCost& s) {
  plan::StageOption o;
  o.name = name;
  o.fwd_s = s.fwd_s;
  o.bwd_s = s.bwd_s;
  o.saved = s.saved;
  o.fwd_extra = s.fwd_extra;
  o.bwd_extra = s.bwd_extra;
  return o;
}

// Bytes of GPT's fp32 parameters (tied lm head), each tensor rounded up to `round` floats: 1
// for their gradients (a buffer each), kFlatAlign for the parameters and the optimizer's state
// (flat buffers, NOTE [flat buffers]). What gpt_chain counts; the estimator certifies the real
// figure.
inline std::int64_t gpt_parameter_bytes(const GPTConfig& c, std::int64_t round = 1) {
  auto r = [round](std::int64_t n) { return (n + round - 1) / round * round; };
  const std::int64_t C = c.n_embd;
  // ln_1, attention (c_attn, c_proj), ln_2, MLP (c_fc, c_proj): weights and biases
  const std::int64_t layer = 2 * r(C) + r(3 * C * C) + r(3 * C) + r(C * C) + r(C) + 2 * r(C) +
                             r(4 * C * C) + r(4 * C) + r(4 * C * C) + r(C);
  return 4 * (r(c.padded_vocab() * C) + r(c.block_size * C) + 2 * r(C) + c.n_layer * layer);
}

}  // namespace detail

/// The GPT step as a planner chain: stage 0 the embedding (never in a segment: its input is
/// token ids), stages 1..L the blocks with kBlockOptions options each, stage L+1 the head and
/// loss. Bytes come from the shape-only twin of Target (exact, instant); times from a profile on
/// Target when po.measure, else from FLOP counts. `base` holds the parameters, their gradients,
/// the optimizer state and the token ids: live through the whole step.
template <class Target>
plan::Chain gpt_chain(const GPTConfig& c, std::int64_t batch, std::int64_t seq,
                      const StepOptions& so = {}, const ProfileOptions& po = {}) {
  REMAT_CHECK(batch > 0 && seq > 0 && seq <= c.block_size, "remat::nn::gpt_chain: batch ", batch,
              ", seq ", seq, " (expected batch > 0 and 0 < seq <= block_size ", c.block_size, ")");
  detail::GptCosts g;
  estimate_memory<Target>([&](auto& tape) {  // a one-block GPT of its own: tape stays unused
    using M = typename std::decay_t<decltype(tape)>::backend;
    (void)tape;
    g = detail::measure_gpt<M>(c, batch, seq, 1);
  });
  // A model of a backend (CudaModel) has no kernels to time: it plans from FLOP counts.
  constexpr bool can_time = is_backend_v<Target>;
  if (po.measure && can_time) {
    detail::GptCosts t;
    if constexpr (can_time) t = detail::measure_gpt<Target>(c, batch, seq, po.repeats);
    auto take = [](detail::StageCost& to, const detail::StageCost& from) {
      to.fwd_s = from.fwd_s;
      to.bwd_s = from.bwd_s;
      to.nograd_s = from.nograd_s;
    };
    take(g.embedding, t.embedding);
    take(g.head, t.head);
    for (std::size_t k = 0; k < g.block.size(); ++k) take(g.block[k], t.block[k]);
    // Each option replays more than the one before it, so it cannot be faster: where timing
    // noise says otherwise (a 1-2% effect on a shared machine), the measured order is not
    // trusted and the option is put 1% behind its predecessor.
    for (std::size_t k = 1; k < g.block.size(); ++k) {
      detail::StageCost& o = g.block[k];
      const double floor = 1.01 * (g.block[k - 1].fwd_s + g.block[k - 1].bwd_s);
      if (o.fwd_s + o.bwd_s < floor) o.bwd_s = floor - o.fwd_s;
    }
  } else {
    detail::flop_times(c, batch, seq, g);
  }
  const std::int64_t act = batch * seq * c.n_embd * 4;
  const std::int64_t P = detail::gpt_parameter_bytes(c, kFlatAlign), G = detail::gpt_parameter_bytes(c);
  const std::int64_t opt = so.optimizer == "adamw" ? 2 * P : (so.momentum != 0.0f ? P : 0);
  plan::Chain chain;
  chain.input = 0;
  chain.base = P + G + opt + 2 * batch * seq * 4 + seq * 4;
  plan::Stage emb;
  emb.name = "embedding";
  emb.out = act;
  emb.nograd_fwd_s = g.embedding.nograd_s;
  emb.nograd_extra = g.embedding.nograd_extra;
  emb.can_checkpoint = false;
  emb.options.push_back(detail::to_option("keep_all", g.embedding));
  chain.stages.push_back(emb);
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    plan::Stage b;
    b.name = "h." + std::to_string(i);
    b.out = act;
    b.nograd_fwd_s = g.block[0].nograd_s;
    b.nograd_extra = g.block[0].nograd_extra;
    for (int k = 0; k < kBlockOptions; ++k)
      b.options.push_back(detail::to_option(block_option_name(k), g.block[static_cast<std::size_t>(k)]));
    chain.stages.push_back(b);
  }
  plan::Stage head;
  head.name = "head";
  head.out = 4;  // the loss
  head.nograd_fwd_s = g.head.nograd_s;
  head.nograd_extra = g.head.nograd_extra;
  head.options.push_back(detail::to_option("keep_all", g.head));
  chain.stages.push_back(head);
  return chain;
}

/// plan::process_overhead for a GPT step: its tallest GEMM has the weight gradients' V or 4d
/// rows, or the batch's tokens.
using plan::kGemmPanelRows;
inline std::int64_t process_overhead(const GPTConfig& c, std::int64_t tokens) {
  return plan::process_overhead(std::max({c.padded_vocab(), 4 * c.n_embd, tokens}));
}
inline std::int64_t process_headroom(const GPTConfig& c, std::int64_t tokens,
                                     std::int64_t ledger_peak) {
  return plan::process_headroom(process_overhead(c, tokens), ledger_peak);
}

/// What a budget bounds, and how hard plan_checkpoint looks.
struct PlanOptions {
  /// true: the budget bounds what the device holds: on the CPU the process's memory growth, so
  /// a plan's ledger peak plus process_headroom(config, tokens, peak) must fit; on a backend
  /// whose allocator the estimator models (CUDA), the bytes that allocator reserves.
  /// false: the ledger alone (what set_memory_limit counts).
  bool bound_process = true;
  /// Also certify every fixed strategy and the DP's leanest plan, so that
  /// CheckpointPlan::leanest is the smallest feasible budget.
  bool find_leanest = false;
};

/// A budget's plan for a GPT step, certified: `estimate` is the exact ledger of running
/// `strategy` (the estimator), and its peak is <= `budget`.
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
  std::int64_t overhead = 0;     // beyond the ledger: process_overhead(config, tokens) on the
                                // CPU, the caching allocator's reserve over its peak on a GPU
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

/// The fastest schedule for config c at batch x seq whose whole training step peaks at most at
/// `budget` bytes on Target, by the estimator's exact count. The DP (plan/planner.hpp) proposes,
/// the estimator certifies; a proposal over budget is re-planned below it. Throws remat::Error
/// naming the smallest budget found feasible and where its bytes go when nothing fits.
template <class Target>
CheckpointPlan plan_checkpoint(const GPTConfig& c, std::int64_t batch, std::int64_t seq,
                               std::int64_t budget, const StepOptions& so = {},
                               const ProfileOptions& po = {}, const PlanOptions& pl = {}) {
  const double t0 = detail::now_s();
  const plan::Chain chain = gpt_chain<Target>(c, batch, seq, so, po);
  CheckpointStrategy base = c.checkpoint;
  if (!base.planned()) {
    base = CheckpointStrategy{};
    base.kind = CheckpointStrategy::Kind::budget;
    base.spec = "budget:" + format_bytes(budget);
  }
  base.budget_bytes = budget;
  auto certify = [&](const plan::Schedule& s) {
    GPTConfig cfg = c;
    cfg.checkpoint = base;
    cfg.checkpoint.schedule = std::make_shared<const plan::Schedule>(s);
    return estimate_gpt_step<Target>(cfg, batch, seq, so);
  };
  // the bytes a plan needs of the budget: its ledger peak, plus the process's headroom (the
  // CPU), or what the caching allocator reserves (a backend with a ReservedModel: the GPU)
  auto needs = [&](const StepEstimate& e) -> std::int64_t {
    if (!pl.bound_process) return e.peak();
    if (e.reserved_peak > 0) return std::max(e.peak(), e.reserved_peak);
    return e.peak() + process_headroom(c, batch * seq, e.peak());
  };
  std::vector<plan::NamedSchedule> fixed;
  for (const std::string& name : fixed_strategies(c.n_layer))
    fixed.push_back({name, fixed_schedule(CheckpointStrategy::parse(name), c.n_layer)});
  plan::FitOptions fo;
  fo.find_leanest = pl.find_leanest;
  const plan::Fit fit =
      plan::fit_budget(chain, budget, detail::gpt_parameter_bytes(c), certify, needs, fixed, fo);
  if (!fit.found) {
    const MemoryStats& m = fit.leanest.step;
    const std::int64_t need = fit.leanest_need;
    throw Error(remat::detail::cat(
        "remat::nn::plan_checkpoint: no schedule fits a training step of GPT (", c.n_layer,
        " layers, d ", c.n_embd, ", batch ", batch, ", seq ", seq, ") into ", format_bytes(budget),
        " (", budget, " bytes); the smallest found needs ", format_bytes(need), " (", need,
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
                      : process_overhead(c, batch * seq);
  best.leanest = fit.leanest_need;
  best.strategy = base;
  best.strategy.schedule = std::make_shared<const plan::Schedule>(best.plan.schedule);
  best.plan_s = detail::now_s() - t0;
  return best;
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

/// Plans a budget or auto strategy in c.checkpoint for batch x seq on Target (budget_of).
template <class Target>
CheckpointPlan resolve_checkpoint(const GPTConfig& c, std::int64_t batch, std::int64_t seq,
                                  const StepOptions& so = {}, const ProfileOptions& po = {},
                                  const PlanOptions& pl = {}) {
  return plan_checkpoint<Target>(c, batch, seq, budget_of<Target>(c.checkpoint), so, po, pl);
}

}  // namespace nn
}  // namespace remat
