#pragma once
// SPDX-License-Identifier: MIT
// The basic layers: Linear (GPT-2 "Conv1D" layout, weight [in, out]), Projection (torch.nn.Linear's
// layout, weight [out, in]), LayerNorm, RMSNorm, Embedding.

#include <cstdint>

#include "remat/nn/module.hpp"
#include "remat/ops/cast.hpp"
#include "remat/ops/embedding.hpp"
#include "remat/ops/elementwise.hpp"
#include "remat/ops/layer_norm.hpp"
#include "remat/ops/matmul.hpp"

namespace remat {
namespace nn {

/// y = x W + b with W [in, out] (as GPT-2 stores it), b [out]. Weights N(0, std^2), bias 0.
template <class B>
class Linear : public Module<B> {
 public:
  Linear(Tape<B>& tape, std::int64_t in, std::int64_t out, float std, std::uint64_t seed)
      : weight(this->add_parameter("weight", init::normal(tape, {in, out}, std, seed))),
        bias(this->add_parameter("bias", init::constant(tape, {out}, 0.0f))) {}
  /// x W + b, computed in x's type: a bf16 x takes a bf16 copy of the f32 weight, made here
  /// by a recorded cast (its gradient f32; NOTE [precision policy] in ops/cast.hpp)
  Tensor<B> operator()(const Tensor<B>& x) const { return linear(x, weight_as(x), bias); }
  /// residual + x W + b in one GEMM (a residual connection after the layer)
  Tensor<B> operator()(const Tensor<B>& x, const Tensor<B>& residual) const {
    return linear(x, weight_as(x), bias, residual);
  }
  /// The weight in x's element type (the weight itself when they agree).
  Tensor<B> weight_as(const Tensor<B>& x) const { return to_dtype(weight, x.dtype()); }
  Tensor<B> weight, bias;
};

/// torch.nn.Linear's layout: y = x W^T + b with W [out, in] and an optional bias [out]. Weights
/// N(0, std^2), bias 0. Computed in x's type (a bf16 x takes a recorded bf16 cast of W).
template <class B>
class Projection : public Module<B> {
 public:
  Projection(Tape<B>& tape, std::int64_t in, std::int64_t out, bool with_bias, float std,
             std::uint64_t seed)
      : weight(this->add_parameter("weight", init::normal(tape, {out, in}, std, seed))) {
    if (with_bias) bias = this->add_parameter("bias", init::constant(tape, {out}, 0.0f));
  }
  // x (..., in) -> (..., out)
  Tensor<B> operator()(const Tensor<B>& x) const {
    const Tensor<B> y = matmul(x, to_dtype(weight, x.dtype()), false, /*tb=*/true);
    return bias.defined() ? y + to_dtype(bias, x.dtype()) : y;
  }
  Tensor<B> weight, bias;
};

/// Layer norm over the last axis: weight 1, bias 0, eps 1e-5 (GPT-2).
template <class B>
class LayerNorm : public Module<B> {
 public:
  LayerNorm(Tape<B>& tape, std::int64_t C, float eps_ = 1e-5f)
      : weight(this->add_parameter("weight", init::constant(tape, {C}, 1.0f))),
        bias(this->add_parameter("bias", init::constant(tape, {C}, 0.0f))),
        eps(eps_) {}
  Tensor<B> operator()(const Tensor<B>& x) const { return layer_norm(x, weight, bias, eps); }
  Tensor<B> weight, bias;
  float eps;
};

/// RMSNorm over the last axis, weight 1 (x / sqrt(mean(x^2) + eps) * weight).
template <class B>
class RMSNorm : public Module<B> {
 public:
  RMSNorm(Tape<B>& tape, std::int64_t C, float eps_)
      : weight(this->add_parameter("weight", init::constant(tape, {C}, 1.0f))), eps(eps_) {}
  Tensor<B> operator()(const Tensor<B>& x) const { return rms_norm(x, weight, eps); }
  Tensor<B> weight;
  float eps;
};

/// A table of `rows` vectors of size C, looked up by integer ids. With used_rows < rows, the
/// rows past used_rows are padding (NOTE [padded parameters]): zero, and left out of files.
template <class B>
class Embedding : public Module<B> {
 public:
  Embedding(Tape<B>& tape, std::int64_t rows, std::int64_t C, float std, std::uint64_t seed,
            std::int64_t used_rows = -1)
      : weight(this->add_parameter("weight", init::normal(tape, {rows, C}, std, seed),
                                   used_rows < rows ? used_rows : -1)) {
    if constexpr (!is_meta_backend_v<B>)
      if (used_rows >= 0 && used_rows < rows)  // the draws of the used rows are the unpadded's
        B::fill(weight.template mutable_data<float>() + used_rows * C, (rows - used_rows) * C, 0.0f);
  }
  Tensor<B> operator()(const Tensor<B>& ids) const { return embedding(weight, ids); }
  Tensor<B> weight;
};

}  // namespace nn
}  // namespace remat
