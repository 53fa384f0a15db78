#pragma once
// SPDX-License-Identifier: MIT
// The CUDA runtime subset remat's backend calls, served on the host for the emulation build
// (REMAT_CUDA_EMULATION): one device, whose memory is host memory. Kernels run when launched,
// so every stream is in order and every copy is synchronous. Fresh device memory is poisoned
// (0xFF bytes: NaN as float and double, -1 as an integer), so a kernel that reads what nobody
// wrote shows it. Errors have CUDA's codes and strings. Tests inject faults (emu::Faults): the
// N-th cudaMalloc fails with a given code, no device at all, a stream that cannot be created,
// a kernel that faults asynchronously (a sticky error at the next synchronization).
// Stream capture (CUDA graphs): work sent to a capturing stream (launches, async copies and
// fills, cuBLAS and cuBLASLt calls) is checked and recorded instead of run, with its arguments
// copied as CUDA copies them; cudaGraphLaunch runs the recorded work in order. Waiting for the
// device while a capture is on fails and invalidates it, as on a GPU.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

// ---- CUDA's types (global namespace, as cuda_runtime.h declares them) ----------------------
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorUnknown = 999,
};
typedef cudaError cudaError_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
constexpr unsigned cudaStreamDefault = 0;
constexpr unsigned cudaStreamNonBlocking = 1;
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};
/// A graph: the work recorded by a stream capture, in stream order.
struct CUgraph_st {
  std::vector<std::function<void()>> nodes;
};
typedef CUgraph_st* cudaGraph_t;
struct CUgraphExec_st {
  std::vector<std::function<void()>> nodes;
};
typedef CUgraphExec_st* cudaGraphExec_t;
struct CUstream_st {
  unsigned flags = 0;
  CUgraph_st* capture = nullptr;  // being captured into this graph
  bool invalidated = false;       // ... and a wait during the capture invalidated it
};
typedef CUstream_st* cudaStream_t;
struct CUevent_st {
  std::chrono::steady_clock::time_point at{};
  bool recorded = false;
};
typedef CUevent_st* cudaEvent_t;
struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  std::size_t sharedMemPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major, minor;
  int multiProcessorCount;
};

namespace remat {
namespace cuda {
namespace emu {

/// A kernel broke CUDA's execution model in the emulation (a barrier not every thread reaches,
/// a shuffle with an exited lane, a write past a buffer's end, a host pointer): thrown at the
/// launch, naming the kernel.
class KernelFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Faults the emulated runtime injects (tests of the error paths). Counters count down from
/// the moment they are set; -1 is off.
struct Faults {
  int device_count = 1;                 // 0: no device (cudaErrorNoDevice from every call)
  long malloc_fail_in = -1;             // this many cudaMallocs succeed, then
  long malloc_fail_times = 1;           // ... this many fail with
  cudaError_t malloc_error = cudaErrorMemoryAllocation;  // ... this code
  bool stream_create_fails = false;     // cudaStreamCreate* returns cudaErrorUnknown
  long launch_fault_in = -1;            // this many launches run, then one "faults" on the device:
  cudaError_t launch_error = cudaErrorIllegalAddress;    // a sticky error at the next sync
  bool lt_no_epilogue = false;          // cuBLASLt's heuristic finds no algorithm with an epilogue
};

/// The emulated device: allocations, the caching allocator's blocks (tracked for guards and
/// pointer checks), error state, counters. One per process (a function-local static).
class Device {
 public:
  static Device& get() {
    static Device* d = new Device;  // never destroyed: static destructors (the caching
    return *d;                      // allocator's) still call cudaFree at exit
  }
  static constexpr unsigned char kPoison = 0xFF;
  // A block's guard bytes: a float signalling NaN of its own payload (read past the end, it is
  // NaN; any arithmetic on it, even 2 x, gives other bits, so a write there shows).
  static constexpr unsigned char kGuard[4] = {0xA5, 0xA5, 0xA5, 0xFF};
  static constexpr std::size_t kCapacity = std::size_t(16) << 30;  // what cudaMemGetInfo reports

  Faults& faults() { return faults_; }
  /// Back to a fresh device: faults off, sticky error cleared (allocations stay).
  void reset_faults() {
    faults_ = Faults{};
    sticky_ = last_ = pending_ = cudaSuccess;
  }

