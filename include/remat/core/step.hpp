// SPDX-License-Identifier: MIT
#pragma once
// StepScope: marks one training step for the backend's allocator.

#include <exception>
#include <type_traits>

namespace remat {
namespace detail {
template <class B, class = void>
struct has_step_hooks : std::false_type {};
template <class B>
struct has_step_hooks<B, std::void_t<decltype(B::begin_step()), decltype(B::end_step(true))>>
    : std::true_type {};
}  // namespace detail

/// One training step (forward, backward, optimizer update), for backend B's allocator: on the
/// CPU, the arena records the step's allocations and lays the next steps' buffers out as
/// planned from that record (NOTE [Planned step layout] in backend/cpu/step_layout.hpp), so
/// what the process holds follows the ledger's peak. A backend without the hooks ignores it.
/// gpt_train_step and the trainer open one; a hand-written loop opens one per step:
///   for (...) { remat::StepScope<Cpu> step; loss = model.loss(x, y); ... opt.zero_grad(); }
/// Nested scopes count as one. A step left by an exception plans nothing.
template <class B>
class StepScope {
 public:
  StepScope() {
    if constexpr (detail::has_step_hooks<B>::value) B::begin_step();
  }
  ~StepScope() {
    if constexpr (detail::has_step_hooks<B>::value) B::end_step(std::uncaught_exceptions() == exceptions_);
  }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  int exceptions_ = std::uncaught_exceptions();
};

}  // namespace remat
