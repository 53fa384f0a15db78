// SPDX-License-Identifier: MIT
// The reader side of test_hostile_large.sh (issue 24): writes the hostile files too large to
// commit, and reads one with a library reader, reporting what happened, how long it took and
// the process's peak resident memory (VmHWM), so the script can run it under `ulimit -v`.
//
//   remat_io_probe make KIND PATH [N]   write a file (KIND below)
//   remat_io_probe read READER PATH     read it: READER is safetensors, gpt2 (read_gpt2 and
//                                       gpt2_config, as train_gpt --init-from) or json
//                                       (io::parse_json with the safetensors header's limits)
//   remat_io_probe sweep READER PATH STEP_KIB
//                                       read it in a child process per address-space limit,
//                                       from this process's size up by STEP_KIB until it
//                                       loads: prints "sweep: N out of memory, M aborted, loaded
//                                       at +K KiB" and each limit that did not end in
//                                       remat::OutOfMemory (a signal: std::terminate)
//   remat_io_probe vm                   print the process's address space (VmSize, KiB) and
//                                       whether it runs under AddressSanitizer
//
// `read` prints "outcome: ok|error|oom|other", "seconds: S", "peak_rss_mib: M" and
// "message: ..." and exits 0 (ok), 1 (remat::Error), 2 (remat::OutOfMemory), 3 (another
// exception); a crash or std::terminate is the script's to see (a signal, exit 134).

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <remat/io/gpt2.hpp>
#include <remat/io/json.hpp>
#include <remat/io/safetensors.hpp>
#include <remat/remat.hpp>

#include "support/proc_status.hpp"

namespace {

using remat_test::status_kib;

bool asan() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>(n >> (8 * i));
  return s;
}

// A safetensors file whose header is `header`, padded with spaces to `length` bytes when given.
void write_st(const std::string& path, std::string header, std::uint64_t length = 0) {
  if (length > header.size()) header.append(static_cast<std::size_t>(length - header.size()), ' ');
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << le64(header.size()) << header;
}

std::string repeat(const std::string& s, std::uint64_t n) {
  std::string r;
  r.reserve(static_cast<std::size_t>(s.size() * n));
  for (std::uint64_t i = 0; i < n; ++i) r += s;
  return r;
}

// A small GPT-2 (`layers` layers, d 4) as save_gpt2 writes it, without its head count in the
// metadata and without the tensor called `except` (none when empty).
std::vector<std::pair<std::string, remat::io::HostTensor>> small_gpt2(std::int64_t layers = 2,
                                                                     const std::string& except = "") {
  remat::nn::GPTConfig c;
  c.vocab_size = 8;
  c.block_size = 4;
  c.n_layer = layers;
  c.n_embd = 4;
  c.n_head = 1;
  std::vector<std::pair<std::string, remat::io::HostTensor>> ts;
  for (const auto& [name, shape] : remat::io::gpt2_shapes(c))
    if (name != except)
      ts.emplace_back(name, remat::io::HostTensor{shape, std::vector<float>(static_cast<std::size_t>(shape.numel()), 0.5f)});
  return ts;
}

int make(const std::string& kind, const std::string& path, std::uint64_t n) {
  const std::string nest = std::string(85000, '[') + std::string(85000, ']');
  if (kind == "big-header") {  // a header of n MB (151 in the issue): `{"a":[{},{},...`
    write_st(path, "{\"a\":[" + repeat("{},", (n * 1'000'000 - 6) / 3), n * 1'000'000);
  } else if (kind == "object-array") {  // the issue's 48 MB header {"a":[{},{},...]}, valid JSON
    write_st(path, "{\"a\":[" + repeat("{},", n * 1'000'000 / 3) + "{}]}");
  } else if (kind == "many-tensors") {  // a valid header of ~n MB of empty tensors
    std::string h = "{";
    for (std::uint64_t i = 0; h.size() < n * 1'000'000; ++i)
      h += (i ? ",\"t" : "\"t") + std::to_string(i) + R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
    write_st(path, h + "}");
  } else if (kind == "json-keys") {  // an object of n million keys `{"k0":{},"k1":{},...}`
    std::string t = "{";
    for (std::uint64_t i = 0; i < n * 1'000'000; ++i) t += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":{}";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << t << "}";
  } else if (kind == "tokenizer-json") {  // a tokenizer.json's shape: 12,000 tokens in stand-ins
    std::mt19937 rng(5);
    static const char* const chars[] = {"\xc4\xa0", "\xc3\xa9", "a", "b", "t", "h", "e", "\xc4\x8a", "0"};
    nlohmann::json vocab = nlohmann::json::object(), merges = nlohmann::json::array();
    while (vocab.size() < 12000) {
      std::string key;
      for (std::size_t k = 2 + rng() % 7; k > 0; --k) key += chars[rng() % 9];
      if (!vocab.contains(key)) vocab[key] = vocab.size();
    }
    for (int i = 0; i < 60; ++i) merges.push_back("a" + std::to_string(i) + " b");
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        << nlohmann::json{{"added_tokens", {{{"id", 12000}, {"content", "<|endoftext|>"}}}},
                          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}}.dump();
  } else if (kind == "nested-shape") {  // ~85,000 levels where a dimension belongs (170 KB)
    write_st(path, R"({"w":{"dtype":"F32","shape":[)" + nest + R"(],"data_offsets":[0,0]}})");
  } else if (kind == "nested-offset") {
    write_st(path, R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[)" + nest + R"(,0]}})");
  } else if (kind == "gpt2-nested-n_head" || kind == "gpt2-nested-n_embd") {  // PATH: a folder
    remat::io::write_safetensors(path + "/model.safetensors", small_gpt2());
    const bool heads = kind == "gpt2-nested-n_head";
    std::ofstream(path + "/config.json") << (heads ? R"({"n_embd": 4, "n_head": )" : R"({"n_head": 1, "n_embd": )")
                                         << std::string(85000, '[') << "1" << std::string(85000, ']') << "}";
  } else if (kind == "gpt2-missing-tensor") {  // 3 layers, without h.1.ln_1.weight
    remat::io::write_safetensors(path, small_gpt2(3, "h.1.ln_1.weight"), {{"n_head", "1"}});
  } else {
    std::fprintf(stderr, "remat_io_probe: unknown kind '%s'\n", kind.c_str());
    return 2;
  }
  return 0;
}

