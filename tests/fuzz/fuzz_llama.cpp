// SPDX-License-Identifier: MIT
// Fuzz target: a Llama-family model folder as io::read_llama takes it (config.json, then
// model.safetensors or the shards model.safetensors.index.json lists), a model built from the
// config, load_llama, and one training step's forward and backward on a few tokens.
// A plain input's first byte picks the file its other bytes become, beside valid others: 0
// config.json, 1 model.safetensors, 2 model.safetensors.index.json (over a valid shard).
// A recipe input ("RCP\0", recipe.hpp) writes a valid tiny model (llama, qwen2 or qwen3; 1-2
// layers; grouped-query or not; tied or not; one file or two shards), then makes one thing
// hostile: a tensor missing, misshapen, unknown or in two shards; a tied lm_head unlike the
// embedding; a config.json size hostile (nested, huge, negative, not a number), a field it
// does not know, a key twice, or over 1 MiB; the index naming a shard outside the folder,
// listing a tensor a shard lacks, or omitting one it holds; or any hostile_st_change to a
// shard. Properties: every answer but a remat::Error is a finding; a change that must be
// refused is never accepted; an unchanged folder loads with exactly its values.

#include <remat/io/llama.hpp>
#include <remat/remat.hpp>

#include "fuzz_common.hpp"
#include "recipe.hpp"

namespace {

using namespace remat;

// The steps of a fine-tune's start, with the checks every input must pass. Returns the model's
// parameters (name -> values) when the folder loads.
std::map<std::string, std::vector<float>> load_and_step(const std::string& dir) {
  const io::LlamaFiles files = io::read_llama(dir);
  // read_llama promises every tensor of the config is in the files: the model is no larger
  std::uint64_t in_files = 0, needed = 0;
  for (const auto& [name, t] : files.tensors) in_files += static_cast<std::uint64_t>(t.shape.numel());
  for (const auto& [name, shape] : io::llama_shapes(files.config)) needed += static_cast<std::uint64_t>(shape.numel());
  if (needed > in_files) throw std::logic_error("read_llama: the model needs more values than the files hold");
  Tape<Cpu> tape(7);
  nn::Llama<Cpu> model(tape, files.config);
  io::load_llama(files, model);
  std::map<std::string, std::vector<float>> loaded;
  for (const auto& [name, t] : model.named_parameters()) loaded[name] = t.to_vector();
  const std::int64_t T = 3, V = files.config.vocab_size;
  std::vector<std::int32_t> x(static_cast<std::size_t>(T)), y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<std::int32_t>(static_cast<std::int64_t>(i) % V);
    y[i] = static_cast<std::int32_t>(static_cast<std::int64_t>(i + 1) % V);
  }
  const auto loss = model.loss(tape.tokens({1, T}, x), tape.tokens({1, T}, y));
  tape.backward(loss);
  (void)loss.item();  // may be NaN or inf: the weights are the files'
  return loaded;
}

// A tiny valid model: config.json's text, its tensors (in order) and their values.
struct Folder {
  nn::LlamaConfig c;
  std::map<std::string, std::string> config;  // field -> JSON text, written in this order
  std::vector<std::string> order;
  std::string config_text() const {
    std::string s = "{";
    for (const std::string& k : order) s += (s.size() > 1 ? "," : "") + remat_fuzz::json_string(k) + ":" + config.at(k);
    return s + "}";
  }
  void set(const std::string& k, const std::string& v) {
    if (!config.count(k)) order.push_back(k);
    config[k] = v;
  }
};

