#pragma once
// SPDX-License-Identifier: MIT
// Fit an nn::Llama training step into a byte budget, as gpt_plan.hpp does for the GPT: the
// model as a planner chain (the embedding, each decoder layer with the options of
// nn::block_option_name, the final norm with the head and the loss), its bytes measured on the
// shape-only twin (exact) and its times from the twin's work counts or, optionally, timed on
// the real backend; the DP's plan certified by estimate_llama_step, the estimator's count of the
// very step train_lm_step runs.
//
//   auto cp = nn::plan_checkpoint<Cpu>(config, batch, seq, parse_bytes("1GiB", "budget"));
//   config.checkpoint = cp.strategy;      // Llama::blocks runs cp.plan.schedule via checkpoint()
//   std::puts(cp.table().c_str());        // per layer: option, segment, bytes kept, time

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "remat/nn/block_plan.hpp"
#include "remat/nn/llama.hpp"
#include "remat/nn/step.hpp"
#include "remat/plan/fit_stages.hpp"

namespace remat {
namespace nn {

/// Predicts the ledger of nn::Llama training steps on Target for config c (its checkpoint
/// strategy included) at batch x seq tokens (nn::estimate_lm_step).
template <class Target>
StepEstimate estimate_llama_step(const LlamaConfig& c, std::int64_t batch, std::int64_t seq,
                                 const StepOptions& so = {}) {
  return estimate_lm_step<Target, Llama>(c, batch, seq, so, "remat::nn::estimate_llama_step");
}

namespace detail {

/// nn::Llama's step as a chain of stages (plan/stages.hpp) on `tape`: stage 0 the embedding of
/// token ids, stages 1..L the decoder layers, stage L+1 the final norm, the head and the loss.
/// The layers' options are block_policy's, in its order: the chain's schedules are the ones
/// Llama::blocks runs (run_block_schedule).
template <class B>
StageProgram<B> llama_program(Tape<B>& tape, LlamaConfig c, std::int64_t batch, std::int64_t seq) {
  c.checkpoint = CheckpointStrategy{};
  const auto m = std::make_shared<const Llama<B>>(tape, c);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * seq));
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<std::int32_t>((i * 7919) % static_cast<std::size_t>(c.vocab_size));
  const Tensor<B> x = tape.tokens({batch, seq}, ids), y = tape.tokens({batch, seq}, ids);
  std::vector<KeepOption> options{KeepOption::keep_all()};
  for (int k = 1; k < kBlockOptions; ++k) options.push_back(KeepOption::with(block_policy(k)));
  StageProgram<B> p;
  p.stages.add_fixed("model.embed_tokens", [m](const Tensor<B>& i) { return m->embed(i); });
  for (std::size_t i = 0; i < m->layers.size(); ++i)
    p.stages.add("model.layers." + std::to_string(i), [m, i](const Tensor<B>& h) { return m->layers[i](h); },
                 options);
  p.stages.add_fixed("head", [m, y](const Tensor<B>& h) { return cross_entropy(m->head(h), y); });
  p.input = x;
  p.parameters = m->parameters();
  return p;
}

// Bytes of the parameters' gradients (f32, one buffer each).
template <class Target>
std::int64_t llama_gradient_bytes(const LlamaConfig& c) {
  std::int64_t n = 0;
  estimate_memory<Target>([&](auto& tape) {
    using M = typename std::decay_t<decltype(tape)>::backend;
    LlamaConfig one = c;
    one.checkpoint = CheckpointStrategy{};
    const Llama<M> m(tape, one);
    for (const auto& q : m.parameters()) n += static_cast<std::int64_t>(q.numel()) * 4;
  });
  return n;
}

}  // namespace detail

/// The Llama step as a planner chain (detail::llama_program): bytes from the shape-only twin of
/// Target (exact, instant); times from the twin's work counts, or with po.measure timed on
/// Target on a one-layer model (every layer has the same shapes, so each takes its times).
template <class Target>
plan::Chain llama_chain(const LlamaConfig& c, std::int64_t batch, std::int64_t seq, const StepOptions& so = {},
                        const ProfileOptions& po = {}) {
  c.check("remat::nn::llama_chain");
  REMAT_CHECK(batch > 0 && seq > 0, "remat::nn::llama_chain: batch ", batch, ", seq ", seq,
              " (expected both positive)");
  StagePlanOptions o;
  o.step = so;
  plan::Chain chain =
      stage_chain<Target>([&](auto& tape) { return detail::llama_program(tape, c, batch, seq); }, o);
  if constexpr (is_backend_v<Target>) {
    if (po.measure) {
      LlamaConfig one = c;
      one.num_layers = 1;
      o.measure = true;
      o.repeats = po.repeats;
      const plan::Chain t =
          stage_chain<Target>([&](auto& tape) { return detail::llama_program(tape, one, batch, seq); }, o);
      const std::size_t n = chain.stages.size();
      for (std::size_t i = 0; i < n; ++i) {
        const plan::Stage& from = t.stages[i == 0 ? 0 : i + 1 == n ? 2 : 1];
        plan::Stage& to = chain.stages[i];
        to.nograd_fwd_s = from.nograd_fwd_s;
        for (std::size_t k = 0; k < to.options.size(); ++k) {
          to.options[k].fwd_s = from.options[k].fwd_s;
          to.options[k].bwd_s = from.options[k].bwd_s;
        }
        detail::order_options(to);
      }
    }
  }
  return chain;
}

/// plan::process_overhead for a Llama step: its tallest GEMM has the vocabulary's, the MLP's or
/// the batch's tokens' rows.
inline std::int64_t process_overhead(const LlamaConfig& c, std::int64_t tokens) {
  return plan::process_overhead(std::max({c.vocab_size, c.intermediate_size, tokens}));
}

/// The fastest schedule for config c at batch x seq whose whole training step needs at most
/// `budget` bytes on Target (PlanOptions says what a budget bounds), by the estimator's exact
/// count: the DP proposes, estimate_llama_step certifies, the fixed strategies are tried too.
/// Throws remat::Error naming the smallest need found and where its bytes go when nothing fits.
template <class Target>
CheckpointPlan plan_checkpoint(const LlamaConfig& c, std::int64_t batch, std::int64_t seq, std::int64_t budget,
                               const StepOptions& so = {}, const ProfileOptions& po = {},
                               const PlanOptions& pl = {}) {
  const double t0 = plan::detail::now_s();
  const plan::Chain chain = llama_chain<Target>(c, batch, seq, so, po);
  auto certify = [&](const CheckpointStrategy& cs) {
    LlamaConfig cfg = c;
    cfg.checkpoint = cs;
    return estimate_llama_step<Target>(cfg, batch, seq, so);
  };
  return detail::fit_blocks(chain, c.num_layers, c.checkpoint, budget, detail::llama_gradient_bytes<Target>(c),
                            process_overhead(c, batch * seq), certify, pl,
                            remat::detail::cat(c.model_type, " (", c.num_layers, " layers, d ", c.hidden_size,
                                               ", batch ", batch, ", seq ", seq, ")"),
                            t0);
}

/// Plans a budget or auto strategy in c.checkpoint for batch x seq on Target (budget_of).
template <class Target>
CheckpointPlan resolve_checkpoint(const LlamaConfig& c, std::int64_t batch, std::int64_t seq,
                                  const StepOptions& so = {}, const ProfileOptions& po = {},
                                  const PlanOptions& pl = {}) {
  return plan_checkpoint<Target>(c, batch, seq, budget_of<Target>(c.checkpoint), so, po, pl);
}

}  // namespace nn
}  // namespace remat
