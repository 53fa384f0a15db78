#pragma once
// SPDX-License-Identifier: MIT
// A small GPT-2-format tokenizer trained here, for tests and the tokenizer's fuzz target (the
// real GPT-2 files are 1.5 MB and not in the repository): the 256 byte tokens in GPT-2's
// order, `merges` merges learned from `text` by plain BPE (most frequent adjacent pair first,
// ties to the smallest pair), then <|endoftext|>. Returns the contents of encoder.json and
// vocab.bpe, spelled in GPT-2's byte stand-ins.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <remat/text/tokenizer.hpp>

namespace remat_test {

/// GPT-2's stand-in for byte b, as UTF-8.
inline std::string stand_in(unsigned char b) {
  std::string s;
  remat::text::append_utf8(s, remat::text::byte_stand_in(b));
  return s;
}
inline std::string spelled(const std::string& raw) {
  std::string s;
  for (unsigned char b : raw) s += stand_in(b);
  return s;
}

/// One pass of BPE as GPT-2's encoder.py does it: every occurrence of the pair (a, b) in w,
/// left to right, becomes a + b.
inline std::vector<std::string> merge_every(const std::vector<std::string>& w, const std::string& a,
                                            const std::string& b) {
  std::vector<std::string> merged;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
      merged.push_back(a + b);
      ++i;
    } else {
      merged.push_back(w[i]);
    }
  }
  return merged;
}

struct TinyBpe {
  std::string encoder_json, vocab_bpe;
  std::vector<std::pair<std::string, std::string>> merges;  // raw bytes, best first
};

inline TinyBpe train_tiny_bpe(const std::string& text, int merges) {
  std::vector<std::string> vocab;  // raw bytes by id
  for (const bool printable : {true, false})  // GPT-2's order: printable bytes, then the rest
    for (int b = 0; b < 256; ++b)
      if (remat::text::is_printable_byte(static_cast<std::uint32_t>(b)) == printable)
        vocab.emplace_back(1, static_cast<char>(b));
  std::map<std::string, long> pieces;
  remat::text::pretokenize(remat::text::to_valid_utf8(text), [&](std::string_view p) { ++pieces[std::string(p)]; });
  std::vector<std::pair<std::vector<std::string>, long>> words;
  for (const auto& [p, n] : pieces) {
    std::vector<std::string> w;
    for (char c : p) w.emplace_back(1, c);
    words.emplace_back(std::move(w), n);
  }
  TinyBpe out;
  for (int m = 0; m < merges; ++m) {
    std::map<std::pair<std::string, std::string>, long> count;
    for (const auto& [w, n] : words)
      for (std::size_t i = 0; i + 1 < w.size(); ++i) count[{w[i], w[i + 1]}] += n;
    if (count.empty()) break;
    auto best = count.begin();
    for (auto it = count.begin(); it != count.end(); ++it)
      if (it->second > best->second) best = it;
    const auto [a, b] = best->first;
    out.merges.emplace_back(a, b);
    vocab.push_back(a + b);
    for (auto& [w, n] : words) w = merge_every(w, a, b);
  }
  nlohmann::json enc = nlohmann::json::object();
  for (std::size_t id = 0; id < vocab.size(); ++id) enc[spelled(vocab[id])] = id;
  enc["<|endoftext|>"] = vocab.size();
  out.encoder_json = enc.dump();
  out.vocab_bpe = "#version: 0.2\n";
  for (const auto& [a, b] : out.merges) out.vocab_bpe += spelled(a) + " " + spelled(b) + "\n";
  return out;
}

/// A fixed English-and-code training text.
inline const std::string& tiny_training_text() {
  static const std::string t =
      "The quick brown fox jumps over the lazy dog. It's the fox's den; they're there, we've "
      "seen it, I'm sure they'll stay and he'd agree. The theory of the thing is that the other "
      "three then think it through. int main() { return 0; } for (int i = 0; i < n; ++i) "
      "x[i] = y[i] + 1; 2024-05-20 12:34 3.14159 1,000,000\n\n    indented code\n\ttabbed\n"
      "Caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82 the end.";
  return t;
}

}  // namespace remat_test
