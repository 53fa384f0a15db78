#pragma once
// SPDX-License-Identifier: MIT
// Hugging Face's config.json of a Llama-family decoder (model_type llama, qwen2, qwen3) read
// into nn::LlamaConfig (parse_llama_config, read_llama_config), and written back from one
// (llama_config_json). Needs nlohmann-json (Debian: nlohmann-json3-dev).
//
// NOTE [config.json fields]: every field is one of three kinds, and a field of none of them is
// an error naming it (a field that changes the math is never silently ignored):
//   read      the sizes (vocab_size, hidden_size, intermediate_size, num_hidden_layers,
//             num_attention_heads, num_key_value_heads, head_dim), rms_norm_eps, rope_theta,
//             rope_scaling (null, "default" or "llama3"; or the same as rope_parameters),
//             tie_word_embeddings, attention_bias, max_position_embeddings; Qwen 2 always has
//             q/k/v biases, Qwen 3 always RMSNorms each head of q and k;
//   required  fields remat reads only to check they ask for what it implements: hidden_act
//             "silu", attention_dropout 0, mlp_bias false, rope_interleaved false,
//             partial_rotary_factor 1, use_sliding_window false, layer_types all
//             "full_attention", no quantization_config, no logit soft-capping;
//   ignored   fields that change no number of a training step: the architecture's name, token
//             ids, dtype (the file's tensors say theirs), versions, generation defaults,
//             initializer_range, pretraining_tp (a way to split a GEMM, same product), and
//             sliding_window / max_window_layers when use_sliding_window is false.
// Sizes are checked (positive, at most 2^31 - 1; heads a multiple of the key/value heads, an even
// head_dim) before anything is sized from them; the file is read with the same caps as GPT-2's
// config.json (NOTE [hostile JSON] in io/json.hpp).
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "remat/core/error.hpp"
#include "remat/io/file.hpp"
#include "remat/io/gpt2.hpp"
#include "remat/io/json.hpp"
#include "remat/nn/llama_config.hpp"

