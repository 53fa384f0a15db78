#pragma once
// SPDX-License-Identifier: MIT
// Shared by remat's fuzz targets (tests/fuzz/README.md): the fuzzer's bytes as a file the
// readers can open by path, and the one allowed outcome on bad input: a remat::Error.
// Any other exception escapes LLVMFuzzerTestOneInput, and libFuzzer (or replay_main.cpp)
// reports it as a crash.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <remat/core/error.hpp>

namespace remat_fuzz {

/// One in-memory file (memfd) per process, rewritten for every input: the readers open it by
/// path (/proc/self/fd/N) as they would a file on disk, with no disk I/O between runs.
class MemFile {
 public:
  MemFile() : fd_(::memfd_create("remat-fuzz", 0)) {
    if (fd_ < 0) throw std::runtime_error("remat_fuzz: memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  /// Replaces the file's contents with data[0, size); returns its path.
  const std::string& write(const std::uint8_t* data, std::size_t size) {
    if (::ftruncate(fd_, 0) != 0) throw std::runtime_error("remat_fuzz: ftruncate failed");
    std::size_t done = 0;
    while (done < size) {
      const ::ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) throw std::runtime_error("remat_fuzz: pwrite failed");
      done += static_cast<std::size_t>(n);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

inline MemFile& mem_file() {
  static MemFile* f = new MemFile;  // never destroyed: inputs may run during static destruction
  return *f;
}

/// Set before the first input: plain malloc for tensors, so ASan sees each buffer's bounds (the
/// CPU arena, core/memory.hpp, would hide them). Targets that run kernels also call
/// remat::set_num_threads(1): one thread, so a finding replays the same way.
inline void init_environment() { ::setenv("REMAT_CPU_CACHE", "0", 1); }

/// REMAT_FUZZ_VERBOSE=1: print each input's outcome (which seeds load, what rejects the rest).
inline bool verbose() {
  static const bool v = [] {
    const char* e = std::getenv("REMAT_FUZZ_VERBOSE");
    return e && *e && *e != '0';
  }();
  return v;
}

/// Runs fn; a remat::Error (OutOfMemory included) is the expected answer to bad input.
template <class Fn>
int guarded(Fn&& fn) {
  try {
    fn();
    if (verbose()) std::fprintf(stderr, "  accepted\n");
  } catch (const remat::Error& e) {
    if (verbose()) std::fprintf(stderr, "  remat::Error: %s\n", e.what());
  }
  return 0;
}

/// The fuzzer's bytes as text.
inline std::string as_string(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace remat_fuzz
