// SPDX-License-Identifier: MIT
// nn::Llama: Hugging Face's parameter names and shapes (Llama with GQA, Qwen 2's q/k/v biases,
// Qwen 3's q/k norm, tied and untied heads), the whole model's backward against finite
// differences, every fixed checkpoint strategy against the plain step bit for bit (f32 and
// bf16), and the shape-only estimate of a training step against the ledger, to the byte.
// (Parity with a PyTorch Llama: tests/parity/llama_parity.py.)

#include <cstring>
#include <string>
#include <vector>

#include "support/gradcheck.hpp"
#include "support/require_error.hpp"
#include "remat/plan/estimate.hpp"

using namespace remat;
using remat_test::T;

namespace {

nn::LlamaConfig tiny_llama(const std::string& type = "llama") {
  nn::LlamaConfig c;
  c.model_type = type;
  c.vocab_size = 13;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.rms_norm_eps = 1e-5f;
  c.rope.theta = 10000.0f;
  c.qkv_bias = type == "qwen2";
  c.qk_norm = type == "qwen3";
  c.tie_word_embeddings = type != "llama";
  return c;
}

std::vector<std::int32_t> llama_ids(std::int64_t n, std::int64_t V, std::int64_t mul, std::int64_t add) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * mul + add) % V);
  return v;
}

// The loss and every parameter's gradient of one step.
std::vector<std::vector<float>> llama_step(const nn::LlamaConfig& c) {
  Tape<Cpu> tape;
  nn::Llama<Cpu> m(tape, c);
  const auto ids = tape.tokens({2, 9}, llama_ids(18, c.vocab_size, 5, 1));
  const auto tgt = tape.tokens({2, 9}, llama_ids(18, c.vocab_size, 7, 3));
  const T loss = m.loss(ids, tgt);
  std::vector<std::vector<float>> out{loss.to_vector<float>()};
  tape.backward(loss);
  for (const auto& p : m.parameters()) out.push_back(p.grad().to_vector<float>());
  return out;
}

}  // namespace

