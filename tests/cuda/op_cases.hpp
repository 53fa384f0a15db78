#pragma once
// SPDX-License-Identifier: MIT
// The same computations on any backend, for comparing the CUDA backend with the CPU one: every
// op forward and backward on fixed random inputs, and a GPT step with each checkpoint strategy.
// Included by a g++ unit (B = Cpu) and an nvcc unit (B = Cuda): core, ops and nn only.

#include <string>
#include <vector>

#include "remat/checkpoint/checkpoint.hpp"
#include "remat/nn/gpt.hpp"
#include "remat/ops/activation.hpp"
#include "remat/ops/attention.hpp"
#include "remat/ops/dropout.hpp"
#include "remat/ops/elementwise.hpp"
#include "remat/ops/embedding.hpp"
#include "remat/ops/layer_norm.hpp"
#include "remat/ops/mlp.hpp"
#include "remat/ops/loss.hpp"
#include "remat/ops/matmul.hpp"
#include "remat/ops/reduce.hpp"
#include "remat/ops/softmax.hpp"
#include "remat/ops/unary.hpp"
#include "remat/ops/view.hpp"
#include "remat/ops/where.hpp"
#include "remat/optim/adamw.hpp"
#include "remat/optim/grad.hpp"
#include "remat/optim/sgd.hpp"

