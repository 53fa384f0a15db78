#pragma once
// SPDX-License-Identifier: MIT
// Rotary position embeddings (RoPE; Su et al. 2021) in Hugging Face's convention, as Llama,
// Qwen and SmolLM2 apply them to q and k: each head's D values are two halves, and the pair
// (j, j + D/2) at position p turns by the angle p f_j (math::rope_pair, core/math.hpp):
//   y_j = x_j cos - x_{j+D/2} sin,   y_{j+D/2} = x_{j+D/2} cos + x_j sin
//   f_j = theta^(-2j/D), j < D/2, optionally rescaled by Llama 3's rope_scaling (rope_frequencies)
// y = R x with R orthogonal, so dx = R^T dy: the same kernel turning by -p f_j. Nothing is saved:
// backward needs only the shape and the frequencies. x and y f32 or bf16 (the same type; NOTE
// [precision policy] in ops/cast.hpp), the angles and products in fp32.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "remat/core/apply.hpp"
#include "remat/core/kernel.hpp"
#include "remat/core/math.hpp"
#include "remat/ops/cast.hpp"

namespace remat {

/// The frequencies of rotary embeddings: Hugging Face's rope_theta and rope_scaling.
struct RopeConfig {
  float theta = 10000.0f;  // rope_theta (Llama 2: 1e4, Llama 3: 5e5, SmolLM2-135M: 1e5)
  // rope_scaling {"rope_type": "llama3", ...} (Llama 3.1 and 3.2); factor 0: none
  float factor = 0.0f, low_freq_factor = 1.0f, high_freq_factor = 4.0f;
  std::int64_t original_max_position_embeddings = 8192;
};

/// The largest head size rotary embeddings take (its D/2 frequencies travel in the kernel's
/// arguments); Llama, Qwen and SmolLM2 use 64 or 128.
inline constexpr std::int64_t kRopeMaxHeadSize = 256;

/// The frequencies f_j, j < D/2, by value (a kernel argument on CUDA).
struct RopeFrequencies {
  float f[kRopeMaxHeadSize / 2] = {};
};

/// f_j, j < D/2, as Hugging Face computes them in fp32: 1 / theta^((2j)/D); with Llama 3's
/// scaling, a wavelength 2 pi / f longer than original / low_freq_factor takes f / factor, one
/// shorter than original / high_freq_factor keeps f, and one between them the blend
/// (1 - s) f / factor + s f, s = (original / wavelength - low) / (high - low).
inline std::vector<float> rope_frequencies(std::int64_t D, const RopeConfig& c) {
  std::vector<float> f(static_cast<std::size_t>(D / 2));
  for (std::int64_t j = 0; j < D / 2; ++j) {
    const float e = static_cast<float>(2 * j) / static_cast<float>(D);
    float v = 1.0f / std::pow(c.theta, e);
    if (c.factor > 0.0f) {
      const float original = static_cast<float>(c.original_max_position_embeddings);
      const float wavelength = 2.0f * 3.14159265358979323846f / v;
      if (wavelength > original / c.low_freq_factor) {
        v = v / c.factor;
      } else if (!(wavelength < original / c.high_freq_factor)) {
        const float s = (original / wavelength - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
        v = (1.0f - s) * v / c.factor + s * v;
      }
    }
    f[static_cast<std::size_t>(j)] = v;
  }
  return f;
}

// y = R(+a) x forward; dx (+)= R(-a) dy backward (dy/dx = R, orthogonal). Saves nothing.
struct RopeOp {
  static constexpr const char* name = "rope";
  // y (batch, T, H, D) (+)= x turned by +-(pos0 + t) f_j per pair; `add`: y is added into
  struct Rotate {
    static constexpr const char* name = "rope_rotate";
    void* y;
    const void* x;
    std::int64_t batch, T, H, D, pos0;
    RopeFrequencies f;
    bool inverse, add;
    DType yt = DType::f32, xt = DType::f32;
    void work(Work& k) const {
      const double n = static_cast<double>(batch) * T * H * D;
      k.add(WorkKind::pointwise, 4.0 * n, (1.0 * dtype_size(yt) * (add ? 2 : 1) + dtype_size(xt)) * n);
    }
  };
  template <class B>
  struct Saved {
    std::int64_t batch = 0, T = 0, H = 0, D = 0, pos0 = 0;
    RopeFrequencies f;
    template <class F> void each(F) const {}
  };
  template <class B>
  static Tensor<B> forward(Saved<B>& s, const Tensor<B>& x, const RopeConfig& c, std::int64_t pos0) {
    detail::check_float(name, "x", x);
    const Shape& sh = x.shape();
    REMAT_CHECK(sh.rank() >= 3 && sh[-1] % 2 == 0 && sh[-1] >= 2 && sh[-1] <= kRopeMaxHeadSize, "remat::rope: x is ",
                sh.str(), " (expected [..., T, heads, D] with an even head size D of 2..", kRopeMaxHeadSize, ")");
    REMAT_CHECK(c.theta > 0.0f && pos0 >= 0, "remat::rope: theta ", c.theta, ", first position ", pos0,
                " (expected theta > 0 and a position >= 0)");
    REMAT_CHECK(c.factor == 0.0f || (c.factor > 0.0f && c.high_freq_factor > c.low_freq_factor &&
                                     c.low_freq_factor > 0.0f && c.original_max_position_embeddings > 0),
                "remat::rope: Llama 3 scaling with factor ", c.factor, ", low_freq_factor ", c.low_freq_factor,
                ", high_freq_factor ", c.high_freq_factor, ", original_max_position_embeddings ",
                c.original_max_position_embeddings, " (expected factor > 0, 0 < low < high and a positive length)");
    s.D = sh[-1];
    s.H = sh[-2];
    s.T = sh[-3];
    s.batch = s.T * s.H * s.D == 0 ? 0 : x.numel() / (s.T * s.H * s.D);
    s.pos0 = pos0;
    const std::vector<float> f = rope_frequencies(s.D, c);
    std::copy(f.begin(), f.end(), s.f.f);
    auto y = detail::empty_like(x);
    run_kernel<B>(Rotate{y.template data<void>(), x.template data<void>(), s.batch, s.T, s.H, s.D, s.pos0, s.f,
                         false, false, x.dtype(), x.dtype()});
    return y;
  }
  template <class B>
  static void backward(const Saved<B>& s, const Tensor<B>& dout, std::vector<Tensor<B>>& dinp,
                       const std::vector<char>& fresh) {  // NOTE [fresh gradient buffers]
    if (!dinp[0].defined()) return;
    run_kernel<B>(Rotate{dinp[0].template data<void>(), dout.template data<void>(), s.batch, s.T, s.H, s.D,
                         s.pos0, s.f, true, !detail::fresh_at(fresh, 0), dinp[0].dtype(), dout.dtype()});
  }
};

/// Rotary embeddings of x [..., T, heads, D] (q or k after its projection, heads split off),
/// positions pos0, pos0 + 1, ... along T, in Hugging Face's convention (rotate_half).
template <class B>
Tensor<B> rope(const Tensor<B>& x, const RopeConfig& c = {}, std::int64_t pos0 = 0) {
  return detail::apply<RopeOp>(std::array<Tensor<B>, 1>{x}, c, pos0);
}

/// The rotary embeddings' kernel (ops/kernels.hpp joins the families' lists).
using RopeKernels = KernelList<RopeOp::Rotate>;

}  // namespace remat
