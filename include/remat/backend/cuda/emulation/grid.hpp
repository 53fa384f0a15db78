#pragma once
// SPDX-License-Identifier: MIT
// CUDA's execution model on the host, for the emulation build: a launch runs its blocks one
// after the other; the threads of a block are fibers (fiber.hpp) that switch only where CUDA
// threads would wait for each other, so races outside barriers are not modelled, but barriers
// and warps are, strictly:
// - __syncthreads() is a barrier of the whole block. Every thread must reach the same one
//   (same file and line); a thread that exits while others wait, or two barriers reached at
//   once, is a KernelFault, never a hang.
// - A warp shuffle or vote needs all 32 lanes of a full warp with a full mask, in the same
//   intrinsic; a lane that exited, waits at a barrier, or a partial mask is a KernelFault.
//   mma.sync (TF32 m16n8k8) is such an exchange too: the product is computed from the lanes'
//   fragments in the PTX ISA's layout, so a fragment loaded from the wrong place gives a wrong
//   product, as on the GPU.
// - cp.async copies land at one of the two ends of their window: in blocks that run the lowest
//   thread first they are held back until the thread's cp.async.wait_group retires their group
//   (a tile read before the wait, or before the barrier after it, reads stale bytes); in the
//   others they land at once (a buffer refilled before every warp is done with it is
//   overwritten under the readers). With a schedule seed, per block at random too.
// - The ready thread run next is the lowest-numbered one in even blocks and the highest in odd
//   ones: one warp runs as far ahead as it can, so a missing barrier lets it overwrite (or
//   read) shared memory before the other warps are done, as a real race could. The blocks of
//   a launch run in order in odd launches and in reverse in even ones (races between blocks).
//   With a schedule seed (Device::set_schedule_seed, REMAT_CUDA_EMU_SEED) blocks run in a
//   seeded random order and each block picks lowest- or highest-first at random: atomics then
//   apply in an order a GPU could choose, so an order-dependent result differs between seeds.
// - Static __shared__ memory is filled with 0xFF bytes (NaN) when a block starts where the
//   linker keeps its section: with clang. gcc ignores the section attribute on the statics of
//   templates and inline functions (every kernel), so there the bounds are null and a block
//   finds the previous block's bytes. The dynamic shared memory of each block is always NaN.
// After each launch the caching allocator's guard bytes are checked (runtime.hpp), and before
// it every pointer argument must point into device memory.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "remat/backend/cuda/emulation/fiber.hpp"
#include "remat/backend/cuda/emulation/runtime.hpp"

// The static __shared__ variables of every kernel live in one section (see intrinsics.hpp);
// the linker names its bounds. Weak: absent when nothing uses __shared__ (or under gcc's ASan).
extern "C" __attribute__((weak)) char __start_remat_emu_shared[];
extern "C" __attribute__((weak)) char __stop_remat_emu_shared[];

namespace remat {
namespace cuda {
namespace emu {

/// The built-in variables of the running CUDA thread (threadIdx, ... are macros reading them).
struct Builtins {
  uint3 thread_idx{0, 0, 0}, block_idx{0, 0, 0};
  dim3 block_dim, grid_dim;
};
inline Builtins& builtins() {
  static thread_local Builtins b;
  return b;
}

/// A source position: where a thread waits, for the messages.
struct Site {
  const char* file;
  int line;
  bool operator==(const Site& o) const { return line == o.line && std::strcmp(file, o.file) == 0; }
  std::string str() const {
    const char* slash = std::strrchr(file, '/');
    return std::string(slash ? slash + 1 : file) + ":" + std::to_string(line);
  }
};

enum class WarpOp { shfl, shfl_up, shfl_down, shfl_xor, ballot, any, all, mma };
inline const char* warp_op_name(WarpOp k) {
  switch (k) {
    case WarpOp::shfl: return "__shfl_sync";
    case WarpOp::shfl_up: return "__shfl_up_sync";
    case WarpOp::shfl_down: return "__shfl_down_sync";
    case WarpOp::shfl_xor: return "__shfl_xor_sync";
    case WarpOp::ballot: return "__ballot_sync";
    case WarpOp::any: return "__any_sync";
    case WarpOp::all: return "__all_sync";
    case WarpOp::mma: return "mma.sync.m16n8k8.tf32";
  }
  return "?";
}

/// Runs blocks: the threads of one block as fibers, with barriers and warp exchanges.
class BlockRunner {
 public:
  static BlockRunner& get() {
    static thread_local BlockRunner r;
    return r;
  }

