#pragma once
// SPDX-License-Identifier: MIT
// The memory ledger: every byte a backend allocates is counted here, by what it is for.
// Exact by construction: Storage (storage.hpp) reports each allocation, free and re-tag.
// One ledger per backend, reached through remat::memory_stats<B>().

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>

#include "remat/core/error.hpp"

namespace remat {

/// What a buffer is for. A Temporary becomes an Activation while a recorded op saves it for
/// backward, and goes back when the last such op has run its backward.
enum class Category : int { parameters = 0, gradients, optimizer_state, activations, temporaries };
inline constexpr int kNumCategories = 5;

inline constexpr const char* category_name(Category c) noexcept {
  switch (c) {
    case Category::parameters: return "parameters";
    case Category::gradients: return "gradients";
    case Category::optimizer_state: return "optimizer_state";
    case Category::activations: return "activations";
    case Category::temporaries: return "temporaries";
  }
  return "?";
}

/// A snapshot of the ledger. `peak` per category is that category's own high-water mark;
/// `peak_total` is the high-water mark of the sum (not the sum of the peaks).
struct MemoryStats {
  std::array<std::int64_t, kNumCategories> live{};
  std::array<std::int64_t, kNumCategories> peak{};
  std::array<std::int64_t, kNumCategories> at_peak{};  // live bytes per category when the total peaked
  std::int64_t live_total = 0;
  std::int64_t peak_total = 0;
  std::int64_t alloc_count = 0;  // all allocations since start
  std::int64_t free_count = 0;

  std::int64_t live_of(Category c) const { return live[static_cast<std::size_t>(c)]; }
  std::int64_t peak_of(Category c) const { return peak[static_cast<std::size_t>(c)]; }
  /// Bytes of category c that were live at the moment peak_total was reached.
  std::int64_t at_peak_of(Category c) const { return at_peak[static_cast<std::size_t>(c)]; }

  /// {"live_bytes":..,"peak_bytes":..,"parameters":{"live":..,"peak":..},...}
  std::string json() const {
    std::string s = "{\"live_bytes\":" + std::to_string(live_total) +
                    ",\"peak_bytes\":" + std::to_string(peak_total) +
                    ",\"alloc_count\":" + std::to_string(alloc_count) +
                    ",\"free_count\":" + std::to_string(free_count);
    for (int c = 0; c < kNumCategories; ++c) {
      const auto i = static_cast<std::size_t>(c);
      s += ",\"" + std::string(category_name(static_cast<Category>(c))) + "\":{\"live\":" +
           std::to_string(live[i]) + ",\"peak\":" + std::to_string(peak[i]) +
           ",\"at_peak\":" + std::to_string(at_peak[i]) + "}";
    }
    return s + "}";
  }
  /// A small human-readable table in MiB.
  std::string table() const {
    std::string s = "category              live MiB    peak MiB  at peak MiB\n";
    char line[128];
    for (int c = 0; c < kNumCategories; ++c) {
      const auto i = static_cast<std::size_t>(c);
      std::snprintf(line, sizeof line, "%-18s %11.2f %11.2f %12.2f\n",
                    category_name(static_cast<Category>(c)), live[i] / 1048576.0,
                    peak[i] / 1048576.0, at_peak[i] / 1048576.0);
      s += line;
    }
    std::snprintf(line, sizeof line, "%-18s %11.2f %11.2f %12.2f\n", "total",
                  live_total / 1048576.0, peak_total / 1048576.0, peak_total / 1048576.0);
    return s + line;
  }
};

namespace detail {

class Ledger {
 public:
  /// Throws OutOfMemory when `bytes` more would take the live total past the limit
  /// (remat::set_memory_limit); called before a backend allocates.
  void check_limit(Category c, std::int64_t bytes) {
    if (fault_in_ > 0 && --fault_in_ == 0) {
      ++failures_;
      throw OutOfMemory(detail::cat(
          "remat: out of memory: allocating ", bytes, " bytes (", category_name(c),
          ") failed by fault injection (remat::testing::fail_allocation_after)"));
    }
    if (limit_ <= 0 || s_.live_total + bytes <= limit_) return;
    ++failures_;
    throw OutOfMemory(detail::cat(
        "remat: out of memory: allocating ", bytes, " bytes (", category_name(c), ") with ",
        s_.live_total, " bytes live would exceed the memory limit of ", limit_, " bytes (",
        static_cast<double>(limit_) / 1048576.0, " MiB, ", limit_source_,
        "); hint: checkpoint more (a budget:<bytes> strategy plans for the limit), lower the "
        "batch size, or raise the limit"));
  }
  /// `source` says where the limit comes from, for the error message.
  void set_limit(std::int64_t bytes, std::string source = "set by remat::set_memory_limit") {
    limit_ = bytes;
    limit_source_ = std::move(source);
  }
  /// NOTE [fault injection]: the n-th allocation from now (n >= 1) throws OutOfMemory, once;
  /// 0 disarms. Every byte a backend allocates passes check_limit (Storage, kernels' scratch),
  /// so this reaches every allocation site.
  void set_fault(std::int64_t n) noexcept { fault_in_ = n; }
  std::int64_t fault_pending() const noexcept { return fault_in_; }
  /// How many allocations have failed (limit or injected fault) since start.
  std::int64_t failures() const noexcept { return failures_; }
  std::int64_t limit() const noexcept { return limit_; }

