#pragma once
// SPDX-License-Identifier: MIT
// Module: a set of named parameters. Children's parameters are copied in under a prefix at
// construction ("h.0.attn.c_attn.weight"), so the names follow the Hugging Face GPT-2 layout and
// a module can be moved or stored in a vector freely (tensors are shared handles).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "remat/core/flat.hpp"
#include "remat/core/rng.hpp"
#include "remat/core/tape.hpp"

namespace remat {
namespace nn {

template <class B>
class Module {
 public:
  using NamedTensor = std::pair<std::string, Tensor<B>>;

  const std::vector<NamedTensor>& named_parameters() const noexcept { return params_; }
  std::vector<Tensor<B>> parameters() const {
    std::vector<Tensor<B>> out;
    for (const auto& p : params_) out.push_back(p.second);
    return out;
  }
  /// The parameter called `name`; throws with the known names' count if there is none.
  Tensor<B> parameter(const std::string& name) const {
    for (const auto& p : params_)
      if (p.first == name) return p.second;
    REMAT_CHECK(false, "remat::nn::Module::parameter: no parameter named '", name, "' among ",
                params_.size(), " (names follow the GPT-2 layout, e.g. 'h.0.ln_1.weight')");
    return Tensor<B>();
  }
  std::int64_t num_parameters() const {
    std::int64_t n = 0;
    for (const auto& p : params_) n += p.second.numel();
    return n;
  }
  /// Moves every parameter into one buffer, each a view of it (NOTE [flat buffers],
  /// core/flat.hpp): no holes between them in a caching allocator's segments, and an
  /// optimizer's state laid out the same way is updated in one launch. Handles to the
  /// parameters follow; raw pointers into them taken before do not. nn::GPT does it when made.
  void flatten_parameters() { flatten(parameters()); }
  /// NOTE [padded parameters]: the shape parameter i has in files (weights, snapshots): its
  /// leading rows without the padding a module may add past them (a vocabulary padded to a
  /// multiple for aligned GEMMs). The padding rows stay zero: nothing reads them into a result
  /// that matters, so their gradient is zero and an optimizer leaves them so. Saving writes the
  /// saved rows; loading fills them and zeroes the padding.
  Shape saved_shape(std::size_t i) const {
    Shape s = params_.at(i).second.shape();
    if (saved_rows_.at(i) >= 0) s[0] = saved_rows_[i];
    return s;
  }

 protected:
  /// Registers t as `name`, which it also takes as its tensor name (errors name it so); with
  /// saved_rows >= 0, only the first saved_rows rows of t are its value in files (NOTE [padded
  /// parameters]), the rest padding.
  Tensor<B> add_parameter(const std::string& name, Tensor<B> t, std::int64_t saved_rows = -1) {
    REMAT_CHECK(saved_rows < 0 || (t.rank() >= 1 && saved_rows <= t.size(0)),
                "remat::nn::Module::add_parameter: '", name, "' is ", t.shape().str(), " with ",
                saved_rows, " saved rows (expected at most its ", t.rank() ? t.size(0) : 0,
                " rows)");
    t.impl()->name = name;
    params_.emplace_back(name, t);
    saved_rows_.push_back(saved_rows);
    return t;
  }
  template <class M>
  void add_module(const std::string& prefix, const M& child) {
    const auto& named = child.named_parameters();
    for (std::size_t i = 0; i < named.size(); ++i) {
      const auto& p = named[i];
      p.second.impl()->name = prefix + "." + p.first;
      params_.emplace_back(prefix + "." + p.first, p.second);
      const Shape saved = child.saved_shape(i);
      saved_rows_.push_back(saved == p.second.shape() ? -1 : saved[0]);
    }
  }

 private:
  std::vector<NamedTensor> params_;
  std::vector<std::int64_t> saved_rows_;  // per parameter: -1 (all) or the rows saved
};

namespace init {
/// A parameter of N(0, std^2) draws, reproducible from `seed` on every backend.
template <class B>
Tensor<B> normal(Tape<B>& tape, const Shape& shape, float std, std::uint64_t seed) {
  shape.check_concrete("nn::init::normal");
  Tensor<B> t = tape.parameter(shape);  // through the ledger: OutOfMemory past a limit
  if constexpr (!is_meta_backend_v<B>)  // a shape-only backend has no values to draw
    remat::detail::fill_normal<B>(t.storage()->data(), shape.numel(), std, seed, 0x1417);
  return t;
}
/// A parameter filled with `value`.
template <class B>
Tensor<B> constant(Tape<B>& tape, const Shape& shape, float value) {
  shape.check_concrete("nn::init::constant");
  Tensor<B> t = tape.parameter(shape);
  if constexpr (!is_meta_backend_v<B>) B::fill(t.template data<float>(), t.numel(), value);
  return t;
}
}  // namespace init

}  // namespace nn
}  // namespace remat
