// SPDX-License-Identifier: MIT
// Byte-level BPE tokenizers: GPT-2's (50,000 merges over 256 byte tokens, plus <|endoftext|>),
// loaded from the files OpenAI published (encoder.json + vocab.bpe), from their Hugging Face
// twins (vocab.json + merges.txt) or from a Hugging Face tokenizer.json; and from a
// tokenizer.json, those of Llama 3 and Qwen 2/3 (their Split regexes, NFC, ignore_merges, added
// tokens special or not), with the ids of Hugging Face's own tokenizers library (ctest
// text.reference_hf). Needs nlohmann-json (Debian: nlohmann-json3-dev).
//
//   auto tok = remat::text::Tokenizer::from_directory("gpt2/");   // or "Llama-3.2-1B/"
//   std::vector<std::int32_t> ids = tok.encode("Hello world");   // {15496, 995}
//   std::string back = tok.decode(ids);                           // "Hello world"
//
// NOTE [Byte-level BPE]: vocabulary files spell each token's bytes with GPT-2's printable stand-in
// characters (byte 0x20 is "Ġ", U+0120; byte_stand_in). Every vocabulary key is mapped back to
// raw bytes at load, as encoder.py's byte decoder does, whatever it looks like: "<|endoftext|>"
// is its own 13 ASCII bytes, "<Ġ>" is "< >". Encoding works on bytes and ids: a piece starts as
// one token per byte; the adjacent pair with the lowest merge rank is merged, every occurrence
// left to right, then the next lowest, until no adjacent pair has a rank (encoder.py's
// algorithm; tiktoken merges one pair at a time, the one making the lowest id, which gives the
// same ids for GPT-2's files). A merge's rank is its line in the merges file (0 first); a merge
// listed twice takes its last line's rank, as encoder.py's dict(zip(merges, range(...))) and
// Hugging Face's tokenizers do. O(n log n) per piece with a heap of candidate pairs (stale
// entries skipped), so a 100 KB run of one character is no problem; pieces already seen come
// from a cache. The pieces: text/pretokenize.hpp (NOTE [GPT-2 pre-tokenization]).
//
// NOTE [Special tokens]: a token is special (encode() matches its text literally before
// pre-tokenization; encode_ordinary() never does) only where the files declare it: a Hugging Face
// tokenizer.json's "added_tokens" (each one, special or not, as Hugging Face matches them:
// leftmost, then longest; those marked "normalized": false in the text as written, then the text
// between them normalized and the others matched in it; encode_ordinary still matches the ones
// that are not special, as Hugging Face's split_special_tokens=True does), and
// for encoder.json/vocab.json, which declare nothing, GPT-2's convention that the vocabulary's
// "<|endoftext|>" is the end-of-text token (what OpenAI's tiktoken declares for GPT-2). Never by
// shape: "<pad>" in a vocabulary is an ordinary token, its five bytes, unless declared. An
// added token's bytes are its text's UTF-8; a vocabulary key that is not a stand-in spelling is
// an error unless added_tokens declares it with the same id. Added tokens that strip spaces
// around them (lstrip, rstrip, single_word) are refused rather than matched differently.
//
// NOTE [Tokenizer files]: files are read with caps sized to real ones, checked before memory is
// reserved, and JSON is parsed through io::parse_json (NOTE [hostile JSON]: depth <= 64, a value
// count, no duplicate keys):
//   vocab.json / encoder.json  16 MiB, 1,000,001 values  (GPT-2: 1.04 MB, 50,257 tokens; a large
//                                                        one, Qwen2's: 2.8 MB, 151,643 tokens)
//   merges.txt / vocab.bpe     16 MiB                    (GPT-2: 0.46 MB; Qwen2's: 1.7 MB)
//   tokenizer.json             64 MiB, 4,000,000 values  (GPT-2: 1.4 MB; Llama 3's: 9.1 MB, ~0.4M
//                                                        values, ~1M with merges as arrays)
// Ids are checked against the file's entry count (vocabulary plus added tokens) before any table
// is sized, so a 15-byte {"!": 16777215} is an error, not a 16M-entry table; every id below the
// largest must be used once. A tokenizer.json is read for its rules: the normalizer (null or NFC,
// text/normalize.hpp), the pre-tokenizer (GPT-2's ByteLevel regex, or a Sequence of a Split whose
// regex is exactly Llama 3's or Qwen 2's and a ByteLevel without regex: text/pretokenize.hpp),
// ignore_merges (a piece that is itself a vocabulary token is that token, before any merge), the
// post-processor and decoder (ByteLevel or a template: no bytes change; encode() adds no
// template tokens, as Hugging Face's add_special_tokens=False). Anything else that would
// tokenize otherwise (another regex, add_prefix_space, dropout, byte_fallback, subword prefixes,
// another normalizer) is an error naming the field, never silently GPT-2's rules. Running out
// of memory while loading is remat::OutOfMemory, never std::terminate (io::JsonDocument).
#pragma once

