// SPDX-License-Identifier: MIT
// Pre-tokenization: text cut into the pieces that byte-level BPE then encodes one by one
// (text/tokenizer.hpp), by GPT-2's regex or by Llama 3's and Qwen 2's, written out by hand.
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
//
// NOTE [Llama 3 pre-tokenization]: Llama 3's tokenizer.json cuts text with the regex
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// and Qwen 2/3's with the same one but \p{N} for \p{N}{1,3} (one digit a piece), both run by
// Hugging Face tokenizers through Oniguruma, whose \p{L}, \p{N} and \s are the classes above
// (checked on every code point: ctest text.reference_hf). Tried left to right at each position:
//   1. a contraction, in ASCII case only ("'S" and "'Re" are ones; "'ſ" is not, though U+017F
//      folds to s);
//   2. a letter run, after one optional character that is neither CR, LF, letter nor number (so
//      " the", "\tthe", "(the", "\u3000the");
//   3. one to max_digits numbers (3 for Llama 3, 1 for Qwen);
//   4. an optional U+0020, a run of characters that are none of whitespace, letter, number,
//      and any CR and LF right after it ("!!\n\n");
//   5. a whitespace run holding CR or LF: the run up to its last CR or LF;
//   6. else the whitespace run, less its last character when one is left before a
//      non-whitespace character and the run has two or more (the lookahead (?!\S));
//   7. else the one whitespace character.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "unicode.hpp"

namespace remat::text {

/// The regex a byte-level BPE tokenizer pre-tokenizes with.
enum class Pretokenizer {
  gpt2,    // NOTE [GPT-2 pre-tokenization]
  llama3,  // NOTE [Llama 3 pre-tokenization], \p{N}{1,3}
  qwen2,   // the same with \p{N}: one digit a piece
};

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

/// Cuts text (valid UTF-8) into Llama 3's pre-tokens (max_digits 3) or Qwen 2's (max_digits 1)
/// (NOTE [Llama 3 pre-tokenization]) and calls `piece(std::string_view)` for each, in order.
template <class F>
void pretokenize_llama3(std::string_view s, int max_digits, F&& piece) {
  enum Class { letter, number, space, other };
  const auto at = [&](std::size_t i) { return detail::decode_one(s, i); };
  const auto class_of = [](std::uint32_t cp) {
    return is_letter(cp) ? letter : is_number(cp) ? number : is_space(cp) ? space : other;
  };
  const auto lower = [](char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c); };
  const auto is_crlf = [](std::uint32_t cp) { return cp == '\r' || cp == '\n'; };
  const std::size_t n = s.size();
  std::size_t pos = 0;
  while (pos < n) {
    const std::size_t start = pos;
    // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (s[pos] == '\'' && pos + 1 < n) {
      const char c1 = lower(s[pos + 1]);
      const char c2 = pos + 2 < n ? lower(s[pos + 2]) : '\0';
      std::size_t len = 0;
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') len = 2;
      else if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) len = 3;
      if (len) {
        piece(s.substr(pos, len));
        pos += len;
        continue;
      }
    }
    const detail::Decoded d0 = at(pos);
    const Class c0 = class_of(d0.cp);
    const auto run_of = [&](std::size_t p, Class c) {  // the end of the run of class c from p
      while (p < n) {
        const detail::Decoded d = at(p);
        if (class_of(d.cp) != c) break;
        p += d.len;
      }
      return p;
    };
    // 2. [^\r\n\p{L}\p{N}]?\p{L}+
    if (c0 == letter) {
      pos = run_of(pos, letter);
      piece(s.substr(start, pos - start));
      continue;
    }
    if (c0 != number && !is_crlf(d0.cp) && pos + d0.len < n && class_of(at(pos + d0.len).cp) == letter) {
      pos = run_of(pos + d0.len, letter);
      piece(s.substr(start, pos - start));
      continue;
    }
    // 3. \p{N}{1,max_digits}
    if (c0 == number) {
      std::size_t p = pos;
      for (int k = 0; k < max_digits && p < n; ++k) {
        const detail::Decoded d = at(p);
        if (class_of(d.cp) != number) break;
        p += d.len;
      }
      piece(s.substr(start, p - start));
      pos = p;
      continue;
    }
    // 4. ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    std::size_t p = pos;
    if (s[p] == ' ' && p + 1 < n && class_of(at(p + 1).cp) == other) ++p;
    if (class_of(at(p).cp) == other) {
      p = run_of(p, other);
      while (p < n && (s[p] == '\r' || s[p] == '\n')) ++p;
      piece(s.substr(start, p - start));
      pos = p;
      continue;
    }
    // c0 is whitespace from here. 5. \s*[\r\n]+: up to the run's last CR or LF
    std::size_t end = pos, last = pos, after_crlf = 0, count = 0;
    while (end < n) {
      const detail::Decoded d = at(end);
      if (!is_space(d.cp)) break;
      last = end;
      end += d.len;
      ++count;
      if (is_crlf(d.cp)) after_crlf = end;
    }
    if (after_crlf) {
      pos = after_crlf;
    } else if (end < n && count >= 2) {  // 6. \s+(?!\S)
      pos = last;
    } else {  // 6 at the end of the text, or 7. \s+ (one character)
      pos = end;
    }
    piece(s.substr(start, pos - start));
  }
}

/// Cuts text (valid UTF-8) with the given pre-tokenizer.
template <class F>
void pretokenize(std::string_view s, Pretokenizer kind, F&& piece) {
  if (kind == Pretokenizer::gpt2) pretokenize(s, piece);
  else pretokenize_llama3(s, kind == Pretokenizer::llama3 ? 3 : 1, piece);
}

}  // namespace remat::text
