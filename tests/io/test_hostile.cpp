// SPDX-License-Identifier: MIT
// Hostile input (issue 9): files crafted to overflow sizes, ask for more memory than they hold,
// or resume a different model; and atomic writes that clean up after killed writers and a full
// disk. Every crafted file is written here; every failure must be a remat::Error naming the file,
// the tensor and the field, raised before any large allocation.

#include <dirent.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <typeinfo>

#include <remat/data/tokens.hpp>
#include <remat/io/gpt2.hpp>
#include <remat/io/snapshot.hpp>
#include <remat/remat.hpp>

#include "support/catch.hpp"
#include "support/require_error.hpp"

using namespace remat;

namespace {
std::string hostile_tmp(const std::string& name) { return "remat_test_hostile_" + name; }

void hostile_raw(const std::string& path, const std::string& header, const std::string& data = "") {
  std::ofstream f(path, std::ios::binary);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
  f << header << data;
}

std::string hostile_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

bool exists(const std::string& p) {
  struct stat sb {};
  return ::stat(p.c_str(), &sb) == 0;
}

using remat_test::require_error;
}  // namespace

TEST_CASE("safetensors shapes whose element count overflows are refused, naming tensor and field",
          "[io][errors][hostile]") {
  const std::string p = hostile_tmp("overflow.safetensors");
  // [2^39, 2^39] and [2^32, 2^32]: the products wrap to 0 in 64 bits and so "match" 0 bytes.
  for (const char* shape : {"[549755813888,549755813888]", "[4294967296,4294967296]",
                            "[65536,65536,65536,65536]"}) {
    INFO(shape);
    hostile_raw(p, std::string(R"({"w":{"dtype":"F32","shape":)") + shape + R"(,"data_offsets":[0,0]}})");
    require_error([&] { io::read_safetensors(p); },
                  {"tensor 'w' of 'remat_test_hostile_overflow.safetensors'", "field 'shape'",
                   "overflows"});
  }
  // [2^31, 2^31] F32: 2^62 elements, 2^64 bytes, which wrap to 0 (it let std::length_error out).
  hostile_raw(p, R"({"w":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}})");
  require_error([&] { io::read_safetensors(p); }, {"tensor 'w'", "'shape'"});
  // A dimension beyond int64.
  hostile_raw(p, R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,0]}})");
  require_error([&] { io::read_safetensors(p); }, {"tensor 'w'", "bad dimension", "'shape'"});
  std::remove(p.c_str());
}

TEST_CASE("every malformed safetensors file is a remat::Error, never another std:: exception",
          "[io][errors][hostile]") {
  const std::string p = hostile_tmp("bad.safetensors");
  const char* headers[] = {
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-1,3]}})",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0.5,4]}})",
      R"({"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})",
      R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
      R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})",
      R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1],"data_offsets":[0,4]}})",
      R"({"w":[1,2,3]})",
      R"({"__metadata__":[1]})",
      R"([1,2])",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})",
      "{\"w\":\xff\xfe}",
  };
  for (const char* h : headers) {
    INFO(h);
    hostile_raw(p, h, std::string(4, '\0'));
    require_error([&] { io::read_safetensors(p); }, {"remat::io::read_safetensors", "'" });
  }
  // A header length of 2^64 - 1.
  {
    std::ofstream f(p, std::ios::binary);
    f << std::string(8, '\xff') << "{}";
  }
  require_error([&] { io::read_safetensors(p); }, {"says its header has 18446744073709551615 bytes"});
  // A directory is not a file (its "size" can be anything).
  ::mkdir(hostile_tmp("dir").c_str(), 0755);
  require_error([&] { io::read_safetensors(hostile_tmp("dir")); }, {"is a directory"});
  require_error([&] { data::read_llmc_bin(hostile_tmp("dir")); }, {"is a directory"});
  ::rmdir(hostile_tmp("dir").c_str());
  std::remove(p.c_str());
}

