#pragma once
// SPDX-License-Identifier: MIT
// A training loop's step, for any model: one process that re-plans a step which ran out of
// memory and runs it again (NOTE [re-plan on out of memory]), or a data-parallel step over
// ranks and micro-steps whose bits depend on the global batch only (NOTE [data parallel step]).
// The model enters through callables; the plan through the caller's re-plan callable.

#include <cstdint>
#include <utility>
#include <vector>

#include "remat/core/error.hpp"
#include "remat/core/step.hpp"
#include "remat/core/tape.hpp"
#include "remat/dist/comm.hpp"
#include "remat/dist/data_parallel.hpp"
#include "remat/optim/grad.hpp"

namespace remat {
namespace train {

/// How a step is split: this rank of `ranks`, each running `micro_steps` micro-batches.
struct Parallel {
  int rank = 0, ranks = 1, micro_steps = 1;
  /// Micro-batches per step over all ranks.
  std::int64_t micro_batches() const noexcept { return static_cast<std::int64_t>(ranks) * micro_steps; }
  /// The global index of this rank's micro-step k: a rank's micro-batches are consecutive.
  std::int64_t micro_batch(int k) const noexcept {
    return static_cast<std::int64_t>(rank) * micro_steps + k;
  }
};

// NOTE [re-plan on out of memory]: a step that runs out of memory is dropped whole (its graph,
// its gradients; the optimizer state and the weights are untouched, since remat's optimizers
// allocate before they update) and run again on the same batch from the same RNG state, under
// a plan for the memory there is: its loss is the loss that plan gives from the start. The
// attempt must therefore set its RNG state itself (tape.set_seed, tape.set_rng_offset).
/// Runs `attempt()` (a whole step: forward, backward, update; returns the loss). When it throws
/// remat::OutOfMemory, the failed step is dropped (tape.clear(), zero_grad(params)) and
/// `replan(e)` is asked to make the next attempt fit: it returns true to try again, false to
/// give up (the OutOfMemory then propagates), or throws its own error (no plan fits). At most
/// `max_replans` re-plans.
template <class B, class Attempt, class Replan>
auto step_with_replanning(Tape<B>& tape, const std::vector<Tensor<B>>& params, Attempt&& attempt,
                          Replan&& replan, int max_replans = 3) {
  for (int n = 0;; ++n) {
    try {
      return attempt();
    } catch (const OutOfMemory& e) {
      tape.clear();
      optim::zero_grad(params);
      if (n >= max_replans || !replan(e)) throw;
    }
  }
}

// NOTE [data parallel step]: every rank runs the same program. A step takes ranks x
// micro-steps micro-batches; micro-batch g = rank x micro-steps + k is the g-th of the step's
// global batch (the caller's loss_of(g) picks its data), and draws its random numbers (dropout)
// from dist::stream_seed(seed, step, g), so the data, the masks and, with DataParallel's
// fixed-order sums (NOTE [reduction order] in dist/comm.hpp), every bit of the training depend
// on the global batch and the micro-batch, not on how they are split among ranks and
// micro-steps. The step's loss is the mean of every micro-batch's loss, summed in global order.
/// One data-parallel step (NOTE [data parallel step]) on `tape`, whose parameters `params` `dp`
/// sums the gradients of: for each micro-step k of this rank, loss_of(g) -> the scalar loss of
/// micro-batch g (its mean over the micro-batch), whose backward DataParallel sums over ranks;
/// then clipping of the summed gradients' norm (when grad_clip > 0), `update()` (the
/// optimizer's step) and zero_grad. Returns the step's loss, the same on every rank.
template <class B, class LossOf, class Update>
float data_parallel_step(Tape<B>& tape, dist::DataParallel<B>& dp, dist::Comm& comm,
                         const Parallel& par, std::uint64_t seed, int step, float grad_clip,
                         const std::vector<Tensor<B>>& params, LossOf&& loss_of, Update&& update) {
  REMAT_CHECK(par.ranks == comm.size() && par.rank == comm.rank() && par.micro_steps >= 1,
              "remat::train::data_parallel_step: the split says rank ", par.rank, " of ",
              par.ranks, " with ", par.micro_steps, " micro-step(s), the communicator rank ",
              comm.rank(), " of ", comm.size(), " (expected the same ranks, and micro_steps >= 1)");
  StepScope<B> scope;  // the CPU arena plans the step's buffers (NOTE [Planned step layout])
  std::vector<double> losses;  // this rank's micro-batches', in global order
  for (int k = 0; k < par.micro_steps; ++k) {
    const std::int64_t g = par.micro_batch(k);
    tape.set_seed(dist::stream_seed(seed, step, g));
    tape.set_rng_offset(0);
    const Tensor<B> loss = loss_of(g);
    losses.push_back(loss.item());
    dp.backward(loss, k, par.micro_steps);
  }
  // The norm from fixed blocks of the summed gradients: the same on any rank count, sharded or
  // not (NOTE [data parallel] 9).
  if (grad_clip > 0.0f) dp.clip_grad_norm(grad_clip);
  update();
  optim::zero_grad(params);
  return static_cast<float>(comm.sum_in_rank_order(losses) / static_cast<double>(par.micro_batches()));
}

}  // namespace train
}  // namespace remat
