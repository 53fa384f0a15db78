#pragma once
// SPDX-License-Identifier: MIT
// Learning-rate schedules: constant, or linear warmup then cosine decay (GPT-2 / nanoGPT /
// llm.c's recipe). A pure function of the update's index, so a run resumed at step s gets the
// rate it would have had: set the optimizer's lr from it before each step.
//
//   optim::LrSchedule sched = optim::LrSchedule::warmup_cosine(6e-4f, /*min*/ 6e-5f,
//                                                              /*warmup*/ 700, /*total*/ 19073);
//   opt.options().lr = sched.at(step);  // step: 0 for the first update
//   opt.step();

#include <cmath>
#include <cstdint>

#include "remat/core/error.hpp"

namespace remat {
namespace optim {

struct LrSchedule {
  enum class Kind { constant, warmup_cosine };
  Kind kind = Kind::constant;
  float lr = 1e-3f;           // the peak (and the constant) rate
  float min_lr = 0.0f;        // warmup_cosine: the rate the decay ends at
  std::int64_t warmup = 0;    // warmup_cosine: updates of linear warmup
  std::int64_t total = 0;     // warmup_cosine: the update where the decay reaches min_lr

  static LrSchedule constant(float lr) {
    LrSchedule s;
    s.lr = lr;
    check(s);
    return s;
  }
  /// lr (s + 1) / warmup for s < warmup; then min_lr + (lr - min_lr) (1 + cos(pi r)) / 2 with
  /// r = (s - warmup) / (total - warmup), reaching min_lr at s = total and staying there.
  static LrSchedule warmup_cosine(float lr, float min_lr, std::int64_t warmup, std::int64_t total) {
    LrSchedule s;
    s.kind = Kind::warmup_cosine;
    s.lr = lr;
    s.min_lr = min_lr;
    s.warmup = warmup;
    s.total = total;
    check(s);
    return s;
  }
  /// The rate of update `step` (0 for the first).
  float at(std::int64_t step) const {
    if (kind == Kind::constant) return lr;
    if (step < warmup) return lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
    if (step >= total) return min_lr;
    const double r = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
    const double coeff = 0.5 * (1.0 + std::cos(3.14159265358979323846 * r));
    return static_cast<float>(min_lr + coeff * (static_cast<double>(lr) - min_lr));
  }

 private:
  static void check(const LrSchedule& s) {
    REMAT_CHECK(std::isfinite(s.lr) && s.lr >= 0.0f, "remat::optim::LrSchedule: rate ", s.lr,
                " (expected a finite rate >= 0)");
    if (s.kind == Kind::constant) return;
    REMAT_CHECK(std::isfinite(s.min_lr) && s.min_lr >= 0.0f && s.min_lr <= s.lr,
                "remat::optim::LrSchedule: the final rate ", s.min_lr, " with the peak ", s.lr,
                " (expected 0 <= final <= peak)");
    REMAT_CHECK(s.warmup >= 0 && s.warmup < s.total, "remat::optim::LrSchedule: ", s.warmup,
                " warmup updates of ", s.total, " (expected 0 <= warmup < total: the decay "
                "needs at least one update)");
  }
};

}  // namespace optim
}  // namespace remat