#include <algorithm>
#include <array>
#include <bitset>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"
#include "../io/file.hpp"
#include "../io/json.hpp"
#include "vocab_scan.hpp"
#include "normalize.hpp"
#include "pretokenize.hpp"
#include "unicode.hpp"

namespace remat::text {

/// GPT-2's stand-in character for byte b (NOTE [Byte-level BPE]): printable Latin-1 bytes are
/// themselves; the other 68 take U+0100, U+0101, ... in byte order.
inline bool is_printable_byte(std::uint32_t b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}
inline std::uint32_t byte_stand_in(unsigned char b) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    std::uint32_t next = 256;
    for (std::uint32_t c = 0; c < 256; ++c) t[c] = is_printable_byte(c) ? c : next++;
    return t;
  }();
  return table[b];
}

/// The Split regexes of Llama 3's and Qwen 2/3's tokenizer.json (NOTE [Llama 3 pre-tokenization]).
inline constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

/// File caps (NOTE [Tokenizer files]).
inline constexpr io::JsonLimits kVocabJsonLimits{16u << 20, 64, 1'000'001};
inline constexpr std::uint64_t kMergesMaxBytes = 16u << 20;
inline constexpr io::JsonLimits kTokenizerJsonLimits{64u << 20, 64, 4'000'000};

class Tokenizer {
 public:
  /// GPT-2's own files: `encoder.json` (token -> id) and `vocab.bpe` (merges, best first),
  /// or the same content as Hugging Face's `vocab.json` and `merges.txt`.
  static Tokenizer from_files(const std::string& vocab_json, const std::string& merges_txt) {
    const std::vector<char> v =
        io::read_file(vocab_json, "Tokenizer", kVocabJsonLimits.max_bytes, "a vocab.json (encoder.json)");
    const std::vector<char> m =
        io::read_file(merges_txt, "Tokenizer", kMergesMaxBytes, "a merges.txt (vocab.bpe)");
    return from_text(std::string_view(v.data(), v.size()), std::string_view(m.data(), m.size()),
                     vocab_json, merges_txt);
  }
  /// The same from the files' contents; the names only appear in errors.
  static Tokenizer from_text(std::string_view vocab_json, std::string_view merges_txt,
                             const std::string& vocab_name = "the vocabulary",
                             const std::string& merges_name = "the merges") {
    return loading(vocab_name, [&] {
      Tokenizer t;
      {
        const auto v = parse(vocab_json, kVocabJsonLimits, "vocabulary", vocab_name, {});
        t.load_vocab(v.dom, {}, vocab_name);
      }  // the DOM's memory back before the merges
      // GPT-2's convention (NOTE [Special tokens]): these files declare no special tokens.
      const auto eot = t.id_of_.find("<|endoftext|>");
      if (eot != t.id_of_.end()) t.declare_added("<|endoftext|>", eot->second, true, false);
      REMAT_CHECK(merges_txt.size() <= kMergesMaxBytes, kWho, ": the merges '", merges_name, "' have ",
                  merges_txt.size(), " bytes, more than the ", kMergesMaxBytes,
                  " allowed (a real one is far smaller; is it the right file?)");
      std::string_view rest = merges_txt;
      std::size_t line_no = 0;
      std::int32_t rank = 0;
      while (!rest.empty()) {
        const std::size_t eol = rest.find('\n');
        std::string_view line = rest.substr(0, eol);
        rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
        const std::size_t sp = line.find(' ');
        REMAT_CHECK(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
                        line.find(' ', sp + 1) == std::string_view::npos,
                    kWho, ": line ", line_no, " of '", merges_name,
                    "' is not a merge (expected two tokens separated by one space, e.g. \"\u0120 t\"; "
                    "found ", brief(line), ")");
        t.add_merge(line.substr(0, sp), line.substr(sp + 1), rank++, merges_name);
      }
      return t;
    });
  }

