#pragma once
// SPDX-License-Identifier: MIT
// AdamW: Adam with decoupled weight decay (matches torch.optim.AdamW).

#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "remat/backend/update_list.hpp"
#include "remat/core/tape.hpp"
#include "remat/optim/grad.hpp"
#include "remat/optim/state.hpp"

namespace remat {
namespace optim {

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  DecayOn decay_on = DecayOn::all;  // which parameters weight_decay applies to
};

template <class B>
class AdamW {
 public:
  AdamW(std::vector<Tensor<B>> params, AdamWOptions o) : params_(std::move(params)), opt_(o) {
    REMAT_CHECK(o.lr >= 0.0f && o.beta1 >= 0.0f && o.beta1 < 1.0f && o.beta2 >= 0.0f &&
                    o.beta2 < 1.0f && o.eps > 0.0f,
                "remat::optim::AdamW: lr ", o.lr, ", betas (", o.beta1, ", ", o.beta2, "), eps ",
                o.eps, " (expected lr >= 0, 0 <= beta < 1, eps > 0)");
    m_.resize(params_.size());
    v_.resize(params_.size());
    used_.resize(params_.size());
  }
  /// One update of every parameter with a gradient. The moments (2 x the parameter bytes,
  /// under `optimizer_state`) are made at the first step, as in PyTorch, for every parameter
  /// that wants a gradient at once (make_moments).
  void step() {
    // Moments first, updates after: an OutOfMemory leaves every parameter and the step count
    // as they were, so the step can be retried (e.g. after re-planning checkpointing).
    // Moments this call makes are dropped again if a later one fails: no half-made state
    // (the ledger is back where it was, and has_moments() says what a retry will find).
    std::vector<std::size_t> made;
    const bool had_flat = flat_made_;
    try {
      for (std::size_t i = 0; i < params_.size(); ++i)
        if (params_[i].grad().defined() && !m_[i]) {
          made.push_back(i);
          make_moments(i);  // the first: every parameter's (flat)
        }
    } catch (...) {
      for (std::size_t i : made) m_[i].reset(), v_[i].reset();
      if (!had_flat && flat_made_) drop_flat();
      throw;
    }
    ++t_;
    const float bc1 = 1.0f - std::pow(opt_.beta1, static_cast<float>(t_));
    const float bc2 = 1.0f - std::pow(opt_.beta2, static_cast<float>(t_));
    // Every parameter in one call: a device updates them in a few launches (NOTE
    // [multi-tensor updates], backend/cuda/optim.cuh); the bits are the per-tensor update's.
    // Two calls where decay applies to some parameters only (DecayOn::matrices): the
    // parameters it applies to, then the others with none.
    std::vector<UpdateSlice> slices[2];  // [0]: decayed, [1]: not
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i];
      auto g = p.grad();
      if (!g.defined()) continue;
      const auto [m, v] = make_moments(i);
      used_[i] = 1;
      slices[decays(opt_.decay_on, p.shape()) ? 0 : 1].push_back(
          {p.template mutable_data<float>(), g.template data<float>(), m, v, p.numel(), false});
    }
    for (int k = 0; k < 2; ++k)
      if (!slices[k].empty())
        B::adamw_update_many(slices[k].data(), slices[k].size(), opt_.lr, opt_.beta1, opt_.beta2,
                             opt_.eps, k == 0 ? opt_.weight_decay : 0.0f, bc1, bc2);
  }
  void zero_grad(bool set_to_none = true) { optim::zero_grad(params_, set_to_none); }
  AdamWOptions& options() { return opt_; }
  std::int64_t steps() const { return t_; }
  /// Sets the step count (bias corrections), as when resuming from a saved state.
  void set_steps(std::int64_t t) { t_ = t; }
  /// Whether parameter i has state: it was updated, or its moments were asked for (a snapshot
  /// restoring them). Moments made with the others' but not yet used are zeros, what a fresh
  /// optimizer has.
  bool has_moments(std::size_t i) const { return used_.at(i) != 0; }
  /// The first and second moments of parameter i, made (zeroed) when absent (make_moments);
  /// from now on has_moments(i).
  std::pair<float*, float*> moments(std::size_t i) {
    const auto mv = make_moments(i);
    used_[i] = 1;
    return mv;
  }
  const std::vector<Tensor<B>>& params() const { return params_; }

 private:
  /// The moments of parameter i, made when absent: the first call makes those of every
  /// parameter that wants a gradient, in two flat buffers laid out as the parameters
  /// (optim::flat_state; NOTE [flat buffers]); a parameter left out then (frozen at the time)
  /// gets buffers of its own.
  std::pair<float*, float*> make_moments(std::size_t i) {
    if (!flat_made_) {
      const std::vector<bool> take = wanting_state(params_, i);
      auto m = flat_state(params_, take);
      auto v = flat_state(params_, take);  // an OutOfMemory here drops m
      for (std::size_t k = 0; k < params_.size(); ++k)
        if (take[k]) m_[k] = std::move(m[k]), v_[k] = std::move(v[k]);
      flat_made_ = true;
    }
    if (!m_.at(i)) {
      const auto& p = params_[i];
      // Both or neither: m alone would leave v null for the next call.
      auto m = std::make_shared<Storage<B>>(p.bytes(), Category::optimizer_state);
      auto v = std::make_shared<Storage<B>>(p.bytes(), Category::optimizer_state);
      B::fill(static_cast<float*>(m->data()), p.numel(), 0.0f);
      B::fill(static_cast<float*>(v->data()), p.numel(), 0.0f);
      m_[i] = std::move(m);
      v_[i] = std::move(v);
    }
    return {static_cast<float*>(m_[i]->data()), static_cast<float*>(v_[i]->data())};
  }
  /// Undoes the flat moments a failed step made.
  void drop_flat() {
    for (auto& m : m_) m.reset();
    for (auto& v : v_) v.reset();
    flat_made_ = false;
  }

  std::vector<Tensor<B>> params_;
  AdamWOptions opt_;
  std::vector<std::shared_ptr<Storage<B>>> m_, v_;  // views of the flat buffers (or own ones)
  std::vector<char> used_;  // has_moments
  bool flat_made_ = false;
  std::int64_t t_ = 0;
};

}  // namespace optim
}  // namespace remat
