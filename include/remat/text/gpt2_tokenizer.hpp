// SPDX-License-Identifier: MIT
// GPT-2's tokenizer: byte-level BPE (50,000 merges over 256 byte tokens, plus <|endoftext|>),
// loaded from the files OpenAI published (encoder.json + vocab.bpe), from their Hugging Face
// twins (vocab.json + merges.txt) or from a Hugging Face tokenizer.json. Needs nlohmann-json
// (Debian: nlohmann-json3-dev).
//
//   auto tok = remat::text::Gpt2Tokenizer::from_directory("gpt2/");
//   std::vector<std::int32_t> ids = tok.encode("Hello world");   // {15496, 995}
//   std::string back = tok.decode(ids);                           // "Hello world"
//
// NOTE [GPT-2 pre-tokenization]: before BPE, text is cut into pieces by GPT-2's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// tried left to right, first alternative that matches. `pretokenize` implements it by hand
// (no std::regex): at each position, an ASCII contraction; else an optional single space
// followed by a run of letters, of numbers, or of anything that is neither (nor whitespace);
// else a whitespace run, which leaves its last character to the next piece when a
// non-whitespace character follows (that is what the lookahead (?!\S) does), unless the run
// is a single character. Classes are Unicode's L and N (unicode_tables.hpp) and JavaScript's \s.
// Each piece's UTF-8 bytes then go through BPE independently.
//
// NOTE [Byte-level BPE]: the files spell tokens in GPT-2's printable stand-ins for bytes
// (byte 0x20 is "Ġ", and so on). We map every token back to its raw bytes once, at load, so
// encoding works on bytes and token ids: a piece starts as one token per byte; the adjacent
// pair with the lowest merge rank is merged, every occurrence left to right, until no pair has
// a rank: the reference's algorithm, in O(n log n) with a heap of candidate pairs (stale
// entries skipped), so a 100 KB run of one character is no problem.
// Pieces already seen come from a cache.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"
#include "../io/safetensors.hpp"  // io::detail::read_file
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

/// Cuts text (valid UTF-8) into GPT-2's pre-tokens (NOTE [GPT-2 pre-tokenization]) and calls
/// `piece(std::string_view)` for each, in order; together they are exactly `text`.
template <class F>
void pretokenize(std::string_view s, F&& piece) {
  enum Class { letter, number, space, other };
  const auto at = [&](std::size_t i) { return detail::decode_one(s, i); };
  const auto class_of = [](std::uint32_t cp) {
    return is_letter(cp) ? letter : is_number(cp) ? number : is_space(cp) ? space : other;
  };
  const std::size_t n = s.size();
  std::size_t pos = 0;
  while (pos < n) {
    const std::size_t start = pos;
    // 's 't 're 've 'm 'll 'd
    if (s[pos] == '\'' && pos + 1 < n) {
      const char c1 = s[pos + 1];
      const char c2 = pos + 2 < n ? s[pos + 2] : '\0';
      std::size_t len = 0;
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') len = 2;
      else if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) len = 3;
      if (len) {
        piece(s.substr(pos, len));
        pos += len;
        continue;
      }
    }
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then a run of one class
    std::size_t p = pos;
    if (s[p] == ' ' && p + 1 < n) ++p;
    detail::Decoded d = at(p);
    Class c = class_of(d.cp);
    if (p != pos && c == space) {  // the space starts a whitespace run instead
      p = pos;
      d = at(p);
      c = space;
    }
    if (c != space) {
      do {
        p += d.len;
        if (p >= n) break;
        d = at(p);
      } while (class_of(d.cp) == c);
      piece(s.substr(start, p - start));
      pos = p;
      continue;
    }
    // '\s+(?!\S)' then '\s+': the whole run at the end of the text or when it is one character,
    // else all but its last character
    std::size_t last = p, count = 0;
    while (p < n) {
      d = at(p);
      if (!is_space(d.cp)) break;
      last = p;
      p += d.len;
      ++count;
    }
    if (p < n && count >= 2) p = last;
    piece(s.substr(start, p - start));
    pos = p;
  }
}

