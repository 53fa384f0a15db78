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

namespace remat {
namespace optim {

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
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
  }
  /// One update of every parameter with a gradient. The moments (2 x the parameter bytes,
  /// under `optimizer_state`) are made at the first step, as in PyTorch.
  void step() {
    // Moments first, updates after: an OutOfMemory leaves every parameter and the step count
    // as they were, so the step can be retried (e.g. after re-planning checkpointing).
    // Moments this call makes are dropped again if a later one fails: no half-made state
    // (the ledger is back where it was, and has_moments() says what a retry will find).
    std::vector<std::size_t> made;
    try {
      for (std::size_t i = 0; i < params_.size(); ++i)
        if (params_[i].grad().defined() && !m_[i]) {
          made.push_back(i);
          moments(i);
        }
    } catch (...) {
      for (std::size_t i : made) m_[i].reset(), v_[i].reset();
      throw;
    }
    ++t_;
    const float bc1 = 1.0f - std::pow(opt_.beta1, static_cast<float>(t_));
    const float bc2 = 1.0f - std::pow(opt_.beta2, static_cast<float>(t_));
    // Every parameter in one call: a device updates them in a few launches (NOTE
    // [multi-tensor updates], backend/cuda/optim.cuh); the bits are the per-tensor update's.
    std::vector<UpdateSlice> slices;
    slices.reserve(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i];
      auto g = p.grad();
      if (!g.defined()) continue;
      const auto [m, v] = moments(i);
      slices.push_back({p.template mutable_data<float>(), g.template data<float>(), m, v, p.numel(), false});
    }
    B::adamw_update_many(slices.data(), slices.size(), opt_.lr, opt_.beta1, opt_.beta2, opt_.eps,
                         opt_.weight_decay, bc1, bc2);
  }
  void zero_grad(bool set_to_none = true) { optim::zero_grad(params_, set_to_none); }
  AdamWOptions& options() { return opt_; }
  std::int64_t steps() const { return t_; }
  /// Sets the step count (bias corrections), as when resuming from a saved state.
  void set_steps(std::int64_t t) { t_ = t; }
  bool has_moments(std::size_t i) const { return m_.at(i) != nullptr; }
  /// The first and second moments of parameter i, made (zeroed) when absent.
  std::pair<float*, float*> moments(std::size_t i) {
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
  const std::vector<Tensor<B>>& params() const { return params_; }

 private:
  std::vector<Tensor<B>> params_;
  AdamWOptions opt_;
  std::vector<std::shared_ptr<Storage<B>>> m_, v_;
  std::int64_t t_ = 0;
};

}  // namespace optim
}  // namespace remat
