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
#include "remat/nn/block_plan.hpp"
#include "remat/nn/gpt.hpp"
#include "remat/nn/gpt_estimate.hpp"
#include "remat/plan/chain.hpp"
#include "remat/plan/fit.hpp"
#include "remat/plan/measure.hpp"
#include "remat/plan/planner.hpp"

namespace remat {
namespace nn {

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
    // (the options' order is enforced on the chain below: detail::order_options)
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
    if (po.measure && can_time) detail::order_options(b);
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
  auto certify = [&](const CheckpointStrategy& cs) {
    GPTConfig cfg = c;
    cfg.checkpoint = cs;
    return estimate_gpt_step<Target>(cfg, batch, seq, so);
  };
  return detail::fit_blocks(chain, c.n_layer, c.checkpoint, budget, detail::gpt_parameter_bytes(c),
                            process_overhead(c, batch * seq), certify, pl,
                            remat::detail::cat("GPT (", c.n_layer, " layers, d ", c.n_embd, ", batch ", batch,
                                               ", seq ", seq, ")"),
                            t0);
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
