// SPDX-License-Identifier: MIT
// Writes the seed corpora of remat's fuzz targets (tests/fuzz/README.md) with the library's
// own writers, so the seeds follow the formats as they change: make_seeds OUT_DIR writes
// OUT_DIR/<target>/<name>. Every value is exact in fp32 (no initialization, no training), so
// the bytes are the same on every machine; tests/fuzz/make_seeds.sh refreshes the committed
// copies in tests/fuzz/seeds/ and ctest checks that they are current.

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <remat/data/tokens.hpp>
#include <remat/io/gpt2.hpp>
#include <remat/io/llama.hpp>
#include <remat/io/snapshot.hpp>
#include <remat/remat.hpp>

#include "../text/tiny_bpe.hpp"
#include "snapshot_config.hpp"

namespace {

namespace fs = std::filesystem;
using remat::Cpu;
using remat::Shape;
using remat::io::HostTensor;

// Small exact values: multiples of 1/8 in [-0.5, 0.5].
std::vector<float> ramp(std::int64_t n, int phase = 0) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>((i + phase) % 9) - 4) / 8.0f;
  return v;
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

// A safetensors file written by hand: header text and data bytes as given.
void write_raw_safetensors(const fs::path& p, const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write_text(p, out + header + data);
}

void safetensors_seeds(const fs::path& dir) {
  remat::io::write_safetensors((dir / "f32_two_tensors.safetensors").string(),
                               {{"a", HostTensor{Shape{2, 3}, ramp(6)}},
                                {"b", HostTensor{Shape{4}, ramp(4, 1)}}},
                               {{"format", "pt"}});
  remat::io::write_safetensors((dir / "empty_tensor.safetensors").string(),
                               {{"z", HostTensor{Shape{0, 5}, {}}}, {"s", HostTensor{Shape{}, {1.5f}}}});
  // F16 (1.0, -2.0, a subnormal, inf) and BF16 (1.0, -2.0), which the writer never produces.
  write_raw_safetensors(dir / "f16_bf16.safetensors",
                        R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},)"
                        R"("g":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},)"
                        R"("__metadata__":{"format":"pt"}})",
                        std::string("\x00\x3c\x00\xc0\x01\x00\x00\x7c\x80\x3f\x00\xc0", 12));
  write_raw_safetensors(dir / "empty_header.safetensors", "{}", "");
}

remat::nn::GPTConfig tiny_gpt2() {
  remat::nn::GPTConfig c;
  c.vocab_size = 5;
  c.block_size = 4;
  c.n_layer = 1;
  c.n_embd = 4;
  c.n_head = 1;
  return c;
}

void gpt2_seeds(const fs::path& dir) {
  const auto c = tiny_gpt2();
  std::vector<std::pair<std::string, HostTensor>> plain, hf;
  int phase = 0;
  for (const auto& [name, shape] : remat::io::gpt2_shapes(c)) {
    HostTensor t{shape, ramp(shape.numel(), phase++)};
    plain.emplace_back(name, t);
    hf.emplace_back("transformer." + name, t);
  }
  remat::io::write_safetensors((dir / "gpt2_tiny.safetensors").string(), plain, {{"format", "pt"}});
  // Hugging Face's GPT2LMHeadModel layout: prefixed names, the mask buffers and a tied lm_head.
  hf.emplace_back("transformer.h.0.attn.bias", HostTensor{Shape{1, 1, 4, 4}, ramp(16)});
  hf.emplace_back("lm_head.weight", HostTensor{Shape{c.vocab_size, c.n_embd}, ramp(20)});
  remat::io::write_safetensors((dir / "gpt2_hf_layout.safetensors").string(), hf, {{"format", "pt"}});
}