  cudaError_t malloc(void** p, std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    *p = nullptr;
    if (faults_.device_count == 0) return record(cudaErrorNoDevice);
    if (observe() != cudaSuccess) return record(sticky_);
    if (faults_.malloc_fail_in == 0 && faults_.malloc_fail_times > 0) {
      if (--faults_.malloc_fail_times == 0) faults_.malloc_fail_in = -1;
      return record(faults_.malloc_error);
    }
    if (faults_.malloc_fail_in > 0) --faults_.malloc_fail_in;
    if (bytes == 0) return cudaSuccess;
    if (bytes > kCapacity - allocated_) return record(cudaErrorMemoryAllocation);
    void* m = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!m) return record(cudaErrorMemoryAllocation);
    std::memset(m, kPoison, bytes);
    allocations_.emplace(static_cast<char*>(m), Allocation{bytes, false});
    allocated_ += bytes;
    ++mallocs_;
    *p = m;
    return cudaSuccess;
  }
  cudaError_t free(void* p) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!p) return cudaSuccess;
    auto it = allocations_.find(static_cast<char*>(p));
    if (it == allocations_.end()) return record(cudaErrorInvalidValue);
    allocated_ -= it->second.bytes;
    for (auto b = blocks_.lower_bound(it->first); b != blocks_.end() && b->first < it->first + it->second.bytes;)
      b = blocks_.erase(b);
    allocations_.erase(it);
    std::free(p);
    return cudaSuccess;
  }
  /// Whether [p, p + bytes) lies inside one device allocation.
  bool is_device(const void* p, std::size_t bytes = 0) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return find(p, bytes) != nullptr;
  }
  std::size_t allocated() const { return allocated_; }
  std::int64_t mallocs() const { return mallocs_; }

  // The caching allocator's blocks (memory.cuh tells the emulation): a block's bytes past the
  // request, up to the pool's rounding, are a guard that must keep its pattern, and a kernel's
  // pointer into a segment of the pool must point into a live block.
  void track_block(void* p, std::size_t bytes, std::size_t rounded) {
    const std::lock_guard<std::mutex> lock(mutex_);
    char* c = static_cast<char*>(p);
    std::memset(c, kPoison, bytes);  // fresh to the kernels: as if never written
    for (std::size_t i = bytes; i < rounded; ++i) c[i] = static_cast<char>(kGuard[(i - bytes) % 4]);
    blocks_[c] = Block{bytes, rounded};
    if (Allocation* a = find(p, 0)) a->pooled = true;
  }
  void untrack_block(void* p) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(static_cast<char*>(p));
    if (it == blocks_.end()) return;
    std::memset(it->first, kPoison, it->second.rounded);  // a use after free reads NaN
    blocks_.erase(it);
  }
  /// The first live block whose guard bytes were written, as a message; empty when none.
  std::string broken_guard() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [base, b] : blocks_)
      for (std::size_t i = b.bytes; i < b.rounded; ++i)
        if (static_cast<unsigned char>(base[i]) != kGuard[(i - b.bytes) % 4])
          return "it wrote past the end of a " + std::to_string(b.bytes) + "-byte buffer (byte " +
                 std::to_string(i) + ", " + std::to_string(i - b.bytes) + " bytes past the end)";
    return {};
  }
  /// Why a kernel argument pointer is not device memory it may use; empty when it is.
  std::string check_pointer(const void* p) const {
    if (!p) return {};
    const std::lock_guard<std::mutex> lock(mutex_);
    const Allocation* a = find(p, 0);
    if (!a) return "is not device memory (a host pointer?)";
    if (!a->pooled) return {};
    const char* c = static_cast<const char*>(p);
    auto it = blocks_.upper_bound(const_cast<char*>(c));
    if (it != blocks_.begin()) {
      --it;
      if (c >= it->first && c <= it->first + it->second.bytes) return {};
    }
    return "points into no live block of the caching allocator (freed memory?)";
  }

  // ---- errors ---------------------------------------------------------------------------
  cudaError_t record(cudaError_t e) {
    if (e != cudaSuccess) last_ = e;
    return e;
  }
  cudaError_t take_last() {
    const cudaError_t e = last_ != cudaSuccess ? last_ : sticky_;
    last_ = cudaSuccess;
    return e;
  }
  cudaError_t peek_last() const { return last_ != cudaSuccess ? last_ : sticky_; }
  /// What a synchronizing call returns: the sticky error of a kernel that faulted, or none.
  cudaError_t sync_status() {
    if (faults_.device_count == 0) return record(cudaErrorNoDevice);
    return observe() == cudaSuccess ? cudaSuccess : record(sticky_);
  }
  /// A kernel faulted on the device: the host learns it at its next synchronizing call (as on a
  /// GPU: the launch itself succeeded), and from then on every call fails with it.
  void set_pending_fault(cudaError_t e) { pending_ = e; }
  void set_sticky(cudaError_t e) { sticky_ = e; }
  std::int64_t streams_created() const { return streams_created_; }
  void count_stream() { ++streams_created_; }
  std::int64_t launches() const { return launches_; }
  /// Launches per kernel (its name as written at the launch, e.g. "fill_kernel<>").
  const std::map<std::string, std::int64_t>& launches_by_kernel() const { return by_kernel_; }
  void count_launch(const char* kernel) {
    ++launches_;
    ++by_kernel_[kernel];
  }
  /// The block schedule (grid.hpp). Seed 0, the default: blocks run in order in odd launches and
  /// in reverse in even ones. Any other seed: every launch runs its blocks in a random order
  /// drawn from (seed, launch number), each block's threads lowest- or highest-first at random,
  /// and atomics apply in that order, as a GPU's scheduler might. Two seeds that give different
  /// bits expose a kernel whose result depends on the order of its blocks. REMAT_CUDA_EMU_SEED
  /// sets it at start-up.
  std::uint64_t schedule_seed() const { return seed_; }
  void set_schedule_seed(std::uint64_t seed) { seed_ = seed; }
  /// Round trips with the host (NOTE [host round trips], cuda.hpp): calls that make the host
  /// wait for the device (cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize),
  /// and copies from the device to the host.
  std::int64_t host_waits() const { return host_waits_; }
  // ---- stream capture -------------------------------------------------------------------
  /// Work for stream s: when s is being captured, `work` is recorded into its graph and true
  /// returned (the caller runs nothing now); otherwise false.
  bool defer(cudaStream_t s, std::function<void()> work) {
    if (!s || !s->capture) return false;
    if (!s->invalidated) s->capture->nodes.push_back(std::move(work));
    return true;
  }
  void begin_capture(cudaStream_t s, cudaGraph_t g) {
    s->capture = g;
    s->invalidated = false;
    capturing_.insert(s);
  }
  void end_capture(cudaStream_t s) {
    s->capture = nullptr;
    capturing_.erase(s);
  }
  /// A call that waits for the device (or for stream s): while a capture is on (of s, or of any
  /// stream when s is null) it fails with cudaErrorStreamCaptureUnsupported and the capture is
  /// invalidated (its cudaStreamEndCapture fails); cudaSuccess otherwise.
  cudaError_t wait_during_capture(cudaStream_t s) {
    bool hit = false;
    for (CUstream_st* c : capturing_)
      if (!s || c == s) c->invalidated = hit = true;
    return hit ? record(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
  }
  bool capturing() const { return !capturing_.empty(); }
  std::int64_t copies_to_host() const { return copies_to_host_; }
  void count_host_wait() { ++host_waits_; }
  void count_copy_to_host() { ++copies_to_host_; }

 private:
  struct Allocation {
    std::size_t bytes;
    bool pooled;  // holds blocks of the caching allocator
  };
  struct Block {
    std::size_t bytes, rounded;
  };
  Device() = default;
  cudaError_t observe() {
    if (pending_ != cudaSuccess && sticky_ == cudaSuccess) sticky_ = pending_;
    pending_ = cudaSuccess;
    return sticky_;
  }
  Allocation* find(const void* p, std::size_t bytes) const {
    const char* c = static_cast<const char*>(p);
    auto it = allocations_.upper_bound(const_cast<char*>(c));
    if (it == allocations_.begin()) return nullptr;
    --it;
    if (c < it->first || c + bytes > it->first + it->second.bytes) return nullptr;
    if (bytes == 0 && c == it->first + it->second.bytes) return nullptr;
    return const_cast<Allocation*>(&it->second);
  }

  mutable std::mutex mutex_;
  std::set<CUstream_st*> capturing_;
  std::map<char*, Allocation> allocations_;
  std::map<char*, Block> blocks_;
  std::map<std::string, std::int64_t> by_kernel_;
  std::size_t allocated_ = 0;
  std::int64_t mallocs_ = 0, streams_created_ = 0, launches_ = 0, host_waits_ = 0,
               copies_to_host_ = 0;
  Faults faults_;
  std::uint64_t seed_ = [] {
    const char* e = std::getenv("REMAT_CUDA_EMU_SEED");
    return e ? std::strtoull(e, nullptr, 10) : 0ull;
  }();
  cudaError_t last_ = cudaSuccess, sticky_ = cudaSuccess, pending_ = cudaSuccess;
};

