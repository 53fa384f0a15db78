#pragma once
// SPDX-License-Identifier: MIT
// remat::dist::ShardedAdamW: ZeRO-1's AdamW (NOTE [data parallel] 8). Each rank keeps the first
// and second moments of its chunk of every bucket only (8 bytes x chunk: the optimizer state
// divided by the rank count, up to a block of padding per bucket), updates that chunk of the
// parameters from its summed gradient, then all-gathers the parameters. The update is
// optim::AdamW's, element by element (the same B::adamw_update on the same values), so the
// parameters are bitwise those of DataParallel without sharding plus optim::AdamW.
//
//   dist::DataParallelOptions o; o.shard_optimizer = true;
//   dist::DataParallel<Cpu> dp(tape, model.named_parameters(), comm, o);
//   dist::ShardedAdamW<Cpu> opt(dp, {lr, 0.9f, 0.999f, 1e-8f, wd});
//   dp.backward(loss); dp.clip_grad_norm(1.0f); opt.step();

#include <cmath>
#include <memory>
#include <vector>

#include "remat/dist/data_parallel.hpp"
#include "remat/optim/adamw.hpp"

namespace remat {
namespace dist {

template <class B>
class ShardedAdamW {
 public:
  ShardedAdamW(DataParallel<B>& dp, optim::AdamWOptions o) : dp_(dp), opt_(o) {
    REMAT_CHECK(dp.options().shard_optimizer, "remat::dist::ShardedAdamW: the DataParallel "
                "does not shard (expected DataParallelOptions::shard_optimizer = true)");
    optim::AdamW<B> check({}, o);  // the same option checks as AdamW
    (void)check;
  }

  /// One update of this rank's chunks, then the parameters gathered from every rank. Needs a
  /// reducing backward first (collective: every rank calls it).
  void step() {
    const int nb = dp_.buckets();
    REMAT_CHECK(nb > 0, "remat::dist::ShardedAdamW::step: no gradient yet (expected a call "
                "after DataParallel::backward)");
    const std::size_t r = static_cast<std::size_t>(dp_.comm().rank());
    const std::size_t N = static_cast<std::size_t>(dp_.comm().size());
    if (pending_) {  // a resumed state (resume_from)
      scatter_from(*pending_);
      pending_.reset();
    }
    if (m_.empty()) allocate();  // moments first, as AdamW
    REMAT_CHECK(plan_ == dp_.plan_version(), "remat::dist::ShardedAdamW::step: the gradient "
                "buckets were re-planned (the forward pass uses the parameters in another order) "
                "after the moments were laid out on them; the sharded state no longer fits");
    ++t_;
    const float bc1 = 1.0f - std::pow(opt_.beta1, static_cast<float>(t_));
    const float bc2 = 1.0f - std::pow(opt_.beta2, static_cast<float>(t_));
    // Bucket b's all-gather runs while bucket b + 1 is updated; at most kInFlight gathered
    // copies exist at once (temporaries of kInFlight buckets, not of every parameter).
    constexpr int kInFlight = 2;
    std::vector<std::unique_ptr<Storage<B>>> gathered(static_cast<std::size_t>(nb));
    std::vector<std::unique_ptr<Request>> reqs(static_cast<std::size_t>(nb));
    auto finish = [&](int b) {  // bucket b's every-rank chunks back into the parameters
      const auto i = static_cast<std::size_t>(b);
      reqs[i]->wait();
      const float* all = static_cast<const float*>(gathered[i]->data());
      for (const auto& pc : dp_.bucket_pieces(b))
        B::copy(pc.param.template mutable_data<float>(), all + pc.offset, pc.numel * 4);
      gathered[i].reset();
      reqs[i].reset();
    };
    for (int b = 0; b < nb; ++b) {
      const std::size_t c = dp_.bucket_chunk(b), lo = r * c, hi = lo + c;
      const float* g = dp_.shard_grad(b);
      REMAT_CHECK(g != nullptr, "remat::dist::ShardedAdamW::step: bucket ", b, " has no summed "
                  "gradient (expected a call after DataParallel::backward's last micro-step)");
      if (b >= kInFlight) finish(b - kInFlight);
      float* m = static_cast<float*>(m_[static_cast<std::size_t>(b)]->data());
      float* v = static_cast<float*>(v_[static_cast<std::size_t>(b)]->data());
      auto buf = std::make_unique<Storage<B>>(c * N * 4, Category::temporaries);
      float* all = static_cast<float*>(buf->data());
      for (const auto& pc : dp_.bucket_pieces(b)) {  // this rank's part of each parameter
        const std::size_t s = std::max(lo, pc.offset), e = std::min(hi, pc.offset + pc.numel);
        if (s >= e) continue;
        float* p = pc.param.template data<float>() + (s - pc.offset);
        B::adamw_update(p, g + (s - lo), m + (s - lo), v + (s - lo), static_cast<std::int64_t>(e - s),
                        opt_.lr, opt_.beta1, opt_.beta2, opt_.eps,
                        optim::decays(opt_.decay_on, pc.param.shape()) ? opt_.weight_decay : 0.0f,
                        bc1, bc2);
        B::copy(all + s, p, (e - s) * 4);
      }
      reqs[static_cast<std::size_t>(b)] = dp_.comm().all_gather(all + lo, all, c);
      gathered[static_cast<std::size_t>(b)] = std::move(buf);
    }
    for (int b = std::max(0, nb - kInFlight); b < nb; ++b) finish(b);
  }