Folder tiny_folder(remat_fuzz::Recipe& r) {
  static const char* const types[] = {"llama", "qwen2", "qwen3"};
  Folder f;
  nn::LlamaConfig& c = f.c;
  c.model_type = r.pick(types);
  c.num_layers = 1 + static_cast<std::int64_t>(r.below(2));
  c.num_kv_heads = 1 + static_cast<std::int64_t>(r.below(2));
  c.num_heads = c.num_kv_heads * (1 + static_cast<std::int64_t>(r.below(2)));
  c.head_dim = 2 * (1 + static_cast<std::int64_t>(r.below(2)));
  c.hidden_size = 1 + static_cast<std::int64_t>(r.below(4));
  c.intermediate_size = 1 + static_cast<std::int64_t>(r.below(3));
  c.vocab_size = 1 + static_cast<std::int64_t>(r.below(5));
  c.tie_word_embeddings = r.coin();
  c.qkv_bias = c.model_type == "qwen2";
  c.qk_norm = c.model_type == "qwen3";
  f.set("model_type", remat_fuzz::json_string(c.model_type));
  f.set("vocab_size", std::to_string(c.vocab_size));
  f.set("hidden_size", std::to_string(c.hidden_size));
  f.set("intermediate_size", std::to_string(c.intermediate_size));
  f.set("num_hidden_layers", std::to_string(c.num_layers));
  f.set("num_attention_heads", std::to_string(c.num_heads));
  f.set("num_key_value_heads", std::to_string(c.num_kv_heads));
  f.set("head_dim", std::to_string(c.head_dim));
  f.set("rms_norm_eps", "1e-05");
  f.set("rope_theta", "10000.0");
  f.set("tie_word_embeddings", c.tie_word_embeddings ? "true" : "false");
  f.set("hidden_act", "\"silu\"");
  return f;
}

// The fields whose values size the model (a hostile one is refused unless it is the same number).
constexpr const char* kSizeFields[] = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                       "num_attention_heads", "num_key_value_heads", "head_dim"};

