#pragma once
// SPDX-License-Identifier: MIT
// GPT-2 weights in Hugging Face's safetensors layout: read the config from the tensor shapes,
// load into nn::GPT, save from it. Keys may carry a "transformer." prefix (GPT2LMHeadModel);
// the attention mask buffers (h.N.attn.bias, h.N.attn.masked_bias) and the tied lm_head are
// skipped. Linear weights are [in, out] (GPT-2's Conv1D), as remat stores them.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "remat/io/safetensors.hpp"
#include "remat/nn/gpt.hpp"

namespace remat {
namespace io {

/// The file's tensors under remat's parameter names (prefix stripped, buffers dropped).
inline std::map<std::string, HostTensor> gpt2_tensors(SafetensorsFile f) {
  std::map<std::string, HostTensor> out;
  for (auto& [key, t] : f.tensors) {
    std::string name = key.rfind("transformer.", 0) == 0 ? key.substr(12) : key;
    const bool buffer = name.size() > 10 && (name.rfind(".attn.bias") == name.size() - 10 ||
                                              name.find(".attn.masked_bias") != std::string::npos);
    if (buffer || name == "lm_head.weight") continue;
    out.emplace(name, std::move(t));
  }
  return out;
}

/// The parameters of a GPT-2 model with config `c`, in remat's names and shapes (Linear weights
/// [in, out]); the same list nn::GPT registers.
inline std::vector<std::pair<std::string, Shape>> gpt2_shapes(const nn::GPTConfig& c) {
  const std::int64_t d = c.n_embd;
  std::vector<std::pair<std::string, Shape>> s = {{"wte.weight", Shape{c.vocab_size, d}},
                                                  {"wpe.weight", Shape{c.block_size, d}}};
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    for (const char* ln : {"ln_1.", "ln_2."}) {
      s.emplace_back(h + ln + "weight", Shape{d});
      s.emplace_back(h + ln + "bias", Shape{d});
    }
    s.emplace_back(h + "attn.c_attn.weight", Shape{d, 3 * d});
    s.emplace_back(h + "attn.c_attn.bias", Shape{3 * d});
    s.emplace_back(h + "attn.c_proj.weight", Shape{d, d});
    s.emplace_back(h + "attn.c_proj.bias", Shape{d});
    s.emplace_back(h + "mlp.c_fc.weight", Shape{d, 4 * d});
    s.emplace_back(h + "mlp.c_fc.bias", Shape{4 * d});
    s.emplace_back(h + "mlp.c_proj.weight", Shape{4 * d, d});
    s.emplace_back(h + "mlp.c_proj.bias", Shape{d});
  }
  s.emplace_back("ln_f.weight", Shape{d});
  s.emplace_back("ln_f.bias", Shape{d});
  return s;
}

/// The GPT config that fits the weights' shapes; n_head is not in the shapes (default d/64).
/// Every parameter of that config is checked present with its shape here, before a model is
/// built: the model then holds no more than the file did (a small file cannot ask for gigabytes
/// through a large d or many layers whose tensors it lacks).
inline nn::GPTConfig gpt2_config(const std::map<std::string, HostTensor>& w, const std::string& path,
                                 std::int64_t n_head = 0) {
  auto need = [&](const std::string& k) -> const HostTensor& {
    auto it = w.find(k);
    REMAT_CHECK(it != w.end(), "remat::io::gpt2_config: '", path, "' has no tensor '", k,
                "' (expected Hugging Face GPT-2 names: wte.weight, wpe.weight, h.0.ln_1.weight, ...)");
    return it->second;
  };
  const HostTensor& wte = need("wte.weight");
  const HostTensor& wpe = need("wpe.weight");
  REMAT_CHECK(wte.shape.rank() == 2 && wpe.shape.rank() == 2 && wte.shape[1] == wpe.shape[1],
              "remat::io::gpt2_config: wte is ", wte.shape.str(), " and wpe is ", wpe.shape.str(),
              " in '", path, "' (expected [vocab, d] and [block_size, d])");
  REMAT_CHECK(wte.shape[0] > 0 && wpe.shape[0] > 0 && wte.shape[1] > 0,
              "remat::io::gpt2_config: wte is ", wte.shape.str(), " and wpe is ", wpe.shape.str(),
              " in '", path, "' (expected vocab, block_size and d all > 0)");
  nn::GPTConfig c;
  c.vocab_size = wte.shape[0];
  c.block_size = wpe.shape[0];
  c.n_embd = wte.shape[1];
  c.n_layer = 0;
  while (w.count("h." + std::to_string(c.n_layer) + ".ln_1.weight")) ++c.n_layer;
  c.n_head = n_head > 0 ? n_head : std::max<std::int64_t>(1, c.n_embd / 64);
  REMAT_CHECK(c.n_embd % c.n_head == 0, "remat::io::gpt2_config: the weights of '", path,
              "' have d ", c.n_embd, ", which ", c.n_head, " heads do not divide (expected --heads "
              "to divide d)");
  for (const auto& [name, shape] : gpt2_shapes(c)) {
    const HostTensor& t = need(name);
    REMAT_CHECK(t.shape == shape, "remat::io::gpt2_config: tensor '", name, "' of '", path,
                "' has shape ", t.shape.str(), ", but a GPT-2 with vocab ", c.vocab_size, ", ",
                c.block_size, " positions and d ", c.n_embd, " (from wte and wpe) needs ",
                shape.str(), " (corrupt or not a GPT-2 file)");
  }
  return c;
}

/// Copies the weights into the model; every parameter must be present with its shape.
template <class B>
void load_gpt2(const std::map<std::string, HostTensor>& w, nn::GPT<B>& model, const std::string& path) {
  for (const auto& [name, t] : model.named_parameters()) {
    auto it = w.find(name);
    REMAT_CHECK(it != w.end(), "remat::io::load_gpt2: '", path, "' has no tensor '", name, "'");
    REMAT_CHECK(it->second.shape == t.shape(), "remat::io::load_gpt2: '", name, "' in '", path,
                "' has shape ", it->second.shape.str(), " but the model (from the flags) needs ",
                t.shape().str(), " (do --layers/--d/--heads/--seq/--vocab fit the file?)");
    if (t.numel()) B::copy_from_host(t.template data<float>(), it->second.data.data(), t.bytes());
  }
}

/// Saves the model's weights under the Hugging Face GPT-2 names (F32).
template <class B>
void save_gpt2(const std::string& path, const nn::GPT<B>& model) {
  std::vector<std::pair<std::string, HostTensor>> ts;
  for (const auto& [name, t] : model.named_parameters())
    ts.emplace_back(name, HostTensor{t.shape(), t.template to_vector<float>()});
  write_safetensors(path, ts, {{"format", "pt"}});
}

}  // namespace io
}  // namespace remat
