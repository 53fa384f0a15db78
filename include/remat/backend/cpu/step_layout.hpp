// SPDX-License-Identifier: MIT
#pragma once
// The planned layout of a training step's buffers (NOTE [Planned step layout]): what the CPU
// arena (memory.hpp) uses between begin_step() and end_step(). Pure bookkeeping, no memory of
// its own: the arena asks it where the next buffer goes and tells it what was freed.

#include <algorithm>
#include <cstddef>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

namespace remat {
namespace cpu {

// NOTE [Planned step layout]
// Why: the arena places buffers online, best fit, and best fit leaves holes: a GPT L8 d256 step
// with block checkpointing needs a 130.6 MiB extent for a 125.2 MiB peak of live bytes, and a
// GPT-2 124M step 2248 MiB for 2102 MiB. The cap (NOTE [CPU arena allocator]) keeps the
// touched bytes near the peak anyway, but only by handing pages back and faulting them in
// again, every step.
// How: training steps repeat the same allocations in the same order. Between begin_step() and
// end_step() the layout records each allocation (its size, and when it is made and freed:
// positions in the step's sequence of events). At the end of a step that did not follow the
// plan (the first, or one whose sizes changed), it plans the buffers that were made and freed
// inside the step, offline, as llm.c and ggml plan theirs: largest first, each at the lowest
// offset where it overlaps no buffer already placed that is live at the same time. For the
// steps measured this packs them into their peak of live bytes or within 0.2% of it. The arena
// then holds one block of the plan's size, and the step's k-th allocation, if its size is the
// plan's k-th, goes to its planned offset in that block. Buffers that outlive the step (the
// optimizer's state, made in the first step; the loss a caller keeps) are not planned: they go
// to the arena as before.
// Safety does not rest on the step repeating: a planned offset is used only if no live
// planned buffer overlaps it, so an allocation out of order, of another size or past the plan
// goes to the arena instead, and that step's record replaces the plan at its end. A planned
// buffer still live when the step ends (a caller kept it) simply stays where it is.
class StepLayout {
 public:
  static constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();
  /// Steps with more buffers than this are not planned (the offline placement is quadratic).
  static constexpr std::size_t kMaxPlanned = 50000;

  /// The start of a step: positions count from 0 again.
  void begin() {
    trace_.clear();
    open_.clear();
    event_ = 0;
    followed_ = true;
  }
  /// Where the step's next allocation of n bytes goes: an offset in the plan's block (which
  /// starts at `block`), or npos (the arena places it). Call record_allocation() right after.
  std::size_t offset_for(std::size_t n, const char* block) {
    const std::size_t k = trace_.size();
    if (k >= offsets_.size() || sizes_[k] != n) {
      followed_ = false;
      return npos;
    }
    const std::size_t at = offsets_[k];
    if (at == npos) return npos;  // it outlived its step when planned: the arena's
    if (overlaps_live(block + at, n)) {
      followed_ = false;
      return npos;
    }
    return at;
  }
  /// Records the step's allocation of n bytes at p; `planned`: p lies in a plan's block.
  void record_allocation(const char* p, std::size_t n, bool planned) {
    open_[p] = trace_.size();
    trace_.push_back({n, event_++, npos});
    if (planned) live_.emplace(p, n);
  }
  /// Records a free (outside a step too); `planned`: p lies in a plan's block.
  void record_free(const char* p, bool planned) {
    auto it = open_.find(p);
    if (it != open_.end()) {
      trace_[it->second].freed = event_;
      open_.erase(it);
    }
    ++event_;
    if (planned) live_.erase(p);
  }
  /// A planned buffer freed outside a step.
  void release_planned(const char* p) { live_.erase(p); }
  /// The end of a step. If it did not follow the plan, plans again from its record. Returns
  /// true when the plan changed.
  bool end() {
    if (trace_.size() < offsets_.size()) followed_ = false;  // a step that ended early
    if (followed_ && !offsets_.empty()) return false;
    plan_from_trace();
    return true;
  }
  /// A step that ended by an exception: its record is incomplete, so it plans nothing, and the
  /// next step starts over.
  void abandon() {
    trace_.clear();
    open_.clear();
  }

