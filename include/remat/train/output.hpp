#pragma once
// SPDX-License-Identifier: MIT
// The files a training run reads and writes, checked before the first step, and written at the
// end with a fallback: a run never trains for hours to fail at its save (NOTE [output paths]).
// Messages start with the caller's `what` ("my_trainer: the weights file"), so that they speak
// the words of the program that was given the path.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "remat/core/error.hpp"

namespace remat {
namespace train {

/// The folder of a path: "." for a bare file name, "/" for a file at the root.
inline std::string folder_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

/// An input path that is a directory is an error saying what is expected instead (a reader
/// would only say "not a regular file"), with `hint` appended. A missing path, or "-"
/// (standard input), is left to the reader, which names it.
inline void check_input_not_directory(const std::string& what, const std::string& path,
                                      const std::string& expected, const std::string& hint = "") {
  struct ::stat sb {};
  if (path.empty() || path == "-" || ::stat(path.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) return;
  REMAT_CHECK(false, what, " '", path, "' is a directory (expected ", expected, ")", hint);
}

// NOTE [output paths]: every path a run will write is checked before its first step, so that a
// run never trains for hours to fail at its save: the path is not a directory, its folder
// exists, and a file can be created in it. The last is tried for real (a file created and
// removed, named as io::AtomicFile names its temporaries, "<path>.tmp.<pid>"): permission bits
// say nothing of read-only mounts, or of root.
/// Checks that `path` can be written (NOTE [output paths]); throws remat::Error otherwise.
inline void check_output_path(const std::string& what, const std::string& path) {
  REMAT_CHECK(!path.empty(), what, " is empty (expected a file path)");
  struct ::stat sb {};
  REMAT_CHECK(::stat(path.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode), what, " '", path,
              "' is a directory (expected a file path, e.g. '",
              path.back() == '/' ? path : path + "/", "model.safetensors'); nothing was trained");
  const std::string dir = folder_of(path);
  if (::stat(dir.c_str(), &sb) != 0) {
    const int e = errno;
    REMAT_CHECK(false, what, " '", path, "': the folder '", dir, "' ",
                e == ENOENT ? "does not exist" : std::strerror(e),
                " (expected an existing folder: create it first); nothing was trained");
  }
  REMAT_CHECK(S_ISDIR(sb.st_mode), what, " '", path, "': '", dir,
              "' is not a folder (expected an existing folder); nothing was trained");
  const std::string probe = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0 && errno != EEXIST) {
    const int e = errno;
    REMAT_CHECK(false, what, " '", path, "': cannot create a file in the folder '", dir, "': ",
                std::strerror(e), " (expected a writable folder); nothing was trained");
  }
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
  }
}

/// Where a file goes when its own path fails at write time (the folder went away, the disk is
/// full, the path became a directory), in order: beside it ("<path>.rescued-<pid>"), then in
/// the temporary folder ("$TMPDIR/<program>-<pid>-<file name>", /tmp without TMPDIR).
inline std::vector<std::string> fallback_paths(const std::string& path, const std::string& program) {
  const std::string pid = std::to_string(::getpid());
  const char* tmp = std::getenv("TMPDIR");
  const std::string tmpdir = tmp && *tmp ? tmp : "/tmp";
  const std::size_t slash = path.rfind('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return {path + ".rescued-" + pid, tmpdir + "/" + program + "-" + pid + "-" + base};
}

/// Writes with `write(p)` at p = `path`; if that throws, at each of fallback_paths(path,
/// program) in turn. Returns the path written and sets `why` to the failure at `path` (empty
/// when `path` itself was written). Throws remat::Error, naming every place and its failure,
/// only when all failed.
template <class Write>
std::string write_with_fallback(const std::string& path, const std::string& program, Write&& write,
                                std::string& why) {
  why.clear();
  std::string errors;
  std::vector<std::string> tries{path};
  for (const std::string& p : fallback_paths(path, program)) tries.push_back(p);
  for (const std::string& p : tries) {
    try {
      write(p);
      return p;
    } catch (const std::exception& e) {
      if (why.empty()) why = e.what();
      errors += std::string(errors.empty() ? "" : "; ") + "'" + p + "': " + e.what();
    }
  }
  throw Error(detail::cat(program, ": could not write '", path, "' anywhere: ", errors,
                          " (expected a writable folder for it, beside it or in $TMPDIR)"));
}

}  // namespace train
}  // namespace remat