  /// Runs `body(arg)` in every thread of block `block_idx`; throws KernelFault when the block
  /// breaks the execution model.
  void run(const char* kernel, void (*body)(const void*), const void* arg, uint3 block_idx,
           dim3 block_dim, dim3 grid_dim, void* dynamic_shared, std::size_t dynamic_bytes,
           bool lowest_first) {
    const int n = static_cast<int>(block_dim.x * block_dim.y * block_dim.z);
    kernel_ = kernel;
    body_ = body;
    arg_ = arg;
    lowest_first_ = lowest_first;
    fault_.clear();
    auto& bi = builtins();
    bi.block_idx = block_idx;
    bi.block_dim = block_dim;
    bi.grid_dim = grid_dim;
    dynamic_shared_ = dynamic_shared;
    if (dynamic_bytes) std::memset(dynamic_shared, Device::kPoison, dynamic_bytes);
    if (__start_remat_emu_shared && __stop_remat_emu_shared)
      std::memset(__start_remat_emu_shared, Device::kPoison,
                  static_cast<std::size_t>(__stop_remat_emu_shared - __start_remat_emu_shared));
    while (static_cast<int>(stacks_.size()) < n) stacks_.emplace_back(stacks_.size());
    threads_.assign(static_cast<std::size_t>(n), Thread{});
    warps_.assign(static_cast<std::size_t>((n + 31) / 32), Warp{});
    ready_.assign(static_cast<std::size_t>((n + 63) / 64), 0);
    for (int t = 0; t < n; ++t) {
      Thread& th = threads_[static_cast<std::size_t>(t)];
      th.tid = uint3{static_cast<unsigned>(t) % block_dim.x,
                     (static_cast<unsigned>(t) / block_dim.x) % block_dim.y,
                     static_cast<unsigned>(t) / (block_dim.x * block_dim.y)};
      fiber_prepare(th.ctx, stacks_[static_cast<std::size_t>(t)], &fiber_main);
      set_ready(t);
    }
    for (std::size_t w = 0; w < warps_.size(); ++w)
      warps_[w].size = std::min(32, n - static_cast<int>(w) * 32);
    live_ = n;
    for (;;) {
      const int t = pick();
      if (t >= 0) {
        enter(t, scheduler_);
        if (!fault_.empty()) break;
        continue;
      }
      if (live_ == 0) break;
      if (!resolve_stall() && fault_.empty())
        fail("remat bug: the emulation found no thread to run and none waiting");
      if (!fault_.empty()) break;
    }
    current_ = -1;
    if (!fault_.empty())
      throw KernelFault("remat CUDA emulation: kernel " + std::string(kernel_) + ", block (" +
                        std::to_string(block_idx.x) + "," + std::to_string(block_idx.y) + "," +
                        std::to_string(block_idx.z) + "): " + fault_);
  }

  void* dynamic_shared() const { return dynamic_shared_; }

  /// __syncthreads(): wait until every thread of the block is here.
  void sync_threads(Site site) {
    Thread& th = self();
    th.state = State::barrier;
    th.site = site;
    leave();
  }

