#pragma once
// SPDX-License-Identifier: MIT
// Shape: up to 6 dimensions, stored inline (no allocation), row-major (last dimension fastest).

#include <array>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "remat/core/error.hpp"

namespace remat {

class Shape {
 public:
  static constexpr int kMaxRank = 6;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(const std::vector<std::int64_t>& dims) { assign(dims.begin(), dims.end()); }

  int rank() const noexcept { return rank_; }
  /// Dimension i; negative i counts from the back (-1 is the last).
  std::int64_t operator[](int i) const { return dims_[static_cast<std::size_t>(index(i))]; }
  std::int64_t& operator[](int i) { return dims_[static_cast<std::size_t>(index(i))]; }
  std::int64_t back() const { return (*this)[-1]; }

  std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
    return n;
  }
  /// Product of dimensions [begin, end).
  std::int64_t prod(int begin, int end) const {
    std::int64_t n = 1;
    for (int i = begin; i < end; ++i) n *= (*this)[i];
    return n;
  }
  /// Normalizes an axis that may be negative; throws if out of range.
  int axis(int a, const char* op) const {
    const int r = a < 0 ? a + rank_ : a;
    REMAT_CHECK(r >= 0 && r < rank_, "remat::", op, ": axis ", a, " is out of range for shape ",
                str(), " (expected -", rank_, " <= axis < ", rank_, ")");
    return r;
  }

  void push_back(std::int64_t d) {
    REMAT_CHECK(rank_ < kMaxRank, "remat::Shape: more than ", kMaxRank, " dimensions");
    REMAT_CHECK(d >= -1, "remat::Shape: negative dimension ", d, " (dimensions are >= 0; only "
                "reshape accepts one -1, the dimension to infer)");
    dims_[static_cast<std::size_t>(rank_++)] = d;
  }
  Shape with(int i, std::int64_t d) const {
    Shape s = *this;
    s[i] = d;
    return s;
  }
  /// Dimensions [begin, end) as a new shape.
  Shape sub(int begin, int end) const {
    Shape s;
    for (int i = begin; i < end; ++i) s.push_back((*this)[i]);
    return s;
  }
  /// True when `suffix` equals the last suffix.rank() dimensions of this shape.
  bool ends_with(const Shape& suffix) const {
    if (suffix.rank_ > rank_) return false;
    for (int i = 1; i <= suffix.rank_; ++i)
      if ((*this)[-i] != suffix[-i]) return false;
    return true;
  }

  /// True when no dimension is negative: a shape a tensor can have (-1 is only reshape's marker).
  bool is_concrete() const noexcept {
    for (int i = 0; i < rank_; ++i)
      if (dims_[static_cast<std::size_t>(i)] < 0) return false;
    return true;
  }
  /// True when the product of the positive dimensions, times 8 bytes an element, fits in int64.
  /// A zero dimension does not excuse the others (and the answer does not depend on the order
  /// of the dimensions): the products of sub-ranges that ops compute (outer, inner sizes) of
  /// a [0, 2^62] tensor would overflow as those of [2^62, 0] would.
  bool numel_fits() const noexcept {
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max() / 8;
    std::int64_t n = 1;
    for (int i = 0; i < rank_; ++i) {
      const std::int64_t d = dims_[static_cast<std::size_t>(i)];
      if (d <= 0) continue;
      if (n > kMax / d) return false;
      n *= d;
    }
    return true;
  }
  /// Throws unless a tensor can have this shape: dimensions >= 0 and a product that fits.
  /// `what` names the factory or op in the message.
  void check_concrete(const char* what) const {
    REMAT_CHECK(is_concrete(), "remat::", what, ": shape ", str(), " has a negative dimension "
                "(expected every dimension >= 0; only reshape accepts -1, the dimension to infer)");
    REMAT_CHECK(numel_fits(), "remat::", what, ": shape ", str(), " has more elements than "
                "memory can address (the product of the dimensions overflows)");
  }

  bool operator==(const Shape& o) const noexcept {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[static_cast<std::size_t>(i)] != o.dims_[static_cast<std::size_t>(i)]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const noexcept { return !(*this == o); }

  std::vector<std::int64_t> vec() const { return {dims_.begin(), dims_.begin() + rank_}; }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) {
      if (i) s += ", ";
      s += std::to_string(dims_[static_cast<std::size_t>(i)]);
    }
    return s + "]";
  }

 private:
  template <class It>
  void assign(It b, It e) {
    for (; b != e; ++b) push_back(*b);
    REMAT_CHECK(numel_fits(), "remat::Shape: ", str(), " has more elements than memory can "
                "address (the product of the dimensions overflows)");
  }
  int index(int i) const {
    const int r = i < 0 ? i + rank_ : i;
    REMAT_ASSERT(r >= 0 && r < rank_);
    return r;
  }
  std::array<std::int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

}  // namespace remat