TEST_CASE("Llama parameters follow Hugging Face's names, shapes and count", "[nn][llama]") {
  for (const std::string type : {"llama", "qwen2", "qwen3"}) {
    INFO("model_type " << type);
    const nn::LlamaConfig c = tiny_llama(type);
    Tape<Cpu> tape;
    nn::Llama<Cpu> m(tape, c);
    std::vector<std::string> names;
    for (const auto& p : m.named_parameters()) names.push_back(p.first);
    std::vector<std::string> expect = {"model.embed_tokens.weight"};
    for (int i = 0; i < 3; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      expect.push_back(p + "input_layernorm.weight");
      for (const char* x : {"q", "k", "v"}) {
        expect.push_back(p + "self_attn." + x + "_proj.weight");
        if (type == "qwen2") expect.push_back(p + "self_attn." + x + "_proj.bias");
      }
      expect.push_back(p + "self_attn.o_proj.weight");
      if (type == "qwen3") {
        expect.push_back(p + "self_attn.q_norm.weight");
        expect.push_back(p + "self_attn.k_norm.weight");
      }
      for (const char* x : {"post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                            "mlp.down_proj.weight"})
        expect.push_back(p + x);
    }
    expect.push_back("model.norm.weight");
    if (type == "llama") expect.push_back("lm_head.weight");
    CHECK(names == expect);
    const std::int64_t d = 16, F = 24, V = 13, H = 4, KVH = 2, D = 4, L = 3;
    // torch.nn.Linear's [out, in]
    CHECK(m.parameter("model.layers.2.self_attn.q_proj.weight").shape() == Shape{H * D, d});
    CHECK(m.parameter("model.layers.2.self_attn.k_proj.weight").shape() == Shape{KVH * D, d});
    CHECK(m.parameter("model.layers.2.self_attn.o_proj.weight").shape() == Shape{d, H * D});
    CHECK(m.parameter("model.layers.0.mlp.down_proj.weight").shape() == Shape{d, F});
    const std::int64_t per_layer = 2 * d + (H + 2 * KVH) * D * d + d * H * D + 3 * d * F +
                                   (type == "qwen2" ? (H + 2 * KVH) * D : 0) + (type == "qwen3" ? 2 * D : 0);
    CHECK(m.num_parameters() == V * d + L * per_layer + d + (type == "llama" ? V * d : 0));
  }
}

TEST_CASE("the Llama's full backward matches finite differences", "[nn][llama][grad]") {
  for (const std::string type : {"qwen2", "qwen3", "llama"}) {
    INFO("model_type " << type);
    nn::LlamaConfig c = tiny_llama(type);
    c.init_std = 0.3f;  // gradients well above the finite-difference noise
    c.num_layers = 2;
    Tape<Cpu> tape;
    nn::Llama<Cpu> m(tape, c);
    const auto ids = tape.tokens({2, 5}, {1, 4, 2, 9, 0, 3, 3, 10, 7, 5});
    const auto tgt = tape.tokens({2, 5}, {4, 2, 9, 0, 6, 3, 10, 7, 5, 1});
    std::vector<T> ps;
    for (const auto& [name, p] : m.named_parameters())
      if (name.find("layers.1.") == std::string::npos || name.find("_proj.") != std::string::npos ||
          name.find("norm") != std::string::npos)
        ps.push_back(p);
    remat_test::GradcheckOptions o;
    o.max_elems = 6;
    remat_test::gradcheck(tape, [&](const std::vector<T>&) { return m.loss(ids, tgt); }, ps, o);
  }
}

TEST_CASE("a checkpointed Llama step gives the plain step's loss and gradients, bit for bit",
          "[nn][llama][checkpoint]") {
  for (const DType precision : {DType::f32, DType::bf16})
    for (const std::string type : {"llama", "qwen2", "qwen3"}) {
      nn::LlamaConfig c = tiny_llama(type);
      c.precision = precision;
      const auto plain = llama_step(c);
      REQUIRE(plain.size() > 20);
      for (std::size_t i = 1; i < plain.size(); ++i) {  // every parameter takes part (an untied
        INFO(type << ": parameter " << i - 1);           // head that read the embedding would not)
        bool nonzero = false;
        for (const float g : plain[i]) nonzero = nonzero || g != 0.0f;
        CHECK(nonzero);
      }
      for (const char* s : {"block", "every:2", "sqrt", "save_linear"}) {
        INFO(type << " " << dtype_name(precision) << ", checkpoint " << s);
        c.checkpoint = nn::CheckpointStrategy::parse(s);
        const auto ck = llama_step(c);
        REQUIRE(ck.size() == plain.size());
        for (std::size_t i = 0; i < ck.size(); ++i) {
          INFO((i == 0 ? std::string("the loss") : "the gradient of parameter " + std::to_string(i - 1)));
          REQUIRE(ck[i].size() == plain[i].size());
          CHECK(std::memcmp(ck[i].data(), plain[i].data(), ck[i].size() * sizeof(float)) == 0);
        }
      }
    }
}

TEST_CASE("the shape-only estimate of a Llama step is the ledger's peak, to the byte",
          "[nn][llama][estimate]") {
  for (const char* s : {"none", "block", "save_linear"}) {
    INFO("checkpoint " << s);
    nn::LlamaConfig c = tiny_llama("qwen3");
    c.checkpoint = nn::CheckpointStrategy::parse(s);
    auto program = [&](auto& tape) {
      using B = typename std::decay_t<decltype(tape)>::backend;
      nn::Llama<B> m(tape, c);
      const auto ids = tape.tokens({2, 9}, llama_ids(18, c.vocab_size, 5, 1));
      const auto tgt = tape.tokens({2, 9}, llama_ids(18, c.vocab_size, 7, 3));
      tape.backward(m.loss(ids, tgt));
    };
    const MemoryStats est = estimate_memory<Cpu>([&](auto& tape) { program(tape); });
    const MemoryStats before = memory_stats<Cpu>();
    reset_peak_memory<Cpu>();
    {
      Tape<Cpu> tape;
      program(tape);
    }
    const std::int64_t real = memory_stats<Cpu>().peak_total - before.live_total;
    CHECK(real > 0);
    CHECK(est.peak_total == real);
  }
}

TEST_CASE("Llama errors say what, where and what was expected", "[nn][llama]") {
  Tape<Cpu> tape;
  nn::LlamaConfig c = tiny_llama();
  c.num_kv_heads = 3;
  remat_test::require_error([&] { nn::Llama<Cpu> m(tape, c); },
                                 {"remat::nn::Llama", "4 attention heads and 3 key/value heads"});
  c = tiny_llama();
  c.precision = DType::i32;
  remat_test::require_error([&] { nn::Llama<Cpu> m(tape, c); }, {"remat::nn::Llama", "precision i32"});
  c = tiny_llama();
  nn::Llama<Cpu> m(tape, c);
  remat_test::require_error([&] { (void)m.loss(tape.zeros({2, 3}), tape.zeros({2, 3})); },
                                 {"remat::nn::Llama", "token ids", "expected i32 [B, T]"});
}