TEST_CASE("a small GPT-2 file cannot ask for a large model", "[io][errors][hostile]") {
  // 32 KiB of real data (wte and wpe [1, 4096]) and 1000 layers of empty ln_1 tensors would make
  // a 1000-layer model of d 4096 (800 GB); the config is refused before any model exists.
  // (every tensor of the 1000 layers is there, each empty: NOTE [GPT-2 tensors required])
  const std::string p = hostile_tmp("gpt2_layers.safetensors");
  const std::string empty = R"({"dtype":"F32","shape":[0],"data_offsets":[32768,32768]})";
  std::string h = R"({"wte.weight":{"dtype":"F32","shape":[1,4096],"data_offsets":[0,16384]},)"
                  R"("wpe.weight":{"dtype":"F32","shape":[1,4096],"data_offsets":[16384,32768]},)"
                  R"("ln_f.weight":)" + empty + R"(,"ln_f.bias":)" + empty;
  for (int i = 0; i < 1000; ++i)
    for (const char* t : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                          "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"})
      h += ",\"h." + std::to_string(i) + "." + t + "\":" + empty;
  h += "}";
  hostile_raw(p, h, std::string(32768, '\0'));
  const auto w = io::gpt2_tensors(io::read_safetensors(p), p);
  require_error([&] { io::gpt2_config(w, p); },
                {"tensor 'h.0.ln_1.weight' of 'remat_test_hostile_gpt2_layers.safetensors' has shape [0]",
                 "needs [4096]"});
  // wte [2^39, 0]: zero bytes, a vocabulary of 2^39 and no width.
  hostile_raw(p, R"({"wte.weight":{"dtype":"F32","shape":[549755813888,0],"data_offsets":[0,0]},)"
               R"("wpe.weight":{"dtype":"F32","shape":[8,0],"data_offsets":[0,0]},)"
               R"("ln_f.weight":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
               R"("ln_f.bias":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})");
  const auto w0 = io::gpt2_tensors(io::read_safetensors(p), p);
  require_error([&] { io::gpt2_config(w0, p); }, {"wte is [549755813888, 0]", "all > 0"});
  std::remove(p.c_str());
}

namespace {
nn::GPTConfig small_config(std::int64_t heads = 2) {
  nn::GPTConfig c;
  c.vocab_size = 32;
  c.block_size = 8;
  c.n_layer = 1;
  c.n_embd = 16;
  c.n_head = heads;
  c.dropout = 0.1f;
  return c;
}
using NoSgd = optim::SGD<Cpu>*;

// Saves a valid AdamW snapshot after one step (so the moments exist) to `path`.
void save_snapshot(const std::string& path) {
  Tape<Cpu> tape(5);
  nn::GPT<Cpu> model(tape, small_config());
  optim::AdamW<Cpu> opt(model.parameters(), {1e-2f});
  std::vector<std::int32_t> x(16), y(16);
  for (int i = 0; i < 16; ++i) x[static_cast<std::size_t>(i)] = y[static_cast<std::size_t>(i)] = i;
  auto loss = model.loss(tape.tokens({2, 8}, x), tape.tokens({2, 8}, y));
  tape.backward(loss);
  opt.step();
  io::TrainState st;
  st.step = 1;
  st.data_position = 16;
  st.rng_offset = tape.rng_offset();
  st.extra["checkpoint_strategy"] = "block";
  io::save_state(path, model, &opt, NoSgd{}, st);
}

// Rewrites the snapshot with metadata key = value (erased when value is null) and, when
// `tensor` is given, element 0 of that tensor set to x.
void edit(const std::string& path, const std::string& key, const char* value,
          const std::string& tensor = "", float x = 0) {
  io::SafetensorsFile f = io::read_safetensors(path);
  if (!key.empty()) {
    if (value) f.metadata[key] = value;
    else f.metadata.erase(key);
  }
  if (!tensor.empty()) f.tensors.at(tensor).data.at(0) = x;
  std::vector<std::pair<std::string, io::HostTensor>> ts(f.tensors.begin(), f.tensors.end());
  io::write_safetensors(path, ts, f.metadata);
}

void load(const std::string& path, std::int64_t heads = 2, float dropout = 0.1f) {
  Tape<Cpu> tape;
  nn::GPTConfig c = small_config(heads);
  c.dropout = dropout;
  nn::GPT<Cpu> model(tape, c);
  optim::AdamW<Cpu> opt(model.parameters(), {1e-2f});
  io::load_state(path, model, &opt, NoSgd{});
}
}  // namespace

