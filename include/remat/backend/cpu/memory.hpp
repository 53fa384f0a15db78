#pragma once
// SPDX-License-Identifier: MIT
// CPU backend, part 1: buffers (64-byte aligned), copies, fills, and the thread settings that
// the other CPU kernels and the GEMM (Eigen or OpenBLAS) follow.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "remat/backend/cpu/step_layout.hpp"
#include "remat/backend/cpu/system_memory.hpp"
#include "remat/config.hpp"
#include "remat/core/error.hpp"
#include "remat/core/memory.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#define REMAT_CPU_ARENA_MMAP 1
#else
#define REMAT_CPU_ARENA_MMAP 0
#endif
#if defined(REMAT_HAVE_OPENBLAS)
extern "C" void openblas_set_num_threads(int);
#endif

namespace remat {
namespace cpu {

inline int& threads_ref() {
  static int n = 0;  // 0: not set by the user; the libraries' defaults apply
  return n;
}

/// Runs fn(begin, end) over [0, n) in one chunk per thread when n is large enough to pay.
template <class Fn>
void parallel_for(std::int64_t n, std::int64_t grain, Fn&& fn) {
#if defined(_OPENMP)
  const int threads = omp_get_max_threads();
  if (threads > 1 && n >= 2 * grain) {
    const std::int64_t chunks = std::min<std::int64_t>(threads, n / grain);
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(chunks))
    for (std::int64_t c = 0; c < chunks; ++c) fn(n * c / chunks, n * (c + 1) / chunks);
    return;
  }
#endif
  (void)grain;
  fn(std::int64_t{0}, n);
}

// NOTE [CPU arena allocator]
// Why: a training step frees and allocates the same buffers every step. Handing freed buffers
// back to the system makes every fresh one cost page faults (glibc mmaps large buffers: 0.83 ->
// 1.0 s per GPT step under MALLOC_MMAP_THRESHOLD_=65536). The exact-size block cache that fixed
// that kept each freed buffer for a later one of the same size, so the process held the peak of
// every size at once rather than the peak of their sum: 261 MiB resident for a 241 MiB ledger
// peak, 2.54 GiB for 2.05 GiB at GPT-2 124M shapes.
// How: buffers come from one large virtual reservation (mmap with MAP_NORESERVE: address space
// only; a page costs memory when first written). Free ranges are kept by address and by size.
// An allocation takes the smallest free range that fits (the lowest address among equals) and
// splits off the rest; a free merges the range with its free neighbours; only when nothing fits
// does the extent grow, by extending the free range at its end if there is one. Touched pages
// stay, so once a step has run no page is faulted in again, and since ranges split and merge,
// bytes freed as one size serve any other: the extent follows the peak of live bytes (what the
// ledger, core/memory.hpp, counts), not the sum of per-size peaks. Steps repeat the same
// allocations, so after the first few steps the layout, and the extent, stop changing.
// The cap: best fit still leaves holes. At GPT-2 124M shapes the logits (98 MiB) are freed just
// before the 147 MiB token-embedding gradient is allocated, and no online placement can put one
// where the other was: the extent ends 7% above the peak of live bytes. So the touched bytes are
// capped at the peak of live bytes plus a slack (0.5%, at least 512 KiB;
// REMAT_CPU_CACHE_SLACK=0.05 makes it 5%, =inf turns the cap off). Past the cap, free ranges go
// back to the system (madvise MADV_DONTNEED) from the highest address down (placement favours
// low addresses, so those are reused last); allocations prefer ranges whose pages are still
// touched, and pages given back and needed again are faulted in with one MADV_POPULATE_WRITE
// call (half the cost of faulting them one by one).
// Steps: inside begin_step()/end_step() (remat::StepScope; gpt_train_step and the trainer open
// one) the arena records the step and, from the next step on, places the step's own buffers in
// one block as planned offline from that record (NOTE [Planned step layout] in
// step_layout.hpp). Then nothing is given back and faulted in again once the first two steps
// have run: GPT L8 d256 T256 B4 with block checkpointing holds 125.3 MiB for a 125.2 MiB peak
// of live bytes, GPT-2 124M (T512 B1) 2116 MiB for 2102 MiB, and neither faults a page in again
// after warm-up. Without step scopes the cap still holds, by giving pages back every step (at
// 124M shapes about 100-200 MiB a step, 1-2% of the step's time).
//   reserved_bytes()  the bytes touched and not given back: live buffers and cached_bytes(),
//                     counted to the page; peak_reserved_bytes() is its high-water mark.
//   empty_cache()     hands every free range back and unmaps emptied extra reservations.
// A full reservation is followed by another (at least the request's size); if mmap fails, the
// buffer comes from aligned_alloc. set_caching(false) or REMAT_CPU_CACHE=0 in the environment:
// plain aligned_alloc and free (sanitizer builds). Not counted here, so not capped: what
// libraries allocate themselves (OpenBLAS's packing buffer, Eigen temporaries).
class CpuArena {
 public:
  static constexpr std::size_t kAlign = 64;
  static constexpr double kDefaultSlack = 0.005;
  static constexpr std::size_t kMinSlack = std::size_t{512} << 10;
  static std::size_t round(std::size_t bytes) {
    return (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  }

  /// The process's allocator, never destroyed (buffers freed during static destruction still
  /// find it). REMAT_CPU_CACHE=0 turns it off; REMAT_CPU_CACHE_SLACK sets the slack.
  static CpuArena& instance() {
    static CpuArena* a = [] {
      const char* on = std::getenv("REMAT_CPU_CACHE");
      const char* slack = std::getenv("REMAT_CPU_CACHE_SLACK");
      double s = kDefaultSlack;
      if (slack && *slack) {
        char* end = nullptr;
        const double v = std::strtod(slack, &end);
        if (end && *end == '\0' && v >= 0) s = v;  // a bad value keeps the default
      }
      return new CpuArena(0, s, !(on && std::string(on) == "0"));
    }();
    return *a;
  }

  /// reservation_bytes: the size of each reservation (0: the machine's physical memory).
  /// slack: touched bytes may exceed the peak of live bytes by this fraction (at least
  /// kMinSlack).
  explicit CpuArena(std::size_t reservation_bytes = 0, double slack = kDefaultSlack,
                    bool enabled = true)
      : reservation_(reservation_bytes ? reservation_bytes : default_reservation()),
        slack_(slack),
        enabled_(enabled) {}
  ~CpuArena() {
    for (const Region& g : regions_) unmap(g);
  }
  CpuArena(const CpuArena&) = delete;
  CpuArena& operator=(const CpuArena&) = delete;

  /// round(bytes) from the arena, 64-byte aligned; nullptr when no reservation can be had.
  /// Inside a step (begin_step), at the planned place when the step follows its plan.
  void* allocate(std::size_t bytes) {
    const std::size_t n = round(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    if (steps_open_ > 0 && block_.p) {
      const std::size_t at = layout_.offset_for(n, block_.p);
      if (at != StepLayout::npos && at + n <= block_.n) {
        char* p = block_.p + at;
        layout_.record_allocation(p, n, true);
        return p;
      }
    }
    char* p = allocate_online(n);
    if (p && steps_open_ > 0) layout_.record_allocation(p, n, false);
    return p;
  }
  /// Takes p back if it is the arena's (true); false if not (the caller frees it).
  bool deallocate(void* ptr, std::size_t bytes) noexcept {
    char* p = static_cast<char*>(ptr);
    std::lock_guard<std::mutex> lock(mu_);
    if (Block* b = block_of(p)) {
      try {
        if (steps_open_ > 0) layout_.record_free(p, true);
        else layout_.release_planned(p);
      } catch (...) {  // no memory for the record: this step will not be planned from
        layout_.abandon();
        layout_.release_planned(p);
      }
      if (b != &block_ && !layout_.any_live_in(b->p, b->p + b->n)) free_retired(b);
      return true;
    }
    if (!region_of(p)) return false;
    if (steps_open_ > 0) {
      try {
        layout_.record_free(p, false);
      } catch (...) {
        layout_.abandon();
      }
    }
    deallocate_online(p, round(bytes));
    return true;
  }

  /// The start and end of a training step (nested calls count once): between them, the arena
  /// records the allocations and, once a step has been recorded, places them as planned
  /// (NOTE [Planned step layout] in step_layout.hpp). `completed` false: the step ended by an
  /// exception, and its record is dropped.
  void begin_step() {
    std::lock_guard<std::mutex> lock(mu_);
    if (steps_open_++ > 0) return;
    layout_.begin();
    const std::size_t need = layout_.block_bytes();
    if (!enabled() || need == 0 || (block_.p && block_.n >= need)) return;
    retire_block();  // a larger plan: the block is replaced (freed now, or once it is empty)
    block_.p = allocate_online(need);
    block_.n = block_.p ? need : 0;
    if (!block_.p) layout_.drop_plan();
  }
  void end_step(bool completed) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    if (steps_open_ == 0 || --steps_open_ > 0) return;
    if (!completed) {
      layout_.abandon();
      return;
    }
    try {
      layout_.end();
    } catch (...) {  // no memory to plan: keep the old plan
      layout_.abandon();
    }
  }
  /// Bytes of the block that holds the planned buffers (0: none), and the planned buffers'
  /// own peak of live bytes (what the block would hold if packed perfectly).
  std::size_t step_block_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return block_.n;
  }
  std::size_t step_planned_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    return layout_.planned_peak();
  }

