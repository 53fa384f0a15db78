#pragma once
// SPDX-License-Identifier: MIT
// SGD with momentum and weight decay (matches torch.optim.SGD with dampening 0).

#include <vector>

#include "remat/backend/update_list.hpp"
#include "remat/core/tape.hpp"
#include "remat/optim/grad.hpp"

namespace remat {
namespace optim {

struct SGDOptions {
  float lr = 0.01f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

template <class B>
class SGD {
 public:
  SGD(std::vector<Tensor<B>> params, SGDOptions o) : params_(std::move(params)), opt_(o) {
    REMAT_CHECK(o.lr >= 0.0f && o.momentum >= 0.0f, "remat::optim::SGD: lr ", o.lr,
                " and momentum ", o.momentum, " must be >= 0");
    bufs_.resize(params_.size());
  }
  /// One update of every parameter that has a gradient; momentum buffers are made on first use
  /// (under `optimizer_state`).
  void step() {
    // Buffers first, updates after: an OutOfMemory leaves every parameter as it was.
    // Buffers this call makes are dropped again if a later one fails: no half-made state.
    std::vector<bool> first(params_.size());
    try {
      for (std::size_t i = 0; i < params_.size(); ++i) {
        first[i] = !bufs_[i];
        if (opt_.momentum != 0.0f && params_[i].grad().defined()) momentum_buffer(i);
      }
    } catch (...) {
      for (std::size_t i = 0; i < params_.size(); ++i)
        if (first[i]) bufs_[i].reset();
      throw;
    }
    std::vector<UpdateSlice> slices;  // all in one call (NOTE [multi-tensor updates])
    slices.reserve(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i];
      auto g = p.grad();
      if (!g.defined()) continue;
      float* buf = opt_.momentum != 0.0f ? momentum_buffer(i) : nullptr;
      slices.push_back({p.template mutable_data<float>(), g.template data<float>(), buf, nullptr,
                        p.numel(), static_cast<bool>(first[i])});
    }
    B::sgd_update_many(slices.data(), slices.size(), opt_.lr, opt_.momentum, opt_.weight_decay,
                       opt_.nesterov);
  }
  void zero_grad(bool set_to_none = true) { optim::zero_grad(params_, set_to_none); }
  SGDOptions& options() { return opt_; }
  const std::vector<Tensor<B>>& params() const { return params_; }
  bool has_momentum_buffer(std::size_t i) const { return bufs_.at(i) != nullptr; }
  /// The momentum buffer of parameter i, made when absent (a made buffer counts as started:
  /// the next step uses momentum, as after loading a saved state).
  float* momentum_buffer(std::size_t i) {
    if (!bufs_.at(i)) {
      bufs_[i] = std::make_shared<Storage<B>>(params_[i].bytes(), Category::optimizer_state);
      B::fill(static_cast<float*>(bufs_[i]->data()), params_[i].numel(), 0.0f);
    }
    return static_cast<float*>(bufs_[i]->data());
  }

 private:
  std::vector<Tensor<B>> params_;
  SGDOptions opt_;
  std::vector<std::shared_ptr<Storage<B>>> bufs_;
};

}  // namespace optim
}  // namespace remat
