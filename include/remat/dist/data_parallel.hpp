#pragma once
// SPDX-License-Identifier: MIT
// remat::dist::DataParallel: data-parallel training of any model on the tape. Every rank holds
// the whole model and runs its own micro-batch; the gradients are summed over ranks in buckets
// while backward still runs, each bucket as soon as all its gradients are final.
//
//   remat::dist::MpiComm comm(&argc, &argv);                  // or LocalComm, one process
//   remat::dist::DataParallel<Cpu> dp(tape, model.named_parameters(), comm);
//   for (int k = 0; k < micro_steps; ++k) {                     // gradient accumulation
//     auto loss = model.loss(x[k], y[k]);                       // this rank's micro-batch k
//     dp.backward(loss, k, micro_steps);                        // reduces on the last one
//   }
//   optimizer.step(); optimizer.zero_grad();
//
// NOTE [data parallel]
// 1. Construction checks that every rank has the same parameters (count, names, shapes; one
//    clear error on every rank, never a hang) and copies rank 0's values to all.
// 2. Readiness is counted, not guessed: forward counts each parameter's uses (NOTE [gradient
//    contributions] in core/tape.hpp, checkpoint first runs included), backward counts its
//    contributions; a parameter is final when they meet. Weight tying, checkpoint replays and
//    planned schedules need nothing special. A contribution after that point is an error (it
//    would be lost), never silent; uses that never contribute (a branch that does not reach the
//    loss) only delay their bucket to the end of backward. A backward consumes the counts of the
//    forward passes since the last one: run each micro-step's forward, then its backward.
// 3. Buckets: parameters in the order their gradients become final (reverse of their first use
//    in forward), cut at bucket_bytes (the first at first_bucket_bytes), as PyTorch DDP's 25 MiB /
//    1 MiB. Every rank launches its buckets in index order: a bucket that is ready early waits
//    for those before it. The ranks check they agree on the plan whenever it is (re)built.
// 4. Non-blocking: a bucket's sum is issued from inside backward and advanced after every backward
//    node (Open MPI progresses only inside MPI calls).
// 5. Scale: backward seeds the loss with 1 / (micro_steps x ranks), so the sum over ranks and
//    micro-steps is the mean over the global batch with nothing divided afterwards.
// 6. Bitwise (Order::fixed, the default): each micro-step's gradients go to fresh buffers, kept
//    aside by DataParallel until the last micro-step (the parameters show no gradient in between)
//    and summed with the ranks' in one canonical pairwise order (NOTE [reduction order]): N ranks
//    of M micro-steps (M a power of two, or 1) give bitwise the gradients of one process doing
//    N x M micro-steps of the same micro-batch, when each micro-batch draws the same dropout
//    masks (stream_seed()). A gradient already in a parameter when micro-step 0 starts counts as
//    an earlier micro-step (zero_grad() first for a fresh sum). A different micro-batch size
//    changes the sums inside the matrix products: close, not bitwise; for bits independent of
//    it too, run one sequence per micro-step (an application's choice: NOTE
//    [batch-invariant] in examples/train_gpt/trainer.hpp).
// 7. An exception inside a data-parallel step leaves the other ranks waiting in a collective:
//    end the job (Comm::abort(); MpiComm's destructor does it when an exception unwinds).
// 8. ZeRO-1 (DataParallelOptions::shard_optimizer; remat/dist/sharded_adamw.hpp): each bucket is
//    cut into one chunk per rank (whole blocks of kBlock floats); a bucket's sum is reduce-
//    scattered instead of all-reduced, so a rank ends backward with the summed gradient of its
//    chunk only (the parameters' full gradients are dropped once packed), updates that chunk of
//    the parameters with its shard of the optimizer state, and all-gathers the parameters. The
//    sums are the all-reduce's, element by element, so the training is bitwise the unsharded one.
// 9. grad_norm() / clip_grad_norm(): the global norm from partial sums over blocks of kBlock
//    floats of each bucket, added in bucket and block order: the same number whether the
//    gradients are whole (every rank) or sharded (each rank its blocks), on any rank count.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "remat/core/tape.hpp"
#include "remat/dist/comm.hpp"