  /// Hands every free range back to the system; returns the bytes handed back.
  std::size_t empty_cache() noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    const std::size_t before = touched();
    layout_.drop_plan();  // the next steps record a plan of their own
    retire_block();
    for (Region& g : regions_) {  // a free range at the end of the extent lowers it
      auto last = tail_of(g);
      if (last == free_.end()) continue;
      char* a = last->first;
      char* end = page_up(g.base + g.top);
      try {
        unclean(a, end);  // its spans lie inside [a, end): none is split, nothing allocates
      } catch (...) {
        continue;
      }
      release_pages(page_up(a), end);
      g.top -= last->second.size;
      extent_ -= last->second.size;
      erase_range(last);  // its given-back bytes leave clean_bytes_ with it
    }
    for (auto it = free_.begin(); it != free_.end(); ++it) release(it);
    for (std::size_t i = regions_.size(); i-- > 1;)  // the first reservation stays
      if (regions_[i].top == 0) {
        unmap(regions_[i]);
        regions_.erase(regions_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    return before - touched();
  }

  /// Bytes the arena holds touched from the system: live buffers and cached free ranges.
  std::size_t reserved_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return touched();
  }
  /// The high-water mark of reserved_bytes() since start or reset_peak_reserved().
  std::size_t peak_reserved_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }
  void reset_peak_reserved() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_ = touched();
  }
  /// Restarts the peak of live bytes, the base of the cap, from the bytes live now (a test
  /// that wants the cap of its own workload calls it after empty_cache()).
  void reset_peak_live() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_live_ = live_;
  }
  /// Free bytes inside the touched extent, kept for reuse (touched, not live).
  std::size_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return free_bytes_ - clean_bytes_;
  }
  /// Bytes live in the arena (rounded to 64) and their high-water mark.
  std::size_t live_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return live_;
  }
  std::size_t peak_live_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_live_;
  }
  /// Bytes given back to the system under the cap and touched again since start: the page
  /// faults the cap costs.
  std::size_t refaulted_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return refaulted_;
  }
  /// Reservations held (address space, not memory) and free ranges: for tests and reports.
  std::size_t reservations() {
    std::lock_guard<std::mutex> lock(mu_);
    return regions_.size();
  }
  std::size_t free_ranges() {
    std::lock_guard<std::mutex> lock(mu_);
    return free_.size();
  }

  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }
  void set_enabled(bool on) noexcept {
    if (!on) empty_cache();
    enabled_.store(on, std::memory_order_relaxed);
  }

 private:
  struct Region {
    char* base;
    std::size_t size;
    std::size_t top;  // [base, base + top) has been handed out at some time: the extent
  };
  struct Range {
    std::size_t size;
    std::size_t clean;  // bytes of its pages given back to the system (in clean_)
  };
  using FreeIt = std::map<char*, Range>::iterator;
  struct Block {  // a step plan's block: one buffer of the arena, live while held
    char* p = nullptr;
    std::size_t n = 0;
  };

  char* allocate_online(std::size_t n) {
    char* p = take_free(n);
    if (!p) p = extend(n);
    if (!p && reserve(n)) p = extend(n);
    if (!p) return nullptr;
    live_ += n;
    peak_live_ = std::max(peak_live_, live_);
    enforce_cap();  // first: the pages given back leave before the new ones come in
    peak_ = std::max(peak_, touched());
    if (fault_in_) populate(p, p + n);
    fault_in_ = false;
    return p;
  }
  void deallocate_online(char* p, std::size_t size) noexcept {
    const Region* g = region_of(p);
    std::size_t clean = 0;
    live_ -= size;
    char* lo = p;
    auto next = free_.lower_bound(p);
    if (next != free_.end() && next->first == p + size && next->first < g->base + g->size) {
      size += next->second.size;
      clean += next->second.clean;
      next = erase_range(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first >= g->base && prev->first + prev->second.size == p) {
        lo = prev->first;
        size += prev->second.size;
        clean += prev->second.clean;
        erase_range(prev);
      }
    }
    try {
      insert_range(lo, size, clean);
    } catch (...) {  // no memory for the bookkeeping: the range is lost, not corrupted
    }
  }
  // The plan's block, or a retired one, that holds p; nullptr if none.
  Block* block_of(const char* p) noexcept {
    if (block_.p && p >= block_.p && p < block_.p + block_.n) return &block_;
    for (Block& b : retired_)
      if (p >= b.p && p < b.p + b.n) return &b;
    return nullptr;
  }
  // The block goes back to the arena now, or when its last planned buffer is freed.
  void retire_block() noexcept {
    if (!block_.p) return;
    Block b = block_;
    block_ = Block{};
    if (!layout_.any_live_in(b.p, b.p + b.n)) {
      deallocate_online(b.p, b.n);
      return;
    }
    try {
      retired_.push_back(b);
    } catch (...) {  // no memory to remember it: it stays allocated
    }
  }
  void free_retired(Block* b) noexcept {
    deallocate_online(b->p, b->n);
    retired_.erase(retired_.begin() + (b - retired_.data()));
  }

  static std::size_t page() {
#if REMAT_CPU_ARENA_MMAP
    static const std::size_t p = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    return p;
#else
    return 4096;
#endif
  }
  static char* page_down(char* p) {
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
    return p - (a % page());
  }
  static char* page_up(char* p) {
    const std::uintptr_t r = reinterpret_cast<std::uintptr_t>(p) % page();
    return r ? p + (page() - r) : p;
  }
  static std::size_t default_reservation() {
    std::size_t bytes = std::size_t{16} << 30;
#if REMAT_CPU_ARENA_MMAP && defined(_SC_PHYS_PAGES)
    const long pages = sysconf(_SC_PHYS_PAGES);
    if (pages > 0) bytes = static_cast<std::size_t>(pages) * page();
#endif
    const std::size_t gib = std::size_t{1} << 30;
    return (bytes + gib - 1) / gib * gib;
  }

  std::size_t touched() const noexcept { return extent_ - clean_bytes_; }

  const Region* region_of(const char* p) const noexcept {
    for (const Region& g : regions_)
      if (p >= g.base && p < g.base + g.size) return &g;
    return nullptr;
  }
  // The free range that ends at g's extent, or free_.end().
  FreeIt tail_of(const Region& g) {
    char* end = g.base + g.top;
    auto it = free_.lower_bound(end);
    if (it == free_.begin()) return free_.end();
    auto last = std::prev(it);
    return last->first >= g.base && last->first + last->second.size == end ? last : free_.end();
  }
  FreeIt erase_range(FreeIt it) noexcept {
    by_size_.erase({it->second.size, it->first});
    free_bytes_ -= it->second.size;
    clean_bytes_ -= it->second.clean;
    return free_.erase(it);
  }
  void insert_range(char* p, std::size_t size, std::size_t clean) {
    auto it = free_.emplace(p, Range{size, clean}).first;
    try {
      by_size_.emplace(size, p);
    } catch (...) {
      free_.erase(it);
      throw;
    }
    free_bytes_ += size;
    clean_bytes_ += clean;
  }

  // Given-back bytes in the pages that [lo, hi) touches.
  std::size_t clean_in(char* lo, char* hi) const {
    lo = page_down(lo);
    hi = page_up(hi);
    std::size_t s = 0;
    auto it = clean_.upper_bound(lo);
    if (it != clean_.begin()) --it;
    for (; it != clean_.end() && it->first < hi; ++it) {
      char* a = std::max(it->first, lo);
      char* b = std::min(it->second, hi);
      if (b > a) s += static_cast<std::size_t>(b - a);
    }
    return s;
  }
  // Forgets the given-back spans in the pages [lo, hi) touches (they are about to be written);
  // returns their bytes. The caller moves them out of the owning range's `clean`.
  std::size_t unclean(char* lo, char* hi) {
    lo = page_down(lo);
    hi = page_up(hi);
    std::size_t s = 0;
    auto it = clean_.upper_bound(lo);
    if (it != clean_.begin()) --it;
    while (it != clean_.end() && it->first < hi) {
      char* a = it->first;
      char* b = it->second;
      if (b <= lo) {
        ++it;
        continue;
      }
      if (a < lo) {  // keep [a, lo), and [hi, b) when the span reaches past hi
        if (b > hi) clean_.emplace_hint(std::next(it), hi, b);
        it->second = lo;
        s += static_cast<std::size_t>(std::min(b, hi) - lo);
        if (b > hi) break;
        ++it;
      } else if (b > hi) {  // keep [hi, b)
        s += static_cast<std::size_t>(hi - a);
        auto node = clean_.extract(it);
        node.key() = hi;
        clean_.insert(std::move(node));
        break;
      } else {
        s += static_cast<std::size_t>(b - a);
        it = clean_.erase(it);
      }
    }
    return s;
  }
  // Gives the whole pages of free range `it` back to the system.
  void release(FreeIt it) noexcept {
    Range& r = it->second;
    char* lo = page_up(it->first);
    char* hi = page_down(it->first + r.size);
    if (hi <= lo || static_cast<std::size_t>(hi - lo) == r.clean) return;
    try {
      const std::size_t had = unclean(lo, hi);  // spans inside [lo, hi): never split
      clean_bytes_ -= had;
      r.clean -= had;
      clean_.emplace(lo, hi);
    } catch (...) {  // no memory for the bookkeeping: keep the pages
      return;
    }
    release_pages(lo, hi);
    clean_bytes_ += static_cast<std::size_t>(hi - lo);
    r.clean += static_cast<std::size_t>(hi - lo);
  }
  // Past the cap (NOTE [CPU arena allocator]), free ranges go back from the highest address
  // down: placement favours low addresses, so those are the ones reused last.
  void enforce_cap() noexcept {
    const double peak = static_cast<double>(peak_live_);
    const double cap = std::max(peak * (1.0 + slack_), peak + static_cast<double>(kMinSlack));
    for (auto it = free_.end(); it != free_.begin();) {
      if (static_cast<double>(touched()) <= cap) return;
      --it;
      if (it->second.size - it->second.clean >= page()) release(it);
    }
  }

  // Splits n bytes off free range `it` (its low or high end); counts the given-back bytes that
  // the allocation touches again.
  char* place(FreeIt it, std::size_t n, bool high) {
    char* a = it->first;
    const Range r = it->second;
    char* p = high ? a + r.size - n : a;
    erase_range(it);
    const std::size_t again = unclean(p, p + n);
    refaulted_ += again;
    fault_in_ = again > 0;
    if (r.size > n) {
      try {
        insert_range(high ? a : a + n, r.size - n, r.clean - again);
      } catch (...) {  // no memory for the bookkeeping: the rest is lost, counted as touched
      }
    }
    return p;
  }
  // Best fit among the placements that touch no given-back page; failing that, the best fit.
  char* take_free(std::size_t n) {
    auto best = by_size_.lower_bound({n, nullptr});
    if (best == by_size_.end()) return nullptr;
    if (clean_bytes_ > 0) {
      for (auto c = best; c != by_size_.end(); ++c) {
        auto f = free_.find(c->second);
        char* a = f->first;
        const std::size_t size = f->second.size;
        if (f->second.clean == 0 || clean_in(a, a + n) == 0) return place(f, n, false);
        if (clean_in(a + size - n, a + size) == 0) return place(f, n, true);
      }
    }
    auto f = free_.find(best->second);
    char* a = f->first;
    const std::size_t size = f->second.size;
    const bool high = f->second.clean > 0 && clean_in(a + size - n, a + size) < clean_in(a, a + n);
    return place(f, n, high);
  }
  // Grows the extent of the first reservation with room, from its trailing free range if any.
  char* extend(std::size_t n) {
    for (Region& g : regions_) {
      auto tail = tail_of(g);
      const std::size_t have = tail == free_.end() ? 0 : tail->second.size;
      if (g.size - g.top < n - have) continue;
      char* p = g.base + g.top - have;
      if (tail != free_.end()) {
        erase_range(tail);
        refaulted_ += unclean(p, p + have);  // tail's clean already left clean_bytes_
      }
      g.top += n - have;
      extent_ += n - have;
      fault_in_ = true;
      return p;
    }
    return nullptr;
  }
  // A new reservation of at least n bytes; halves the size while mmap refuses.
  bool reserve(std::size_t n) {
#if REMAT_CPU_ARENA_MMAP
    const std::size_t need = (n + page() - 1) / page() * page();
    for (std::size_t size = std::max(need, reservation_);; size = std::max(need, size / 2)) {
      void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) {
        try {
          regions_.push_back({static_cast<char*>(p), size, 0});
        } catch (...) {
          munmap(p, size);
          return false;
        }
        return true;
      }
      if (size == need) return false;
    }
