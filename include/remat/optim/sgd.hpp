#pragma once
// SPDX-License-Identifier: MIT
// SGD with momentum and weight decay (matches torch.optim.SGD with dampening 0).

#include <vector>

#include "remat/backend/update_list.hpp"
#include "remat/core/tape.hpp"
#include "remat/optim/grad.hpp"
#include "remat/optim/state.hpp"

namespace remat {
namespace optim {

struct SGDOptions {
  float lr = 0.01f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  DecayOn decay_on = DecayOn::all;  // which parameters weight_decay applies to
};

template <class B>
class SGD {
 public:
  SGD(std::vector<Tensor<B>> params, SGDOptions o) : params_(std::move(params)), opt_(o) {
    REMAT_CHECK(o.lr >= 0.0f && o.momentum >= 0.0f, "remat::optim::SGD: lr ", o.lr,
                " and momentum ", o.momentum, " must be >= 0");
    bufs_.resize(params_.size());
    used_.resize(params_.size());
  }
  /// One update of every parameter that has a gradient; momentum buffers are made on first use
  /// (under `optimizer_state`).
  void step() {
    // Buffers first, updates after: an OutOfMemory leaves every parameter as it was.
    // Buffers this call makes are dropped again if a later one fails: no half-made state.
    std::vector<bool> first(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) first[i] = !bufs_[i];
    const bool had_flat = flat_made_;
    try {
      for (std::size_t i = 0; i < params_.size(); ++i)
        if (opt_.momentum != 0.0f && params_[i].grad().defined()) make_buffer(i);
    } catch (...) {
      for (std::size_t i = 0; i < params_.size(); ++i)
        if (first[i]) bufs_[i].reset();
      if (!had_flat) flat_made_ = false;
      throw;
    }
    // all in one call (NOTE [multi-tensor updates]); two where decay spares some parameters
    std::vector<UpdateSlice> slices[2];  // [0]: decayed, [1]: not
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i];
      auto g = p.grad();
      if (!g.defined()) continue;
      float* buf = opt_.momentum != 0.0f ? make_buffer(i) : nullptr;
      if (buf) used_[i] = 1;
      slices[decays(opt_.decay_on, p.shape()) ? 0 : 1].push_back(
          {p.template mutable_data<float>(), g.template data<float>(), buf, nullptr, p.numel(),
           static_cast<bool>(first[i])});
    }
    for (int k = 0; k < 2; ++k)
      if (!slices[k].empty())
        B::sgd_update_many(slices[k].data(), slices[k].size(), opt_.lr, opt_.momentum,
                           k == 0 ? opt_.weight_decay : 0.0f, opt_.nesterov);
  }
  void zero_grad(bool set_to_none = true) { optim::zero_grad(params_, set_to_none); }
  SGDOptions& options() { return opt_; }
  const std::vector<Tensor<B>>& params() const { return params_; }
  /// Whether parameter i has momentum: it was updated with momentum, or its buffer was asked
  /// for (a snapshot restoring it).
  bool has_momentum_buffer(std::size_t i) const { return used_.at(i) != 0; }
  /// The momentum buffer of parameter i, made when absent (make_buffer); from now on
  /// has_momentum_buffer(i), and the next step uses momentum, as after loading a saved state.
  float* momentum_buffer(std::size_t i) {
    float* b = make_buffer(i);
    used_[i] = 1;
    return b;
  }

 private:
  /// The momentum buffer of parameter i, made when absent: the first call makes those of
  /// every parameter that wants a gradient, in one flat buffer laid out as the parameters
  /// (optim::flat_state; NOTE [flat buffers]); a parameter left out then gets one of its own.
  /// A buffer made but not yet used holds zeros, so its first use (mu * 0 + g) gives g, as a
  /// buffer made at that step would.
  float* make_buffer(std::size_t i) {
    if (!flat_made_) {
      const std::vector<bool> take = wanting_state(params_, i);
      auto b = flat_state(params_, take);
      for (std::size_t k = 0; k < params_.size(); ++k)
        if (take[k]) bufs_[k] = std::move(b[k]);
      flat_made_ = true;
    }
    if (!bufs_.at(i)) {
      bufs_[i] = std::make_shared<Storage<B>>(params_[i].bytes(), Category::optimizer_state);
      B::fill(static_cast<float*>(bufs_[i]->data()), params_[i].numel(), 0.0f);
    }
    return static_cast<float*>(bufs_[i]->data());
  }

  std::vector<Tensor<B>> params_;
  SGDOptions opt_;
  std::vector<std::shared_ptr<Storage<B>>> bufs_;  // views of the flat buffer (or own ones)
  std::vector<char> used_;  // has_momentum_buffer
  bool flat_made_ = false;
};

}  // namespace optim
}  // namespace remat