class Gpt2Tokenizer {
 public:
  /// GPT-2's own files: `encoder.json` (token -> id) and `vocab.bpe` (merges, best first),
  /// or the same content as Hugging Face's `vocab.json` and `merges.txt`.
  static Gpt2Tokenizer from_files(const std::string& vocab_json, const std::string& merges_txt) {
    const std::vector<char> v = io::detail::read_file(vocab_json, "Gpt2Tokenizer");
    const std::vector<char> m = io::detail::read_file(merges_txt, "Gpt2Tokenizer");
    return from_text(std::string_view(v.data(), v.size()), std::string_view(m.data(), m.size()),
                     vocab_json, merges_txt);
  }
  /// The same from the files' contents; the names only appear in errors.
  static Gpt2Tokenizer from_text(std::string_view vocab_json, std::string_view merges_txt,
                                 const std::string& vocab_name = "the vocabulary",
                                 const std::string& merges_name = "the merges") {
    Gpt2Tokenizer t;
    t.load_vocab(parse_json(vocab_json, vocab_name, "vocabulary"), vocab_name);
    std::vector<std::pair<std::string, std::string>> merges;
    std::string_view rest = merges_txt;
    std::size_t line_no = 0;
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
                  "remat::text::Gpt2Tokenizer: line ", line_no, " of '", merges_name,
                  "' is not a merge (expected two tokens separated by one space, e.g. \"\u0120 t\"; "
                  "found \"", std::string(line.substr(0, 80)), "\")");
      merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
    }
    t.load_merges(merges, merges_name);
    return t;
  }

  /// A Hugging Face `tokenizer.json` whose model is BPE (GPT-2's, or one with its layout).
  static Gpt2Tokenizer from_tokenizer_json(const std::string& path) {
    const std::vector<char> buf = io::detail::read_file(path, "Gpt2Tokenizer");
    const nlohmann::json j = parse_json(std::string_view(buf.data(), buf.size()), path, "tokenizer.json");
    const auto bad = [&](const std::string& what) {
      return Error(::remat::detail::cat("remat::text::Gpt2Tokenizer: '", path, "' ", what,
                                        " (expected a Hugging Face tokenizer.json with \"model\": "
                                        "{\"type\": \"BPE\", \"vocab\": {...}, \"merges\": [...]})"));
    };
    if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) throw bad("has no model");
    const nlohmann::json& model = j["model"];
    if (model.contains("type") && !(model["type"].is_string() && model["type"] == "BPE"))
      throw bad("has a model that is not BPE");
    if (!model.contains("vocab") || !model.contains("merges") || !model["merges"].is_array())
      throw bad("has no vocab or merges");
    Gpt2Tokenizer t;
    t.load_vocab(model["vocab"], path);
    if (j.contains("added_tokens") && j["added_tokens"].is_array())  // <|endoftext|> lives here
      for (const auto& a : j["added_tokens"])
        if (a.is_object() && a.contains("content") && a["content"].is_string() && a.contains("id") &&
            a["id"].is_number_integer())
          t.add_token(a["content"].get<std::string>(), a["id"].get<std::int64_t>(), path);
    std::vector<std::pair<std::string, std::string>> merges;
    for (const auto& m : model["merges"]) {
      if (m.is_string()) {  // "Ġ t"
        const std::string s = m.get<std::string>();
        const std::size_t sp = s.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos)
          throw bad("has a merge \"" + s.substr(0, 80) + "\" that is not two tokens");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["Ġ", "t"]
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        throw bad("has a merge that is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
    t.load_merges(merges, path);
    return t;
  }

  /// The tokenizer in a directory: encoder.json + vocab.bpe, vocab.json + merges.txt, or
  /// tokenizer.json (checked in that order).
  static Gpt2Tokenizer from_directory(const std::string& dir) {
    const auto has = [&](const char* name) {
      struct ::stat sb {};
      return ::stat((dir + "/" + name).c_str(), &sb) == 0 && S_ISREG(sb.st_mode);
    };
    if (has("encoder.json") && has("vocab.bpe"))
      return from_files(dir + "/encoder.json", dir + "/vocab.bpe");
    if (has("vocab.json") && has("merges.txt"))
      return from_files(dir + "/vocab.json", dir + "/merges.txt");
    if (has("tokenizer.json")) return from_tokenizer_json(dir + "/tokenizer.json");
    throw Error(::remat::detail::cat(
        "remat::text::Gpt2Tokenizer: no tokenizer files in '", dir,
        "' (expected encoder.json + vocab.bpe, vocab.json + merges.txt, or tokenizer.json; "
        "hint: GPT-2's are in the Hugging Face repository openai-community/gpt2)"));
  }

  std::int64_t vocab_size() const { return static_cast<std::int64_t>(bytes_of_.size()); }
  /// The id of <|endoftext|> (50256 for GPT-2), or -1 if the vocabulary has none.
  std::int32_t eot() const { return eot_; }

  /// Token ids of `text`; a literal "<|endoftext|>" is the special token (as Hugging Face's
  /// GPT2Tokenizer does). Invalid UTF-8 is replaced first (NOTE [Invalid UTF-8]).
  std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> ids;
    const std::string_view special = "<|endoftext|>";
    while (eot_ >= 0) {
      const std::size_t at = text.find(special);
      if (at == std::string_view::npos) break;
      append_ordinary(text.substr(0, at), ids);
      ids.push_back(eot_);
      text.remove_prefix(at + special.size());
    }
    append_ordinary(text, ids);
    return ids;
  }
  /// Token ids of `text` with no special tokens: "<|endoftext|>" is 7 ordinary tokens (what
  /// GPT-2's encoder.py and the npm package gpt-3-encoder do).
  std::vector<std::int32_t> encode_ordinary(std::string_view text) const {
    std::vector<std::int32_t> ids;
    append_ordinary(text, ids);
    return ids;
  }

  /// The bytes of the tokens, concatenated (they may end inside a UTF-8 character).
  std::string decode(const std::vector<std::int32_t>& ids) const {
    std::string out;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      REMAT_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "remat::text::Gpt2Tokenizer::decode: id ",
                  ids[i], " at position ", i, " is outside the vocabulary of ", vocab_size(),
                  " tokens (expected 0..", vocab_size() - 1, ")");
      out += bytes_of_[static_cast<std::size_t>(ids[i])];
    }
    return out;
  }
  /// The raw bytes of one token.
  const std::string& token_bytes(std::int32_t id) const {
    REMAT_CHECK(id >= 0 && id < vocab_size(), "remat::text::Gpt2Tokenizer::token_bytes: id ", id,
                " is outside the vocabulary of ", vocab_size(), " tokens");
    return bytes_of_[static_cast<std::size_t>(id)];
  }

 private:
  // bytes_of_[id]: the token's raw bytes; id_of_: the inverse. byte_id_[b]: the token of byte b.
  std::vector<std::string> bytes_of_;
  std::unordered_map<std::string, std::int32_t> id_of_;
  std::int32_t byte_id_[256];
  std::int32_t eot_ = -1;
  // A merge: (left id, right id) -> rank (0 = merged first) and the merged token's id.
  struct Merge {
    std::int32_t rank, id;
  };
  std::unordered_map<std::uint64_t, Merge> merges_;
  // Pieces already encoded. Bounded: past kCacheMax entries new pieces are not kept.
  static constexpr std::size_t kCacheMax = 1 << 18;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache_;

  static std::uint64_t key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  static nlohmann::json parse_json(std::string_view text, const std::string& name, const char* what) {
    try {
      return nlohmann::json::parse(text.begin(), text.end());
    } catch (const std::exception& e) {
      throw Error(::remat::detail::cat("remat::text::Gpt2Tokenizer: the ", what, " '", name,
                                       "' is not valid JSON: ", e.what()));
    }
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

  void add_token(const std::string& spelled, std::int64_t id, const std::string& path) {
    REMAT_CHECK(id >= 0 && id < (1 << 24), "remat::text::Gpt2Tokenizer: token \"", spelled.substr(0, 80),
                "\" in '", path, "' has id ", id, " (expected 0 to ", (1 << 24) - 1, ")");
    std::string raw;
    if (spelled.size() > 2 && spelled.front() == '<' && spelled.back() == '>') {
      raw = spelled;  // a special token such as <|endoftext|>: its text, not byte stand-ins
      if (spelled == "<|endoftext|>") eot_ = static_cast<std::int32_t>(id);
    } else {
      REMAT_CHECK(stand_in_to_bytes(spelled, raw), "remat::text::Gpt2Tokenizer: token \"",
                  spelled.substr(0, 80), "\" (id ", id, ") in '", path,
                  "' is not spelled in GPT-2's byte stand-ins (expected a byte-level BPE vocabulary)");
    }
    if (static_cast<std::size_t>(id) >= bytes_of_.size()) bytes_of_.resize(static_cast<std::size_t>(id) + 1);
    REMAT_CHECK(bytes_of_[static_cast<std::size_t>(id)].empty() || bytes_of_[static_cast<std::size_t>(id)] == raw,
                "remat::text::Gpt2Tokenizer: id ", id, " in '", path, "' is given to two tokens (\"",
                spelled.substr(0, 80), "\" and another; expected one token per id)");
    bytes_of_[static_cast<std::size_t>(id)] = raw;
    id_of_.emplace(raw, static_cast<std::int32_t>(id));  // specials may repeat: the first wins
  }

  void load_vocab(const nlohmann::json& v, const std::string& path) {
    REMAT_CHECK(v.is_object() && !v.empty(), "remat::text::Gpt2Tokenizer: the vocabulary in '", path,
                "' is not an object of token -> id (e.g. {\"!\": 0, ...})");
    for (const auto& [spelled, id] : v.items()) {
      REMAT_CHECK(id.is_number_integer(), "remat::text::Gpt2Tokenizer: token \"", spelled.substr(0, 80),
                  "\" in '", path, "' has the id ", id.dump().substr(0, 40), " (expected an integer)");
      add_token(spelled, id.get<std::int64_t>(), path);
    }
    for (std::size_t i = 0; i < bytes_of_.size(); ++i)
      REMAT_CHECK(!bytes_of_[i].empty(), "remat::text::Gpt2Tokenizer: the vocabulary in '", path,
                  "' has no token with id ", i, " (expected ids 0..", bytes_of_.size() - 1, " without gaps)");
    REMAT_CHECK(id_of_.size() >= 256, "remat::text::Gpt2Tokenizer: '", path, "' has ",
                id_of_.size(), " tokens (expected at least the 256 byte tokens)");
    for (int b = 0; b < 256; ++b) {
      const auto it = id_of_.find(std::string(1, static_cast<char>(b)));
      REMAT_CHECK(it != id_of_.end(), "remat::text::Gpt2Tokenizer: the vocabulary in '", path,
                  "' has no token for byte ", b, " (expected all 256 byte tokens of byte-level BPE)");
      byte_id_[b] = it->second;
    }
  }

  void load_merges(const std::vector<std::pair<std::string, std::string>>& merges, const std::string& path) {
    std::string a, b;
    for (std::size_t r = 0; r < merges.size(); ++r) {
      const auto& [sa, sb] = merges[r];
      const bool ok = stand_in_to_bytes(sa, a) && stand_in_to_bytes(sb, b);
      const auto ia = ok ? id_of_.find(a) : id_of_.end();
      const auto ib = ok ? id_of_.find(b) : id_of_.end();
      const auto iab = ok ? id_of_.find(a + b) : id_of_.end();
      REMAT_CHECK(ia != id_of_.end() && ib != id_of_.end() && iab != id_of_.end(),
                  "remat::text::Gpt2Tokenizer: merge ", r + 1, " (\"", sa.substr(0, 40), " ",
                  sb.substr(0, 40), "\") in '", path, "' names a token the vocabulary lacks (expected both "
                  "parts and their concatenation in the vocabulary; are the two files from one model?)");
      merges_.emplace(key(ia->second, ib->second), Merge{static_cast<std::int32_t>(r), iab->second});
    }
  }

  void append_ordinary(std::string_view text, std::vector<std::int32_t>& ids) const {
    const std::string valid = to_valid_utf8(text);
    pretokenize(valid, [&](std::string_view piece) {
      if (piece.size() == 1) {
        ids.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
        return;
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