#else
    (void)n;
    return false;
#endif
  }
  // Faults in the pages of [lo, hi) in one call (Linux 5.14+; elsewhere the first writes do):
  // half the cost of faulting them one by one.
  static void populate(char* lo, char* hi) noexcept {
#if REMAT_CPU_ARENA_MMAP && defined(MADV_POPULATE_WRITE)
    lo = page_down(lo);
    hi = page_up(hi);
    if (hi > lo) madvise(lo, static_cast<std::size_t>(hi - lo), MADV_POPULATE_WRITE);
#else
    (void)lo, (void)hi;
#endif
  }
  static void release_pages(char* lo, char* hi) noexcept {
#if REMAT_CPU_ARENA_MMAP
    if (hi > lo) madvise(lo, static_cast<std::size_t>(hi - lo), MADV_DONTNEED);
#else
    (void)lo, (void)hi;
#endif
  }
  static void unmap(const Region& g) noexcept {
#if REMAT_CPU_ARENA_MMAP
    munmap(g.base, g.size);
#else
    (void)g;
#endif
  }

  std::mutex mu_;
  std::size_t reservation_;
  double slack_;
  std::atomic<bool> enabled_;
  std::vector<Region> regions_;
  std::map<char*, Range> free_;                      // free ranges by address
  std::set<std::pair<std::size_t, char*>> by_size_;  // the same, by (size, address)
  std::map<char*, char*> clean_;                     // given-back page spans [lo, hi)
  std::size_t extent_ = 0;       // sum of the reservations' tops
  std::size_t free_bytes_ = 0;   // sum of the free ranges' sizes
  std::size_t clean_bytes_ = 0;  // sum of the free ranges' given-back bytes
  std::size_t live_ = 0, peak_live_ = 0, peak_ = 0, refaulted_ = 0;
  bool fault_in_ = false;
  StepLayout layout_;          // NOTE [Planned step layout]
  int steps_open_ = 0;         // begin_step() calls not yet ended
  Block block_;                // the plan's block
  std::vector<Block> retired_;  // earlier blocks with planned buffers still live  // the last placement touches pages not resident: populate them
};

