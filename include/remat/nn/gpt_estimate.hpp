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

#include <cstdint>

#include "remat/core/work.hpp"
#include "remat/nn/gpt.hpp"
#include "remat/nn/step.hpp"

namespace remat {

/// One GPT training step on backend B (nn::train_lm_step): forward, backward, optional gradient
/// clipping, the optimizer's update and zero_grad. The trainer, gpt_step and the estimator all
/// run this, so the estimate describes the very step that is measured. Returns the loss.
template <class B, class Optimizer>
Tensor<B> gpt_train_step(const nn::GPT<B>& model, Optimizer& opt, const Tensor<B>& idx,
                         const Tensor<B>& targets, float grad_clip = 0.0f) {
  return nn::train_lm_step(model, opt, idx, targets, grad_clip);
}

/// Predicts the ledger of GPT training steps on Target for config `c` (its checkpoint strategy
/// included) at batch x seq tokens (nn::estimate_lm_step).
template <class Target>
StepEstimate estimate_gpt_step(const nn::GPTConfig& c, std::int64_t batch, std::int64_t seq,
                               const StepOptions& so = {}) {
  REMAT_CHECK(batch > 0 && seq > 0 && seq <= c.block_size, "remat::estimate_gpt_step: batch ",
              batch, ", seq ", seq, " (expected batch > 0 and 0 < seq <= block_size ",
              c.block_size, ")");
  return nn::estimate_lm_step<Target, nn::GPT>(c, batch, seq, so, "remat::estimate_gpt_step");
}

}  // namespace remat