void run_recipe(const std::uint8_t* data, std::size_t size) {
  remat_fuzz::Recipe r(data + 4, size - 4);
  const std::uint64_t op = r.below(12);
  Folder folder = tiny_folder(r);
  const nn::LlamaConfig& c = folder.c;
  bool sharded = r.coin();
  remat_fuzz::StFile shard[2];
  std::map<std::string, std::vector<float>> expected;
  std::map<std::string, int> where;  // tensor -> shard
  float next = 0.0f;
  for (const auto& [name, shape] : io::llama_shapes(c)) {
    std::vector<float> v(static_cast<std::size_t>(shape.numel()));
    for (float& x : v) x = (next += 0.125f);
    const int s = sharded && name.find("model.layers.0.") == std::string::npos ? 1 : 0;
    remat_fuzz::add_f32(shard[s], name, shape.vec(), v);
    expected[name] = std::move(v);
    where[name] = s;
  }
  const char* const shard_names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  // the index's entries, as JSON texts: name -> file
  std::vector<std::pair<std::string, std::string>> index;
  for (const auto& [name, s] : where) index.emplace_back(remat_fuzz::json_string(name), remat_fuzz::json_string(shard_names[s]));

  remat_fuzz::Change change;
  change.must_refuse = true;
  std::string config = folder.config_text(), index_whole;
  const std::vector<std::pair<std::string, Shape>> shapes = io::llama_shapes(c);
  switch (op) {
    case 0:
      change = remat_fuzz::Change{};
      break;
    case 1: {  // a tensor missing
      const auto& name = shapes[r.below(shapes.size())].first;
      auto& es = shard[where.at(name)].entries;
      for (std::size_t i = 0; i < es.size(); ++i)
        if (es[i].name == remat_fuzz::json_string(name)) es.erase(es.begin() + static_cast<std::ptrdiff_t>(i));
      change.what = "no tensor " + name;
      if (sharded) {  // and not in the index either: the files lack it
        for (std::size_t i = 0; i < index.size(); ++i)
          if (index[i].first == remat_fuzz::json_string(name)) index.erase(index.begin() + static_cast<std::ptrdiff_t>(i));
      }
      break;
    }
    case 2: {  // a shape with the right number of values but the wrong dims
      const auto& name = shapes[r.below(shapes.size())].first;
      for (auto& e : shard[where.at(name)].entries)
        if (e.name == remat_fuzz::json_string(name)) {
          if (e.dims.size() == 2 && e.dims[0] != e.dims[1]) std::swap(e.dims[0], e.dims[1]);
          else e.dims.insert(e.dims.begin(), "1");
        }
      change.what = "tensor " + name + " reshaped";
      break;
    }
    case 3: {  // an unknown tensor
      static const char* const names[] = {"model.layers.2.input_layernorm.weight", "model.layers.0.mlp.gate_proj.bias",
                                          "lm_head.bias", "model.embed_tokens.weights", "h.0.ln_1.weight",
                                          "model.layers.00.input_layernorm.weight", "model.layers.-1.mlp.up_proj.weight",
                                          "", "model.layers.0.self_attn.q_norm.weight"};
      std::string name = r.pick(names);
      if (c.qk_norm && name == "model.layers.0.self_attn.q_norm.weight") name += "x";
      remat_fuzz::add_f32(shard[0], name, {1}, {1.0f});
      index.emplace_back(remat_fuzz::json_string(name), remat_fuzz::json_string(shard_names[0]));
      change.what = "an unknown tensor '" + name + "'";
      break;
    }
    case 4: {  // a tensor in both shards (or twice in one file)
      const auto& [name, shape] = shapes[r.below(shapes.size())];
      const int other = sharded ? 1 - where.at(name) : 0;
      remat_fuzz::add_f32(shard[other], name, shape.vec(), expected.at(name));
      change.what = "tensor " + name + " twice";
      break;
    }
    case 5: {  // lm_head.weight beside a tied embedding: equal (skipped) or not
      const bool equal = r.coin();
      std::vector<float> v = expected.at("model.embed_tokens.weight");
      if (!equal) v[r.below(v.size())] += 1.0f;
      if (c.tie_word_embeddings) {
        remat_fuzz::add_f32(shard[0], "lm_head.weight", {c.vocab_size, c.hidden_size}, v);
        index.emplace_back("\"lm_head.weight\"", remat_fuzz::json_string(shard_names[0]));
        change.what = equal ? "a tied lm_head equal to the embedding" : "a tied lm_head unlike the embedding";
        change.must_refuse = !equal;
      } else {
        change.what = "an untied model with the same lm_head: no change";
        change.must_refuse = false;
      }
      break;
    }
    case 6: {  // a size field hostile
      const std::string field = r.pick(kSizeFields);
      const remat_fuzz::Hostile v = remat_fuzz::hostile_value(r);
      const std::string was = folder.config.at(field);
      folder.set(field, v.text);
      config = folder.config_text();
      change.what = "config.json " + field + " " + v.text.substr(0, 40);
      // null in an optional field means its default (heads for the key/value heads, hidden_size /
      // heads for head_dim), which may be the same number
      const bool optional = field == std::string("num_key_value_heads") || field == std::string("head_dim");
      change.must_refuse = v.text != was && !(optional && v.text == "null");
      break;
    }
    case 7: {  // config.json: an unknown field, a key twice, over 1 MiB, not an object
      switch (r.below(4)) {
        case 0:
          folder.set(r.coin() ? "rope_type" : "num_experts", "1");
          change.what = "config.json with an unknown field";
          break;
        case 1:
          folder.order.push_back("hidden_size");
          change.what = "config.json with hidden_size twice";
          break;
        case 2:
          folder.set("architectures", "\"" + std::string(io::kConfigJsonMaxBytes, ' ') + "\"");
          change.what = "config.json over 1 MiB";
          break;
        default:
          folder.order.clear();
          change.what = "config.json {}";
      }
      config = folder.config_text();
      break;
    }
    case 8: {  // config.json asks for math remat does not implement
      static const char* const fields[][2] = {{"hidden_act", "\"gelu\""}, {"attention_dropout", "0.1"},
                                              {"mlp_bias", "true"}, {"use_sliding_window", "true"},
                                              {"rope_scaling", "{\"rope_type\":\"yarn\",\"factor\":2}"},
                                              {"quantization_config", "{}"}};
      const auto& f = r.pick(fields);
      folder.set(f[0], f[1]);
      config = folder.config_text();
      change.what = std::string("config.json ") + f[0] + " " + f[1];
      break;
    }
    case 9: {  // the index: a shard outside the folder, a tensor its shard lacks, one it does not list
      sharded = true;
      switch (r.below(4)) {
        case 0: {
          static const char* const files[] = {"../model-00001-of-00002.safetensors", "/etc/passwd",
                                              ".hidden.safetensors", "model.bin", ""};
          index[r.below(index.size())].second = remat_fuzz::json_string(r.pick(files));
          change.what = "the index names a file outside the folder";
          break;
        }
        case 1:
          index.emplace_back("\"model.layers.7.mlp.up_proj.weight\"", remat_fuzz::json_string(shard_names[0]));
          change.what = "the index lists a tensor no shard holds";
          break;
        case 2:
          index.erase(index.begin() + static_cast<std::ptrdiff_t>(r.below(index.size())));
          change.what = "the index omits a tensor";
          break;
        default: {
          const remat_fuzz::Hostile v = remat_fuzz::hostile_value(r);
          index_whole = r.coin() ? "{\"weight_map\":" + v.text + "}" : v.text;
          change.what = "the index is " + index_whole.substr(0, 40);
        }
      }
      break;
    }
    default: {
      remat_fuzz::StFile& s = shard[sharded ? r.below(2) : 0];
      change = remat_fuzz::hostile_st_change(s, r);
      if (!change.must_refuse) change.what = "st: " + change.what;  // a change that may be valid
    }
  }
  if (remat_fuzz::verbose())
    std::fprintf(stderr, "  recipe: %s %lld layers d %lld heads %lld/%lld of %lld vocab %lld%s%s, %s\n",
                 c.model_type.c_str(), static_cast<long long>(c.num_layers), static_cast<long long>(c.hidden_size),
                 static_cast<long long>(c.num_heads), static_cast<long long>(c.num_kv_heads),
                 static_cast<long long>(c.head_dim), static_cast<long long>(c.vocab_size),
                 c.tie_word_embeddings ? ", tied" : "", sharded ? ", sharded" : "", change.what.c_str());
  const std::string dir = remat_fuzz::scratch_dir();
  for (const char* f : {"model.safetensors", "model.safetensors.index.json", shard_names[0], shard_names[1]})
    std::remove((dir + "/" + f).c_str());
  remat_fuzz::write_file(dir + "/config.json", config);
  if (sharded) {
    std::string text = "{\"metadata\":{\"total_size\":1},\"weight_map\":{";
    for (std::size_t i = 0; i < index.size(); ++i) text += (i ? "," : "") + index[i].first + ":" + index[i].second;
    remat_fuzz::write_file(dir + "/model.safetensors.index.json", index_whole.empty() ? text + "}}" : index_whole);
    remat_fuzz::write_file(dir + "/" + shard_names[0], shard[0].bytes());
    remat_fuzz::write_file(dir + "/" + shard_names[1], shard[1].bytes());
  } else {
    remat_fuzz::write_file(dir + "/model.safetensors", shard[0].bytes());
  }
  remat_fuzz::guarded([&] {
    std::map<std::string, std::vector<float>> loaded;
    try {
      loaded = load_and_step(dir);
    } catch (const remat::Error& e) {
      if (change.what == "none")
        throw std::logic_error(std::string("read_llama/load_llama refused a valid model folder: ") + e.what());
      throw;
    }
    if (change.must_refuse) throw std::logic_error("a model folder with " + change.what + " was accepted");
    if (change.what == "none" && loaded != expected)
      throw std::logic_error("a valid model folder loaded with other values or tensors");
  });
}

