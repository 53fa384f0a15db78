// SPDX-License-Identifier: MIT
// remat's side of the tokenizer's reference test (run.sh; encode_reference.js is tiktoken's side),
// printing what that side prints, line for line:
//   encode_corpus TOKENIZER_DIR CORPUS      one line of space-separated ids per document of a
//                                           corpus (make_corpus.py's `<length>\n<bytes>` records),
//                                           with encode_ordinary; also checks the round trip:
//                                           decode(encode(doc)) is the document (its valid-UTF-8
//                                           form when it has invalid bytes), exit 1 if not
//   encode_corpus --codepoints TOKENIZER_DIR  "U+XXXX: ids" for every code point X in 0..10FFFF,
//                                           encoding the bytes "\n  X's"; a surrogate, which UTF-8
//                                           cannot hold, as its 3-byte form ED xx xx, which the
//                                           WHATWG decoder (NOTE [Invalid UTF-8]) turns into three
//                                           U+FFFD on both sides
//   encode_corpus --vocab TOKENIZER_DIR     "id: hex bytes" for every token
//   encode_corpus --classes                 0x110000 bytes, one per code point: L letter, N
//                                           number, s whitespace, o other (check_unicode_classes.py)
//   encode_corpus --specials TOKENIZER CORPUS  as the first form, with encode() (added and special
//                                           tokens matched: Hugging Face's default) for
//                                           encode_ordinary
//   encode_corpus --nfc CORPUS              each document (made valid UTF-8) in NFC, as records
// TOKENIZER_DIR may also name a tokenizer.json.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <remat/text/tokenizer.hpp>

namespace {

void append_ids(std::string& out, const std::vector<std::int32_t>& ids) {
  for (std::size_t k = 0; k < ids.size(); ++k) {
    if (k) out += ' ';
    out += std::to_string(ids[k]);
  }
  out += '\n';
}

/// The bytes of code point cp in UTF-8, or for a surrogate its 3-byte form (not valid UTF-8).
std::string raw_utf8(std::uint32_t cp) {
  std::string s;
  if (cp >= 0xD800 && cp <= 0xDFFF) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    remat::text::append_utf8(s, cp);
  }
  return s;
}

int codepoints(const remat::text::Tokenizer& tok) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string out;
  std::size_t tokens = 0;
  char head[16];
  for (std::uint32_t cp = 0; cp < 0x110000; ++cp) {
    const auto ids = tok.encode_ordinary("\n  " + raw_utf8(cp) + "'s");
    std::snprintf(head, sizeof head, "U+%04X: ", static_cast<unsigned>(cp));
    out += head;
    append_ids(out, ids);
    tokens += ids.size();
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fprintf(stderr, "encode_corpus: %u code points in \"\\n  X's\" frames, %zu tokens, %.2f s\n", 0x110000u,
               tokens, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

int vocab(const remat::text::Tokenizer& tok) {
  std::string out;
  char hex[4];
  for (std::int32_t id = 0; id < tok.vocab_size(); ++id) {
    out += std::to_string(id) + ":";
    for (unsigned char c : tok.token_bytes(id)) {
      std::snprintf(hex, sizeof hex, " %02x", c);
      out += hex;
    }
    out += '\n';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int classes() {
  std::string out(0x110000, 'o');
  for (std::uint32_t cp = 0; cp < 0x110000; ++cp)
    out[cp] = remat::text::is_letter(cp) ? 'L' : remat::text::is_number(cp) ? 'N' : remat::text::is_space(cp) ? 's' : 'o';
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

std::string read_all(const char* path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int nfc_records(const char* path) {
  const std::string corpus = read_all(path);
  std::string out;
  for (std::size_t i = 0; i < corpus.size();) {
    const std::size_t nl = corpus.find('\n', i);
    const std::size_t n = std::stoull(corpus.substr(i, nl - i));
    const std::string doc = remat::text::nfc(remat::text::to_valid_utf8(corpus.substr(nl + 1, n)));
    i = nl + 1 + n;
    out += std::to_string(doc.size()) + "\n" + doc;
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

remat::text::Tokenizer load(const std::string& where) {
  const bool is_file = where.size() >= 5 && where.compare(where.size() - 5, 5, ".json") == 0;
  return is_file ? remat::text::Tokenizer::from_tokenizer_json(where) : remat::text::Tokenizer::from_directory(where);
}

int corpus_ids(const remat::text::Tokenizer& tok, const char* path, bool specials) {
  const std::string corpus = read_all(path);
  std::string out;
  std::size_t i = 0, docs = 0, tokens = 0, replaced = 0;
  double seconds = 0;
  while (i < corpus.size()) {
    const std::size_t nl = corpus.find('\n', i);
    const std::size_t n = std::stoull(corpus.substr(i, nl - i));
    const std::string doc = corpus.substr(nl + 1, n);
    i = nl + 1 + n;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<std::int32_t> ids = specials ? tok.encode(doc) : tok.encode_ordinary(doc);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string valid = remat::text::to_valid_utf8(doc);
    replaced += valid != doc;
    // an NFC tokenizer gives back the text in NFC (Hugging Face's too): checked where it is NFC
    const bool checked = !tok.normalizes_nfc() || remat::text::nfc(valid) == valid;
    if (checked && tok.decode(ids) != valid) {
      std::fprintf(stderr, "encode_corpus: document %zu (%zu bytes) does not round-trip\n", docs, n);
      return 1;
    }
    append_ids(out, ids);
    ++docs;
    tokens += ids.size();
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fprintf(stderr, "encode_corpus: %zu documents (%zu with invalid UTF-8), %zu bytes, %zu tokens, "
               "round trip ok; encoding %.3f s, %.1f MB/s (first pass, cache cold)\n", docs, replaced,
               corpus.size(), tokens, seconds, corpus.size() / seconds / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool ok = (argc == 2 && mode == "--classes") ||
                  (argc == 3 && (mode == "--codepoints" || mode == "--vocab" || mode == "--nfc")) ||
                  (argc == 4 && mode == "--specials") ||
                  (argc == 3 && mode.rfind("--", 0) != 0);
  if (!ok) {
    std::fprintf(stderr, "usage: encode_corpus TOKENIZER_DIR CORPUS > ids.txt\n"
                         "       encode_corpus --codepoints TOKENIZER_DIR > ids.txt\n"
                         "       encode_corpus --vocab TOKENIZER_DIR > tokens.txt\n"
                         "       encode_corpus --classes > classes.bin\n"
                         "       encode_corpus --specials TOKENIZER CORPUS > ids.txt\n"
                         "       encode_corpus --nfc CORPUS > normalized.bin\n");
    return 2;
  }
  try {
    if (mode == "--classes") return classes();
    if (mode == "--nfc") return nfc_records(argv[2]);
    if (mode == "--codepoints") return codepoints(load(argv[2]));
    if (mode == "--vocab") return vocab(load(argv[2]));
    if (mode == "--specials") return corpus_ids(load(argv[2]), argv[3], true);
    return corpus_ids(load(argv[1]), argv[2], false);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "encode_corpus: %s\n", e.what());
    return 1;
  }
}
