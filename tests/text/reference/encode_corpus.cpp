// SPDX-License-Identifier: MIT
// remat's side of the tokenizer's reference test: encodes each document of a corpus
// (make_corpus.py's `<length>\n<bytes>` records) with remat::text::Gpt2Tokenizer::encode_ordinary
// and prints one line of space-separated ids per document, as encode_reference.js does. It also
// checks the round trip: decode(encode(doc)) is the document (its valid-UTF-8 form when it has
// invalid bytes), exiting 1 on the first document that differs.
//   encode_corpus TOKENIZER_DIR CORPUS > ids.txt
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <remat/text/gpt2_tokenizer.hpp>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: encode_corpus TOKENIZER_DIR CORPUS > ids.txt\n");
    return 2;
  }
  try {
    const auto tok = remat::text::Gpt2Tokenizer::from_directory(argv[1]);
    std::ifstream f(argv[2], std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string corpus = ss.str();
    std::string out;
    std::size_t i = 0, docs = 0, tokens = 0, replaced = 0;
    double seconds = 0;
    while (i < corpus.size()) {
      const std::size_t nl = corpus.find('\n', i);
      const std::size_t n = std::stoull(corpus.substr(i, nl - i));
      const std::string doc = corpus.substr(nl + 1, n);
      i = nl + 1 + n;
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<std::int32_t> ids = tok.encode_ordinary(doc);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::string valid = remat::text::to_valid_utf8(doc);
      replaced += valid != doc;
      if (tok.decode(ids) != valid) {
        std::fprintf(stderr, "encode_corpus: document %zu (%zu bytes) does not round-trip\n", docs, n);
        return 1;
      }
      for (std::size_t k = 0; k < ids.size(); ++k) {
        if (k) out += ' ';
        out += std::to_string(ids[k]);
      }
      out += '\n';
      ++docs;
      tokens += ids.size();
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fprintf(stderr, "encode_corpus: %zu documents (%zu with invalid UTF-8), %zu bytes, %zu tokens, "
                 "round trip ok; encoding %.3f s, %.1f MB/s (first pass, cache cold)\n", docs, replaced,
                 corpus.size(), tokens, seconds, corpus.size() / seconds / 1e6);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "encode_corpus: %s\n", e.what());
    return 1;
  }
}