  void on_alloc(Category c, std::int64_t bytes) noexcept {
    const auto i = static_cast<std::size_t>(c);
    s_.live[i] += bytes;
    s_.live_total += bytes;
    s_.alloc_count += 1;
    bump(i);
  }
  void on_free(Category c, std::int64_t bytes) noexcept {
    s_.live[static_cast<std::size_t>(c)] -= bytes;
    s_.live_total -= bytes;
    s_.free_count += 1;
  }
  void on_move(Category from, Category to, std::int64_t bytes) noexcept {
    s_.live[static_cast<std::size_t>(from)] -= bytes;
    s_.live[static_cast<std::size_t>(to)] += bytes;
    bump(static_cast<std::size_t>(to));
  }
  /// Peaks restart from the current live bytes.
  void reset_peak() noexcept {
    s_.peak = s_.live;
    s_.peak_total = s_.live_total;
    s_.at_peak = s_.live;
  }
  const MemoryStats& stats() const noexcept { return s_; }

 private:
  void bump(std::size_t i) noexcept {
    s_.peak[i] = std::max(s_.peak[i], s_.live[i]);
    if (s_.live_total > s_.peak_total) {
      s_.peak_total = s_.live_total;
      s_.at_peak = s_.live;
    }
  }
  MemoryStats s_;
  std::int64_t limit_ = 0;     // 0: no limit
  std::string limit_source_;
  std::int64_t fault_in_ = 0;  // > 0: allocations left until the injected fault (this one fails)
  std::int64_t failures_ = 0;
};

template <class B>
Ledger& ledger() {
  static Ledger l;  // one per backend, function-local so the header stays ODR-safe
  return l;
}

// A backend whose host imposes a memory limit (the CPU: NOTE [System memory limit] in
// backend/cpu/system_memory.hpp) has `static SystemLimit system_memory_limit()`; its ledger
// starts with that limit, once, at the first Storage.
struct SystemLimit {
  std::int64_t bytes = 0;  // 0: none
  std::string source;      // for the error message
};
template <class B, class = void>
struct has_system_limit : std::false_type {};
template <class B>
struct has_system_limit<B, std::void_t<decltype(B::system_memory_limit())>> : std::true_type {};
template <class B>
void apply_system_limit() {
  if constexpr (has_system_limit<B>::value) {
    static const bool once = [] {
      const SystemLimit s = B::system_memory_limit();
      if (s.bytes > 0 && ledger<B>().limit() == 0) ledger<B>().set_limit(s.bytes, s.source);
      return true;
    }();
    (void)once;
  }
}

/// Counts a kernel's internal scratch buffer under `temporaries` for its lifetime, so the
/// ledger covers every byte a backend allocates (B may be incomplete: it is only a tag).
template <class B>
class ScratchBytes {
 public:
  explicit ScratchBytes(std::size_t bytes) : bytes_(static_cast<std::int64_t>(bytes)) {
    ledger<B>().check_limit(Category::temporaries, bytes_);
    ledger<B>().on_alloc(Category::temporaries, bytes_);
  }
  ~ScratchBytes() { ledger<B>().on_free(Category::temporaries, bytes_); }
  ScratchBytes(const ScratchBytes&) = delete;
  ScratchBytes& operator=(const ScratchBytes&) = delete;

