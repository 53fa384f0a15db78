#pragma once
// SPDX-License-Identifier: MIT
// The CUDA caching allocator's policy as plain C++ (no CUDA): which device segments to reserve,
// how blocks are split from them and merged back. The device comes in as a template parameter,
// so the same code serves the real allocator (cudaMalloc, backend/cuda/memory.cuh) and the
// estimator's model of it (a device that only counts, backend/cuda/model.hpp), and the two
// reserve the same bytes for the same allocation trace by construction.
//
// NOTE [CUDA block pool]
// - Sizes round up to 512 bytes. Requests up to 1 MiB come from 2 MiB segments (the small
//   pool); larger ones from segments of their own size rounded up to 2 MiB, or 20 MiB for
//   requests under 10 MiB, so that mid-sized buffers share a segment (the large pool).
//   (PyTorch's CUDACachingAllocator uses the same size classes; the code is ours.)
// - A request takes the smallest free block of its pool that holds it (lowest address on ties)
//   and splits off the rest when at least 512 bytes (small pool) or more than 1 MiB (large
//   pool) are left; otherwise the block is handed out whole and its tail is counted as
//   fragmentation. A request of 10 MiB or more takes no block over 1/8 larger than itself,
//   unless the block is at least twice as large (PoolSizes::fits).
//   A freed block merges with free neighbours of its segment.
// - When no free block fits (a miss), the wholly free segments of the request's pool go back to
//   the device first, then a new segment is reserved; when the device refuses, every wholly free
//   segment is returned and the reservation is tried once more; then allocate() returns nullptr
//   and the caller throws OutOfMemory. Steps repeat their allocations, so after the second
//   or third step (where blocks lie can still shift in the second) there are no misses and no
//   device calls (the tests check it on GPT steps).
// - Measured with the estimator (Meta<CudaModel>; none, block, selective): reserved bytes settle
//   after the second or third step at 1.3-12.7% above the ledger's peak (GPT L8 and L24 d256 T256 B4;
//   GPT-2 124M at T512 B1, T1024 B1 and B4: 4.7-11.1%). Without the return on a miss, 124M
//   reached 12.6-23% and still grew at the sixth step. Closer needs pages mapped and unmapped
//   under one address range (cuMemMap), as the CPU arena does with madvise; not done.
// - Most of what was left were holes between long-lived mid-sized buffers (parameters and
//   optimizer moments of 2-10 MB in 20 MiB segments). With the parameters and each moment in
//   one flat buffer (NOTE [flat buffers], core/flat.hpp), GPT-2 124M's predicted reserved bytes
//   are 0.10-0.19% above the ledger's peak at B8 T1024 (none, block, selective; were 2.6-3.9%)
//   and 1.8-3.9% at B1 T4096 (were 6.4-11.8%): benchmarks/results/2026-12-03-predicted-h200.md.
// - What was left at B1 T4096 with `block`: a 600 MB free region (the head's, between the
//   forward and the backward) sat idle while the replays' 12-48 MB buffers missed it by the
//   1/8 rule and reserved segments of their own. Letting a large request split a block at
//   least twice its size brings the estimator's predicted reserved bytes (the peak over its
//   three steps) to 0.58-0.88% over the ledger's peak at B1 T4096 (none, block, selective; were
//   1.8-3.9%) and 0.19-0.57% at B8 T1024; at B1 T1024 `block` settles at 4.5-6.9% (was 8.3%),
//   at B4 T512 at 1.4-11.7% from step to step (was 15.3-16.0%).
// - Unlike an exact-size cache, changing shapes (a new sequence length, a re-plan) reuse and
//   split what is reserved, so the reserved bytes stay bounded by the peak of live bytes plus
//   fragmentation instead of growing with every new size.
//
// Device: `static void* reserve(std::size_t bytes)` (nullptr when out of memory, throws on other
// errors) and `static void release(void* p, std::size_t bytes) noexcept`.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace remat {
namespace cuda {

struct PoolSizes {
  static constexpr std::size_t kRound = 512;              // every block's size is a multiple
  static constexpr std::size_t kSmallRequest = 1 << 20;   // up to this: the small pool
  static constexpr std::size_t kSmallSegment = 2 << 20;   // the small pool's segments
  static constexpr std::size_t kMidRequest = 10 << 20;    // under this: a shared mid segment
  static constexpr std::size_t kMidSegment = 20 << 20;    // ... of this size
  static constexpr std::size_t kLargeRound = 2 << 20;     // larger: own segment, rounded to this

