#pragma once
// SPDX-License-Identifier: MIT
// A Llama-style decoder written as a user would, against remat's public API only: RMSNorm and
// rotary embeddings composed from primitives, grouped-query attention, and SwiGLU as a custom
// op of its own (remat/core/custom_op.hpp). Generic over the backend, so the planner can run it
// on the shape-only twin: model code is written once.

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <remat/remat.hpp>

namespace llama {

/// y = silu(a) * b as a custom op (how to write one: NOTE [writing an op]): it saves a and b.
/// The composed silu(a) * b saves the same two: silu(a) is kept as its recipe (NOTE [saved as
/// a recipe]) and remade in backward, where this op computes sigmoid(a) once.
struct SwiGLUOp {
  static constexpr const char* name = "swiglu";
  template <class B>
  struct Saved {
    remat::Tensor<B> a, b;
    template <class F>
    void each(F f) const {
      f(a);
      f(b);
    }
  };
  template <class B>
  static remat::Tensor<B> forward(Saved<B>& s, const remat::Tensor<B>& a,
                                  const remat::Tensor<B>& b) {
    REMAT_CHECK(a.shape() == b.shape(), "llama::swiglu: a is ", a.shape().str(), ", b is ",
                b.shape().str(), " (expected one shape)");
    remat::Tensor<B> y = remat::new_tensor_like(a);
    if constexpr (remat::has_values_v<B>) {
      const float* pa = a.template data<float>();
      const float* pb = b.template data<float>();
      float* py = y.template data<float>();
      for (std::int64_t i = 0; i < a.numel(); ++i)
        py[i] = pa[i] / (1.0f + std::exp(-pa[i])) * pb[i];
    }
    s.a = a;
    s.b = b;
    return y;
  }
  // dy/da = b sig(a) (1 + a (1 - sig(a))),  dy/db = silu(a)
  template <class B>
  static void backward(const Saved<B>& s, const remat::Tensor<B>& dy,
                       std::vector<remat::Tensor<B>>& dx) {
    if constexpr (remat::has_values_v<B>) {
      const float* pa = s.a.template data<float>();
      const float* pb = s.b.template data<float>();
      const float* g = dy.template data<float>();
      float* da = dx[0].defined() ? dx[0].template data<float>() : nullptr;
      float* db = dx[1].defined() ? dx[1].template data<float>() : nullptr;
      for (std::int64_t i = 0; i < dy.numel(); ++i) {
        const float sg = 1.0f / (1.0f + std::exp(-pa[i]));
        if (da) da[i] += g[i] * pb[i] * sg * (1.0f + pa[i] * (1.0f - sg));
        if (db) db[i] += g[i] * pa[i] * sg;
      }
    }
  }
};
template <class B>
remat::Tensor<B> swiglu(const remat::Tensor<B>& a, const remat::Tensor<B>& b) {
  return remat::apply_op<SwiGLUOp>(std::array<remat::Tensor<B>, 2>{a, b});
}

struct Config {
  std::int64_t vocab = 256, dim = 64, heads = 4, kv_heads = 2, hidden = 172, layers = 4;
  std::int64_t max_seq = 256;
  float rope_theta = 10000.0f, eps = 1e-5f;
  std::uint64_t seed = 7;
  bool fused_swiglu = true;  // false: silu(a) * b from primitives (what the op saves less than)
  bool fused_norm = false;   // true: remat::rms_norm; false: composed_rms_norm, from primitives
  bool recompute_composed = false;  // composed layers inside checkpoint(): their pointwise
                                    // interiors recomputed in backward, not kept
};

/// RMSNorm from primitives: x / sqrt(mean(x^2) + eps) * g over the last axis.
template <class B>
remat::Tensor<B> composed_rms_norm(const remat::Tensor<B>& x, const remat::Tensor<B>& g, float eps) {
  return x * remat::rsqrt(remat::mean(remat::square(x), -1, true) + eps) * g;
}

template <class B>
class Model : public remat::nn::Module<B> {
  using T = remat::Tensor<B>;

