#pragma once
// SPDX-License-Identifier: MIT
// Gradient utilities for a list of parameters: zero_grad and global-norm clipping.

#include <cmath>
#include <cstdint>
#include <vector>

#include "remat/core/tensor.hpp"

namespace remat {
namespace optim {

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
/// torch.nn.utils.clip_grad_norm_: factor max_norm / (norm + 1e-6), applied when < 1).
/// Returns the norm before clipping.
template <class B>
float clip_grad_norm(const std::vector<Tensor<B>>& params, float max_norm) {
  REMAT_CHECK(max_norm > 0.0f, "remat::optim::clip_grad_norm: max_norm is ", max_norm,
              " (expected > 0)");
  const float norm = grad_norm(params);
  const float factor = max_norm / (norm + 1e-6f);
  if (factor < 1.0f) {  // every gradient at once (on the GPU: 32 buffers per launch)
    std::vector<float*> xs;
    std::vector<std::int64_t> ns;
    for (const auto& p : params)
      if (auto g = p.grad(); g.defined()) {
        xs.push_back(g.template data<float>());
        ns.push_back(g.numel());
      }
    if (!xs.empty()) B::scale_many(xs.data(), ns.data(), xs.size(), factor);
  }
  return norm;
}

}  // namespace optim
}  // namespace remat
