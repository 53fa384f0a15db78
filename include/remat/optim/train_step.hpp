#pragma once
// SPDX-License-Identifier: MIT
// One training step of any model: the loss, its backward, optional gradient clipping, the
// optimizer's update and zero_grad, inside a StepScope. The bundled GPT's step, the planner's
// certified estimate of a user's chain (plan/fit_stages.hpp) and a hand-written loop all run it,
// so an estimate describes the very step that is measured.
//
//   optim::AdamW<Cpu> opt(model.parameters(), {});
//   for (...) remat::optim::train_step(opt, [&] { return model.loss(x, y); });

#include <string>
#include <type_traits>

#include "remat/core/error.hpp"
#include "remat/core/step.hpp"
#include "remat/core/tensor.hpp"
#include "remat/optim/grad.hpp"

namespace remat {

/// How a training step updates the weights; what an estimate needs to know of the optimizer.
struct StepOptions {
  std::string optimizer = "adamw";  // adamw or sgd
  float momentum = 0.0f;            // sgd: a momentum buffer per parameter when > 0
  float grad_clip = 0.0f;           // > 0: the step clips the gradients' norm (its scratch)

  void check(const char* where) const {
    REMAT_CHECK(optimizer == "adamw" || optimizer == "sgd", where, ": unknown optimizer '",
                optimizer, "' (expected adamw or sgd)");
  }
};

namespace detail {
template <class T>
struct tensor_backend;
template <class B>
struct tensor_backend<Tensor<B>> {
  using type = B;
};
}  // namespace detail

namespace optim {

/// loss_fn() -> scalar loss; then backward, clipping (grad_clip > 0), opt.step(), zero_grad.
/// Returns the loss.
template <class Optimizer, class LossFn>
auto train_step(Optimizer& opt, LossFn&& loss_fn, float grad_clip = 0.0f) {
  using T = std::decay_t<decltype(loss_fn())>;
  StepScope<typename detail::tensor_backend<T>::type> step;  // the CPU arena plans the step's buffers (NOTE [Planned step layout])
  T loss = loss_fn();
  loss.tape().backward(loss);
  if (grad_clip > 0.0f) (void)clip_grad_norm_(opt.params(), grad_clip);  // no read
  opt.step();
  opt.zero_grad();
  return loss;
}

}  // namespace optim
}  // namespace remat
