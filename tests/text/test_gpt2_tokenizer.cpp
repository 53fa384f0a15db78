// SPDX-License-Identifier: MIT
// GPT-2's tokenizer (include/remat/text/): the pre-tokenizer against GPT-2's regex (expected
// pieces from the reference pattern; whitespace as tiktoken reads it), UTF-8 repair against the
// WHATWG decoder (Node's Buffer.toString), BPE against a plain implementation of the reference
// algorithm, the three file layouts, special tokens only where declared, duplicate merges as
// encoder.py ranks them, and hostile files (issue 24): clean errors within 1 s and 100 MiB, and
// out of memory as remat::OutOfMemory. The comparison with OpenAI's tiktoken over all of Unicode
// is ctest text.reference_tiktoken (tests/text/reference/); the Unicode classes are in
// test_unicode.cpp. Then the rules of Llama 3's and Qwen's tokenizer.json: their pre-tokenizers
// against their regexes, NFC against Hugging Face's normalizer, ignore_merges, added tokens
// matched before and after normalization, and the settings refused (their comparison with
// Hugging Face's tokenizers is ctest text.reference_hf).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <typeinfo>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/catch.hpp"
#include "support/proc_status.hpp"
#include <remat/text/tokenizer.hpp>

#include "text/tiny_bpe.hpp"

using remat::text::Tokenizer;
namespace fs = std::filesystem;

namespace {

using remat_test::status_kib;

std::vector<std::string> pieces(const std::string& s) {
  std::vector<std::string> out;
  remat::text::pretokenize(s, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/remat-tok-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(path / name, std::ios::binary) << content;
    return (path / name).string();
  }
};

// The reference algorithm as GPT-2's encoder.py writes it, on raw-byte strings: while some
// adjacent pair has a rank, take the best one and merge its every occurrence, left to right.
std::vector<std::string> reference_bpe(const std::string& piece,
                                       const std::vector<std::pair<std::string, std::string>>& merges) {
  std::vector<std::string> w;
  for (char c : piece) w.emplace_back(1, c);
  const auto rank = [&](const std::string& a, const std::string& b) {
    for (std::size_t r = 0; r < merges.size(); ++r)
      if (merges[r].first == a && merges[r].second == b) return static_cast<long>(r);
    return -1L;
  };
  while (w.size() > 1) {
    long best = -1;
    std::size_t at = 0;
    for (std::size_t i = 0; i + 1 < w.size(); ++i) {
      const long r = rank(w[i], w[i + 1]);
      if (r >= 0 && (best < 0 || r < best)) best = r, at = i;
    }
    if (best < 0) break;
    const std::string a = w[at], b = w[at + 1];
    w = remat_test::merge_every(w, a, b);
  }
  return w;
}

std::vector<std::string> token_strings(const Tokenizer& t, const std::vector<std::int32_t>& ids) {
  std::vector<std::string> out;
  for (auto id : ids) out.push_back(t.token_bytes(id));
  return out;
}

Tokenizer tiny() {
  const auto b = remat_test::train_tiny_bpe(remat_test::tiny_training_text(), 120);
  return Tokenizer::from_text(b.encoder_json, b.vocab_bpe);
}

}  // namespace

TEST_CASE("pretokenize cuts text as GPT-2's regex does", "[text]") {
  // expected: Node 20's matchAll of the reference pattern on each input
  using V = std::vector<std::string>;
  CHECK(pieces("Hello world") == V{"Hello", " world"});
  CHECK(pieces("it's") == V{"it", "'s"});
  CHECK(pieces("I'LL") == V{"I", "'", "LL"});
  CHECK(pieces("they'll've") == V{"they", "'ll", "'ve"});
  CHECK(pieces("'l") == V{"'", "l"});
  CHECK(pieces("''s") == V{"''", "s"});
  CHECK(pieces("'s'") == V{"'s", "'"});
  CHECK(pieces("  hello") == V{" ", " hello"});
  CHECK(pieces("hello  ") == V{"hello", "  "});
  CHECK(pieces("a\n\nb") == V{"a", "\n", "\n", "b"});
  CHECK(pieces("a \n b") == V{"a", " \n", " b"});
  CHECK(pieces("a\t\t b") == V{"a", "\t\t", " b"});
  CHECK(pieces("\r\n\r\nEnd") == V{"\r\n\r", "\n", "End"});
  CHECK(pieces("x  123") == V{"x", " ", " 123"});
  CHECK(pieces("x ...") == V{"x", " ..."});
  CHECK(pieces("3.14") == V{"3", ".", "14"});
  CHECK(pieces("na\xc3\xafve") == V{"na\xc3\xafve"});                 // ï is a letter
  CHECK(pieces("e\xcc\x81") == V{"e", "\xcc\x81"});                     // a combining mark is not
  CHECK(pieces("\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82!") == V{"\xe6\x97\xa5\xe6\x9c\xac", " \xf0\x9f\x99\x82!"});
  CHECK(pieces("x\xc2\xa0y") == V{"x", "\xc2\xa0", "y"});               // NBSP is whitespace
  CHECK(pieces("x \xe3\x80\x80y") == V{"x", " ", "\xe3\x80\x80", "y"});  // so is U+3000
  CHECK(pieces("\xe2\x85\xab\xc2\xbd") == V{"\xe2\x85\xab\xc2\xbd"});    // Nl and No are numbers
  CHECK(pieces(" ") == V{" "});
  CHECK(pieces("'") == V{"'"});
  CHECK(pieces("").empty());
}

