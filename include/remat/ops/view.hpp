#pragma once
// SPDX-License-Identifier: MIT
// Shape ops: reshape (shares storage; f32 or bf16), transpose/permute, slice/split, concat
// (copies; f32).
// None keeps anything for backward: their gradients only move elements back.

#include <array>
#include <numeric>
#include <vector>

#include "remat/core/apply.hpp"
#include "remat/ops/cast.hpp"

namespace remat {

// y = x viewed under another shape (same storage).  dx += dy (same elements).
struct ReshapeOp {
  static constexpr const char* name = "reshape";
  template <class B>
  struct Saved {
    template <class F> void each(F) const {}
  };
  template <class B>
  static Tensor<B> forward(Saved<B>&, const Tensor<B>& x, Shape shape) {
    int infer = -1;
    std::int64_t known = 1;
    for (int i = 0; i < shape.rank(); ++i) {
      if (shape[i] == -1) {
        REMAT_CHECK(infer < 0, "remat::reshape: more than one -1 in ", shape.str());
        infer = i;
      } else {
        known *= shape[i];
      }
    }
    if (infer >= 0) {
      REMAT_CHECK(known > 0 && x.numel() % known == 0, "remat::reshape: cannot infer -1 in ",
                  shape.str(), " for ", x.numel(), " elements (shape ", x.shape().str(), ")");
      shape[infer] = x.numel() / known;
    }
    shape.check_concrete(name);
    REMAT_CHECK(shape.numel() == x.numel(), "remat::reshape: ", x.shape().str(), " has ",
                x.numel(), " elements, the new shape ", shape.str(), " has ", shape.numel(),
                " (expected the same count)");
    return detail::alias(x, shape);
  }
  template <class B>
  static void save(Saved<B>&, const Tensor<B>&, const Tensor<B>&, const Shape&) {}
  template <class B>
  static void backward(const Saved<B>&, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    if (dinp[0].dtype() == DType::f32 && dout.dtype() == DType::f32)
      B::add_into(dinp[0].template data<float>(), dout.template data<float>(), dout.numel());
    else  // a bf16 view's gradient: added in fp32, rounded once
      detail::convert_into(dinp[0], dout, /*add=*/true);
  }
};

// y's axis i is x's axis perm[i].  dx += permute(dy, inverse(perm)).
struct PermuteOp {
  static constexpr const char* name = "permute";
  template <class B>
  struct Saved {
    Shape yshape;
    std::array<int, Shape::kMaxRank> inverse{};
    template <class F> void each(F) const {}
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, std::vector<int> perm) {
    detail::check_f32("permute", "x", x);
    const int r = x.rank();
    REMAT_CHECK(static_cast<int>(perm.size()) == r, "remat::permute: ", perm.size(),
                " axes given for shape ", x.shape().str(), " (expected ", r, ")");
    std::array<bool, Shape::kMaxRank> seen{};
    Shape yshape;
    for (int i = 0; i < r; ++i) {
      const int a = x.shape().axis(perm[static_cast<std::size_t>(i)], "permute");
      REMAT_CHECK(!seen[static_cast<std::size_t>(a)], "remat::permute: axis ", a,
                  " appears twice (expected a permutation of 0..", r - 1, ")");
      seen[static_cast<std::size_t>(a)] = true;
      perm[static_cast<std::size_t>(i)] = a;
      s.inverse[static_cast<std::size_t>(a)] = i;
      yshape.push_back(x.shape()[a]);
    }
    s.yshape = yshape;
    auto y = detail::make_tensor<B>(&x.tape(), yshape);
    B::permute(y.template data<float>(), x.template data<float>(), x.shape(), perm.data(), false);
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>& y, const Tensor<B>& x, const std::vector<int>& perm) {
    s.yshape = y.shape();
    for (int i = 0; i < x.rank(); ++i)
      s.inverse[static_cast<std::size_t>(x.shape().axis(perm[static_cast<std::size_t>(i)], name))] = i;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    B::permute(dinp[0].template data<float>(), dout.template data<float>(), s.yshape,
               s.inverse.data(), true);
  }
};

// y = x[..., start:start+len, ...] along `axis`.  dx[..., start:start+len, ...] += dy.
struct SliceOp {
  static constexpr const char* name = "slice";
  template <class B>
  struct Saved {
    std::int64_t outer = 1, n = 0, inner = 1, start = 0, len = 0;
    template <class F> void each(F) const {}
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, int axis, std::int64_t start,
                           std::int64_t len) {
    detail::check_f32("slice", "x", x);
    const int a = x.shape().axis(axis, "slice");
    s.n = x.shape()[a];
    // start + len may not fit int64 (slice(x, 1, INT64_MAX, 2)): compare without adding.
    REMAT_CHECK(start >= 0 && len >= 0 && start <= s.n && len <= s.n - start, "remat::slice: "
                "start ", start, " and length ", len, " are outside axis ", a, " of shape ",
                x.shape().str(), " (expected 0 <= start <= start + len <= ", s.n, ")");
    auto y = detail::make_tensor<B>(&x.tape(), x.shape().with(a, len));
    save(s, y, x, axis, start, len);
    B::copy_block(y.template data<float>(), len, 0, x.template data<float>(), s.n, start, len,
                  s.outer, s.inner, false);
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>& x, int axis, std::int64_t start,
                   std::int64_t len) {
    const int a = x.shape().axis(axis, name);
    s.n = x.shape()[a];
    s.outer = x.shape().prod(0, a);
    s.inner = x.shape().prod(a + 1, x.rank());
    s.start = start;
    s.len = len;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    B::copy_block(dinp[0].template data<float>(), s.n, s.start, dout.template data<float>(), s.len,
                  0, s.len, s.outer, s.inner, true);
  }
};

// y = the inputs joined along `axis`.  dx_i += the block of dy that x_i filled.
struct ConcatOp {
  static constexpr const char* name = "concat";
  template <class B>
  struct Saved {
    std::int64_t outer = 1, n = 0, inner = 1;
    std::vector<std::int64_t> sizes;
    template <class F> void each(F) const {}
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const std::vector<Tensor<B>>& xs, int axis) {
    const Shape& first = xs[0].shape();
    const int a = first.axis(axis, "concat");
    for (std::size_t i = 0; i < xs.size(); ++i) {
      detail::check_f32("concat", "every input", xs[i]);
      REMAT_CHECK(xs[i].rank() == first.rank() && xs[i].shape().with(a, 0) == first.with(a, 0),
                  "remat::concat: input ", i, " has shape ", xs[i].shape().str(),
                  ", input 0 has ", first.str(), " (expected equal shapes except along axis ", a,
                  ")");
    }
    Shape yshape = first;
    yshape[a] = 0;
    for (const auto& x : xs) yshape[a] += x.shape()[a];
    save(s, Tensor<B>(), xs, axis);
    auto y = detail::make_tensor<B>(&xs[0].tape(), yshape);
    std::int64_t at = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      B::copy_block(y.template data<float>(), s.n, at, xs[i].template data<float>(), s.sizes[i], 0,
                    s.sizes[i], s.outer, s.inner, false);
      at += s.sizes[i];
    }
    return y;
  }
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const std::vector<Tensor<B>>& xs, int axis) {
    const int a = xs[0].shape().axis(axis, name);
    s.sizes.clear();
    s.n = 0;
    for (const auto& x : xs) {
      s.sizes.push_back(x.shape()[a]);
      s.n += x.shape()[a];
    }
    s.outer = xs[0].shape().prod(0, a);
    s.inner = xs[0].shape().prod(a + 1, xs[0].rank());
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp) {
    std::int64_t at = 0;
    for (std::size_t i = 0; i < dinp.size(); ++i) {
      if (dinp[i].defined())
        B::copy_block(dinp[i].template data<float>(), s.sizes[i], 0, dout.template data<float>(),
                      s.n, at, s.sizes[i], s.outer, s.inner, true);
      at += s.sizes[i];
    }
  }
};