 public:
  Model(remat::Tape<B>& tape, const Config& c) : c_(c), tape_(&tape) {
    REMAT_CHECK(c.dim % c.heads == 0 && c.heads % c.kv_heads == 0 && (c.dim / c.heads) % 2 == 0,
                "llama::Model: dim ", c.dim, ", heads ", c.heads, ", kv_heads ", c.kv_heads,
                " (expected heads | dim, kv_heads | heads and an even head size)");
    const std::int64_t C = c.dim, D = c.dim / c.heads, KV = c.kv_heads * D, F = c.hidden;
    std::uint64_t seed = c.seed;
    auto normal = [&](const std::string& name, remat::Shape s, float std) {
      return this->add_parameter(name, remat::nn::init::normal(tape, s, std, seed++));
    };
    auto ones = [&](const std::string& name, std::int64_t n) {
      return this->add_parameter(name, remat::nn::init::constant(tape, {n}, 1.0f));
    };
    const float s0 = 0.02f, sp = 0.02f / std::sqrt(2.0f * static_cast<float>(c.layers));
    tok_ = normal("tok_embeddings.weight", {c.vocab, C}, s0);
    for (std::int64_t i = 0; i < c.layers; ++i) {
      const std::string p = "layers." + std::to_string(i) + ".";
      layers_.push_back({ones(p + "attention_norm.weight", C), normal(p + "attention.wq", {C, C}, s0),
                         normal(p + "attention.wk", {C, KV}, s0),
                         normal(p + "attention.wv", {C, KV}, s0),
                         normal(p + "attention.wo", {C, C}, sp), ones(p + "ffn_norm.weight", C),
                         normal(p + "feed_forward.w1", {C, F}, s0),
                         normal(p + "feed_forward.w3", {C, F}, s0),
                         normal(p + "feed_forward.w2", {F, C}, sp)});
    }
    norm_ = ones("norm.weight", C);
    out_ = normal("output.weight", {C, c.vocab}, s0);
    // rotary tables (max_seq, D/2): angle = position * theta^(-2j/D); constants, no gradient
    remat::NoGrad off;
    const T pos = remat::reshape(tape.arange(c.max_seq), {c.max_seq, 1});
    const T inv = remat::reshape(
        remat::exp(tape.arange(D / 2, 0.0f, -2.0f * std::log(c.rope_theta) / static_cast<float>(D))),
        {1, D / 2});
    const T angle = pos * inv;
    cos_ = remat::detach(remat::cos(angle));
    sin_ = remat::detach(remat::sin(angle));
  }

  /// ids (B, T) i32 -> the residual stream (B, T, C).
  T embed(const T& ids) const { return remat::embedding(tok_, ids); }

  /// Block i: x + attention(norm(x)), then + SwiGLU MLP(norm(.)). x (B, T, C).
  T block(std::size_t i, const T& x) const {
    const Layer& l = layers_.at(i);
    const std::int64_t Bn = x.size(0), Tn = x.size(1), C = c_.dim, H = c_.heads,
                       KVH = c_.kv_heads, D = C / H;
    const T h = norm(x, l.g1);
    auto split = [&](const T& t, std::int64_t heads) {  // (B, T, heads D) -> (B, heads, T, D)
      return remat::permute(remat::reshape(t, {Bn, Tn, heads, D}), {0, 2, 1, 3});
    };
    const T q = rope(split(remat::matmul(h, l.wq), H), Tn);
    const T k = repeat_kv(rope(split(remat::matmul(h, l.wk), KVH), Tn));
    const T v = repeat_kv(split(remat::matmul(h, l.wv), KVH));
    const T a = remat::attention(q, k, v, /*causal=*/true);                       // (B, H, T, D)
    const T merged = remat::reshape(remat::permute(a, {0, 2, 1, 3}), {Bn, Tn, C});
    const T x2 = x + remat::matmul(merged, l.wo);
    const T h2 = norm(x2, l.g2);
    auto composed_swiglu = [](const T& a, const T& b) { return remat::silu(a) * b; };
    const T gate = remat::matmul(h2, l.w1), lin = remat::matmul(h2, l.w3);
    const T up = c_.fused_swiglu         ? llama::swiglu(gate, lin)
                 : c_.recompute_composed ? remat::checkpoint(composed_swiglu, gate, lin)
                                         : composed_swiglu(gate, lin);
    return x2 + remat::matmul(up, l.w2);
  }

