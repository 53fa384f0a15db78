// SPDX-License-Identifier: MIT
// Hugging Face config.json of Llama-family models (io/hf_config.hpp, NOTE [config.json
// fields]): configs in the layout of SmolLM2-135M, Llama-3.2-1B, Qwen2.5-0.5B and Qwen3-0.6B
// (their published fields and values) read into nn::LlamaConfig; a field that asks for math
// remat does not implement, or that it does not know, is an error naming it; bad sizes and
// hostile text are clean errors.
#include <string>

#include <nlohmann/json.hpp>
#include <remat/io/hf_config.hpp>

#include "support/catch.hpp"
#include "support/require_error.hpp"

using remat::io::parse_llama_config;
using remat_test::require_error;

namespace {

nlohmann::json hfc_smollm2() {
  return nlohmann::json::parse(R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 0, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 576, "initializer_range": 0.041666666666666664, "intermediate_size": 1536,
    "is_llama_config": true, "max_position_embeddings": 8192, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_interleaved": false, "rope_scaling": null, "rope_theta": 100000,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.42.3",
    "use_cache": true, "vocab_size": 49152})");
}
nlohmann::json hfc_llama32_1b() {
  return nlohmann::json::parse(R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
}
nlohmann::json hfc_qwen25_05b() {
  return nlohmann::json::parse(R"({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
    "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768,
    "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.40.1",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}
nlohmann::json hfc_qwen3_06b() {
  return nlohmann::json::parse(R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
}
remat::nn::LlamaConfig hfc_read(const nlohmann::json& j) { return parse_llama_config(j.dump(), "config.json"); }

}  // namespace

TEST_CASE("config.json of SmolLM2, Llama 3.2, Qwen 2.5 and Qwen 3 read as their models are", "[io][llama]") {
  const auto s = hfc_read(hfc_smollm2());
  CHECK(s.model_type == "llama");
  CHECK((s.num_layers == 30 && s.hidden_size == 576 && s.num_heads == 9 && s.num_kv_heads == 3 && s.head_dim == 64));
  CHECK((s.intermediate_size == 1536 && s.vocab_size == 49152 && s.tie_word_embeddings && !s.qkv_bias && !s.qk_norm));
  CHECK((s.rope.theta == 100000.0f && s.rope.factor == 0.0f && s.rms_norm_eps == 1e-5f));
  const auto l = hfc_read(hfc_llama32_1b());
  CHECK((l.num_layers == 16 && l.hidden_size == 2048 && l.num_heads == 32 && l.num_kv_heads == 8 && l.head_dim == 64));
  CHECK((l.rope.theta == 500000.0f && l.rope.factor == 32.0f && l.rope.low_freq_factor == 1.0f &&
         l.rope.high_freq_factor == 4.0f && l.rope.original_max_position_embeddings == 8192));
  CHECK(l.vocab_size == 128256);
  const auto q = hfc_read(hfc_qwen25_05b());
  CHECK((q.model_type == "qwen2" && q.qkv_bias && !q.qk_norm && q.head_dim == 64 && q.num_kv_heads == 2));
  CHECK((q.rms_norm_eps == 1e-6f && q.rope.theta == 1e6f));
  const auto q3 = hfc_read(hfc_qwen3_06b());
  CHECK((q3.model_type == "qwen3" && !q3.qkv_bias && q3.qk_norm && q3.head_dim == 128 && q3.hidden_size == 1024));
  // transformers 5 writes rope_parameters instead of rope_theta + rope_scaling
  nlohmann::json v5 = hfc_llama32_1b();
  v5["rope_parameters"] = v5["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  const auto l5 = hfc_read(v5);
  CHECK((l5.rope.theta == 500000.0f && l5.rope.factor == 32.0f));
  // absent: kv heads = heads, head_dim = hidden / heads, defaults
  nlohmann::json m = {{"model_type", "llama"}, {"vocab_size", 100}, {"hidden_size", 64}, {"intermediate_size", 96},
                      {"num_hidden_layers", 2}, {"num_attention_heads", 4}};
  const auto d = hfc_read(m);
  CHECK((d.num_kv_heads == 4 && d.head_dim == 16 && d.rope.theta == 10000.0f && !d.tie_word_embeddings));
}

TEST_CASE("config.json fields that ask for other math are errors naming them", "[io][llama]") {
  const auto refused = [](nlohmann::json j, const char* key, const nlohmann::json& value,
                          std::initializer_list<std::string> parts) {
    if (value.is_discarded()) j.erase(key);
    else j[key] = value;
    INFO(key);
    const std::string msg = require_error([&] { (void)hfc_read(j); }, parts);
    CHECK(msg.find("remat::io::read_llama_config") != std::string::npos);
  };
  const nlohmann::json base = hfc_smollm2();
  const nlohmann::json gone = nlohmann::json(nlohmann::json::value_t::discarded);
  refused(base, "hidden_act", "gelu", {"'hidden_act'", "\"gelu\"", "expected \"silu\""});
  refused(base, "mlp_bias", true, {"'mlp_bias'", "expected false"});
  refused(base, "rope_interleaved", true, {"'rope_interleaved'", "rotate_half"});
  refused(base, "attention_dropout", 0.1, {"'attention_dropout'", "expected 0"});
  refused(base, "use_sliding_window", true, {"'use_sliding_window'"});
  refused(base, "layer_types", nlohmann::json::array({"full_attention", "sliding_attention"}), {"'layer_types'"});
  refused(base, "partial_rotary_factor", 0.5, {"'partial_rotary_factor'"});
  refused(base, "quantization_config", nlohmann::json::object({{"quant_method", "bitsandbytes"}}),
          {"'quantization_config'", "does not know", "may change the model's math"});
  refused(base, "embedding_multiplier", 12.0, {"'embedding_multiplier'", "does not know"});
  refused(base, "model_type", "gemma", {"'model_type'", "\"gemma\"", "\"llama\", \"qwen2\" or \"qwen3\""});
  refused(base, "model_type", gone, {"has no model_type"});
  refused(base, "rope_scaling", nlohmann::json::object({{"rope_type", "yarn"}, {"factor", 4.0}}),
          {"'rope_scaling.rope_type'", "\"yarn\""});
  refused(base, "rope_scaling", nlohmann::json::object({{"type", "linear"}, {"factor", 2.0}}),
          {"'rope_scaling.type'", "\"linear\""});
  nlohmann::json bad_llama3 = hfc_llama32_1b()["rope_scaling"];
  bad_llama3["mscale"] = 1.0;
  refused(base, "rope_scaling", bad_llama3, {"'rope_scaling.mscale'", "factor, low_freq_factor"});
  bad_llama3 = hfc_llama32_1b()["rope_scaling"];
  bad_llama3["high_freq_factor"] = 0.5;
  refused(base, "rope_scaling", bad_llama3, {"0 < low < high"});
  // sizes
  refused(base, "num_key_value_heads", 4, {"9 attention heads and 4 key/value heads", "multiple"});
  refused(base, "head_dim", 63, {"head_dim 63", "even"});
  refused(base, "head_dim", 512, {"head_dim 512", "at most 256"});
  refused(base, "hidden_size", 0, {"'hidden_size'", "is 0", "1 to 2147483647"});
  refused(base, "num_hidden_layers", -3, {"'num_hidden_layers'", "is -3"});
  refused(base, "vocab_size", "49152", {"'vocab_size'", "\"49152\""});
  refused(base, "vocab_size", 4294967296.0, {"'vocab_size'"});
  refused(base, "intermediate_size", gone, {"has no intermediate_size"});
  refused(base, "rms_norm_eps", "1e-5", {"'rms_norm_eps'", "expected a number"});
  refused(base, "rms_norm_eps", -1.0, {"'rms_norm_eps'", "small positive"});
  refused(base, "rope_theta", 0, {"'rope_theta'", "positive"});
  refused(base, "tie_word_embeddings", "yes", {"'tie_word_embeddings'", "true or false"});
  nlohmann::json no_head = hfc_qwen25_05b();
  no_head["num_attention_heads"] = 13;
  no_head["num_key_value_heads"] = 1;
  require_error([&] { (void)hfc_read(no_head); }, {"hidden_size 896 and 13 heads but no head_dim"});
}

TEST_CASE("hostile config.json text is a clean error", "[io][llama][hostile]") {
  require_error([] { (void)parse_llama_config("[1, 2]", "c.json"); }, {"'c.json' is", "expected a JSON object"});
  require_error([] { (void)parse_llama_config("{\"model_type\": \"llama\",", "c.json"); }, {"c.json"});
  require_error([] { (void)parse_llama_config(std::string(100, '[') + std::string(100, ']'), "c.json"); },
                {"c.json"});
  require_error([] { (void)parse_llama_config("{\"a\": 1, \"a\": 2}", "c.json"); }, {"c.json"});
  const std::string huge = "{\"x\": \"" + std::string(2 << 20, 'a') + "\"}";
  require_error([&] { (void)parse_llama_config(huge, "c.json"); }, {"c.json"});
  require_error([] { (void)remat::io::read_llama_config("/nonexistent/config.json"); }, {"/nonexistent/config.json"});
}