  /// A warp exchange: lane l contributes `value` (and its `param`: source lane, delta or lane
  /// mask) and gets back, once all 32 lanes arrived, what the op computes for it.
  template <class T>
  T warp(WarpOp op, Site site, unsigned mask, T value, int param, int width) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "remat CUDA emulation: warp exchanges take scalars of at most 8 bytes");
    const int lane = current_ % 32;
    Warp& w = join(op, site, mask, width);
    std::uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    w.values[lane] = bits;
    w.params[lane] = param;
    arrive(w, site);
    T r;
    std::memcpy(&r, &w.results[lane], sizeof(T));
    return r;
  }

  /// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (d = A B + c): a warp-wide collective,
  /// each lane holding its fragments as the PTX ISA lays them out ("Matrix fragments for
  /// mma.m16n8k8", .tf32). Lane l, g = l / 4, t = l % 4:
  ///   a: A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]     (A 16 x 8, row-major)
  ///   b: B[t][g], B[t+4][g]                             (B 8 x 8, k x n)
  ///   c, d: C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]
  /// Only the TF32 bits of a and b count (the low 13 bits are dropped, as the tensor cores do);
  /// each d sums its 8 products in k order onto c, in fp32.
  void mma_tf32(Site site, float* d, const std::uint32_t* a, const std::uint32_t* b,
                const float* c) {
    const int lane = current_ % 32;
    Warp& w = join(WarpOp::mma, site, 0xffffffffu, 32);
    std::memcpy(w.frag[lane], a, 4 * sizeof(std::uint32_t));
    std::memcpy(w.frag[lane] + 4, b, 2 * sizeof(std::uint32_t));
    std::memcpy(w.frag[lane] + 6, c, 4 * sizeof(float));
    arrive(w, site);
    std::memcpy(d, w.mma_d[lane], 4 * sizeof(float));
  }

  /// cp.async of `bytes` (4, 8 or 16) from global to shared memory, or zeros when !valid (a
  /// source size of 0). It lands at once, or is held back until a cp.async.wait_group of this
  /// thread retires its group, as the block's schedule says (the two ends of what a GPU may do).
  void cp_async(void* dst, const void* src, int bytes, bool valid, Site site) {
    if (bytes != 4 && bytes != 8 && bytes != 16)
      fail("cp.async at " + site.str() + " of " + std::to_string(bytes) + " bytes (4, 8 or 16)");
    else if (reinterpret_cast<std::uintptr_t>(dst) % static_cast<unsigned>(bytes) != 0 ||
             (valid && reinterpret_cast<std::uintptr_t>(src) % static_cast<unsigned>(bytes) != 0))
      fail("cp.async at " + site.str() + " of " + std::to_string(bytes) +
           " bytes from or to an address not aligned to " + std::to_string(bytes) + " bytes");
    if (!fault_.empty()) leave_for_good();
    PendingCopy c{dst, bytes, {}};
    if (valid) std::memcpy(c.data, src, static_cast<std::size_t>(bytes));
    if (lowest_first_)
      self().open_copies.push_back(c);
    else
      std::memcpy(dst, c.data, static_cast<std::size_t>(bytes));
  }
  /// cp.async.commit_group: this thread's copies since the last commit form a group.
  void cp_async_commit() {
    Thread& th = self();
    th.copy_groups.push_back(std::move(th.open_copies));
    th.open_copies.clear();
  }
  /// cp.async.wait_group n: this thread's groups but the newest n land.
  void cp_async_wait(int newest_left) {
    Thread& th = self();
    while (static_cast<int>(th.copy_groups.size()) > newest_left) {
      for (const PendingCopy& c : th.copy_groups.front())
        std::memcpy(c.dst, c.data, static_cast<std::size_t>(c.bytes));
      th.copy_groups.erase(th.copy_groups.begin());
    }
  }

