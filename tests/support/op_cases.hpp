#pragma once
// SPDX-License-Identifier: MIT
// Every op on fixed random inputs, as one table: a line a case (its inputs' shapes and a
// function of them). One line tests an op four ways: against finite differences, the
// estimate against the ledger, checkpointed against plain (tests/ops/test_op_cases.cpp, on
// the CPU), and the CUDA backend against the CPU one (tests/cuda, in the emulation and on a
// GPU). Included by g++ units (B = Cpu) and an nvcc unit (B = Cuda): core and ops only.

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "remat/core/rng.hpp"
#include "remat/core/tape.hpp"
#include "remat/ops/activation.hpp"
#include "remat/ops/attention.hpp"
#include "remat/ops/cast.hpp"
#include "remat/ops/dropout.hpp"
#include "remat/ops/elementwise.hpp"
#include "remat/ops/embedding.hpp"
#include "remat/ops/layer_norm.hpp"
#include "remat/ops/loss.hpp"
#include "remat/ops/matmul.hpp"
#include "remat/ops/mlp.hpp"
#include "remat/ops/reduce.hpp"
#include "remat/ops/rotary.hpp"
#include "remat/ops/softmax.hpp"
#include "remat/ops/unary.hpp"
#include "remat/ops/view.hpp"
#include "remat/ops/where.hpp"

