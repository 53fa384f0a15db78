#pragma once
// SPDX-License-Identifier: MIT
// A Llama-family decoder (Llama 3, Qwen 2/3, SmolLM2) under Hugging Face's names and layouts,
// so its files load as they are (io/llama.hpp):
//   model.embed_tokens.weight                 [V, d]
//   model.layers.{i}.input_layernorm.weight   [d]       RMSNorm before attention
//   model.layers.{i}.self_attn.q_proj.weight  [H D, d]  (torch.nn.Linear: [out, in])
//                             k_proj, v_proj  [KVH D, d] (.bias [out]: Qwen 2, attention_bias)
//                             q_norm, k_norm  [D]       (Qwen 3: RMSNorm over each head)
//                             o_proj          [d, H D]
//   model.layers.{i}.post_attention_layernorm.weight [d]
//   model.layers.{i}.mlp.{gate,up}_proj.weight [F, d],  down_proj.weight [d, F]
//   model.norm.weight [d];  lm_head.weight [V, d] unless tied to embed_tokens
// A block: x + o_proj(attn(rope(q), rope(k), v)) over rms_norm(x), then + down_proj(silu(gate)
// * up) over rms_norm(.); grouped-query attention reads each key/value head in place.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "remat/nn/blocks.hpp"
#include "remat/nn/layers.hpp"
#include "remat/nn/llama_config.hpp"
#include "remat/ops/activation.hpp"
#include "remat/ops/attention.hpp"
#include "remat/ops/elementwise.hpp"
#include "remat/ops/layer_norm.hpp"
#include "remat/ops/loss.hpp"
#include "remat/ops/rotary.hpp"
#include "remat/ops/view.hpp"

namespace remat {
namespace nn {

/// Grouped-query self-attention with rotary embeddings (and Qwen 3's per-head q/k norm).
template <class B>
class LlamaAttention : public Module<B> {
 public:
  LlamaAttention(Tape<B>& tape, const LlamaConfig& c, std::uint64_t seed)
      : q_proj(tape, c.hidden_size, c.num_heads * c.head_dim, c.qkv_bias, c.init_std, seed),
        k_proj(tape, c.hidden_size, c.num_kv_heads * c.head_dim, c.qkv_bias, c.init_std, seed + 1),
        v_proj(tape, c.hidden_size, c.num_kv_heads * c.head_dim, c.qkv_bias, c.init_std, seed + 2),
        o_proj(tape, c.num_heads * c.head_dim, c.hidden_size, false, c.init_std, seed + 3),
        H(c.num_heads), KVH(c.num_kv_heads), D(c.head_dim), rope_(c.rope) {
    this->add_module("q_proj", q_proj);
    this->add_module("k_proj", k_proj);
    this->add_module("v_proj", v_proj);
    this->add_module("o_proj", o_proj);
    if (c.qk_norm) {
      q_norm = std::make_shared<RMSNorm<B>>(tape, c.head_dim, c.rms_norm_eps);
      k_norm = std::make_shared<RMSNorm<B>>(tape, c.head_dim, c.rms_norm_eps);
      this->add_module("q_norm", *q_norm);
      this->add_module("k_norm", *k_norm);
    }
  }
  // x (B, T, d) -> (B, T, d), before the residual add
  Tensor<B> operator()(const Tensor<B>& x) const {
    const std::int64_t Bn = x.size(0), Tn = x.size(1);
    Tensor<B> q = reshape(q_proj(x), {Bn, Tn, H, D});    // (B, T, H, D)
    Tensor<B> k = reshape(k_proj(x), {Bn, Tn, KVH, D});  // (B, T, KVH, D)
    const Tensor<B> v = reshape(v_proj(x), {Bn, Tn, KVH, D});
    if (q_norm) {
      q = (*q_norm)(q);
      k = (*k_norm)(k);
    }
    const Tensor<B> a = grouped_attention(rope(q, rope_), rope(k, rope_), v, /*causal=*/true);
    return o_proj(reshape(a, {Bn, Tn, H * D}));
  }
  Projection<B> q_proj, k_proj, v_proj, o_proj;
  std::shared_ptr<RMSNorm<B>> q_norm, k_norm;  // Qwen 3 only (shared: blocks are copied)

