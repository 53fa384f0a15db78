// SPDX-License-Identifier: MIT
// Fuzz target: GPT-2 weights as train_gpt --init-from takes them: read_gpt2 (read_safetensors
// listing other dtypes, the GPT-2 names, n_head from the metadata or a config.json beside the
// file), the config from the shapes (gpt2_config, with the head count found or --heads from
// the input's size), a model built from that config, load_gpt2, and one training step's forward
// and backward on a few tokens (the original crash of issue 9 was in the embedding's copy).
// A recipe input ("RCP\0", recipe.hpp) writes a valid GPT-2 of 0-3 layers (with or without
// "transformer.", mask buffers, a tied lm_head, the head count in the metadata or in a
// config.json beside it) to a scratch folder, then makes one thing hostile: a tensor missing,
// a layer missing, a tensor under two names, an unknown tensor, a buffer past the last layer,
// an lm_head unlike wte, a shape, config.json's n_head/n_embd (nested, huge, twice), the
// metadata's n_head, or any hostile_st_change. Properties: the model never needs more values
// than the file holds; a changed file that must be refused (one missing a tensor above all) is
// never accepted; an unchanged one loads with exactly its values.

#include <remat/io/gpt2.hpp>
#include <remat/remat.hpp>

#include "fuzz_common.hpp"
#include "recipe.hpp"

namespace {

using namespace remat;

// The steps train_gpt --init-from takes, with the checks every input must pass. Returns the
// model's parameters (name -> values) when the file loads.
std::map<std::string, std::vector<float>> load_and_step(const std::string& path, std::int64_t flag_heads) {
  const io::Gpt2Weights g = io::read_gpt2(path);
  const auto& w = g.tensors;
  const std::int64_t heads = g.n_head > 0 ? g.n_head : flag_heads;  // 0: d/64
  nn::GPTConfig c = io::gpt2_config(w, path, heads);
  // gpt2_config promises every parameter is in the file: the model is no larger than it.
  std::uint64_t in_file = 0;
  for (const auto& [name, t] : w) in_file += static_cast<std::uint64_t>(t.shape.numel());
  std::uint64_t needed = 0;
  for (const auto& [name, shape] : io::gpt2_shapes(c)) needed += static_cast<std::uint64_t>(shape.numel());
  if (needed > in_file) throw std::logic_error("gpt2_config: the model needs more values than the file holds");
  Tape<Cpu> tape(7);
  nn::GPT<Cpu> model(tape, c);
  io::load_gpt2(w, model, path);
  std::map<std::string, std::vector<float>> loaded;
  for (const auto& [name, t] : model.named_parameters()) loaded[name] = t.to_vector();
  const std::int64_t T = std::min<std::int64_t>(c.block_size, 3);
  std::vector<std::int32_t> x(static_cast<std::size_t>(T)), y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(c.vocab_size));
    y[i] = static_cast<std::int32_t>((i + 1) % static_cast<std::size_t>(c.vocab_size));
  }
  const auto loss = model.loss(tape.tokens({1, T}, x), tape.tokens({1, T}, y));
  tape.backward(loss);
  (void)loss.item();  // may be NaN or inf: the weights are the file's
  return loaded;
}

