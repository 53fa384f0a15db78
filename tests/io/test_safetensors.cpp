// SPDX-License-Identifier: MIT
// safetensors, llm.c .bin files and GPT-2 weights: round trips, and every lie a file can tell
// caught with a clear error before any data is used.

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include <remat/data/tokens.hpp>
#include <remat/io/gpt2.hpp>
#include <remat/remat.hpp>

#include "support/catch.hpp"

using namespace remat;

namespace {
std::string tmp(const std::string& name) { return "remat_test_" + name; }

void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
  f << header << data;
}
}  // namespace

TEST_CASE("safetensors round-trips tensors and metadata", "[io]") {
  const std::string p = tmp("rt.safetensors");
  io::write_safetensors(p, {{"a", {Shape{2, 3}, {1, 2, 3, 4, 5, 6}}}, {"b", {Shape{1}, {-7.5f}}}},
                        {{"note", "hello"}});
  const auto f = io::read_safetensors(p);
  REQUIRE(f.tensors.size() == 2);
  CHECK(f.tensors.at("a").shape == Shape{2, 3});
  CHECK(f.tensors.at("a").data == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(f.tensors.at("b").data == std::vector<float>{-7.5f});
  CHECK(f.metadata.at("note") == "hello");
  std::remove(p.c_str());
}

TEST_CASE("safetensors headers that lie are rejected before the data is used", "[io][errors]") {
  const std::string p = tmp("bad.safetensors");
  const std::string eight(8, '\0');
  REQUIRE_THROWS_WITH(io::read_safetensors(tmp("does-not-exist")), REMAT_CONTAINS("cannot open"));
  { std::ofstream(p, std::ios::binary) << "abc"; }
  REQUIRE_THROWS_WITH(io::read_safetensors(p), REMAT_CONTAINS("has 3 bytes; a safetensors file has at least 8"));
  write_raw(p, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight);
  { std::ofstream f(p, std::ios::binary | std::ios::in); f.put('\xff'); }  // header length 255...
  REQUIRE_THROWS_WITH(io::read_safetensors(p), REMAT_CONTAINS("says its header has"));
  write_raw(p, "{not json", eight);
  REQUIRE_THROWS_WITH(io::read_safetensors(p), REMAT_CONTAINS("is not valid JSON"));
  write_raw(p, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", eight);
  REQUIRE_THROWS_WITH(io::read_safetensors(p), REMAT_CONTAINS("data_offsets [0, 16] outside the 8 bytes"));
  write_raw(p, R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight);
  REQUIRE_THROWS_WITH(io::read_safetensors(p), REMAT_CONTAINS("has shape [3] F32 (12 bytes) but data_offsets span 8"));
  write_raw(p, R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", eight);
  REQUIRE_THROWS_WITH(io::read_safetensors(p), REMAT_CONTAINS("has dtype I64 (expected F32, F16 or BF16)"));
  write_raw(p, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight);
  REQUIRE_THROWS_WITH(io::read_safetensors(p), REMAT_CONTAINS("overlap"));
  write_raw(p, R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight);
  REQUIRE_THROWS_WITH(io::read_safetensors(p), REMAT_CONTAINS("bad dimension -2"));
  write_raw(p, R"({"a":{"shape":[2],"data_offsets":[0,8]}})", eight);
  REQUIRE_THROWS_WITH(io::read_safetensors(p), REMAT_CONTAINS("lacks dtype, shape or data_offsets"));
  std::remove(p.c_str());
}

TEST_CASE("F16 and BF16 tensors load as fp32", "[io]") {
  const std::string p = tmp("half.safetensors");
  // 1.0 and -2.5 in F16 (0x3c00, 0xc100) and BF16 (0x3f80, 0xc020)
  write_raw(p, R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}})",
            std::string("\x00\x3c\x00\xc1\x80\x3f\x20\xc0", 8));
  const auto f = io::read_safetensors(p);
  CHECK(f.tensors.at("h").data == std::vector<float>{1.0f, -2.5f});
  CHECK(f.tensors.at("b").data == std::vector<float>{1.0f, -2.5f});
  std::remove(p.c_str());
}

