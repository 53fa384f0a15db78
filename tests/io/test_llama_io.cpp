// SPDX-License-Identifier: MIT
// Llama-family model folders (io/llama.hpp, NOTE [Llama tensors required], NOTE [sharded
// weights]): save_llama then read_llama and load_llama give the same parameters (F32 exact,
// BF16 rounded once), and the config back; sharded folders load as one file does; F16 files
// widen; rotary buffers and a tied lm_head equal to the embedding are skipped; every other
// deviation (a missing, misshapen, unknown or doubled tensor, a shard outside the folder, an
// index that disagrees with its shards, a tied head that differs) is an error naming it.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <remat/io/llama.hpp>
#include <remat/remat.hpp>

#include "support/catch.hpp"
#include "support/require_error.hpp"

using namespace remat;
using remat_test::require_error;

namespace {

nn::LlamaConfig llio_config(const std::string& type) {
  nn::LlamaConfig c;
  c.model_type = type;
  c.vocab_size = 11;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 2;
  c.rms_norm_eps = 1e-5f;
  c.rope.theta = 100000.0f;
  c.qkv_bias = type == "qwen2";
  c.qk_norm = type == "qwen3";
  c.tie_word_embeddings = type != "llama";
  if (type == "llama") c.rope = RopeConfig{500000.0f, 32.0f, 1.0f, 4.0f, 8192};
  c.max_position_embeddings = 64;
  c.seed = 99;
  return c;
}

std::string llio_dir(const std::string& name) {
  const std::string d = "llama_io_" + name;
  std::string cmd = "rm -rf '" + d + "' && mkdir -p '" + d + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  return d;
}

void llio_write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The tensors of a folder's model.safetensors (F32), by name.
std::map<std::string, io::HostTensor> llio_tensors(const std::string& dir) {
  return io::read_safetensors(dir + "/model.safetensors").tensors;
}
void llio_write_tensors(const std::string& path, const std::map<std::string, io::HostTensor>& m) {
  std::vector<std::pair<std::string, io::HostTensor>> v(m.begin(), m.end());
  io::write_safetensors(path, v);
}

}  // namespace

TEST_CASE("save_llama, read_llama and load_llama round-trip a model and its config",
          "[io][llama]") {
  for (const std::string type : {"llama", "qwen2", "qwen3"}) {
    INFO("model_type " << type);
    const nn::LlamaConfig c = llio_config(type);
    Tape<Cpu> tape;
    nn::Llama<Cpu> a(tape, c);
    const std::string dir = llio_dir(type);
    io::save_llama(dir, a, DType::f32);
    const io::LlamaFiles f = io::read_llama(dir);
    CHECK(f.config.model_type == c.model_type);
    CHECK(f.config.num_kv_heads == 2);
    CHECK(f.config.head_dim == 2);
    CHECK(f.config.rms_norm_eps == c.rms_norm_eps);
    CHECK(f.config.rope.theta == c.rope.theta);
    CHECK(f.config.rope.factor == c.rope.factor);
    CHECK(f.config.tie_word_embeddings == c.tie_word_embeddings);
    CHECK(f.config.qkv_bias == c.qkv_bias);
    CHECK(f.config.qk_norm == c.qk_norm);
    nn::LlamaConfig c2 = f.config;
    c2.seed = 5;  // other draws, then overwritten by the files
    nn::Llama<Cpu> b(tape, c2);
    io::load_llama(f, b);
    REQUIRE(a.named_parameters().size() == b.named_parameters().size());
    for (std::size_t i = 0; i < a.named_parameters().size(); ++i) {
      INFO(a.named_parameters()[i].first);
      CHECK(a.named_parameters()[i].second.to_vector() == b.named_parameters()[i].second.to_vector());
    }
    // the same folder the path of its weights names
    CHECK(io::read_llama(dir + "/model.safetensors").tensors.size() == f.tensors.size());
    // BF16: each value rounded once
    io::save_llama(dir, a, DType::bf16);
    nn::Llama<Cpu> h(tape, c2);
    io::load_llama(io::read_llama(dir), h);
    const auto wa = a.parameter("model.layers.1.mlp.up_proj.weight").to_vector();
    const auto wh = h.parameter("model.layers.1.mlp.up_proj.weight").to_vector();
    for (std::size_t i = 0; i < wa.size(); ++i) CHECK(wh[i] == math::from_bf16(math::to_bf16(wa[i])));
  }
}