void run_recipe(const std::uint8_t* data, std::size_t size) {
  remat_fuzz::Recipe r(data + 4, size - 4);
  const std::uint64_t op = r.below(12);
  nn::GPTConfig c;
  c.n_layer = static_cast<std::int64_t>(r.below(4));
  c.n_embd = 1 + static_cast<std::int64_t>(r.below(4));
  c.n_head = 1;
  c.vocab_size = 1 + static_cast<std::int64_t>(r.below(6));
  c.block_size = 1 + static_cast<std::int64_t>(r.below(4));
  const std::string prefix = r.coin() ? "transformer." : "";
  const bool buffers = r.coin(), lm_head = r.coin();
  const std::uint64_t heads_in = r.below(3);  // 0 metadata, 1 config.json, 2 nowhere
  remat_fuzz::StFile file;
  std::map<std::string, std::vector<float>> expected;
  float next = 0.0f;
  for (const auto& [name, shape] : io::gpt2_shapes(c)) {
    std::vector<float> v(static_cast<std::size_t>(shape.numel()));
    for (float& x : v) x = (next += 0.125f);
    remat_fuzz::add_f32(file, prefix + name, shape.vec(), v);
    expected[name] = std::move(v);
  }
  if (buffers)
    for (std::int64_t l = 0; l < c.n_layer; ++l) {
      const std::int64_t t = c.block_size;
      remat_fuzz::add_f32(file, prefix + "h." + std::to_string(l) + ".attn.bias", {1, 1, t, t},
                          std::vector<float>(static_cast<std::size_t>(t * t), 1.0f));
      remat_fuzz::add_f32(file, prefix + "h." + std::to_string(l) + ".attn.masked_bias", {}, {-1e4f});
    }
  if (lm_head) remat_fuzz::add_f32(file, "lm_head.weight", {c.vocab_size, c.n_embd}, expected.at("wte.weight"));
  if (heads_in == 0) file.metadata.emplace_back("\"n_head\"", "\"1\"");
  std::string config = heads_in == 1 ? "{\"n_embd\": " + std::to_string(c.n_embd) + ", \"n_head\": 1}" : "";

  remat_fuzz::Change change;
  change.must_refuse = true;
  switch (op) {
    case 0:
      change = remat_fuzz::Change{};
      break;
    case 1: {  // one tensor missing
      const std::size_t params = io::gpt2_shapes(c).size();
      const std::size_t i = r.below(params);
      change.what = "no tensor " + file.entries[i].name;
      file.entries.erase(file.entries.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
    case 2: {  // a layer missing, or missing after the last: h.L. names of another layer
      const std::string l = std::to_string(c.n_layer > 1 ? r.below(static_cast<std::uint64_t>(c.n_layer - 1)) : 0);
      std::vector<remat_fuzz::StEntry> kept;
      for (auto& e : file.entries)
        if (e.name.find("\"" + prefix + "h." + l + ".") != 0 || e.name.find("attn.bias") != std::string::npos ||
            e.name.find("masked_bias") != std::string::npos)
          kept.push_back(e);
      if (kept.size() == file.entries.size()) {  // no layers: a lone tensor of layer 2
        remat_fuzz::add_f32(file, prefix + "h.2.ln_1.weight", {c.n_embd}, std::vector<float>(static_cast<std::size_t>(c.n_embd), 1.0f));
        change.what = "a tensor of layer 2 only";
      } else {
        file.entries = kept;
        change.what = "layer " + l + " missing";
        change.must_refuse = c.n_layer > 1 || buffers;  // the last and only layer: a smaller valid model
      }
      break;
    }
    case 3: {  // a parameter under two names, each with its own data
      const auto shapes = io::gpt2_shapes(c);
      const auto& [name, shape] = shapes[r.below(shapes.size())];
      remat_fuzz::add_f32(file, prefix.empty() ? "transformer." + name : name, shape.vec(), expected.at(name));
      change.what = "tensor " + name + " under two names";
      break;
    }
    case 4: {  // an unknown tensor
      static const char* const names[] = {"h.0.attn.q_proj.weight", "h.01.ln_1.weight", "lm_head.bias",
                                          "wte.weights", "h.0.ln_1.weight.x", "model.embed_tokens.weight",
                                          "h.-1.ln_1.weight", "h.99999999999.ln_1.weight", "h..ln_1.weight",
                                          "transformer.transformer.wte.weight", ""};
      const std::string name = r.pick(names);
      remat_fuzz::add_f32(file, name, {1}, {1.0f});
      change.what = "an unknown tensor '" + name + "'";
      break;
    }
    case 5: {  // a buffer past the last layer
      const std::string l = std::to_string(c.n_layer + static_cast<std::int64_t>(r.below(3)));
      remat_fuzz::add_f32(file, prefix + "h." + l + (r.coin() ? ".attn.bias" : ".attn.masked_bias"), {1}, {1.0f});
      change.what = "a buffer of layer " + l;
      break;
    }
    case 6: {  // lm_head unlike wte: other values, or another shape
      std::vector<float> v = expected.at("wte.weight");
      std::vector<std::int64_t> shape = {c.vocab_size, c.n_embd};
      if (r.coin()) v[r.below(v.size())] += 1.0f;
      else shape = {c.n_embd, c.vocab_size};
      if (shape[0] == shape[1] && v == expected.at("wte.weight")) v[0] += 1.0f;
      if (lm_head) file.entries.pop_back();
      remat_fuzz::add_f32(file, "lm_head.weight", shape, v);
      change.what = "lm_head.weight unlike wte.weight";
      break;
    }
    case 7: {  // a shape with the right number of values but the wrong dims
      remat_fuzz::StEntry& e = file.entries[r.below(io::gpt2_shapes(c).size())];
      std::vector<std::string> dims = e.dims;
      if (dims.size() == 2 && dims[0] != dims[1]) std::swap(dims[0], dims[1]);
      else dims.insert(dims.begin(), "1");
      e.dims = dims;
      change.what = "tensor " + e.name + " reshaped";
      break;
    }
    case 8: {  // config.json's head count or width hostile (the metadata says nothing)
      file.metadata.clear();
      const remat_fuzz::Hostile v = remat_fuzz::hostile_value(r);
      const bool heads = r.coin();
      switch (r.below(3)) {
        case 0:
          config = heads ? "{\"n_embd\": " + std::to_string(c.n_embd) + ", \"n_head\": " + v.text + "}"
                         : "{\"n_head\": 1, \"n_embd\": " + v.text + "}";
          change.what = std::string("config.json with ") + (heads ? "n_head " : "n_embd ") + v.text.substr(0, 40);
          if (!v.integer) break;  // refused
          {
            const unsigned long long x = std::stoull(v.text);
            change.must_refuse = heads ? !(x >= 1 && x <= 2147483647 && static_cast<unsigned long long>(c.n_embd) % x == 0)
                                       : x != static_cast<unsigned long long>(c.n_embd);
          }
          break;
        case 1:
          config = "{\"n_head\": 1, \"n_head\": 1}";
          change.what = "config.json with n_head twice";
          break;
        default:
          config = "{\"n_head\": 1, \"pad\": \"" + std::string(io::kConfigJsonMaxBytes, ' ') + "\"}";
          change.what = "config.json over 1 MiB";
      }
      break;
    }
    case 9: {  // the metadata's head count
      static const char* const values[] = {"0", "-0", "-1", "+1", " 1", "1 ", "", "4x", "2147483648", "01"};
      const std::string v = r.pick(values);
      file.metadata.assign(1, {"\"n_head\"", remat_fuzz::json_string(v)});
      change.what = "metadata n_head '" + v + "'";
      change.must_refuse = v != "01";  // from_chars reads "01" as 1
      break;
    }
    default:
      change = remat_fuzz::hostile_st_change(file, r);
      if (!change.must_refuse) change.what = "st: " + change.what;  // a change that may be valid
  }
  if (remat_fuzz::verbose())
    std::fprintf(stderr, "  recipe: GPT-2 %lld layers d %lld vocab %lld block %lld%s%s%s, %s\n",
                 static_cast<long long>(c.n_layer), static_cast<long long>(c.n_embd),
                 static_cast<long long>(c.vocab_size), static_cast<long long>(c.block_size),
                 prefix.empty() ? "" : ", prefixed", buffers ? ", buffers" : "", lm_head ? ", lm_head" : "",
                 change.what.c_str());
  const std::string dir = remat_fuzz::scratch_dir();
  const std::string path = dir + "/model.safetensors", cfg = dir + "/config.json";
  const std::string bytes = file.bytes();
  remat_fuzz::write_file(path, bytes);
  if (config.empty()) std::remove(cfg.c_str());
  else remat_fuzz::write_file(cfg, config);
  remat_fuzz::guarded([&] {
    std::map<std::string, std::vector<float>> loaded;
    try {
      loaded = load_and_step(path, 1);  // --heads 1 when the file records none
    } catch (const remat::Error& e) {
      if (change.what == "none")
        throw std::logic_error(std::string("read_gpt2/gpt2_config/load_gpt2 refused a valid GPT-2: ") + e.what());
      throw;
    }
    if (change.must_refuse) throw std::logic_error("a GPT-2 file with " + change.what + " was accepted");
    if (change.what == "none" && loaded != expected)
      throw std::logic_error("a valid GPT-2 file loaded with other values or tensors");
  });
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
  const std::string& path = remat_fuzz::mem_file().write(data, size);
  // --heads 0-2 from the input's size when the file records none (0: d/64)
  return remat_fuzz::guarded([&] { (void)load_and_step(path, static_cast<std::int64_t>(size % 3)); });
}
