#pragma once
// SPDX-License-Identifier: MIT
// Shared by remat's fuzz targets (tests/fuzz/README.md): the fuzzer's bytes as a file the
// readers can open by path, and the one allowed outcome on bad input: a remat::Error.
// Any other exception escapes LLVMFuzzerTestOneInput, and libFuzzer (or replay_main.cpp)
// reports it as a crash. Inputs that start with "RCP\0" are recipes (recipe.hpp).

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

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

/// The outcome of the last input: "accepted", or "remat::Error: <message>" (replay_main.cpp
/// checks it against a regression's .expect file).
inline std::string& last_outcome() {
  static std::string* s = new std::string;  // never destroyed, as mem_file()
  return *s;
}

/// Runs fn; a remat::Error (OutOfMemory included) is the expected answer to bad input.
template <class Fn>
int guarded(Fn&& fn) {
  try {
    fn();
    last_outcome() = "accepted";
  } catch (const remat::Error& e) {
    last_outcome() = std::string("remat::Error: ") + e.what();
  }
  if (verbose()) std::fprintf(stderr, "  %.2000s\n", last_outcome().c_str());
  return 0;
}

/// A folder of this process's own (on /dev/shm when it can), for readers that look beside a
/// file (read_gpt2's config.json); removed with its files at exit.
inline const std::string& scratch_dir() {
  static const std::string* d = [] {
    for (const char* base : {"/dev/shm", "/tmp"}) {
      std::string t = std::string(base) + "/remat-fuzz-XXXXXX";
      if (::mkdtemp(&t[0])) {
        static std::string* made = new std::string(t);
        std::atexit([] {
          std::error_code ec;
          std::filesystem::remove_all(*made, ec);
        });
        return made;
      }
    }
    throw std::runtime_error("remat_fuzz: cannot make a scratch folder");
  }();
  return *d;
}

/// Writes bytes to a file (replacing it).
inline void write_file(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0)
    throw std::runtime_error("remat_fuzz: cannot write " + path);
}

/// The fuzzer's bytes as text.
inline std::string as_string(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace remat_fuzz

/// For replay_main.cpp: the outcome of the last input (remat_fuzz::last_outcome()).
extern "C" const char* remat_fuzz_last_outcome() { return remat_fuzz::last_outcome().c_str(); }