namespace remat {
namespace dist {

struct DataParallelOptions {
  std::size_t bucket_bytes = std::size_t(25) << 20;      // PyTorch DDP's bucket_cap_mb
  std::size_t first_bucket_bytes = std::size_t(1) << 20;  // a small first bucket starts early
  Order order = Order::fixed;                              // NOTE [reduction order]
  bool broadcast_parameters = true;                        // rank 0's values to every rank
  bool shard_optimizer = false;                            // ZeRO-1 (NOTE [data parallel] 8)
};

/// What the last reducing backward did.
struct ReduceStats {
  struct Event {
    enum Kind { launch, done } kind;
    int bucket;
    std::int64_t node;  // backward nodes run before it (nodes_total: after backward)
  };
  int buckets = 0;
  int launched_in_backward = 0;  // buckets issued before backward ended (the overlap)
  std::int64_t nodes_total = 0;  // backward nodes in that step
  double backward_s = 0.0;       // tape backward, issuing and packing included
  double pack_s = 0.0;           // copying gradients into and out of buckets
  double exposed_s = 0.0;        // waiting for sums after backward: communication not hidden
  std::size_t bytes = 0;         // gradient bytes summed per rank
  std::vector<Event> log;
};

/// A seed for micro-batch `index` of the global batch of `step`, the same on every rank count,
/// so that dropout draws the same masks whichever rank (or micro-step) runs that micro-batch:
/// tape.set_seed(stream_seed(seed, step, index)); tape.set_rng_offset(0).
inline std::uint64_t stream_seed(std::uint64_t seed, std::int64_t step, std::int64_t index) {
  auto mix = [](std::uint64_t z) {  // splitmix64's finalizer
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  return mix(mix(seed + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(step + 1)) +
             static_cast<std::uint64_t>(index));
}

template <class B>
class DataParallel final : public GradObserver<B> {
 public:
  using Named = std::vector<std::pair<std::string, Tensor<B>>>;
  /// The block of the norm's partial sums and of ZeRO-1's chunks (NOTE [data parallel] 8, 9).
  static constexpr std::size_t kBlock = 1024;

  DataParallel(Tape<B>& tape, Named params, Comm& comm, DataParallelOptions opt = {})
      : tape_(tape), comm_(comm), opt_(opt) {
    REMAT_CHECK(!params.empty(), "remat::dist::DataParallel: no parameters (expected the "
                "model's named_parameters())");
    REMAT_CHECK(opt.bucket_bytes >= 4 && opt.first_bucket_bytes >= 4,
                "remat::dist::DataParallel: bucket sizes ", opt.first_bucket_bytes, " and ",
                opt.bucket_bytes, " bytes (expected at least one float each)");
    for (auto& [name, t] : params) {
      REMAT_CHECK(t.defined() && t.is_leaf() && t.requires_grad() && t.dtype() == DType::f32 &&
                      &t.tape() == &tape,
                  "remat::dist::DataParallel: parameter '", name, "' is not an f32 leaf that "
                  "requires grad on this tape (expected the model's parameters)");
      Param p;
      p.name = name;
      p.t = t;
      index_.emplace(t.impl(), params_.size());
      params_.push_back(std::move(p));
    }
    REMAT_CHECK(index_.size() == params_.size(), "remat::dist::DataParallel: a parameter is "
                "listed twice (expected each once)");
    check_ranks_agree();
    if (opt.broadcast_parameters && comm_.size() > 1)
      for (auto& p : params_) comm_.broadcast(p.t.template mutable_data<float>(), p.t.bytes(), 0);
    tape_.set_grad_observer(this);
  }
  DataParallel(Tape<B>& tape, const std::vector<Tensor<B>>& params, Comm& comm,
               DataParallelOptions opt = {})
      : DataParallel(tape, name_them(params), comm, opt) {}
  ~DataParallel() override {
    if (tape_.grad_observer() == this) tape_.set_grad_observer(nullptr);
  }
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  /// Backward of micro-step k of `micro_steps` on this rank: the gradients of this micro-batch
  /// are added to the parameters' gradients; on the last micro-step they are then summed over
  /// ranks, so every rank ends with the gradient of the mean loss over the global batch
  /// (NOTE [data parallel] 5).
  void backward(const Tensor<B>& loss, int micro_step = 0, int micro_steps = 1) {
    REMAT_CHECK(micro_steps >= 1 && micro_step >= 0 && micro_step < micro_steps,
                "remat::dist::DataParallel::backward: micro-step ", micro_step, " of ",
                micro_steps, " (expected 0 <= micro_step < micro_steps)");
    REMAT_CHECK(loss.defined() && loss.numel() == 1, "remat::dist::DataParallel::backward: "
                "expected a scalar loss (the mean over this micro-batch)");
    const bool last = micro_step == micro_steps - 1;
    try {
      // Fresh gradient buffers for this micro-step; what was there joins the sum
      // (NOTE [data parallel] 6).
      by_grad_.clear();
      for (std::size_t i = 0; i < params_.size(); ++i) {
        Param& p = params_[i];
        if (micro_step == 0 && p.acc.count() > 0) p.acc.clear();  // an abandoned accumulation
        if (p.t.impl()->grad) p.acc.push(std::move(p.t.impl()->grad), add_);
        p.t.impl()->grad = nullptr;
        tape_.leaf_grad(p.t.impl_ptr());
        by_grad_.emplace(p.t.impl()->grad.get(), i);
        p.remaining = p.uses;
      }
      reducing_ = last;
      if (last) start_reduction();
      const float s = 1.0f / static_cast<float>(static_cast<std::int64_t>(micro_steps) *
                                                comm_.size());
      Tensor<B> seed = tape_.input(loss.shape(), std::vector<float>(1, s));
      const auto t0 = now();
      tape_.backward(loss, seed);
      if (last) {
        for (std::size_t b = next_launch_; b < buckets_.size(); ++b) launch(b);  // the rest
        stats_.backward_s = now() - t0;
        finish_reduction();
      } else {  // keep this micro-step's gradients aside until the last one
        for (auto& p : params_) {
          p.acc.push(std::move(p.t.impl()->grad), add_);
          p.t.impl()->grad = nullptr;
        }
      }
    } catch (...) {
      reducing_ = false;
      for (auto& bk : buckets_) {
        if (bk.request && !bk.done)  // MPI may still write into them: keep them (NOTE 7)
          abandoned_.emplace_back(std::move(bk.buf), std::move(bk.request));
        bk.buf.reset();
        bk.request.reset();
        bk.done = false;
      }
      for (auto& p : params_) p.uses = 0, p.first_use = -1, p.acc.clear();
      uses_seen_ = 0;
      throw;
    }
    for (auto& p : params_) p.uses = 0, p.first_use = -1;
    uses_seen_ = 0;
  }

  const ReduceStats& stats() const noexcept { return stats_; }
  int buckets() const noexcept { return static_cast<int>(buckets_.size()); }
  /// The parameters of bucket b, in the order their gradients become final.
  std::vector<std::string> bucket_names(int b) const {
    std::vector<std::string> out;
    for (std::size_t i : buckets_.at(static_cast<std::size_t>(b)).params) out.push_back(params_[i].name);
    return out;
  }
  Comm& comm() noexcept { return comm_; }
  const DataParallelOptions& options() const noexcept { return opt_; }

  /// The global L2 norm of the summed gradients (NOTE [data parallel] 9); after backward().
  float grad_norm() {
    std::vector<double> part = block_partials();
    if (opt_.shard_optimizer && comm_.size() > 1) {  // every rank's blocks, put in order
      std::vector<std::uint64_t> mine(part.size());
      std::memcpy(mine.data(), part.data(), part.size() * 8);
      const auto all = comm_.all_gather_u64(mine);
      const std::size_t N = static_cast<std::size_t>(comm_.size());
      part.clear();
      std::size_t at = 0;  // offset of a bucket's blocks within one rank's list
      for (const auto& bk : buckets_) {
        const std::size_t nb = bk.chunk / kBlock;
        for (std::size_t q = 0; q < N; ++q)
          for (std::size_t j = 0; j < nb; ++j) {
            double v;
            std::memcpy(&v, &all[q * mine.size() + at + j], 8);
            part.push_back(v);
          }
        at += nb;
      }
    }
    double total = 0.0;
    for (double v : part) total += v;
    return static_cast<float>(std::sqrt(total));
  }
  /// Scales the summed gradients so that their global norm is at most max_norm (as
  /// optim::clip_grad_norm, with grad_norm()'s norm). Returns the norm before clipping.
  float clip_grad_norm(float max_norm) {
    REMAT_CHECK(max_norm > 0.0f, "remat::dist::DataParallel::clip_grad_norm: max_norm is ",
                max_norm, " (expected > 0)");
    const float norm = grad_norm();
    const float factor = max_norm / (norm + 1e-6f);
    if (factor < 1.0f) {
      if (opt_.shard_optimizer) {
        for (auto& bk : buckets_)
          if (bk.shard) B::scale(static_cast<float*>(bk.shard->data()), static_cast<std::int64_t>(bk.chunk), factor);
      } else {
        for (auto& p : params_)
          if (p.t.impl()->grad) B::scale(static_cast<float*>(p.t.impl()->grad->data()), p.t.numel(), factor);
      }
    }
    return norm;
  }

  // ---- the layout ZeRO-1's optimizer works on (remat/dist/sharded_adamw.hpp) ---------------
  /// One parameter's part of a bucket's flat layout: floats [offset, offset + numel).
  struct Piece {
    Tensor<B> param;
    std::size_t offset, numel;
  };
  std::size_t bucket_chunk(int b) const { return buckets_.at(static_cast<std::size_t>(b)).chunk; }
  /// Counts the bucket plans made so far: a layout kept elsewhere (ZeRO-1's moments) is stale
  /// when it changed.
  int plan_version() const noexcept { return plan_version_; }
  std::size_t bucket_numel(int b) const { return buckets_.at(static_cast<std::size_t>(b)).numel; }
  std::vector<Piece> bucket_pieces(int b) const {
    std::vector<Piece> out;
    for (std::size_t i : buckets_.at(static_cast<std::size_t>(b)).params)
      out.push_back({params_[i].t, params_[i].offset, static_cast<std::size_t>(params_[i].t.numel())});
    return out;
  }
  /// ZeRO-1: the summed gradient of this rank's chunk of bucket b (chunk floats), or nullptr
  /// before the first reducing backward.
  float* shard_grad(int b) {
    auto& bk = buckets_.at(static_cast<std::size_t>(b));
    return bk.shard ? static_cast<float*>(bk.shard->data()) : nullptr;
  }

  // ---- GradObserver (NOTE [gradient contributions]) -------------------------------------
  void used(const TensorImpl<B>& leaf) override {
    auto it = index_.find(&leaf);
    if (it == index_.end()) return;
    Param& p = params_[it->second];
    if (p.first_use < 0) p.first_use = uses_seen_;
    ++uses_seen_;
    ++p.uses;
  }
  void contributed(const Storage<B>* grad) override {
    if (!reducing_) return;
    auto it = by_grad_.find(grad);
    if (it == by_grad_.end()) return;
    Param& p = params_[it->second];
    REMAT_CHECK(p.remaining > 0, "remat::dist::DataParallel: parameter '", p.name,
                "' received a gradient after its ", p.uses, " counted contributions; its "
                "bucket may already be summed, so this part would be lost. The forward pass "
                "missed a use (an op that takes the parameter outside remat's ops?); please "
                "report it with the model");
    if (--p.remaining == 0) --buckets_[p.bucket].waiting;
  }
  void node_done() override {
    if (!reducing_) return;
    ++stats_.nodes_total;
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].waiting == 0) {
      ++stats_.launched_in_backward;
      launch(next_launch_);
    }
    for (std::size_t b = 0; b < next_launch_; ++b) poll(b);
  }