namespace remat_test {

/// An input: its shape, and values shift + std N(0, 1).
struct Input {
  remat::Shape shape;
  float std = 1.0f, shift = 0.0f;
};

/// How finite differences see a case: smooth (checked), or with kinks that a step of the
/// finite differences may cross (a selection, a threshold): then the gradient is checked against
/// the CPU and across backends only.
enum class Fd { smooth, kinked };

template <class B>
struct OpCase {
  using T = remat::Tensor<B>;
  std::string name;
  std::vector<Input> inputs;
  std::function<T(const std::vector<T>&)> f;
  Fd fd = Fd::smooth;
};

template <class B>
const std::vector<OpCase<B>>& op_cases() {
  using namespace remat;
  using T = Tensor<B>;
  using V = std::vector<T>;
  // ids in [0, classes) for cross-entropy: (i * 7) % classes
  auto targets = [](Tape<B>& tape, std::int64_t rows, std::int64_t classes, std::int64_t batch) {
    std::vector<std::int32_t> t(static_cast<std::size_t>(rows));
    for (std::int64_t i = 0; i < rows; ++i) t[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 7) % classes);
    return tape.tokens({batch, rows / batch}, t);
  };
  static const std::vector<OpCase<B>> cases = {
      {"add_bias", {{{4, 5, 6}}, {{6}}}, [](const V& x) { return x[0] + x[1]; }},
      {"sub", {{{3, 7}}, {{3, 7}}}, [](const V& x) { return x[0] - x[1]; }},
      {"mul_row", {{{4, 5, 6}}, {{5, 6}}}, [](const V& x) { return x[0] * x[1]; }},
      {"div", {{{3, 7}}, {{3, 7}, 0.3f, 2.0f}}, [](const V& x) { return x[0] / x[1]; }},
      // a column, one value a row (NOTE [broadcasting]), either side; 300 wide: a block's
      // threads take several elements of a row on CUDA
      {"mul_column", {{{4, 5, 300}}, {{4, 5, 1}}}, [](const V& x) { return x[0] * x[1]; }},
      {"column_div_sub", {{{6, 1}, 1.0f, 2.0f}, {{6, 9}, 0.3f, 2.0f}},
       [](const V& x) { return x[0] / x[1] - x[0] + (x[1] - x[0]); }},
      {"column_maximum", {{{2, 3, 1}}, {{2, 3, 8}}}, [](const V& x) { return maximum(x[0], x[1]) + minimum(x[1], x[0]); }, Fd::kinked},
      {"affine", {{{50}}}, [](const V& x) { return 1.0f - x[0] * 2.5f; }},
      {"matmul", {{{33, 17}}, {{17, 9}}}, [](const V& x) { return matmul(x[0], x[1]); }},
      {"matmul_tt", {{{17, 33}}, {{9, 17}}}, [](const V& x) { return matmul(x[0], x[1], true, true); }},
      {"matmul_batched", {{{3, 8, 5}}, {{5, 6}}}, [](const V& x) { return matmul(x[0], x[1]); }},
      {"linear", {{{2, 7, 12}}, {{12, 20}}, {{20}}}, [](const V& x) { return linear(x[0], x[1], x[2]); }},
      {"linear_residual", {{{2, 7, 12}}, {{12, 20}}, {{20}}, {{2, 7, 20}}},
       [](const V& x) { return linear(x[0], x[1], x[2], x[3]); }},
      // hidden 24: the GELU's gradient in cuBLASLt's epilogue; 20 (not a multiple of 8): the fallback
      {"mlp", {{{2, 7, 12}}, {{12, 24}, 0.3f}, {{24}}, {{24, 12}, 0.3f}, {{12}}},
       [](const V& x) { return mlp(x[0], x[1], x[2], x[3], x[4]); }},
      {"mlp_residual_h20", {{{2, 7, 12}}, {{12, 20}, 0.3f}, {{20}}, {{20, 12}, 0.3f}, {{12}}, {{2, 7, 12}}},
       [](const V& x) { return mlp(x[0], x[1], x[2], x[3], x[4], x[5]); }},
      {"sum_axis", {{{4, 5, 6}}}, [](const V& x) { return sum(x[0], 1); }},
      {"mean_all", {{{4, 5, 6}}}, [](const V& x) { return mean(x[0]); }},
      // a reduced axis of 256 or more: a block per output (a strided axis, then a contiguous one)
      {"sum_long_axis", {{{3, 300, 2}}}, [](const V& x) { return sum(x[0], 1); }},
      {"mean_all_long", {{{7, 150}}}, [](const V& x) { return mean(x[0]); }},
      // an axis of 2^16 or more and at most 64 outputs: split into parts, their sums then added
      // (scratch the estimator counts)
      {"sum_all_split", {{{300, 250}}}, [](const V& x) { return sum(x[0]); }},
      {"mean_axis_split", {{{2, 66000, 2}}}, [](const V& x) { return mean(x[0], 1); }},
      {"permute", {{{2, 3, 4, 5}}}, [](const V& x) { return permute(x[0], {2, 0, 3, 1}); }},
      {"slice_concat", {{{3, 8, 2}}, {{3, 4, 2}}},
       [](const V& x) { return concat(V{slice(x[0], 1, 2, 5), x[1]}, 1); }},
      {"gelu", {{{300}, 2.0f}}, [](const V& x) { return gelu(x[0]); }},
      {"relu", {{{300}}}, [](const V& x) { return relu(x[0]); }, Fd::kinked},
      {"tanh", {{{300}}}, [](const V& x) { return tanh(x[0]); }},
      {"softmax", {{{6, 300}}}, [](const V& x) { return softmax(x[0]); }},
      {"layer_norm", {{{9, 300}, 2.0f, 1.0f}, {{300}, 0.5f, 1.0f}, {{300}}},
       [](const V& x) { return layer_norm(x[0], x[1], x[2]); }},
      {"rms_norm", {{{4, 75, 48}, 2.0f, 1.0f}, {{48}, 0.5f, 1.0f}}, [](const V& x) { return rms_norm(x[0], x[1]); }},
      {"embedding", {{{50, 16}}},
       [](const V& x) { return embedding(x[0], x[0].tape().tokens({2, 5}, {0, 49, 3, 3, 7, 49, 3, 0, 1, 3})); }},
      {"attention", {{{2, 3, 70, 16}}, {{2, 3, 70, 16}}, {{2, 3, 70, 16}}},
       [](const V& x) { return attention(x[0], x[1], x[2], true); }},
      {"self_attention", {{{2, 70, 3 * 32}}}, [](const V& x) { return self_attention(x[0], 4); }},
      // grouped-query: 4 query heads on 2 key/value heads; multi-query (3 on 1), not causal
      {"grouped_attention", {{{2, 20, 4, 16}}, {{2, 20, 2, 16}}, {{2, 20, 2, 16}}},
       [](const V& x) { return grouped_attention(x[0], x[1], x[2], true); }},
      {"grouped_attention_mqa_full", {{{1, 9, 3, 8}}, {{1, 9, 1, 8}}, {{1, 9, 1, 8}}},
       [](const V& x) { return grouped_attention(x[0], x[1], x[2], false); }},
      {"cross_entropy", {{{2, 9, 40}, 2.0f}},
       [targets](const V& x) { return cross_entropy(x[0], targets(x[0].tape(), 18, 40, 2)); }},
      {"dropout", {{{1000}}}, [](const V& x) { return dropout(x[0], 0.3f); }},
      // the primitives a layer is composed of (issue 26): the unary maps, selections, masks
      {"exp_log", {{{300}}, {{300}, 0.3f, 2.0f}}, [](const V& x) { return exp(x[0]) + log(x[1]); }},
      {"sqrt_rsqrt", {{{300}, 0.3f, 2.0f}}, [](const V& x) { return sqrt(x[0]) * 0.5f + rsqrt(x[0]); }},
      {"sigmoid_silu", {{{300}, 3.0f}}, [](const V& x) { return sigmoid(x[0]) * silu(x[0]); }},
      {"abs_clamp_pow", {{{300}, 2.0f}},
       [](const V& x) { return abs(x[0]) + clamp(x[0], -1.0f, 0.5f) + pow(x[0], 3.0f); }, Fd::kinked},
      {"sin_cos", {{{300}, 3.0f}}, [](const V& x) { return sin(x[0]) * cos(x[0]); }},
      {"maximum_row", {{{4, 5, 6}}, {{6}}}, [](const V& x) { return maximum(x[0], x[1]); }, Fd::kinked},
      {"minimum", {{{3, 7}}, {{3, 7}}}, [](const V& x) { return minimum(x[0], x[1]); }, Fd::kinked},
      {"where", {{{4, 70}}, {{4, 70}}},
       [](const V& x) { return where(gt(x[0], x[1]), x[0], x[1] * 2.0f); }, Fd::kinked},
      {"where_const", {{{4, 70}}}, [](const V& x) { return where(lt(x[0], 0.5f), x[0], -3.0f); }, Fd::kinked},
      // f32 -> bf16 -> f32 (rounding: a step function to finite differences), used twice: the
      // bf16 gradient written once, added into once
      {"cast_bf16", {{{4, 70}}, {{4, 70}}},
       [](const V& x) {
         const T h = to_dtype(x[0] * x[1], DType::bf16);
         return to_dtype(h, DType::f32) * x[1] + to_dtype(h, DType::f32);
       }, Fd::kinked},
      // bf16 products (GemmKernel): f32 leaves cast once, fp32 sums, bf16 outputs widened for
      // the loss. The four operand layouts, a batch summed into one shared dB (a transposed,
      // b shared), and linear with a bf16 hidden tensor used twice (its bf16 gradient written,
      // then added into) and a residual whose gradient is f32.
      {"matmul_bf16", {{{33, 17}}, {{17, 9}}},
       [](const V& x) { return to_dtype(matmul(to_dtype(x[0], DType::bf16), to_dtype(x[1], DType::bf16)), DType::f32); }, Fd::kinked},
      {"matmul_tt_bf16", {{{17, 33}}, {{9, 17}}},
       [](const V& x) { return to_dtype(matmul(to_dtype(x[0], DType::bf16), to_dtype(x[1], DType::bf16), true, true), DType::f32); }, Fd::kinked},
      {"matmul_shared_bf16", {{{3, 40, 8}}, {{40, 6}}},
       [](const V& x) { return to_dtype(matmul(to_dtype(x[0], DType::bf16), to_dtype(x[1], DType::bf16), true, false), DType::f32); }, Fd::kinked},
      {"linear_bf16", {{{4, 6, 40}}, {{40, 24}}, {{24}}, {{24, 40}}, {{40}}},
       [](const V& x) {
         const T xb = to_dtype(x[0], DType::bf16), w2 = to_dtype(x[3], DType::bf16);
         const T h = linear(xb, to_dtype(x[1], DType::bf16), x[2]);
         return to_dtype(linear(h, w2, x[4], xb), DType::f32) + to_dtype(matmul(h, w2), DType::f32);
       }, Fd::kinked},
      // the norms on a bf16 product's output: x, y, dy and dx bf16; statistics, w, b and their
      // gradients f32
      {"layer_norm_bf16", {{{3, 5, 40}}, {{40, 40}}, {{40}, 0.2f, 1.0f}, {{40}}},
       [](const V& x) {
         const T h = matmul(to_dtype(x[0], DType::bf16), to_dtype(x[1], DType::bf16));
         return to_dtype(layer_norm(h, x[2], x[3]), DType::f32);
       }, Fd::kinked},
      // SwiGLU: two tensors, or the halves of one; in bf16 (a product's output)
      {"swiglu", {{{3, 5, 12}}, {{3, 5, 12}}}, [](const V& x) { return swiglu(x[0], x[1]); }},
      {"swiglu_packed", {{{4, 7, 20}, 2.0f}}, [](const V& x) { return swiglu(x[0]); }},
      {"swiglu_bf16", {{{3, 5, 16}}, {{16, 32}, 0.5f}},
       [](const V& x) {
         return to_dtype(swiglu(matmul(to_dtype(x[0], DType::bf16), to_dtype(x[1], DType::bf16))), DType::f32);
       }, Fd::kinked},
      // rotary embeddings (Hugging Face's rotate_half): from position 3; Llama 3's scaling with
      // an original length of 64, so that its three bands (kept, blended, divided) all occur
      {"rope", {{{2, 5, 3, 8}}}, [](const V& x) { return rope(x[0], RopeConfig{}, 3); }},
      {"rope_llama3", {{{1, 9, 2, 16}}},
       [](const V& x) { return rope(x[0], RopeConfig{500000.0f, 8.0f, 1.0f, 4.0f, 64}, 100); }},
      {"rope_bf16", {{{2, 4, 2, 8}}, {{8, 8}}},
       [](const V& x) {
         return to_dtype(rope(matmul(to_dtype(x[0], DType::bf16), to_dtype(x[1], DType::bf16))), DType::f32);
       }, Fd::kinked},
      {"rms_norm_bf16", {{{3, 5, 40}}, {{40, 40}}, {{40}, 0.2f, 1.0f}},
       [](const V& x) {
         const T h = matmul(to_dtype(x[0], DType::bf16), to_dtype(x[1], DType::bf16));
         return to_dtype(rms_norm(h, x[2], 1e-5f), DType::f32);
       }, Fd::kinked},
      // cross-entropy on a bf16 product's logits (bf16 dlogits written over them), padded;
      // and on a bf16 copy (f32 dlogits in a buffer of their own)
      {"cross_entropy_bf16", {{{2, 9, 20}}, {{20, 48}}},
       [targets](const V& x) {
         const T logits = matmul(to_dtype(x[0], DType::bf16), to_dtype(x[1], DType::bf16));
         return cross_entropy(logits, targets(x[0].tape(), 18, 40, 2), 40);
       }, Fd::kinked},
      {"cross_entropy_cast_bf16", {{{2, 9, 40}, 2.0f}},
       [targets](const V& x) { return cross_entropy(to_dtype(x[0], DType::bf16), targets(x[0].tape(), 18, 40, 2)); }, Fd::kinked},
      // long bf16 sums (norm rows of 2000 offset by 8 and 3000 logits: more elements than a
      // CUDA block's 256 threads; a bias gradient summed over 600 rows): a mean, a variance, a
      // sum of exponentials or a column sum kept in bf16 anywhere loses digits that fp32 keeps. Their fp32 results are compared tightly
      // across backends (tests/cuda/test_cuda_kernels.cu: the names ending "_sums_bf16").
      {"layer_norm_sums_bf16", {{{8, 2000}, 1.0f, 8.0f}, {{2000}, 0.2f, 1.0f}, {{2000}}},
       [](const V& x) { return to_dtype(layer_norm(to_dtype(x[0], DType::bf16), x[1], x[2]), DType::f32); }, Fd::kinked},
      {"rms_norm_sums_bf16", {{{8, 2000}, 1.0f, 8.0f}, {{2000}, 0.2f, 1.0f}},
       [](const V& x) { return to_dtype(rms_norm(to_dtype(x[0], DType::bf16), x[1], 1e-5f), DType::f32); }, Fd::kinked},
      {"cross_entropy_sums_bf16", {{{1, 8, 3000}, 5.0f, 4.0f}},
       [targets](const V& x) { return cross_entropy(to_dtype(x[0], DType::bf16), targets(x[0].tape(), 8, 3000, 1)); }, Fd::kinked},
      {"linear_bias_sums_bf16", {{{600, 16}}, {{16, 8}}, {{8}}},
       [](const V& x) {
         return to_dtype(linear(to_dtype(x[0], DType::bf16), to_dtype(x[1], DType::bf16), x[2]), DType::f32);
       }, Fd::kinked},
      // the ops computed by widening (NOTE [bf16 by widening]) on a bf16 product's output (their
      // gradients bf16) and on bf16 copies of f32 leaves (their gradients f32)
      {"widened_bf16", {{{3, 5, 40}}, {{40, 40}}},
       [](const V& x) {
         const T h = matmul(to_dtype(x[0], DType::bf16), to_dtype(x[1], DType::bf16));
         return to_dtype(dropout(gelu(h), 0.3f) * h + h, DType::f32);
       }, Fd::kinked},
      {"attention_bf16", {{{2, 3, 20, 16}}, {{2, 3, 20, 16}}, {{2, 3, 20, 16}}},
       [](const V& x) {
         return to_dtype(attention(to_dtype(x[0], DType::bf16), to_dtype(x[1], DType::bf16),
                                   to_dtype(x[2], DType::bf16), true), DType::f32);
       }, Fd::kinked},
      {"reshape_bf16", {{{3, 4}}, {{4, 6}}},
       [](const V& x) {
         const T y = reshape(matmul(to_dtype(x[0], DType::bf16), to_dtype(x[1], DType::bf16)), {3, 2, 3});
         return to_dtype(y, DType::f32) * to_dtype(y, DType::f32);
       }, Fd::kinked},
      {"grouped_attention_bf16", {{{1, 12, 4, 16}}, {{1, 12, 2, 16}}, {{1, 12, 2, 16}}},
       [](const V& x) {
         return to_dtype(grouped_attention(to_dtype(x[0], DType::bf16), to_dtype(x[1], DType::bf16),
                                           to_dtype(x[2], DType::bf16), true), DType::f32);
       }, Fd::kinked},
      {"self_attention_bf16", {{{2, 20, 24}}, {{24, 96}}},
       [](const V& x) {
         const T qkv = matmul(to_dtype(x[0], DType::bf16), to_dtype(x[1], DType::bf16));
         return to_dtype(self_attention(qkv, 4), DType::f32);
       }, Fd::kinked},
      {"max_axis", {{{4, 33, 6}}}, [](const V& x) { return max(x[0], 1); }, Fd::kinked},
      {"max_last", {{{5, 300}}}, [](const V& x) { return max(x[0], -1, true); }, Fd::kinked},
      // at the benchmark's shapes (issue 12): GPT-2's head size 64 and 128, T not a multiple of
      // the 4 rows a block of the fused kernels takes, non-causal; a GPT-2-sized vocabulary
      {"attention_t67_d64", {{{1, 2, 67, 64}}, {{1, 2, 67, 64}}, {{1, 2, 67, 64}}},
       [](const V& x) { return attention(x[0], x[1], x[2], true); }},
      {"attention_t67_d64_full", {{{1, 2, 67, 64}}, {{1, 2, 67, 64}}, {{1, 2, 67, 64}}},
       [](const V& x) { return attention(x[0], x[1], x[2], false); }},
      {"attention_t67_d128", {{{1, 2, 67, 128}}, {{1, 2, 67, 128}}, {{1, 2, 67, 128}}},
       [](const V& x) { return attention(x[0], x[1], x[2], true); }},
      {"attention_t67_d128_full", {{{1, 2, 67, 128}}, {{1, 2, 67, 128}}, {{1, 2, 67, 128}}},
       [](const V& x) { return attention(x[0], x[1], x[2], false); }},
      {"grouped_attention_t67_d64", {{{1, 67, 4, 64}}, {{1, 67, 2, 64}}, {{1, 67, 2, 64}}},
       [](const V& x) { return grouped_attention(x[0], x[1], x[2], true); }},
      {"cross_entropy_v50257", {{{1, 3, 50257}, 2.0f}},
       [](const V& x) { return cross_entropy(x[0], x[0].tape().tokens({1, 3}, {0, 50256, 31337})); }},
      // the padded vocabulary (nn::GPTConfig::vocab_multiple): 40 classes in rows of 48, dlogits
      // over the product's
      {"cross_entropy_padded", {{{2, 9, 48}, 2.0f}},
       [targets](const V& x) { return cross_entropy(x[0] * 1.5f, targets(x[0].tape(), 18, 40, 2), 40); }},
  };
  return cases;
}

