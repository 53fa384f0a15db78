#pragma once
// SPDX-License-Identifier: MIT
// Checked arithmetic for sizes read from files (byte counts, offsets, token counts): a result
// that does not fit is reported, never wrapped. Shapes use Shape::numel_fits (core/shape.hpp).

#include <cstdint>
#include <string>

#include "remat/core/error.hpp"

namespace remat {
namespace io {
namespace detail {

/// a * b, or throws remat::Error "remat::io::<what>: <where>: <field> overflows (a x b ...)".
inline std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const char* what,
                                 const std::string& where, const char* field) {
  std::uint64_t r = 0;
  REMAT_CHECK(!__builtin_mul_overflow(a, b, &r), "remat::io::", what, ": ", where, ": ", field,
              " overflows (", a, " x ", b, " does not fit 64 bits; the file is corrupt or crafted)");
  return r;
}

/// a + b, or throws remat::Error as checked_mul does.
inline std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const char* what,
                                 const std::string& where, const char* field) {
  std::uint64_t r = 0;
  REMAT_CHECK(!__builtin_add_overflow(a, b, &r), "remat::io::", what, ": ", where, ": ", field,
              " overflows (", a, " + ", b, " does not fit 64 bits; the file is corrupt or crafted)");
  return r;
}

}  // namespace detail
}  // namespace io
}  // namespace remat
