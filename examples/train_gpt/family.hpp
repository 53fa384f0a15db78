#pragma once
// SPDX-License-Identifier: MIT
// The model families train_gpt trains, and what the trainer needs of each (NOTE [model
// families]): GPT-2 (nn::GPT, its safetensors file) and the Llama family (nn::Llama: Llama 3,
// Qwen 2/3, SmolLM2, from a Hugging Face folder). The loop, the data, the optimizers, the
// snapshots, the data-parallel step and sampling are the same for both (trainer.hpp).

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <remat/io/file.hpp>
#include <remat/io/gpt2.hpp>
#include <remat/io/hf_config.hpp>
#include <remat/io/json.hpp>
#include <remat/io/llama.hpp>
#include <remat/nn/gpt.hpp>
#include <remat/nn/gpt_estimate.hpp>
#include <remat/nn/gpt_plan.hpp>
#include <remat/nn/llama.hpp>
#include <remat/nn/llama_plan.hpp>
#include <remat/text/tokenizer.hpp>
#include <remat/train/output.hpp>

#include "flags.hpp"

namespace train_gpt {

using namespace remat;

// NOTE [model families]: a family is a struct of types and static functions, the trainer's
// template parameter: Config and Model<B> (the library's), Weights (what --init-from read, held
// until the model exists), and the few places a family differs: its name and one-line
// description, the context its sampling may use, its evaluation loss and logits (GPT-2's
// dropout is off in them), loading and saving weights (a GPT-2 file; a Llama folder), and the
// estimator's step. The flags choose the family (family_of): --model, else the --init-from
// files' config.json (model_type llama, qwen2 or qwen3: the Llama family), else GPT-2.
struct GptFamily {
  using Config = nn::GPTConfig;
  template <class B>
  using Model = nn::GPT<B>;
  using Weights = std::map<std::string, io::HostTensor>;
  static constexpr const char* kName = "gpt";

  static std::int64_t vocab(const Config& c) { return c.vocab_size; }
  static std::int64_t layers(const Config& c) { return c.n_layer; }
  static std::int64_t context(const Config& c, int /*seq*/) { return c.block_size; }
  static std::string describe(const Config& c) {
    return detail::cat("GPT ", c.n_layer, " layers, d ", c.n_embd, ", ", c.n_head, " heads, vocab ", c.vocab_size);
  }
  template <class B>
  static Tensor<B> eval_loss(const Model<B>& m, const Tensor<B>& x, const Tensor<B>& y) {
    return m.loss(x, y, /*training=*/false);
  }
  template <class B>
  static Tensor<B> logits(const Model<B>& m, const Tensor<B>& ids) {
    return m(ids, /*training=*/false);
  }
  template <class B>
  static void load(const Weights& w, Model<B>& m, const std::string& from) {
    io::load_gpt2(w, m, from);
  }
  template <class B>
  static void save(const std::string& path, const Model<B>& m, DType dtype) {
    io::save_gpt2(path, m, dtype);
  }
  template <class Target>
  static StepEstimate estimate(const Config& c, std::int64_t batch, std::int64_t seq, const StepOptions& so) {
    return estimate_gpt_step<Target>(c, batch, seq, so);
  }
};

struct LlamaFamily {
  using Config = nn::LlamaConfig;
  template <class B>
  using Model = nn::Llama<B>;
  using Weights = io::LlamaFiles;
  static constexpr const char* kName = "llama";

  static std::int64_t vocab(const Config& c) { return c.vocab_size; }
  static std::int64_t layers(const Config& c) { return c.num_layers; }
  // Rotary embeddings have no table of positions: the files' max_position_embeddings where
  // they give one, else the training's --seq.
  static std::int64_t context(const Config& c, int seq) {
    return c.max_position_embeddings > 0 ? c.max_position_embeddings : seq;
  }
  static std::string describe(const Config& c) {
    return detail::cat(c.model_type, " ", c.num_layers, " layers, d ", c.hidden_size, ", ", c.num_heads,
                       " heads / ", c.num_kv_heads, " key/value heads of ", c.head_dim, ", ffn ",
                       c.intermediate_size, ", vocab ", c.vocab_size,
                       c.tie_word_embeddings ? ", tied head" : ", untied head");
  }
  template <class B>
  static Tensor<B> eval_loss(const Model<B>& m, const Tensor<B>& x, const Tensor<B>& y) {
    return m.loss(x, y);
  }
  template <class B>
  static Tensor<B> logits(const Model<B>& m, const Tensor<B>& ids) {
    return m(ids);
  }
  template <class B>
  static void load(const Weights& w, Model<B>& m, const std::string& /*from*/) {
    io::load_llama(w, m);
  }
  // A Hugging Face folder: `path` is made when missing (its parent must exist).
  template <class B>
  static void save(const std::string& path, const Model<B>& m, DType dtype) {
    if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST)
      throw Error(detail::cat("train_gpt: cannot make the folder '", path, "': ", std::strerror(errno)));
    io::save_llama(path, m, dtype);
  }
  template <class Target>
  static StepEstimate estimate(const Config& c, std::int64_t batch, std::int64_t seq, const StepOptions& so) {
    return nn::estimate_llama_step<Target>(c, batch, seq, so);
  }
};

// The config.json of an --init-from path: inside a folder, or beside a file ("" when none).
inline std::string config_beside(const std::string& path) {
  struct ::stat sb {};
  if (::stat(path.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode))
    return (path.back() == '/' ? path : path + "/") + "config.json";
  const std::string cfg = train::folder_of(path) + "/config.json";
  return io::is_regular_file(cfg) ? cfg : "";
}

// NOTE [model families]: "gpt" or "llama".
inline std::string family_of(const Flags& f) {
  if (!f.model.empty()) return f.model;
  if (f.init_from.empty()) return "gpt";
  const std::string cfg = config_beside(f.init_from);
  if (cfg.empty() || !io::is_regular_file(cfg)) return "gpt";
  const std::vector<char> text = io::read_file(cfg, "train_gpt: --init-from", io::kConfigJsonMaxBytes, "a config.json");
  const io::JsonDocument doc = io::parse_json_document(std::string_view(text.data(), text.size()),
                                                       io::kConfigJsonLimits, "train_gpt", "config.json", cfg);
  const auto& j = doc.dom;
  if (!j.is_object() || !j.contains("model_type") || !j.at("model_type").is_string()) return "gpt";
  const std::string type = j.at("model_type").get<std::string>();
  return type == "llama" || type == "qwen2" || type == "qwen3" ? "llama" : "gpt";
}

// The token that starts each document of the data and an empty prompt: <|endoftext|> where the
// tokenizer has one (GPT-2, SmolLM2, Qwen), else Llama 3's <|begin_of_text|>.
inline std::int32_t document_separator(const text::Tokenizer& tok, const std::string& where) {
  if (tok.eot() >= 0) return tok.eot();
  const std::vector<std::int32_t> bos = tok.encode("<|begin_of_text|>");
  REMAT_CHECK(bos.size() == 1, "train_gpt: the tokenizer in '", where, "' has no <|endoftext|> and no "
              "<|begin_of_text|> (expected one of them as a special token: it separates the documents of "
              "--data and starts an empty --prompt)");
  return bos[0];
}

}  // namespace train_gpt