template <class B>
std::vector<std::string> op_names() {
  std::vector<std::string> names;
  for (const auto& c : op_cases<B>()) names.push_back(c.name);
  return names;
}

template <class B>
const OpCase<B>& op_case(const std::string& name) {
  for (const auto& c : op_cases<B>())
    if (c.name == name) return c;
  throw std::invalid_argument("op_cases: no case named '" + name + "'");
}

/// The case's inputs on `tape`, each needing a gradient: input k (from 0) holds
/// shift + std normal(k + 1, 9, i).
template <class B>
std::vector<remat::Tensor<B>> case_inputs(remat::Tape<B>& tape, const OpCase<B>& c) {
  std::vector<remat::Tensor<B>> in;
  std::uint64_t seed = 1;
  for (const Input& s : c.inputs) {
    std::vector<float> h(static_cast<std::size_t>(s.shape.numel()));
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = s.shift + s.std * remat::rng::normal(seed, 9, i);
    ++seed;
    remat::Tensor<B> t = tape.input(s.shape, h);
    t.set_requires_grad(true);
    in.push_back(t);
  }
  return in;
}

/// The seed gradient of an output of n elements: normal(77, 1, i).
inline std::vector<float> seed_gradient(std::size_t n) {
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = remat::rng::normal(77, 1, i);
  return g;
}

/// Output and gradients of the inputs (or of the parameters, for a GPT).
struct Result {
  std::vector<float> out;
  std::vector<std::vector<float>> grads;
};

/// The case forward and backward (the seed gradient above) on a fresh tape.
template <class B>
Result run_op(const std::string& name) {
  const OpCase<B>& c = op_case<B>(name);
  remat::Tape<B> tape(11);
  const auto in = case_inputs(tape, c);
  const remat::Tensor<B> out = c.f(in);
  Result r;
  r.out = out.template to_vector<float>();
  tape.backward(out, tape.input(out.shape(), seed_gradient(r.out.size())));
  for (const auto& t : in) r.grads.push_back(t.grad().template to_vector<float>());
  return r;
}

}  // namespace remat_test
