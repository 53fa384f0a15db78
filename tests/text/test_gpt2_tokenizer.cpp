// SPDX-License-Identifier: MIT
// GPT-2's tokenizer (include/remat/text/): the pre-tokenizer against GPT-2's regex (expected
// pieces from Node's regex engine running the reference pattern), UTF-8 repair against the
// WHATWG decoder (Node's Buffer.toString), BPE against a plain implementation of the
// reference algorithm, the three file layouts, and errors on bad files. The 1 MB comparison
// with the npm reference is text.reference_gpt2 (tests/text/reference/).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include <remat/text/gpt2_tokenizer.hpp>

#include "text/tiny_bpe.hpp"

using remat::text::Gpt2Tokenizer;
namespace fs = std::filesystem;

namespace {

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

std::vector<std::string> token_strings(const Gpt2Tokenizer& t, const std::vector<std::int32_t>& ids) {
  std::vector<std::string> out;
  for (auto id : ids) out.push_back(t.token_bytes(id));
  return out;
}

Gpt2Tokenizer tiny() {
  const auto b = remat_test::train_tiny_bpe(remat_test::tiny_training_text(), 120);
  return Gpt2Tokenizer::from_text(b.encoder_json, b.vocab_bpe);
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
  const auto t = Gpt2Tokenizer::from_text(b.encoder_json, b.vocab_bpe);
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
  const auto t = Gpt2Tokenizer::from_text(vocab, merges);
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
  const auto want = Gpt2Tokenizer::from_directory(openai.path.string()).encode(text);
  CHECK(want.size() < text.size() * 2 / 3);  // the merges were applied
  for (const TempDir* d : {&hf, &hf_json, &hf_json_arrays}) {
    const auto t = Gpt2Tokenizer::from_directory(d->path.string());
    CHECK(t.encode(text) == want);
    CHECK(t.eot() == eot);
  }
}

TEST_CASE("bad tokenizer files are errors that say what and where", "[text]") {
  const auto b = remat_test::train_tiny_bpe(remat_test::tiny_training_text(), 20);
  TempDir d;
  CHECK_THROWS_WITH(Gpt2Tokenizer::from_directory(d.path.string()),
                    REMAT_CONTAINS("no tokenizer files in") && REMAT_CONTAINS("encoder.json + vocab.bpe"));
  const auto bad_text = [](const std::string& vocab, const std::string& merges) {
    return [=] { Gpt2Tokenizer::from_text(vocab, merges, "enc.json", "merges.txt"); };
  };
  CHECK_THROWS_WITH(bad_text("{\"a\": 0", b.vocab_bpe)(), REMAT_CONTAINS("'enc.json' is not valid JSON"));
  CHECK_THROWS_WITH(bad_text("[1, 2]", b.vocab_bpe)(), REMAT_CONTAINS("is not an object of token -> id"));
  CHECK_THROWS_WITH(bad_text("{\"a\": \"zero\"}", b.vocab_bpe)(), REMAT_CONTAINS("expected an integer"));
  CHECK_THROWS_WITH(bad_text("{\"a\": 0, \"b\": 2}", b.vocab_bpe)(), REMAT_CONTAINS("has no token with id 1"));
  CHECK_THROWS_WITH(bad_text("{\"a\": 0, \"b\": 1}", b.vocab_bpe)(), REMAT_CONTAINS("expected at least the 256 byte tokens"));
  CHECK_THROWS_WITH(bad_text("{\"a\": -4}", b.vocab_bpe)(), REMAT_CONTAINS("has id -4"));
  CHECK_THROWS_WITH(bad_text("{\"a\": 99999999999}", b.vocab_bpe)(), REMAT_CONTAINS("has id 99999999999"));
  CHECK_THROWS_WITH(bad_text(b.encoder_json, "#version: 0.2\nt h e\n")(),
                    REMAT_CONTAINS("line 2 of 'merges.txt' is not a merge"));
  CHECK_THROWS_WITH(bad_text(b.encoder_json, "#version: 0.2\nzzz q\n")(),
                    REMAT_CONTAINS("merge 1 (\"zzz q\") in 'merges.txt' names a token the vocabulary lacks"));
  nlohmann::json v = nlohmann::json::parse(b.encoder_json);
  v["x y"] = v.size();  // a space is not one of GPT-2's stand-ins
  CHECK_THROWS_WITH(bad_text(v.dump(), b.vocab_bpe)(), REMAT_CONTAINS("not spelled in GPT-2's byte stand-ins"));
  d.write("tokenizer.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}");
  CHECK_THROWS_WITH(Gpt2Tokenizer::from_directory(d.path.string()), REMAT_CONTAINS("has a model that is not BPE"));
  d.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [3]}}");
  CHECK_THROWS_AS(Gpt2Tokenizer::from_directory(d.path.string()), remat::Error);
  CHECK_THROWS_WITH(Gpt2Tokenizer::from_files((d.path / "none.json").string(), "x"), REMAT_CONTAINS("cannot open"));
  CHECK_THROWS_WITH(Gpt2Tokenizer::from_files(d.path.string(), "x"), REMAT_CONTAINS("is a directory"));
}
