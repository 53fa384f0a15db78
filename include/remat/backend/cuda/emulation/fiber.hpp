#pragma once
// SPDX-License-Identifier: MIT
// Cooperative fibers for the CUDA emulation: each thread of the running block is a fiber on a
// pooled stack with a guard page below it. A switch saves the callee-saved registers on the old
// stack and restores them from the new one (x86-64: a dozen instructions, no system call;
// elsewhere, or with REMAT_CUDA_EMU_UCONTEXT defined: ucontext, correct but slower). Under
// AddressSanitizer every switch is announced (__sanitizer_start/finish_switch_fiber) and a
// stack is unpoisoned before it is reused.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define REMAT_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REMAT_EMU_ASAN 1
#endif
#endif
#if defined(REMAT_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__) || defined(REMAT_CUDA_EMU_UCONTEXT)
#include <ucontext.h>
#define REMAT_EMU_USE_UCONTEXT 1
#endif

namespace remat {
namespace cuda {
namespace emu {

/// A fiber's stack: mmap'd, with one inaccessible page below it, so that an overflow faults
/// instead of corrupting the neighbouring fiber.
class FiberStack {
 public:
#if defined(REMAT_EMU_ASAN)
  static constexpr std::size_t kBytes = 512 << 10;  // ASan frames are larger
#else
  static constexpr std::size_t kBytes = 128 << 10;
#endif
  /// `index`: the fiber's number; it staggers the stack tops, which would otherwise share their
  /// address bits below 128 KiB and fight over the same cache sets at every switch.
  explicit FiberStack(std::size_t index = 0) : skew_((index * 17 % 64) * 64) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    void* m = mmap(nullptr, kBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    mprotect(m, page, PROT_NONE);
    map_ = m;
    map_bytes_ = kBytes + page;
    bottom_ = static_cast<char*>(m) + page;
  }
  ~FiberStack() {
    if (map_) munmap(map_, map_bytes_);
  }
  FiberStack(FiberStack&& o) noexcept
      : map_(o.map_), map_bytes_(o.map_bytes_), bottom_(o.bottom_), skew_(o.skew_) {
    o.map_ = nullptr;
  }
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  FiberStack& operator=(FiberStack&&) = delete;
  char* bottom() const noexcept { return bottom_; }
  char* top() const noexcept { return bottom_ + kBytes - skew_; }  // 64-byte aligned

 private:
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  char* bottom_ = nullptr;
  std::size_t skew_ = 0;
};

/// Where a suspended fiber (or the scheduler) resumes.
struct FiberContext {
#if defined(REMAT_EMU_USE_UCONTEXT)
  ucontext_t uc;
#else
  void* sp = nullptr;  // its callee-saved registers and resume address lie here
#endif
  const void* stack_bottom = nullptr;  // for ASan: the stack this context runs on
  std::size_t stack_size = 0;
  void* fake_stack = nullptr;
};

#if !defined(REMAT_EMU_USE_UCONTEXT)
// switch_stack(save, load): pushes rbp rbx r12-r15, stores rsp in *save, loads rsp from load,
// pops the six registers saved there and returns to the address below them (System V ABI:
// every other register is caller-saved, so the compiler already keeps what it needs). `noipa`
// (gcc): the caller must not learn from the body which registers it clobbers (IPA-RA), since
// the body resumes another fiber that clobbers them all.
#if defined(__clang__)
#define REMAT_EMU_SWITCH_ATTRS naked, noinline
#else
#define REMAT_EMU_SWITCH_ATTRS naked, noinline, noipa
#endif
__attribute__((REMAT_EMU_SWITCH_ATTRS)) inline void switch_stack(void** /*save*/, void* /*load*/) {
  asm volatile(
      "pushq %rbp\n\t"
      "pushq %rbx\n\t"
      "pushq %r12\n\t"
      "pushq %r13\n\t"
      "pushq %r14\n\t"
      "pushq %r15\n\t"
      "movq %rsp, (%rdi)\n\t"
      "movq %rsi, %rsp\n\t"
      "popq %r15\n\t"
      "popq %r14\n\t"
      "popq %r13\n\t"
      "popq %r12\n\t"
      "popq %rbx\n\t"
      "popq %rbp\n\t"
      "ret\n\t");
}
#endif

/// Prepares `c` to run `entry` (which never returns) on `stack` at its first resume.
inline void fiber_prepare(FiberContext& c, const FiberStack& stack, void (*entry)()) {
#if defined(REMAT_EMU_ASAN)
  __asan_unpoison_memory_region(stack.bottom(), FiberStack::kBytes);  // an abandoned fiber's redzones
#endif
  c.stack_bottom = stack.bottom();
  c.stack_size = FiberStack::kBytes;
  c.fake_stack = nullptr;
#if defined(REMAT_EMU_USE_UCONTEXT)
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack.bottom();
  c.uc.uc_stack.ss_size = FiberStack::kBytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
#else
  // top: [0: fake return address of entry][entry][six zero registers] <- sp; after the pops and
  // the ret, rsp = top - 8, as right after a call (the ABI's alignment at a function's entry).
  void** sp = reinterpret_cast<void**>(stack.top());
  *--sp = nullptr;
  *--sp = reinterpret_cast<void*>(entry);
  for (int i = 0; i < 6; ++i) *--sp = nullptr;
  c.sp = sp;
#endif
}

/// Suspends `from` and resumes `to`. `from_finished`: `from` never resumes (ASan frees its
/// fake stack).
inline void fiber_switch(FiberContext& from, FiberContext& to, bool from_finished = false) {
#if defined(REMAT_EMU_ASAN)
  __sanitizer_start_switch_fiber(from_finished ? nullptr : &from.fake_stack, to.stack_bottom,
                                 to.stack_size);
#else
  (void)from_finished;
#endif
#if defined(REMAT_EMU_USE_UCONTEXT)
  swapcontext(&from.uc, &to.uc);
#else
  asm volatile("" ::: "memory");  // memory may change while this fiber is suspended
  switch_stack(&from.sp, to.sp);
  asm volatile("" ::: "memory");
#endif
#if defined(REMAT_EMU_ASAN)
  __sanitizer_finish_switch_fiber(from.fake_stack, nullptr, nullptr);
#endif
}

/// First thing a fresh fiber does: tells ASan it arrived and learns the stack it came from
/// (the scheduler's), so that switching back announces the right one.
inline void fiber_entered(FiberContext& scheduler) {
#if defined(REMAT_EMU_ASAN)
  const void* bottom = nullptr;
  std::size_t size = 0;
  __sanitizer_finish_switch_fiber(nullptr, &bottom, &size);
  if (!scheduler.stack_bottom) {
    scheduler.stack_bottom = bottom;
    scheduler.stack_size = size;
  }
#else
  (void)scheduler;
#endif
}

}  // namespace emu
}  // namespace cuda
}  // namespace remat
