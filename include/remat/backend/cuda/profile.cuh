#pragma once
// SPDX-License-Identifier: MIT
// An opt-in per-kernel profile of the CUDA backend (issue 25, item 9): with it on
// (Profiler::get().set_enabled(true), or REMAT_CUDA_PROFILE=1 at start-up), every kernel launch
// (REMAT_CUDA_LAUNCH, launch.cuh) and every cuBLAS call (CudaGemm, gemm.cuh) is bracketed by
// two CUDA events on the backend's stream; collect() waits for them and sums the elapsed times
// by name (a kernel's name as launched; a GEMM's routine and shape). Off, the default, it costs
// one relaxed load per launch and records nothing. Events come from a pool that grows to the
// largest number of records held at once and is reused; collect() before it grows too large
// (a step at GPT-2 size holds about 2 x 320 events). Under the emulation the events stamp host
// time: the table then times the emulation, not a GPU.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "remat/backend/cuda/error.cuh"

namespace remat {
namespace cuda {

struct ProfileEntry {
  std::string name;
  std::int64_t calls = 0;
  double seconds = 0.0;
};

class Profiler {
 public:
  static Profiler& get() {
    static Profiler p;
    return p;
  }
  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }
  void set_enabled(bool on) { enabled_.store(on); }

  /// Starts a record on `stream` (the caller launches right after). Paired with end().
  void begin(std::string name, cudaStream_t stream) {
    Record r{std::move(name), event(), event()};
    REMAT_CUDA_CHECK(cudaEventRecord(r.start, stream));
    open_.push_back(std::move(r));
  }
  /// Ends the newest open record (never throws: it runs in a destructor; a failed record is
  /// dropped, and the stream's error shows at the next check).
  void end(cudaStream_t stream) noexcept {
    if (open_.empty()) return;
    Record r = std::move(open_.back());
    open_.pop_back();
    if (cudaEventRecord(r.stop, stream) != cudaSuccess) {
      free_.push_back(r.start);
      free_.push_back(r.stop);
      return;
    }
    done_.push_back(std::move(r));
  }
  /// Waits for the recorded work, sums it by name (largest total first) and forgets the records
  /// (their events go back to the pool).
  std::vector<ProfileEntry> collect() {
    std::map<std::string, ProfileEntry> by;
    for (Record& r : done_) {
      REMAT_CUDA_CHECK(cudaEventSynchronize(r.stop));
      float ms = 0.0f;
      REMAT_CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.stop));
      ProfileEntry& e = by[r.name];
      e.name = r.name;
      ++e.calls;
      e.seconds += 1e-3 * ms;
      free_.push_back(r.start);
      free_.push_back(r.stop);
    }
    done_.clear();
    std::vector<ProfileEntry> out;
    for (auto& [name, e] : by) out.push_back(e);
    std::sort(out.begin(), out.end(),
              [](const ProfileEntry& a, const ProfileEntry& b) { return a.seconds > b.seconds; });
    return out;
  }
  /// Drops what was recorded without reading it.
  void clear() {
    for (Record& r : done_) {
      free_.push_back(r.start);
      free_.push_back(r.stop);
    }
    done_.clear();
  }
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;
  ~Profiler() {
    clear();
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }

 private:
  struct Record {
    std::string name;
    cudaEvent_t start, stop;
  };
  Profiler() {
    const char* e = std::getenv("REMAT_CUDA_PROFILE");
    enabled_.store(e && e[0] == '1');
  }
  cudaEvent_t event() {
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    REMAT_CUDA_CHECK(cudaEventCreate(&e));
    return e;
  }
  std::atomic<bool> enabled_{false};
  std::vector<Record> open_, done_;
  std::vector<cudaEvent_t> free_;
};

/// Brackets one launch or cuBLAS call when the profile is on. `name` is called only then.
template <class Name>
class ProfileScope {
 public:
  ProfileScope(cudaStream_t stream, Name name) : stream_(stream), on_(Profiler::get().enabled()) {
    if (on_) Profiler::get().begin(name(), stream_);
  }
  ~ProfileScope() {
    if (on_) Profiler::get().end(stream_);
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  cudaStream_t stream_;
  bool on_;
};

}  // namespace cuda
}  // namespace remat
