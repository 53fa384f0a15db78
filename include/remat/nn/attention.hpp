#pragma once
// SPDX-License-Identifier: MIT
// Causal multi-head self-attention, GPT-2 layout: c_attn (C -> 3C), heads, c_proj (C -> C).

#include <cstdint>

#include "remat/nn/layers.hpp"
#include "remat/ops/activation.hpp"
#include "remat/ops/attention.hpp"
#include "remat/ops/dropout.hpp"
#include "remat/ops/elementwise.hpp"
#include "remat/ops/mlp.hpp"

namespace remat {
namespace nn {

template <class B>
class CausalSelfAttention : public Module<B> {
 public:
  /// proj_std: the init std of c_proj (GPT-2 scales it by 1/sqrt(2 n_layer)).
  CausalSelfAttention(Tape<B>& tape, std::int64_t C, std::int64_t n_head, float std,
                      float proj_std, float dropout, std::uint64_t seed)
      : c_attn(tape, C, 3 * C, std, seed), c_proj(tape, C, C, proj_std, seed + 1),
        n_head_(n_head), dropout_(dropout) {
    REMAT_CHECK(n_head > 0 && C % n_head == 0, "remat::nn::CausalSelfAttention: n_embd ", C,
                " is not divisible by n_head ", n_head, " (expected head size = n_embd / n_head)");
    this->add_module("c_attn", c_attn);
    this->add_module("c_proj", c_proj);
  }

  // x (B, T, C) -> qkv (B, T, 3C) -> heads attend -> (B, T, C) -> c_proj
  Tensor<B> operator()(const Tensor<B>& x, bool training = true) const {
    return dropout(c_proj(self_attention(c_attn(x), n_head_, /*causal=*/true)), dropout_, training);
  }
  /// residual + the above: added inside c_proj's GEMM unless dropout is active in between
  Tensor<B> operator()(const Tensor<B>& x, bool training, const Tensor<B>& residual) const {
    const auto y = self_attention(c_attn(x), n_head_, /*causal=*/true);
    if (dropout_ > 0.0f && training) return residual + dropout(c_proj(y), dropout_, training);
    return c_proj(y, residual);
  }

  Linear<B> c_attn, c_proj;

 private:
  std::int64_t n_head_;
  float dropout_;
};

/// GPT-2 MLP: c_fc (C -> 4C), GELU, c_proj (4C -> C), dropout. Without active dropout it is one
/// op (remat::mlp: the GELU inside the GEMMs).
template <class B>
class MLP : public Module<B> {
 public:
  MLP(Tape<B>& tape, std::int64_t C, float std, float proj_std, float dropout, std::uint64_t seed)
      : c_fc(tape, C, 4 * C, std, seed), c_proj(tape, 4 * C, C, proj_std, seed + 1),
        dropout_(dropout) {
    this->add_module("c_fc", c_fc);
    this->add_module("c_proj", c_proj);
  }
  // x (B, T, C) -> (B, T, C). A bf16 x goes through linear, gelu, linear (remat::mlp is f32
  // only so far), the same ops and saved bytes.
  Tensor<B> operator()(const Tensor<B>& x, bool training = true) const {
    if (dropout_ > 0.0f && training) return dropout(c_proj(gelu(c_fc(x))), dropout_, training);
    if (x.dtype() != DType::f32) return c_proj(gelu(c_fc(x)));
    return mlp(x, c_fc.weight, c_fc.bias, c_proj.weight, c_proj.bias);
  }
  /// residual + the above: added inside c_proj's GEMM unless dropout is active in between
  Tensor<B> operator()(const Tensor<B>& x, bool training, const Tensor<B>& residual) const {
    if (dropout_ > 0.0f && training) return residual + (*this)(x, training);
    if (x.dtype() != DType::f32) return c_proj(gelu(c_fc(x)), residual);
    return mlp(x, c_fc.weight, c_fc.bias, c_proj.weight, c_proj.bias, residual);
  }
  Linear<B> c_fc, c_proj;

 private:
  float dropout_;
};

}  // namespace nn
}  // namespace remat
