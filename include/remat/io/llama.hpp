#pragma once
// SPDX-License-Identifier: MIT
// Llama-family weights (Llama 3, Qwen 2/3, SmolLM2) in Hugging Face's layout: a folder with
// config.json and model.safetensors, or shards that model.safetensors.index.json lists. Read
// and check them (read_llama), load them into nn::Llama (load_llama), save a model as such a
// folder (save_llama). Needs nlohmann-json (Debian: nlohmann-json3-dev).
//
// NOTE [Llama tensors required]: config.json (io/hf_config.hpp) gives every tensor the model
// has and its shape (llama_shapes); each must be in the files with that shape, F32, F16 or
// BF16, once. A missing tensor, a wrong shape, a tensor in two files or twice, and a tensor no
// Llama of that config has are errors naming it and its file. Skipped: the rotary buffers some
// exporters write (model.rotary_emb.inv_freq, model.layers.N.self_attn.rotary_emb.inv_freq),
// and lm_head.weight of a tied model when it equals model.embed_tokens.weight bit for bit (a
// tied model that differs is an error). The shapes are checked before the model is built: a
// small file cannot make a config ask for gigabytes.
//
// NOTE [sharded weights]: model.safetensors.index.json is {"metadata": {...}, "weight_map":
// {tensor: file}}. Each file named must be a plain file name in the same folder (no '/', no
// "..", ending in .safetensors); every tensor of a shard must be listed with that shard, and
// every tensor listed must be in it. The index is read with the same caps as a safetensors
// header's JSON (NOTE [hostile JSON] in io/json.hpp).

#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "remat/io/atomic_file.hpp"
#include "remat/io/file.hpp"
#include "remat/io/hf_config.hpp"
#include "remat/io/json.hpp"
#include "remat/io/safetensors.hpp"
#include "remat/nn/llama.hpp"