 private:
  enum class State : unsigned char { ready, running, barrier, warp, done };
  struct PendingCopy {
    void* dst;
    int bytes;
    unsigned char data[16];
  };
  struct Thread {
    FiberContext ctx;
    State state = State::ready;
    Site site{"", 0};
    uint3 tid{0, 0, 0};
    std::vector<PendingCopy> open_copies;  // cp.async not committed yet
    std::vector<std::vector<PendingCopy>> copy_groups;  // committed, oldest first
  };
  struct Warp {
    int size = 32;
    std::uint32_t arrived = 0;
    WarpOp op = WarpOp::shfl;
    Site site{"", 0};
    int width = 32;
    std::uint64_t values[32] = {}, results[32] = {};
    int params[32] = {};
    std::uint32_t frag[32][10] = {};  // mma: a (4), b (2), c (4) of each lane
    float mma_d[32][4] = {};
  };

  static std::string hex(unsigned v) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%08x", v);
    return b;
  }
  std::string who(int t) const {
    const uint3 d = threads_[static_cast<std::size_t>(t)].tid;
    return "thread (" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
  }
  Thread& self() { return threads_[static_cast<std::size_t>(current_)]; }

  void set_ready(int t) {
    threads_[static_cast<std::size_t>(t)].state = State::ready;
    ready_[static_cast<std::size_t>(t) / 64] |= std::uint64_t{1} << (t % 64);
  }
  int pick() {
    const int words = static_cast<int>(ready_.size());
    for (int i = 0; i < words; ++i) {
      const int k = lowest_first_ ? i : words - 1 - i;
      const std::uint64_t w = ready_[static_cast<std::size_t>(k)];
      if (!w) continue;
      const int bit = lowest_first_ ? __builtin_ctzll(w) : 63 - __builtin_clzll(w);
      ready_[static_cast<std::size_t>(k)] &= ~(std::uint64_t{1} << bit);
      return k * 64 + bit;
    }
    return -1;
  }
  // Switches from `from` into thread t (running from here on).
  void enter(int t, FiberContext& from, bool from_finished = false) {
    current_ = t;
    Thread& th = threads_[static_cast<std::size_t>(t)];
    th.state = State::running;
    builtins().thread_idx = th.tid;
    fiber_switch(from, th.ctx, from_finished);
  }
  // The running thread waits (its state is set): the next ready thread runs, or the scheduler
  // when none is.
  void leave() {
    Thread& th = self();
    const int next = pick();
    if (next >= 0) {
      enter(next, th.ctx);
    } else {
      fiber_switch(th.ctx, scheduler_);
    }
    // resumed: whoever switched here set current_ and threadIdx
  }
  [[noreturn]] void leave_for_good() {
    Thread& th = self();
    const int next = fault_.empty() ? pick() : -1;
    if (next >= 0)
      enter(next, th.ctx, true);
    else
      fiber_switch(th.ctx, scheduler_, true);
    __builtin_trap();  // a finished fiber is never resumed
  }
  void fail(std::string what) {
    if (fault_.empty()) fault_ = std::move(what);
  }

  static void fiber_main() {
    BlockRunner& r = get();
    fiber_entered(r.scheduler_);
    try {
      r.body_(r.arg_);
    } catch (const std::exception& e) {
      r.fail(r.who(r.current_) + " threw: " + e.what());
    } catch (...) {
      r.fail(r.who(r.current_) + " threw");
    }
    r.self().state = State::done;
    --r.live_;
    r.leave_for_good();
  }

