// SPDX-License-Identifier: MIT
// Bad input gets a remat::Error naming the op, what was expected and what was found.

#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;

namespace {
Tensor<Cpu> ones(Tape<Cpu>& t, const Shape& s, bool grad = true) {
  auto x = t.input(s, std::vector<float>(static_cast<std::size_t>(s.numel()), 1.0f));
  x.set_requires_grad(grad);
  return x;
}
}  // namespace

TEST_CASE("shape mismatches name the op and both shapes", "[errors]") {
  Tape<Cpu> t;
  auto a = ones(t, {2, 3}), b = ones(t, {3, 2}), c = ones(t, {4});
  REQUIRE_THROWS_WITH(a + b, REMAT_CONTAINS("remat::add: shapes do not broadcast: a is [2, 3], b is [3, 2]"));
  REQUIRE_THROWS_WITH(a * c, REMAT_CONTAINS("remat::mul: shapes do not broadcast"));
  REQUIRE_THROWS_WITH(matmul(a, a), REMAT_CONTAINS("remat::matmul: inner dimensions differ: a is [2, 3], b is [2, 3]"));
  REQUIRE_THROWS_WITH(matmul(a, c), REMAT_CONTAINS("expected rank >= 2"));
  REQUIRE_THROWS_WITH(linear(ones(t, {2, 3}), ones(t, {3, 2}), ones(t, {2}), c),
                      REMAT_CONTAINS("remat::linear: residual is [4] for x [2, 3] and weight [3, 2] (expected [2, 2]"));
  REQUIRE_THROWS_WITH(mlp(a, ones(t, {3, 4}), ones(t, {4}), ones(t, {4, 3}), ones(t, {2})),
                      REMAT_CONTAINS("remat::mlp: x is [2, 3], w1 [3, 4], b1 [4], w2 [4, 3], b2 [2] (expected"));
  REQUIRE_THROWS_WITH(mlp(a, ones(t, {3, 4}), ones(t, {4}), ones(t, {4, 3}), ones(t, {3}), c),
                      REMAT_CONTAINS("remat::mlp: residual is [4] for x [2, 3] (expected [2, 3]"));
  REQUIRE_THROWS_WITH(matmul(ones(t, {2, 2, 3}), ones(t, {3, 3, 4})), REMAT_CONTAINS("batch dimensions differ"));
  REQUIRE_THROWS_WITH(linear(a, b, c), REMAT_CONTAINS("remat::linear: bias is [4], expected [2]"));
  REQUIRE_THROWS_WITH(linear(a, ones(t, {2, 2}), ones(t, {2})), REMAT_CONTAINS("expected weight [in, out]"));
  REQUIRE_THROWS_WITH(layer_norm(a, c, c), REMAT_CONTAINS("remat::layer_norm: weight is [4] and bias is [4] for x [2, 3]"));
  REQUIRE_THROWS_WITH(attention(a, b, a), REMAT_CONTAINS("remat::attention: q is [2, 3], k is [3, 2]"));
  REQUIRE_THROWS_WITH(self_attention(ones(t, {2, 3, 12}), 5),
                      REMAT_CONTAINS("remat::self_attention: qkv is [2, 3, 12] with 5 heads"));
  REQUIRE_THROWS_WITH(concat(std::vector<Tensor<Cpu>>{a, b}, 0), REMAT_CONTAINS("remat::concat: input 1 has shape [3, 2]"));
  REQUIRE_THROWS_WITH(reshape(a, {4, 2}), REMAT_CONTAINS("remat::reshape: [2, 3] has 6 elements, the new shape [4, 2] has 8"));
  REQUIRE_THROWS_WITH(slice(a, 1, 2, 2), REMAT_CONTAINS("remat::slice: start 2 and length 2 are outside axis 1"));
  REQUIRE_THROWS_WITH(split(a, 1, {1, 1}), REMAT_CONTAINS("remat::split: sizes add up to 2"));
  REQUIRE_THROWS_WITH(permute(a, {0, 0}), REMAT_CONTAINS("remat::permute: axis 0 appears twice"));
  REQUIRE_THROWS_WITH(sum(a, 2), REMAT_CONTAINS("remat::sum: axis 2 is out of range for shape [2, 3]"));
  REQUIRE_THROWS_WITH(t.input({2, 2}, {1, 2, 3}), REMAT_CONTAINS("shape [2, 2] has 4 elements but 3 values"));
}