namespace remat {
namespace io {

/// A Llama-family config.json's text (NOTE [config.json fields]); `name` appears in errors.
inline nn::LlamaConfig parse_llama_config(std::string_view text, const std::string& name = "config.json") {
  static constexpr const char* who = "remat::io::read_llama_config";
  const JsonDocument doc = parse_json_document(text, kConfigJsonLimits, who, "a config.json", name);
  const nlohmann::json& j = doc.dom;
  REMAT_CHECK(j.is_object(), who, ": '", name, "' is ", json_brief(j), " (expected a JSON object: a Hugging Face config.json)");
  const auto where = [&](const std::string& key) { return ::remat::detail::cat(who, ": '", key, "' of '", name, "'"); };
  const auto has = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  nn::LlamaConfig c;
  // model_type
  REMAT_CHECK(has("model_type") && j["model_type"].is_string(), who, ": '", name, "' has no model_type",
              " (expected \"llama\", \"qwen2\" or \"qwen3\": a Llama-family decoder's config.json)");
  c.model_type = j["model_type"].get<std::string>();
  REMAT_CHECK(c.model_type == "llama" || c.model_type == "qwen2" || c.model_type == "qwen3", where("model_type"), " is ",
              json_brief(j["model_type"]), " (expected \"llama\", \"qwen2\" or \"qwen3\"; other families are not "
              "implemented)");
  const auto size = [&](const char* k, bool required, std::int64_t fallback) -> std::int64_t {
    if (!has(k)) {
      REMAT_CHECK(!required, who, ": '", name, "' has no ", k, " (expected a positive integer)");
      return fallback;
    }
    const nlohmann::json& v = j[k];
    REMAT_CHECK(v.is_number_unsigned() && v.get<std::uint64_t>() >= 1 && v.get<std::uint64_t>() <= 2147483647,
                where(k), " is ", json_brief(v), " (expected an integer of 1 to 2147483647)");
    return static_cast<std::int64_t>(v.get<std::uint64_t>());
  };
  const auto number = [&](const nlohmann::json& v, const std::string& key) {
    REMAT_CHECK(v.is_number() && std::isfinite(v.get<double>()), where(key), " is ", json_brief(v),
                " (expected a number)");
    return v.get<double>();
  };
  const auto flag = [&](const char* k, bool fallback) {
    if (!has(k)) return fallback;
    REMAT_CHECK(j[k].is_boolean(), where(k), " is ", json_brief(j[k]), " (expected true or false)");
    return j[k].get<bool>();
  };
  c.vocab_size = size("vocab_size", true, 0);
  c.hidden_size = size("hidden_size", true, 0);
  c.intermediate_size = size("intermediate_size", true, 0);
  c.num_layers = size("num_hidden_layers", true, 0);
  c.num_heads = size("num_attention_heads", true, 0);
  c.num_kv_heads = size("num_key_value_heads", false, c.num_heads);
  REMAT_CHECK(has("head_dim") || c.hidden_size % c.num_heads == 0, who, ": '", name, "' has hidden_size ",
              c.hidden_size, " and ", c.num_heads, " heads but no head_dim (expected heads dividing hidden_size)");
  c.head_dim = size("head_dim", false, c.hidden_size / c.num_heads);
  c.max_position_embeddings = size("max_position_embeddings", false, 0);
  if (has("rms_norm_eps")) {
    const double eps = number(j["rms_norm_eps"], "rms_norm_eps");
    REMAT_CHECK(eps > 0 && eps < 1, where("rms_norm_eps"), " is ", json_brief(j["rms_norm_eps"]),
                " (expected a small positive number, e.g. 1e-05)");
    c.rms_norm_eps = static_cast<float>(eps);
  }
  // rope: rope_theta + rope_scaling, or transformers 5's rope_parameters holding both
  const nlohmann::json* scaling = has("rope_scaling") ? &j["rope_scaling"] : nullptr;
  std::string scaling_key = "rope_scaling";
  if (has("rope_parameters")) {
    REMAT_CHECK(!scaling, who, ": '", name, "' has both rope_scaling and rope_parameters (expected one)");
    scaling = &j["rope_parameters"];
    scaling_key = "rope_parameters";
  }
  if (has("rope_theta")) c.rope.theta = static_cast<float>(number(j["rope_theta"], "rope_theta"));
  if (scaling) {
    const nlohmann::json& s = *scaling;
    REMAT_CHECK(s.is_object(), where(scaling_key), " is ", json_brief(s), " (expected null or an object)");
    const std::string type_key = s.contains("rope_type") ? "rope_type" : "type";
    const std::string type = s.contains(type_key) && s[type_key].is_string() ? s[type_key].get<std::string>() : "default";
    REMAT_CHECK(type == "default" || type == "llama3", where(scaling_key + "." + type_key), " is ",
                s.contains(type_key) ? json_brief(s[type_key]) : std::string("absent"),
                " (expected \"default\" or \"llama3\"; other scalings are not implemented)");
    for (const auto& item : s.items()) {
      const std::string& k = item.key();
      const std::string key = scaling_key + "." + k;
      if (k == "rope_type" || k == "type") continue;
      if (k == "rope_theta") c.rope.theta = static_cast<float>(number(item.value(), key));
      else if (type == "llama3" && k == "factor") c.rope.factor = static_cast<float>(number(item.value(), key));
      else if (type == "llama3" && k == "low_freq_factor") c.rope.low_freq_factor = static_cast<float>(number(item.value(), key));
      else if (type == "llama3" && k == "high_freq_factor") c.rope.high_freq_factor = static_cast<float>(number(item.value(), key));
      else if (type == "llama3" && k == "original_max_position_embeddings") {
        const double v = number(item.value(), key);
        REMAT_CHECK(v >= 1 && v <= 2147483647 && v == std::floor(v), where(key), " is ", json_brief(item.value()),
                    " (expected a positive integer)");
        c.rope.original_max_position_embeddings = static_cast<std::int64_t>(v);
      } else if (k == "partial_rotary_factor" && item.value() == 1) {
        continue;
      } else {
        throw Error(::remat::detail::cat(where(key), " is ", json_brief(item.value()), ", which remat does not "
                                         "implement (expected the fields of a \"", type, "\" rope: ",
                                         type == "llama3" ? "factor, low_freq_factor, high_freq_factor, "
                                                            "original_max_position_embeddings" : "rope_theta", ")"));
      }
    }
    if (type == "llama3")
      REMAT_CHECK(c.rope.factor > 0 && c.rope.low_freq_factor > 0 && c.rope.high_freq_factor > c.rope.low_freq_factor,
                  where(scaling_key), ": factor ", c.rope.factor, ", low_freq_factor ", c.rope.low_freq_factor,
                  ", high_freq_factor ", c.rope.high_freq_factor, " (expected factor > 0 and 0 < low < high)");
  }
  REMAT_CHECK(c.rope.theta > 0, where("rope_theta"), " is ", c.rope.theta, " (expected a positive number)");
  c.tie_word_embeddings = flag("tie_word_embeddings", false);
  c.qkv_bias = c.model_type == "qwen2" ? true : flag("attention_bias", false);
  c.qk_norm = c.model_type == "qwen3";
  // what must hold (NOTE [config.json fields])
  const auto require = [&](const char* k, const nlohmann::json& want, const char* expected) {
    if (!has(k)) return;
    REMAT_CHECK(j[k] == want, where(k), " is ", json_brief(j[k]), ", which remat does not implement (expected ",
                expected, ")");
  };
  require("hidden_act", "silu", "\"silu\"");
  require("mlp_bias", false, "false");
  require("rope_interleaved", false, "false: Hugging Face's rotate_half");
  require("use_sliding_window", false, "false: full attention in every layer");
  require("partial_rotary_factor", 1, "1");
  require("use_mrope", false, "false");
  require("rope_is_neox_style", true, "true: Hugging Face's rotate_half");
  if (has("attention_dropout"))
    REMAT_CHECK(number(j["attention_dropout"], "attention_dropout") == 0.0, where("attention_dropout"), " is ",
                json_brief(j["attention_dropout"]), ", which remat does not implement (expected 0)");
  if (has("layer_types")) {
    const nlohmann::json& lt = j["layer_types"];
    bool full = lt.is_array();
    for (const auto& x : lt) full = full && x == "full_attention";
    REMAT_CHECK(full, where("layer_types"), " is ", json_brief(lt), ", which remat does not implement (expected "
                "\"full_attention\" for every layer)");
  }
  static const std::set<std::string> known = {
      // read or required above
      "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
      "rope_parameters", "tie_word_embeddings", "attention_bias", "hidden_act", "mlp_bias", "rope_interleaved",
      "use_sliding_window", "partial_rotary_factor", "attention_dropout", "layer_types",
      // change no number of a step (NOTE [config.json fields])
      "architectures", "_name_or_path", "name_or_path", "auto_map", "bos_token_id", "eos_token_id", "pad_token_id",
      "torch_dtype", "dtype", "transformers_version", "use_cache", "initializer_range", "pretraining_tp",
      "is_llama_config", "tokenizer_class", "sliding_window", "max_window_layers", "output_attentions",
      "output_hidden_states", "return_dict", "use_return_dict", "torchscript", "keys_to_ignore_at_inference",
      "unsloth_fixed", "unsloth_version", "generation_config", "max_length", "temperature", "top_p", "top_k",
      "do_sample", "repetition_penalty", "num_beams", "id2label", "label2id", "problem_type", "finetuning_task",
      "task_specific_params", "is_decoder", "is_encoder_decoder", "add_cross_attention", "tie_encoder_decoder",
      "chunk_size_feed_forward", "prefix", "sep_token_id", "decoder_start_token_id", "bad_words_ids",
      "use_mrope", "rope_is_neox_style"};
  for (const auto& item : j.items()) {
    if (known.count(item.key())) continue;
    throw Error(::remat::detail::cat(where(item.key()), " is ", json_brief(item.value()),
                                     ": a field remat does not know, which may change the model's math (expected "
                                     "the fields of a llama, qwen2 or qwen3 config.json; if it changes no number, "
                                     "remove it from the file)"));
  }
  c.check(::remat::detail::cat(who, ": '", name, "'"));
  return c;
}

/// A Llama-family config.json (NOTE [config.json fields]).
inline nn::LlamaConfig read_llama_config(const std::string& path) {
  const std::vector<char> text = read_file(path, "read_llama_config", kConfigJsonMaxBytes, "a config.json");
  return parse_llama_config(std::string_view(text.data(), text.size()), path);
}

/// The config.json of c, as Hugging Face writes one (parse_llama_config reads it back).
inline std::string llama_config_json(const nn::LlamaConfig& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {c.model_type == "llama" ? "LlamaForCausalLM" : c.model_type == "qwen2" ? "Qwen2ForCausalLM"
                                                                                               : "Qwen3ForCausalLM"};
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  if (c.max_position_embeddings > 0) j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope.theta;
  if (c.rope.factor > 0)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope.factor},
                         {"low_freq_factor", c.rope.low_freq_factor},
                         {"high_freq_factor", c.rope.high_freq_factor},
                         {"original_max_position_embeddings", c.rope.original_max_position_embeddings}};
  else
    j["rope_scaling"] = nullptr;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.model_type != "qwen2") j["attention_bias"] = c.qkv_bias;
  j["hidden_act"] = "silu";
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

}  // namespace io
}  // namespace remat
