// SPDX-License-Identifier: MIT
// UTF-8 for the tokenizer: decoding with the WHATWG rules for invalid bytes, and the three
// character classes GPT-2's pre-tokenizer uses (letters, numbers, whitespace), from the Unicode
// version in unicode_tables.hpp (kUnicodeVersion).
//
// NOTE [Invalid UTF-8]: GPT-2 tokenizes text, not bytes, so a file's invalid bytes are first
// replaced by U+FFFD, one replacement per "maximal subpart" (the WHATWG Encoding Standard's
// UTF-8 decoder, which is what Python's errors="replace", Node's Buffer.toString and browsers
// do). `to_valid_utf8` returns the text unchanged when it is valid; decode(encode(x)) == x
// holds exactly for valid UTF-8 and gives to_valid_utf8(x) otherwise. Never a crash, never an
// error: any byte string has a tokenization.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "unicode_tables.hpp"

namespace remat::text {

inline constexpr std::uint32_t kReplacementChar = 0xFFFD;

/// Appends code point `cp` (< 0x110000, not a surrogate) as UTF-8.
inline void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace detail {
/// One step of the WHATWG UTF-8 decoder at s[i]: the code point and how many bytes it used.
/// An invalid sequence gives U+FFFD and consumes its maximal subpart: the lead byte and the
/// continuation bytes that were still possible, never the byte that broke it.
struct Decoded {
  std::uint32_t cp;
  std::size_t len;
};
inline Decoded decode_one(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1};
  std::size_t need = 0;
  std::uint32_t cp = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range; later ones are 80..BF
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1Fu;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0Fu;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07u;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return {kReplacementChar, 1};  // 80..C1, F5..FF never start a character
  }
  for (std::size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return {kReplacementChar, k};
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < lo || b > hi) return {kReplacementChar, k};
    lo = 0x80, hi = 0xBF;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  return {cp, need + 1};
}
}  // namespace detail

/// `text` if it is valid UTF-8, else a copy with each invalid sequence replaced by U+FFFD
/// (NOTE [Invalid UTF-8]).
inline std::string to_valid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {  // fast scan: most text is valid, most of it ASCII
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const detail::Decoded d = detail::decode_one(text, i);
    if (d.cp == kReplacementChar && !(d.len == 3 && text.compare(i, 3, "\xEF\xBF\xBD") == 0)) break;
    i += d.len;
  }
  if (i == text.size()) return std::string(text);
  std::string out(text.substr(0, i));
  out.reserve(text.size() + 16);
  while (i < text.size()) {
    const detail::Decoded d = detail::decode_one(text, i);
    append_utf8(out, d.cp);
    i += d.len;
  }
  return out;
}

namespace detail {
template <std::size_t N>
bool in_ranges(const CodeRange (&ranges)[N], std::uint32_t cp) {
  const auto* it = std::upper_bound(ranges, ranges + N, cp,
                                    [](std::uint32_t c, const CodeRange& r) { return c < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}
}  // namespace detail

/// Unicode general category L (Lu Ll Lt Lm Lo): the regex class \p{L}.
inline bool is_letter(std::uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return detail::in_ranges(detail::kLetterRanges, cp);
}
/// Unicode general category N (Nd Nl No): the regex class \p{N}.
inline bool is_number(std::uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return detail::in_ranges(detail::kNumberRanges, cp);
}
/// Unicode's White_Space property: the regex class \s as OpenAI's tiktoken (Rust's regex crate)
/// and Python's `regex` module read it: tab, LF, VT, FF, CR, space, U+0085 (NEL), NBSP, U+1680,
/// U+2000..U+200A, LS, PS, U+202F, U+205F, U+3000. Not JavaScript's \s, which adds U+FEFF (BOM)
/// and lacks U+0085; not Python's str.isspace, which adds U+001C..U+001F.
inline bool is_space(std::uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return detail::in_ranges(detail::kSpaceRanges, cp);
}

}  // namespace remat::text
