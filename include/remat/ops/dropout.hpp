#pragma once
// SPDX-License-Identifier: MIT
// Dropout with a counter-based RNG: the mask of element i is a pure function of the tape's
// seed, the op's counter offset and i, so backward (and a checkpoint replay that restores the
// counter) regenerates it. No mask is stored.

#include <array>

#include "remat/core/apply.hpp"
#include "remat/ops/cast.hpp"

namespace remat {

// y = x m / (1 - p), m_i = [uniform(seed, offset, i) >= p].   dx = dy m / (1 - p)
struct DropoutOp {
  static constexpr const char* name = "dropout";
  template <class B>
  struct Saved {
    float p = 0.0f;
    std::uint64_t seed = 0, offset = 0;
    template <class F> void each(F) const {}
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, float p) {
    detail::check_float(name, "x", x);  // bf16: NOTE [bf16 by widening]
    const auto xf = detail::widened(x);
    auto y = detail::empty_like(xf);
    save(s, y, x, p);  // takes the op's counters from the tape's stream
    B::dropout_forward(y.template data<float>(), xf.template data<float>(), x.numel(), p, s.seed,
                       s.offset);
    return detail::narrowed(y, x.dtype());
  }
  // The replay of a checkpoint restores the tape's counter, so this draws the same offset.
  template <class B>
  static void save(Saved<B>& s, const Tensor<B>&, const Tensor<B>& x, float p) {
    s.p = p;
    s.seed = x.tape().seed();
    s.offset = x.tape().next_rng_offset(static_cast<std::uint64_t>(x.numel()));
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {  // NOTE [fresh gradient buffers]
    const auto g = detail::widened(dout);
    detail::F32Grad<B> dx(dinp[0], detail::fresh_at(fresh, 0));
    B::dropout_backward(dx.data(), g.template data<float>(), dout.numel(), s.p, s.seed, s.offset,
                        dx.set());
    dx.finish();
  }
};

/// Zeroes each element with probability p and scales the rest by 1/(1-p); identity when
/// p == 0 or when not training.
template <class B> Tensor<B> dropout(const Tensor<B>& x, float p, bool training = true) {
  REMAT_CHECK(p >= 0.0f && p < 1.0f, "remat::dropout: probability ", p,
              " is out of range (expected 0 <= p < 1)");
  if (p == 0.0f || !training) return x;
  return detail::apply<DropoutOp>(std::array<Tensor<B>, 1>{x}, p);
}

}  // namespace remat