inline Device& device() { return Device::get(); }

}  // namespace emu
}  // namespace cuda
}  // namespace remat

// ---- the runtime API ----------------------------------------------------------------------
inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorUnknown: return "cudaErrorUnknown";
  }
  return "cudaErrorUnknown";
}
inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "capture was not initiated in this stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorUnknown: return "unknown error";
  }
  return "unrecognized error code";
}
inline cudaError_t cudaGetLastError() { return remat::cuda::emu::device().take_last(); }
inline cudaError_t cudaPeekAtLastError() { return remat::cuda::emu::device().peek_last(); }

inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = remat::cuda::emu::device().faults().device_count;
  return *n == 0 ? remat::cuda::emu::device().record(cudaErrorNoDevice) : cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return remat::cuda::emu::device().faults().device_count == 0
             ? remat::cuda::emu::device().record(cudaErrorNoDevice)
             : cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) {
  auto& dev = remat::cuda::emu::device();
  if (dev.faults().device_count == 0) return dev.record(cudaErrorNoDevice);
  return d == 0 ? cudaSuccess : dev.record(cudaErrorInvalidDevice);
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  auto& dev = remat::cuda::emu::device();
  if (dev.faults().device_count == 0) return dev.record(cudaErrorNoDevice);
  if (d != 0) return dev.record(cudaErrorInvalidDevice);
  *p = cudaDeviceProp{};
  std::strncpy(p->name, "remat CUDA emulation (host CPU)", sizeof(p->name) - 1);
  p->totalGlobalMem = remat::cuda::emu::Device::kCapacity;
  p->sharedMemPerBlock = 48 << 10;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 1;
  return cudaSuccess;
}