TEST_CASE("out-of-range token ids and class targets are reported with the valid range", "[errors]") {
  Tape<Cpu> t;
  auto table = ones(t, {5, 4});
  REQUIRE_THROWS_WITH(embedding(table, t.tokens({3}, {0, 5, 1})),
                      REMAT_CONTAINS("remat::embedding: id 5 is out of range for a table of 5 rows (expected 0 <= id < 5"));
  REQUIRE_THROWS_WITH(embedding(table, t.tokens({2}, {-1, 0})), REMAT_CONTAINS("id -1 is out of range"));
  REQUIRE_THROWS_WITH(embedding(table, ones(t, {2}, false)), REMAT_CONTAINS("ids must be i32, found f32"));
  auto logits = ones(t, {3, 4});
  REQUIRE_THROWS_WITH(cross_entropy(logits, t.tokens({3}, {0, 4, 1})),
                      REMAT_CONTAINS("remat::cross_entropy: target 4 is out of range for 4 classes"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, t.tokens({2}, {0, 1})),
                      REMAT_CONTAINS("logits are [3, 4], targets are [2] (expected targets [3]"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, ones(t, {3}, false)), REMAT_CONTAINS("targets must be i32"));
  // padded rows: a target in the padding is out of range, and classes fit the row
  REQUIRE_THROWS_WITH(cross_entropy(logits, t.tokens({3}, {0, 3, 1}), 3),
                      REMAT_CONTAINS("remat::cross_entropy: target 3 is out of range for 3 classes"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, t.tokens({3}, {0, 1, 1}), 5),
                      REMAT_CONTAINS("remat::cross_entropy: classes is 5 for logits [3, 4] (expected 1..4"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, t.tokens({3}, {0, 1, 1}), -1),
                      REMAT_CONTAINS("classes is -1"));
}

TEST_CASE("empty tensors where they make no sense are rejected", "[errors]") {
  Tape<Cpu> t;
  auto empty_rows = ones(t, {0, 4}), empty_cols = ones(t, {3, 0});
  REQUIRE_THROWS_WITH(mean(empty_cols, 1), REMAT_CONTAINS("remat::mean: the reduced axis of shape [3, 0] is empty"));
  REQUIRE_THROWS_WITH(softmax(empty_rows), REMAT_CONTAINS("remat::softmax: x is empty (shape [0, 4])"));
  REQUIRE_THROWS_WITH(layer_norm(empty_rows, ones(t, {4}), ones(t, {4})), REMAT_CONTAINS("remat::layer_norm: x is empty"));
  REQUIRE_THROWS_WITH(cross_entropy(empty_rows, t.tokens({0}, {})), REMAT_CONTAINS("remat::cross_entropy: logits is empty"));
  REQUIRE_THROWS_WITH(embedding(ones(t, {5, 4}), t.tokens({0}, {})), REMAT_CONTAINS("remat::embedding: ids is empty"));
}

TEST_CASE("bad settings of modules and optimizers are rejected", "[errors]") {
  Tape<Cpu> t;
  nn::GPTConfig c;
  c.n_embd = 30;
  c.n_head = 4;
  REQUIRE_THROWS_WITH(nn::GPT<Cpu>(t, c), REMAT_CONTAINS("n_embd 30 is not divisible by n_head 4"));
  c.n_embd = 32;
  c.block_size = 8;
  c.n_layer = 1;
  nn::GPT<Cpu> model(t, c);
  REQUIRE_THROWS_WITH(model(t.tokens({1, 9}, std::vector<std::int32_t>(9, 1))),
                      REMAT_CONTAINS("sequence length 9 exceeds block_size 8"));
  REQUIRE_THROWS_WITH(dropout(ones(t, {2}), 1.0f), REMAT_CONTAINS("remat::dropout: probability 1 is out of range"));
  REQUIRE_THROWS_WITH(optim::AdamW<Cpu>(model.parameters(), {1e-3f, 1.5f}), REMAT_CONTAINS("remat::optim::AdamW"));
  REQUIRE_THROWS_WITH(model.parameter("h.7.ln_1.weight"), REMAT_CONTAINS("no parameter named 'h.7.ln_1.weight'"));
}