TEST_CASE("snapshot metadata is parsed strictly", "[io][snapshot][errors][hostile]") {
  const std::string p = hostile_tmp("meta.safetensors");
  struct Case {
    const char* key;
    const char* value;
    const char* expect;
  };
  const Case cases[] = {
      {"step", "-1", "metadata 'step' of 'remat_test_hostile_meta.safetensors' is '-1'"},
      {"step", "abc", "metadata 'step'"},
      {"step", "12abc", "metadata 'step'"},
      {"step", " 3", "metadata 'step'"},
      {"step", "+3", "metadata 'step'"},
      {"step", "99999999999999999999", "metadata 'step'"},
      {"step", nullptr, "lacks metadata 'step'"},
      {"adamw_steps", "-1", "metadata 'adamw_steps'"},
      {"adamw_steps", "-0", "metadata 'adamw_steps'"},
      {"step", "-0", "metadata 'step'"},
      {"data_position", "-0", "metadata 'data_position'"},
      {"data_position", "-3", "metadata 'data_position'"},
      {"rng_offset", "-5", "metadata 'rng_offset'"},
      {"rng_seed", "0x10", "metadata 'rng_seed'"},
      {"optimizer", "adam", "has optimizer 'adam' (expected adamw, sgd or none"},
      {"checkpoint_strategy", "blocks", "metadata 'checkpoint_strategy'"},
      {"config.n_head", "two", "metadata 'config.n_head'"},
      {"config.dropout", "nan", "metadata 'config.dropout'"},
      {"config.n_layer", nullptr, "lacks metadata 'config.n_layer'"},
  };
  for (const Case& c : cases) {
    INFO(c.key << " = " << (c.value ? c.value : "(absent)"));
    save_snapshot(p);
    load(p);  // the unedited snapshot loads
    edit(p, c.key, c.value);
    require_error([&] { load(p); }, {c.expect});
  }
  std::remove(p.c_str());
}

TEST_CASE("resuming a snapshot with another model config names the config field that differs",
          "[io][snapshot][errors][hostile]") {
  const std::string p = hostile_tmp("config.safetensors");
  save_snapshot(p);
  // n_head changes no tensor shape: without the stored config this resumed silently.
  require_error([&] { load(p, /*heads=*/4); },
                {"was saved from a model with n_head 2, but this model has 4", "(n_head differs"});
  require_error([&] { load(p, 2, /*dropout=*/0.0f); }, {"dropout 0.100000001", "(dropout differs"});
  // An old snapshot (remat-state-1, no config) still loads: its tensor shapes are checked.
  edit(p, "format", "remat-state-1");
  for (const char* k : {"config.n_layer", "config.n_embd", "config.n_head", "config.vocab_size",
                        "config.block_size", "config.dropout"})
    edit(p, k, nullptr);
  load(p);
  std::remove(p.c_str());
}