  /// Bytes the plan's block must hold (0: no plan).
  std::size_t block_bytes() const noexcept { return block_; }
  /// The peak of live bytes among the planned buffers: what the block would be, packed ideally.
  std::size_t planned_peak() const noexcept { return planned_peak_; }
  std::size_t planned_buffers() const noexcept { return planned_; }
  /// Planned buffers live now (in any block), and whether any lies in [lo, hi).
  std::size_t live_planned() const noexcept { return live_.size(); }
  bool any_live_in(const char* lo, const char* hi) const {
    auto it = live_.lower_bound(lo);
    return it != live_.end() && it->first < hi;
  }
  /// Forgets the plan (the arena gave its block up).
  void drop_plan() {
    offsets_.clear();
    sizes_.clear();
    block_ = planned_peak_ = planned_ = 0;
  }

 private:
  struct Event {
    std::size_t size;
    std::size_t made;   // event positions in the step
    std::size_t freed;  // npos: still live at the step's end
  };

  bool overlaps_live(const char* at, std::size_t n) const {
    auto it = live_.lower_bound(at);
    if (it != live_.end() && it->first < at + n) return true;
    if (it == live_.begin()) return false;
    --it;
    return it->first + it->second > at;
  }

  // Largest first, each at the lowest offset that overlaps no placed buffer live at the same
  // time (NOTE [Planned step layout]).
  void plan_from_trace() {
    drop_plan();
    std::vector<std::size_t> order;
    for (std::size_t k = 0; k < trace_.size(); ++k)
      if (trace_[k].freed != npos) order.push_back(k);
    if (order.empty() || order.size() > kMaxPlanned) return;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return trace_[a].size > trace_[b].size;
    });
    std::vector<std::size_t> offsets(trace_.size(), npos), placed;
    std::vector<std::pair<std::size_t, std::size_t>> taken;  // (offset, end) of the overlapping
    placed.reserve(order.size());
    std::size_t block = 0;
    for (std::size_t k : order) {
      const Event& e = trace_[k];
      taken.clear();
      for (std::size_t j : placed) {
        const Event& o = trace_[j];
        if (o.made < e.freed && e.made < o.freed) taken.emplace_back(offsets[j], offsets[j] + o.size);
      }
      std::sort(taken.begin(), taken.end());
      std::size_t at = 0;
      for (const auto& t : taken) {
        if (at + e.size <= t.first) break;
        at = std::max(at, t.second);
      }
      offsets[k] = at;
      placed.push_back(k);
      block = std::max(block, at + e.size);
    }
    // The planned buffers' own peak of live bytes, for reports and tests.
    std::vector<std::pair<std::size_t, std::ptrdiff_t>> deltas;
    for (std::size_t k : order) {
      deltas.emplace_back(trace_[k].made, static_cast<std::ptrdiff_t>(trace_[k].size));
      deltas.emplace_back(trace_[k].freed, -static_cast<std::ptrdiff_t>(trace_[k].size));
    }
    std::sort(deltas.begin(), deltas.end());
    std::ptrdiff_t live = 0, peak = 0;
    for (const auto& d : deltas) peak = std::max(peak, live += d.second);
    sizes_.resize(trace_.size());
    for (std::size_t k = 0; k < trace_.size(); ++k) sizes_[k] = trace_[k].size;
    offsets_ = std::move(offsets);
    block_ = block;
    planned_peak_ = static_cast<std::size_t>(peak);
    planned_ = order.size();
  }

  // this step's record
  std::vector<Event> trace_;
  std::unordered_map<const char*, std::size_t> open_;  // live buffers made in this step
  std::size_t event_ = 0;
  bool followed_ = true;
  // the plan: the k-th allocation's size and offset (npos: not planned)
  std::vector<std::size_t> sizes_, offsets_;
  std::size_t block_ = 0, planned_peak_ = 0, planned_ = 0;
  std::map<const char*, std::size_t> live_;  // live planned buffers: address -> size
};

}  // namespace cpu
}  // namespace remat
