#pragma once
// SPDX-License-Identifier: MIT
// GPT-2 weights in Hugging Face's safetensors layout: read the config from the tensor shapes,
// load into nn::GPT, save from it. Keys may carry a "transformer." prefix (GPT2LMHeadModel);
// the attention mask buffers (h.N.attn.bias, h.N.attn.masked_bias) and an lm_head equal to wte
// (tied) are skipped; every other tensor is required, none may be missing or unknown (NOTE
// [GPT-2 tensors required]). Linear weights are [in, out] (GPT-2's Conv1D), as remat stores
// them. The head count is not in the shapes: save_gpt2 stores it in the metadata ("n_head"),
// and read_gpt2 takes it from there or from a Hugging Face config.json beside the weights
// (NOTE [GPT-2 head count]).

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "remat/io/json.hpp"
#include "remat/io/safetensors.hpp"
#include "remat/nn/gpt.hpp"

namespace remat {
namespace io {

/// The longest config.json read_gpt2 reads beside the weights: real ones are 1-5 KB (GPT-2's
/// is 0.7 KB; a classifier's label names can take a few hundred KB), so 1 MiB is ample and
/// keeps a hostile one from costing more than a few MB.
inline constexpr std::uint64_t kConfigJsonMaxBytes = 1 << 20;
/// What that config.json may hold (NOTE [hostile JSON] in io/json.hpp): real ones nest 2-4
/// levels and hold 30-300 values (tens of thousands with a label map): 200,000 values bound its
/// DOM to ~20 MB.
inline constexpr JsonLimits kConfigJsonLimits{kConfigJsonMaxBytes, 64, 200'000};

namespace detail {
inline std::string gpt2_name(const std::string& key) {
  return key.rfind("transformer.", 0) == 0 ? key.substr(12) : key;
}

/// For "h.N.rest": N (a layer index: decimal digits, no leading zero, below 10^9) and `rest`;
/// -1 for any other name.
inline std::int64_t gpt2_layer(const std::string& name, std::string* rest = nullptr) {
  if (name.rfind("h.", 0) != 0) return -1;
  std::size_t i = 2;
  std::int64_t n = 0;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && i < 11)
    n = 10 * n + (name[i++] - '0');
  if (i == 2 || i >= name.size() || name[i] != '.' || (name[2] == '0' && i > 3)) return -1;
  if (rest) *rest = name.substr(i + 1);
  return n;
}

/// The tensors of one layer, after "h.N.".
inline constexpr const char* kGpt2LayerTensors[] = {
    "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
    "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

/// Whether `name` (prefix stripped) is a buffer GPT-2 files carry that remat does not use: the
/// attention masks h.N.attn.bias and h.N.attn.masked_bias (any dtype).
inline bool gpt2_buffer_name(const std::string& name) {
  std::string rest;
  return gpt2_layer(name, &rest) >= 0 && (rest == "attn.bias" || rest == "attn.masked_bias");
}

/// 1 + the largest layer index among the names ("h.N."), or 0.
template <class Names>
std::int64_t gpt2_layer_count(const Names& names) {
  std::int64_t layers = 0;
  for (const auto& kv : names) layers = std::max(layers, gpt2_layer(gpt2_name(kv.first)) + 1);
  return layers;
}

/// NOTE [GPT-2 tensors required]: a GPT-2 with L layers has wte, wpe, ln_f.{weight, bias} and
/// the 12 tensors of kGpt2LayerTensors for every layer 0..L-1, and L is 1 + the largest layer
/// index of any "h.N." name in the file. Counting layers while h.N.ln_1.weight exists (as
/// before) loaded a 3-layer file missing h.1.ln_1.weight as a 1-layer model, silently. So a
/// missing tensor, a gap between layers, a tensor under two names (with and without
/// "transformer.") and a tensor that is no GPT-2 tensor are errors naming it; only the known
/// buffers are skipped, and lm_head.weight only when it equals wte.weight (remat ties them).
/// Throws, naming the first tensor of wte, wpe, ln_f and layers 0..layers-1 that `has` lacks.
/// Stops at the first missing one, so a huge layer index costs no time.
template <class Has>
void gpt2_require_all(Has&& has, std::int64_t layers, const std::string& path, const char* who) {
  for (const char* k : {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"})
    REMAT_CHECK(has(std::string(k)), who, ": '", path, "' has no tensor '", k, "' (expected every "
                "tensor of a GPT-2 under Hugging Face's names: wte.weight, wpe.weight, ln_f.weight, "
                "ln_f.bias, h.N.ln_1.weight, ...)");
  for (std::int64_t l = 0; l < layers; ++l)
    for (const char* t : kGpt2LayerTensors) {
      const std::string k = "h." + std::to_string(l) + "." + t;
      REMAT_CHECK(has(k), who, ": '", path, "' has no tensor '", k, "', but it has tensors of ",
                  layers, layers == 1 ? " layer (h.0)" : " layers (up to h." + std::to_string(layers - 1) + ")",
                  ", so every tensor of layers 0 to ", layers - 1, " must be there (NOTE [GPT-2 "
                  "tensors required]: is the file incomplete, or saved by a tool that drops tensors?)");
    }
}
}  // namespace detail

/// Whether `name` (prefix stripped) is a parameter of some GPT-2: wte, wpe, ln_f, and
/// h.N.{ln_1, ln_2, attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj}.{weight, bias}.
inline bool gpt2_parameter_name(const std::string& name) {
  if (name == "wte.weight" || name == "wpe.weight" || name == "ln_f.weight" || name == "ln_f.bias")
    return true;
  std::string rest;
  if (detail::gpt2_layer(name, &rest) < 0) return false;
  for (const char* t : detail::kGpt2LayerTensors)
    if (rest == t) return true;
  return false;
}

/// The file's tensors under remat's parameter names (prefix stripped, buffers dropped), all of
/// them (NOTE [GPT-2 tensors required]): an unknown tensor, a tensor under two names, a missing
/// one or an lm_head.weight that differs from wte.weight is an error naming it and `path`.
/// Tensors of other dtypes (SafetensorsFile::other_dtypes) count for names and layers.
inline std::map<std::string, HostTensor> gpt2_tensors(SafetensorsFile f, const std::string& path = "the file") {
  const char* who = "remat::io::gpt2_tensors";
  std::map<std::string, std::string> key_of;  // remat's name -> the name in the file
  const auto classify = [&](const std::string& key) {
    const std::string name = detail::gpt2_name(key);
    REMAT_CHECK(gpt2_parameter_name(name) || detail::gpt2_buffer_name(name) || name == "lm_head.weight",
                who, ": '", path, "' has tensor '", detail::shown(key), "', which is not a GPT-2 "
                "tensor (expected wte.weight, wpe.weight, ln_f.{weight, bias} and h.N.{ln_1, ln_2, "
                "attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj}.{weight, bias}, with or without "
                "'transformer.', the buffers h.N.attn.bias and h.N.attn.masked_bias, and lm_head.weight; "
                "is it another model's file?)");
    const auto [it, fresh] = key_of.emplace(name, key);
    REMAT_CHECK(fresh, who, ": '", path, "' has tensor '", name, "' twice, as '", it->second,
                "' and as '", key, "' (expected one of them: which one is meant?)");
  };
  for (const auto& kv : f.tensors) classify(kv.first);
  for (const auto& kv : f.other_dtypes) classify(kv.first);
  std::map<std::string, HostTensor> out;
  HostTensor head;
  bool has_head = false;
  for (auto& [key, t] : f.tensors) {
    std::string name = detail::gpt2_name(key);
    if (detail::gpt2_buffer_name(name)) continue;
    if (name == "lm_head.weight") {
      head = std::move(t);
      has_head = true;
      continue;
    }
    out.emplace(std::move(name), std::move(t));
  }
  detail::gpt2_require_all([&](const std::string& k) { return out.count(k) > 0; },
                           detail::gpt2_layer_count(key_of), path, who);
  if (has_head) {
    const HostTensor& wte = out.at("wte.weight");
    REMAT_CHECK(head.shape == wte.shape, who, ": '", path, "' has lm_head.weight of shape ",
                head.shape.str(), " but wte.weight is ", wte.shape.str(), " (remat's GPT ties the "
                "output head to the token embedding: expected lm_head.weight equal to wte.weight, "
                "or absent)");
    const std::size_t n = static_cast<std::size_t>(wte.shape.numel());
    for (std::size_t i = 0; i < n; ++i) {  // bits of the values (F32, F16 and BF16 alike)
      const float h = head.value(i), e = wte.value(i);
      REMAT_CHECK(std::memcmp(&h, &e, 4) == 0, who, ": '", path,
                  "' has lm_head.weight that differs from wte.weight (element ", i, ": ", h,
                  " vs ", e, "); remat's GPT ties the output head to the token embedding, "
                  "so this model cannot be loaded as it is (expected lm_head.weight equal to "
                  "wte.weight, or absent)");
    }
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
/// BF16 tensors stay as stored (two bytes a value; F16 ones are widened): load_gpt2 widens them
/// straight into the parameters, so a BF16 file is never held as a whole fp32 copy on the host.
/// NOTE [GPT-2 head count]: the head count changes no tensor shape, so the shapes cannot give
/// it. It is taken from the metadata "n_head" (save_gpt2 writes it), else from "n_head" of a
/// config.json in the same folder (as Hugging Face ships a model); else n_head is 0 and the
/// caller must choose (and say so). A config.json whose "n_embd" is not the weights' width
/// belongs to another model: an error rather than a wrong head count.
/// Tensors of dtypes remat does not convert (a BOOL attention mask "h.N.attn.bias") are
/// skipped and listed when the model does not use them; a parameter in such a dtype is an error.
inline Gpt2Weights read_gpt2(const std::string& path) {
  SafetensorsFile f = read_safetensors(path, OtherDtypes::list, Bf16::keep);
  Gpt2Weights out;
  for (const auto& [key, dt] : f.other_dtypes) {
    const std::string name = detail::gpt2_name(key);
    REMAT_CHECK(!gpt2_parameter_name(name) && name != "lm_head.weight", "remat::io::read_gpt2: tensor '",
                key, "' of '", path, "' has dtype ", dt, " (expected F32, F16 or BF16: the model "
                "uses this tensor)");
    out.skipped.push_back(detail::shown(key) + " (" + dt + ")");
  }
  auto md = f.metadata.find("n_head");
  if (md != f.metadata.end()) {
    out.n_head_source = "the metadata 'n_head' of '" + path + "'";
    out.n_head = detail::parse_heads(md->second, out.n_head_source);
  }
  out.tensors = gpt2_tensors(std::move(f), path);
  if (out.n_head > 0) return out;
  const std::size_t slash = path.rfind('/');
  const std::string cfg = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "config.json";
  if (!is_regular_file(cfg)) return out;  // none beside: not recorded
  const std::vector<char> text = read_file(cfg, "read_gpt2", kConfigJsonMaxBytes, "a config.json");
  const JsonDocument doc = parse_json_document(std::string_view(text.data(), text.size()), kConfigJsonLimits,
                                               "remat::io::read_gpt2", "config.json beside the weights", cfg);
  const nlohmann::json& j = doc.dom;
  if (!j.is_object() || !j.contains("n_head")) return out;  // not a GPT-2 config: nothing to take
  // json_brief, never dump(): the values are the file's (NOTE [hostile JSON] in io/json.hpp)
  const nlohmann::json& heads = j.at("n_head");
  REMAT_CHECK(heads.is_number_unsigned() && heads.get<std::uint64_t>() >= 1 &&
                  heads.get<std::uint64_t>() <= 2147483647,
              "remat::io::read_gpt2: 'n_head' of '", cfg, "' is ", json_brief(heads),
              " (expected a head count, an integer >= 1)");
  auto wte = out.tensors.find("wte.weight");
  if (j.contains("n_embd") && wte != out.tensors.end() && wte->second.shape.rank() == 2) {
    const nlohmann::json& d = j.at("n_embd");
    REMAT_CHECK(d.is_number_unsigned() && d.get<std::uint64_t>() == static_cast<std::uint64_t>(wte->second.shape[1]),
                "remat::io::read_gpt2: '", cfg, "' has n_embd ", json_brief(d), ", but the "
                "weights of '", path, "' have d ", wte->second.shape[1], " (expected the config "
                "of these weights; move it away or give the head count)");
  }
  out.n_head = static_cast<std::int64_t>(heads.get<std::uint64_t>());
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
  const char* who = "remat::io::gpt2_config";
  for (const auto& kv : w)
    REMAT_CHECK(gpt2_parameter_name(kv.first), who, ": '", path, "' has tensor '", detail::shown(kv.first),
                "', which is not a GPT-2 parameter (expected the names gpt2_tensors gives: wte.weight, "
                "wpe.weight, ln_f.{weight, bias}, h.N.ln_1.weight, ...)");
  // NOTE [GPT-2 tensors required]: the layers are 0 to the largest index, every tensor present.
  const std::int64_t layers = detail::gpt2_layer_count(w);
  detail::gpt2_require_all([&](const std::string& k) { return w.count(k) > 0; }, layers, path, who);
  const HostTensor& wte = w.at("wte.weight");
  const HostTensor& wpe = w.at("wpe.weight");
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
  c.n_layer = layers;
  c.n_head = n_head > 0 ? n_head : std::max<std::int64_t>(1, c.n_embd / 64);
  REMAT_CHECK(c.n_embd % c.n_head == 0, "remat::io::gpt2_config: the weights of '", path,
              "' have d ", c.n_embd, ", which ", c.n_head, " heads do not divide (expected a head "
              "count that divides d)");
  const auto shapes = gpt2_shapes(c);  // every one present (above): as many as the file has
  for (const auto& [name, shape] : shapes) {
    const HostTensor& t = w.at(name);
    REMAT_CHECK(t.shape == shape, "remat::io::gpt2_config: tensor '", name, "' of '", path,
                "' has shape ", t.shape.str(), ", but a GPT-2 with vocab ", c.vocab_size, ", ",
                c.block_size, " positions and d ", c.n_embd, " (from wte and wpe) needs ",
                shape.str(), " (corrupt or not a GPT-2 file)");
  }
  REMAT_ASSERT(shapes.size() == w.size());  // every name is a parameter of layers 0..L-1
  return c;
}

/// Copies the weights into the model; every parameter must be present with its shape, and
/// every tensor must be one of the model's (a file with more layers than the model is an error,
/// not a model that silently drops them).
/// A padded parameter (NOTE [padded parameters]) takes the file's rows and zero padding.
template <class B>
void load_gpt2(const std::map<std::string, HostTensor>& w, nn::GPT<B>& model, const std::string& path) {
  const auto& named = model.named_parameters();
  std::size_t used = 0;
  for (std::size_t i = 0; i < named.size(); ++i) {
    const std::string& name = named[i].first;
    const Shape want = model.saved_shape(i);
    auto it = w.find(name);
    REMAT_CHECK(it != w.end(), "remat::io::load_gpt2: '", path, "' has no tensor '", name, "'");
    REMAT_CHECK(it->second.shape == want, "remat::io::load_gpt2: '", name, "' in '", path,
                "' has shape ", it->second.shape.str(), " but the model needs ", want.str(),
                " (do the model's layers, d, positions and vocabulary fit the file?)");
    ++used;
  }
  if (used != w.size()) {
    std::set<std::string> names;
    for (const auto& [name, t] : model.named_parameters()) names.insert(name);
    for (const auto& kv : w)
      REMAT_CHECK(names.count(kv.first), "remat::io::load_gpt2: '", path, "' has tensor '",
                  detail::shown(kv.first), "', which the model (", model.config.n_layer, " layers, "
                  "a GPT-2) does not have (do the model's layers, d, positions and vocabulary fit the file?)");
  }
  for (const auto& [name, t] : named)  // the file's rows, then zero padding
    detail::copy_padded<B>(t.template mutable_data<float>(), t.numel(), w.at(name));
}

/// Saves the model's weights under the Hugging Face GPT-2 names, F32 or (dtype bf16) BF16
/// rounded to nearest even from the fp32 masters, with the head count in the metadata
/// ("n_head"), which read_gpt2 reads back (NOTE [GPT-2 head count]); a padded vocabulary's rows
/// are left out (NOTE [padded parameters]). The tensors are converted one at a time.
template <class B>
void save_gpt2(const std::string& path, const nn::GPT<B>& model, DType dtype = DType::f32) {
  REMAT_CHECK(dtype == DType::f32 || dtype == DType::bf16, "remat::io::save_gpt2: dtype ",
              dtype_name(dtype), " for '", path, "' (expected f32 or bf16)");
  std::vector<std::pair<std::string, HostTensor>> ts;
  const auto& named = model.named_parameters();
  for (std::size_t i = 0; i < named.size(); ++i) {
    HostTensor t = detail::host_prefix<B>(named[i].second.template data<float>(), model.saved_shape(i));
    ts.emplace_back(named[i].first, dtype == DType::bf16 ? rounded_to_bf16(t) : std::move(t));
  }
  write_safetensors(path, ts, {{"format", "pt"}, {"n_head", std::to_string(model.config.n_head)}});
}

}  // namespace io
}  // namespace remat
