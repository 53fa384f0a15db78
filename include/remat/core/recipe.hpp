#pragma once
// SPDX-License-Identifier: MIT
// A saved operand that is a tensor, or the recipe of a cheap pointwise output: what an op's
// backward state keeps of an input.
//
// NOTE [saved as a recipe]
// An op composed of primitives keeps every product's operands, so `x * rstd * g` keeps
// x * rstd for the gradient of g, and silu(a) * b keeps silu(a), where a fused op keeps only
// x and a row, or a and b. Yet the op that made x * rstd keeps x and rstd itself, and SiLU
// keeps a: the output is a pointwise function of tensors a backward state holds anyway. Such an
// op (BinaryOp, UnaryOp: `static std::shared_ptr<const Recipe<B>> recipe(saved, out)`, null
// when its state does not hold every input) gives its output a recipe; an op that saves that
// output (SavedOperand::keep) keeps the recipe's operands instead, which costs no byte, and
// backward remakes the output, a temporary the ledger counts (Meta too: the estimate stays
// exact), with the same kernel on the same inputs: the same bits. A recipe over operands that
// are recipes remakes those first; what is kept is always the tensors at the roots. The bf16
// copy of a parameter (to_dtype) is such an output too: a product keeps the f32 parameter, not
// the copy, and remakes the copy in backward (one rounding, the same bits).
// Lifetimes (core/apply.hpp attaches recipes, never the ops):
//   - in a recorded run the op's node owns the recipe (Saved::made) and the output points to it
//     weakly: nothing outlives backward, and under NoGrad no recipe is made;
//   - in a checkpoint segment's first run, whose states are dropped at once, the output owns
//     it (TensorImpl::recipe_owned) and the frame drops what survives when the first run ends,
//     so the first run sees what a recorded run would keep (its trace, the policies) and keeps
//     nothing longer;
//   - a replay's output reused from a policy's keep gets none (the ops that made its inputs
//     may not have run).

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "remat/core/tensor.hpp"

namespace remat {

template <class B>
struct Recipe;

/// What a backward state keeps of an input: the tensor, or its recipe's operands.
template <class B>
class SavedOperand {
 public:
  /// Keeps x: its recipe when it has one that is still owned, else x itself.
  void keep(const Tensor<B>& x) {
    recipe_ = x.impl()->recipe.lock();
    t_ = recipe_ ? Tensor<B>() : x;
  }
  bool defined() const noexcept { return t_.defined() || recipe_ != nullptr; }
  /// Calls f on each tensor kept (x, or the recipe's roots), for counting and version checks.
  template <class F>
  void each(F&& f) const;
  /// x, or x remade from its recipe (a new tensor).
  Tensor<B> get() const;

 private:
  Tensor<B> t_;
  std::shared_ptr<const Recipe<B>> recipe_;
};

/// How to remake a pointwise op's output from what its backward state keeps.
template <class B>
struct Recipe {
  std::vector<SavedOperand<B>> operands;
  Shape shape;
  DType dtype = DType::f32;  // the output's
  Tape<B>* tape = nullptr;
  std::function<void(const std::vector<Tensor<B>>& in, const Tensor<B>& y)> run;

  Tensor<B> remake() const {
    std::vector<Tensor<B>> in;
    in.reserve(operands.size());
    for (const SavedOperand<B>& o : operands) in.push_back(o.get());
    Tensor<B> y = detail::make_tensor<B>(tape, shape, dtype);
    run(in, y);
    return y;
  }
};

/// A recipe for `out`: `run(in, y)` writes y from the operands, got back as tensors.
template <class B, class Run>
std::shared_ptr<const Recipe<B>> make_recipe(std::vector<SavedOperand<B>> operands,
                                             const Tensor<B>& out, Run&& run) {
  auto r = std::make_shared<Recipe<B>>();
  r->operands = std::move(operands);
  r->shape = out.shape();
  r->dtype = out.dtype();
  r->tape = &out.tape();
  r->run = std::forward<Run>(run);
  return r;
}

template <class B>
template <class F>
void SavedOperand<B>::each(F&& f) const {
  if (!recipe_) {
    f(t_);
    return;
  }
  for (const SavedOperand<B>& o : recipe_->operands) o.each(f);
}
template <class B>
Tensor<B> SavedOperand<B>::get() const {
  return recipe_ ? recipe_->remake() : t_;
}

}  // namespace remat
