#pragma once
// SPDX-License-Identifier: MIT
// The bundled GPT's training step and its predicted ledger: the one step the trainer, the
// benchmarks and the estimator all run, and estimate_gpt_step, which runs it on the shape-only
// twin (plan/estimate.hpp's estimate_memory). Above plan/: the planner stays model-free.
//
//   auto est = remat::estimate_gpt_step<remat::Cpu>(config, /*batch*/ 4, /*seq*/ 256);
//   est.step.peak_total;                              // bytes a training step will peak at
//   est.step.at_peak_of(remat::Category::activations) // ... of which saved activations
//   remat::estimate_gpt_step<remat::CudaModel>(...)   // the same on the GPU, with the bytes its
//                                                     // caching allocator reserves (reserved_peak)

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "remat/backend/meta.hpp"
#include "remat/core/work.hpp"
#include "remat/core/memory.hpp"
#include "remat/core/tape.hpp"
#include "remat/nn/gpt.hpp"
#include "remat/optim/adamw.hpp"
#include "remat/optim/sgd.hpp"
#include "remat/optim/train_step.hpp"
#include "remat/plan/estimate.hpp"

namespace remat {

/// One GPT training step on backend B: forward, backward, optional gradient clipping, the
/// optimizer's update and zero_grad. The trainer, gpt_step and the estimator all run this, so
/// the estimate describes the very step that is measured. Returns the loss.
template <class B, class Optimizer>
Tensor<B> gpt_train_step(const nn::GPT<B>& model, Optimizer& opt, const Tensor<B>& idx,
                         const Tensor<B>& targets, float grad_clip = 0.0f) {
  return optim::train_step(opt, [&] { return model.loss(idx, targets); }, grad_clip);
}

/// Predicts the ledger of GPT training steps on Target for config `c` (its checkpoint strategy
/// included) at batch x seq tokens.
template <class Target>
StepEstimate estimate_gpt_step(const nn::GPTConfig& c, std::int64_t batch, std::int64_t seq,
                               const StepOptions& so = {}) {
  REMAT_CHECK(batch > 0 && seq > 0 && seq <= c.block_size, "remat::estimate_gpt_step: batch ",
              batch, ", seq ", seq, " (expected batch > 0 and 0 < seq <= block_size ",
              c.block_size, ")");
  so.check("remat::estimate_gpt_step");
  using M = Meta<Target>;
  StepEstimate est;
  const auto t0 = std::chrono::steady_clock::now();
  auto program = [&](Tape<M>& tape) {
    nn::GPT<M> model(tape, c);
    const auto params = model.parameters();
    optim::AdamW<M> adamw(params, {});
    optim::SGD<M> sgd(params, {1e-3f, so.momentum});
    const std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * seq), 0);
    auto one_step = [&] {
      const auto x = tape.tokens({batch, seq}, ids), y = tape.tokens({batch, seq}, ids);
      if (so.optimizer == "adamw")
        gpt_train_step(model, adamw, x, y, so.grad_clip);
      else
        gpt_train_step(model, sgd, x, y, so.grad_clip);
    };
    record_training_steps<M>(est, one_step);
  };
  estimate_memory<Target>(program);
  est.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return est;
}

}  // namespace remat