 private:
  struct Param {
    std::string name;
    Tensor<B> t;
    std::int64_t uses = 0;        // forward uses since the last backward
    std::int64_t first_use = -1;  // position of the first of them
    std::int64_t remaining = 0;   // contributions still to come in this backward
    PairwiseSum<std::shared_ptr<Storage<B>>> acc;  // earlier micro-steps' gradients
    std::size_t bucket = 0;
    std::size_t offset = 0;  // floats into the bucket
  };
  struct Bucket {
    std::vector<std::size_t> params;
    std::size_t numel = 0;
    std::size_t waiting = 0;  // parameters not final yet
    std::size_t chunk = 0;  // floats per rank: whole kBlocks, size() of them cover numel
    std::shared_ptr<Storage<B>> buf;
    std::shared_ptr<Storage<B>> shard;  // ZeRO-1: the sum of this rank's chunk
    std::unique_ptr<Request> request;
    bool done = false;
  };

  static Named name_them(const std::vector<Tensor<B>>& ps) {
    Named out;
    for (std::size_t i = 0; i < ps.size(); ++i) out.emplace_back("parameter " + std::to_string(i), ps[i]);
    return out;
  }
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  /// NOTE [data parallel] 1: one error, the same on every rank, naming the first difference.
  void check_ranks_agree() {
    std::uint64_t total = 0;
    for (auto& p : params_) total += static_cast<std::uint64_t>(p.t.numel());
    const auto head = comm_.all_gather_u64({params_.size(), total});
    for (int r = 1; r < comm_.size(); ++r)
      REMAT_CHECK(head[2 * r] == head[0] && head[2 * r + 1] == head[1],
                  "remat::dist::DataParallel: rank ", r, " has ", head[2 * r], " parameters (",
                  head[2 * r + 1], " values), rank 0 has ", head[0], " (", head[1],
                  " values); every rank must build the same model (same config)");
    std::vector<std::uint64_t> mine;
    for (auto& p : params_)
      mine.push_back(remat::detail::hash_mix(remat::detail::hash_bytes(p.name),
                                             remat::detail::hash_bytes(p.t.shape().str())));
    const auto all = comm_.all_gather_u64(mine);
    const std::size_t n = params_.size();
    for (int r = 1; r < comm_.size(); ++r)
      for (std::size_t i = 0; i < n; ++i)
        REMAT_CHECK(all[r * n + i] == all[i], "remat::dist::DataParallel: parameter ", i, " ('",
                    params_[i].name, "' ", params_[i].t.shape().str(), " on rank ", comm_.rank(),
                    ") has another name or shape on rank ", r, " than on rank 0; every rank "
                    "must build the same model (same config)");
  }