  static std::size_t round(std::size_t bytes) {
    return std::max(kRound, (bytes + kRound - 1) / kRound * kRound);
  }
  static bool small(std::size_t rounded) { return rounded <= kSmallRequest; }
  /// Bytes of the segment reserved for a (rounded) request that no free block holds.
  static std::size_t segment(std::size_t rounded) {
    if (small(rounded)) return kSmallSegment;
    if (rounded < kMidRequest) return kMidSegment;
    return (rounded + kLargeRound - 1) / kLargeRound * kLargeRound;
  }
  /// Whether a free block of `block` bytes may serve a request of `rounded` bytes: a large
  /// request (10 MiB and up) takes no block more than 1/8 larger than itself, so that big
  /// buffers do not settle into other big buffers' places and leave slivers, unless the block
  /// is at least twice its size: what is split off is then at least as large as the request
  /// and serves the next ones (a big free region is not left idle while new segments are
  /// reserved beside it).
  static bool fits(std::size_t rounded, std::size_t block) {
    return block >= rounded &&
           (rounded < kMidRequest || block - rounded <= rounded / 8 || block >= 2 * rounded);
  }
  /// Whether a block of `block` bytes given to a request of `rounded` bytes is split.
  static bool split(std::size_t block, std::size_t rounded) {
    const std::size_t rest = block - rounded;
    return small(rounded) ? rest >= kRound : rest > kSmallRequest;
  }
};

/// A device that has room for everything and only hands out distinct addresses (never
/// dereferenced): the estimator's stand-in for the GPU.
struct CountingDevice {
  static void* reserve(std::size_t bytes) {
    static std::uintptr_t next = std::uintptr_t{1} << 40;
    const std::uintptr_t p = next;
    next += (bytes + 4095) / 4096 * 4096 + 4096;
    return reinterpret_cast<void*>(p);
  }
  static void release(void*, std::size_t) noexcept {}
};

template <class Device>
class BlockPool {
 public:
  BlockPool() = default;
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;
  ~BlockPool() { release_all(); }

  /// A block of at least `bytes` (rounded to 512), or nullptr when the device has no room even
  /// after returning the cached segments.
  void* allocate(std::size_t bytes) {
    const std::size_t r = PoolSizes::round(bytes);
    const bool small = PoolSizes::small(r);
    Block* b = take_free(small, r);
    if (!b) {
      // A miss: the wholly free segments of this pool did not hold it either, so they go back
      // before a new one is reserved; the device can place the new one in their room (not a
      // pool that keeps its segments).
      if (!keep_) release_cached(small ? Which::small : Which::large);
      const std::size_t seg = PoolSizes::segment(r);
      void* p = Device::reserve(seg);
      if (!p && !keep_) {
        release_cached();
        p = Device::reserve(seg);
      }
      if (!p) return nullptr;
      blocks_.push_back(std::make_unique<Block>());
      b = blocks_.back().get();
      b->base = static_cast<char*>(p);
      b->size = seg;
      b->small = small;
      b->segment_start = true;
      reserved_ += seg;
      peak_reserved_ = std::max(peak_reserved_, reserved_);
      ++segments_;
      ++device_reserves_;
    }
    if (PoolSizes::split(b->size, r)) {
      blocks_.push_back(std::make_unique<Block>());
      Block* rest = blocks_.back().get();
      rest->base = b->base + r;
      rest->size = b->size - r;
      rest->small = b->small;
      rest->prev = b;
      rest->next = b->next;
      if (b->next) b->next->prev = rest;
      b->next = rest;
      b->size = r;
      insert_free(rest);
    }
    b->used = true;
    in_use_ += b->size;
    live_.emplace(b->base, b);
    return b->base;
  }

  /// Returns a block from allocate() to the pool (merged with free neighbours; the segment stays
  /// reserved). Unknown pointers are ignored.
  void deallocate(void* p) noexcept {
    auto it = live_.find(static_cast<char*>(p));
    if (it == live_.end()) return;
    Block* b = it->second;
    live_.erase(it);
    b->used = false;
    in_use_ -= b->size;
    if (b->prev && !b->prev->used) b = merge(b->prev, b);
    if (b->next && !b->next->used) b = merge(b, b->next);
    insert_free(b);
  }

  enum class Which { small, large, both };
  /// Returns every wholly free segment (of the small or large pool, or both) to the device;
  /// what is in use stays.
  void release_cached(Which which = Which::both) noexcept {
    if (keep_) return;
    for (auto it = free_.begin(); it != free_.end();) {
      Block* b = *it;
      const bool pick = which == Which::both || (which == Which::small) == b->small;
      if (pick && b->segment_start && !b->next) {
        it = free_.erase(it);
        Device::release(b->base, b->size);
        reserved_ -= b->size;
        --segments_;
        forget(b);
      } else {
        ++it;
      }
    }
  }