// fuzz_llama's plain inputs: a byte that picks the file (0 config.json, 1 model.safetensors,
// 2 model.safetensors.index.json), then its bytes, for the target's valid folder (a 1-layer
// llama of width 1, vocabulary 1, head size 2, untied): each seed loads.
void llama_seeds(const fs::path& dir) {
  remat::nn::LlamaConfig c;
  c.vocab_size = 1;
  c.hidden_size = 1;
  c.intermediate_size = 1;
  c.num_layers = 1;
  c.num_heads = 1;
  c.num_kv_heads = 1;
  c.head_dim = 2;
  c.rms_norm_eps = 1e-5f;
  write_text(dir / "config_llama.bin", std::string(1, '\0') + remat::io::llama_config_json(c));
  std::vector<std::pair<std::string, HostTensor>> ts;
  std::string index = "{\"metadata\":{\"total_size\":0},\"weight_map\":{";
  int phase = 0;
  for (const auto& [name, shape] : remat::io::llama_shapes(c)) {
    ts.emplace_back(name, HostTensor{shape, ramp(shape.numel(), phase++)});
    index += std::string(phase > 1 ? "," : "") + "\"" + name + "\":\"model.safetensors\"";
  }
  const fs::path tmp = dir / "weights.tmp";
  remat::io::write_safetensors(tmp.string(), ts, {{"format", "pt"}});
  std::ifstream in(tmp, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  fs::remove(tmp);
  write_text(dir / "weights_tiny_llama.bin", std::string(1, '\1') + bytes);
  write_text(dir / "index_one_shard.bin", std::string(1, '\2') + index + "}}");
}

void snapshot_seeds(const fs::path& dir) {
  using namespace remat;
  Tape<Cpu> tape(3);
  nn::GPT<Cpu> model(tape, remat_fuzz::snapshot_config());
  int phase = 0;
  for (const auto& [name, t] : model.named_parameters()) {
    const auto v = ramp(t.numel(), phase++);
    Cpu::copy_from_host(t.template data<float>(), v.data(), t.bytes());
  }
  const auto params = model.parameters();
  io::TrainState st;
  st.step = 7;
  st.data_position = 21;
  st.rng_seed = 3;
  st.rng_offset = 96;
  st.extra["checkpoint_strategy"] = "block";
  optim::AdamW<Cpu> adamw(params, {1e-3f});
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto [m, v] = adamw.moments(i);
    const auto mv = ramp(params[i].numel(), 2), vv = ramp(params[i].numel(), 4);
    std::vector<float> vpos(vv.size());
    for (std::size_t k = 0; k < vv.size(); ++k) vpos[k] = vv[k] * vv[k];  // v >= 0
    Cpu::copy_from_host(m, mv.data(), mv.size() * 4);
    Cpu::copy_from_host(v, vpos.data(), vpos.size() * 4);
  }
  adamw.set_steps(7);
  io::save_state((dir / "adamw.safetensors").string(), model, &adamw,
                 static_cast<optim::SGD<Cpu>*>(nullptr), st);
  optim::SGD<Cpu> sgd(params, {1e-2f, 0.9f, 0.0f, true});
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto b = ramp(params[i].numel(), 5);
    Cpu::copy_from_host(sgd.momentum_buffer(i), b.data(), b.size() * 4);
  }
  io::save_state((dir / "sgd.safetensors").string(), model, static_cast<optim::AdamW<Cpu>*>(nullptr),
                 &sgd, st);
  st.extra["checkpoint_strategy"] = "every:2";
  io::save_state((dir / "no_optimizer.safetensors").string(), model,
                 static_cast<optim::AdamW<Cpu>*>(nullptr), static_cast<optim::SGD<Cpu>*>(nullptr), st);
}

void llmc_seeds(const fs::path& dir) {
  std::vector<std::int32_t> t(40);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int32_t>((i * 37) % 50257);
  remat::data::write_llmc_bin((dir / "tokens_40.bin").string(), t);
  remat::data::write_llmc_bin((dir / "tokens_0.bin").string(), {});
  remat::data::write_llmc_bin((dir / "tokens_max.bin").string(), {0, 65535, 1, 65534, 2, 65533});
}

void strategy_seeds(const fs::path& dir) {
  const char* texts[] = {"none", "block", "every:2", "sqrt", "save_linear", "selective", "auto",
                         "budget:300MiB", "budget:1.5GiB", "1048576", "2GB", "512 KiB", "1e3KB"};
  int i = 0;
  for (const char* s : texts) write_text(dir / ("text_" + std::to_string(i++)), s);
}

