#pragma once
// SPDX-License-Identifier: MIT
// Grad mode: when off (inside a NoGrad scope), ops compute but record nothing on the tape.

namespace remat {

namespace detail {
inline bool& grad_mode_flag() {
  thread_local bool enabled = true;
  return enabled;
}
}  // namespace detail

/// True unless a NoGrad guard is alive on this thread.
inline bool grad_enabled() { return detail::grad_mode_flag(); }

/// RAII guard: ops inside its scope record nothing (evaluation, optimizer updates).
class NoGrad {
 public:
  NoGrad() : prev_(detail::grad_mode_flag()) { detail::grad_mode_flag() = false; }
  ~NoGrad() { detail::grad_mode_flag() = prev_; }
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool prev_;
};

/// RAII guard: grad mode on inside its scope (a checkpoint replay records even when backward
/// was called under NoGrad).
class EnableGrad {
 public:
  EnableGrad() : prev_(detail::grad_mode_flag()) { detail::grad_mode_flag() = true; }
  ~EnableGrad() { detail::grad_mode_flag() = prev_; }
  EnableGrad(const EnableGrad&) = delete;
  EnableGrad& operator=(const EnableGrad&) = delete;

 private:
  bool prev_;
};

}  // namespace remat