  /// The final norm, the output projection and the mean cross-entropy against targets (B, T).
  T loss(const T& x, const T& targets) const {
    return remat::cross_entropy(remat::matmul(norm(x, norm_), out_), targets);
  }

  const Config& config() const { return c_; }

 private:
  struct Layer {
    T g1, wq, wk, wv, wo, g2, w1, w3, w2;
  };

  T norm(const T& x, const T& g) const {
    if (c_.fused_norm) return remat::rms_norm(x, g, c_.eps);
    auto f = [eps = c_.eps](const T& a, const T& w) { return composed_rms_norm(a, w, eps); };
    return c_.recompute_composed ? remat::checkpoint(f, x, g) : f(x, g);
  }
  // Rotary embedding of x (B, heads, T, D), rotating the pairs (j, j + D/2) by each position's
  // angle (the Hugging Face layout).
  T rope(const T& x, std::int64_t Tn) const {
    const std::int64_t half = x.size(3) / 2;
    const T cs = remat::slice(cos_, 0, 0, Tn), sn = remat::slice(sin_, 0, 0, Tn);  // (T, D/2)
    const T x1 = remat::slice(x, -1, 0, half), x2 = remat::slice(x, -1, half, half);
    return remat::concat(std::vector<T>{x1 * cs - x2 * sn, x1 * sn + x2 * cs}, -1);
  }
  // (B, KVH, T, D) -> (B, H, T, D): each key/value head serves H / KVH query heads.
  T repeat_kv(const T& x) const {
    const std::int64_t rep = c_.heads / c_.kv_heads;
    if (rep == 1) return x;
    const std::int64_t Bn = x.size(0), KVH = x.size(1), Tn = x.size(2), D = x.size(3);
    const T one = remat::reshape(x, {Bn, KVH, 1, Tn, D});
    return remat::reshape(remat::concat(std::vector<T>(static_cast<std::size_t>(rep), one), 2),
                          {Bn, KVH * rep, Tn, D});
  }

  Config c_;
  remat::Tape<B>* tape_;
  T tok_, norm_, out_, cos_, sin_;
  std::vector<Layer> layers_;
};

/// The model's training step as a chain of stages for the planner: the embedding (token ids
/// in: never inside a segment), one stage per block, the head with the loss.
/// Each block may run as is or checkpointed with one of `options`.
template <class B>
remat::Stages<B> stages(const std::shared_ptr<const Model<B>>& m, const remat::Tensor<B>& targets,
                        const std::vector<remat::KeepOption>& options) {
  remat::Stages<B> s;
  s.add_fixed("embed", [m](const remat::Tensor<B>& ids) { return m->embed(ids); });
  for (std::int64_t i = 0; i < m->config().layers; ++i)
    s.add("layers." + std::to_string(i), [m, i](const remat::Tensor<B>& x) {
      return m->block(static_cast<std::size_t>(i), x);
    }, options);
  s.add("head", [m, targets](const remat::Tensor<B>& x) { return m->loss(x, targets); });
  return s;
}

/// A program for remat::plan_stages: the model, a batch of `batch` x `seq` ids (a fixed
/// pattern: only sizes matter to the plan) and the stages, on `tape`'s backend.
template <class B>
remat::StageProgram<B> program(remat::Tape<B>& tape, const Config& c, std::int64_t batch,
                               std::int64_t seq, const std::vector<std::int32_t>& ids,
                               const std::vector<std::int32_t>& targets,
                               const std::vector<remat::KeepOption>& options =
                                   remat::default_keep_options()) {
  auto m = std::make_shared<const Model<B>>(tape, c);
  remat::StageProgram<B> p;
  p.input = tape.tokens({batch, seq}, ids);
  p.stages = stages<B>(m, tape.tokens({batch, seq}, targets), options);
  p.parameters = m->parameters();
  return p;
}

}  // namespace llama
