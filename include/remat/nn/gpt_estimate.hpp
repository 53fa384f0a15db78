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
#include "remat/backend/work.hpp"
#include "remat/core/memory.hpp"
#include "remat/core/step.hpp"
#include "remat/core/tape.hpp"
#include "remat/nn/gpt.hpp"
#include "remat/optim/adamw.hpp"
#include "remat/optim/grad.hpp"
#include "remat/optim/sgd.hpp"
#include "remat/plan/estimate.hpp"

namespace remat {

/// How a training step updates the weights; what the estimate needs to know of the optimizer.
struct StepOptions {
  std::string optimizer = "adamw";  // adamw or sgd
  float momentum = 0.0f;            // sgd: a momentum buffer per parameter when > 0
  float grad_clip = 0.0f;           // > 0: the step clips the gradients' norm (its scratch)
};

/// A GPT step's memory, predicted: `first` covers building the model and its first step
/// (optimizer state is made at the end of it), `step` a later step, with the optimizer state
/// live throughout: its peak_total is what a training run reaches at every step after the first.
struct StepEstimate {
  MemoryStats first;
  MemoryStats step;
  // Bytes Target's allocator reserves at its peak, from a fresh allocator: through the first
  // step, and through the third (reserved bytes only grow; the steps repeat their allocations,
  // but where the pool's blocks lie can still change in the second step and ask for one more
  // segment in the third, e.g. GPT-2 124M at T512: +4 MiB; the later steps reserve nothing
  // more, tests/plan/test_cuda_model.cpp). 0 where Target has no ReservedModel (the CPU: its
  // arena keeps at most 0.5% over the ledger's peak, NOTE [CPU arena allocator]).
  std::int64_t reserved_first = 0;
  std::int64_t reserved_peak = 0;
  double seconds = 0.0;  // time the estimate took
  // What the second step's kernels ask of the device (FLOPs and compulsory bytes by kind,
  // backend/work.hpp): plan/roofline.hpp predicts its time on a GPU from it.
  Work work;
  std::int64_t peak() const noexcept { return step.peak_total; }
};

/// One GPT training step on backend B: forward, backward, optional gradient clipping, the
/// optimizer's update and zero_grad. The trainer, gpt_step and the estimator all run this, so
/// the estimate describes the very step that is measured. Returns the loss.
template <class B, class Optimizer>
Tensor<B> gpt_train_step(const nn::GPT<B>& model, Optimizer& opt, const Tensor<B>& idx,
                         const Tensor<B>& targets, float grad_clip = 0.0f) {
  StepScope<B> step;  // the CPU arena plans the step's buffers (NOTE [Planned step layout])
  Tensor<B> loss = model.loss(idx, targets);
  loss.tape().backward(loss);
  if (grad_clip > 0.0f) (void)optim::clip_grad_norm_(opt.params(), grad_clip);  // no read
  opt.step();
  opt.zero_grad();
  return loss;
}

/// Predicts the ledger of GPT training steps on Target for config `c` (its checkpoint strategy
/// included) at batch x seq tokens.
template <class Target>
StepEstimate estimate_gpt_step(const nn::GPTConfig& c, std::int64_t batch, std::int64_t seq,
                               const StepOptions& so = {}) {
  REMAT_CHECK(batch > 0 && seq > 0 && seq <= c.block_size, "remat::estimate_gpt_step: batch ",
              batch, ", seq ", seq, " (expected batch > 0 and 0 < seq <= block_size ",
              c.block_size, ")");
  REMAT_CHECK(so.optimizer == "adamw" || so.optimizer == "sgd", "remat::estimate_gpt_step: "
              "unknown optimizer '", so.optimizer, "' (expected adamw or sgd)");
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
    one_step();
    est.first = memory_stats<M>();
    est.reserved_first = static_cast<std::int64_t>(M::peak_reserved_bytes());
    reset_peak_memory<M>();
    M::reset_work();
    one_step();
    est.step = memory_stats<M>();
    est.work = M::work();
    if (M::models_reserved) one_step();  // the pool settles (StepEstimate::reserved_peak)
    est.reserved_peak = static_cast<std::int64_t>(M::peak_reserved_bytes());
  };
  estimate_memory<Target>(program);
  est.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return est;
}

}  // namespace remat
