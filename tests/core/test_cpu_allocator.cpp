// SPDX-License-Identifier: MIT
// The CPU arena allocator (NOTE [CPU arena allocator] in backend/cpu/memory.hpp): alignment,
// reuse without growth, coalescing, handing pages back (checked against the kernel with
// mincore), the cap on cached bytes, more reservations, the fallback when caching is off, and a
// GPT training step whose reserved bytes stop growing and stay near the ledger's peak.

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <remat/remat.hpp>

#include <cmath>

#include "support/catch.hpp"
#include "support/units.hpp"

using namespace remat;
using cpu::CpuArena;

namespace {

// Resident pages of [p, p + bytes) in bytes, as the kernel reports them (SIZE_MAX if it cannot).
std::size_t resident_bytes(void* p, std::size_t bytes) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  char* lo = static_cast<char*>(p);
  lo -= reinterpret_cast<std::uintptr_t>(lo) % page;
  const std::size_t span = static_cast<std::size_t>(static_cast<char*>(p) + bytes - lo);
  const std::size_t n = (span + page - 1) / page;
  std::vector<unsigned char> v(n);
  if (mincore(lo, n * page, v.data()) != 0) return std::numeric_limits<std::size_t>::max();
  std::size_t r = 0;
  for (unsigned char c : v) r += (c & 1) ? page : 0;
  return r;
}
void touch(void* p, std::size_t bytes) { std::memset(p, 0x5a, bytes); }
}  // namespace

TEST_CASE("the arena hands out 64-byte aligned buffers of the rounded size", "[memory][cpu]") {
  CpuArena a(64 * MiB);
  std::vector<std::pair<void*, std::size_t>> live;
  for (std::size_t n : {std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{65},
                        std::size_t{1000}, std::size_t{4097}, MiB + 3, std::size_t{12345}}) {
    void* p = a.allocate(n);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
    touch(p, n);
    live.emplace_back(p, n);
  }
  std::size_t sum = 0;
  for (const auto& b : live) sum += CpuArena::round(b.second);
  CHECK(a.live_bytes() == sum);
  CHECK(a.reserved_bytes() == sum);  // packed one after the other: nothing cached yet
  for (const auto& b : live) CHECK(a.deallocate(b.first, b.second));
  CHECK(a.live_bytes() == 0);
  CHECK(a.free_ranges() == 1);  // everything merged back into one range
  CHECK(a.cached_bytes() == sum);

  // The backend, with caching on and off.
  Cpu::set_caching(true);
  void* p = Cpu::allocate(100);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
  Cpu::deallocate(p, 100);
  Cpu::set_caching(false);
  p = Cpu::allocate(100);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
  Cpu::deallocate(p, 100);
  Cpu::set_caching(true);
}

TEST_CASE("a repeated allocation pattern reuses the arena without growing it", "[memory][cpu]") {
  CpuArena a(256 * MiB);
  std::mt19937 rng(3);
  std::vector<std::size_t> sizes;
  for (int i = 0; i < 60; ++i) sizes.push_back(64 + rng() % (3 * MiB));
  std::vector<std::size_t> reserved;
  for (int step = 0; step < 10; ++step) {
    // a forward pass (allocations kept), a backward pass (freed in reverse, with a temporary
    // for each), the same every step
    std::vector<void*> acts;
    for (std::size_t n : sizes) acts.push_back(a.allocate(n));
    for (std::size_t i = sizes.size(); i-- > 0;) {
      void* t = a.allocate(sizes[i] / 2 + 64);
      a.deallocate(acts[i], sizes[i]);
      a.deallocate(t, sizes[i] / 2 + 64);
    }
    reserved.push_back(a.reserved_bytes());
  }
  for (std::size_t step = 1; step < reserved.size(); ++step) CHECK(reserved[step] == reserved[0]);
  CHECK(a.peak_reserved_bytes() == reserved[0]);
  CHECK(a.refaulted_bytes() == 0);
}

