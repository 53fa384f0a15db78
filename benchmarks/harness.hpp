#pragma once
// SPDX-License-Identifier: MIT
// A small timing harness for remat's benchmarks: wall-clock steps, median/min/max.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <remat/core/segment.hpp>

namespace remat_bench {

inline double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

struct Summary {
  double median = 0, min = 0, max = 0;
};
inline Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  return s;
}

/// A field of /proc/self/status in bytes ("VmRSS": resident now, "VmHWM": its high-water mark).
inline std::int64_t rss_bytes(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  std::int64_t kb = -1;
  const std::size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') kb = std::atoll(line + n + 1);
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

/// The BLAS, LAPACK and OpenMP libraries this process has mapped (from /proc/self/maps), as a
/// JSON array of file names: which BLAS a benchmark really ran on, for its record.
inline std::string loaded_libs_json() {
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return "[]";
  std::vector<std::string> libs;
  char line[1024];
  while (std::fgets(line, sizeof line, f)) {
    const char* path = std::strchr(line, '/');
    if (!path) continue;
    std::string p(path);
    while (!p.empty() && (p.back() == '\n' || p.back() == ' ')) p.pop_back();
    const std::string name = p.substr(p.rfind('/') + 1);
    bool wanted = false;
    for (const char* key : {"blas", "lapack", "gomp", "libomp", "mkl", "dnnl"})
      wanted = wanted || name.find(key) != std::string::npos;
    if (wanted && std::find(libs.begin(), libs.end(), p) == libs.end()) libs.push_back(p);
  }
  std::fclose(f);
  std::string out = "[";
  for (std::size_t i = 0; i < libs.size(); ++i) out += (i ? ",\"" : "\"") + libs[i] + "\"";
  return out + "]";
}

/// The per-segment ledger as a JSON array.
inline std::string segments_json(const std::vector<remat::SegmentStats>& v) {
  std::string s = "[";
  char buf[512];
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto& st = v[i];
    std::snprintf(buf, sizeof buf,
                  "%s{\"name\":\"%s\",\"forwards\":%lld,\"replays\":%lld,\"boundary_bytes\":%lld,"
                  "\"kept_bytes\":%lld,\"freed_bytes\":%lld,\"remat_bytes\":%lld,\"replay_s\":%.6f}",
                  i ? "," : "", st.name.c_str(), static_cast<long long>(st.forwards),
                  static_cast<long long>(st.replays), static_cast<long long>(st.boundary_bytes),
                  static_cast<long long>(st.kept_bytes), static_cast<long long>(st.freed_bytes),
                  static_cast<long long>(st.remat_bytes), st.replay_s);
    s += buf;
  }
  return s + "]";
}

}  // namespace remat_bench
