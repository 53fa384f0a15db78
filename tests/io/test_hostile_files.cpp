// SPDX-License-Identifier: MIT
// Hostile files of issue 24: nested JSON where a number belongs (no recursion in error paths),
// size caps and a depth limit before parsing, a safetensors header validated before the data is
// read, GPT-2 files that lack a tensor or name one twice, snapshots that lack optimizer state,
// and "-0" in snapshot integers. Time and memory are measured in a child process (fork), so
// the numbers are the reader's own. The files too large to commit (151 MB headers, parses under
// `ulimit -v`) are in test_hostile_large.sh.

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <typeinfo>

#include <remat/data/tokens.hpp>
#include <remat/io/gpt2.hpp>
#include <remat/io/json.hpp>
#include <remat/io/snapshot.hpp>
#include <remat/remat.hpp>

#include "support/catch.hpp"
#include "support/proc_status.hpp"
#include "support/require_error.hpp"

using namespace remat;

namespace {

using remat_test::status_kib;
std::string i24_tmp(const std::string& name) { return "remat_test_i24_" + name; }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>(n >> (8 * i));
  return s;
}

void i24_raw(const std::string& path, const std::string& header, const std::string& data = "") {
  write_bytes(path, le64(header.size()) + header + data);
}

std::string nested(std::size_t levels, const std::string& inner = "") {
  return std::string(levels, '[') + inner + std::string(levels, ']');
}

using remat_test::require_error;

// Under AddressSanitizer (tests/sanitize.sh) memory is shadowed and freed memory quarantined:
// resident-memory bounds are not the reader's, so only outcomes and messages are checked.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

// What a reader did in a child process: its outcome ("error", "oom", "ok", "other: ..."), its
// message, its seconds and how far its resident memory grew above the fork's (MiB).
struct Child {
  std::string outcome, message;
  double seconds = -1, rss_growth_mib = -1;
};

template <class Fn>
Child in_child(Fn&& fn) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    remat_test::reset_peak_rss();  // peak RSS := current RSS (Linux >= 4.0)
    const long rss0 = status_kib("VmRSS:");
    std::string outcome = "ok", message;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      fn();
    } catch (const OutOfMemory& e) {
      outcome = "oom";
      message = e.what();
    } catch (const Error& e) {
      outcome = "error";
      message = e.what();
    } catch (const std::exception& e) {
      outcome = std::string("other: ") + typeid(e).name();
      message = e.what();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const long hwm = status_kib("VmHWM:");
    std::ostringstream out;
    out << outcome << "\n" << s << "\n" << (hwm - rss0) / 1024.0 << "\n" << message;
    const std::string text = out.str();
    if (::write(fds[1], text.data(), text.size()) < 0) ::_exit(3);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  for (::ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  Child c;
  if (kAsan) c.rss_growth_mib = 0;  // not measured (see kAsan)
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    c.outcome = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                    : "exit " + std::to_string(WEXITSTATUS(status));
    return c;
  }
  std::istringstream in(text);
  std::string s, g;
  std::getline(in, c.outcome);
  std::getline(in, s);
  std::getline(in, g);
  c.seconds = std::stod(s);
  c.rss_growth_mib = kAsan ? 0 : std::stod(g);
  c.message.assign(std::istreambuf_iterator<char>(in), {});
  return c;
}

// A sparse file of `size` bytes that starts with `head` (no disk blocks for the rest).
void write_sparse(const std::string& path, const std::string& head, std::uint64_t size) {
  write_bytes(path, head);
  REQUIRE(::truncate(path.c_str(), static_cast<off_t>(size)) == 0);
}

nn::GPTConfig tiny_gpt(std::int64_t layers) {
  nn::GPTConfig c;
  c.vocab_size = 8;
  c.block_size = 4;
  c.n_layer = layers;
  c.n_embd = 4;
  c.n_head = 1;
  return c;
}

// The tensors of a GPT-2 with config c, every value distinct, under `prefix`.
std::vector<std::pair<std::string, io::HostTensor>> gpt2_file_tensors(const nn::GPTConfig& c,
                                                                      const std::string& prefix = "") {
  std::vector<std::pair<std::string, io::HostTensor>> ts;
  float x = 0.0f;
  for (const auto& [name, shape] : io::gpt2_shapes(c)) {
    io::HostTensor t{shape, std::vector<float>(static_cast<std::size_t>(shape.numel()))};
    for (float& v : t.data) v = (x += 0.25f);
    ts.emplace_back(prefix + name, std::move(t));
  }
  return ts;
}

