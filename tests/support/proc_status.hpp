#pragma once
// SPDX-License-Identifier: MIT
// The tests' view of their own process's memory (Linux): a field of /proc/self/status, and the
// reset of the peak resident set, so a test can measure what one call costs at its peak.

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace remat_test {

/// A kB field of /proc/self/status, named with its colon ("VmRSS:", "VmHWM:", "VmSize:"); -1
/// if there is none.
inline long status_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field));
  return -1;
}

/// Makes the peak resident set (VmHWM) the current one (Linux >= 4.0); false where that is not
/// possible.
inline bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  return static_cast<bool>(f << "5" << std::flush);
}

}  // namespace remat_test