TEST_CASE("invalid UTF-8 becomes U+FFFD per maximal subpart, as WHATWG decoders do", "[text]") {
  using remat::text::to_valid_utf8;
  const std::string r = "\xef\xbf\xbd";
  // expected: Node's Buffer.from(bytes).toString('utf8')
  CHECK(to_valid_utf8("plain \xf0\x9f\x99\x82 text") == "plain \xf0\x9f\x99\x82 text");
  CHECK(to_valid_utf8(r) == r);
  CHECK(to_valid_utf8("\x80") == r);
  CHECK(to_valid_utf8("\xe2\x82" "a") == r + "a");
  CHECK(to_valid_utf8("\xed\xa0\x80") == r + r + r);       // a surrogate
  CHECK(to_valid_utf8("\xf0\x9f\x98") == r);               // truncated at the end
  CHECK(to_valid_utf8("\xc0\xaf") == r + r);               // overlong
  CHECK(to_valid_utf8("\xe0\x80\xaf") == r + r + r);
  CHECK(to_valid_utf8("\xf4\x90\x80\x80") == r + r + r + r);  // past U+10FFFF
  CHECK(to_valid_utf8(std::string("a\0b", 3)) == std::string("a\0b", 3));
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {  // repair is idempotent and its output decodes cleanly
    std::string s(rng() % 12, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    const std::string v = to_valid_utf8(s);
    CHECK(to_valid_utf8(v) == v);
  }
}

TEST_CASE("BPE merges as the reference algorithm does", "[text]") {
  const auto b = remat_test::train_tiny_bpe(remat_test::tiny_training_text(), 120);
  const auto t = Tokenizer::from_text(b.encoder_json, b.vocab_bpe);
  REQUIRE(b.merges.size() == 120);
  CHECK(t.vocab_size() == 256 + 120 + 1);
  CHECK(t.eot() == 376);
  std::mt19937 rng(3);
  const std::string alphabet = "the fox'sr\n \t.0123";
  for (int i = 0; i < 3000; ++i) {
    std::string s(1 + rng() % 24, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    std::vector<std::string> want;
    remat::text::pretokenize(s, [&](std::string_view p) {
      for (auto& tok : reference_bpe(std::string(p), b.merges)) want.push_back(tok);
    });
    INFO("text: \"" << s << "\"");
    REQUIRE(token_strings(t, t.encode_ordinary(s)) == want);
  }
  CHECK(t.decode(t.encode(remat_test::tiny_training_text())) == remat_test::tiny_training_text());
  CHECK(t.encode_ordinary(" the").size() == 1);  // learned from the training text
}

TEST_CASE("BPE finishes a rank's pass before a better pair it made", "[text]") {
  // "abc" is reachable two ways; (abc, a) ranks before (a, bc). In "abcabc" the reference
  // merges (b,c) twice, then (a,bc) twice: [abc, abc]. Merging (abc, a) as soon as it appears,
  // in the middle of (a,bc)'s pass, would give [abca, bc].
  std::string vocab = "{", merges = "#version: 0.2\n";
  int id = 0;
  for (int c = 0; c < 256; ++c)
    vocab += nlohmann::json(remat_test::stand_in(static_cast<unsigned char>(c))).dump() + ":" + std::to_string(id++) + ",";
  vocab += "\"bc\":256,\"ab\":257,\"abc\":258,\"abca\":259}";
  merges += "b c\na b\nab c\nabc a\na bc\n";
  const auto t = Tokenizer::from_text(vocab, merges);
  CHECK(token_strings(t, t.encode_ordinary("abcabc")) == std::vector<std::string>{"abc", "abc"});
  CHECK(token_strings(t, t.encode_ordinary("abca")) == std::vector<std::string>{"abca"});  // a pass later
  CHECK(token_strings(t, t.encode_ordinary("ab")) == std::vector<std::string>{"ab"});
}

TEST_CASE("the special token, decode and long runs", "[text]") {
  const auto t = tiny();
  const auto ids = t.encode("the fox<|endoftext|>the");
  const auto plain = t.encode_ordinary("the fox<|endoftext|>the");
  CHECK(std::count(ids.begin(), ids.end(), t.eot()) == 1);
  CHECK(std::count(plain.begin(), plain.end(), t.eot()) == 0);
  CHECK(plain.size() > ids.size());
  CHECK(t.decode(ids) == "the fox<|endoftext|>the");
  CHECK(t.decode(plain) == "the fox<|endoftext|>the");
  CHECK(t.encode("<|endoftext|><|endoftext|>") == std::vector<std::int32_t>{t.eot(), t.eot()});
  CHECK_THROWS_WITH(t.decode({1, 9999}), REMAT_CONTAINS("id 9999 at position 1 is outside the vocabulary"));
  CHECK_THROWS_WITH(t.decode({-1}), REMAT_CONTAINS("outside the vocabulary"));
  const std::string run(200000, 'e');  // one piece: the heap keeps BPE at n log n
  CHECK(t.decode(t.encode(run)) == run);
  const std::string bad = "caf\xc3 \xff\xfe the \xe2\x82";
  CHECK(t.decode(t.encode(bad)) == remat::text::to_valid_utf8(bad));
}

TEST_CASE("the three file layouts give the same tokenizer", "[text]") {
  const auto b = remat_test::train_tiny_bpe(remat_test::tiny_training_text(), 60);
  TempDir openai, hf, hf_json, hf_json_arrays;
  openai.write("encoder.json", b.encoder_json);
  openai.write("vocab.bpe", b.vocab_bpe);
  hf.write("vocab.json", b.encoder_json);
  hf.write("merges.txt", b.vocab_bpe);
  nlohmann::json vocab = nlohmann::json::parse(b.encoder_json);
  const std::int64_t eot = vocab["<|endoftext|>"];
  vocab.erase("<|endoftext|>");  // Hugging Face keeps it among the added tokens
  nlohmann::json merges_s = nlohmann::json::array(), merges_a = nlohmann::json::array();
  for (const auto& [x, y] : b.merges) {
    merges_s.push_back(remat_test::spelled(x) + " " + remat_test::spelled(y));
    merges_a.push_back({remat_test::spelled(x), remat_test::spelled(y)});
  }
  nlohmann::json j = {{"version", "1.0"},
                      {"added_tokens", {{{"id", eot}, {"content", "<|endoftext|>"}, {"special", true}}}},
                      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges_s}}}};
  hf_json.write("tokenizer.json", j.dump());
  j["model"]["merges"] = merges_a;
  hf_json_arrays.write("tokenizer.json", j.dump());
  const std::string text = remat_test::tiny_training_text() + "<|endoftext|> more text, 42!";
  const auto want = Tokenizer::from_directory(openai.path.string()).encode(text);
  CHECK(want.size() < text.size() * 2 / 3);  // the merges were applied
  for (const TempDir* d : {&hf, &hf_json, &hf_json_arrays}) {
    const auto t = Tokenizer::from_directory(d->path.string());
    CHECK(t.encode(text) == want);
    CHECK(t.eot() == eot);
  }
}