  /// While on, no segment goes back to the device (a miss reserves a new one beside the
  /// cache): during a CUDA graph's capture, whose recorded work may use any segment it touched
  /// (NOTE [CUDA graph memory], backend/cuda/graph.cuh).
  void keep_segments(bool on) noexcept { keep_ = on; }
  /// Hands out every free block whole, as if allocated (a CUDA graph holds them: nothing else
  /// may land where its replays write); each goes back with deallocate(). Returns them with
  /// their sizes.
  std::vector<std::pair<void*, std::size_t>> take_free_blocks() {
    std::vector<std::pair<void*, std::size_t>> out;
    out.reserve(free_.size());
    for (Block* b : free_) {
      b->used = true;
      in_use_ += b->size;
      live_.emplace(b->base, b);
      out.emplace_back(b->base, b->size);
    }
    free_.clear();
    return out;
  }

  std::size_t reserved_bytes() const noexcept { return reserved_; }
  std::size_t peak_reserved_bytes() const noexcept { return peak_reserved_; }
  void reset_peak_reserved() noexcept { peak_reserved_ = reserved_; }
  /// Bytes of the blocks handed out (rounded sizes, unsplit tails included).
  std::size_t in_use_bytes() const noexcept { return in_use_; }
  /// Bytes reserved but not handed out: free blocks in the segments.
  std::size_t cached_bytes() const noexcept { return reserved_ - in_use_; }
  std::size_t segments() const noexcept { return segments_; }
  /// Device reservations made so far (cudaMalloc calls for the real device).
  std::int64_t device_reserves() const noexcept { return device_reserves_; }
  std::size_t live_blocks() const noexcept { return live_.size(); }

  /// Checks the pool's invariants (for tests): blocks of a segment tile it without gaps or
  /// overlap, no two free neighbours are left unmerged, the counters add up.
  bool consistent() const {
    std::size_t reserved = 0, used = 0, free_count = 0;
    for (const auto& up : blocks_) {
      const Block* b = up.get();
      if (b->dead) continue;
      if (b->segment_start) {
        if (b->prev) return false;
        for (const Block* x = b; x; x = x->next) {
          if (x != b && x->segment_start) return false;
          reserved += x->size;
          if (x->used) used += x->size;
          if (x->next) {
            if (x->base + x->size != x->next->base || x->next->prev != x) return false;
            if (!x->used && !x->next->used) return false;
          }
          if (x->size % PoolSizes::kRound != 0 || x->small != b->small) return false;
        }
      }
      if (!b->used) ++free_count;
    }
    return reserved == reserved_ && used == in_use_ && free_count == free_.size();
  }

  /// Returns every segment to the device (blocks still in use included: for teardown).
  void release_all() noexcept {
    for (const auto& up : blocks_)
      if (!up->dead && up->segment_start) {
        std::size_t seg = 0;
        for (const Block* x = up.get(); x; x = x->next) seg += x->size;
        Device::release(up->base, seg);
      }
    blocks_.clear();
    free_.clear();
    live_.clear();
    reserved_ = in_use_ = segments_ = 0;
  }

 private:
  struct Block {
    char* base = nullptr;
    std::size_t size = 0;
    bool small = false, used = false, dead = false;
    bool segment_start = false;  // the first block of a device segment
    Block* prev = nullptr;       // neighbours in address order within the segment (a segment's
    Block* next = nullptr;       // blocks form one chain, from its first block to nullptr)
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      if (a->small != b->small) return a->small < b->small;
      if (a->size != b->size) return a->size < b->size;
      return std::less<const char*>()(a->base, b->base);
    }
  };

  Block* take_free(bool small, std::size_t r) {
    Block probe;
    probe.small = small;
    probe.size = r;
    auto it = free_.lower_bound(&probe);
    if (it == free_.end() || (*it)->small != small) return nullptr;
    if (!PoolSizes::fits(r, (*it)->size)) return nullptr;  // best fit is too big: a miss
    Block* b = *it;
    free_.erase(it);
    return b;
  }
  void insert_free(Block* b) { free_.insert(b); }
  // a and b adjacent (a first), both free, b not in free_ unless it was free before
  Block* merge(Block* a, Block* b) noexcept {
    free_.erase(a);
    free_.erase(b);
    a->size += b->size;
    a->next = b->next;
    if (b->next) b->next->prev = a;
    forget(b);
    return a;
  }
  void forget(Block* b) noexcept {
    b->dead = true;  // its slot in blocks_ is reclaimed lazily
    if (++dead_ > 64 && dead_ * 2 > blocks_.size()) {
      blocks_.erase(std::remove_if(blocks_.begin(), blocks_.end(),
                                   [](const std::unique_ptr<Block>& x) { return x->dead; }),
                    blocks_.end());
      dead_ = 0;
    }
  }

  std::vector<std::unique_ptr<Block>> blocks_;
  std::set<Block*, BySize> free_;
  std::unordered_map<char*, Block*> live_;
  std::size_t reserved_ = 0, peak_reserved_ = 0, in_use_ = 0, segments_ = 0, dead_ = 0;
  bool keep_ = false;  // keep_segments()
  std::int64_t device_reserves_ = 0;
};

}  // namespace cuda
}  // namespace remat
