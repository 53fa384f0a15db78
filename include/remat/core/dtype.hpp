#pragma once
// SPDX-License-Identifier: MIT
// Element types: fp32 for values, bf16 for values stored in half the bytes (core/bf16.hpp: the
// type and its conversions; ops compute in fp32), int32 for token ids and class targets.

#include <cstddef>
#include <cstdint>

#include "remat/core/bf16.hpp"

namespace remat {

enum class DType : std::uint8_t { f32, i32, bf16 };

inline constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::f32: return 4;
    case DType::i32: return 4;
    case DType::bf16: return 2;
  }
  return 0;
}
inline constexpr const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f32: return "f32";
    case DType::i32: return "i32";
    case DType::bf16: return "bf16";
  }
  return "?";
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::bf16; };

}  // namespace remat