int read_with(const std::string& reader, const std::string& path) {
  std::string outcome = "ok", message;
  int rc = 0;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (reader == "safetensors") {
      const auto f = remat::io::read_safetensors(path);
      message = std::to_string(f.tensors.size()) + " tensors";
    } else if (reader == "gpt2") {
      const remat::io::Gpt2Weights g = remat::io::read_gpt2(path);
      const auto c = remat::io::gpt2_config(g.tensors, path, g.n_head);
      message = std::to_string(c.n_layer) + " layers";
    } else if (reader == "json") {  // a JsonDocument: destroyed without allocating
      const std::vector<char> text = remat::io::read_file(path, "remat_io_probe");
      const remat::io::JsonDocument d = remat::io::parse_json_document(
          std::string_view(text.data(), text.size()), remat::io::JsonLimits{}, "remat_io_probe",
          "JSON file", path);
      message = remat::io::json_brief(d.dom);
    } else {
      std::fprintf(stderr, "remat_io_probe: unknown reader '%s'\n", reader.c_str());
      return 4;
    }
  } catch (const remat::OutOfMemory& e) {
    outcome = "oom";
    message = e.what();
    rc = 2;
  } catch (const remat::Error& e) {
    outcome = "error";
    message = e.what();
    rc = 1;
  } catch (const std::exception& e) {
    outcome = "other";
    message = e.what();
    rc = 3;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("outcome: %s\nseconds: %.3f\npeak_rss_mib: %.1f\nmessage: %s\n", outcome.c_str(), s,
              static_cast<double>(status_kib("VmHWM:")) / 1024.0, message.c_str());
  return rc;
}

// The child of a sweep: the reader under an address-space limit; its exit code says how it
// ended (0 loaded, 1 remat::Error, 2 remat::OutOfMemory, 3 another exception), a signal that
// it did not end (std::terminate is SIGABRT).
int sweep(const std::string& reader, const std::string& path, long step_kib) {
  int oom = 0, aborted = 0, other = 0;
  for (long extra = 0; extra < 4 * 1024 * 1024; extra += step_kib) {
    std::fflush(stdout);
    const pid_t pid = ::fork();
    if (pid < 0) return 4;
    if (pid == 0) {
      const rlim_t limit = static_cast<rlim_t>(status_kib("VmSize:") + extra) * 1024;
      const rlimit r{limit, limit};
      ::setrlimit(RLIMIT_AS, &r);
      if (::freopen("/dev/null", "w", stdout) == nullptr) ::_exit(5);
      ::_exit(read_with(reader, path));
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
    if (code == 0) {
      std::printf("sweep: %d out of memory, %d aborted, %d other, loaded at +%ld KiB\n", oom, aborted,
                  other, extra);
      return aborted || other ? 1 : 0;
    }
    if (code == 2) {
      ++oom;
    } else if (code >= 100) {
      ++aborted;
      std::printf("sweep: at +%ld KiB: killed by signal %d\n", extra, code - 100);
    } else {
      ++other;
      std::printf("sweep: at +%ld KiB: exit %d (not remat::OutOfMemory)\n", extra, code);
    }
  }
  std::printf("sweep: %d out of memory, %d aborted, %d other, never loaded\n", oom, aborted, other);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "make" && argc >= 4) return make(argv[2], argv[3], argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 0);
  if (mode == "read" && argc == 4) return read_with(argv[2], argv[3]);
  if (mode == "sweep" && argc == 5) return sweep(argv[2], argv[3], std::atol(argv[4]));
  if (mode == "vm") {
    std::printf("%ld %d\n", status_kib("VmSize:"), asan() ? 1 : 0);
    return 0;
  }
  std::fprintf(stderr, "usage: remat_io_probe make KIND PATH [N] | read READER PATH | sweep READER PATH STEP_KIB | vm\n");
  return 4;
}