  // A lane joins its warp's exchange `op` (the checks: full warp, full mask, the same op).
  Warp& join(WarpOp op, Site site, unsigned mask, int width) {
    const int t = current_, lane = t % 32;
    Warp& w = warps_[static_cast<std::size_t>(t / 32)];
    if (mask != 0xffffffffu)
      fail(std::string(warp_op_name(op)) + " at " + site.str() + " with mask " + hex(mask) +
           ": the emulation requires full warps (mask 0xffffffff)");
    else if (w.size != 32)
      fail(std::string(warp_op_name(op)) + " at " + site.str() + " in warp " +
           std::to_string(t / 32) + " of only " + std::to_string(w.size) +
           " threads: a full mask names lanes that do not exist (blockDim not a multiple of 32)");
    else if (width < 1 || width > 32 || (width & (width - 1)) != 0)
      fail(std::string(warp_op_name(op)) + " at " + site.str() + ": width " +
           std::to_string(width) + " is not a power of two up to 32");
    else if (w.arrived != 0 && (w.op != op || w.width != width))
      fail("lane " + std::to_string(lane) + " of warp " + std::to_string(t / 32) + " is in " +
           warp_op_name(op) + " at " + site.str() + " while other lanes wait in " +
           warp_op_name(w.op) + " at " + w.site.str());
    if (!fault_.empty()) leave_for_good();
    if (w.arrived == 0) {
      w.op = op;
      w.site = site;
      w.width = width;
    }
    return w;
  }
  // The lane has left its operands in w: it waits for the rest of the warp, or, as the last
  // one, runs the exchange for all.
  void arrive(Warp& w, Site site) {
    const int t = current_;
    w.arrived |= 1u << (t % 32);
    if (w.arrived != 0xffffffffu) {
      Thread& th = self();
      th.state = State::warp;
      th.site = site;
      leave();
    } else {
      complete(w, t / 32);
    }
  }
  static float tf32_input(std::uint32_t bits) {
    bits &= ~0x1fffu;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  static void mma_complete(Warp& w) {
    float A[16][8], B[8][8], C[16][8];
    for (int l = 0; l < 32; ++l) {
      const int g = l / 4, t = l % 4;
      const std::uint32_t* f = w.frag[l];
      A[g][t] = tf32_input(f[0]);
      A[g + 8][t] = tf32_input(f[1]);
      A[g][t + 4] = tf32_input(f[2]);
      A[g + 8][t + 4] = tf32_input(f[3]);
      B[t][g] = tf32_input(f[4]);
      B[t + 4][g] = tf32_input(f[5]);
      std::memcpy(&C[g][2 * t], f + 6, 2 * sizeof(float));
      std::memcpy(&C[g + 8][2 * t], f + 8, 2 * sizeof(float));
    }
    for (int l = 0; l < 32; ++l) {
      const int g = l / 4, t = l % 4;
      for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
        float s = C[row][col];
        for (int k = 0; k < 8; ++k) s += A[row][k] * B[k][col];
        w.mma_d[l][e] = s;
      }
    }
  }

  void complete(Warp& w, int warp) {
    const int width = w.width, mask = width - 1;
    const int* p = w.params;
    std::uint32_t ballot = 0;
    switch (w.op) {
      case WarpOp::shfl:
        for (int l = 0; l < 32; ++l) w.results[l] = w.values[(l & ~mask) + (p[l] & mask)];
        break;
      case WarpOp::shfl_up:
        for (int l = 0; l < 32; ++l) w.results[l] = w.values[(l & mask) >= p[l] ? l - p[l] : l];
        break;
      case WarpOp::shfl_down:
        for (int l = 0; l < 32; ++l) w.results[l] = w.values[(l & mask) + p[l] < width ? l + p[l] : l];
        break;
      case WarpOp::shfl_xor:  // a lane of a later segment is out of reach: own value
        for (int l = 0; l < 32; ++l) {
          const int src = l ^ p[l];
          w.results[l] = w.values[src >= 0 && src < (l & ~mask) + width ? src : l];
        }
        break;
      case WarpOp::ballot:
      case WarpOp::any:
      case WarpOp::all:
        for (int l = 0; l < 32; ++l)
          if (w.values[l] != 0) ballot |= 1u << l;
        for (int l = 0; l < 32; ++l)
          w.results[l] = w.op == WarpOp::ballot ? ballot
                         : w.op == WarpOp::any  ? (ballot != 0)
                                                : (ballot == 0xffffffffu);
        break;
      case WarpOp::mma:
        mma_complete(w);
        break;
    }
    w.arrived = 0;
    // every lane of the warp but the running one is ready again (a warp is 32 aligned bits)
    const int base = warp * 32;
    for (int l = 0; l < 32; ++l) threads_[static_cast<std::size_t>(base + l)].state = State::ready;
    ready_[static_cast<std::size_t>(base / 64)] |=
        (std::uint64_t{0xffffffffu} << (base % 64)) & ~(std::uint64_t{1} << (current_ % 64));
    self().state = State::running;
  }