// A valid tiny folder's files for a plain input to replace one of: a 1-layer llama, one file.
void write_valid_folder(const std::string& dir) {
  remat_fuzz::Recipe none(nullptr, 0);  // every choice 0
  const Folder f = tiny_folder(none);
  remat_fuzz::StFile st;
  for (const auto& [name, shape] : io::llama_shapes(f.c))
    remat_fuzz::add_f32(st, name, shape.vec(), std::vector<float>(static_cast<std::size_t>(shape.numel()), 0.5f));
  remat_fuzz::write_file(dir + "/config.json", f.config_text());
  remat_fuzz::write_file(dir + "/model.safetensors", st.bytes());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  remat_fuzz::init_environment();
  remat::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (remat_fuzz::is_recipe(data, size)) {
    run_recipe(data, size);
    return 0;
  }
  const std::string dir = remat_fuzz::scratch_dir();
  for (const char* f : {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
                        "model-00002-of-00002.safetensors"})
    std::remove((dir + "/" + f).c_str());
  write_valid_folder(dir);
  const std::string bytes = size > 0 ? remat_fuzz::as_string(data + 1, size - 1) : std::string();
  switch (size > 0 ? data[0] % 3 : 0) {
    case 0:
      remat_fuzz::write_file(dir + "/config.json", bytes);
      break;
    case 1:
      remat_fuzz::write_file(dir + "/model.safetensors", bytes);
      break;
    default:  // the index over the valid file
      remat_fuzz::write_file(dir + "/model.safetensors.index.json", bytes);
  }
  return remat_fuzz::guarded([&] { (void)load_and_step(dir); });
}