TEST_CASE("BF16 tensors kept as stored, written as BF16", "[io][bf16]") {
  const std::string p = tmp("bf16.safetensors");
  const std::vector<float> v = {1.0f, -2.5f, 3.14159265f, 1e-40f, 3.4e38f, 0.1f};
  io::HostTensor w{Shape{2, 3}, v};
  const io::HostTensor h = io::rounded_to_bf16(w);
  CHECK(h.dtype == DType::bf16);
  CHECK(h.data.empty());
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(h.bf16_data[i].bits == math::to_bf16(v[i]).bits);
  io::write_safetensors(p, {{"half", h}, {"full", w}});
  {  // the file: a BF16 tensor of 12 bytes, then the F32 one of 24
    std::ifstream in(p, std::ios::binary);
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(all.find(R"("dtype":"BF16")") != std::string::npos);
    CHECK(all.find(R"("data_offsets":[0,12])") != std::string::npos);
    CHECK(all.find(R"("data_offsets":[12,36])") != std::string::npos);
  }
  const auto kept = io::read_safetensors(p, io::OtherDtypes::error, io::Bf16::keep);
  const io::HostTensor& k = kept.tensors.at("half");
  CHECK(k.dtype == DType::bf16);
  CHECK(k.data.empty());
  REQUIRE(k.bf16_data.size() == 6);
  for (std::size_t i = 0; i < 6; ++i) CHECK(k.bf16_data[i].bits == h.bf16_data[i].bits);
  CHECK(kept.tensors.at("full").dtype == DType::f32);
  CHECK(kept.tensors.at("full").data == v);
  const auto widened = io::read_safetensors(p);  // the default: BF16 widened to fp32
  CHECK(widened.tensors.at("half").dtype == DType::f32);
  CHECK(widened.tensors.at("half").data == k.values());
  CHECK(widened.tensors.at("half").data[2] == 3.140625f);
  // a bf16 tensor whose values do not fit its shape, or that holds both kinds
  io::HostTensor bad = h;
  bad.bf16_data.pop_back();
  REQUIRE_THROWS_WITH(io::write_safetensors(p, {{"bad", bad}}),
                      REMAT_CONTAINS("tensor 'bad' has shape [2, 3] but 5 bf16 values"));
  bad = h;
  bad.data = {1.0f};
  REQUIRE_THROWS_WITH(io::write_safetensors(p, {{"bad", bad}}),
                      REMAT_CONTAINS("and values of the other type too"));
  std::remove(p.c_str());
}

TEST_CASE("GPT-2 weights: config from shapes, load, save, and shapes that do not fit", "[io]") {
  const std::string p = tmp("gpt2.safetensors");
  Tape<Cpu> tape;
  nn::GPTConfig c;
  c.vocab_size = 50;
  c.block_size = 12;
  c.n_layer = 3;
  c.n_embd = 128;
  c.n_head = 2;
  nn::GPT<Cpu> a(tape, c);
  io::save_gpt2(p, a);
  const auto w = io::gpt2_tensors(io::read_safetensors(p));
  const auto c2 = io::gpt2_config(w, p);
  CHECK(c2.vocab_size == 50);
  CHECK(c2.block_size == 12);
  CHECK(c2.n_layer == 3);
  CHECK(c2.n_embd == 128);
  CHECK(c2.n_head == 2);  // d / 64
  c.seed = 99;
  nn::GPT<Cpu> b(tape, c);
  io::load_gpt2(w, b, p);
  for (std::size_t i = 0; i < a.parameters().size(); ++i)
    CHECK(a.parameters()[i].to_vector() == b.parameters()[i].to_vector());
  c.n_embd = 64;
  nn::GPT<Cpu> wrong(tape, c);
  REQUIRE_THROWS_WITH(io::load_gpt2(w, wrong, p),
                      REMAT_CONTAINS("'wte.weight' in 'remat_test_gpt2.safetensors' has shape [50, 128] "
                                     "but the model needs [50, 64]"));
  REQUIRE_THROWS_WITH(io::gpt2_config({}, p), REMAT_CONTAINS("has no tensor 'wte.weight'"));
  std::remove(p.c_str());
}