TEST_CASE("freed neighbours merge: their sum fits without growing the extent", "[memory][cpu]") {
  CpuArena a(64 * MiB);
  void* x = a.allocate(MiB);
  void* y = a.allocate(2 * MiB);
  void* guard = a.allocate(64);  // keeps the merged range from being the extent's end
  const std::size_t reserved = a.reserved_bytes();
  a.deallocate(x, MiB);
  a.deallocate(y, 2 * MiB);
  CHECK(a.free_ranges() == 1);
  CHECK(a.cached_bytes() == 3 * MiB);
  void* z = a.allocate(3 * MiB);
  CHECK(z == x);  // the merged range, from its start
  CHECK(a.reserved_bytes() == reserved);
  CHECK(a.cached_bytes() == 0);
  a.deallocate(z, 3 * MiB);
  a.deallocate(guard, 64);
}

TEST_CASE("empty_cache hands the free pages back to the system", "[memory][cpu]") {
  CpuArena a(64 * MiB);
  void* keep = a.allocate(MiB);
  void* x = a.allocate(8 * MiB);
  void* guard = a.allocate(64);
  touch(keep, MiB);
  touch(x, 8 * MiB);
  CHECK(resident_bytes(x, 8 * MiB) == 8 * MiB);
  a.deallocate(x, 8 * MiB);
  CHECK(a.cached_bytes() == 8 * MiB);
  const std::size_t before = a.reserved_bytes();
  const std::size_t returned = a.empty_cache();
  CHECK(returned >= 8 * MiB - 8192);  // the whole pages inside the range
  CHECK(a.reserved_bytes() == before - returned);
  CHECK(a.cached_bytes() <= 8192);    // at most the two pages it shares with live neighbours
  CHECK(resident_bytes(static_cast<char*>(x) + 4096, 8 * MiB - 8192) == 0);
  CHECK(resident_bytes(keep, MiB) == MiB);  // live data stays
  // The range is reused; the pages come back as they are written.
  void* y = a.allocate(8 * MiB);
  CHECK(y == x);
  CHECK(a.reserved_bytes() == before);
  touch(y, 8 * MiB);
  a.deallocate(y, 8 * MiB);
  a.deallocate(guard, 64);
  a.deallocate(keep, MiB);
  a.empty_cache();  // nothing live: the extent is gone
  CHECK(a.reserved_bytes() == 0);
  CHECK(a.cached_bytes() == 0);
}

TEST_CASE("past the cap, free ranges go back to the system", "[memory][cpu]") {
  CpuArena a(256 * MiB, /*slack=*/0.0);  // cap: peak live + 512 KiB
  void* x = a.allocate(16 * MiB);
  void* y = a.allocate(16 * MiB);
  touch(x, 16 * MiB);
  touch(y, 16 * MiB);
  a.deallocate(x, 16 * MiB);  // a 16 MiB hole below y
  void* z = a.allocate(24 * MiB);  // does not fit the hole: the extent grows past it
  touch(z, 24 * MiB);
  CHECK(a.peak_live_bytes() == 40 * MiB);
  CHECK(a.reserved_bytes() <= 42 * MiB);  // the hole went back
  CHECK(a.peak_reserved_bytes() <= 42 * MiB);
  CHECK(resident_bytes(static_cast<char*>(x) + 4096, 16 * MiB - 8192) == 0);
  // Refilling the hole faults its pages in again, and says so.
  void* w = a.allocate(16 * MiB);
  CHECK(w == x);
  CHECK(a.refaulted_bytes() >= 16 * MiB - 8192);
  a.deallocate(w, 16 * MiB);
  a.deallocate(y, 16 * MiB);
  a.deallocate(z, 24 * MiB);

  // Without a cap (slack = inf) the hole stays.
  CpuArena b(256 * MiB, std::numeric_limits<double>::infinity());
  x = b.allocate(16 * MiB);
  y = b.allocate(16 * MiB);
  b.deallocate(x, 16 * MiB);
  z = b.allocate(24 * MiB);
  CHECK(b.reserved_bytes() == 56 * MiB);
  b.deallocate(y, 16 * MiB);
  b.deallocate(z, 24 * MiB);
}