void erase(std::vector<std::pair<std::string, io::HostTensor>>& ts, const std::string& name) {
  for (auto it = ts.begin(); it != ts.end(); ++it)
    if (it->first == name) {
      ts.erase(it);
      return;
    }
  FAIL("no tensor " << name);
}

const io::HostTensor& find(const std::vector<std::pair<std::string, io::HostTensor>>& ts,
                           const std::string& name) {
  for (const auto& kv : ts)
    if (kv.first == name) return kv.second;
  throw std::logic_error("no tensor " + name);
}

// read_gpt2, gpt2_config and load_gpt2, as train_gpt --init-from runs them.
nn::GPTConfig load_as_trainer(const std::string& path) {
  io::Gpt2Weights g = io::read_gpt2(path);
  const nn::GPTConfig c = io::gpt2_config(g.tensors, path, g.n_head);
  Tape<Cpu> tape(1);
  nn::GPT<Cpu> model(tape, c);
  io::load_gpt2(g.tensors, model, path);
  return c;
}
}  // namespace

// ---- 1. no recursion on file values in error paths

TEST_CASE("nested JSON where a safetensors dimension or offset belongs is an error naming the field",
          "[io][hostile][issue24]") {
  const std::string p = i24_tmp("nested.safetensors");
  struct Case {
    std::string header, field;
  };
  // ~85,000 levels (170 KB) overflowed the 8 MiB stack in dump() while the error was written.
  const Case cases[] = {
      {R"({"w":{"dtype":"F32","shape":[)" + nested(85000) + R"(],"data_offsets":[0,0]}})",
       "bad dimension (an array) in field 'shape'"},
      {R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[)" + nested(85000) + R"(,0]}})",
       "bad value (an array) in field 'data_offsets'"},
      {R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[0,)" + nested(85000, "{}") + R"(]}})",
       "bad value (an array) in field 'data_offsets'"},
      {R"({"w":{"dtype":)" + nested(85000) + R"(,"shape":[0],"data_offsets":[0,0]}})",
       "field 'dtype' an array (expected a string"},
      {R"({"w":{"dtype":"F32","shape":[{"a":)" + nested(85000) + R"(}],"data_offsets":[0,0]}})",
       "bad dimension (an object) in field 'shape'"},
  };
  for (const Case& c : cases) {
    INFO(c.field);
    i24_raw(p, c.header);
    const Child r = in_child([&] { io::read_safetensors(p); });
    INFO(r.message);
    REQUIRE(r.outcome == "error");
    CHECK(r.message.find("tensor 'w' of '" + p + "'") != std::string::npos);
    CHECK(r.message.find(c.field) != std::string::npos);
    CHECK(r.seconds < 1.0);
    CHECK(r.rss_growth_mib < 100);
  }
  // Deep nesting in a field the reader ignores, or in the metadata: the depth limit, with the
  // place it was found.
  i24_raw(p, R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[0,0],"x":)" + nested(85000) + "}}");
  require_error([&] { io::read_safetensors(p); },
                {"the header of '" + p + "'", "nests deeper than 64 levels at /w/x/0/0/0/0/0/0/..."});
  i24_raw(p, R"({"__metadata__":{"k":)" + nested(85000) + "}}");
  require_error([&] { io::read_safetensors(p); }, {"nests deeper than 64 levels at /__metadata__/k/0"});
  std::remove(p.c_str());
}