namespace remat {
namespace io {

/// Calls fn(name, shape) for every parameter of a Llama-family model with config c, under
/// Hugging Face's names, in the order nn::Llama registers them (torch.nn.Linear weights [out,
/// in]), until fn returns false.
template <class Fn>
void each_llama_tensor(const nn::LlamaConfig& c, Fn&& fn) {
  const std::int64_t d = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim,
                     F = c.intermediate_size;
  if (!fn(std::string("model.embed_tokens.weight"), Shape{c.vocab_size, d})) return;
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    std::vector<std::pair<std::string, Shape>> layer = {{p + "input_layernorm.weight", Shape{d}}};
    for (const auto& [x, out] : {std::pair<const char*, std::int64_t>{"q", q}, {"k", kv}, {"v", kv}}) {
      layer.emplace_back(p + "self_attn." + x + "_proj.weight", Shape{out, d});
      if (c.qkv_bias) layer.emplace_back(p + "self_attn." + x + "_proj.bias", Shape{out});
    }
    layer.emplace_back(p + "self_attn.o_proj.weight", Shape{d, q});
    if (c.qk_norm) {
      layer.emplace_back(p + "self_attn.q_norm.weight", Shape{c.head_dim});
      layer.emplace_back(p + "self_attn.k_norm.weight", Shape{c.head_dim});
    }
    layer.emplace_back(p + "post_attention_layernorm.weight", Shape{d});
    layer.emplace_back(p + "mlp.gate_proj.weight", Shape{F, d});
    layer.emplace_back(p + "mlp.up_proj.weight", Shape{F, d});
    layer.emplace_back(p + "mlp.down_proj.weight", Shape{d, F});
    for (const auto& [name, shape] : layer)
      if (!fn(name, shape)) return;
  }
  if (!fn(std::string("model.norm.weight"), Shape{d})) return;
  if (!c.tie_word_embeddings) fn(std::string("lm_head.weight"), Shape{c.vocab_size, d});
}

/// Every parameter of a Llama-family model with config c (each_llama_tensor's list).
inline std::vector<std::pair<std::string, Shape>> llama_shapes(const nn::LlamaConfig& c) {
  std::vector<std::pair<std::string, Shape>> s;
  each_llama_tensor(c, [&](const std::string& name, const Shape& shape) {
    s.emplace_back(name, shape);
    return true;
  });
  return s;
}

/// A Llama-family model's files, read and checked (NOTE [Llama tensors required]).
struct LlamaFiles {
  nn::LlamaConfig config;
  std::map<std::string, HostTensor> tensors;  // exactly llama_shapes(config)'s, BF16 kept as stored
  std::vector<std::string> files;             // the safetensors files read
  std::vector<std::string> skipped;           // tensors the model does not use, and why
};

namespace detail {
inline bool llama_rotary_buffer(const std::string& name) {
  const std::string tail = "rotary_emb.inv_freq";
  return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0 &&
         name.rfind("model.", 0) == 0;
}
inline std::string folder_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}
inline bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
/// The shards model.safetensors.index.json lists: file name -> the tensors it holds (NOTE
/// [sharded weights]).
inline std::map<std::string, std::set<std::string>> read_llama_index(const std::string& path) {
  static constexpr const char* who = "remat::io::read_llama";
  const std::vector<char> text = read_file(path, "read_llama", kSafetensorsMaxHeader, "a safetensors index");
  const JsonDocument doc = parse_json_document(std::string_view(text.data(), text.size()),
                                               kSafetensorsHeaderLimits, who, "a safetensors index", path);
  const nlohmann::json& j = doc.dom;
  REMAT_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), who, ": '", path,
              "' has no object 'weight_map' (expected Hugging Face's model.safetensors.index.json: "
              "{\"metadata\": {...}, \"weight_map\": {\"tensor name\": \"shard file\", ...}})");
  std::map<std::string, std::set<std::string>> shards;
  for (const auto& item : j["weight_map"].items()) {
    const nlohmann::json& f = item.value();
    REMAT_CHECK(f.is_string(), who, ": tensor '", shown(item.key()), "' of '", path, "' maps to ", json_brief(f),
                " (expected a shard's file name)");
    const std::string file = f.get<std::string>();
    REMAT_CHECK(!file.empty() && file.find('/') == std::string::npos && file.find('\0') == std::string::npos &&
                    file[0] != '.' && ends_with(file, ".safetensors"),
                who, ": tensor '", shown(item.key()), "' of '", path, "' maps to '", shown(file),
                "' (expected a file name in the index's folder ending in .safetensors: no '/', not "
                "starting with '.')");
    shards[file].insert(item.key());
  }
  REMAT_CHECK(!shards.empty(), who, ": '", path, "' lists no tensors (expected the model's tensors in 'weight_map')");
  return shards;
}
}  // namespace detail