TEST_CASE("bad tokenizer files are errors that say what and where", "[text]") {
  const auto b = remat_test::train_tiny_bpe(remat_test::tiny_training_text(), 20);
  TempDir d;
  CHECK_THROWS_WITH(Tokenizer::from_directory(d.path.string()),
                    REMAT_CONTAINS("no tokenizer files in") && REMAT_CONTAINS("encoder.json + vocab.bpe"));
  const auto bad_text = [](const std::string& vocab, const std::string& merges) {
    return [=] { Tokenizer::from_text(vocab, merges, "enc.json", "merges.txt"); };
  };
  CHECK_THROWS_WITH(bad_text("{\"a\": 0", b.vocab_bpe)(), REMAT_CONTAINS("the vocabulary 'enc.json' cannot be used: it is not valid JSON"));
  CHECK_THROWS_WITH(bad_text("[1, 2]", b.vocab_bpe)(), REMAT_CONTAINS("the vocabulary in 'enc.json' is ") && REMAT_CONTAINS(", not an object of token -> id"));
  CHECK_THROWS_WITH(bad_text("{\"a\": \"zero\"}", b.vocab_bpe)(), REMAT_CONTAINS("expected an integer"));
  CHECK_THROWS_WITH(bad_text("{\"a\": 0, \"b\": 2}", b.vocab_bpe)(),
                    REMAT_CONTAINS("token \"b\" in 'enc.json' has the id 2, but the file has 2 tokens (expected ids 0..1"));
  CHECK_THROWS_WITH(bad_text("{\"a\": 0, \"b\": 0}", b.vocab_bpe)(), REMAT_CONTAINS("id 0 in 'enc.json' is given to two tokens"));
  CHECK_THROWS_WITH(bad_text("{\"a\": 0, \"b\": 1}", b.vocab_bpe)(), REMAT_CONTAINS("expected at least the 256 byte tokens"));
  CHECK_THROWS_WITH(bad_text("{\"a\": -4}", b.vocab_bpe)(), REMAT_CONTAINS("has the id -4"));
  CHECK_THROWS_WITH(bad_text("{\"a\": 99999999999}", b.vocab_bpe)(), REMAT_CONTAINS("has the id 99999999999"));
  CHECK_THROWS_WITH(bad_text(b.encoder_json, "#version: 0.2\nt h e\n")(),
                    REMAT_CONTAINS("line 2 of 'merges.txt' is not a merge"));
  CHECK_THROWS_WITH(bad_text(b.encoder_json, "#version: 0.2\nzzz q\n")(),
                    REMAT_CONTAINS("merge 1 (\"zzz q\") in 'merges.txt' names a token the vocabulary lacks"));
  nlohmann::json v = nlohmann::json::parse(b.encoder_json);
  v["x y"] = v.size();  // a space is not one of GPT-2's stand-ins
  CHECK_THROWS_WITH(bad_text(v.dump(), b.vocab_bpe)(), REMAT_CONTAINS("not spelled in GPT-2's byte stand-ins"));
  d.write("tokenizer.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}");
  CHECK_THROWS_WITH(Tokenizer::from_directory(d.path.string()), REMAT_CONTAINS("has a model that is not BPE"));
  d.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [3]}}");
  CHECK_THROWS_AS(Tokenizer::from_directory(d.path.string()), remat::Error);
  CHECK_THROWS_WITH(Tokenizer::from_files((d.path / "none.json").string(), "x"), REMAT_CONTAINS("cannot open"));
  CHECK_THROWS_WITH(Tokenizer::from_files(d.path.string(), "x"), REMAT_CONTAINS("is a directory"));
}

#if defined(__SANITIZE_ADDRESS__)
#define REMAT_TEXT_TESTS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REMAT_TEXT_TESTS_ASAN 1
#endif
#endif