namespace remat_cuda_test {

/// Output and gradients of the inputs (or of the parameters, for the GPT).
struct Result {
  std::vector<float> out;
  std::vector<std::vector<float>> grads;
};

inline const std::vector<std::string>& op_names() {
  static const std::vector<std::string> names = {
      "add_bias", "sub", "mul_row", "div", "affine", "matmul", "matmul_tt", "matmul_batched",
      "linear", "linear_residual", "mlp", "mlp_residual_h20", "sum_axis", "mean_all",
      "sum_long_axis", "mean_all_long", "sum_all_split", "mean_axis_split", "permute", "slice_concat", "gelu", "relu", "tanh",
      "softmax", "layer_norm", "embedding", "attention", "self_attention", "cross_entropy",
      "dropout",
      // the primitives a layer is composed of (issue 26): the unary maps, selections, masks
      "exp_log", "sqrt_rsqrt", "sigmoid_silu", "abs_clamp_pow", "sin_cos", "maximum_row",
      "minimum", "where", "where_const", "max_axis", "max_last",
      // at the benchmark's shapes (issue 12): GPT-2's head size 64 and 128, T not a multiple of
      // the 4 rows a block of the fused kernels takes, non-causal; a GPT-2-sized vocabulary
      "attention_t67_d64", "attention_t67_d64_full", "attention_t67_d128",
      "attention_t67_d128_full", "cross_entropy_v50257",
      // the padded vocabulary (nn::GPTConfig::vocab_multiple): 40 classes in rows of 48
      "cross_entropy_padded"};
  return names;
}

template <class B>
Result run_op(const std::string& name) {
  using namespace remat;
  using T = Tensor<B>;
  Tape<B> tape(11);
  std::uint64_t seed = 1;
  auto p = [&](const Shape& s, float std = 1.0f, float shift = 0.0f) {
    std::vector<float> h(static_cast<std::size_t>(s.numel()));
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = shift + std * rng::normal(seed, 9, i);
    ++seed;
    T t = tape.input(s, h);
    t.set_requires_grad(true);
    return t;
  };
  std::vector<T> in;
  T out;
  if (name == "add_bias") { in = {p({4, 5, 6}), p({6})}; out = in[0] + in[1]; }
  else if (name == "sub") { in = {p({3, 7}), p({3, 7})}; out = in[0] - in[1]; }
  else if (name == "mul_row") { in = {p({4, 5, 6}), p({5, 6})}; out = in[0] * in[1]; }
  else if (name == "div") { in = {p({3, 7}), p({3, 7}, 0.3f, 2.0f)}; out = in[0] / in[1]; }
  else if (name == "affine") { in = {p({50})}; out = 1.0f - in[0] * 2.5f; }
  else if (name == "matmul") { in = {p({33, 17}), p({17, 9})}; out = matmul(in[0], in[1]); }
  else if (name == "matmul_tt") { in = {p({17, 33}), p({9, 17})}; out = matmul(in[0], in[1], true, true); }
  else if (name == "matmul_batched") { in = {p({3, 8, 5}), p({5, 6})}; out = matmul(in[0], in[1]); }
  else if (name == "linear") { in = {p({2, 7, 12}), p({12, 20}), p({20})}; out = linear(in[0], in[1], in[2]); }
  else if (name == "linear_residual") { in = {p({2, 7, 12}), p({12, 20}), p({20}), p({2, 7, 20})}; out = linear(in[0], in[1], in[2], in[3]); }
  // hidden 24: the GELU's gradient in cuBLASLt's epilogue; 20 (not a multiple of 8): the fallback
  else if (name == "mlp") { in = {p({2, 7, 12}), p({12, 24}, 0.3f), p({24}), p({24, 12}, 0.3f), p({12})}; out = mlp(in[0], in[1], in[2], in[3], in[4]); }
  else if (name == "mlp_residual_h20") { in = {p({2, 7, 12}), p({12, 20}, 0.3f), p({20}), p({20, 12}, 0.3f), p({12}), p({2, 7, 12})}; out = mlp(in[0], in[1], in[2], in[3], in[4], in[5]); }
  else if (name == "sum_axis") { in = {p({4, 5, 6})}; out = sum(in[0], 1); }
  else if (name == "mean_all") { in = {p({4, 5, 6})}; out = mean(in[0]); }
  // a reduced axis of 256 or more: a block per output (a strided axis, then a contiguous one)
  else if (name == "sum_long_axis") { in = {p({3, 300, 2})}; out = sum(in[0], 1); }
  else if (name == "mean_all_long") { in = {p({7, 150})}; out = mean(in[0]); }
  // an axis of 2^16 or more and at most 64 outputs: split into parts, their sums then added
  // (scratch the estimator counts)
  else if (name == "sum_all_split") { in = {p({300, 250})}; out = sum(in[0]); }
  else if (name == "mean_axis_split") { in = {p({2, 66000, 2})}; out = mean(in[0], 1); }
  else if (name == "permute") { in = {p({2, 3, 4, 5})}; out = permute(in[0], {2, 0, 3, 1}); }
  else if (name == "slice_concat") { in = {p({3, 8, 2}), p({3, 4, 2})}; out = concat(std::vector<T>{slice(in[0], 1, 2, 5), in[1]}, 1); }
  else if (name == "gelu") { in = {p({300}, 2.0f)}; out = gelu(in[0]); }
  else if (name == "relu") { in = {p({300})}; out = relu(in[0]); }
  else if (name == "tanh") { in = {p({300})}; out = tanh(in[0]); }
  else if (name == "softmax") { in = {p({6, 300})}; out = softmax(in[0]); }
  else if (name == "layer_norm") { in = {p({9, 300}, 2.0f, 1.0f), p({300}, 0.5f, 1.0f), p({300})}; out = layer_norm(in[0], in[1], in[2]); }
  else if (name == "embedding") { in = {p({50, 16})}; out = embedding(in[0], tape.tokens({2, 5}, {0, 49, 3, 3, 7, 49, 3, 0, 1, 3})); }
  else if (name == "attention") { in = {p({2, 3, 70, 16}), p({2, 3, 70, 16}), p({2, 3, 70, 16})}; out = attention(in[0], in[1], in[2], true); }
  else if (name == "self_attention") { in = {p({2, 70, 3 * 32})}; out = self_attention(in[0], 4); }
  else if (name == "cross_entropy") { in = {p({2, 9, 40}, 2.0f)}; std::vector<std::int32_t> t(18); for (int i = 0; i < 18; ++i) t[static_cast<std::size_t>(i)] = (i * 7) % 40; out = cross_entropy(in[0], tape.tokens({2, 9}, t)); }
  else if (name == "dropout") { in = {p({1000})}; out = dropout(in[0], 0.3f); }
  else if (name == "exp_log") { in = {p({300}), p({300}, 0.3f, 2.0f)}; out = exp(in[0]) + log(in[1]); }
  else if (name == "sqrt_rsqrt") { in = {p({300}, 0.3f, 2.0f)}; out = sqrt(in[0]) * 0.5f + rsqrt(in[0]); }
  else if (name == "sigmoid_silu") { in = {p({300}, 3.0f)}; out = sigmoid(in[0]) * silu(in[0]); }
  else if (name == "abs_clamp_pow") { in = {p({300}, 2.0f)}; out = abs(in[0]) + clamp(in[0], -1.0f, 0.5f) + pow(in[0], 3.0f); }
  else if (name == "sin_cos") { in = {p({300}, 3.0f)}; out = sin(in[0]) * cos(in[0]); }
  else if (name == "maximum_row") { in = {p({4, 5, 6}), p({6})}; out = maximum(in[0], in[1]); }
  else if (name == "minimum") { in = {p({3, 7}), p({3, 7})}; out = minimum(in[0], in[1]); }
  else if (name == "where") { in = {p({4, 70}), p({4, 70})}; out = where(gt(in[0], in[1]), in[0], in[1] * 2.0f); }
  else if (name == "where_const") { in = {p({4, 70})}; out = where(lt(in[0], 0.5f), in[0], -3.0f); }
  else if (name == "max_axis") { in = {p({4, 33, 6})}; out = max(in[0], 1); }
  else if (name == "max_last") { in = {p({5, 300})}; out = max(in[0], -1, true); }
  else if (name.rfind("attention_t67_", 0) == 0) {
    const std::int64_t D = name.find("d128") != std::string::npos ? 128 : 64;
    const bool causal = name.find("_full") == std::string::npos;
    in = {p({1, 2, 67, D}), p({1, 2, 67, D}), p({1, 2, 67, D})};
    out = attention(in[0], in[1], in[2], causal);
  }
  else if (name == "cross_entropy_padded") {
    in = {p({2, 9, 48}, 2.0f)};
    std::vector<std::int32_t> t(18);
    for (int i = 0; i < 18; ++i) t[static_cast<std::size_t>(i)] = (i * 7) % 40;
    out = cross_entropy(in[0] * 1.5f, tape.tokens({2, 9}, t), 40);  // dlogits over the product's
  }
  else if (name == "cross_entropy_v50257") {
    in = {p({1, 3, 50257}, 2.0f)};
    out = cross_entropy(in[0], tape.tokens({1, 3}, {0, 50256, 31337}));
  }
  Result r;
  r.out = out.template to_vector<float>();
  std::vector<float> g(r.out.size());
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = rng::normal(77, 1, i);
  tape.backward(out, tape.input(out.shape(), g));
  for (const T& t : in) r.grads.push_back(t.grad().template to_vector<float>());
  return r;
}

/// The optimizer kernels (AdamW, SGD plain / with momentum / Nesterov, the gradient norm and
/// clipping: sum_squares and scale) on a parameter of 70000 floats (more than one grid-stride
/// pass of sum_squares' 64 x 256 threads) and one of 1000, three steps each.
inline const std::vector<std::string>& optim_names() {
  static const std::vector<std::string> names = {"adamw", "sgd", "sgd_momentum", "sgd_nesterov",
                                                 "clip_grad_norm"};
  return names;
}
/// The parameters after the steps (and the norm, for clipping), and the gradients.
template <class B>
Result run_optim(const std::string& name) {
  using namespace remat;
  Tape<B> tape(3);
  std::vector<Tensor<B>> params;
  for (std::int64_t n : {70000, 1000}) {
    std::vector<float> h(static_cast<std::size_t>(n)), g(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) {
      h[i] = rng::normal(21, static_cast<std::uint64_t>(n), i);
      g[i] = 0.1f * rng::normal(22, static_cast<std::uint64_t>(n), i);
    }
    Tensor<B> t = tape.input({n}, h);
    t.set_requires_grad(true);
    tape.backward(t * 1.0f, tape.input({n}, g));  // grad = g
    params.push_back(t);
  }
  Result r;
  if (name == "adamw") {
    optim::AdamW<B> opt(params, {});
    for (int s = 0; s < 3; ++s) opt.step();
  } else if (name == "clip_grad_norm") {
    r.out.push_back(optim::clip_grad_norm(params, 0.5f));
  } else {
    optim::SGDOptions o;
    o.lr = 0.05f;
    o.weight_decay = 0.01f;
    o.momentum = name == "sgd" ? 0.0f : 0.9f;
    o.nesterov = name == "sgd_nesterov";
    optim::SGD<B> opt(params, o);
    for (int s = 0; s < 3; ++s) opt.step();
  }
  for (const auto& t : params) {
    const auto v = t.template to_vector<float>();
    r.out.insert(r.out.end(), v.begin(), v.end());
    r.grads.push_back(t.grad().template to_vector<float>());
  }
  return r;
}

/// A GPT's size: the default is tiny (head size 16); GPT-2's head size is 64.
struct GptShape {
  std::int64_t n_embd = 64, n_head = 4, n_layer = 3;
};

/// The tests' GPT: vocabulary 64, 32 positions, the shape and the checkpoint strategy given.
inline remat::nn::GPTConfig gpt_config(const std::string& strategy, float dropout, GptShape shape) {
  remat::nn::GPTConfig c;
  c.vocab_size = 64;
  c.block_size = 32;
  c.n_layer = shape.n_layer;
  c.n_embd = shape.n_embd;
  c.n_head = shape.n_head;
  c.dropout = dropout;
  c.checkpoint = remat::nn::CheckpointStrategy::parse(strategy);
  return c;
}
/// Its batch: 2 sequences of 32 ids (x) and targets (y), fixed. The ids take 24 of the 64 values,
/// so most repeat (2 to 3 times): the embedding's backward sums several rows into one.
inline void gpt_batch(std::vector<std::int32_t>& x, std::vector<std::int32_t>& y) {
  x.assign(2 * 32, 0);
  y.assign(2 * 32, 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<std::int32_t>((i * 13 + 5) % 24);
    y[i] = static_cast<std::int32_t>((i * 29 + 1) % 64);
  }
}

/// One GPT forward and backward (dropout on when asked) with a checkpoint strategy: the loss
/// and every parameter's gradient.
template <class B>
Result run_gpt(const std::string& strategy, float dropout, GptShape shape = {}) {
  using namespace remat;
  Tape<B> tape(5);
  nn::GPT<B> model(tape, gpt_config(strategy, dropout, shape));
  std::vector<std::int32_t> x, y;
  gpt_batch(x, y);
  auto loss = model.loss(tape.tokens({2, 32}, x), tape.tokens({2, 32}, y));
  tape.backward(loss);
  Result r;
  r.out = {loss.item()};
  for (const auto& p : model.parameters()) r.grads.push_back(p.grad().template to_vector<float>());
  return r;
}

}  // namespace remat_cuda_test
