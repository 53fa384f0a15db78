#pragma once
// SPDX-License-Identifier: MIT
// GPT-2 weights in Hugging Face's safetensors layout: read the config from the tensor shapes,
// load into nn::GPT, save from it. Keys may carry a "transformer." prefix (GPT2LMHeadModel);
// the attention mask buffers (h.N.attn.bias, h.N.attn.masked_bias) and the tied lm_head are
// skipped. Linear weights are [in, out] (GPT-2's Conv1D), as remat stores them.

#include <cstdint>
#include <map>
#include <string>

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

/// The GPT config that fits the weights' shapes; n_head is not in the shapes (default d/64).
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
  nn::GPTConfig c;
  c.vocab_size = wte.shape[0];
  c.block_size = wpe.shape[0];
  c.n_embd = wte.shape[1];
  c.n_layer = 0;
  while (w.count("h." + std::to_string(c.n_layer) + ".ln_1.weight")) ++c.n_layer;
  c.n_head = n_head > 0 ? n_head : std::max<std::int64_t>(1, c.n_embd / 64);
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
