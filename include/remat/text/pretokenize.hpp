// SPDX-License-Identifier: MIT
// GPT-2's pre-tokenization: text cut into the pieces that byte-level BPE then encodes one by one
// (text/gpt2_tokenizer.hpp), by GPT-2's regex written out by hand.
//
// NOTE [GPT-2 pre-tokenization]: before BPE, text is cut into pieces by GPT-2's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// read as OpenAI's tiktoken reads it (its `gpt2` encoding: Rust's regex crate under fancy-regex)
// and as encoder.py's Python `regex` does: \p{L} is general category L (Lu Ll Lt Lm Lo), \p{N}
// is N (Nd Nl No), \s is the property White_Space (so U+0085 is whitespace and U+FEFF is not,
// unlike JavaScript's \s), all from Unicode kUnicodeVersion (16.0.0, tiktoken 1.0.22's; see
// unicode_tables.hpp); the contractions are ASCII and case-sensitive ("'S" is not one). Tried
// left to right, the first alternative that matches wins. `pretokenize` implements it by hand
// (no std::regex): at each position, a contraction; else an optional U+0020 followed by a run of
// letters, of numbers, or of characters that are none of letter, number, whitespace; else a
// whitespace run, which leaves its last character to the next piece when a non-whitespace
// character follows and the run has two or more characters (the lookahead (?!\S)). Each
// piece's UTF-8 bytes then go through BPE independently. ctest text.reference_tiktoken checks
// the ids against tiktoken for every code point U+0000..U+10FFFF and on a mixed corpus.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "unicode.hpp"

namespace remat::text {

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

}  // namespace remat::text
