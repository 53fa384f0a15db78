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

namespace math {
/// Element i of a buffer of f32 or bf16 values, as fp32 (bf16 widened exactly).
REMAT_HOST_DEVICE inline float load_f32(const void* p, DType t, std::int64_t i) {
  return t == DType::bf16 ? from_bf16(static_cast<const bf16*>(p)[i]) : static_cast<const float*>(p)[i];
}
/// Stores v as element i of a buffer of f32 or bf16 values (bf16: rounded to nearest even).
REMAT_HOST_DEVICE inline void store_f32(void* p, DType t, std::int64_t i, float v) {
  if (t == DType::bf16)
    static_cast<bf16*>(p)[i] = to_bf16(v);
  else
    static_cast<float*>(p)[i] = v;
}
}  // namespace math

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::bf16; };

}  // namespace remat