TEST_CASE("snapshot optimizer state must be finite (and v >= 0)", "[io][snapshot][errors][hostile]") {
  const std::string p = hostile_tmp("state.safetensors");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* tensor;
    float x;
  };
  for (const Case& c : {Case{"adamw.m.wte.weight", nan}, Case{"adamw.m.ln_f.bias", inf},
                        Case{"adamw.v.wte.weight", -1.0f}, Case{"adamw.v.h.0.ln_1.weight", nan}}) {
    INFO(c.tensor << " = " << c.x);
    save_snapshot(p);
    edit(p, "", nullptr, c.tensor, c.x);
    require_error([&] { load(p); }, {"optimizer state '", c.tensor, "at element 0"});
  }
  // A rejected snapshot changes nothing: the checks run before any tensor is copied.
  save_snapshot(p);
  edit(p, "", nullptr, "adamw.v.ln_f.bias", -1.0f);  // the last parameter's
  Tape<Cpu> tape;
  nn::GPT<Cpu> model(tape, small_config());
  optim::AdamW<Cpu> opt(model.parameters(), {1e-2f});
  const auto before = model.parameters()[0].to_vector();
  REQUIRE_THROWS_AS(io::load_state(p, model, &opt, NoSgd{}), Error);
  CHECK(model.parameters()[0].to_vector() == before);
  CHECK_FALSE(opt.has_moments(0));
  std::remove(p.c_str());
}

TEST_CASE("atomic writes remove the temporaries of killed writers", "[io][atomic][hostile]") {
  const std::string p = hostile_tmp("stale.safetensors");
  // A writer killed mid-write (here: a child that dies at once, leaving its temporary behind).
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::ofstream(p + ".tmp." + std::to_string(::getpid())) << "half a file";
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  const std::string dead = p + ".tmp." + std::to_string(child);
  REQUIRE(exists(dead));
  const std::string alive = p + ".tmp." + std::to_string(::getppid());  // a live writer's
  std::ofstream(alive) << "in progress";
  const std::string other = p + ".other.tmp." + std::to_string(child);  // another target's
  std::ofstream(other) << "not ours";
  io::write_safetensors(p, {{"a", {Shape{1}, {1.0f}}}});
  CHECK_FALSE(exists(dead));
  CHECK(exists(alive));
  CHECK(exists(other));
  CHECK(io::read_safetensors(p).tensors.at("a").data == std::vector<float>{1.0f});
  for (const std::string& f : {p, alive, other}) std::remove(f.c_str());
}

TEST_CASE("a full disk ends with a clean error and leaves the old file intact",
          "[io][atomic][hostile]") {
  char dir_template[] = "/tmp/remat_enospc_XXXXXX";
  const char* dir = ::mkdtemp(dir_template);
  REQUIRE(dir != nullptr);
  if (::mount("tmpfs", dir, "tmpfs", 0, "size=64k") != 0) {
    WARN("skipped: cannot mount a 64 KiB tmpfs on " << dir << " (" << std::strerror(errno)
                                                     << "; needs root or CAP_SYS_ADMIN)");
    ::rmdir(dir);
    return;
  }
  struct Unmount {
    const char* d;
    ~Unmount() {
      ::umount(d);
      ::rmdir(d);
    }
  } unmount{dir};
  const std::string p = std::string(dir) + "/w.safetensors";
  io::write_safetensors(p, {{"a", {Shape{256}, std::vector<float>(256, 1.0f)}}});
  const std::string before = hostile_bytes(p);
  REQUIRE(before.size() > 1024);
  // 256 KiB into 64 KiB: the write fails with ENOSPC.
  require_error([&] { io::write_safetensors(p, {{"a", {Shape{65536}, std::vector<float>(65536, 2.0f)}}}); },
                {"remat::io::write_safetensors", "No space left on device", "left as it was"});
  CHECK(hostile_bytes(p) == before);
  CHECK(io::read_safetensors(p).tensors.at("a").data == std::vector<float>(256, 1.0f));
  int entries = 0;
  if (DIR* d = ::opendir(dir)) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++entries;
    ::closedir(d);
  }
  CHECK(entries == 1);  // no temporary left behind
  // The disk is usable again: a file that fits replaces the old one.
  io::write_safetensors(p, {{"a", {Shape{2}, {3.0f, 4.0f}}}});
  CHECK(io::read_safetensors(p).tensors.at("a").data == std::vector<float>{3.0f, 4.0f});
}