/// Reads a Llama-family model's config.json and weights from `path`: a folder, its
/// model.safetensors, or its model.safetensors.index.json (config.json beside them). Checks
/// every tensor against the config (NOTE [Llama tensors required], NOTE [sharded weights]).
/// BF16 tensors stay as stored (two bytes a value) until load_llama widens them in place.
inline LlamaFiles read_llama(const std::string& path) {
  static constexpr const char* who = "remat::io::read_llama";
  std::string dir, index, single;
  if (is_regular_file(path)) {
    dir = detail::folder_of(path);
    (detail::ends_with(path, ".index.json") ? index : single) = path;
  } else {
    dir = path.empty() || path.back() == '/' ? path : path + "/";
    if (is_regular_file(dir + "model.safetensors.index.json")) index = dir + "model.safetensors.index.json";
    else single = dir + "model.safetensors";
    REMAT_CHECK(!index.empty() || is_regular_file(single), who, ": '", path, "' has neither model.safetensors "
                "nor model.safetensors.index.json (expected a Hugging Face model folder, or the path of its "
                "weights)");
  }
  LlamaFiles out;
  const std::string cfg = dir + "config.json";
  REMAT_CHECK(is_regular_file(cfg), who, ": no config.json beside '", path, "' (expected Hugging Face's "
              "config.json in the same folder: it gives the model's sizes)");
  out.config = read_llama_config(cfg);
  std::map<std::string, std::set<std::string>> shards;
  if (!index.empty()) shards = detail::read_llama_index(index);
  else shards[single.substr(dir.size())] = {};
  // Every file first (checked against the index), then the tensors against the config.
  const bool tied = out.config.tie_word_embeddings;
  struct Found {
    HostTensor t;
    std::string file;
    bool other_dtype = false;  // a rotary buffer in a dtype remat does not read (no values)
  };
  std::map<std::string, Found> found;
  for (const auto& shard : shards) {
    const std::string& file = shard.first;
    const std::set<std::string>& listed = shard.second;  // (not a binding: the lambda below reads it)
    const std::string fpath = dir + file;
    SafetensorsFile f = read_safetensors(fpath, OtherDtypes::list, Bf16::keep);
    out.files.push_back(fpath);
    auto account = [&](const std::string& key) {
      REMAT_CHECK(index.empty() || listed.count(key), who, ": '", fpath, "' holds tensor '", detail::shown(key),
                  "', which '", index, "' does not list with this file (expected the index to list every "
                  "tensor of each shard; is a shard from another model?)");
      const auto it = found.find(key);
      REMAT_CHECK(it == found.end(), who, ": tensor '", detail::shown(key), "' is in '", it->second.file,
                  "' and in '", fpath, "' (expected one copy)");
    };
    for (const auto& [key, dt] : f.other_dtypes) {
      account(key);
      REMAT_CHECK(detail::llama_rotary_buffer(key), who, ": tensor '", detail::shown(key), "' of '", fpath,
                  "' has dtype ", dt, " (expected F32, F16 or BF16 for the model's tensors)");
      found.emplace(key, Found{HostTensor(), fpath, true});
      out.skipped.push_back(detail::shown(key) + " (" + dt + ", a rotary buffer)");
    }
    for (auto& [key, t] : f.tensors) {
      account(key);
      found.emplace(key, Found{std::move(t), fpath, false});
    }
    if (!index.empty())
      for (const std::string& key : listed)
        REMAT_CHECK(found.count(key) && found[key].file == fpath, who, ": '", index, "' lists tensor '",
                    detail::shown(key), "' in '", file, "', which does not hold it (expected every listed "
                    "tensor in its shard)");
  }
  // The config's tensors in order, each present, stopping at the first missing: a config.json
  // of 2^31 layers beside a small file fails at the first layer the files lack.
  const nn::LlamaConfig& c = out.config;
  std::map<std::string, Shape> want;
  each_llama_tensor(c, [&](const std::string& name, const Shape& shape) {
    REMAT_CHECK(found.count(name), who, ": no tensor '", name, "' in ", index.empty() ? "'" + single + "'" :
                "the shards of '" + index + "'", " (NOTE [Llama tensors required]: config.json's ", c.model_type,
                " with ", c.num_layers, " layers has it; is a shard missing, or config.json another model's?)");
    want.emplace(name, shape);
    return true;
  });
  HostTensor head;
  std::string head_file;
  for (auto& [key, tf] : found) {
    HostTensor& t = tf.t;
    const std::string& fpath = tf.file;
    if (detail::llama_rotary_buffer(key)) {
      if (!tf.other_dtype)  // (those were noted above)
        out.skipped.push_back(detail::shown(key) + " (a rotary buffer: remat computes the rotations)");
      continue;
    }
    if (tied && key == "lm_head.weight") {
      head = std::move(t);
      head_file = fpath;
      continue;
    }
    auto w = want.find(key);
    REMAT_CHECK(w != want.end(), who, ": '", fpath, "' has tensor '", detail::shown(key), "', which a ",
                c.model_type, " of this config.json (", c.num_layers, " layers", tied ? ", tied embeddings" : "",
                c.qkv_bias ? ", q/k/v biases" : "", c.qk_norm ? ", q/k norms" : "", ") does not have (expected "
                "Hugging Face's names: model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ...; "
                "is config.json this model's?)");
    REMAT_CHECK(t.shape == w->second, who, ": tensor '", key, "' of '", fpath, "' has shape ", t.shape.str(),
                ", but config.json (hidden_size ", c.hidden_size, ", intermediate_size ", c.intermediate_size, ", ",
                c.num_heads, " heads, ", c.num_kv_heads, " key/value heads of ", c.head_dim, ", vocab_size ",
                c.vocab_size, ") needs ", w->second.str(), " (is config.json this model's?)");
    out.tensors.emplace(key, std::move(t));
  }
  if (!head_file.empty()) {
    const HostTensor& e = out.tensors.at("model.embed_tokens.weight");
    REMAT_CHECK(head.shape == e.shape, who, ": '", head_file, "' has lm_head.weight of shape ", head.shape.str(),
                " but model.embed_tokens.weight is ", e.shape.str(), " (config.json ties them: expected the "
                "same tensor, or no lm_head.weight)");
    const std::size_t n = static_cast<std::size_t>(e.shape.numel());
    for (std::size_t i = 0; i < n; ++i) {
      const float h = head.value(i), v = e.value(i);
      REMAT_CHECK(std::memcmp(&h, &v, 4) == 0, who, ": '", head_file, "' has lm_head.weight that differs from "
                  "model.embed_tokens.weight (element ", i, ": ", h, " vs ", v, "), but config.json sets "
                  "tie_word_embeddings (expected them equal, or tie_word_embeddings false)");
    }
    out.skipped.push_back("lm_head.weight (equal to model.embed_tokens.weight: tied)");
  }
  return out;
}