/// x under a new shape with the same element count (one dimension may be -1). Shares storage.
template <class B> Tensor<B> reshape(const Tensor<B>& x, const Shape& shape) {
  return detail::apply<ReshapeOp>(std::array<Tensor<B>, 1>{x}, shape);
}
/// Axes reordered: the result's axis i is x's axis perm[i]. Copies.
template <class B> Tensor<B> permute(const Tensor<B>& x, const std::vector<int>& perm) {
  return detail::apply<PermuteOp>(std::array<Tensor<B>, 1>{x}, perm);
}
/// Two axes swapped. Copies.
template <class B> Tensor<B> transpose(const Tensor<B>& x, int a0, int a1) {
  std::vector<int> perm(static_cast<std::size_t>(x.rank()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<std::size_t>(x.shape().axis(a0, "transpose"))],
            perm[static_cast<std::size_t>(x.shape().axis(a1, "transpose"))]);
  return permute(x, perm);
}
/// x[..., start:start+len, ...] along `axis`. Copies.
template <class B> Tensor<B> slice(const Tensor<B>& x, int axis, std::int64_t start, std::int64_t len) {
  return detail::apply<SliceOp>(std::array<Tensor<B>, 1>{x}, axis, start, len);
}
/// x cut along `axis` into pieces of the given sizes (which must add up to the axis length).
template <class B>
std::vector<Tensor<B>> split(const Tensor<B>& x, int axis, const std::vector<std::int64_t>& sizes) {
  const int a = x.shape().axis(axis, "split");
  // The running sum stays <= the axis length (< 2^60) before each addition of a size that is
  // too, so it cannot overflow.
  const std::int64_t n = x.shape()[a];
  std::int64_t total = 0;
  for (std::size_t i = 0; i < sizes.size() && total <= n; ++i) {
    REMAT_CHECK(sizes[i] >= 0 && sizes[i] <= n, "remat::split: size ", i, " is ", sizes[i],
                " for axis ", a, " of ", x.shape().str(), " (expected 0 <= size <= ", n, ")");
    total += sizes[i];
  }
  REMAT_CHECK(total == n, "remat::split: sizes add up to ", total > n ? "more than " : "", total,
              " but axis ", a, " of ", x.shape().str(), " has ", n, " (expected equal)");
  std::vector<Tensor<B>> out;
  std::int64_t at = 0;
  for (auto s : sizes) {
    out.push_back(slice(x, a, at, s));
    at += s;
  }
  return out;
}
/// The tensors joined along `axis`.
template <class B> Tensor<B> concat(const std::vector<Tensor<B>>& xs, int axis) {
  return detail::apply_list<ConcatOp>(xs, axis);
}

}  // namespace remat