struct CpuMemory {
  static constexpr const char* name = "cpu";

  /// 64-byte aligned, from the arena (NOTE [CPU arena allocator]) unless caching is off or no
  /// reservation can be had; then from aligned_alloc.
  static void* allocate(std::size_t bytes) {
    CpuArena& arena = CpuArena::instance();
    const std::size_t rounded = CpuArena::round(bytes);
    if (arena.enabled())
      if (void* p = arena.allocate(rounded)) return p;
    if (void* p = std::aligned_alloc(CpuArena::kAlign, rounded)) return p;
    arena.empty_cache();  // give the free ranges back to the system and try once more
    if (arena.enabled())
      if (void* p = arena.allocate(rounded)) return p;
    if (void* p = std::aligned_alloc(CpuArena::kAlign, rounded)) return p;
    throw OutOfMemory(detail::cat(
        "remat::Cpu::allocate: out of memory: asked for ", bytes, " bytes (", rounded,
        " rounded to 64); neither a reservation (mmap) nor aligned_alloc had them; remat's "
        "arena holds ", arena.reserved_bytes(), " bytes, ", arena.live_bytes(),
        " of them live (hint: turn on checkpointing, e.g. block or sqrt, or lower the batch "
        "size)"));
  }
  static void deallocate(void* p, std::size_t bytes) noexcept {
    if (!CpuArena::instance().deallocate(p, bytes)) std::free(p);
  }
  /// Free bytes the allocator holds for reuse (touched, not live, not counted in the ledger).
  static std::size_t cached_bytes() { return CpuArena::instance().cached_bytes(); }
  /// Bytes the allocator holds from the system (live and cached), and their high-water mark.
  static std::size_t reserved_bytes() { return CpuArena::instance().reserved_bytes(); }
  static std::size_t peak_reserved_bytes() { return CpuArena::instance().peak_reserved_bytes(); }
  static void reset_peak_reserved() { CpuArena::instance().reset_peak_reserved(); }
  /// Bytes given back under the cap and faulted in again since start (what the cap costs).
  static std::size_t refaulted_bytes() { return CpuArena::instance().refaulted_bytes(); }
  /// Hands every cached free range back to the system.
  static void empty_cache() { CpuArena::instance().empty_cache(); }
  /// Turns the arena on or off (off also empties it; live buffers are still taken back).
  static void set_caching(bool on) { CpuArena::instance().set_enabled(on); }
  /// The host's memory limit as the ledger's default (NOTE [System memory limit] in
  /// system_memory.hpp): the room under the cgroup's limit or RLIMIT_AS less a margin; none if
  /// there is no limit or REMAT_SYSTEM_MEMORY_LIMIT=0.
  static remat::detail::SystemLimit system_memory_limit() {
    const char* off = std::getenv("REMAT_SYSTEM_MEMORY_LIMIT");
    if (off && std::string(off) == "0") return {};
    const SystemMemory s = read_system_memory();
    const std::int64_t bytes = ledger_limit_under(s);
    if (bytes <= 0) return {};
    return {bytes, remat::detail::cat("the room under ", s.source, " (", s.limit, " bytes, ",
                                      s.used, " in use) less 64 MiB and 3%; "
                                      "REMAT_SYSTEM_MEMORY_LIMIT=0 or set_memory_limit<Cpu> "
                                      "replaces it")};
  }
  /// Bytes this process can still take (checkpoint `auto`, plan::auto_budget): the least of
  /// MemAvailable (/proc/meminfo) and the room left under the memory cgroup's or RLIMIT_AS's
  /// limit (read_system_memory, NOTE [System memory limit]); 0 where none can be read.
  static std::int64_t available_memory() {
    std::int64_t avail = 0;
    if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
      char line[256];
      long long kb = 0;
      while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "MemAvailable: %lld kB", &kb) == 1) avail = kb * 1024;
      std::fclose(f);
    }
    const SystemMemory s = read_system_memory();
    if (s.limit > 0) avail = avail > 0 ? std::min(avail, s.room()) : s.room();
    return avail;
  }
  /// A training step's start and end (remat::StepScope calls them): the arena plans the
  /// step's buffers from the last step's record (NOTE [Planned step layout]).
  static void begin_step() { CpuArena::instance().begin_step(); }
  static void end_step(bool completed) noexcept { CpuArena::instance().end_step(completed); }

  static void copy_from_host(void* dst, const void* src, std::size_t bytes) {
    std::memcpy(dst, src, bytes);
  }
  static void copy_to_host(void* dst, const void* src, std::size_t bytes) {
    std::memcpy(dst, src, bytes);
  }
  static void copy(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }
  static void fill(float* x, std::int64_t n, float v) { std::fill(x, x + n, v); }
  /// x[i] = i for i < n (positions, made where they are used: nothing to upload)
  static void iota(std::int32_t* x, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<std::int32_t>(i);
  }
  static void synchronize() {}

  /// Sets the threads of our kernels (OpenMP), Eigen and OpenBLAS together.
  static void set_num_threads(int n) {
    REMAT_CHECK(n >= 1, "remat::Cpu::set_num_threads: expected at least 1 thread, got ", n);
    threads_ref() = n;
#if defined(_OPENMP)
    omp_set_num_threads(n);
#endif
    Eigen::setNbThreads(n);
#if defined(REMAT_HAVE_OPENBLAS)
    openblas_set_num_threads(n);
#endif
  }
  static int num_threads() {
#if defined(_OPENMP)
    return omp_get_max_threads();
#else
    return 1;
#endif
  }
  /// Which GEMM runs: "openblas" (Eigen with EIGEN_USE_BLAS) or "eigen".
  static const char* gemm_library() {
#if defined(EIGEN_USE_BLAS)
    return "openblas";
#else
    return "eigen";
#endif
  }
  static std::string describe() {
    return std::string("cpu: eigen ") + std::to_string(EIGEN_WORLD_VERSION) + "." +
           std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION) +
           ", gemm " + gemm_library() + ", " + std::to_string(num_threads()) + " threads" +
#if defined(_OPENMP)
           ", openmp";
#else
           ", no openmp";
#endif
  }
};

}  // namespace cpu
}  // namespace remat