  /// NOTE [data parallel] 3: (re)builds the buckets when the order of first uses changed.
  void plan_buckets() {
    std::vector<std::size_t> order(params_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    // Final first: the later a parameter's first use in forward, the earlier its last
    // contribution in backward. Unused ones (first_use -1) are final at once; they go last.
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return params_[a].first_use > params_[b].first_use;
    });
    if (order == order_ && !buckets_.empty()) return;
    order_ = order;
    ++plan_version_;
    buckets_.clear();
    Bucket cur;
    std::size_t cap = opt_.first_bucket_bytes / 4;
    for (std::size_t i : order) {
      const std::size_t n = static_cast<std::size_t>(params_[i].t.numel());
      if (!cur.params.empty() && cur.numel + n > cap) {
        buckets_.push_back(std::move(cur));
        cur = Bucket{};
        cap = opt_.bucket_bytes / 4;
      }
      params_[i].bucket = buckets_.size();
      params_[i].offset = cur.numel;
      cur.params.push_back(i);
      cur.numel += n;
    }
    buckets_.push_back(std::move(cur));
    const std::size_t per = kBlock * static_cast<std::size_t>(comm_.size());
    for (auto& bk : buckets_) bk.chunk = (bk.numel + per - 1) / per * kBlock;
    std::uint64_t h = remat::detail::kHashSeed;
    for (std::size_t i : order_) h = remat::detail::hash_mix(h, i);
    for (const auto& bk : buckets_) h = remat::detail::hash_mix(h, bk.numel);
    const auto all = comm_.all_gather_u64({h});
    for (int r = 1; r < comm_.size(); ++r)
      REMAT_CHECK(all[static_cast<std::size_t>(r)] == all[0], "remat::dist::DataParallel: rank ",
                  r, " orders its gradients differently from rank 0 (its forward used the "
                  "parameters in another order: different models or checkpoint plans?); every "
                  "rank must run the same forward");
  }