  // Nothing is ready: either every live thread waits at one barrier (release it), or the block
  // cannot go on (a fault naming who waits where). True when a barrier was released.
  bool resolve_stall() {
    const int n = static_cast<int>(threads_.size());
    int waiting = -1, exited = -1;
    for (int t = 0; t < n; ++t) {
      const Thread& th = threads_[static_cast<std::size_t>(t)];
      if (th.state == State::warp) {
        const Warp& w = warps_[static_cast<std::size_t>(t / 32)];
        std::string missing;
        for (int l = 0; l < 32; ++l) {
          if (w.arrived & (1u << l)) continue;
          const Thread& o = threads_[static_cast<std::size_t>((t / 32) * 32 + l)];
          missing = "lane " + std::to_string(l) +
                    (o.state == State::done ? " has exited"
                                            : " waits at __syncthreads() at " + o.site.str());
          break;
        }
        fail("lanes of warp " + std::to_string(t / 32) + " wait in " + warp_op_name(w.op) + " at " +
             w.site.str() + ", but " + missing + " (a warp exchange needs every lane of the warp)");
        return false;
      }
      if (th.state == State::done && exited < 0) exited = t;
      if (th.state == State::barrier) {
        if (waiting < 0) waiting = t;
        else if (!(th.site == threads_[static_cast<std::size_t>(waiting)].site)) {
          fail(who(waiting) + " waits at __syncthreads() at " +
               threads_[static_cast<std::size_t>(waiting)].site.str() + " and " + who(t) +
               " at another one, " + th.site.str() + " (divergent barrier)");
          return false;
        }
      }
    }
    if (waiting < 0) return false;
    if (exited >= 0) {
      fail(who(exited) + " has exited, but " + who(waiting) + " waits at __syncthreads() at " +
           threads_[static_cast<std::size_t>(waiting)].site.str() +
           " (every thread of the block must reach each barrier)");
      return false;
    }
    for (int t = 0; t < n; ++t)
      if (threads_[static_cast<std::size_t>(t)].state == State::barrier) set_ready(t);
    return true;
  }

  const char* kernel_ = "";
  void (*body_)(const void*) = nullptr;
  const void* arg_ = nullptr;
  bool lowest_first_ = true;
  void* dynamic_shared_ = nullptr;
  std::vector<FiberStack> stacks_;
  std::vector<Thread> threads_;
  std::vector<Warp> warps_;
  std::vector<std::uint64_t> ready_;
  int current_ = -1, live_ = 0;
  FiberContext scheduler_;
  std::string fault_;
};

template <class P>
void check_argument(const char* kernel, int i, const P& p) {
  if constexpr (std::is_pointer<P>::value && !std::is_function<std::remove_pointer_t<P>>::value) {
    const std::string why = device().check_pointer(static_cast<const void*>(p));
    if (!why.empty())
      throw KernelFault("remat CUDA emulation: kernel " + std::string(kernel) + ": argument " +
                        std::to_string(i) + " " + why);
  } else {
    (void)kernel;
    (void)i;
    (void)p;
  }
}

/// A step of the SplitMix64 generator: the schedule's random numbers.
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
/// The order in which a launch runs its `blocks` blocks (linear indices): with seed 0, forwards
/// in odd launches and backwards in even ones; otherwise a Fisher-Yates shuffle drawn from
/// (seed, launch).
inline std::vector<unsigned long long> block_order(unsigned long long blocks, std::int64_t launch,
                                                   std::uint64_t seed) {
  std::vector<unsigned long long> order(blocks);
  const bool backwards = launch % 2 == 0;
  for (unsigned long long i = 0; i < blocks; ++i) order[i] = backwards ? blocks - 1 - i : i;
  if (seed == 0) return order;
  std::uint64_t r = splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(launch)));
  for (unsigned long long i = blocks; i > 1; --i) {
    r = splitmix64(r);
    std::swap(order[i - 1], order[r % i]);
  }
  return order;
}