/// Copies the files' tensors into the model (read_llama checked them against the config; the
/// model's must be the same list: a model built from another config is an error).
template <class B>
void load_llama(const LlamaFiles& files, nn::Llama<B>& model) {
  const auto& named = model.named_parameters();
  REMAT_CHECK(named.size() == files.tensors.size(), "remat::io::load_llama: the model has ", named.size(),
              " parameters, the files ", files.tensors.size(), " tensors (expected a model built from the "
              "files' config: nn::Llama<B>(tape, files.config))");
  for (const auto& [name, t] : named) {
    auto it = files.tensors.find(name);
    REMAT_CHECK(it != files.tensors.end() && it->second.shape == t.shape(), "remat::io::load_llama: the model's '",
                name, "' ", t.shape().str(), " is not in the files with that shape (expected a model built from the "
                "files' config)");
    detail::copy_padded<B>(t.template mutable_data<float>(), t.numel(), it->second);
  }
}

/// Saves the model as a Hugging Face folder: dir/config.json and dir/model.safetensors, F32 or
/// (dtype bf16) BF16 rounded to nearest even from the fp32 masters; read_llama reads it back.
template <class B>
void save_llama(const std::string& dir, const nn::Llama<B>& model, DType dtype = DType::f32) {
  REMAT_CHECK(dtype == DType::f32 || dtype == DType::bf16, "remat::io::save_llama: dtype ", dtype_name(dtype),
              " for '", dir, "' (expected f32 or bf16)");
  const std::string d = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  std::vector<std::pair<std::string, HostTensor>> ts;
  for (const auto& [name, t] : model.named_parameters()) {
    HostTensor h = detail::host_prefix<B>(t.template data<float>(), t.shape());
    ts.emplace_back(name, dtype == DType::bf16 ? rounded_to_bf16(h) : std::move(h));
  }
  write_safetensors(d + "model.safetensors", ts, {{"format", "pt"}});
  const std::string json = llama_config_json(model.config);
  AtomicFile f(d + "config.json", "save_llama");
  f.write(json.data(), json.size());
  f.commit();
}

}  // namespace io
}  // namespace remat
