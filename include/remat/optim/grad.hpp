#pragma once
// SPDX-License-Identifier: MIT
// Gradient utilities for a list of parameters: zero_grad and global-norm clipping.

#include <cmath>
#include <cstdint>
#include <vector>

#include "remat/core/tensor.hpp"

namespace remat {
namespace optim {

/// Which parameters an optimizer's weight decay applies to.
///   all:      every parameter (PyTorch's default for the parameters it is given);
///   matrices: parameters of rank >= 2 only (the weights of linear layers and embeddings, not
///             norms' gains or biases), the grouping of nanoGPT and llm.c.
enum class DecayOn { all, matrices };
inline bool decays(DecayOn on, const Shape& shape) {
  return on == DecayOn::all || shape.rank() >= 2;
}

/// Drops the gradients (set_to_none, the default: memory is freed until the next backward)
/// or fills them with zeros.
template <class B>
void zero_grad(const std::vector<Tensor<B>>& params, bool set_to_none = true) {
  for (const auto& p : params) {
    if (set_to_none) {
      p.clear_grad();
    } else if (auto g = p.grad(); g.defined()) {
      B::fill(g.template data<float>(), g.numel(), 0.0f);
    }
  }
}

/// The L2 norm of all gradients together (parameters without a gradient count as zero). The
/// sums of squares come back in one call (a device: one copy to the host for all of them).
template <class B>
float grad_norm(const std::vector<Tensor<B>>& params) {
  std::vector<const float*> xs;
  std::vector<std::int64_t> ns;
  for (const auto& p : params)
    if (auto g = p.grad(); g.defined()) {
      xs.push_back(g.template data<float>());
      ns.push_back(g.numel());
    }
  std::vector<double> sums(xs.size());
  if (!xs.empty()) B::sum_squares_many(sums.data(), xs.data(), ns.data(), xs.size());
  double total = 0.0;
  for (double s : sums) total += s;  // in parameter order, as one sum_squares after another
  return static_cast<float>(std::sqrt(total));
}

/// Scales all gradients so their global norm is at most max_norm (as
/// torch.nn.utils.clip_grad_norm_: factor max_norm / (norm + 1e-6), applied when < 1), all in
/// backend memory: the norm, the factor and the scaling (on a device: a few launches, no copy
/// to the host, so a step with clipping waits for nothing but what it prints; NOTE [clipping
/// on the device], backend/cuda/optim.cuh). Returns the norm before clipping as a scalar
/// tensor on the parameters' tape (read it with item() when it is printed).
template <class B>
Tensor<B> clip_grad_norm_(const std::vector<Tensor<B>>& params, float max_norm) {
  REMAT_CHECK(max_norm > 0.0f, "remat::optim::clip_grad_norm: max_norm is ", max_norm,
              " (expected > 0)");
  REMAT_CHECK(!params.empty(), "remat::optim::clip_grad_norm_: no parameters (expected at least "
              "one: the norm is made on their tape)");
  std::vector<float*> xs;
  std::vector<std::int64_t> ns;
  for (const auto& p : params)  // without a gradient or empty: nothing to add or to scale
    if (auto g = p.grad(); g.defined() && g.numel() > 0) {
      xs.push_back(g.template data<float>());
      ns.push_back(g.numel());
    }
  auto norm = detail::make_tensor<B>(&params.front().tape(), Shape{});
  B::clip_norm_many(norm.template data<float>(), xs.data(), ns.data(), xs.size(), max_norm);
  return norm;
}

/// clip_grad_norm_, with the norm read back (on a device: one wait). Returns the norm before
/// clipping (0 for no parameters).
template <class B>
float clip_grad_norm(const std::vector<Tensor<B>>& params, float max_norm) {
  if (params.empty()) {
    REMAT_CHECK(max_norm > 0.0f, "remat::optim::clip_grad_norm: max_norm is ", max_norm,
                " (expected > 0)");
    return 0.0f;
  }
  return clip_grad_norm_(params, max_norm).item();
}

}  // namespace optim
}  // namespace remat