TEST_CASE("nested n_head or n_embd in a config.json beside GPT-2 weights is an error naming the field",
          "[io][hostile][issue24]") {
  const std::string dir = i24_tmp("gpt2cfg");
  ::mkdir(dir.c_str(), 0755);
  const std::string p = dir + "/model.safetensors", cfg = dir + "/config.json";
  io::write_safetensors(p, gpt2_file_tensors(tiny_gpt(1)));  // no n_head in the metadata
  for (const char* field : {"n_head", "n_embd"}) {
    INFO(field);
    // 85,000 levels: refused by the depth limit before any DOM exists, with the place.
    write_bytes(cfg, std::string("{\"") + (field == std::string("n_head") ? "n_embd\": 4" : "n_head\": 1") +
                         ", \"" + field + "\": " + nested(85000, "1") + "}");
    const Child r = in_child([&] { io::read_gpt2(p); });
    INFO(r.message);
    REQUIRE(r.outcome == "error");
    CHECK(r.message.find("config.json beside the weights '" + cfg + "'") != std::string::npos);
    CHECK(r.message.find(std::string("nests deeper than 64 levels at /") + field + "/0/0/") != std::string::npos);
    CHECK(r.seconds < 1.0);
    CHECK(r.rss_growth_mib < 100);
    // Under the depth limit, the message describes the value without printing it.
    write_bytes(cfg, std::string("{\"") + (field == std::string("n_head") ? "n_embd\": 4" : "n_head\": 1") +
                         ", \"" + field + "\": " + nested(60, "1") + "}");
    require_error([&] { io::read_gpt2(p); }, {std::string(field), "'" + cfg + "'", "an array of 1 element"});
  }
  // A config.json larger than any real one is refused from its size, before it is read.
  write_bytes(cfg, "{\"n_head\": 1, \"pad\": \"" + std::string(io::kConfigJsonMaxBytes, 'x') + "\"}");
  require_error([&] { io::read_gpt2(p); }, {"'" + cfg + "' has 1048", "more than the 1048576 bytes allowed for a config.json"});
  // A key twice: which value is meant?
  write_bytes(cfg, R"({"n_head": 1, "n_head": 4})");
  require_error([&] { io::read_gpt2(p); }, {"the key \"n_head\" appears twice"});
  std::remove(cfg.c_str());
  std::remove(p.c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("json_brief describes a value 100,000 levels deep without recursion", "[io][hostile][issue24]") {
  nlohmann::json v = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) {
    nlohmann::json outer = nlohmann::json::array();
    outer.push_back(std::move(v));
    v = std::move(outer);
  }
  CHECK(io::json_brief(v) == "an array of 1 element");
  CHECK(io::json_brief(nlohmann::json::object({{"a", 1}, {"b", 2}})) == "an object of 2 keys");
  CHECK(io::json_brief(nlohmann::json(std::string(100, 'x'))) == "\"" + std::string(40, 'x') + "\"...");
  CHECK(io::json_brief(nlohmann::json(-3)) == "-3");
}

// ---- 2. caps and limits before parsing; parse_json's own checks

TEST_CASE("parse_json refuses text over its cap, too deep, with too many values or a key twice",
          "[io][hostile][issue24]") {
  const io::JsonLimits lim{100, 3, 10};
  const auto parse = [&](const std::string& t) { return io::parse_json(t, lim, "test", "file", "f.json"); };
  CHECK(parse(R"({"a":[[1]]})")["a"][0][0] == 1);  // 3 levels: fine
  require_error([&] { parse(R"({"a":[[[1]]]})"); },
                {"test: the file 'f.json' cannot be used: it nests deeper than 3 levels at /a/0/0"});
  require_error([&] { parse("[1,2,3,4,5,6,7,8,9,10]"); }, {"more than 10 JSON values"});
  require_error([&] { parse(std::string(101, ' ')); }, {"has 101 bytes, more than the 100 allowed"});
  require_error([&] { parse(R"({"a":1,"b":{"c":1,"c":2}})"); }, {"the key \"c\" appears twice in one object at /b"});
  require_error([&] { parse("{\"a\":1"); }, {"is not valid JSON"});
  require_error([&] { parse("{\"a\":\"\xff\"}"); }, {"is not valid JSON"});
  // the DOM equals nlohmann's own parse (numbers of each kind, strings, nesting, key order)
  const std::string t = R"({"z":[1,-2,3.5,"s",null,true,{"k":[]}],"a":{}})";
  CHECK(io::parse_json(t, {}, "test", "file", "f.json") == nlohmann::json::parse(t));
}

TEST_CASE("a safetensors header over 100 MB is refused from its length, before it is read",
          "[io][hostile][issue24]") {
  const std::string p = i24_tmp("bighead.safetensors");
  // the length field says 151 MB and the file has them (sparse: no disk blocks)
  write_sparse(p, le64(151'000'000) + "{\"a\":[{},{},{}", 8 + 151'000'000);
  const Child r = in_child([&] { io::read_safetensors(p); });
  INFO(r.message);
  REQUIRE(r.outcome == "error");
  CHECK(r.message.find("'" + p + "' says its header has 151000000 bytes, more than the 100000000") !=
        std::string::npos);
  CHECK(r.seconds < 1.0);
  CHECK(r.rss_growth_mib < 20);  // the header was not read
  std::remove(p.c_str());
}

TEST_CASE("read_safetensors checks the header before it reads the data, and reads each tensor once",
          "[io][hostile][issue24]") {
  const std::string p = i24_tmp("lazy.safetensors");
  const std::uint64_t mib = 1 << 20;
  // A bad header before 512 MiB of data: refused without reading the data.
  std::string h = R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})";
  write_sparse(p, le64(h.size()) + h, 8 + h.size() + 512 * mib);
  Child r = in_child([&] { io::read_safetensors(p); });
  INFO(r.message);
  REQUIRE(r.outcome == "error");
  CHECK(r.message.find("has dtype I64") != std::string::npos);
  CHECK(r.rss_growth_mib < 20);
  // One 128 MiB F32 tensor: memory for the tensor, not for the file and then the tensor.
  h = R"({"w":{"dtype":"F32","shape":[33554432],"data_offsets":[0,134217728]}})";
  write_sparse(p, le64(h.size()) + h, 8 + h.size() + 128 * mib);
  r = in_child([&] {
    const auto f = io::read_safetensors(p);
    REMAT_CHECK(f.tensors.at("w").data.size() == 33554432 && f.tensors.at("w").data[12345] == 0.0f, "wrong data");
  });
  INFO(r.message);
  REQUIRE(r.outcome == "ok");
  CHECK((kAsan || r.rss_growth_mib > 120));
  CHECK(r.rss_growth_mib < 170);  // reading the file whole first took 256 MiB
  // The same file through a pipe still loads (read to its end: it has no size to check).
  r = in_child([&] {
    int fds[2];
    REMAT_CHECK(::pipe(fds) == 0, "pipe");
    if (::fork() == 0) {
      ::close(fds[0]);
      std::ifstream in(p, std::ios::binary);
      char buf[65536];
      while (in.read(buf, sizeof buf) || in.gcount() > 0)
        if (::write(fds[1], buf, static_cast<std::size_t>(in.gcount())) < 0) break;
      ::_exit(0);
    }
    ::close(fds[1]);
    const auto f = io::read_safetensors("/proc/self/fd/" + std::to_string(fds[0]));
    REMAT_CHECK(f.tensors.at("w").data.size() == 33554432, "wrong data");
  });
  INFO(r.message);
  CHECK(r.outcome == "ok");
  std::remove(p.c_str());
}

