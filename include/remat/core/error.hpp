#pragma once
// SPDX-License-Identifier: MIT
// remat::Error and the checking macros. Every failure the library can report is a remat::Error
// whose text says what failed, where (the op), what was expected, what was found, and a hint.
// The library never calls exit() or abort().

#include <sstream>
#include <stdexcept>
#include <string>

namespace remat {

/// The one exception type of the library (the CUDA backend derives CudaError and OutOfMemory).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Thrown by a backend when an allocation fails; says how much was asked for.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... A>
std::string cat(const A&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace detail

}  // namespace remat

/// REMAT_CHECK(cond, "remat::op: what; expected X, found Y (hint)"): throws remat::Error.
#define REMAT_CHECK(cond, ...)                                      \
  do {                                                              \
    if (!(cond)) throw ::remat::Error(::remat::detail::cat(__VA_ARGS__)); \
  } while (0)

/// REMAT_ASSERT guards internal invariants: a failure is a bug in remat, not in the caller.
#define REMAT_ASSERT(cond)                                                                   \
  do {                                                                                       \
    if (!(cond))                                                                             \
      throw ::remat::Error(::remat::detail::cat("remat bug: invariant '", #cond, "' failed at ", \
                                                __FILE__, ":", __LINE__,                     \
                                                " (please report this)"));                   \
  } while (0)