TEST_CASE("GPT-2 weights in BF16: saved rounded from the masters, read as two bytes, widened into "
          "the parameters once", "[io][bf16]") {
  const std::string p = tmp("gpt2_bf16.safetensors"), q = tmp("gpt2_bf16_head.safetensors");
  Tape<Cpu> tape;
  nn::GPTConfig c;
  c.vocab_size = 37;
  c.vocab_multiple = 8;  // 40 rows in the model, 37 in the file: the padding is filled with 0
  c.block_size = 6;
  c.n_layer = 2;
  c.n_embd = 32;
  c.n_head = 2;
  nn::GPT<Cpu> a(tape, c);
  REQUIRE_THROWS_WITH(io::save_gpt2(p, a, DType::i32), REMAT_CONTAINS("dtype i32 for"));
  io::save_gpt2(p, a, DType::bf16);
  // the file: every tensor BF16, two bytes a value
  const io::SafetensorsFile raw = io::read_safetensors(p, io::OtherDtypes::error, io::Bf16::keep);
  std::int64_t values = 0;
  for (const auto& [name, t] : raw.tensors) {
    INFO(name);
    CHECK(t.dtype == DType::bf16);
    CHECK(t.data.empty());
    values += t.shape.numel();
  }
  // read_gpt2 keeps them as stored: no fp32 copy of the file on the host
  const io::Gpt2Weights g = io::read_gpt2(p);
  CHECK(g.n_head == 2);
  for (const auto& [name, t] : g.tensors) {
    INFO(name);
    CHECK(t.dtype == DType::bf16);
    CHECK(t.data.empty());
  }
  CHECK(g.tensors.at("wte.weight").shape == (Shape{37, 32}));
  REQUIRE(io::gpt2_config(g.tensors, p).vocab_size == 37);
  c.seed = 5;
  nn::GPT<Cpu> b(tape, c);
  Cpu::fill(b.wte.weight.mutable_data<float>(), b.wte.weight.numel(), 1.0f);
  io::load_gpt2(g.tensors, b, p);
  // each parameter is round_bf16 of a's master, bit for bit; the padding rows are 0
  std::int64_t loaded = 0;
  for (std::size_t i = 0; i < a.parameters().size(); ++i) {
    const std::vector<float> av = a.parameters()[i].to_vector(), bv = b.parameters()[i].to_vector();
    const std::size_t kept = static_cast<std::size_t>(a.saved_shape(i).numel());
    REQUIRE(av.size() == bv.size());
    loaded += static_cast<std::int64_t>(kept);
    for (std::size_t j = 0; j < av.size(); ++j) {
      const float want = j < kept ? math::round_bf16(av[j]) : 0.0f;
      INFO(a.named_parameters()[i].first << " element " << j);
      REQUIRE(std::memcmp(&bv[j], &want, 4) == 0);
    }
  }
  CHECK(loaded == values);
  // an F32 save of b reads back as the same values: the BF16 round trip is exact from there
  io::save_gpt2(q, b);
  const io::Gpt2Weights f = io::read_gpt2(q);
  for (const auto& [name, t] : f.tensors) {
    INFO(name);
    REQUIRE(t.dtype == DType::f32);
    const io::HostTensor& h = g.tensors.at(name);
    for (std::size_t j = 0; j < t.data.size(); ++j) REQUIRE(t.data[j] == h.value(j));
  }
  // a BF16 lm_head.weight tied to the BF16 wte: read bit for bit, a one-bit difference refused
  std::vector<std::pair<std::string, io::HostTensor>> ts;
  for (const auto& [name, t] : raw.tensors) ts.emplace_back(name, t);
  ts.emplace_back("lm_head.weight", raw.tensors.at("wte.weight"));
  io::write_safetensors(q, ts);
  CHECK(io::read_gpt2(q).tensors.count("lm_head.weight") == 0);
  ts.back().second.bf16_data[70].bits ^= 1;
  io::write_safetensors(q, ts);
  REQUIRE_THROWS_WITH(io::read_gpt2(q), REMAT_CONTAINS("has lm_head.weight that differs from "
                                                       "wte.weight (element 70"));
  std::remove(p.c_str());
  std::remove(q.c_str());
}