inline cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  return remat::cuda::emu::device().malloc(p, bytes);
}
template <class T>
cudaError_t cudaMalloc(T** p, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
inline cudaError_t cudaFree(void* p) { return remat::cuda::emu::device().free(p); }
inline cudaError_t cudaMemGetInfo(std::size_t* free_b, std::size_t* total_b) {
  auto& dev = remat::cuda::emu::device();
  if (dev.faults().device_count == 0) return dev.record(cudaErrorNoDevice);
  *total_b = remat::cuda::emu::Device::kCapacity;
  *free_b = *total_b - dev.allocated();
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
  if (const cudaError_t c = remat::cuda::emu::device().wait_during_capture(nullptr)) return c;
  remat::cuda::emu::device().count_host_wait();
  return remat::cuda::emu::device().sync_status();
}

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  auto& dev = remat::cuda::emu::device();
  if (dev.faults().device_count == 0) return dev.record(cudaErrorNoDevice);
  if (dev.faults().stream_create_fails) return dev.record(cudaErrorUnknown);
  dev.count_stream();
  *s = new CUstream_st{flags};
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) {
  return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (const cudaError_t c = remat::cuda::emu::device().wait_during_capture(s)) return c;
  remat::cuda::emu::device().count_host_wait();
  return remat::cuda::emu::device().sync_status();
}

namespace remat {
namespace cuda {
namespace emu {
/// cudaMemcpy's checks and copy; `run` false: the checks only.
inline cudaError_t memcpy_checked(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                                  bool run = true) {
  auto& dev = device();
  if (bytes == 0) return cudaSuccess;
  const cudaError_t s = dev.sync_status();
  if (s != cudaSuccess) return s;
  const bool dst_dev = dev.is_device(dst, bytes), src_dev = dev.is_device(src, bytes);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice: ok = dst_dev && !dev.is_device(src); break;
    case cudaMemcpyDeviceToHost: ok = src_dev && !dev.is_device(dst); break;
    case cudaMemcpyDeviceToDevice: ok = dst_dev && src_dev; break;
    case cudaMemcpyHostToHost: ok = !dev.is_device(dst) && !dev.is_device(src); break;
    case cudaMemcpyDefault: break;
  }
  if (!ok) return dev.record(cudaErrorInvalidValue);
  if (!run) return cudaSuccess;
  if (kind == cudaMemcpyDeviceToHost || (kind == cudaMemcpyDefault && src_dev && !dst_dev))
    dev.count_copy_to_host();
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
/// A graph node's work failed when the graph ran: thrown by cudaGraphLaunch.
[[noreturn]] inline void node_failed(const std::string& what) {
  throw KernelFault("remat CUDA emulation: a graph's " + what + " failed when the graph ran");
}
}  // namespace emu
}  // namespace cuda
}  // namespace remat

