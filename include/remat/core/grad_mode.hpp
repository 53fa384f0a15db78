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

/// RAII guard: sets grad mode for its scope and restores the previous mode after.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : prev_(detail::grad_mode_flag()) {
    detail::grad_mode_flag() = enabled;
  }
  ~GradModeGuard() { detail::grad_mode_flag() = prev_; }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

/// Ops inside its scope record nothing (evaluation, optimizer updates).
class NoGrad : public GradModeGuard {
 public:
  NoGrad() : GradModeGuard(false) {}
};

/// Grad mode on inside its scope (a checkpoint replay records even when backward was called
/// under NoGrad).
class EnableGrad : public GradModeGuard {
 public:
  EnableGrad() : GradModeGuard(true) {}
};

}  // namespace remat