  void start_reduction() {
    plan_buckets();
    stats_ = ReduceStats{};
    stats_.buckets = static_cast<int>(buckets_.size());
    for (auto& bk : buckets_) {
      bk.waiting = 0;
      bk.buf.reset();
      bk.shard.reset();
      bk.request.reset();
      bk.done = false;
    }
    for (auto& p : params_)
      if (p.remaining > 0) ++buckets_[p.bucket].waiting;
    next_launch_ = 0;
  }

  /// Partial sums of squares of the summed gradients, per kBlock floats of each bucket's layout,
  /// in bucket and block order; each block the sum over the parameter pieces in it of their
  /// sums of squares (all pieces' in one B::sum_squares_many). Whole gradients: every block;
  /// ZeRO-1: this rank's chunk's blocks.
  std::vector<double> block_partials() const {
    std::vector<const float*> xs;   // the pieces, block after block
    std::vector<std::int64_t> ns;
    std::vector<std::size_t> ends;  // one past each block's last piece

    const std::size_t r = static_cast<std::size_t>(comm_.rank());
    for (const auto& bk : buckets_) {
      const bool shard = opt_.shard_optimizer;
      REMAT_CHECK(!shard || bk.shard, "remat::dist::DataParallel::grad_norm: no summed gradient "
                  "yet (expected a call after the last micro-step's backward)");
      const std::size_t lo = shard ? r * bk.chunk : 0;
      const std::size_t hi = shard ? lo + bk.chunk : bk.chunk * static_cast<std::size_t>(comm_.size());
      for (std::size_t b0 = lo; b0 < hi; b0 += kBlock) {
        for (std::size_t i : bk.params) {
          const Param& p = params_[i];
          const std::size_t s = std::max(b0, p.offset);
          const std::size_t e = std::min(b0 + kBlock, p.offset + static_cast<std::size_t>(p.t.numel()));
          if (s >= e) continue;
          REMAT_CHECK(shard || p.t.impl()->grad, "remat::dist::DataParallel::grad_norm: parameter '",
                      p.name, "' has no gradient (expected a call after backward())");
          const float* g = shard ? static_cast<const float*>(bk.shard->data()) + (s - lo)
                                 : static_cast<const float*>(p.t.impl()->grad->data()) + (s - p.offset);
          xs.push_back(g);
          ns.push_back(static_cast<std::int64_t>(e - s));
        }
        ends.push_back(xs.size());
      }
    }
    std::vector<double> sums(xs.size());
    if (!xs.empty()) B::sum_squares_many(sums.data(), xs.data(), ns.data(), xs.size());
    std::vector<double> out;
    out.reserve(ends.size());
    std::size_t k = 0;
    for (std::size_t end : ends) {
      double part = 0.0;
      for (; k < end; ++k) part += sums[k];
      out.push_back(part);
    }
    return out;
  }

