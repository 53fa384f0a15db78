// SPDX-License-Identifier: MIT
// Unicode normalization form C (NFC), the normalizer of Qwen 2/3's tokenizer.json, with Hugging
// Face tokenizers' Unicode version (nfc_tables.hpp).
//
// NOTE [NFC]: canonical decomposition, canonical ordering, canonical composition (UAX #15):
//   1. every code point is replaced by its full canonical decomposition (the table's one-level
//      mappings applied until none is left; a Hangul syllable into its 2 or 3 jamo);
//   2. every run of code points whose canonical combining class (ccc) is not 0 is sorted by ccc,
//      stably;
//   3. left to right, a code point C joins the last starter S (ccc 0) before it when (S, C) has
//      a primary composite and nothing between them blocks C (a code point B blocks C when
//      ccc(B) is 0 or >= ccc(C)); the composite then stands in S's place. Hangul L+V and LV+T
//      compose by formula.
// The tables are Unicode 9.0.0's, as Hugging Face tokenizers (the Rust crate
// unicode-normalization-alignments) has them, not the newest: a mark first assigned later has
// ccc 0 there, so U+0301 U+11D42 (Masaram Gondi nukta, Unicode 10) stays in that order, and
// U+11935 U+11930 (Dives Akuru, 13.0) does not compose. Text whose code points are all below
// U+0300 is already NFC and is returned as it is; so is any other text that comes out the same.
// ctest text.reference_hf compares nfc() with Hugging Face's normalizer on every code point,
// on mark sequences in every order, and on a mixed corpus.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nfc_tables.hpp"
#include "unicode.hpp"

namespace remat::text {

namespace detail {

inline constexpr std::uint32_t kHangulS = 0xAC00, kHangulL = 0x1100, kHangulV = 0x1161, kHangulT = 0x11A7;
inline constexpr std::uint32_t kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28;
inline constexpr std::uint32_t kHangulNCount = kHangulVCount * kHangulTCount;  // 588
inline constexpr std::uint32_t kHangulSCount = kHangulLCount * kHangulNCount;  // 11172

inline std::uint8_t combining_class(std::uint32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = std::end(kCombiningClasses);
  const auto* it = std::upper_bound(std::begin(kCombiningClasses), end, cp,
                                    [](std::uint32_t c, const ClassRange& r) { return c < r.first; });
  if (it == std::begin(kCombiningClasses)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

/// Appends the full canonical decomposition of cp (NOTE [NFC] step 1).
inline void decompose(std::uint32_t cp, std::vector<std::uint32_t>& out) {
  if (cp >= kHangulS && cp < kHangulS + kHangulSCount) {
    const std::uint32_t s = cp - kHangulS;
    out.push_back(kHangulL + s / kHangulNCount);
    out.push_back(kHangulV + (s % kHangulNCount) / kHangulTCount);
    if (s % kHangulTCount) out.push_back(kHangulT + s % kHangulTCount);
    return;
  }
  const auto* end = std::end(kDecompositions);
  const auto* it = std::lower_bound(std::begin(kDecompositions), end, cp,
                                    [](const Decomposition& d, std::uint32_t c) { return d.cp < c; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);  // depth: at most 4 levels in any Unicode version
  if (it->second) decompose(it->second, out);
}

/// The primary composite of (a, b), or 0 when there is none (NOTE [NFC] step 3).
inline std::uint32_t compose(std::uint32_t a, std::uint32_t b) {
  if (a >= kHangulL && a < kHangulL + kHangulLCount && b >= kHangulV && b < kHangulV + kHangulVCount)
    return kHangulS + ((a - kHangulL) * kHangulVCount + (b - kHangulV)) * kHangulTCount;
  if (a >= kHangulS && a < kHangulS + kHangulSCount && (a - kHangulS) % kHangulTCount == 0 &&
      b > kHangulT && b < kHangulT + kHangulTCount)
    return a + (b - kHangulT);
  const auto* end = std::end(kCompositions);
  const auto* it = std::lower_bound(std::begin(kCompositions), end, std::make_pair(a, b),
                                    [](const Composition& c, const std::pair<std::uint32_t, std::uint32_t>& k) {
                                      return c.first != k.first ? c.first < k.first : c.second < k.second;
                                    });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace detail

/// `s` (valid UTF-8: to_valid_utf8 first) in Unicode normalization form C (NOTE [NFC]).
inline std::string nfc(std::string_view s) {
  if (std::none_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) >= 0xCC; }))
    return std::string(s);  // all below U+0300: lead bytes up to 0xCB
  std::vector<std::uint32_t> cps;
  cps.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const detail::Decoded d = detail::decode_one(s, i);
    detail::decompose(d.cp, cps);
    i += d.len;
  }
  // step 2: runs of non-starters sorted by class, stably
  std::vector<std::uint8_t> cls(cps.size());
  for (std::size_t i = 0; i < cps.size(); ++i) cls[i] = detail::combining_class(cps[i]);
  for (std::size_t i = 0; i < cps.size();) {
    if (!cls[i]) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < cps.size() && cls[j]) ++j;
    if (j - i > 1) {
      std::vector<std::pair<std::uint8_t, std::uint32_t>> run;
      for (std::size_t k = i; k < j; ++k) run.emplace_back(cls[k], cps[k]);
      std::stable_sort(run.begin(), run.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      for (std::size_t k = i; k < j; ++k) cls[k] = run[k - i].first, cps[k] = run[k - i].second;
    }
    i = j;
  }
  // step 3: composition, in place (out <= i)
  std::size_t out = 0;
  std::ptrdiff_t starter = -1;  // index in the output of the last starter
  std::uint8_t last = 0;        // class of the last code point written after it
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const std::uint32_t c = cps[i];
    const std::uint8_t cc = cls[i];
    if (starter >= 0) {
      const bool adjacent = static_cast<std::size_t>(starter) + 1 == out;
      if (adjacent || (last != 0 && last < cc)) {
        const std::uint32_t composite = detail::compose(cps[static_cast<std::size_t>(starter)], c);
        if (composite) {
          cps[static_cast<std::size_t>(starter)] = composite;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<std::ptrdiff_t>(out);
    last = cc;
    cps[out++] = c;
  }
  std::string r;
  r.reserve(s.size());
  for (std::size_t i = 0; i < out; ++i) append_utf8(r, cps[i]);
  return r;
}

}  // namespace remat::text