  /// A Hugging Face `tokenizer.json` whose model is byte-level BPE with the rules of GPT-2, Llama 3
  /// or Qwen 2/3 (NOTE [Tokenizer files]).
  static Tokenizer from_tokenizer_json(const std::string& path) {
    const std::vector<char> buf =
        io::read_file(path, "Tokenizer", kTokenizerJsonLimits.max_bytes, "a tokenizer.json");
    return loading(path, [&] {
      const std::string_view text(buf.data(), buf.size());
      const auto parsed = parse(text, kTokenizerJsonLimits, "tokenizer.json", path, {"model", "vocab"});
      const nlohmann::json& j = parsed.dom;
      const auto bad = [&](const std::string& what) {
        return Error(::remat::detail::cat(kWho, ": '", path, "' ", what,
                                          " (expected a Hugging Face tokenizer.json with \"model\": "
                                          "{\"type\": \"BPE\", \"vocab\": {...}, \"merges\": [...]})"));
      };
      if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) throw bad("has no model");
      const nlohmann::json& model = j["model"];
      if (model.contains("type") && !(model["type"].is_string() && model["type"] == "BPE"))
        throw bad("has a model that is not BPE");
      if (!model.contains("vocab") || !model.contains("merges") || !model["merges"].is_array())
        throw bad("has no vocab or merges");
      Tokenizer t;
      t.read_rules(j, path);
      const std::vector<Added> added = added_tokens(j, path);
      t.load_vocab(model["vocab"], added, path);
      for (const Added& a : added) t.declare_added(a.content, a.id.get<std::int64_t>(), a.special, a.normalized);
      std::int32_t rank = 0;
      for (const auto& m : model["merges"]) {
        if (m.is_string()) {  // "Ġ t"
          const std::string& s = m.get_ref<const std::string&>();
          const std::size_t sp = s.find(' ');
          if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos)
            throw bad("has a merge " + io::json_brief(m) + " that is not two tokens");
          t.add_merge(std::string_view(s).substr(0, sp), std::string_view(s).substr(sp + 1), rank++, path);
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["Ġ", "t"]
          t.add_merge(m[0].get_ref<const std::string&>(), m[1].get_ref<const std::string&>(), rank++, path);
        } else {
          throw bad("has a merge (" + io::json_brief(m) + ") that is neither \"a b\" nor [\"a\", \"b\"]");
        }
      }
      return t;
    });
  }

  /// The tokenizer in a directory: encoder.json + vocab.bpe, vocab.json + merges.txt, or
  /// tokenizer.json (checked in that order).
  static Tokenizer from_directory(const std::string& dir) {
    const auto has = [&](const char* name) { return io::is_regular_file(dir + "/" + name); };
    if (has("encoder.json") && has("vocab.bpe"))
      return from_files(dir + "/encoder.json", dir + "/vocab.bpe");
    if (has("vocab.json") && has("merges.txt"))
      return from_files(dir + "/vocab.json", dir + "/merges.txt");
    if (has("tokenizer.json")) return from_tokenizer_json(dir + "/tokenizer.json");
    throw Error(::remat::detail::cat(
        kWho, ": no tokenizer files in '", dir,
        "' (expected encoder.json + vocab.bpe, vocab.json + merges.txt, or tokenizer.json; "
        "hint: GPT-2's are in the Hugging Face repository openai-community/gpt2)"));
  }

  std::int64_t vocab_size() const { return static_cast<std::int64_t>(bytes_of_.size()); }
  /// The id of the end-of-text token <|endoftext|> (50256 for GPT-2), or -1 when the files do
  /// not declare one (NOTE [Special tokens]).
  std::int32_t eot() const { return eot_; }

  /// Token ids of `text`, as Hugging Face's encode(text, add_special_tokens=False): every added
  /// token's text (NOTE [Special tokens]; for GPT-2, "<|endoftext|>") is that token, the longest
  /// where two start at one place; the rest is normalized (NFC where the file says so),
  /// pre-tokenized and BPE-encoded. Invalid UTF-8 is replaced first (NOTE [Invalid UTF-8]). No
  /// post-processor's tokens (a template's <|begin_of_text|>) are added.
  std::vector<std::int32_t> encode(std::string_view text) const { return encode_with(text, true); }
  /// The same with special tokens' text encoded as plain text (Hugging Face's
  /// split_special_tokens=True): "<|endoftext|>" is 7 ordinary tokens for GPT-2 (what encoder.py
  /// and tiktoken's encode_ordinary do). Added tokens that are not special are still matched.
  std::vector<std::int32_t> encode_ordinary(std::string_view text) const { return encode_with(text, false); }

  /// The pre-tokenizer and normalization this tokenizer applies.
  Pretokenizer pretokenizer() const { return pretok_; }
  bool normalizes_nfc() const { return nfc_; }

  /// The bytes of the tokens, concatenated (they may end inside a UTF-8 character).
  std::string decode(const std::vector<std::int32_t>& ids) const {
    std::string out;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      REMAT_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "remat::text::Tokenizer::decode: id ",
                  ids[i], " at position ", i, " is outside the vocabulary of ", vocab_size(),
                  " tokens (expected 0..", vocab_size() - 1, ")");
      out += bytes_of_[static_cast<std::size_t>(ids[i])];
    }
    return out;
  }
  /// The raw bytes of one token.
  const std::string& token_bytes(std::int32_t id) const {
    REMAT_CHECK(id >= 0 && id < vocab_size(), "remat::text::Tokenizer::token_bytes: id ", id,
                " is outside the vocabulary of ", vocab_size(), " tokens");
    return bytes_of_[static_cast<std::size_t>(id)];
  }

 private:
  static constexpr const char* kWho = "remat::text::Tokenizer";
  // bytes_of_[id]: the token's raw bytes; id_of_: the inverse. byte_id_[b]: the token of byte b.
  std::vector<std::string> bytes_of_;
  std::unordered_map<std::string, std::int32_t> id_of_;
  std::int32_t byte_id_[256];
  std::int32_t eot_ = -1;
  // Added tokens (NOTE [Special tokens]), matched before pre-tokenization.
  struct AddedToken {
    std::string text;
    std::int32_t id;
    bool special;     // not matched by encode_ordinary
    bool normalized;  // matched in the normalized text, else in the text as written
  };
  std::vector<AddedToken> added_;
  std::bitset<256> first_byte_;  // the first bytes of the added tokens
  // The rules of a tokenizer.json (NOTE [Tokenizer files]); GPT-2's by default.
  Pretokenizer pretok_ = Pretokenizer::gpt2;
  bool nfc_ = false;
  bool ignore_merges_ = false;      // a piece that is a vocabulary token is that token
  std::vector<bool> in_model_;      // id -> a token of the model's vocabulary (not only added)
  // A merge: (left id, right id) -> rank (0 = merged first) and the merged token's id.
  struct Merge {
    std::int32_t rank, id;
  };
  std::unordered_map<std::uint64_t, Merge> merges_;
  // Pieces already encoded. Bounded: past kCacheMax entries new pieces are not kept.
  static constexpr std::size_t kCacheMax = 1 << 18;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache_;

  // An entry of tokenizer.json's "added_tokens".
  struct Added {
    std::string content;
    nlohmann::json id;  // as the file has it: checked with the vocabulary's ids
    bool special = true, normalized = false;
  };

  static std::uint64_t key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  /// A string from a file, quoted and cut for a message.
  static std::string brief(std::string_view s) {
    return io::json_brief(nlohmann::json(std::string(s.substr(0, 160))));
  }

  /// Runs a loader; running out of memory is remat::OutOfMemory naming the file.
  template <class Fn>
  static Tokenizer loading(const std::string& name, Fn&& fn) {
    try {
      return fn();
    } catch (const std::bad_alloc&) {
      throw OutOfMemory(::remat::detail::cat(kWho, ": out of host memory while loading '", name, "'"));
    }
  }

  /// A tokenizer file's JSON (NOTE [Tokenizer files]): first scanned (limits, duplicate keys, an
  /// id that is not a number named with its token), then its DOM, destroyed without allocating
  /// (io::JsonDocument, NOTE [DOM out of memory] in io/json.hpp).
  static io::JsonDocument parse(std::string_view text, const io::JsonLimits& limits,
                                const char* what, const std::string& name,
                                std::vector<std::string> vocab_at) {
    detail::VocabScan scan(std::move(vocab_at), kWho, name);
    io::scan_json(text, limits, scan, kWho, what, name);
    return io::parse_json_document(text, limits, kWho, what, name);
  }

  /// The byte behind each stand-in character (the inverse of byte_stand_in).
  static const std::unordered_map<std::uint32_t, unsigned char>& byte_of_stand_in() {
    static const std::unordered_map<std::uint32_t, unsigned char> m = [] {
      std::unordered_map<std::uint32_t, unsigned char> r;
      for (int b = 0; b < 256; ++b) r[byte_stand_in(static_cast<unsigned char>(b))] = static_cast<unsigned char>(b);
      return r;
    }();
    return m;
  }
  static bool stand_in_to_bytes(std::string_view spelled, std::string& out) {
    out.clear();
    const auto& m = byte_of_stand_in();
    for (std::size_t i = 0; i < spelled.size();) {
      const detail::Decoded d = detail::decode_one(spelled, i);
      const auto it = m.find(d.cp);
      if (it == m.end()) return false;  // invalid UTF-8 decodes to U+FFFD, not a stand-in
      out += static_cast<char>(it->second);
      i += d.len;
    }
    return !out.empty();
  }

  /// The pre-tokenizer and normalizer of a tokenizer.json (NOTE [Tokenizer files]): GPT-2's,
  /// Llama 3's or Qwen 2's; anything that would tokenize otherwise is refused, naming the field.
  /// An absent or null part is GPT-2's.
  void read_rules(const nlohmann::json& j, const std::string& path) {
    const auto refuse = [&](const std::string& field, const nlohmann::json& v, const char* expected) {
      return Error(::remat::detail::cat(kWho, ": '", path, "' has ", field, " = ", io::json_brief(v),
                                        ", which this tokenizer does not implement (expected ", expected,
                                        "; it implements the byte-level BPE of GPT-2, Llama 3 and Qwen 2/3 "
                                        "only, and would give other ids than the file's owner)"));
    };
    const auto is = [](const nlohmann::json& o, const char* k, const nlohmann::json& want) {
      return !o.contains(k) || o[k].is_null() || o[k] == want;
    };
    const auto type_of = [](const nlohmann::json& o) {
      return o.is_object() && o.contains("type") && o["type"].is_string() ? o["type"].get<std::string>()
                                                                           : std::string();
    };
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      const nlohmann::json& n = j["normalizer"];
      if (type_of(n) != "NFC") throw refuse("normalizer", n, "null or {\"type\": \"NFC\"}");
      nfc_ = true;
    }
    if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) {
      const nlohmann::json& p = j["pre_tokenizer"];
      const nlohmann::json* byte_level = &p;
      if (type_of(p) == "Sequence") {
        // Llama 3, Qwen 2: [Split(their regex, Isolated), ByteLevel(use_regex false)]
        const char* want = "[{\"type\": \"Split\", ...}, {\"type\": \"ByteLevel\", \"use_regex\": false}]";
        if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array() || p["pretokenizers"].size() != 2)
          throw refuse("pre_tokenizer.pretokenizers", p.contains("pretokenizers") ? p["pretokenizers"] : p, want);
        const nlohmann::json& split = p["pretokenizers"][0];
        if (type_of(split) != "Split") throw refuse("pre_tokenizer.pretokenizers[0]", split, want);
        const nlohmann::json* regex = split.contains("pattern") && split["pattern"].is_object() &&
                                              split["pattern"].contains("Regex") && split["pattern"]["Regex"].is_string()
                                          ? &split["pattern"]["Regex"]
                                          : nullptr;
        if (regex && *regex == kLlama3Regex) pretok_ = Pretokenizer::llama3;
        else if (regex && *regex == kQwen2Regex) pretok_ = Pretokenizer::qwen2;
        else
          throw refuse("pre_tokenizer.pretokenizers[0].pattern", split.contains("pattern") ? split["pattern"] : split,
                       "{\"Regex\": Llama 3's or Qwen 2's pattern}");
        if (!is(split, "behavior", "Isolated"))
          throw refuse("pre_tokenizer.pretokenizers[0].behavior", split["behavior"], "\"Isolated\"");
        if (!is(split, "invert", false)) throw refuse("pre_tokenizer.pretokenizers[0].invert", split["invert"], "false");
        byte_level = &p["pretokenizers"][1];
        if (type_of(*byte_level) != "ByteLevel")
          throw refuse("pre_tokenizer.pretokenizers[1]", *byte_level, "{\"type\": \"ByteLevel\"}");
        if (!is(*byte_level, "use_regex", false))
          throw refuse("pre_tokenizer.pretokenizers[1].use_regex", (*byte_level)["use_regex"], "false");
      } else if (type_of(p) == "ByteLevel") {
        if (!is(p, "use_regex", true)) throw refuse("pre_tokenizer.use_regex", p["use_regex"], "true");
      } else {
        throw refuse("pre_tokenizer", p.is_object() && p.contains("type") ? p["type"] : p,
                     "{\"type\": \"ByteLevel\"} or a Sequence of Split and ByteLevel");
      }
      if (!is(*byte_level, "add_prefix_space", false))
        throw refuse("pre_tokenizer's ByteLevel add_prefix_space", (*byte_level)["add_prefix_space"], "false");
    }
    // The post-processor and decoder add no ids to encode() (add_special_tokens=False) and change
    // no bytes of decode() when they are ByteLevel or a template; anything else is refused.
    if (j.contains("post_processor") && !j["post_processor"].is_null()) {
      const nlohmann::json& pp = j["post_processor"];
      const auto ok = [&](const nlohmann::json& x) {
        return type_of(x) == "ByteLevel" || type_of(x) == "TemplateProcessing";
      };
      bool fine = ok(pp);
      if (type_of(pp) == "Sequence" && pp.contains("processors") && pp["processors"].is_array()) {
        fine = true;
        for (const auto& x : pp["processors"]) fine = fine && ok(x);
      }
      if (!fine) throw refuse("post_processor", pp, "null, ByteLevel, TemplateProcessing or a Sequence of them");
    }
    if (j.contains("decoder") && !j["decoder"].is_null() && type_of(j["decoder"]) != "ByteLevel")
      throw refuse("decoder", j["decoder"], "null or {\"type\": \"ByteLevel\"}");
    const nlohmann::json& m = j["model"];
    if (!is(m, "dropout", nullptr) && m["dropout"] != 0) throw refuse("model.dropout", m["dropout"], "null");
    if (!is(m, "ignore_merges", false)) {
      if (!m["ignore_merges"].is_boolean()) throw refuse("model.ignore_merges", m["ignore_merges"], "true or false");
      ignore_merges_ = true;
    }
    if (!is(m, "byte_fallback", false)) throw refuse("model.byte_fallback", m["byte_fallback"], "false");
    if (!is(m, "continuing_subword_prefix", ""))
      throw refuse("model.continuing_subword_prefix", m["continuing_subword_prefix"], "\"\" or null");
    if (!is(m, "end_of_word_suffix", ""))
      throw refuse("model.end_of_word_suffix", m["end_of_word_suffix"], "\"\" or null");
  }

  /// tokenizer.json's "added_tokens": their text and ids (NOTE [Special tokens]).
  static std::vector<Added> added_tokens(const nlohmann::json& j, const std::string& path) {
    std::vector<Added> out;
    if (!j.contains("added_tokens") || j["added_tokens"].is_null()) return out;
    const nlohmann::json& list = j["added_tokens"];
    REMAT_CHECK(list.is_array(), kWho, ": '", path, "' has added_tokens = ", io::json_brief(list),
                " (expected an array of {\"id\": ..., \"content\": ...})");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const nlohmann::json& a = list[i];
      REMAT_CHECK(a.is_object() && a.contains("content") && a["content"].is_string() &&
                      !a["content"].get_ref<const std::string&>().empty() && a.contains("id") &&
                      a["id"].is_number_integer(),
                  kWho, ": added token ", i, " in '", path, "' is ", io::json_brief(a),
                  a.is_object() && a.contains("content") ? " with content " + io::json_brief(a["content"]) : "",
                  " (expected {\"id\": an integer, \"content\": a non-empty string, ...})");
      for (const char* flag : {"lstrip", "rstrip", "single_word"})
        REMAT_CHECK(!a.contains(flag) || a[flag] == false, kWho, ": added token ",
                    io::json_brief(a["content"]), " in '", path, "' has ", flag, " = ",
                    io::json_brief(a[flag]), " (expected false: this tokenizer matches added tokens "
                    "literally and does not strip the spaces around them as Hugging Face would)");
      const auto flag = [&](const char* k, bool absent) {
        if (!a.contains(k) || a[k].is_null()) return absent;
        REMAT_CHECK(a[k].is_boolean(), kWho, ": added token ", io::json_brief(a["content"]), " in '", path,
                    "' has ", k, " = ", io::json_brief(a[k]), " (expected true or false)");
        return a[k].get<bool>();
      };
      // absent (Hugging Face's files always have them): special and normalized false
      out.push_back({a["content"].get<std::string>(), a["id"], flag("special", false), flag("normalized", false)});
    }
    return out;
  }

  /// The vocabulary and the added tokens (NOTE [Byte-level BPE], [Special tokens], [Tokenizer
  /// files]): ids checked against the entry count before the tables are sized.
  void load_vocab(const nlohmann::json& v, const std::vector<Added>& added, const std::string& path) {
    REMAT_CHECK(v.is_object() && !v.empty(), kWho, ": the vocabulary in '", path, "' is ",
                io::json_brief(v), ", not an object of token -> id (e.g. {\"!\": 0, ...})");
    const std::size_t entries = v.size() + added.size();  // no id can be past this
    const auto check_id = [&](const nlohmann::json& id, const std::string& token, const char* where) {
      REMAT_CHECK(id.is_number_integer(), kWho, ": token ", brief(token), " in '", path, "' has the id ",
                  io::json_brief(id), where, " (expected an integer)");
      const std::int64_t signed_id = id.is_number_unsigned() ? 0 : id.get<std::int64_t>();
      const bool in_range = id.is_number_unsigned()
                                ? id.get<std::uint64_t>() < entries
                                : signed_id >= 0 && static_cast<std::uint64_t>(signed_id) < entries;
      REMAT_CHECK(in_range, kWho, ": token ", brief(token), " in '", path, "' has the id ", io::json_brief(id),
                  where, ", but the file has ", v.size(), v.size() == 1 ? " token" : " tokens",
                  added.empty() ? std::string() : ::remat::detail::cat(" and ", added.size(), " added tokens"),
                  " (expected ids 0..", entries - 1, ", each used once)");
      return static_cast<std::size_t>(id.get<std::uint64_t>());
    };
    std::size_t size = 0;
    for (const auto& [spelled, id] : v.items()) size = std::max(size, check_id(id, spelled, "") + 1);
    for (const Added& a : added) size = std::max(size, check_id(a.id, a.content, " in added_tokens") + 1);
    bytes_of_.assign(size, std::string());
    const auto place = [&](std::size_t id, std::string raw, const std::string& spelled, const char* where) {
      std::string& slot = bytes_of_[id];
      REMAT_CHECK(slot.empty() || slot == raw, kWho, ": id ", id, " in '", path, "' is given to two tokens: ",
                  brief(spelled), where, " and the bytes ", brief(slot), " (expected one token per id)");
      slot = std::move(raw);
    };
    std::unordered_multimap<std::string_view, std::uint64_t> declared;  // added tokens: text -> id
    for (const Added& a : added) declared.emplace(a.content, a.id.get<std::uint64_t>());
    id_of_.reserve(bytes_of_.size());
    std::string raw;
    for (const auto& item : v.items()) {
      const std::string& spelled = item.key();
      const auto i = static_cast<std::size_t>(item.value().get<std::uint64_t>());
      if (!stand_in_to_bytes(spelled, raw)) {
        const auto [first, last] = declared.equal_range(spelled);
        const bool is_declared = std::any_of(first, last, [&](const auto& d) { return d.second == i; });
        REMAT_CHECK(is_declared, kWho, ": token ", brief(spelled), " (id ", i, ") in '", path,
                    "' is not spelled in GPT-2's byte stand-ins and not declared in added_tokens (expected "
                    "a byte-level BPE vocabulary: each character stands for one byte, e.g. \"\u0120the\")");
        raw = spelled;
      }
      place(i, raw, spelled, "");
      id_of_.emplace(bytes_of_[i], static_cast<std::int32_t>(i));  // bytes twice: the first id
    }
    in_model_.assign(bytes_of_.size(), false);
    for (const auto& item : v.items()) in_model_[static_cast<std::size_t>(item.value().get<std::uint64_t>())] = true;
    // An added token's text may also be an ordinary token's bytes (a run of spaces, say): BPE keeps
    // making the ordinary one; the added id decodes to the same bytes.
    for (const Added& a : added) {
      const auto i = static_cast<std::size_t>(a.id.get<std::uint64_t>());
      place(i, a.content, a.content, " (added_tokens)");
      id_of_.emplace(a.content, static_cast<std::int32_t>(i));
    }
    for (std::size_t i = 0; i < bytes_of_.size(); ++i)
      REMAT_CHECK(!bytes_of_[i].empty(), kWho, ": the vocabulary in '", path, "' has no token with id ", i,
                  " (expected ids 0..", bytes_of_.size() - 1, " without gaps)");
    REMAT_CHECK(id_of_.size() >= 256, kWho, ": '", path, "' has ", id_of_.size(),
                id_of_.size() == 1 ? " token" : " tokens", " (expected at least the 256 byte tokens)");
    for (int b = 0; b < 256; ++b) {
      const auto it = id_of_.find(std::string(1, static_cast<char>(b)));
      REMAT_CHECK(it != id_of_.end(), kWho, ": the vocabulary in '", path, "' has no token for byte ", b,
                  " (expected all 256 byte tokens of byte-level BPE)");
      byte_id_[b] = it->second;
    }
  }

  void declare_added(const std::string& text, std::int64_t id, bool special, bool normalized) {
    added_.push_back({text, static_cast<std::int32_t>(id), special, normalized});
    first_byte_.set(static_cast<unsigned char>(text[0]));
    if (special && text == "<|endoftext|>") eot_ = static_cast<std::int32_t>(id);
  }

  /// One merge, `rank` its place in the file (NOTE [Byte-level BPE]: a later duplicate wins).
  void add_merge(std::string_view sa, std::string_view sb, std::int32_t rank, const std::string& path) {
    std::string a, b;
    const bool ok = stand_in_to_bytes(sa, a) && stand_in_to_bytes(sb, b);
    const auto ia = ok ? id_of_.find(a) : id_of_.end();
    const auto ib = ok ? id_of_.find(b) : id_of_.end();
    const auto iab = ok ? id_of_.find(a + b) : id_of_.end();
    REMAT_CHECK(ia != id_of_.end() && ib != id_of_.end() && iab != id_of_.end(), kWho, ": merge ", rank + 1,
                " (", brief(std::string(sa.substr(0, 40)) + " " + std::string(sb.substr(0, 40))), ") in '", path,
                "' names a token the vocabulary lacks (expected both parts and their concatenation in the "
                "vocabulary; are the two files from one model?)");
    merges_[key(ia->second, ib->second)] = Merge{rank, iab->second};
  }

  /// NOTE [Special tokens]: added tokens matched in the text as written, each stretch between
  /// them normalized, normalized added tokens matched in it, the rest pre-tokenized and encoded.
  std::vector<std::int32_t> encode_with(std::string_view text, bool specials) const {
    std::vector<std::int32_t> ids;
    const std::string valid = to_valid_utf8(text);
    split_added(valid, false, specials, ids, [&](std::string_view raw) {
      const std::string norm = nfc_ ? nfc(raw) : std::string();
      split_added(nfc_ ? std::string_view(norm) : raw, true, specials, ids,
                  [&](std::string_view rest) { append_pieces(rest, ids); });
    });
    return ids;
  }

  /// Cuts text at the added tokens whose `normalized` flag is `normalized` (leftmost, then
  /// longest), writing their ids and calling `between` for the text between them.
  template <class F>
  void split_added(std::string_view text, bool normalized, bool specials, std::vector<std::int32_t>& ids,
                   F&& between) const {
    std::size_t from = 0;
    for (std::size_t pos = 0; pos < text.size(); ++pos) {
      if (!first_byte_[static_cast<unsigned char>(text[pos])]) continue;
      const AddedToken* best = nullptr;
      for (const AddedToken& a : added_) {
        if (a.normalized != normalized || (a.special && !specials) ||
            (best && a.text.size() <= best->text.size()) || a.text[0] != text[pos] ||
            text.compare(pos, a.text.size(), a.text) != 0)
          continue;
        best = &a;
      }
      if (!best) continue;  // (first_byte_ keeps this loop off most positions)
      if (pos > from) between(text.substr(from, pos - from));
      ids.push_back(best->id);
      from = pos + best->text.size();
      pos = from - 1;
    }
    if (from < text.size()) between(text.substr(from));
  }

  void append_pieces(std::string_view valid, std::vector<std::int32_t>& ids) const {
    pretokenize(valid, pretok_, [&](std::string_view piece) {
      if (piece.size() == 1) {
        ids.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
        return;
      }
      if (ignore_merges_) {  // NOTE [Tokenizer files]: a whole piece in the vocabulary is kept
        const auto whole = id_of_.find(std::string(piece));
        if (whole != id_of_.end() && in_model_[static_cast<std::size_t>(whole->second)]) {
          ids.push_back(whole->second);
          return;
        }
      }
      const auto hit = cache_.find(std::string(piece));
      if (hit != cache_.end()) {
        ids.insert(ids.end(), hit->second.begin(), hit->second.end());
        return;
      }
      std::vector<std::int32_t> out = bpe(piece);
      ids.insert(ids.end(), out.begin(), out.end());
      if (cache_.size() < kCacheMax) cache_.emplace(std::string(piece), std::move(out));
    });
  }

  /// NOTE [Byte-level BPE]: merges the piece's byte tokens, lowest rank first, leftmost first.
  std::vector<std::int32_t> bpe(std::string_view piece) const {
    const std::size_t n = piece.size();
    std::vector<std::int32_t> id(n);
    std::vector<std::int64_t> prev(n), next(n);  // a doubly linked list of the live tokens
    for (std::size_t i = 0; i < n; ++i) {
      id[i] = byte_id_[static_cast<unsigned char>(piece[i])];
      prev[i] = static_cast<std::int64_t>(i) - 1;
      next[i] = i + 1 < n ? static_cast<std::int64_t>(i) + 1 : -1;
    }
    // Candidates: (rank, left position, left id, right id); stale ones are skipped on pop.
    struct Cand {
      std::int32_t rank;
      std::int64_t pos;
      std::int32_t left, right;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    const auto consider = [&](std::int64_t l) {
      if (l < 0 || next[l] < 0) return;
      const auto it = merges_.find(key(id[l], id[next[l]]));
      if (it != merges_.end()) heap.push({it->second.rank, l, id[l], id[next[l]]});
    };
    for (std::size_t i = 0; i + 1 < n; ++i) consider(static_cast<std::int64_t>(i));
    // One pass per rank, as the reference: every occurrence of the best pair, left to right,
    // and only then the pairs those merges made (one of them may rank better than this pass).
    std::vector<std::int64_t> merged;
    while (!heap.empty()) {
      const std::int32_t rank = heap.top().rank;
      merged.clear();
      while (!heap.empty() && heap.top().rank == rank) {
        const Cand c = heap.top();
        heap.pop();
        const std::int64_t r = next[c.pos];
        if (id[c.pos] != c.left || r < 0 || id[r] != c.right) continue;  // stale
        id[c.pos] = merges_.at(key(c.left, c.right)).id;
        id[r] = -1;  // dead (no token has id -1, so no stale entry can match it)
        next[c.pos] = next[r];
        if (next[r] >= 0) prev[next[r]] = c.pos;
        merged.push_back(c.pos);
      }
      for (const std::int64_t p : merged) {
        consider(prev[p]);
        consider(p);
      }
    }
    std::vector<std::int32_t> out;
    for (std::int64_t i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
    return out;
  }
};

}  // namespace remat::text