TEST_CASE("read_llama reads sharded folders, F16 tensors and skips rotary buffers", "[io][llama]") {
  const nn::LlamaConfig c = llio_config("llama");
  Tape<Cpu> tape;
  nn::Llama<Cpu> a(tape, c);
  const std::string dir = llio_dir("shards");
  io::save_llama(dir, a);
  auto all = llio_tensors(dir);
  std::remove((dir + "/model.safetensors").c_str());
  std::map<std::string, io::HostTensor> s1, s2;
  nlohmann::json map = nlohmann::json::object();
  for (auto& [name, t] : all) {
    const bool first = name.find("layers.1.") == std::string::npos;
    (first ? s1 : s2).emplace(name, t);
    map[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  s2.emplace("model.layers.1.self_attn.rotary_emb.inv_freq", io::HostTensor(Shape{1}, {1.0f}));
  map["model.layers.1.self_attn.rotary_emb.inv_freq"] = "model-00002-of-00002.safetensors";
  llio_write_tensors(dir + "/model-00001-of-00002.safetensors", s1);
  llio_write_tensors(dir + "/model-00002-of-00002.safetensors", s2);
  const std::string index = dir + "/model.safetensors.index.json";
  llio_write(index, nlohmann::json{{"metadata", {{"total_size", 1}}}, {"weight_map", map}}.dump());
  const io::LlamaFiles f = io::read_llama(dir);
  CHECK(f.files.size() == 2);
  REQUIRE(f.skipped.size() == 1);
  CHECK(f.skipped[0].find("rotary") != std::string::npos);
  nn::Llama<Cpu> b(tape, f.config);
  io::load_llama(f, b);
  for (std::size_t i = 0; i < a.named_parameters().size(); ++i)
    CHECK(a.named_parameters()[i].second.to_vector() == b.named_parameters()[i].second.to_vector());
  CHECK(io::read_llama(index).tensors.size() == f.tensors.size());
  // F16 (half precision) files widen: every tensor written as F16 (truncated, normal range)
  {
    const std::string d16 = llio_dir("f16");
    io::save_llama(d16, a);
    const auto t = llio_tensors(d16);
    nlohmann::json header = nlohmann::json::object();
    std::string data;
    std::map<std::string, std::vector<std::uint16_t>> halves;
    for (const auto& [name, x] : t) {
      std::vector<std::uint16_t>& h = halves[name];
      for (const float v : x.data) {
        std::uint32_t b = 0;
        std::memcpy(&b, &v, 4);
        const int e = static_cast<int>((b >> 23) & 0xff) - 127 + 15;
        h.push_back(static_cast<std::uint16_t>(((b >> 16) & 0x8000) |
                                               (e <= 0 ? 0 : (e << 10) | ((b >> 13) & 0x3ff))));
      }
      std::vector<std::int64_t> dims;
      for (int i = 0; i < x.shape.rank(); ++i) dims.push_back(x.shape[i]);
      header[name] = {{"dtype", "F16"}, {"shape", dims}, {"data_offsets", {data.size(), data.size() + 2 * h.size()}}};
      data.append(reinterpret_cast<const char*>(h.data()), 2 * h.size());
    }
    const std::string hj = header.dump();
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[static_cast<std::size_t>(i)] = static_cast<char>((hj.size() >> (8 * i)) & 0xff);
    llio_write(d16 + "/model.safetensors", file + hj + data);
    const io::LlamaFiles f16 = io::read_llama(d16);
    nn::Llama<Cpu> g(tape, f16.config);
    io::load_llama(f16, g);
    const auto w = g.parameter("model.layers.0.self_attn.q_proj.weight").to_vector();
    const auto& h = halves.at("model.layers.0.self_attn.q_proj.weight");
    for (std::size_t i = 0; i < w.size(); ++i) CHECK(w[i] == io::detail::half_to_float(h[i]));
  }
}

TEST_CASE("read_llama refuses folders that do not match their config, naming the tensor",
          "[io][llama]") {
  const nn::LlamaConfig c = llio_config("qwen2");
  Tape<Cpu> tape;
  nn::Llama<Cpu> a(tape, c);
  const std::string dir = llio_dir("bad");
  io::save_llama(dir, a);
  const auto good = llio_tensors(dir);
  auto with = [&](auto edit) {
    auto t = good;
    edit(t);
    llio_write_tensors(dir + "/model.safetensors", t);
  };
  with([](auto& t) { t.erase("model.layers.1.self_attn.k_proj.bias"); });
  require_error([&] { (void)io::read_llama(dir); },
                {"remat::io::read_llama", "no tensor 'model.layers.1.self_attn.k_proj.bias'"});
  with([](auto& t) { t["model.layers.0.mlp.up_proj.weight"] = io::HostTensor(Shape{8, 12}, std::vector<float>(96)); });
  require_error([&] { (void)io::read_llama(dir); },
                {"model.layers.0.mlp.up_proj.weight", "[8, 12]", "needs [12, 8]"});
  with([](auto& t) { t["model.layers.2.input_layernorm.weight"] = io::HostTensor(Shape{8}, std::vector<float>(8)); });
  require_error([&] { (void)io::read_llama(dir); }, {"model.layers.2.input_layernorm.weight", "2 layers", "does not have"});
  with([](auto& t) { t["lm_head.weight"] = t.at("model.embed_tokens.weight"); });  // tied, equal: skipped
  CHECK(io::read_llama(dir).skipped.size() == 1);
  with([](auto& t) {
    t["lm_head.weight"] = t.at("model.embed_tokens.weight");
    t["lm_head.weight"].data[3] += 1.0f;
  });
  require_error([&] { (void)io::read_llama(dir); }, {"lm_head.weight that differs", "element 3", "tie_word_embeddings"});
  with([](auto&) {});
  CHECK(io::read_llama(dir).tensors.size() == good.size());
  // the config: missing, or another model's
  std::rename((dir + "/config.json").c_str(), (dir + "/config.moved").c_str());
  require_error([&] { (void)io::read_llama(dir); }, {"no config.json beside"});
  nn::LlamaConfig other = c;
  other.num_layers = 3;
  llio_write(dir + "/config.json", io::llama_config_json(other));
  require_error([&] { (void)io::read_llama(dir); }, {"no tensor 'model.layers.2.input_layernorm.weight'"});
  // a config that asks for a huge model beside a small file fails at the first tensor it lacks
  other.num_layers = 2147483647;
  llio_write(dir + "/config.json", io::llama_config_json(other));
  require_error([&] { (void)io::read_llama(dir); }, {"no tensor 'model.layers.2.input_layernorm.weight'", "2147483647 layers"});
  other = c;
  other.hidden_size = 2147483647;
  llio_write(dir + "/config.json", io::llama_config_json(other));
  require_error([&] { (void)io::read_llama(dir); }, {"model.embed_tokens.weight", "[11, 8]", "needs [11, 2147483647]"});
  require_error([&] { (void)io::read_llama(dir + "/nothing"); }, {"neither model.safetensors"});
}

TEST_CASE("read_llama refuses indexes that disagree with their shards or leave the folder",
          "[io][llama]") {
  const nn::LlamaConfig c = llio_config("llama");
  Tape<Cpu> tape;
  nn::Llama<Cpu> a(tape, c);
  const std::string dir = llio_dir("index");
  io::save_llama(dir, a);
  const auto all = llio_tensors(dir);
  std::rename((dir + "/model.safetensors").c_str(), (dir + "/s1.safetensors").c_str());
  const std::string index = dir + "/model.safetensors.index.json";
  auto write_index = [&](auto edit) {
    nlohmann::json map = nlohmann::json::object();
    for (const auto& kv : all) map[kv.first] = "s1.safetensors";
    edit(map);
    llio_write(index, nlohmann::json{{"weight_map", map}}.dump());
  };
  write_index([](auto&) {});
  CHECK(io::read_llama(dir).tensors.size() == all.size());
  write_index([](auto& m) { m["model.norm.weight"] = "../s1.safetensors"; });
  require_error([&] { (void)io::read_llama(dir); }, {"'../s1.safetensors'", "no '/'"});
  write_index([](auto& m) { m["model.norm.weight"] = ".hidden.safetensors"; });
  require_error([&] { (void)io::read_llama(dir); }, {"not starting with '.'"});
  write_index([](auto& m) { m["model.norm.weight"] = 7; });
  require_error([&] { (void)io::read_llama(dir); }, {"model.norm.weight", "expected a shard's file name"});
  write_index([](auto& m) { m.erase("model.norm.weight"); });
  require_error([&] { (void)io::read_llama(dir); }, {"holds tensor 'model.norm.weight'", "does not list"});
  write_index([](auto& m) { m["model.extra.weight"] = "s1.safetensors"; });
  require_error([&] { (void)io::read_llama(dir); }, {"lists tensor 'model.extra.weight'", "does not hold it"});
}