TEST_CASE("safetensors shapes with a zero dimension are checked the same in any order",
          "[io][hostile][issue24]") {
  const std::string p = i24_tmp("zero.safetensors");
  for (const char* shape : {"[0,4611686018427387904]", "[4611686018427387904,0]"}) {
    INFO(shape);
    i24_raw(p, std::string(R"({"w":{"dtype":"F32","shape":)") + shape + R"(,"data_offsets":[0,0]}})");
    require_error([&] { io::read_safetensors(p); }, {"tensor 'w'", "field 'shape'", "overflows"});
  }
  for (const char* shape : {"[0,5]", "[5,0]", "[0]"}) {
    INFO(shape);
    i24_raw(p, std::string(R"({"w":{"dtype":"F32","shape":)") + shape + R"(,"data_offsets":[0,0]}})");
    CHECK(io::read_safetensors(p).tensors.at("w").data.empty());
  }
  std::remove(p.c_str());
}

// ---- 3. GPT-2 files: every tensor, nothing ambiguous

TEST_CASE("a GPT-2 file missing one tensor, or with a gap between layers, is refused naming it",
          "[io][gpt2][hostile][issue24]") {
  const std::string p = i24_tmp("gpt2_missing.safetensors");
  const nn::GPTConfig c = tiny_gpt(3);
  auto all = gpt2_file_tensors(c);
  io::write_safetensors(p, all);
  CHECK(load_as_trainer(p).n_layer == 3);  // complete: loads

  // Missing only h.1.ln_1.weight: loaded as a 1-layer model before.
  auto ts = all;
  erase(ts, "h.1.ln_1.weight");
  io::write_safetensors(p, ts);
  require_error([&] { load_as_trainer(p); },
                {"'" + p + "' has no tensor 'h.1.ln_1.weight', but it has tensors of 3 layers (up to h.2)"});
  // Any other tensor of a layer, and the top-level ones.
  for (const char* name : {"h.2.mlp.c_proj.bias", "h.0.attn.c_attn.weight", "ln_f.bias", "wpe.weight"}) {
    INFO(name);
    ts = all;
    erase(ts, name);
    io::write_safetensors(p, ts);
    require_error([&] { load_as_trainer(p); }, {std::string("has no tensor '") + name + "'"});
  }
  // A whole layer missing between complete ones: layers 0 and 2 were read as 1 layer before.
  ts = all;
  for (const char* t : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                        "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"})
    erase(ts, std::string("h.1.") + t);
  io::write_safetensors(p, ts);
  require_error([&] { load_as_trainer(p); }, {"has no tensor 'h.1.ln_1.weight'", "3 layers"});
  // gpt2_config on a map built by hand checks the same.
  io::write_safetensors(p, all);
  auto w = io::gpt2_tensors(io::read_safetensors(p), p);
  w.erase("h.2.ln_2.bias");
  require_error([&] { io::gpt2_config(w, p); }, {"remat::io::gpt2_config", "has no tensor 'h.2.ln_2.bias'"});
  std::remove(p.c_str());
}