// The first byte picks the mode of fuzz_tokenizer.cpp: 0 text, 1 encoder.json NUL vocab.bpe,
// 2 tokenizer.json.
void tokenizer_seeds(const fs::path& dir) {
  const auto b = remat_test::train_tiny_bpe(remat_test::tiny_training_text(), 24);
  write_text(dir / "text_plain", std::string(1, '\0') + remat_test::tiny_training_text());
  write_text(dir / "text_invalid", std::string(1, '\0') + "caf\xc3 \xed\xa0\x80 it's  \n\n x<|endoftext|>");
  write_text(dir / "files", std::string(1, '\1') + b.encoder_json + std::string(1, '\0') + b.vocab_bpe);
  nlohmann::json vocab = nlohmann::json::parse(b.encoder_json);
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [x, y] : b.merges) merges.push_back(remat_test::spelled(x) + " " + remat_test::spelled(y));
  const nlohmann::json j = {{"added_tokens", {{{"id", vocab["<|endoftext|>"]}, {"content", "<|endoftext|>"}}}},
                            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  write_text(dir / "tokenizer_json", std::string(1, '\2') + j.dump());
}

// Recipes (recipe.hpp): "RCP\0" and the choices of a valid file, so the fuzzer starts from
// inputs that build every part of the format (the targets read the bytes as they document).
void write_recipe(const fs::path& p, std::initializer_list<int> choices) {
  std::string s("RCP\0", 4);
  for (const int c : choices) s += static_cast<char>(c);
  write_text(p, s);
}

void recipe_seeds(const fs::path& out) {
  // 3 tensors: F32 [2, 3] from bytes, F16 [3], BF16 [] ; metadata k0, k1
  write_recipe(out / "safetensors" / "recipe_three_tensors",
               {0, 3, 0, 2, 2, 3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                21, 22, 23, 24, 2, 1, 3, 0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 3, 0, 0x80, 0x3f, 2});
  // a 2-layer GPT-2, prefixed, with mask buffers, a tied lm_head and config.json's n_head
  write_recipe(out / "gpt2" / "recipe_two_layers_hf_layout", {0, 2, 3, 4, 3, 1, 1, 1, 1});
  write_recipe(out / "gpt2" / "recipe_one_layer_metadata_heads", {0, 1, 1, 2, 1, 0, 0, 0, 0});
  // Llama-family folders, unchanged: a qwen3 with GQA and a tied head in one file; a 2-layer
  // llama in two shards; a qwen2 (biases) with its lm_head beside the tied embedding
  write_recipe(out / "llama" / "recipe_qwen3_gqa_tied", {0, 2, 0, 0, 1, 0, 3, 1, 4, 1, 0});
  write_recipe(out / "llama" / "recipe_llama_two_shards", {0, 0, 1, 1, 0, 1, 2, 2, 2, 0, 1});
  write_recipe(out / "llama" / "recipe_qwen2_tied_head_equal", {5, 1, 0, 0, 0, 0, 1, 0, 2, 1, 0, 1});
  // AdamW, SGD and no-optimizer snapshots, unchanged
  write_recipe(out / "snapshot" / "recipe_adamw", {0, 0, 0});
  write_recipe(out / "snapshot" / "recipe_sgd", {0, 1, 0});
  // a tokenizer.json with <|endoftext|> and 4 merges; vocab.json + merges.txt with 2
  write_recipe(out / "tokenizer" / "recipe_tokenizer_json", {0, 1, 1, 4, 104, 105, 32, 116, 0, 1, 2, 3, 0});
  write_recipe(out / "tokenizer" / "recipe_vocab_merges", {0, 0, 0, 2, 116, 104, 101, 32, 0});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds OUT_DIR\n");
    return 2;
  }
  try {
    remat::set_num_threads(1);
    const fs::path out(argv[1]);
    const std::pair<const char*, void (*)(const fs::path&)> targets[] = {
        {"safetensors", safetensors_seeds}, {"gpt2", gpt2_seeds}, {"snapshot", snapshot_seeds},
        {"llmc_tokens", llmc_seeds}, {"strategy", strategy_seeds},
        {"tokenizer", tokenizer_seeds}, {"llama", llama_seeds}};
    for (const auto& [name, make] : targets) {
      fs::remove_all(out / name);
      fs::create_directories(out / name);
      make(out / name);
    }
    recipe_seeds(out);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
}