 private:
  std::int64_t bytes_;
};

}  // namespace detail

/// The exact live and peak bytes of backend B, by category.
template <class B>
MemoryStats memory_stats() {
  return detail::ledger<B>().stats();
}
/// Restarts the peaks of backend B from the bytes live now.
template <class B>
void reset_peak_memory() {
  detail::ledger<B>().reset_peak();
}
/// Reads a byte count as people write it: "1048576", "300MiB", "1.5GiB", "2GB", "512 KiB"
/// (KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB of 1000, B or nothing is bytes).
/// `what` names the setting in the error.
inline std::int64_t parse_bytes(const std::string& text, const char* what) {
  const auto bad = [&](const char* why) {
    return Error(detail::cat(what, ": '", text, "' is not a byte count (", why,
                             "; expected e.g. 300MiB, 1.5GiB, 2GB or 1048576)"));
  };
  // Read by hand, not with std::stod: it would take leading blanks, signs, exponents, "nan"
  // and hexadecimal ("0x10MiB"), none of which a person means here.
  // Grammar: DIGITS [ "." DIGITS ] [ " " ] [ UNIT ]
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i = 0;
  double v = 0;
  while (i < text.size() && is_digit(text[i])) v = v * 10.0 + (text[i++] - '0');
  if (i == 0) throw bad("no number at its start");
  if (i < text.size() && text[i] == '.') {
    const std::size_t first = ++i;
    double scale = 0.1;
    for (; i < text.size() && is_digit(text[i]); ++i, scale /= 10.0) v += (text[i] - '0') * scale;
    if (i == first) throw bad("no digit after the decimal point");
  }
  if (i < text.size() && text[i] == ' ') ++i;
  const std::string unit = text.substr(i);
  static const std::pair<const char*, double> units[] = {
      {"", 1.0}, {"B", 1.0}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}};
  for (const auto& u : units)
    if (unit == u.first) {
      const double bytes = v * u.second;
      if (!(bytes >= 1.0 && bytes < 9.2e18)) throw bad("out of range: 1 byte to 8 EiB");
      return static_cast<std::int64_t>(bytes);
    }
  throw bad("unknown unit");
}

/// "241.2 MiB": bytes for people (binary units).
inline std::string format_bytes(std::int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (u < 4 && (v >= 1024.0 || v <= -1024.0)) {
    v /= 1024.0;
    ++u;
  }
  char b[32];
  std::snprintf(b, sizeof b, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return b;
}

/// Caps the live bytes of backend B (every category, kernels' scratch included): an
/// allocation that would pass `bytes` throws remat::OutOfMemory, as a full GPU does.
/// 0 removes the limit.
template <class B>
void set_memory_limit(std::int64_t bytes) {
  REMAT_CHECK(bytes >= 0, "remat::set_memory_limit: limit of ", bytes,
              " bytes (expected >= 0; 0 removes the limit)");
  detail::apply_system_limit<B>();  // first, so that this call replaces it
  detail::ledger<B>().set_limit(bytes);
}
/// The limit in force: set by set_memory_limit<B>, or the system's (NOTE [System memory limit]
/// in backend/cpu/system_memory.hpp); 0: none.
template <class B>
std::int64_t memory_limit() {
  detail::apply_system_limit<B>();
  return detail::ledger<B>().limit();
}

namespace testing {

/// Fault injection for tests (NOTE [fault injection]): the n-th allocation of backend B from now
/// (n >= 1; kernels' scratch included) throws remat::OutOfMemory, as a full device would; the
/// allocations after it succeed again. 0 disarms a pending fault. Count a step's allocations
/// with memory_stats<B>().alloc_count before and after it.
template <class B>
void fail_allocation_after(std::int64_t n) {
  REMAT_CHECK(n >= 0, "remat::testing::fail_allocation_after: n is ", n,
              " (expected >= 1, or 0 to disarm)");
  detail::ledger<B>().set_fault(n);
}
/// True while an injected fault has not fired yet.
template <class B>
bool allocation_fault_pending() {
  return detail::ledger<B>().fault_pending() > 0;
}

}  // namespace testing
}  // namespace remat