TEST_CASE("a GPT-2 tensor under two names, or an unknown one, is refused; known buffers are skipped",
          "[io][gpt2][hostile][issue24]") {
  const std::string p = i24_tmp("gpt2_names.safetensors");
  const nn::GPTConfig c = tiny_gpt(2);
  const auto all = gpt2_file_tensors(c);
  // Both with and without "transformer.": picked silently before.
  auto ts = all;
  ts.emplace_back("transformer.h.1.attn.c_proj.bias", find(all, "h.1.attn.c_proj.bias"));
  io::write_safetensors(p, ts);
  require_error([&] { load_as_trainer(p); },
                {"has tensor 'h.1.attn.c_proj.bias' twice, as 'h.1.attn.c_proj.bias' and as "
                 "'transformer.h.1.attn.c_proj.bias'"});
  // Unknown tensors (another model's, a layer index with a leading zero, a typo).
  for (const char* name : {"h.0.attn.q_proj.weight", "h.01.ln_1.weight", "lm_head.bias", "wte.weights",
                           "h.0.ln_1.weight.x", "model.embed_tokens.weight"}) {
    INFO(name);
    ts = all;
    ts.emplace_back(name, io::HostTensor{Shape{1}, {1.0f}});
    io::write_safetensors(p, ts);
    require_error([&] { load_as_trainer(p); }, {std::string("has tensor '") + name + "', which is not a GPT-2 tensor"});
  }
  // A buffer of a layer the parameters do not reach: layers were dropped.
  ts = all;
  ts.emplace_back("h.4.attn.bias", io::HostTensor{Shape{1, 1, 4, 4}, std::vector<float>(16, 1.0f)});
  io::write_safetensors(p, ts);
  require_error([&] { load_as_trainer(p); }, {"has no tensor 'h.2.ln_1.weight'", "5 layers (up to h.4)"});
  // The known buffers (F32 here; BOOL in test_safetensors.cpp), with the prefix, and a tied
  // lm_head equal to wte: skipped, the model loads.
  ts.clear();
  for (const auto& kv : all) ts.emplace_back("transformer." + kv.first, kv.second);
  for (int l = 0; l < 2; ++l) {
    ts.emplace_back("transformer.h." + std::to_string(l) + ".attn.bias",
                    io::HostTensor{Shape{1, 1, 4, 4}, std::vector<float>(16, 1.0f)});
    ts.emplace_back("transformer.h." + std::to_string(l) + ".attn.masked_bias", io::HostTensor{Shape{}, {-1e4f}});
  }
  ts.emplace_back("lm_head.weight", find(all, "wte.weight"));
  io::write_safetensors(p, ts);
  CHECK(load_as_trainer(p).n_layer == 2);
  // An lm_head that differs from wte (remat ties them), in values or in shape.
  ts.back().second.data[5] += 1.0f;
  io::write_safetensors(p, ts);
  require_error([&] { load_as_trainer(p); }, {"has lm_head.weight that differs from wte.weight (element 5"});
  ts.back().second = io::HostTensor{Shape{4, 4}, std::vector<float>(16, 0.0f)};
  io::write_safetensors(p, ts);
  require_error([&] { load_as_trainer(p); }, {"has lm_head.weight of shape [4, 4] but wte.weight is [8, 4]"});
  std::remove(p.c_str());
}

