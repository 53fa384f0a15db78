#pragma once
// SPDX-License-Identifier: MIT
// Flat buffers: many tensors as views of one buffer (NOTE [flat buffers]).
//
// NOTE [flat buffers]
// - A model's parameters, each in a buffer of its own, come in a few sizes (GPT-2 124M: 148
//   tensors, most of 2.4, 7.1 or 9.4 MB). A caching allocator packs such long-lived buffers
//   into shared segments with holes between them, and the optimizer's moments, made later,
//   fill other holes: at GPT-2 124M B8 T1024 about 120 MB of the CUDA pool's segments were
//   free but unusable at the step's peak (reserved 3.9% above the ledger's peak with `block`,
//   NOTE [CUDA block pool]). One buffer for all parameters and one for each moment leaves no
//   holes (0.1-0.2% there, from the same allocation trace).
// - flatten(ts) moves tensors into one buffer: each tensor's storage becomes a view of it
//   (Storage's view constructor: no allocation, no ledger entry of its own) at an offset that is
//   a multiple of kFlatAlign floats (256 bytes, as cudaMalloc aligns), in the order given; a
//   tensor given twice (tied weights) is placed once. The gaps are zero. Handles to the tensors
//   see the move (they share its TensorImpl); a raw pointer taken before does not. While it
//   runs, the old buffers and the new one exist together (the parameters' bytes twice).
// - An optimizer lays its state out as the parameters (optim::flat_state): the same offsets in
//   buffers of the same size, so that state = parameter + one distance for every tensor, and a
//   device updates them all in one launch of a short table (NOTE [multi-tensor updates]).
// - Gradients stay one buffer each: they are made during backward one after another and freed
//   after the step, so a flat gradient buffer would be whole from the first gradient on (+85M
//   floats at GPT-2 124M's peak) where separate ones grow as backward goes.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "remat/core/error.hpp"
#include "remat/core/storage.hpp"
#include "remat/core/tensor.hpp"

namespace remat {

inline constexpr std::int64_t kFlatAlign = 64;  // floats: 256 bytes

inline std::int64_t flat_round(std::int64_t n) { return (n + kFlatAlign - 1) / kFlatAlign * kFlatAlign; }

/// Where flatten() puts each tensor: offsets in floats, `total` floats in all. A tensor that
/// appears again (the same TensorImpl) gets its first offset.
struct FlatLayout {
  std::vector<std::int64_t> offset;
  std::int64_t total = 0;
};
template <class B>
FlatLayout flat_layout(const std::vector<Tensor<B>>& ts) {
  FlatLayout l;
  std::unordered_map<const TensorImpl<B>*, std::int64_t> seen;
  for (const auto& t : ts) {
    auto [it, fresh] = seen.emplace(t.impl(), l.total);
    l.offset.push_back(it->second);
    if (fresh) l.total += flat_round(t.numel());
  }
  return l;
}

/// Whether every tensor of ts is a view of one buffer at flat_layout(ts)'s offsets and the
/// buffer holds exactly that layout (what flatten(ts) leaves).
template <class B>
bool is_flat(const std::vector<Tensor<B>>& ts) {
  if (ts.empty()) return false;
  const auto& parent = ts.front().storage()->parent();
  if (!parent) return false;
  const FlatLayout l = flat_layout(ts);
  if (parent->bytes() != static_cast<std::size_t>(l.total) * 4) return false;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const auto& s = ts[i].storage();
    if (s->parent() != parent || s->offset() != static_cast<std::size_t>(l.offset[i]) * 4) return false;
  }
  return true;
}

/// Moves ts (f32 leaves) into one buffer of their first one's category, each a view at
/// flat_layout(ts)'s offset, values kept (NOTE [flat buffers]). Nothing to do when they are
/// flat already. On OutOfMemory nothing has moved.
template <class B>
void flatten(const std::vector<Tensor<B>>& ts) {
  if (ts.empty() || is_flat(ts)) return;
  for (std::size_t i = 0; i < ts.size(); ++i)
    REMAT_CHECK(ts[i].dtype() == DType::f32 && ts[i].is_leaf(), "remat::flatten: ",
                detail::describe_tensor(ts[i]), " (tensor ", i, ") is ",
                ts[i].is_leaf() ? "" : "made by a recorded op and ", dtype_name(ts[i].dtype()),
                " (expected f32 leaves, such as parameters)");
  const FlatLayout l = flat_layout(ts);
  auto flat = std::make_shared<Storage<B>>(static_cast<std::size_t>(l.total) * 4,
                                           ts.front().category());
  float* base = static_cast<float*>(flat->data());
  B::fill(base, l.total, 0.0f);  // the gaps
  for (std::size_t i = 0; i < ts.size(); ++i) {
    TensorImpl<B>& t = *ts[i].impl();
    const std::size_t offset = static_cast<std::size_t>(l.offset[i]) * 4;
    if (t.storage->parent() == flat) continue;  // given before
    if (ts[i].numel() > 0) B::copy(base + l.offset[i], t.storage->data(), ts[i].bytes());
    t.storage = std::make_shared<Storage<B>>(flat, offset, ts[i].bytes());
  }
}

}  // namespace remat
