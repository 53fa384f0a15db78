#pragma once
// SPDX-License-Identifier: MIT
// Element types. fp32 for values and int32 for token ids and class targets today; the enum is
// where bf16/fp16 join when a backend implements them.

#include <cstddef>
#include <cstdint>

namespace remat {

enum class DType : std::uint8_t { f32, i32 };

inline constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::f32: return 4;
    case DType::i32: return 4;
  }
  return 0;
}
inline constexpr const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f32: return "f32";
    case DType::i32: return "i32";
  }
  return "?";
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };

}  // namespace remat
