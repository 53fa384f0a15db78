#pragma once
// SPDX-License-Identifier: MIT
// The shape of a Llama-family decoder (Llama 3, Qwen 2/3, SmolLM2): what Hugging Face's
// config.json says of it (io/hf_config.hpp reads one), in its terms; and how remat runs it
// (nn::Llama, nn/llama.hpp): its checkpointing, precision and a fresh model's initialization.

#include <cstdint>
#include <string>

#include "remat/core/dtype.hpp"
#include "remat/core/error.hpp"
#include "remat/nn/blocks.hpp"
#include "remat/ops/rotary.hpp"

namespace remat {
namespace nn {

struct LlamaConfig {
  std::string model_type = "llama";   // llama, qwen2 or qwen3
  std::int64_t vocab_size = 0;         // vocab_size
  std::int64_t hidden_size = 0;        // d, the residual stream's width
  std::int64_t intermediate_size = 0;  // the SwiGLU MLP's width
  std::int64_t num_layers = 0;         // num_hidden_layers
  std::int64_t num_heads = 0;          // num_attention_heads
  std::int64_t num_kv_heads = 0;       // num_key_value_heads (grouped-query attention)
  std::int64_t head_dim = 0;           // head_dim, else hidden_size / num_heads
  std::int64_t max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  RopeConfig rope;                     // rope_theta and rope_scaling
  bool tie_word_embeddings = false;    // lm_head is embed_tokens
  bool qkv_bias = false;               // attention_bias (Llama), always for Qwen 2
  bool qk_norm = false;                // Qwen 3: RMSNorm over each head of q and k

  // Not from config.json: how remat runs the model
  CheckpointStrategy checkpoint;       // how the blocks are checkpointed (nn/blocks.hpp)
  DType precision = DType::f32;        // f32 or bf16 (NOTE [precision policy] in ops/cast.hpp)
  float init_std = 0.02f;              // a fresh model's weights: N(0, init_std^2) (initializer_range)
  std::uint64_t seed = 1337;           // ... drawn from this seed

  /// Throws unless the sizes make a model (positive, heads divisible by kv heads, even heads).
  void check(const std::string& where = "remat::nn::LlamaConfig") const {
    REMAT_CHECK(vocab_size > 0 && hidden_size > 0 && intermediate_size > 0 && num_layers > 0 && num_heads > 0 &&
                    num_kv_heads > 0 && head_dim > 0,
                where, ": vocab_size ", vocab_size, ", hidden_size ", hidden_size, ", intermediate_size ",
                intermediate_size, ", num_hidden_layers ", num_layers, ", num_attention_heads ", num_heads,
                ", num_key_value_heads ", num_kv_heads, ", head_dim ", head_dim, " (expected each >= 1)");
    REMAT_CHECK(num_heads % num_kv_heads == 0, where, ": ", num_heads, " attention heads and ", num_kv_heads,
                " key/value heads (expected the heads to be a multiple of the key/value heads: each key/value "
                "head serves heads / kv_heads query heads)");
    REMAT_CHECK(head_dim % 2 == 0 && head_dim <= kRopeMaxHeadSize, where, ": head_dim ", head_dim,
                " (expected an even size of at most ", kRopeMaxHeadSize, " for the rotary embeddings)");
  }
};

}  // namespace nn
}  // namespace remat
