#pragma once
// SPDX-License-Identifier: MIT
// A small residual MLP block for the checkpoint tests: y = x + W2 gelu(W1 x + b1) + b2. x takes
// two gradients inside it (the residual and the first linear), so the order of gradient
// additions shows in the last bit.

#include <cstdint>
#include <vector>

#include <remat/remat.hpp>

namespace remat_test {

struct MlpBlock {
  using T = remat::Tensor<remat::Cpu>;
  T w1, b1, w2, b2;
  MlpBlock(remat::Tape<remat::Cpu>& tape, int d, std::uint64_t seed)
      : w1(remat::nn::init::normal(tape, {d, 2 * d}, 0.3f, seed)),
        b1(remat::nn::init::normal(tape, {2 * d}, 0.1f, seed + 1)),
        w2(remat::nn::init::normal(tape, {2 * d, d}, 0.3f, seed + 2)),
        b2(remat::nn::init::normal(tape, {d}, 0.1f, seed + 3)) {}
  T operator()(const T& x) const {
    return x + remat::linear(remat::gelu(remat::linear(x, w1, b1)), w2, b2);
  }
  std::vector<T> params() const { return {w1, b1, w2, b2}; }
};

}  // namespace remat_test
