#pragma once
// SPDX-License-Identifier: MIT
// AtomicFile: writes to a temporary file beside the target and, on commit(), flushes, syncs and
// renames it over the target. A process killed before commit() leaves the target untouched
// (rename is atomic on POSIX file systems); an AtomicFile destroyed without commit() removes
// its temporary file, and the next AtomicFile for the same target removes those of writers that
// were killed (NOTE [stale temporaries]). A full disk is an error; the target stays as it was.

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include "remat/core/error.hpp"

namespace remat {
namespace io {

namespace detail {
// NOTE [stale temporaries]: a writer names its temporary "<target>.tmp.<pid>" and holds an
// exclusive flock() on it until it renames or removes it. A temporary is stale, and removed by
// the next writer of the same target, when its pid is not a live process (kill(pid, 0) says
// ESRCH) and its lock can be taken: the lock guards against a reused pid or another pid
// namespace, the pid test against the instant between a writer's open() and its flock().
inline void remove_stale_temporaries(const std::string& target) {
  const std::size_t slash = target.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : target.substr(0, slash);
  const std::string prefix =
      (slash == std::string::npos ? target : target.substr(slash + 1)) + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;  // then creating the temporary fails with the reason
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const long pid = std::strtol(digits.c_str(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or unknown
    const std::string path = dir + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) ::unlink(path.c_str());
    ::close(fd);
  }
  ::closedir(d);
}
}  // namespace detail

class AtomicFile {
 public:
  AtomicFile(std::string path, const char* what)
      : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())), what_(what) {
    detail::remove_stale_temporaries(path_);
    const int fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    REMAT_CHECK(fd >= 0, "remat::io::", what_, ": cannot create '", tmp_, "': ",
                std::strerror(errno), " (is the folder writable?)");
    ::flock(fd, LOCK_EX);  // ours alone (NOTE [stale temporaries]); advisory, best effort
    f_ = ::fdopen(fd, "wb");
    if (!f_) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp_.c_str());
      REMAT_CHECK(false, "remat::io::", what_, ": cannot open '", tmp_, "': ", std::strerror(e));
    }
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (f_) {
      ::unlink(tmp_.c_str());  // before fclose releases the lock
      std::fclose(f_);
    }
  }

  void write(const void* p, std::size_t n) {
    if (n == 0) return;
    errno = 0;
    const bool ok = std::fwrite(p, 1, n, f_) == n;
    const int e = errno;
    REMAT_CHECK(ok, "remat::io::", what_, ": writing '", tmp_, "' failed: ",
                std::strerror(e), " (disk full? '", path_, "' is left as it was)");
  }
  /// Flushes, syncs to disk, closes and renames over the target. On failure the temporary is
  /// removed and the target is left as it was.
  void commit() {
    errno = 0;
    bool ok = std::fflush(f_) == 0 && ::fsync(::fileno(f_)) == 0;
    int err = errno;
    if (!ok) ::unlink(tmp_.c_str());
    const bool closed = std::fclose(f_) == 0;  // releases the lock
    if (ok && !closed) {
      ok = false;
      err = errno;
      ::unlink(tmp_.c_str());
    }
    f_ = nullptr;
    REMAT_CHECK(ok, "remat::io::", what_, ": flushing '", tmp_, "' failed: ", std::strerror(err),
                " (disk full? '", path_, "' is left as it was)");
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const int e = errno;
      ::unlink(tmp_.c_str());
      REMAT_CHECK(false, "remat::io::", what_, ": renaming '", tmp_, "' to '", path_, "' failed: ",
                  std::strerror(e));
    }
    // The rename itself reaches the disk with the folder's entry (best effort: some file
    // systems refuse fsync on a folder).
    const std::size_t slash = path_.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
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