namespace {

#ifdef REMAT_TEXT_TESTS_ASAN
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif

// The 256 byte tokens as a vocabulary (byte b is id b), spelled in GPT-2's stand-ins.
nlohmann::json byte_vocab() {
  nlohmann::json v = nlohmann::json::object();
  for (int c = 0; c < 256; ++c) v[remat_test::stand_in(static_cast<unsigned char>(c))] = c;
  return v;
}

// What a load cost: wall time, and the growth of the peak resident memory (Linux: the peak is
// reset through /proc/self/clear_refs, then VmHWM after against VmRSS before).
struct Cost {
  double seconds = 0, mib = -1;  // mib < 0: not measurable here
};
template <class Fn>
Cost cost_of(Fn&& fn) {
  const bool reset = remat_test::reset_peak_rss();
  const long before = status_kib("VmRSS:");
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  Cost c;
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long peak = status_kib("VmHWM:");
  if (reset && before > 0 && peak > 0) c.mib = static_cast<double>(peak - before) / 1024;
  return c;
}

// Runs a load that must fail: a remat::Error (never another exception) whose text has every
// part, within 1 s and 100 MiB of resident memory (issue 24, acceptance 2).
template <class Fn>
void require_clean_error(Fn&& load, std::initializer_list<std::string> parts) {
  std::string what;
  const Cost c = cost_of([&] {
    try {
      load();
    } catch (const remat::Error& e) {
      what = e.what();
    } catch (const std::exception& e) {
      what = std::string("a ") + typeid(e).name() + " escaped instead of remat::Error: " + e.what();
    }
  });
  INFO(what);
  REQUIRE_FALSE(what.empty());
  for (const std::string& p : parts) CHECK_THAT(what, REMAT_CONTAINS(p));
  INFO("took " << c.seconds << " s, peak resident memory grew by " << c.mib << " MiB");
  CHECK(c.seconds < 1.0);
  if (c.mib < 0) WARN("peak resident memory not measurable here (/proc/self/clear_refs)");
  else CHECK(c.mib < 100);
}

std::string nested(const std::string& leaf, int levels) {
  const auto n = static_cast<std::size_t>(levels);
  return std::string(n, '[') + leaf + std::string(n, ']');
}

// A tokenizer.json of the tiny tokenizer: model.vocab without <|endoftext|>, which is declared
// in added_tokens, as Hugging Face writes GPT-2's.
nlohmann::json tiny_tokenizer_json(int merges = 20) {
  const auto b = remat_test::train_tiny_bpe(remat_test::tiny_training_text(), merges);
  nlohmann::json vocab = nlohmann::json::parse(b.encoder_json);
  const std::int64_t eot = vocab["<|endoftext|>"];
  vocab.erase("<|endoftext|>");
  nlohmann::json m = nlohmann::json::array();
  for (const auto& [x, y] : b.merges) m.push_back(remat_test::spelled(x) + " " + remat_test::spelled(y));
  return {{"version", "1.0"},
          {"added_tokens", {{{"id", eot}, {"content", "<|endoftext|>"}, {"single_word", false}, {"lstrip", false},
                             {"rstrip", false}, {"normalized", true}, {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                             {"use_regex", true}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                     {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false},
                     {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", vocab}, {"merges", m}}}};
}

}  // namespace

TEST_CASE("hostile tokenizer files are clean errors within 1 s and 100 MiB", "[text][hostile]") {
  TempDir d;
  const auto b = remat_test::train_tiny_bpe(remat_test::tiny_training_text(), 20);
  const std::string merges = d.write("merges.txt", b.vocab_bpe);
  // ~85,000 levels of nesting as a token's id overflowed the stack (dump() in the message; in
  // this build a recursive dump() takes more levels to overflow, hence also 1,000,000)
  for (const int levels : {85'000, 1'000'000}) {
    const std::string deep_vocab = d.write("vocab.json", "{\"!\": " + nested("1", levels) + "}");
    require_clean_error([&] { Tokenizer::from_files(deep_vocab, merges); },
                        {"token \"!\" in '" + deep_vocab + "' has an array as its id (expected an integer)"});
  }
  nlohmann::json j = tiny_tokenizer_json();
  const std::string deep_json =
      j.dump().substr(0, j.dump().size() - 1) + ", \"extra\": " + nested("0", 85000) + "}";
  std::string with_deep_id = j.dump();
  with_deep_id.insert(with_deep_id.find("\"vocab\":{") + 9, "\"!!\":" + nested("7", 85000) + ",");
  d.write("tokenizer.json", with_deep_id);
  const std::string tj = (d.path / "tokenizer.json").string();
  require_clean_error([&] { Tokenizer::from_tokenizer_json(tj); },
                      {"token \"!!\" in '" + tj + "' has an array as its id (expected an integer)"});
  d.write("tokenizer.json", deep_json);
  require_clean_error([&] { Tokenizer::from_tokenizer_json(tj); },
                      {"nests deeper than 64 levels at /extra/0/0/0"});
  // 15 bytes that asked for a table of 16,777,216 tokens (515 MiB) before the "gap" error
  const std::string huge_id = d.write("vocab.json", "{\"!\": 16777215}");
  REQUIRE(fs::file_size(huge_id) == 15);
  require_clean_error([&] { Tokenizer::from_files(huge_id, merges); },
                      {"token \"!\" in '" + huge_id + "' has the id 16777215, but the file has 1 token",
                       "expected ids 0..0"});
  j = tiny_tokenizer_json();
  j["added_tokens"][0]["id"] = 16777215;
  d.write("tokenizer.json", j.dump());
  require_clean_error([&] { Tokenizer::from_tokenizer_json(tj); },
                      {"token \"<|endoftext|>\" in '" + tj + "' has the id 16777215 in added_tokens",
                       "and 1 added tokens"});
  j["added_tokens"][0]["id"] = 18446744073709551615u;
  d.write("tokenizer.json", j.dump());
  require_clean_error([&] { Tokenizer::from_tokenizer_json(tj); }, {"has the id 18446744073709551615"});
  // files over their caps, refused from their size (sparse files: nothing is written or read)
  for (const auto& file_cap : {std::pair<std::string, std::uintmax_t>{"vocab.json", 16u << 20},
                               {"merges.txt", 16u << 20}, {"tokenizer.json", 64u << 20}}) {
    const std::string& name = file_cap.first;  // not a structured binding: the lambda reads it
    const std::uintmax_t cap = file_cap.second;
    const std::string big = d.write("big-" + name, "{}");
    fs::resize_file(big, cap + 1);
    INFO(name);
    require_clean_error(
        [&] {
          if (name == "tokenizer.json") Tokenizer::from_tokenizer_json(big);
          else if (name == "vocab.json") Tokenizer::from_files(big, merges);
          else Tokenizer::from_files(d.write("v.json", b.encoder_json), big);
        },
        {"'" + big + "' has " + std::to_string(cap + 1) + " bytes, more than the " + std::to_string(cap) +
         " bytes allowed for a " + name.substr(0, name.find('.'))});
  }
  // more JSON values than a vocabulary of a million tokens has; a key twice
  std::string many = "[0";
  for (int i = 0; i < 1'000'001; ++i) many += ",0";
  require_clean_error([&] { Tokenizer::from_text(many + "]", b.vocab_bpe, "many.json"); },
                      {"'many.json' cannot be used: it holds more than 1000001 JSON values"});
  require_clean_error([&] { Tokenizer::from_text("{\"a\": 0, \"a\": 1}", b.vocab_bpe, "twice.json"); },
                      {"'twice.json' cannot be used: the key \"a\" appears twice"});
}

TEST_CASE("vocabulary keys always stand for bytes, whatever their shape", "[text][special]") {
  // "<Ġ>" is the bytes "< >" (encoder.py's byte decoder), not its UTF-8 spelling; a merge that
  // builds it loads.
  nlohmann::json v = byte_vocab();
  v["<\xc4\xa0"] = 256;   // "<Ġ": "< "
  v["<\xc4\xa0>"] = 257;  // "<Ġ>": "< >"
  v["<pad>"] = 258;       // "<pad>": not declared anywhere, so five ordinary bytes
  v["<p"] = 259;
  v["<pa"] = 260;
  v["<pad"] = 261;
  const auto t =
      Tokenizer::from_text(v.dump(), "#version: 0.2\n< \xc4\xa0\n<\xc4\xa0 >\n< p\n<p a\n<pa d\n<pad >\n");
  CHECK(t.token_bytes(257) == "< >");
  CHECK(t.token_bytes(256) == "< ");
  CHECK(t.token_bytes(258) == "<pad>");
  CHECK(t.decode({257, 258}) == "< ><pad>");
  CHECK(t.eot() == -1);  // no <|endoftext|> in this vocabulary
  CHECK(t.encode("<pad>") == std::vector<std::int32_t>{'<', 'p', 'a', 'd', '>'});  // never "special"
  CHECK(t.encode("<pad><pad>") == t.encode_ordinary("<pad><pad>"));
  // a key that spells no bytes (a space is not a stand-in) is an error unless declared
  v["<a b>"] = 262;
  CHECK_THROWS_WITH(Tokenizer::from_text(v.dump(), "", "v.json"),
                    REMAT_CONTAINS("token \"<a b>\" (id 262) in 'v.json' is not spelled in GPT-2's byte "
                                   "stand-ins and not declared in added_tokens"));
}

TEST_CASE("special tokens come only from declarations", "[text][special]") {
  // encoder.json / vocab.json: <|endoftext|> by GPT-2's convention (tiny() has it, id 376)
  const auto t = tiny();
  CHECK(t.eot() == 376);
  CHECK(t.token_bytes(376) == "<|endoftext|>");
  CHECK(t.encode("a<|endoftext|>b") == std::vector<std::int32_t>{t.encode("a")[0], 376, t.encode("b")[0]});
  // tokenizer.json: added_tokens, special or not; the longest where two start at one place
  nlohmann::json j = tiny_tokenizer_json();
  const std::int64_t eot = j["added_tokens"][0]["id"];
  j["added_tokens"].push_back({{"id", eot + 1}, {"content", "<|im_start|>"}, {"special", true}});
  j["added_tokens"].push_back({{"id", eot + 2}, {"content", "<|im_start|>x"}, {"special", false}});
  j["added_tokens"].push_back({{"id", eot + 3}, {"content", "x y"}, {"special", false}});
  j["model"]["vocab"]["x y"] = eot + 3;  // not a stand-in spelling, but declared with this id
  j["model"]["vocab"]["<pad>"] = eot + 4;  // a stand-in spelling, not declared: ordinary
  TempDir d;
  d.write("tokenizer.json", j.dump());
  const auto h = Tokenizer::from_directory(d.path.string());
  const auto i32 = [](std::int64_t x) { return static_cast<std::int32_t>(x); };
  CHECK(h.eot() == eot);
  CHECK(h.vocab_size() == eot + 5);
  CHECK(h.token_bytes(i32(eot + 3)) == "x y");
  CHECK(h.token_bytes(i32(eot + 4)) == "<pad>");
  const auto ids = h.encode("a<|im_start|>b<|im_start|>x y<pad><|endoftext|>");
  const std::vector<std::int32_t> want_tail = {i32(eot + 1), h.encode_ordinary("b")[0], i32(eot + 2),
                                               h.encode_ordinary(" ")[0]};
  REQUIRE(ids.size() > 6);
  CHECK(std::vector<std::int32_t>(ids.begin() + 1, ids.begin() + 5) == want_tail);
  CHECK(std::count(ids.begin(), ids.end(), i32(eot + 3)) == 0);  // "x y" was cut by "<|im_start|>x"
  CHECK(ids.back() == eot);
  CHECK(std::count(ids.begin(), ids.end(), i32(eot + 4)) == 0);  // <pad> is not special
  CHECK(h.encode("x y") == std::vector<std::int32_t>{i32(eot + 3)});
  CHECK(h.decode(ids) == "a<|im_start|>b<|im_start|>x y<pad><|endoftext|>");
  // encode_ordinary: special tokens are plain text, other added tokens still match (Hugging
  // Face's split_special_tokens)
  const auto plain = h.encode_ordinary("<|im_start|>x y<|endoftext|>");
  for (std::int64_t k = eot; k < eot + 2; ++k) CHECK(std::count(plain.begin(), plain.end(), i32(k)) == 0);
  CHECK(plain.front() == eot + 2);  // "<|im_start|>x", not special
  // an added token whose text is also an ordinary token's bytes (Phi-2 adds runs of spaces):
  // encode() matches it, BPE still makes the ordinary one, both decode to the same bytes
  j = tiny_tokenizer_json();
  j["added_tokens"].push_back({{"id", eot + 1}, {"content", "th"}, {"special", true}});
  d.write("tokenizer.json", j.dump());
  const auto p = Tokenizer::from_directory(d.path.string());
  const std::int32_t th = p.encode_ordinary("th")[0];
  CHECK(p.encode_ordinary("th") == std::vector<std::int32_t>{th});  // "t h" is the first merge
  CHECK(th != eot + 1);
  CHECK(p.encode("th") == std::vector<std::int32_t>{i32(eot + 1)});
  CHECK(p.decode({th}) == p.decode({i32(eot + 1)}));
  // a tokenizer.json that declares nothing has no special token, <|endoftext|> in its vocabulary or not
  j = tiny_tokenizer_json();
  j["model"]["vocab"]["<|endoftext|>"] = j["added_tokens"][0]["id"];
  j.erase("added_tokens");
  d.write("tokenizer.json", j.dump());
  const auto n = Tokenizer::from_directory(d.path.string());
  CHECK(n.eot() == -1);
  CHECK(n.encode("<|endoftext|>") == n.encode_ordinary("<|endoftext|>"));
  CHECK(n.encode("<|endoftext|>").size() > 1);
  // an undeclared key that spells no bytes; an added token that strips spaces; ids that disagree
  j = tiny_tokenizer_json();
  j["model"]["vocab"]["x y"] = j["added_tokens"][0]["id"].get<std::int64_t>() + 1;
  d.write("tokenizer.json", j.dump());
  CHECK_THROWS_WITH(Tokenizer::from_directory(d.path.string()),
                    REMAT_CONTAINS("token \"x y\"") && REMAT_CONTAINS("not declared in added_tokens"));
  j = tiny_tokenizer_json();
  j["added_tokens"][0]["lstrip"] = true;
  d.write("tokenizer.json", j.dump());
  CHECK_THROWS_WITH(Tokenizer::from_directory(d.path.string()),
                    REMAT_CONTAINS("added token \"<|endoftext|>\"") && REMAT_CONTAINS("has lstrip = true"));
  j = tiny_tokenizer_json();
  j["added_tokens"][0]["id"] = 65;  // the id of byte 'b' (GPT-2's order: '!' is 0)
  d.write("tokenizer.json", j.dump());
  CHECK_THROWS_WITH(Tokenizer::from_directory(d.path.string()),
                    REMAT_CONTAINS("id 65") && REMAT_CONTAINS("is given to two tokens"));
  j = tiny_tokenizer_json();
  j["added_tokens"].push_back({{"id", j["model"]["vocab"]["A"]}, {"content", "A"}});  // "A", declared too
  const std::int64_t gap = j["model"]["vocab"]["B"];
  j["model"]["vocab"].erase("B");  // so the largest id stays in range, and B's is a gap
  d.write("tokenizer.json", j.dump());
  CHECK_THROWS_WITH(Tokenizer::from_directory(d.path.string()),
                    REMAT_CONTAINS("has no token with id " + std::to_string(gap)) &&
                        REMAT_CONTAINS("without gaps"));
}

TEST_CASE("a merge listed twice ranks by its last line, as encoder.py", "[text]") {
  // encoder.py: bpe_ranks = dict(zip(bpe_merges, range(len(bpe_merges)))): the last line wins.
  // Here (a, b) ranks 2 and (b, c) 1, so "abc" is a + bc; ranked by the first line it was ab + c.
  nlohmann::json v = byte_vocab();
  v["ab"] = 256;
  v["bc"] = 257;
  const std::string merges = "#version: 0.2\na b\nb c\na b\n";
  const auto t = Tokenizer::from_text(v.dump(), merges);
  CHECK(t.encode_ordinary("abc") == std::vector<std::int32_t>{'a', 257});
  CHECK(t.encode_ordinary("abd") == std::vector<std::int32_t>{256, 'd'});
  nlohmann::json j = tiny_tokenizer_json();
  j.erase("added_tokens");
  j["model"]["vocab"] = v;
  j["model"]["merges"] = {"a b", "b c", "a b"};
  TempDir d;
  d.write("tokenizer.json", j.dump());
  const auto h = Tokenizer::from_directory(d.path.string());
  CHECK(h.encode_ordinary("abc") == std::vector<std::int32_t>{'a', 257});
}

TEST_CASE("tokenizer.json settings remat does not implement are refused, naming the field", "[text]") {
  TempDir d;
  const auto refused = [&](const nlohmann::json& j, const std::string& why) {
    d.write("tokenizer.json", j.dump());
    INFO(why);
    CHECK_THROWS_WITH(Tokenizer::from_directory(d.path.string()),
                      REMAT_CONTAINS(why) && REMAT_CONTAINS("which this tokenizer does not implement"));
  };
  const nlohmann::json gpt2 = tiny_tokenizer_json();  // GPT-2's own settings load
  d.write("tokenizer.json", gpt2.dump());
  CHECK(Tokenizer::from_directory(d.path.string()).eot() >= 0);
  nlohmann::json j = gpt2;
  j["normalizer"] = {{"type", "NFKC"}};
  refused(j, "has normalizer = an object");
  j = gpt2;
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array()}};
  refused(j, "has pre_tokenizer.pretokenizers = an array of 0 elements");
  j = gpt2;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  refused(j, "has pre_tokenizer = \"Whitespace\"");
  j = gpt2;
  j["pre_tokenizer"]["add_prefix_space"] = true;
  refused(j, "has pre_tokenizer's ByteLevel add_prefix_space = true");
  j = gpt2;
  j["pre_tokenizer"]["use_regex"] = false;
  refused(j, "has pre_tokenizer.use_regex = false");
  j = gpt2;
  j["model"]["dropout"] = 0.1;
  refused(j, "has model.dropout = 0.1");
  j = gpt2;
  j["model"]["byte_fallback"] = true;
  refused(j, "has model.byte_fallback = true");
  j = gpt2;
  j["model"]["continuing_subword_prefix"] = "##";
  refused(j, "has model.continuing_subword_prefix = \"##\"");
  j = gpt2;
  j["model"]["end_of_word_suffix"] = "</w>";
  refused(j, "has model.end_of_word_suffix = \"</w>\"");
  j = gpt2;
  j["decoder"] = {{"type", "WordPiece"}};
  refused(j, "has decoder = an object");
  j = gpt2;
  j["post_processor"] = {{"type", "BertProcessing"}};
  refused(j, "has post_processor = an object");
  // Llama 3's layout with a regex that is neither Llama 3's nor Qwen's: a one-character change
  j = gpt2;
  std::string regex = remat::text::kLlama3Regex;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"},
                                            {"invert", false}},
                                           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  d.write("tokenizer.json", j.dump());
  CHECK(Tokenizer::from_directory(d.path.string()).pretokenizer() == remat::text::Pretokenizer::llama3);
  nlohmann::json k = j;
  k["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = regex.replace(regex.find("{1,3}"), 5, "{1,2}");
  refused(k, "has pre_tokenizer.pretokenizers[0].pattern = ");
  k = j;
  k["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  refused(k, "has pre_tokenizer.pretokenizers[0].behavior = \"Removed\"");
  k = j;
  k["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true;  // GPT-2's regex after Llama's
  refused(k, "has pre_tokenizer.pretokenizers[1].use_regex = true");
}

namespace {
std::vector<std::string> pieces_as(remat::text::Pretokenizer kind, const std::string& s) {
  std::vector<std::string> out;
  remat::text::pretokenize(s, kind, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}
}  // namespace

TEST_CASE("Llama 3's and Qwen 2's pre-tokenizers cut text as their regexes do", "[text]") {
  // expected: Hugging Face tokenizers' Split with each regex (Oniguruma), by hand where noted
  using V = std::vector<std::string>;
  const auto llama = [](const std::string& s) { return pieces_as(remat::text::Pretokenizer::llama3, s); };
  const auto qwen = [](const std::string& s) { return pieces_as(remat::text::Pretokenizer::qwen2, s); };
  CHECK(llama("Hello world") == V{"Hello", " world"});
  CHECK(llama("12345 hello\r\n\n  world  \t") == V{"123", "45", " hello", "\r\n\n", " ", " world", "  \t"});
  CHECK(qwen("12345 hello") == V{"1", "2", "3", "4", "5", " hello"});
  CHECK(llama("x'Sup 'RE 'll") == V{"x", "'S", "up", " '", "RE", " '", "ll"});  // any case
  CHECK(llama("we'RE") == V{"we", "'RE"});
  CHECK(llama("'\xc5\xbf") == V{"'\xc5\xbf"});  // U+017F folds to s, but is no contraction
  CHECK(llama("\tthe (the \xe3\x80\x80the") == V{"\tthe", " (", "the", " ", "\xe3\x80\x80the"});
  CHECK(llama("(the") == V{"(the"});
  CHECK(llama("!!\n\nfoo") == V{"!!\n\n", "foo"});
  CHECK(llama(" ...\r") == V{" ...\r"});
  CHECK(llama("\n hello") == V{"\n", " hello"});
  CHECK(llama("a \n \n b") == V{"a", " \n \n", " b"});  // up to the run's last LF
  CHECK(llama("x  123") == V{"x", " ", " ", "123"});  // no space before numbers
  CHECK(llama("x\t!") == V{"x", "\t", "!"});          // only U+0020 before symbols
  CHECK(llama("a  ") == V{"a", "  "});
  CHECK(llama("e\xcc\x81t\xc3\xa9") == V{"e", "\xcc\x81t\xc3\xa9"});  // a mark, then letters
  CHECK(llama("\xe2\x85\xab\xc2\xbd\xc2\xb2\xe2\x85\xab") == V{"\xe2\x85\xab\xc2\xbd\xc2\xb2", "\xe2\x85\xab"});
  CHECK(llama("") == V{});
  std::mt19937 rng(11);  // the pieces always cover the text, none empty
  const std::vector<std::string> alphabet = {"a", "Z", "7", " ", "\n", "\r", "\t", "'", "s", "!", "\xc3\xa9",
                                             "\xcc\x81", "\xe3\x80\x80", "\xc2\xbd", "\xf0\x9f\x99\x82"};
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    for (std::size_t k = rng() % 16; k > 0; --k) s += alphabet[rng() % alphabet.size()];
    for (auto kind : {remat::text::Pretokenizer::llama3, remat::text::Pretokenizer::qwen2}) {
      std::string joined;
      for (const auto& p : pieces_as(kind, s)) {
        CHECK(!p.empty());
        joined += p;
      }
      CHECK(joined == s);
    }
  }
}

TEST_CASE("NFC as Hugging Face's normalizer, with its Unicode 9.0 tables", "[text]") {
  using remat::text::nfc;
  // expected: Hugging Face tokenizers' nfcNormalizer().normalizeString
  CHECK(nfc("plain ASCII and caf\xc3\xa9") == "plain ASCII and caf\xc3\xa9");
  CHECK(nfc("e\xcc\x81") == "\xc3\xa9");                                 // e + U+0301 -> U+00E9
  CHECK(nfc("\xe2\x84\xab") == "\xc3\x85");                              // U+212B -> U+00C5
  CHECK(nfc("\xe2\x84\xa6") == "\xce\xa9");                              // U+2126 -> U+03A9
  CHECK(nfc("\xcd\x84") == "\xcc\x88\xcc\x81");                          // U+0344: excluded
  CHECK(nfc("q\xcc\x81\xcc\x96") == "q\xcc\x96\xcc\x81");                // marks sorted: 220 before 230
  CHECK(nfc("a\xcc\x96\xcc\x81") == "\xc3\xa1\xcc\x96");                 // 220 does not block 230
  CHECK(nfc("a\xcc\x81\xcc\x81") == "\xc3\xa1\xcc\x81");                 // the second is blocked
  CHECK(nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8") == "\xea\xb0\x81");  // jamo L V T -> U+AC01
  CHECK(nfc("\xea\xb0\x80\xe1\x86\xa8") == "\xea\xb0\x81");              // LV + T
  CHECK(nfc("\xea\xb0\x81\xe1\x86\xa8") == "\xea\xb0\x81\xe1\x86\xa8");  // LVT + T: no
  // Unicode 10's Masaram Gondi nukta (ccc 7 today) is class 0 in 9.0: not moved
  CHECK(nfc("q\xcc\x81\xf0\x91\xb5\x82") == "q\xcc\x81\xf0\x91\xb5\x82");
  // Unicode 13's Dives Akuru U+11935 U+11930 -> U+11938 today: not composed in 9.0
  CHECK(nfc("\xf0\x91\xa4\xb5\xf0\x91\xa4\xb0") == "\xf0\x91\xa4\xb5\xf0\x91\xa4\xb0");
  std::mt19937 rng(5);  // idempotent
  const std::vector<std::string> alphabet = {"a", "e", "\xcc\x81", "\xcc\x96", "\xcc\x88", "\xe1\x84\x80",
                                             "\xe1\x85\xa1", "\xe1\x86\xa8", "\xc3\xa9", "\xe2\x84\xab", "\xcd\x84"};
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    for (std::size_t k = rng() % 10; k > 0; --k) s += alphabet[rng() % alphabet.size()];
    CHECK(nfc(nfc(s)) == nfc(s));
  }
}

TEST_CASE("ignore_merges keeps a piece that is a vocabulary token whole", "[text]") {
  // "zzq" is in the vocabulary, but no merge makes it
  nlohmann::json j = tiny_tokenizer_json();
  const std::int64_t next = j["added_tokens"][0]["id"].get<std::int64_t>() + 1;
  j["model"]["vocab"]["zzq"] = next;
  TempDir d;
  d.write("tokenizer.json", j.dump());
  const auto plain = Tokenizer::from_directory(d.path.string());
  CHECK(plain.encode(" zzq").size() > 1);
  j["model"]["ignore_merges"] = true;
  d.write("tokenizer.json", j.dump());
  const auto whole = Tokenizer::from_directory(d.path.string());
  CHECK(whole.encode("zzq") == std::vector<std::int32_t>{static_cast<std::int32_t>(next)});
  CHECK(whole.encode("zzq zzq").front() == next);
  CHECK(whole.encode(" the") == plain.encode(" the"));  // otherwise BPE as before
}

TEST_CASE("an NFC tokenizer normalizes between added tokens, matched as written", "[text]") {
  nlohmann::json j = tiny_tokenizer_json();
  j["normalizer"] = {{"type", "NFC"}};
  const std::int64_t eot = j["added_tokens"][0]["id"];
  j["added_tokens"][0]["normalized"] = false;
  j["added_tokens"].push_back({{"id", eot + 1}, {"content", "\xc3\xa9!"}, {"special", false}, {"normalized", true}});
  TempDir d;
  d.write("tokenizer.json", j.dump());
  const auto t = Tokenizer::from_directory(d.path.string());
  CHECK(t.normalizes_nfc());
  const auto i32 = [](std::int64_t x) { return static_cast<std::int32_t>(x); };
  CHECK(t.encode("caf\x65\xcc\x81 x") == t.encode("caf\xc3\xa9 x"));
  CHECK(t.decode(t.encode("e\xcc\x81")) == "\xc3\xa9");
  // U+0338 after '>' composes to U+226F in NFC, but not across the added token written before it
  std::vector<std::int32_t> want = {i32(eot)};
  for (std::int32_t id : t.encode("\xcc\xb8")) want.push_back(id);
  CHECK(t.encode("<|endoftext|>\xcc\xb8") == want);
  CHECK(t.encode(">\xcc\xb8") == t.encode("\xe2\x89\xaf"));  // U+226F
  // a normalized added token matches the normalized text: e + U+0301 + "!" is it
  CHECK(t.encode("e\xcc\x81!") == std::vector<std::int32_t>{i32(eot + 1)});
}

TEST_CASE("running out of memory while loading is remat::OutOfMemory, never an abort", "[text][hostile]") {
  // A child process per address-space limit, from the process's current size up, by 32 KiB, until
  // loading succeeds: each step fails somewhere else (reading, scanning, the DOM, the tables, the
  // merges). nlohmann's DOM allocates as it is destroyed, which aborted (std::terminate) when the
  // tables ran out of memory while the DOM was alive, or while io::parse_json built a nested DOM
  // such as this tokenizer.json's (NOTE [DOM out of memory] in io/json.hpp).
  if (kAddressSanitizer) {
    WARN("skipped under AddressSanitizer: its allocator dies when memory runs out instead of throwing");
    return;
  }
  const auto b = remat_test::train_tiny_bpe(remat_test::tiny_training_text(), 60);
  nlohmann::json v = nlohmann::json::parse(b.encoder_json);
  std::mt19937 rng(5);
  while (v.size() < 12'000) {  // a DOM of a few MB: more tokens, spelled in stand-ins
    std::string raw(2 + rng() % 7, ' ');
    for (char& c : raw) c = static_cast<char>(rng());
    if (!v.contains(remat_test::spelled(raw))) v[remat_test::spelled(raw)] = v.size();
  }
  TempDir d;
  const std::string vocab = d.write("vocab.json", v.dump()), merges = d.write("merges.txt", b.vocab_bpe);
  nlohmann::json j = tiny_tokenizer_json(60);
  const std::int64_t eot = v["<|endoftext|>"];
  v.erase("<|endoftext|>");
  j["model"]["vocab"] = v;
  j["added_tokens"][0]["id"] = eot;
  const std::string tj = d.write("tokenizer.json", j.dump());
  for (const bool hf : {false, true}) {
    int oom = 0, steps = 0;
    std::string bad;
    for (std::uint64_t extra = 0; bad.empty() && steps < 2000; extra += 32 << 10, ++steps) {
      const pid_t pid = ::fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        for (const int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTERM, SIGINT})
          std::signal(sig, SIG_DFL);  // not Catch2's handlers: the parent reads the signal
        const rlimit r{static_cast<rlim_t>(status_kib("VmSize:")) * 1024 + extra,
                       static_cast<rlim_t>(status_kib("VmSize:")) * 1024 + extra};
        ::setrlimit(RLIMIT_AS, &r);
        int code = 3;
        try {
          const auto t = hf ? Tokenizer::from_tokenizer_json(tj) : Tokenizer::from_files(vocab, merges);
          code = t.vocab_size() == 12'000 ? 0 : 4;
        } catch (const remat::OutOfMemory&) {
          code = 1;
        } catch (const remat::Error&) {
          code = 2;
        } catch (...) {
          code = 3;
        }
        ::_exit(code);
      }
      int status = 0;
      ::waitpid(pid, &status, 0);
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
      if (code == 0) break;
      if (code == 1) ++oom;
      else bad = "limit +" + std::to_string(extra >> 10) + " KiB: " +
                 (code == 2 ? "a remat::Error that is not OutOfMemory" : code == 3 ? "not a remat::Error"
                  : code == 4 ? "a wrong vocabulary size" : "killed by signal " + std::to_string(code - 100));
    }
    INFO((hf ? "tokenizer.json" : "vocab.json + merges.txt") << ": " << oom << " limits ran out of memory");
    CHECK(bad == "");
    CHECK(oom >= 10);  // the sweep crossed the load, not only its end
    CHECK(steps < 2000);
  }
}
