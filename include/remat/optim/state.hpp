#pragma once
// SPDX-License-Identifier: MIT
// An optimizer's per-parameter state (AdamW's moments, SGD's momentum) in one flat buffer laid
// out as the parameters (NOTE [flat buffers], core/flat.hpp).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "remat/core/flat.hpp"
#include "remat/core/memory.hpp"
#include "remat/core/storage.hpp"
#include "remat/core/tensor.hpp"

namespace remat {
namespace optim {

/// One float per parameter element, zeroed, under `optimizer_state`: views[i] is parameter i's
/// part (null where `take[i]` is false). When the parameters taken are views of one buffer that
/// they fill (nn::Module::flatten_parameters), the state has that buffer's size and each view
/// its parameter's offset, so state = parameter + one distance for all of them (one launch
/// updates them: NOTE [multi-tensor updates], backend/cuda/optim.cuh); otherwise they are laid
/// one after another (flat_layout). A parameter given twice shares its view.
/// Which parameters get state when an optimizer makes it (its first step, or a snapshot
/// restoring parameter i): those that want a gradient or have one, and i.
template <class B>
std::vector<bool> wanting_state(const std::vector<Tensor<B>>& params, std::size_t i) {
  std::vector<bool> take(params.size());
  for (std::size_t k = 0; k < params.size(); ++k)
    take[k] = params[k].requires_grad() || params[k].grad().defined() || k == i;
  return take;
}

template <class B>
std::vector<std::shared_ptr<Storage<B>>> flat_state(const std::vector<Tensor<B>>& params,
                                                    const std::vector<bool>& take) {
  std::vector<Tensor<B>> taken;
  for (std::size_t i = 0; i < params.size(); ++i)
    if (take[i]) taken.push_back(params[i]);
  std::vector<std::shared_ptr<Storage<B>>> views(params.size());
  if (taken.empty()) return views;
  // The parameters' own layout, when they fill one buffer (its size is what flat_layout
  // gives them: each once, rounded): their views' offsets.
  const FlatLayout own = flat_layout(taken);
  const auto& parent = taken.front().storage()->parent();
  bool mirror = parent != nullptr && parent->bytes() == static_cast<std::size_t>(own.total) * 4;
  for (const auto& t : taken) mirror = mirror && t.storage()->parent() == parent;
  const std::size_t total = mirror ? parent->bytes() : static_cast<std::size_t>(own.total) * 4;
  auto buffer = std::make_shared<Storage<B>>(total, Category::optimizer_state);
  B::fill(static_cast<float*>(buffer->data()), static_cast<std::int64_t>(total / 4), 0.0f);
  for (std::size_t i = 0, k = 0; i < params.size(); ++i) {
    if (!take[i]) continue;
    const std::size_t offset =
        mirror ? params[i].storage()->offset() : static_cast<std::size_t>(own.offset[k]) * 4;
    ++k;
    views[i] = std::make_shared<Storage<B>>(buffer, offset, params[i].bytes());
  }
  return views;
}

}  // namespace optim
}  // namespace remat
