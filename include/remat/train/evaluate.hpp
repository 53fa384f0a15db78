#pragma once
// SPDX-License-Identifier: MIT
// Validation loss for any model: the mean loss over a fixed set of batches of held-out tokens,
// computed with gradients off, the same number on any count of data-parallel ranks.
//
//   train::ValidationSet val(tokens, /*batch=*/8, /*seq=*/256, /*batches=*/20);
//   double v = train::evaluate(comm, val, [&](const auto& x, const auto& y) {
//     return model.loss(tape.tokens({8, 256}, x), tape.tokens({8, 256}, y), false).item();
//   });

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "remat/core/error.hpp"
#include "remat/core/grad_mode.hpp"
#include "remat/dist/comm.hpp"

namespace remat {
namespace train {

// NOTE [validation loss]
// 1. The batches are fixed: batch k of a ValidationSet is tokens [k B T, (k + 1) B T + 1),
//    inputs the first B T and targets the B T after the first, as llm.c's loader takes batches
//    from the start of its validation file. Every evaluation sees the same batches, so its
//    values can be compared along the run (and between runs).
// 2. The loss of a batch is computed under NoGrad: nothing is recorded on the tape, nothing is
//    saved for backward, no gradient is touched, and a checkpointed model runs its blocks as
//    plain calls (checkpoint() under NoGrad). The caller's loss function runs the model in
//    evaluation mode (no dropout), so no random numbers are drawn either: the training that
//    follows is bit for bit that of a run without evaluations.
// 3. The value is the mean of the batches' losses, summed in the order of k, as doubles. Under
//    data parallel each rank computes a contiguous share of the batches (share_of); the ranks
//    gather every loss and sum them in rank order, which is the order of k (a rank with one
//    batch fewer pads its list with 0.0, and adding 0.0 changes no sum). With the same weights
//    and the same batch shapes, every rank count gives the same double as one process.

/// A fixed set of validation batches of `batch` sequences of `seq` tokens (NOTE [validation
/// loss] 1).
class ValidationSet {
 public:
  /// How many whole batches `tokens` tokens hold: batch k needs k B T + B T + 1 of them.
  static std::int64_t available(std::int64_t tokens, std::int64_t batch, std::int64_t seq) {
    if (tokens < 1 || batch < 1 || seq < 1) return 0;
    return (tokens - 1) / (batch * seq);
  }

  /// The first `batches` batches of `tokens`; they must be there (available() says how many).
  ValidationSet(std::vector<std::int32_t> tokens, std::int64_t batch, std::int64_t seq,
                std::int64_t batches)
      : tokens_(std::move(tokens)), batch_(batch), seq_(seq), batches_(batches) {
    REMAT_CHECK(batch > 0 && seq > 0 && batches > 0, "remat::train::ValidationSet: batch ", batch,
                ", seq ", seq, ", batches ", batches, " (expected all three > 0)");
    const std::int64_t have = available(static_cast<std::int64_t>(tokens_.size()), batch, seq);
    REMAT_CHECK(batches <= have, "remat::train::ValidationSet: ", tokens_.size(), " tokens hold ",
                have, " batch(es) of ", batch, " x ", seq, ", fewer than the ", batches,
                " asked for (expected at least batches x batch x seq + 1 = ",
                batches * batch * seq + 1, " tokens, or fewer batches)");
  }

  std::int64_t batches() const noexcept { return batches_; }
  std::int64_t batch() const noexcept { return batch_; }
  std::int64_t seq() const noexcept { return seq_; }

  /// Fills x (the inputs) and y (the targets), batch x seq tokens each, with batch k.
  void get(std::int64_t k, std::vector<std::int32_t>& x, std::vector<std::int32_t>& y) const {
    REMAT_CHECK(k >= 0 && k < batches_, "remat::train::ValidationSet::get: batch ", k,
                " of ", batches_, " (expected 0 <= k < batches)");
    const std::int64_t n = batch_ * seq_, at = k * n;
    x.assign(tokens_.begin() + at, tokens_.begin() + at + n);
    y.assign(tokens_.begin() + at + 1, tokens_.begin() + at + n + 1);
  }

 private:
  std::vector<std::int32_t> tokens_;
  std::int64_t batch_, seq_, batches_;
};

/// The batches [begin, end) that one rank evaluates.
struct Share {
  std::int64_t begin = 0, end = 0;
};

/// Rank `rank` of `ranks`'s share of `count` batches: contiguous, in rank order, the first
/// count % ranks ranks taking one batch more than the others.
inline Share share_of(std::int64_t count, int rank, int ranks) {
  REMAT_CHECK(count >= 0 && ranks > 0 && rank >= 0 && rank < ranks, "remat::train::share_of: ",
              count, " batches, rank ", rank, " of ", ranks,
              " (expected count >= 0 and 0 <= rank < ranks)");
  const std::int64_t base = count / ranks, extra = count % ranks;
  const std::int64_t begin = rank * base + std::min<std::int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

/// The mean of loss_of(k) (a double: batch k's mean loss) over k in [0, count), computed as
/// NOTE [validation loss] 2 and 3 say: under NoGrad, each rank its share, the sum in the order
/// of k. The same double on every rank. Every rank must call it (a collective).
template <class LossOf>
double mean_loss(dist::Comm& comm, std::int64_t count, LossOf&& loss_of) {
  REMAT_CHECK(count > 0, "remat::train::mean_loss: ", count, " batches (expected at least 1)");
  const Share mine = share_of(count, comm.rank(), comm.size());
  const std::int64_t most = (count + comm.size() - 1) / comm.size();  // the longest share
  std::vector<double> losses;
  losses.reserve(static_cast<std::size_t>(most));
  {
    NoGrad no_grad;
    for (std::int64_t k = mine.begin; k < mine.end; ++k)
      losses.push_back(static_cast<double>(loss_of(k)));
  }
  losses.resize(static_cast<std::size_t>(most), 0.0);  // the gather wants equal lengths
  return comm.sum_in_rank_order(losses) / static_cast<double>(count);
}

/// The validation loss of `set`: mean_loss over its batches, with loss_of(x, y) the mean loss
/// of the batch whose inputs are x and targets y (batch() x seq() tokens each). Every rank must
/// call it.
template <class LossOf>
double evaluate(dist::Comm& comm, const ValidationSet& set, LossOf&& loss_of) {
  std::vector<std::int32_t> x, y;
  return mean_loss(comm, set.batches(), [&](std::int64_t k) {
    set.get(k, x, y);
    return loss_of(x, y);
  });
}

}  // namespace train
}  // namespace remat
