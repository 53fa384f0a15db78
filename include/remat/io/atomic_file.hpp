#pragma once
// SPDX-License-Identifier: MIT
// AtomicFile: writes to a temporary file beside the target and, on commit(), flushes, syncs and
// renames it over the target. A process killed before commit() leaves the target untouched
// (rename is atomic on POSIX file systems); an AtomicFile destroyed without commit() removes
// its temporary file.

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <unistd.h>

#include "remat/core/error.hpp"

namespace remat {
namespace io {

class AtomicFile {
 public:
  AtomicFile(std::string path, const char* what)
      : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())), what_(what) {
    f_ = std::fopen(tmp_.c_str(), "wb");
    REMAT_CHECK(f_ != nullptr, "remat::io::", what_, ": cannot create '", tmp_, "': ",
                std::strerror(errno), " (is the folder writable?)");
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (f_) {
      std::fclose(f_);
      std::remove(tmp_.c_str());
    }
  }

  void write(const void* p, std::size_t n) {
    REMAT_CHECK(n == 0 || std::fwrite(p, 1, n, f_) == n, "remat::io::", what_, ": writing '", tmp_,
                "' failed: ", std::strerror(errno), " (disk full?)");
  }
  /// Flushes, syncs to disk, closes and renames over the target.
  void commit() {
    const bool ok = std::fflush(f_) == 0 && ::fsync(::fileno(f_)) == 0;
    const int err = errno;
    std::fclose(f_);
    f_ = nullptr;
    if (!ok) std::remove(tmp_.c_str());
    REMAT_CHECK(ok, "remat::io::", what_, ": flushing '", tmp_, "' failed: ", std::strerror(err));
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const int e = errno;
      std::remove(tmp_.c_str());
      REMAT_CHECK(false, "remat::io::", what_, ": renaming '", tmp_, "' to '", path_, "' failed: ",
                  std::strerror(e));
    }
  }
  const std::string& temp_path() const { return tmp_; }

 private:
  std::string path_, tmp_;
  const char* what_;
  std::FILE* f_ = nullptr;
};

}  // namespace io
}  // namespace remat