/// A synchronous copy: it waits for the device, so it fails while a capture is on.
inline cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t c = remat::cuda::emu::device().wait_during_capture(nullptr))
    return c == cudaErrorStreamCaptureUnsupported
               ? remat::cuda::emu::device().record(cudaErrorStreamCaptureImplicit)
               : c;
  return remat::cuda::emu::memcpy_checked(dst, src, bytes, kind);
}
/// In stream order (here: at once); on a capturing stream, checked and recorded (the bytes
/// are read when the graph runs, as a GPU's memcpy node reads them).
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes,
                                   cudaMemcpyKind kind, cudaStream_t s = nullptr) {
  using namespace remat::cuda::emu;
  if (s && s->capture) {
    const cudaError_t e = memcpy_checked(dst, src, bytes, kind, false);
    if (e != cudaSuccess) return e;
    device().defer(s, [=] {
      if (memcpy_checked(dst, src, bytes, kind) != cudaSuccess) node_failed("cudaMemcpyAsync");
    });
    return cudaSuccess;
  }
  return memcpy_checked(dst, src, bytes, kind);
}
inline cudaError_t cudaMemset(void* p, int value, std::size_t bytes) {
  auto& dev = remat::cuda::emu::device();
  if (bytes == 0) return cudaSuccess;
  if (!dev.is_device(p, bytes)) return dev.record(cudaErrorInvalidValue);
  std::memset(p, value, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t s = nullptr) {
  auto& dev = remat::cuda::emu::device();
  if (s && s->capture) {
    if (bytes > 0 && !dev.is_device(p, bytes)) return dev.record(cudaErrorInvalidValue);
    dev.defer(s, [=] {
      if (cudaMemset(p, value, bytes) != cudaSuccess) remat::cuda::emu::node_failed("cudaMemsetAsync");
    });
    return cudaSuccess;
  }
  return cudaMemset(p, value, bytes);
}

// ---- stream capture and graphs ----------------------------------------------------------
inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  auto& dev = remat::cuda::emu::device();
  if (!s) return dev.record(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot be
  if (s->capture) return dev.record(cudaErrorIllegalState);
  dev.begin_capture(s, new CUgraph_st{});
  return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  auto& dev = remat::cuda::emu::device();
  *g = nullptr;
  if (!s || !s->capture) return dev.record(cudaErrorStreamCaptureUnmatched);
  CUgraph_st* graph = s->capture;
  const bool invalidated = s->invalidated;
  dev.end_capture(s);
  if (invalidated) {
    delete graph;
    return dev.record(cudaErrorStreamCaptureInvalidated);
  }
  *g = graph;
  return cudaSuccess;
}
inline cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  *status = !s || !s->capture ? cudaStreamCaptureStatusNone
            : s->invalidated  ? cudaStreamCaptureStatusInvalidated
                              : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
/// nodes null: *count = the graph's nodes (launches, copies, fills, GEMMs).
inline cudaError_t cudaGraphGetNodes(cudaGraph_t g, void* nodes, std::size_t* count) {
  if (!g || nodes) return remat::cuda::emu::device().record(cudaErrorInvalidValue);
  *count = g->nodes.size();
  return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long = 0) {
  if (!g) return remat::cuda::emu::device().record(cudaErrorInvalidValue);
  *e = new CUgraphExec_st{g->nodes};
  return cudaSuccess;
}
/// Runs the graph's work in order (a stream being captured records the whole graph instead).
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
  auto& dev = remat::cuda::emu::device();
  if (!e) return dev.record(cudaErrorInvalidValue);
  if (const cudaError_t st = dev.sync_status()) return st;
  if (dev.defer(s, [e] {
        for (const auto& n : e->nodes) n();
      }))
    return cudaSuccess;
  for (const auto& n : e->nodes) n();
  return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}

inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st{};
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
  if (remat::cuda::emu::device().defer(s, [e] {
        e->at = std::chrono::steady_clock::now();
        e->recorded = true;
      }))
    return cudaSuccess;
  e->at = std::chrono::steady_clock::now();
  e->recorded = true;
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) {
  if (const cudaError_t c = remat::cuda::emu::device().wait_during_capture(nullptr)) return c;
  remat::cuda::emu::device().count_host_wait();
  return remat::cuda::emu::device().sync_status();
}
/// Host time between the records (kernels run at launch): no measure of a GPU.
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a->recorded || !b->recorded) return remat::cuda::emu::device().record(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}