/// kernel<<<grid, block, smem, stream>>>(args...) on the host (on a capturing stream: checked
/// and recorded, runtime.hpp). Launch errors (a bad
/// configuration, no device) are left for cudaGetLastError() as CUDA does; a broken execution
/// model throws KernelFault.
template <class... P, class... A>
void launch(void (*kernel)(P...), const char* name, dim3 grid, dim3 block, std::size_t smem,
            cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "remat CUDA emulation: wrong number of kernel arguments");
  Device& dev = device();
  if (dev.faults().device_count == 0) {
    dev.record(cudaErrorNoDevice);
    return;
  }
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
      grid.z == 0 || grid.y > 65535 || grid.z > 65535 || smem > (48u << 10)) {
    dev.record(cudaErrorInvalidConfiguration);
    return;
  }
  if (stream && stream->capture) {  // recorded with copies of its arguments, run by cudaGraphLaunch
    std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
    std::apply([&](const auto&... p) {
      int i = 0;
      (check_argument(name, i++, p), ...);
    }, params);
    dev.defer(stream, [kernel, name, grid, block, smem, params] {
      std::apply([&](const auto&... p) { launch(kernel, name, grid, block, smem, nullptr, p...); },
                 params);
    });
    return;
  }
  dev.count_launch(name);
  if (dev.faults().launch_fault_in >= 0 && dev.faults().launch_fault_in-- == 0) {
    dev.set_pending_fault(dev.faults().launch_error);  // seen at the next synchronization
    return;
  }
  struct Frame {
    void (*kernel)(P...);
    std::tuple<std::decay_t<P>...> params;
  };
  const Frame frame{kernel, std::tuple<std::decay_t<P>...>(std::forward<A>(args)...)};
  std::apply([&](const auto&... p) {
    int i = 0;
    (check_argument(name, i++, p), ...);
  }, frame.params);
  std::unique_ptr<unsigned char[]> dyn(smem ? new unsigned char[smem] : nullptr);
  auto body = [](const void* f) {
    const Frame& fr = *static_cast<const Frame*>(f);
    std::apply(fr.kernel, fr.params);  // each thread gets its own copies of the parameters
  };
  BlockRunner& runner = BlockRunner::get();
  // Blocks run first to last in odd launches and last to first in even ones: a race between
  // blocks (two writing one place, one reading what another writes) shows in one of the two.
  // With a schedule seed, in a random order of (seed, launch number) instead.
  const unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
  const std::vector<unsigned long long> order =
      block_order(blocks, dev.launches(), dev.schedule_seed());
  std::uint64_t coin = splitmix64(dev.schedule_seed() ^ (0x5851F42D4C957F2Dull * dev.launches()));
  for (unsigned long long i = 0; i < blocks; ++i) {
    const unsigned long long b = order[i];
    const uint3 idx{static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                    static_cast<unsigned>(b / (1ull * grid.x * grid.y))};
    bool lowest_first = ((idx.x + idx.y + idx.z) & 1u) == 0;
    if (dev.schedule_seed() != 0) {
      coin = splitmix64(coin);
      lowest_first = (coin >> 63) != 0;
    }
    runner.run(name, body, &frame, idx, block, grid, dyn.get(), smem, lowest_first);
  }
  const std::string guard = dev.broken_guard();
  if (!guard.empty())
    throw KernelFault("remat CUDA emulation: kernel " + std::string(name) + ": " + guard);
}

}  // namespace emu
}  // namespace cuda
}  // namespace remat