  /// The parameter's gradient becomes the sum of its micro-steps' (NOTE [data parallel] 6).
  /// Its buffer changes during backward, and contributed() knows buffers by address: the old
  /// one's entry goes (freed, its address may come back as another leaf's buffer, which must
  /// not count as this parameter's) and the new one's comes (a late contribution is still
  /// refused).
  void combine(Param& p, std::size_t i) {
    if (p.acc.empty()) return;
    by_grad_.erase(p.t.impl()->grad.get());
    p.acc.push(std::move(p.t.impl()->grad), add_);
    p.t.impl()->grad = p.acc.finish(add_);
    by_grad_[p.t.impl()->grad.get()] = i;
  }

  /// Packs bucket b's final gradients and issues their sum (in index order: NOTE 3).
  void launch(std::size_t b) {
    REMAT_ASSERT(b == next_launch_);
    const auto t0 = now();
    Bucket& bk = buckets_[b];
    const bool shard = opt_.shard_optimizer;
    const std::size_t n = shard ? bk.chunk * static_cast<std::size_t>(comm_.size()) : bk.numel;
    bk.buf = std::make_shared<Storage<B>>(n * 4, Category::gradients);
    float* dst = static_cast<float*>(bk.buf->data());
    if (n > bk.numel) B::fill(dst + bk.numel, static_cast<std::int64_t>(n - bk.numel), 0.0f);
    for (std::size_t i : bk.params) {
      Param& p = params_[i];
      combine(p, i);
      B::copy(dst + p.offset, p.t.impl()->grad->data(), p.t.bytes());
      if (shard) {  // ZeRO-1: only the chunk's sum is kept (the freed buffer's entry goes too)
        by_grad_.erase(p.t.impl()->grad.get());
        p.t.impl()->grad = nullptr;
      }
    }
    stats_.pack_s += now() - t0;
    stats_.bytes += bk.numel * 4;
    stats_.log.push_back({ReduceStats::Event::launch, static_cast<int>(b), stats_.nodes_total});
    if (shard) {
      bk.shard = std::make_shared<Storage<B>>(bk.chunk * 4, Category::gradients);
      bk.request = comm_.reduce_scatter_sum(dst, static_cast<float*>(bk.shard->data()), bk.chunk,
                                            opt_.order);
    } else {
      bk.request = comm_.allreduce_sum(dst, bk.numel, opt_.order);
    }
    ++next_launch_;
    poll(b);
  }
  void poll(std::size_t b) {
    Bucket& bk = buckets_[b];
    if (bk.done || !bk.request) return;
    if (bk.request->test()) {
      bk.done = true;
      stats_.log.push_back({ReduceStats::Event::done, static_cast<int>(b), stats_.nodes_total});
    }
  }
  /// After backward: waits for the sums in order and copies them into the gradients.
  void finish_reduction() {
    reducing_ = false;
    const auto t0 = now();
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      Bucket& bk = buckets_[b];
      if (!bk.done) {
        bk.request->wait();
        bk.done = true;
        stats_.log.push_back({ReduceStats::Event::done, static_cast<int>(b), stats_.nodes_total});
      }
    }
    stats_.exposed_s = now() - t0;
    const auto t1 = now();
    for (auto& bk : buckets_) {
      if (opt_.shard_optimizer) {  // the chunk's sum is in bk.shard; no full gradient
        bk.buf.reset();
        bk.request.reset();
        continue;
      }
      const float* src = static_cast<const float*>(bk.buf->data());
      for (std::size_t i : bk.params) {
        Param& p = params_[i];
        B::copy(p.t.impl()->grad->data(), src + p.offset, p.t.bytes());
      }
      bk.buf.reset();
      bk.request.reset();
    }
    stats_.pack_s += now() - t1;
  }

  /// a += b on two gradient buffers of one parameter.
  struct AddGrads {
    std::shared_ptr<Storage<B>> operator()(std::shared_ptr<Storage<B>>& a,
                                           std::shared_ptr<Storage<B>>& b) const {
      B::add_into(static_cast<float*>(a->data()), static_cast<const float*>(b->data()),
                  static_cast<std::int64_t>(a->bytes() / 4));
      return a;
    }
  };

  Tape<B>& tape_;
  Comm& comm_;
  DataParallelOptions opt_;
  AddGrads add_;
  std::vector<Param> params_;
  std::unordered_map<const TensorImpl<B>*, std::size_t> index_;
  std::unordered_map<const Storage<B>*, std::size_t> by_grad_;
  std::vector<std::size_t> order_;
  std::vector<Bucket> buckets_;
  // Sums an exception left in flight, with their buffers (NOTE 7).
  std::vector<std::pair<std::shared_ptr<Storage<B>>, std::unique_ptr<Request>>> abandoned_;
  std::size_t next_launch_ = 0;
  int plan_version_ = 0;
  std::int64_t uses_seen_ = 0;
  bool reducing_ = false;
  ReduceStats stats_;
};

}  // namespace dist
}  // namespace remat