TEST_CASE("load_gpt2 refuses a file with more layers than the model", "[io][gpt2][hostile][issue24]") {
  const std::string p = i24_tmp("gpt2_more.safetensors");
  io::write_safetensors(p, gpt2_file_tensors(tiny_gpt(3)));
  const auto w = io::read_gpt2(p).tensors;
  Tape<Cpu> tape(1);
  nn::GPT<Cpu> two(tape, tiny_gpt(2));  // flags that say 2 layers
  require_error([&] { io::load_gpt2(w, two, p); },
                {"has tensor 'h.2.", "which the model (2 layers, a GPT-2) does not have"});
  std::remove(p.c_str());
}

// ---- 4. snapshots

namespace {
nn::GPTConfig snap_config() {
  nn::GPTConfig c = tiny_gpt(1);
  c.n_embd = 8;
  c.n_head = 2;
  return c;
}
using NoSgd = optim::SGD<Cpu>*;
using NoAdamW = optim::AdamW<Cpu>*;

// One training step with AdamW or SGD, then a snapshot.
void step_and_save(const std::string& path, bool adamw) {
  Tape<Cpu> tape(5);
  nn::GPT<Cpu> model(tape, snap_config());
  optim::AdamW<Cpu> a(model.parameters(), {1e-2f});
  optim::SGD<Cpu> s(model.parameters(), {1e-2f, 0.9f, 0.0f, true});
  const std::vector<std::int32_t> x = {1, 2, 3, 4}, y = {2, 3, 4, 5};
  tape.backward(model.loss(tape.tokens({1, 4}, x), tape.tokens({1, 4}, y)));
  if (adamw) a.step();
  else s.step();
  io::TrainState st;
  st.step = 1;
  io::save_state(path, model, adamw ? &a : nullptr, adamw ? nullptr : &s, st);
}

// Rewrites the snapshot without the tensors whose names start with `prefix`.
void drop(const std::string& path, const std::string& prefix) {
  io::SafetensorsFile f = io::read_safetensors(path);
  std::vector<std::pair<std::string, io::HostTensor>> ts;
  for (auto& kv : f.tensors)
    if (kv.first.rfind(prefix, 0) != 0) ts.emplace_back(kv.first, std::move(kv.second));
  io::write_safetensors(path, ts, f.metadata);
}
}  // namespace

TEST_CASE("a snapshot lacking optimizer state the optimizer has is refused", "[io][snapshot][hostile][issue24]") {
  const std::string p = i24_tmp("snap_state.safetensors");
  for (const bool adamw : {true, false}) {
    INFO((adamw ? "adamw" : "sgd"));
    const std::string m = adamw ? "adamw.m.ln_f.bias" : "sgd.momentum.ln_f.bias";
    step_and_save(p, adamw);
    drop(p, m);
    if (adamw) drop(p, "adamw.v.ln_f.bias");
    Tape<Cpu> tape(5);
    nn::GPT<Cpu> model(tape, snap_config());
    optim::AdamW<Cpu> a(model.parameters(), {1e-2f});
    optim::SGD<Cpu> s(model.parameters(), {1e-2f, 0.9f, 0.0f, true});
    // A fresh optimizer: loads; ln_f.bias has no state, as in a run where it had no gradient.
    io::load_state(p, model, adamw ? &a : nullptr, adamw ? nullptr : &s);
    const std::size_t last = model.parameters().size() - 1;  // ln_f.bias
    CHECK((adamw ? a.has_moments(last) : s.has_momentum_buffer(last)) == false);
    CHECK((adamw ? a.has_moments(0) : s.has_momentum_buffer(0)) == true);
    // An optimizer that stepped: its old state for ln_f.bias would stay beside the snapshot's.
    tape.backward(model.loss(tape.tokens({1, 2}, std::vector<std::int32_t>{1, 2}),
                             tape.tokens({1, 2}, std::vector<std::int32_t>{2, 3})));
    if (adamw) a.step();
    else s.step();
    REQUIRE((adamw ? a.has_moments(last) : s.has_momentum_buffer(last)));
    const auto before = model.parameters()[0].to_vector();
    require_error([&] { io::load_state(p, model, adamw ? &a : nullptr, adamw ? nullptr : &s); },
                  {"has no optimizer state '" + m + "'", "but the optimizer has"});
    CHECK(model.parameters()[0].to_vector() == before);  // nothing changed
  }
  std::remove(p.c_str());
}

