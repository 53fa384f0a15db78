// SPDX-License-Identifier: MIT
// Shared by the data-parallel tests (one process: test_data_parallel.cpp; under mpirun:
// mpi_data_parallel.cpp): a tiny GPT with dropout, the micro-batch of a global index, and the
// reference a data-parallel step must equal bitwise: one process running the micro-batches
// one after another, each backward into fresh gradients, summed pairwise (NOTE [reduction
// order], written here from its definition: blocks of 2^k by the binary digits of the count,
// each a balanced tree, then folded from the right).

#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <remat/dist/data_parallel.hpp>
#include <remat/remat.hpp>

namespace remat_test {

using Cpu = remat::Cpu;
using T = remat::Tensor<Cpu>;

inline remat::nn::GPTConfig tiny_gpt(const std::string& strategy) {
  remat::nn::GPTConfig c;
  c.vocab_size = 64;
  c.block_size = 16;
  c.n_layer = 3;
  c.n_embd = 32;
  c.n_head = 2;
  c.dropout = 0.1f;
  c.checkpoint = remat::nn::CheckpointStrategy::parse(strategy);
  return c;
}

/// Tokens and next-token targets of micro-batch `index` of step `step` (b sequences of T).
inline std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> micro_batch(
    std::int64_t step, std::int64_t index, std::int64_t b, std::int64_t T, std::int64_t V) {
  std::vector<std::int32_t> x(static_cast<std::size_t>(b * T)), y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto r = remat::rng::random4(
        0xda7a, static_cast<std::uint64_t>(step * 1000 + index) << 32, i);
    x[i] = static_cast<std::int32_t>(r.v[0] % static_cast<std::uint32_t>(V));
    y[i] = static_cast<std::int32_t>(r.v[1] % static_cast<std::uint32_t>(V));
  }
  return {x, y};
}

/// The loss of micro-batch `index` of `step`, with its own dropout stream.
inline T micro_loss(remat::Tape<Cpu>& tape, const remat::nn::GPT<Cpu>& model, std::int64_t step,
                    std::int64_t index, std::int64_t b, std::int64_t T_) {
  tape.set_seed(remat::dist::stream_seed(7, step, index));
  tape.set_rng_offset(0);
  const auto [x, y] = micro_batch(step, index, b, T_, model.config.vocab_size);
  return model.loss(tape.tokens({b, T_}, x), tape.tokens({b, T_}, y));
}

/// The canonical sum of g[lo, lo + n), n a power of two: a balanced tree.
inline std::vector<float> tree_sum(const std::vector<std::vector<float>>& g, std::size_t lo,
                                   std::size_t n) {
  if (n == 1) return g[lo];
  std::vector<float> a = tree_sum(g, lo, n / 2);
  const std::vector<float> b = tree_sum(g, lo + n / 2, n / 2);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}
/// The canonical sum of all of g: blocks of 2^k (the binary digits of g.size(), largest
/// first), folded from the right: B0 + (B1 + (B2 + ...)).
inline std::vector<float> canonical_sum(const std::vector<std::vector<float>>& g) {
  std::vector<std::vector<float>> blocks;
  std::size_t lo = 0;
  for (std::size_t bit = std::size_t(1) << 20; bit; bit >>= 1)
    if (g.size() & bit) {
      blocks.push_back(tree_sum(g, lo, bit));
      lo += bit;
    }
  std::vector<float> acc = blocks.back();
  for (std::size_t k = blocks.size() - 1; k-- > 0;)
    for (std::size_t i = 0; i < acc.size(); ++i) acc[i] = blocks[k][i] + acc[i];
  return acc;
}

/// One process, `n` micro-batches of step `step` in order: fresh gradients each, seeded with
/// 1/n, summed in the canonical order; leaves the sum in the parameters' gradients.
inline void reference_gradients(remat::Tape<Cpu>& tape, const remat::nn::GPT<Cpu>& model,
                                std::int64_t step, int n, std::int64_t b, std::int64_t T_) {
  const auto params = model.parameters();
  std::vector<std::vector<std::vector<float>>> g(params.size());  // [param][micro-step]
  for (int k = 0; k < n; ++k) {
    remat::optim::zero_grad(params);
    T loss = micro_loss(tape, model, step, k, b, T_);
    tape.backward(loss, tape.input({}, {1.0f / static_cast<float>(n)}));
    for (std::size_t i = 0; i < params.size(); ++i) {
      const T gi = params[i].grad();
      g[i].emplace_back(gi.data<float>(), gi.data<float>() + gi.numel());
    }
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::vector<float> s = canonical_sum(g[i]);
    std::memcpy(params[i].grad().data<float>(), s.data(), s.size() * 4);
  }
}

/// True when every parameter (or, with grads, every gradient) of a and b is bitwise equal.
inline bool bitwise_equal(const remat::nn::GPT<Cpu>& a, const remat::nn::GPT<Cpu>& b,
                          bool grads = false, std::string* first = nullptr) {
  const auto& pa = a.named_parameters();
  const auto& pb = b.named_parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const T x = grads ? pa[i].second.grad() : pa[i].second;
    const T y = grads ? pb[i].second.grad() : pb[i].second;
    if (!x.defined() || !y.defined() || x.numel() != y.numel() ||
        std::memcmp(x.data<float>(), y.data<float>(), x.bytes()) != 0) {
      if (first) *first = pa[i].first;
      return false;
    }
  }
  return true;
}

}  // namespace remat_test