  /// Collective: every rank's moments into `full`'s (an optim::AdamW over the same parameters,
  /// e.g. to write a snapshot), with the step count.
  void gather_into(optim::AdamW<B>& full) {
    const std::size_t r = static_cast<std::size_t>(dp_.comm().rank());
    const std::size_t N = static_cast<std::size_t>(dp_.comm().size());
    const auto& ps = full.params();
    for (int b = 0; b < static_cast<int>(m_.size()); ++b) {
      const std::size_t c = dp_.bucket_chunk(b);
      for (int which = 0; which < 2; ++which) {
        Storage<B> buf(c * N * 4, Category::temporaries);
        float* all = static_cast<float*>(buf.data());
        B::copy(all + r * c, (which ? v_ : m_)[static_cast<std::size_t>(b)]->data(), c * 4);
        dp_.comm().all_gather(all + r * c, all, c)->wait();
        for (const auto& pc : dp_.bucket_pieces(b)) {
          const std::size_t i = index_of(ps, pc.param);
          auto mv = full.moments(i);
          B::copy(which ? mv.second : mv.first, all + pc.offset, pc.numel * 4);
        }
      }
    }
    full.set_steps(t_);
  }
  /// Resuming: this rank takes its chunks of `full`'s moments (and the step count) at the next
  /// step(), when the buckets are planned; `full` is dropped then.
  void resume_from(std::shared_ptr<optim::AdamW<B>> full) {
    t_ = full->steps();
    pending_ = std::move(full);
  }
  /// This rank's chunks of `full`'s moments, with the step count (the buckets must be planned).
  void scatter_from(optim::AdamW<B>& full) {
    const std::size_t r = static_cast<std::size_t>(dp_.comm().rank());
    const auto& ps = full.params();
    allocate();
    for (int b = 0; b < static_cast<int>(m_.size()); ++b) {
      const std::size_t c = dp_.bucket_chunk(b), lo = r * c, hi = lo + c;
      for (const auto& pc : dp_.bucket_pieces(b)) {
        const std::size_t s = std::max(lo, pc.offset), e = std::min(hi, pc.offset + pc.numel);
        if (s >= e) continue;
        const std::size_t i = index_of(ps, pc.param);
        if (!full.has_moments(i)) continue;  // zeros, as a fresh AdamW
        auto mv = full.moments(i);
        B::copy(static_cast<float*>(m_[static_cast<std::size_t>(b)]->data()) + (s - lo), mv.first + (s - pc.offset), (e - s) * 4);
        B::copy(static_cast<float*>(v_[static_cast<std::size_t>(b)]->data()) + (s - lo), mv.second + (s - pc.offset), (e - s) * 4);
      }
    }
    t_ = full.steps();
  }

  /// Bytes of moments this rank holds (8 x the chunks of every bucket).
  std::size_t state_bytes() const {
    std::size_t n = 0;
    for (const auto& m : m_) n += 2 * m->bytes();
    return n;
  }
  std::int64_t steps() const { return t_; }
  void set_steps(std::int64_t t) { t_ = t; }
  optim::AdamWOptions& options() { return opt_; }

 private:
  /// Zeroed moments for this rank's chunk of every bucket (the buckets must be planned: after
  /// a reducing backward, or plan_buckets_now()).
  void allocate() {
    m_.clear();
    v_.clear();
    plan_ = dp_.plan_version();
    for (int b = 0; b < dp_.buckets(); ++b) {
      const std::size_t c = dp_.bucket_chunk(b);
      m_.push_back(std::make_shared<Storage<B>>(c * 4, Category::optimizer_state));
      v_.push_back(std::make_shared<Storage<B>>(c * 4, Category::optimizer_state));
      B::fill(static_cast<float*>(m_.back()->data()), static_cast<std::int64_t>(c), 0.0f);
      B::fill(static_cast<float*>(v_.back()->data()), static_cast<std::int64_t>(c), 0.0f);
    }
  }
  static std::size_t index_of(const std::vector<Tensor<B>>& ps, const Tensor<B>& t) {
    for (std::size_t i = 0; i < ps.size(); ++i)
      if (ps[i].impl() == t.impl()) return i;
    REMAT_CHECK(false, "remat::dist::ShardedAdamW: a parameter of the DataParallel is not among "
                "the AdamW's (expected an AdamW over the same parameters)");
    return 0;
  }

  DataParallel<B>& dp_;
  optim::AdamWOptions opt_;
  std::vector<std::shared_ptr<Storage<B>>> m_, v_;
  std::shared_ptr<optim::AdamW<B>> pending_;
  int plan_ = 0;  // the bucket plan the moments are laid out on
  std::int64_t t_ = 0;
};

}  // namespace dist
}  // namespace remat