TEST_CASE("a full reservation is followed by another; empty_cache unmaps the extra ones",
          "[memory][cpu]") {
  CpuArena a(MiB);
  std::vector<void*> v;
  for (int i = 0; i < 3; ++i) v.push_back(a.allocate(768 * 1024));  // one per reservation
  void* big = a.allocate(3 * MiB);  // larger than a reservation: one of its own size
  CHECK(a.reservations() == 4);
  touch(big, 3 * MiB);
  for (void* p : v) a.deallocate(p, 768 * 1024);
  a.deallocate(big, 3 * MiB);
  CHECK(a.free_ranges() == 4);  // ranges never merge across reservations
  a.empty_cache();
  CHECK(a.reservations() == 1);
  CHECK(a.reserved_bytes() == 0);
}

TEST_CASE("random allocations never overlap, and concurrent ones are safe", "[memory][cpu]") {
  CpuArena a(64 * MiB, 0.0);
  std::mt19937 rng(11);
  struct Block {
    unsigned char* p;
    std::size_t n;
    unsigned char tag;
  };
  std::vector<Block> live;
  for (int i = 0; i < 4000; ++i) {
    if (live.empty() || rng() % 2 != 0) {
      const std::size_t n = 1 + rng() % (rng() % 4 == 0 ? 2 * MiB : 8192);
      auto* p = static_cast<unsigned char*>(a.allocate(n));
      REQUIRE(p != nullptr);
      const auto tag = static_cast<unsigned char>(i);
      std::memset(p, tag, n);
      live.push_back({p, n, tag});
    } else {
      const std::size_t k = rng() % live.size();
      const Block b = live[k];
      bool intact = true;  // an overlap would have overwritten some of it
      for (std::size_t j = 0; j < b.n; j += 61) intact = intact && b.p[j] == b.tag;
      CHECK(intact);
      a.deallocate(b.p, b.n);
      live[k] = live.back();
      live.pop_back();
    }
  }
  for (const Block& b : live) a.deallocate(b.p, b.n);
  CHECK(a.live_bytes() == 0);
  CHECK(a.free_ranges() == a.reservations());
  CHECK(a.reserved_bytes() == a.cached_bytes());

  auto worker = [&a](unsigned seed) {
    std::mt19937 r(seed);
    std::vector<std::pair<void*, std::size_t>> mine;
    for (int i = 0; i < 3000; ++i) {
      if (mine.empty() || r() % 2) {
        const std::size_t n = 64 + r() % 100000;
        void* p = a.allocate(n);
        std::memset(p, 1, 64);
        mine.emplace_back(p, n);
      } else {
        a.deallocate(mine.back().first, mine.back().second);
        mine.pop_back();
      }
    }
    for (const auto& b : mine) a.deallocate(b.first, b.second);
  };
  std::thread t1(worker, 1u), t2(worker, 2u);
  t1.join();
  t2.join();
  CHECK(a.live_bytes() == 0);
  CHECK(a.free_ranges() == a.reservations());
}

TEST_CASE("caching off: buffers come from aligned_alloc, and the arena's still go back to it",
          "[memory][cpu]") {
  Cpu::set_caching(true);
  void* from_arena = Cpu::allocate(MiB);
  const std::size_t live = CpuArena::instance().live_bytes();
  Cpu::set_caching(false);
  const std::size_t reserved = Cpu::reserved_bytes();
  void* plain = Cpu::allocate(MiB);
  CHECK(CpuArena::instance().live_bytes() == live);  // not the arena's
  CHECK(Cpu::reserved_bytes() == reserved);
  Cpu::deallocate(plain, MiB);
  Cpu::deallocate(from_arena, MiB);  // the arena's, freed while caching is off
  CHECK(CpuArena::instance().live_bytes() == live - MiB);
  Cpu::set_caching(true);
}

TEST_CASE("out of memory says how much was asked for, and a hint", "[memory][cpu]") {
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer aborts on an impossible aligned_alloc unless allocator_may_return_null=1.
  const char* asan = std::getenv("ASAN_OPTIONS");
  if (!asan || !std::strstr(asan, "allocator_may_return_null=1")) {
    WARN("skipped under AddressSanitizer (set ASAN_OPTIONS=allocator_may_return_null=1)");
    return;
  }
#endif
  const std::size_t huge = std::size_t{1} << 62;
  REQUIRE_THROWS_AS(Cpu::allocate(huge), OutOfMemory);
  REQUIRE_THROWS_WITH(Cpu::allocate(huge), REMAT_CONTAINS(std::to_string(huge) + " bytes") &&
                                               REMAT_CONTAINS("hint"));
}