TEST_CASE("read_gpt2: the head count from the metadata or config.json, other dtypes skipped", "[io]") {
  Tape<Cpu> tape(1);
  nn::GPTConfig c;
  c.vocab_size = 20;
  c.block_size = 4;
  c.n_layer = 1;
  c.n_embd = 16;
  c.n_head = 4;  // not d / 64: only the metadata can tell
  nn::GPT<Cpu> a(tape, c);
  const std::string dir = tmp("gpt2dir");
  ::mkdir(dir.c_str(), 0755);
  const std::string p = dir + "/model.safetensors", cfg = dir + "/config.json";
  io::save_gpt2(p, a);
  const io::Gpt2Weights g = io::read_gpt2(p);
  CHECK(g.n_head == 4);
  CHECK(g.n_head_source.find("metadata") != std::string::npos);
  CHECK(g.skipped.empty());
  CHECK(io::gpt2_config(g.tensors, p, g.n_head).n_head == 4);

  // Without the metadata: config.json beside the weights, as Hugging Face ships a model.
  std::vector<std::pair<std::string, io::HostTensor>> ts;
  for (auto& [name, t] : g.tensors) ts.emplace_back(name, t);
  io::write_safetensors(p, ts, {{"format", "pt"}});
  CHECK(io::read_gpt2(p).n_head == 0);  // recorded nowhere
  std::ofstream(cfg) << R"({"n_embd": 16, "n_head": 4})";
  CHECK(io::read_gpt2(p).n_head == 4);
  std::ofstream(cfg) << R"({"n_embd": 32, "n_head": 4})";
  REQUIRE_THROWS_WITH(io::read_gpt2(p), REMAT_CONTAINS("has n_embd 32, but the weights"));
  std::ofstream(cfg) << R"({"n_head": -4})";
  REQUIRE_THROWS_WITH(io::read_gpt2(p), REMAT_CONTAINS("'n_head' of"));
  std::ofstream(cfg) << "{not json";
  REQUIRE_THROWS_WITH(io::read_gpt2(p), REMAT_CONTAINS("is not valid JSON"));
  std::remove(cfg.c_str());
  io::write_safetensors(p, ts, {{"n_head", "4x"}});
  REQUIRE_THROWS_WITH(io::read_gpt2(p), REMAT_CONTAINS("is '4x' (expected a head count"));

  // A BOOL mask buffer (h.0.attn.bias, as Hugging Face files carry) is listed, not an error;
  // read_safetensors alone still refuses it; a BOOL parameter is an error.
  const std::string q = tmp("bool.safetensors");
  {
    // the GPT-2 above (every tensor is required), with a BOOL buffer after its data
    const io::SafetensorsFile full = io::read_safetensors(p);
    nlohmann::json h = nlohmann::json::object();
    std::string data;
    for (const auto& [name, t] : full.tensors) {
      h[name] = {{"dtype", "F32"}, {"shape", t.shape.vec()}, {"data_offsets", {data.size(), data.size() + 4 * t.data.size()}}};
      data.append(reinterpret_cast<const char*>(t.data.data()), 4 * t.data.size());
    }
    h["h.0.attn.bias"] = {{"dtype", "BOOL"}, {"shape", {1, 1, 2, 2}}, {"data_offsets", {data.size(), data.size() + 4}}};
    write_raw(q, h.dump(), data + std::string(4, '\1'));
  }
  const io::Gpt2Weights b = io::read_gpt2(q);
  REQUIRE(b.skipped.size() == 1);
  CHECK(b.skipped[0] == "h.0.attn.bias (BOOL)");
  CHECK(b.tensors.size() == g.tensors.size());
  CHECK(b.tensors.count("h.0.ln_1.weight") == 1);
  REQUIRE_THROWS_WITH(io::read_safetensors(q), REMAT_CONTAINS("has dtype BOOL (expected F32, F16 or BF16)"));
  // the listed tensor's header is still checked: 2 x 2 BOOL is 4 bytes, not 3
  write_raw(q, R"({"h.0.attn.bias":{"dtype":"BOOL","shape":[1,1,2,2],"data_offsets":[0,3]}})", "abc");
  REQUIRE_THROWS_WITH(io::read_gpt2(q), REMAT_CONTAINS("but data_offsets span 3 bytes"));
  write_raw(q, R"({"transformer.wte.weight":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
            std::string(8, '\0'));
  REQUIRE_THROWS_WITH(io::read_gpt2(q), REMAT_CONTAINS("has dtype I64 (expected F32, F16 or BF16: the model uses"));
  std::remove(q.c_str());
  std::remove(p.c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("llm.c .bin files: round trip, wrong magic, truncation", "[io][data]") {
  const std::string p = tmp("tokens.bin");
  std::vector<std::int32_t> t(100);
  for (int i = 0; i < 100; ++i) t[static_cast<std::size_t>(i)] = (i * 977) % 50257;
  data::write_llmc_bin(p, t);
  CHECK(data::read_llmc_bin(p) == t);
  {
    std::fstream f(p, std::ios::binary | std::ios::in | std::ios::out);
    f.put('\x01');  // spoil the magic
  }
  REQUIRE_THROWS_WITH(data::read_llmc_bin(p), REMAT_CONTAINS("expected 20240520 (is it an llm.c tokenized .bin file?)"));
  data::write_llmc_bin(p, t);
  {
    std::ifstream in(p, std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(p, std::ios::binary) << all.substr(0, all.size() - 10);
  }
  REQUIRE_THROWS_WITH(data::read_llmc_bin(p), REMAT_CONTAINS("declares 100 tokens (1224 bytes with the header) but has 1214"));
  { std::ofstream(p, std::ios::binary) << "short"; }
  REQUIRE_THROWS_WITH(data::read_llmc_bin(p), REMAT_CONTAINS("less than the 1024-byte header"));
  REQUIRE_THROWS_WITH(data::read_llmc_bin(tmp("nope.bin")), REMAT_CONTAINS("cannot open"));
  std::remove(p.c_str());
}

TEST_CASE("batches follow llm.c's loader: B*T+1 tokens, advance B*T, wrap", "[data]") {
  std::vector<std::int32_t> t(20);
  for (int i = 0; i < 20; ++i) t[static_cast<std::size_t>(i)] = i;
  data::Batcher b(t, 2, 3);  // 6 per batch
  std::vector<std::int32_t> x, y;
  b.next(x, y);
  CHECK(x == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5});
  CHECK(y == std::vector<std::int32_t>{1, 2, 3, 4, 5, 6});
  b.next(x, y);
  CHECK(x.front() == 6);
  b.next(x, y);
  CHECK(x.front() == 12);  // 12 + 6 + 1 = 19 <= 20
  b.next(x, y);
  CHECK(x.front() == 0);   // 18 + 7 > 20: wrap
  REQUIRE_THROWS_WITH(data::Batcher(t, 4, 5), REMAT_CONTAINS("20 tokens are too few for one batch of 4 x 5"));
}
