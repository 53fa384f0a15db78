#pragma once
// SPDX-License-Identifier: MIT
// What a training loop needs around its snapshots, for any model: the check that the weights
// are still finite before anything is written (NOTE [diverged run]), and the record of the last
// snapshot written, which messages name. The snapshot file itself is io::save_state's.

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "remat/core/tensor.hpp"

namespace remat {
namespace train {

// NOTE [diverged run]: a step whose loss is not finite stops the run with an error naming the
// step, and nothing is written after it: the last snapshot (written from finite weights) stays
// as it was. A step can also make the weights non-finite while its loss (computed before the
// update) was finite, so every snapshot and save checks the weights first.
/// The name of the first parameter holding a NaN or an infinity, or "" when all are finite.
/// Reads through a host buffer of 1 Mi floats, so a device's weights are checked too and no
/// backend holds a second copy of a whole tensor for it.
template <class B>
std::string nonfinite_parameter(const std::vector<std::pair<std::string, Tensor<B>>>& named) {
  std::vector<float> buf(std::size_t{1} << 20);
  for (const auto& [name, t] : named) {
    const float* p = t.template data<float>();
    float acc = 0.0f;  // x * 0 is 0 for a finite x, NaN for an infinity or a NaN: one sum tells
    for (std::int64_t at = 0; at < t.numel(); at += static_cast<std::int64_t>(buf.size())) {
      const std::int64_t n = std::min<std::int64_t>(t.numel() - at, static_cast<std::int64_t>(buf.size()));
      B::copy_to_host(buf.data(), p + at, static_cast<std::size_t>(n) * sizeof(float));
      for (std::int64_t i = 0; i < n; ++i) acc += buf[static_cast<std::size_t>(i)] * 0.0f;
    }
    if (acc != 0.0f) return name;
  }
  return "";
}

/// The last snapshot of a run: the one it resumed from, then each one it writes.
struct SnapshotLog {
  int step = -1;     ///< its step; -1: none yet
  std::string path;  ///< where it is ("" for none)

  /// "; the last good snapshot is 'PATH' (step N)", or "" when there is none: the end of a
  /// message about a run that cannot go on.
  std::string last_good() const {
    if (path.empty()) return "";
    return "; the last good snapshot is '" + path + "' (step " + std::to_string(step) + ")";
  }
};

}  // namespace train
}  // namespace remat
