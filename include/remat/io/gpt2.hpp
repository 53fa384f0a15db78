#pragma once
// SPDX-License-Identifier: MIT
// GPT-2 weights in Hugging Face's safetensors layout: read the config from the tensor shapes,
// load into nn::GPT, save from it. Keys may carry a "transformer." prefix (GPT2LMHeadModel);
// the attention mask buffers (h.N.attn.bias, h.N.attn.masked_bias) and the tied lm_head are
// skipped. Linear weights are [in, out] (GPT-2's Conv1D), as remat stores them. The head count
// is not in the shapes: save_gpt2 stores it in the metadata ("n_head"), and read_gpt2 takes it
// from there or from a Hugging Face config.json beside the weights (NOTE [GPT-2 head count]).

#include <cctype>
#include <charconv>
#include <cstdint>
#include <map>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <sys/stat.h>

#include "remat/io/safetensors.hpp"
#include "remat/nn/gpt.hpp"

namespace remat {
namespace io {

namespace detail {
inline std::string gpt2_name(const std::string& key) {
  return key.rfind("transformer.", 0) == 0 ? key.substr(12) : key;
}
}  // namespace detail

/// Whether `name` (prefix stripped) is a parameter of some GPT-2: wte, wpe, ln_f, and
/// h.N.{ln_1, ln_2, attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj}.{weight, bias}.
inline bool gpt2_parameter_name(const std::string& name) {
  if (name == "wte.weight" || name == "wpe.weight" || name == "ln_f.weight" || name == "ln_f.bias")
    return true;
  if (name.rfind("h.", 0) != 0) return false;
  std::size_t i = 2;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == 2 || i >= name.size() || name[i] != '.') return false;
  const std::string rest = name.substr(i + 1);
  for (const char* m : {"ln_1.", "ln_2.", "attn.c_attn.", "attn.c_proj.", "mlp.c_fc.", "mlp.c_proj."})
    for (const char* p : {"weight", "bias"})
      if (rest == std::string(m) + p) return true;
  return false;
}

/// The file's tensors under remat's parameter names (prefix stripped, buffers dropped).
inline std::map<std::string, HostTensor> gpt2_tensors(SafetensorsFile f) {
  std::map<std::string, HostTensor> out;
  for (auto& [key, t] : f.tensors) {
    std::string name = detail::gpt2_name(key);
    const bool buffer = name.size() > 10 && (name.rfind(".attn.bias") == name.size() - 10 ||
                                              name.find(".attn.masked_bias") != std::string::npos);
    if (buffer || name == "lm_head.weight") continue;
    out.emplace(name, std::move(t));
  }
  return out;
}

/// GPT-2 weights as read_gpt2 finds them: the tensors (as gpt2_tensors gives them), the head
/// count when the file or its folder records it, and the tensors skipped for their dtype.
struct Gpt2Weights {
  std::map<std::string, HostTensor> tensors;
  std::int64_t n_head = 0;     // 0: recorded nowhere
  std::string n_head_source;   // where n_head was read, for messages
  std::vector<std::string> skipped;  // "name (DTYPE)": tensors of other dtypes the model does not use
};

namespace detail {
/// A head count as a positive decimal integer and nothing else (at most 2^31 - 1).
inline std::int64_t parse_heads(const std::string& s, const std::string& where) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  REMAT_CHECK(ec == std::errc() && end == s.data() + s.size() && v >= 1 && v <= 2147483647,
              "remat::io::read_gpt2: ", where, " is '", s, "' (expected a head count, an integer "
              ">= 1 with nothing around it)");
  return v;
}
}  // namespace detail

/// Reads GPT-2 weights (read_safetensors, then gpt2_tensors) and what they say about the model.
/// NOTE [GPT-2 head count]: the head count changes no tensor shape, so the shapes cannot give
/// it. It is taken from the metadata "n_head" (save_gpt2 writes it), else from "n_head" of a
/// config.json in the same folder (as Hugging Face ships a model); else n_head is 0 and the
/// caller must choose (and say so). A config.json whose "n_embd" is not the weights' width
/// belongs to another model: an error rather than a wrong head count.
/// Tensors of dtypes remat does not convert (a BOOL attention mask "h.N.attn.bias") are
/// skipped and listed when the model does not use them; a parameter in such a dtype is an error.
inline Gpt2Weights read_gpt2(const std::string& path) {
  SafetensorsFile f = read_safetensors(path, OtherDtypes::list);
  Gpt2Weights out;
  for (const auto& [key, dt] : f.other_dtypes) {
    REMAT_CHECK(!gpt2_parameter_name(detail::gpt2_name(key)), "remat::io::read_gpt2: tensor '",
                key, "' of '", path, "' has dtype ", dt, " (expected F32, F16 or BF16: the model "
                "uses this tensor)");
    out.skipped.push_back(key + " (" + dt + ")");
  }
  auto md = f.metadata.find("n_head");
  if (md != f.metadata.end()) {
    out.n_head_source = "the metadata 'n_head' of '" + path + "'";
    out.n_head = detail::parse_heads(md->second, out.n_head_source);
  }
  out.tensors = gpt2_tensors(std::move(f));
  if (out.n_head > 0) return out;
  const std::size_t slash = path.rfind('/');
  const std::string cfg = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "config.json";
  struct ::stat sb {};
  if (::stat(cfg.c_str(), &sb) != 0 || !S_ISREG(sb.st_mode)) return out;  // none beside: not recorded
  const std::vector<char> text = detail::read_file(cfg, "read_gpt2");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const std::exception& e) {
    throw Error(::remat::detail::cat("remat::io::read_gpt2: '", cfg, "' (beside '", path,
                                     "') is not valid JSON: ", e.what(),
                                     " (expected a Hugging Face config.json)"));
  }
  if (!j.is_object() || !j.contains("n_head")) return out;  // not a GPT-2 config: nothing to take
  REMAT_CHECK(j["n_head"].is_number_unsigned() && j["n_head"].get<std::uint64_t>() >= 1 &&
                  j["n_head"].get<std::uint64_t>() <= 2147483647,
              "remat::io::read_gpt2: 'n_head' of '", cfg, "' is ", j["n_head"].dump(),
              " (expected a head count, an integer >= 1)");
  auto wte = out.tensors.find("wte.weight");
  if (j.contains("n_embd") && wte != out.tensors.end() && wte->second.shape.rank() == 2)
    REMAT_CHECK(j["n_embd"].is_number_unsigned() &&
                    j["n_embd"].get<std::uint64_t>() == static_cast<std::uint64_t>(wte->second.shape[1]),
                "remat::io::read_gpt2: '", cfg, "' has n_embd ", j["n_embd"].dump(), ", but the "
                "weights of '", path, "' have d ", wte->second.shape[1], " (expected the config "
                "of these weights; move it away or pass --heads)");
  out.n_head = static_cast<std::int64_t>(j["n_head"].get<std::uint64_t>());
  out.n_head_source = "'n_head' of '" + cfg + "'";
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

/// Saves the model's weights under the Hugging Face GPT-2 names (F32), with the head count in
/// the metadata ("n_head"), which read_gpt2 reads back (NOTE [GPT-2 head count]).
template <class B>
void save_gpt2(const std::string& path, const nn::GPT<B>& model) {
  std::vector<std::pair<std::string, HostTensor>> ts;
  for (const auto& [name, t] : model.named_parameters())
    ts.emplace_back(name, HostTensor{t.shape(), t.template to_vector<float>()});
  write_safetensors(path, ts, {{"format", "pt"}, {"n_head", std::to_string(model.config.n_head)}});
}

}  // namespace io
}  // namespace remat
