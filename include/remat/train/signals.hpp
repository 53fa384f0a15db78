#pragma once
// SPDX-License-Identifier: MIT
// Ctrl-C and a scheduler's SIGTERM never lose a run: the first signal lets the current step
// finish (the loop then writes what it trained and exits), a second one aborts at once without
// leaving temporary files (NOTE [interrupt]). Under data parallel the ranks agree after each
// step whether to stop, so that all of them leave the loop after the same step.
//
//   train::install_stop_handlers({"run.state"}, "my_trainer", "my_trainer: stopping after this step");
//   train::StopAgreement stop(comm);
//   for (int step = 0; step < steps && stop.signal() == 0; ++step) { ...; stop.agree(); }

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "remat/dist/comm.hpp"
#include "remat/train/output.hpp"

namespace remat {
namespace train {

// NOTE [interrupt]: the first SIGINT or SIGTERM only records the signal (a sig_atomic_t, the
// one thing a handler may safely touch) and writes a notice with write(). The training loop
// sees it between steps: the current step finishes, the loop writes its snapshot and weights,
// and the process exits 128 + the signal (130 for SIGINT, 143 for SIGTERM). A second signal
// aborts at once: the handler removes the temporaries this process may be writing (their names
// are fixed in advance: "<target>.tmp.<pid>", io/atomic_file.hpp, for each target and its
// fallbacks) with unlink(), which is async-signal-safe, and dies of the signal by its default
// action. The targets themselves are only ever replaced by rename(), so they stay whole.
namespace detail {
struct StopState {
  static constexpr int kMaxTemporaries = 8;
  volatile std::sig_atomic_t signal;
  char notice[512];
  std::size_t notice_size;
  char temporaries[kMaxTemporaries][4096];
};
// Constant-initialized (all zero), so the handler may read it at any time.
inline StopState& stop_state() noexcept {
  static StopState state{};
  return state;
}

inline void on_stop_signal(int sig) {
  StopState& s = stop_state();
  if (s.signal == 0) {
    s.signal = sig;
    const ssize_t n = ::write(STDERR_FILENO, s.notice, s.notice_size);
    (void)n;
    return;
  }
  for (auto& p : s.temporaries)
    if (p[0]) ::unlink(p);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}
}  // namespace detail

/// The first SIGINT or SIGTERM received since install_stop_handlers(), or 0.
inline int stop_signal() noexcept { return detail::stop_state().signal; }

/// The name of a stop signal for messages: "SIGINT", "SIGTERM", or "a signal".
inline const char* stop_signal_name(int sig) noexcept {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

/// Installs the handlers of NOTE [interrupt] for SIGINT and SIGTERM. `targets` are the files
/// the run may be writing when a second signal comes (empty ones are skipped): their
/// temporaries, and those of their fallbacks (fallback_paths(target, program)), are removed
/// then. `notice` is written to standard error on the first signal (on a line of its own). A
/// signal ignored when the process started stays ignored, as shells expect (a background job
/// of a script must not stop on the terminal's Ctrl-C).
inline void install_stop_handlers(const std::vector<std::string>& targets, const std::string& program,
                                  const std::string& notice) {
  detail::StopState& s = detail::stop_state();
  const std::string line = "\n" + notice + "\n";
  s.notice_size = std::min(line.size(), sizeof s.notice);
  std::memcpy(s.notice, line.data(), s.notice_size);
  int k = 0;
  for (const std::string& t : targets) {
    if (t.empty()) continue;
    std::vector<std::string> all{t};
    for (const std::string& p : fallback_paths(t, program)) all.push_back(p);
    for (const std::string& p : all) {
      const std::string tmp = p + ".tmp." + std::to_string(::getpid());
      if (k < detail::StopState::kMaxTemporaries && tmp.size() < sizeof s.temporaries[0])
        std::memcpy(s.temporaries[k++], tmp.c_str(), tmp.size() + 1);
    }
  }
  struct sigaction sa {};
  sa.sa_handler = detail::on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (const int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
}

// NOTE [stop agreement]: under data parallel a signal on any rank ends the run after the same
// step on all of them. They stop on the signal they agreed on in an all-gather after each step,
// never on their own view of it: a signal that lands on one rank between that gather and the
// loop's test must not let it leave while the others start the next step and wait for it in a
// collective. One process needs no gather: it stops on its own signal.
/// The ranks' agreement to stop (NOTE [stop agreement]).
class StopAgreement {
 public:
  explicit StopAgreement(dist::Comm& comm) : comm_(&comm) {}
  /// Every rank, after each step (a collective when there are several ranks).
  void agree() {
    if (comm_->size() == 1) return;
    for (const std::uint64_t v : comm_->all_gather_u64({static_cast<std::uint64_t>(stop_signal())}))
      if (v != 0 && agreed_ == 0) agreed_ = static_cast<int>(v);
    if (agreed_ != 0 && detail::stop_state().signal == 0) detail::stop_state().signal = agreed_;
  }
  /// The signal to stop on, 0 to go on.
  int signal() const noexcept { return comm_->size() == 1 ? stop_signal() : agreed_; }

 private:
  dist::Comm* comm_;
  int agreed_ = 0;
};

}  // namespace train
}  // namespace remat
