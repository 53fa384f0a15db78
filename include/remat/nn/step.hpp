#pragma once
// SPDX-License-Identifier: MIT
// The training step of a language model made of nn modules (nn::GPT, nn::Llama: anything with
// loss(ids, targets)), and its predicted ledger: the one step the trainer, the benchmarks and
// the estimator all run (train_lm_step), and estimate_lm_step, which runs it on the shape-only
// twin (plan/estimate.hpp's estimate_memory). gpt_estimate.hpp and llama_plan.hpp name them for
// their model.

#include <chrono>
#include <cstdint>
#include <vector>

#include "remat/backend/meta.hpp"
#include "remat/core/memory.hpp"
#include "remat/core/tape.hpp"
#include "remat/optim/adamw.hpp"
#include "remat/optim/sgd.hpp"
#include "remat/optim/train_step.hpp"
#include "remat/plan/estimate.hpp"

namespace remat {
namespace nn {

/// One training step: forward, backward, optional gradient clipping, the optimizer's update and
/// zero_grad (optim::train_step). ids and targets (B, T) i32. Returns the loss.
template <class Model, class Optimizer, class B>
Tensor<B> train_lm_step(const Model& model, Optimizer& opt, const Tensor<B>& ids, const Tensor<B>& targets,
                        float grad_clip = 0.0f) {
  return optim::train_step(opt, [&] { return model.loss(ids, targets); }, grad_clip);
}

/// Predicts the ledger of training steps on Target of Model<B> built from config c (its
/// checkpoint strategy included) at batch x seq tokens: the step train_lm_step runs, with the
/// optimizer `so` names. The caller checks batch and seq against the model.
template <class Target, template <class> class Model, class Config>
StepEstimate estimate_lm_step(const Config& c, std::int64_t batch, std::int64_t seq, const StepOptions& so,
                              const char* who) {
  REMAT_CHECK(batch > 0 && seq > 0, who, ": batch ", batch, ", seq ", seq, " (expected both positive)");
  so.check(who);
  using M = Meta<Target>;
  StepEstimate est;
  const auto t0 = std::chrono::steady_clock::now();
  auto program = [&](Tape<M>& tape) {
    Model<M> model(tape, c);
    const auto params = model.parameters();
    optim::AdamW<M> adamw(params, {});
    optim::SGD<M> sgd(params, {1e-3f, so.momentum});
    const std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * seq), 0);
    auto one_step = [&] {
      const auto x = tape.tokens({batch, seq}, ids), y = tape.tokens({batch, seq}, ids);
      if (so.optimizer == "adamw")
        train_lm_step(model, adamw, x, y, so.grad_clip);
      else
        train_lm_step(model, sgd, x, y, so.grad_clip);
    };
    record_training_steps<M>(est, one_step);
  };
  estimate_memory<Target>(program);
  est.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return est;
}

}  // namespace nn
}  // namespace remat
