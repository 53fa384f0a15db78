#pragma once
// SPDX-License-Identifier: MIT
// Reading whole files for the library's readers (weights, configs, tokenizers, token data): a
// regular file, a pipe or a terminal, with an optional size cap that is enforced before any
// memory is reserved (NOTE [hostile files] in io/safetensors.hpp).

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "remat/core/error.hpp"

namespace remat {
namespace io {

/// No size cap: read_file reads what the file holds (bounded by memory only).
inline constexpr std::uint64_t kNoSizeCap = std::numeric_limits<std::uint64_t>::max();

namespace detail {

/// The error for a file over its cap; `kind` says what the file is ("a config.json").
inline Error too_large(const std::string& path, const char* what, std::uint64_t n,
                       std::uint64_t cap, const char* kind) {
  return Error(::remat::detail::cat("remat::io::", what, ": '", path, "' has ",
                                    n == kNoSizeCap ? std::string("more than ") + std::to_string(cap)
                                                    : std::to_string(n),
                                    " bytes, more than the ", cap, " bytes allowed for ", kind,
                                    " (is it the right file? a real one is far smaller)"));
}

/// The bytes of a pipe (or a terminal) read to its end: there is no size to check first, so
/// the buffer grows as the data comes, as `cat` would read it, and stops past `cap` bytes.
inline std::vector<char> read_stream(const std::string& path, const char* what,
                                     std::uint64_t cap = kNoSizeCap, const char* kind = "it") {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  REMAT_CHECK(f != nullptr, "remat::io::", what, ": cannot open '", path, "': ", std::strerror(errno),
              " (is it readable?)");
  std::vector<char> buf;
  char chunk[65536];
  try {
    for (;;) {
      const std::size_t n = std::fread(chunk, 1, sizeof chunk, f);
      buf.insert(buf.end(), chunk, chunk + n);
      if (buf.size() > cap) {
        std::fclose(f);
        throw too_large(path, what, kNoSizeCap, cap, kind);
      }
      if (n < sizeof chunk) break;
    }
  } catch (const std::bad_alloc&) {
    std::fclose(f);
    throw OutOfMemory(::remat::detail::cat("remat::io::", what, ": '", path, "' gave more than ",
                                           buf.size(), " bytes, more than the host memory can hold"));
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  REMAT_CHECK(!failed, "remat::io::", what, ": reading '", path, "' failed after ", buf.size(), " bytes");
  return buf;
}

}  // namespace detail

/// The size of a regular file, or kNoSizeCap for a pipe, socket or terminal (no size to know).
/// A directory or another device (whose "size" can be anything) is an error.
inline std::uint64_t file_size(const std::string& path, const char* what) {
  struct ::stat sb {};
  REMAT_CHECK(::stat(path.c_str(), &sb) == 0, "remat::io::", what, ": cannot open '", path, "': ",
              std::strerror(errno), " (does the file exist and is it readable?)");
  REMAT_CHECK(!S_ISDIR(sb.st_mode), "remat::io::", what, ": '", path,
              "' is a directory, not a regular file (expected a file)");
  if (S_ISFIFO(sb.st_mode) || S_ISSOCK(sb.st_mode)) return kNoSizeCap;
  if (S_ISCHR(sb.st_mode)) {
    // A terminal reads like a pipe (to end of input, Ctrl-D); another device (/dev/zero,
    // /dev/urandom) never ends, so it is refused.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
    const bool tty = fd >= 0 && ::isatty(fd);
    if (fd >= 0) ::close(fd);
    if (tty) return kNoSizeCap;
  }
  REMAT_CHECK(S_ISREG(sb.st_mode), "remat::io::", what, ": '", path,
              "' is a device, not a regular file (expected a file, a pipe or a terminal)");
  return static_cast<std::uint64_t>(sb.st_size);
}

/// Whether `path` names an existing regular file (an optional file beside another: a
/// config.json, a tokenizer's files); false for a directory, a device or nothing.
inline bool is_regular_file(const std::string& path) {
  struct ::stat sb {};
  return ::stat(path.c_str(), &sb) == 0 && S_ISREG(sb.st_mode);
}

/// The bytes of a file. A regular file's size comes from stat() and is checked against `cap`
/// before memory is reserved (`kind` names the file in that error: "a config.json"); a pipe or
/// a terminal (e.g. /dev/stdin) is read to its end, or until it passes `cap`.
inline std::vector<char> read_file(const std::string& path, const char* what,
                                   std::uint64_t cap = kNoSizeCap, const char* kind = "it") {
  const std::uint64_t n = file_size(path, what);
  if (n == kNoSizeCap) return detail::read_stream(path, what, cap, kind);
  if (n > cap) throw detail::too_large(path, what, n, cap, kind);
  std::ifstream f(path, std::ios::binary);
  REMAT_CHECK(f.good(), "remat::io::", what, ": cannot open '", path,
              "' (does the file exist and is it readable?)");
  std::vector<char> buf;
  try {
    buf.resize(static_cast<std::size_t>(n));
  } catch (const std::exception&) {
    throw OutOfMemory(::remat::detail::cat("remat::io::", what, ": '", path, "' has ", n,
                                           " bytes, more than the host memory can hold"));
  }
  REMAT_CHECK(f.read(buf.data(), static_cast<std::streamsize>(n)) && f.gcount() ==
                  static_cast<std::streamsize>(n),
              "remat::io::", what, ": cannot read the ", n, " bytes of '", path,
              "' (did it change while being read?)");
  return buf;
}

}  // namespace io
}  // namespace remat
