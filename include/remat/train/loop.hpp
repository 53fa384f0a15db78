#pragma once
// SPDX-License-Identifier: MIT
// A training loop's schedule, for any model: how many steps, and after which of them it
// evaluates the validation loss and writes a snapshot. Checked in its own field names: a
// program that takes the values from its command line checks them first, in its flags' words.

#include "remat/core/error.hpp"

namespace remat {
namespace train {

/// When a loop does what. Steps count from 1: `done` is the number of steps done.
struct LoopOptions {
  int steps = 0;           ///< the run's total steps (a resumed run continues up to it)
  int val_every = 0;       ///< evaluate after every N steps; 0: after the last step only
  bool validate = false;   ///< whether the loop has a validation set at all
  int snapshot_every = 0;  ///< write a snapshot after every N steps; 0: none on the way

  /// Throws remat::Error naming the field out of range; `where` starts the message.
  void check(const char* where) const {
    REMAT_CHECK(steps >= 0, where, ": LoopOptions::steps is ", steps, " (expected >= 0)");
    REMAT_CHECK(val_every >= 0, where, ": LoopOptions::val_every is ", val_every,
                " (expected >= 1, or 0 to evaluate after the last step only)");
    REMAT_CHECK(validate || val_every == 0, where, ": LoopOptions::val_every is ", val_every,
                " but LoopOptions::validate is false (expected a validation set to evaluate)");
    REMAT_CHECK(snapshot_every >= 0, where, ": LoopOptions::snapshot_every is ", snapshot_every,
                " (expected >= 1, or 0 for no snapshot on the way)");
  }
  /// True when the loop evaluates after `done` steps: every val_every, and after the last.
  bool evaluates_after(int done) const noexcept {
    return validate && ((val_every > 0 && done % val_every == 0) || done == steps);
  }
  /// True when the loop writes a snapshot after `done` steps (every snapshot_every).
  bool snapshots_after(int done) const noexcept {
    return snapshot_every > 0 && done % snapshot_every == 0;
  }
};

}  // namespace train
}  // namespace remat
