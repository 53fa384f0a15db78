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
  std::array<std::int64_t, kNumCategories> allocs{};  // allocations made in this category
  std::int64_t live_total = 0;
  std::int64_t peak_total = 0;
  std::int64_t alloc_count = 0;  // all allocations since start
  std::int64_t free_count = 0;

  std::int64_t live_of(Category c) const { return live[static_cast<std::size_t>(c)]; }
  std::int64_t peak_of(Category c) const { return peak[static_cast<std::size_t>(c)]; }

  /// {"live_bytes":..,"peak_bytes":..,"parameters":{"live":..,"peak":..},...}
  std::string json() const {
    std::string s = "{\"live_bytes\":" + std::to_string(live_total) +
                    ",\"peak_bytes\":" + std::to_string(peak_total) +
                    ",\"alloc_count\":" + std::to_string(alloc_count) +
                    ",\"free_count\":" + std::to_string(free_count);
    for (int c = 0; c < kNumCategories; ++c) {
      const auto i = static_cast<std::size_t>(c);
      s += ",\"" + std::string(category_name(static_cast<Category>(c))) + "\":{\"live\":" +
           std::to_string(live[i]) + ",\"peak\":" + std::to_string(peak[i]) + "}";
    }
    return s + "}";
  }
  /// A small human-readable table in MiB.
  std::string table() const {
    std::string s = "category              live MiB    peak MiB\n";
    char line[128];
    for (int c = 0; c < kNumCategories; ++c) {
      const auto i = static_cast<std::size_t>(c);
      std::snprintf(line, sizeof line, "%-18s %11.2f %11.2f\n",
                    category_name(static_cast<Category>(c)), live[i] / 1048576.0,
                    peak[i] / 1048576.0);
      s += line;
    }
    std::snprintf(line, sizeof line, "%-18s %11.2f %11.2f\n", "total", live_total / 1048576.0,
                  peak_total / 1048576.0);
    return s + line;
  }
};

namespace detail {

class Ledger {
 public:
  void on_alloc(Category c, std::int64_t bytes) noexcept {
    const auto i = static_cast<std::size_t>(c);
    s_.live[i] += bytes;
    s_.live_total += bytes;
    s_.allocs[i] += 1;
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
  }
  const MemoryStats& stats() const noexcept { return s_; }

 private:
  void bump(std::size_t i) noexcept {
    s_.peak[i] = std::max(s_.peak[i], s_.live[i]);
    s_.peak_total = std::max(s_.peak_total, s_.live_total);
  }
  MemoryStats s_;
};

template <class B>
Ledger& ledger() {
  static Ledger l;  // one per backend, function-local so the header stays ODR-safe
  return l;
}

/// Counts a kernel's internal scratch buffer under `temporaries` for its lifetime, so the
/// ledger covers every byte a backend allocates (B may be incomplete: it is only a tag).
template <class B>
class ScratchBytes {
 public:
  explicit ScratchBytes(std::size_t bytes) : bytes_(static_cast<std::int64_t>(bytes)) {
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

}  // namespace remat
