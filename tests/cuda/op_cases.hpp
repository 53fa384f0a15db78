#pragma once
// SPDX-License-Identifier: MIT
// The same computations on any backend, for comparing the CUDA backend with the CPU one: every
// op case of tests/support/op_cases.hpp forward and backward, the optimizers, and a GPT step
// with each checkpoint strategy. Included by a g++ unit (B = Cpu) and an nvcc unit (B = Cuda):
// core, ops and nn only.

#include <string>
#include <vector>

#include "remat/checkpoint/checkpoint.hpp"
#include "remat/nn/gpt.hpp"
#include "remat/optim/adamw.hpp"
#include "remat/optim/grad.hpp"
#include "remat/optim/sgd.hpp"
#include "support/op_cases.hpp"

namespace remat_cuda_test {

using remat_test::op_names;
using remat_test::Result;
using remat_test::run_op;

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
  remat::DType precision = remat::DType::f32;  // what the blocks and the head compute in
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
  c.precision = shape.precision;
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