TEST_CASE("GPT steps: the arena stops growing and stays near the ledger's peak", "[memory][cpu]") {
  Cpu::set_caching(true);
  for (const char* strategy : {"none", "block"}) {
    Cpu::empty_cache();  // nothing of ours is live: a fresh arena, and a cap of this model's own
    CpuArena::instance().reset_peak_live();
    Cpu::reset_peak_reserved();
    reset_peak_memory<Cpu>();
    const std::size_t reserved0 = Cpu::reserved_bytes();
    const std::int64_t live0 = memory_stats<Cpu>().live_total;
    std::vector<std::size_t> reserved, refaulted;
    {
      Tape<Cpu> tape;
      nn::GPTConfig c;
      c.vocab_size = 256;  // about 80 and 130 MB: the cap is 0.5% or 512 KiB, whichever is more
      c.block_size = 256;
      c.n_layer = 4;
      c.n_embd = 256;
      c.n_head = 4;
      c.checkpoint = nn::CheckpointStrategy::parse(strategy);
      nn::GPT<Cpu> model(tape, c);
      optim::AdamW<Cpu> adamw(model.parameters(), {1e-3f});
      const std::int64_t B = 4, T = 256;
      std::vector<std::int32_t> x(static_cast<std::size_t>(B * T)), y(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        x[i] = static_cast<std::int32_t>((i * 7 + 3) % 256);
        y[i] = static_cast<std::int32_t>((i * 5 + 1) % 256);
      }
      const auto idx = tape.tokens({B, T}, x), tgt = tape.tokens({B, T}, y);
      for (int step = 0; step < 14; ++step) {
        auto loss = model.loss(idx, tgt);
        tape.backward(loss);
        adamw.step();
        adamw.zero_grad();
        reserved.push_back(Cpu::reserved_bytes());
        refaulted.push_back(Cpu::refaulted_bytes());
      }
    }
    INFO(strategy);
    // The first step allocates the optimizer's state after its own peak, so the second is the
    // first with all of it; the online layout (no StepScope here) then stops growing. For none
    // it settles (measured: from the second step): every step is the same, no page given back
    // and faulted in again. For block, where checkpoint replays add into the real gradient
    // buffers and the fused attention's forward scratch comes and goes inside the replays,
    // best fit does not settle: since the parameters and the moments are flat buffers (NOTE
    // [flat buffers]) the reserved bytes wander by 0.6% (measured: 76.54-77.03 MB from the
    // second step to the 14th, 1-14 MB given back and faulted in again per step against a 76
    // MB peak; before, a cycle of period 3): the cap holds by giving pages back. A StepScope
    // plans the step's layout and removes that (test_cpu_step_layout.cpp).
    const double ledger = static_cast<double>(memory_stats<Cpu>().peak_total - live0);
    for (std::size_t s = 12; s < reserved.size(); ++s) {
      if (std::string(strategy) == "none") {
        CHECK(reserved[s] == reserved[11]);
        CHECK(refaulted[s] == refaulted[11]);
      } else {
        CHECK(std::fabs(static_cast<double>(reserved[s]) - static_cast<double>(reserved[11])) <=
              0.01 * static_cast<double>(reserved[11]));
        CHECK(static_cast<double>(refaulted[s] - refaulted[s - 1]) <= 0.2 * ledger);
      }
    }
    const double peak = static_cast<double>(Cpu::peak_reserved_bytes() - reserved0);
    INFO("ledger peak " << ledger << " B, reserved peak " << peak << " B");
    CHECK(peak <= ledger * 1.03);  // the cap: 0.5%, at least 512 KiB (online placement only)
    CHECK(peak >= ledger * 0.97);  // the arena holds what the ledger counts
  }
}