 private:
  std::int64_t H, KVH, D;
  RopeConfig rope_;
};

/// The SwiGLU MLP: down_proj(silu(gate_proj(x)) * up_proj(x)).
template <class B>
class LlamaMLP : public Module<B> {
 public:
  LlamaMLP(Tape<B>& tape, const LlamaConfig& c, std::uint64_t seed)
      : gate_proj(tape, c.hidden_size, c.intermediate_size, false, c.init_std, seed),
        up_proj(tape, c.hidden_size, c.intermediate_size, false, c.init_std, seed + 1),
        down_proj(tape, c.intermediate_size, c.hidden_size, false, c.init_std, seed + 2) {
    this->add_module("gate_proj", gate_proj);
    this->add_module("up_proj", up_proj);
    this->add_module("down_proj", down_proj);
  }
  Tensor<B> operator()(const Tensor<B>& x) const { return down_proj(swiglu(gate_proj(x), up_proj(x))); }
  Projection<B> gate_proj, up_proj, down_proj;
};

/// A decoder layer: x + self_attn(input_layernorm(x)), then + mlp(post_attention_layernorm(.)).
template <class B>
class LlamaBlock : public Module<B> {
 public:
  LlamaBlock(Tape<B>& tape, const LlamaConfig& c, std::uint64_t seed)
      : input_layernorm(tape, c.hidden_size, c.rms_norm_eps),
        self_attn(tape, c, seed),
        post_attention_layernorm(tape, c.hidden_size, c.rms_norm_eps),
        mlp(tape, c, seed + 4) {
    this->add_module("input_layernorm", input_layernorm);
    this->add_module("self_attn", self_attn);
    this->add_module("post_attention_layernorm", post_attention_layernorm);
    this->add_module("mlp", mlp);
  }
  // x (B, T, d) -> (B, T, d)
  Tensor<B> operator()(const Tensor<B>& x) const {
    const Tensor<B> h = x + self_attn(input_layernorm(x));
    return h + mlp(post_attention_layernorm(h));
  }
  RMSNorm<B> input_layernorm;
  LlamaAttention<B> self_attn;
  RMSNorm<B> post_attention_layernorm;
  LlamaMLP<B> mlp;
};

template <class B>
class Llama : public Module<B> {
 public:
  Llama(Tape<B>& tape, const LlamaConfig& c)
      : config(checked(c)),
        embed_tokens(tape, c.vocab_size, c.hidden_size, c.init_std, c.seed),
        norm(tape, c.hidden_size, c.rms_norm_eps) {
    this->add_module("model.embed_tokens", embed_tokens);
    for (std::int64_t i = 0; i < c.num_layers; ++i) {
      layers.emplace_back(tape, c, c.seed + 16 + 8 * static_cast<std::uint64_t>(i));
      this->add_module("model.layers." + std::to_string(i), layers.back());
    }
    this->add_module("model.norm", norm);
    if (!c.tie_word_embeddings) {
      lm_head = std::make_shared<Projection<B>>(tape, c.hidden_size, c.vocab_size, false, c.init_std, c.seed + 2);
      this->add_module("lm_head", *lm_head);
    }
    this->flatten_parameters();  // NOTE [flat buffers]
  }

  /// The residual stream after the embedding: ids (B, T) i32 -> (B, T, d) in config.precision.
  Tensor<B> embed(const Tensor<B>& ids) const {
    REMAT_CHECK(ids.rank() == 2 && ids.dtype() == DType::i32, "remat::nn::Llama: token ids are ",
                dtype_name(ids.dtype()), " ", ids.shape().str(), " (expected i32 [B, T])");
    return to_dtype(embed_tokens(ids), config.precision);
  }
  /// The final norm and the head (lm_head, or embed_tokens when tied): x (B, T, d) -> logits
  /// (B, T, V) in x's type.
  Tensor<B> head(const Tensor<B>& x) const {
    const Tensor<B>& w = lm_head ? lm_head->weight : embed_tokens.weight;  // [V, d]
    return matmul(norm(x), to_dtype(w, x.dtype()), false, /*tb=*/true);
  }
  /// The blocks on the residual stream x (B, T, d), checkpointed per config.checkpoint.
  Tensor<B> blocks(Tensor<B> x) const {
    const auto schedule = schedule_of(config.checkpoint, config.num_layers, "remat::nn::Llama",
                                      "config.checkpoint = nn::plan_checkpoint<Cpu>(config, batch, "
                                      "seq).strategy, from remat/nn/llama_plan.hpp");
    const std::vector<LlamaBlock<B>>* ls = &layers;
    return run_block_schedule<B>(schedule, *schedule, std::move(x), static_cast<int>(layers.size()),
                                 "model.layers", "remat::nn::Llama",
                                 [ls](std::size_t i, const Tensor<B>& in) { return (*ls)[i](in); });
  }
  /// ids (B, T) i32 -> logits (B, T, V) f32.
  Tensor<B> operator()(const Tensor<B>& ids) const {
    return to_dtype(head(blocks(embed(ids))), DType::f32);
  }
  /// Mean cross-entropy of the next-token predictions against targets (B, T).
  Tensor<B> loss(const Tensor<B>& ids, const Tensor<B>& targets) const {
    return cross_entropy(head(blocks(embed(ids))), targets);
  }

  LlamaConfig config;
  Embedding<B> embed_tokens;
  std::vector<LlamaBlock<B>> layers;
  RMSNorm<B> norm;
  std::shared_ptr<Projection<B>> lm_head;  // null when tied

 private:
  static const LlamaConfig& checked(const LlamaConfig& c) {  // before any parameter is made
    c.check("remat::nn::Llama");
    REMAT_CHECK(c.precision == DType::f32 || c.precision == DType::bf16,
                "remat::nn::Llama: config has precision ", dtype_name(c.precision),
                " (expected f32 or bf16)");
    return c;
  }
};

}  // namespace nn
}  // namespace remat