TEST_CASE("a snapshot with a tensor the model or optimizer does not have is refused",
          "[io][snapshot][hostile][issue24]") {
  const std::string p = i24_tmp("snap_extra.safetensors");
  for (const char* extra : {"model.h.1.ln_1.weight", "adamw.m.h.7.ln_1.bias", "sgd.momentum.wte.weight", "junk"}) {
    INFO(extra);
    step_and_save(p, true);
    io::SafetensorsFile f = io::read_safetensors(p);
    std::vector<std::pair<std::string, io::HostTensor>> ts(f.tensors.begin(), f.tensors.end());
    ts.emplace_back(extra, io::HostTensor{Shape{8}, std::vector<float>(8, 0.0f)});
    io::write_safetensors(p, ts, f.metadata);
    Tape<Cpu> tape(5);
    nn::GPT<Cpu> model(tape, snap_config());
    optim::AdamW<Cpu> a(model.parameters(), {1e-2f});
    require_error([&] { io::load_state(p, model, &a, NoSgd{}); },
                  {std::string("has tensor '") + extra + "', which is neither"});
  }
  std::remove(p.c_str());
}

TEST_CASE("snapshot integers refuse \"-0\" (digits only)", "[io][snapshot][hostile][issue24]") {
  const std::string p = i24_tmp("snap_minus0.safetensors");
  for (const char* key : {"step", "data_position", "adamw_steps", "rng_seed", "rng_offset", "config.n_layer"}) {
    for (const char* value : {"-0", "-00", "-"}) {
      INFO(key << " = " << value);
      step_and_save(p, true);
      io::SafetensorsFile f = io::read_safetensors(p);
      f.metadata[key] = value;
      io::write_safetensors(p, {f.tensors.begin(), f.tensors.end()}, f.metadata);
      Tape<Cpu> tape(5);
      nn::GPT<Cpu> model(tape, snap_config());
      optim::AdamW<Cpu> a(model.parameters(), {1e-2f});
      require_error([&] { io::load_state(p, model, &a, NoSgd{}); },
                    {std::string("metadata '") + key + "' of '" + p + "' is '" + value + "'"});
    }
  }
  std::remove(p.c_str());
}

// ---- 6. file-controlled counts

TEST_CASE("an llm.c .bin file is checked against its size before its tokens are read",
          "[io][data][hostile][issue24]") {
  const std::string p = i24_tmp("tokens.bin");
  std::string header(1024, '\0');
  const std::int32_t h[3] = {data::kLlmcMagic, 1, 2'000'000'000};  // 2e9 tokens: an 8 GB table
  std::memcpy(&header[0], h, sizeof h);
  write_sparse(p, header, 1024 + 256 * (1 << 20));  // 256 MiB of data: 128 Mi tokens, not 2e9
  Child r = in_child([&] { data::read_llmc_bin(p); });
  INFO(r.message);
  REQUIRE(r.outcome == "error");
  CHECK(r.message.find("declares 2000000000 tokens") != std::string::npos);
  CHECK(r.seconds < 1.0);
  CHECK(r.rss_growth_mib < 20);  // reading the file whole first took 256 MiB
  // a file whose size fits its count: the tokens, with the file read once (2 bytes a token in
  // the file, 4 in the table: 64 MiB of table for 32 MiB of file)
  const std::int32_t h2[3] = {data::kLlmcMagic, 1, 16 << 20};
  std::memcpy(&header[0], h2, sizeof h2);
  write_sparse(p, header, 1024 + 2 * (16 << 20));
  r = in_child([&] {
    const auto t = data::read_llmc_bin(p);
    REMAT_CHECK(t.size() == (16u << 20) && t[777] == 0, "wrong tokens");
  });
  INFO(r.message);
  REQUIRE(r.outcome == "ok");
  CHECK(r.rss_growth_mib < 80);  // 64 MiB of table; the file whole as well took 96
  std::remove(p.c_str());
}
