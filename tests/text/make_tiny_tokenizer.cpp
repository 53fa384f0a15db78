// SPDX-License-Identifier: MIT
// make_tiny_tokenizer TEXT MERGES DIR: writes DIR/encoder.json and DIR/vocab.bpe of a small
// GPT-2-format tokenizer learned from the file TEXT (tiny_bpe.hpp: the 256 byte tokens, MERGES
// merges, <|endoftext|> last), for the trainer's and the tokenize tool's command-line tests.
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include <remat/io/file.hpp>

#include "tiny_bpe.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: make_tiny_tokenizer TEXT MERGES DIR\n");
    return 2;
  }
  try {
    const std::vector<char> text = remat::io::read_file(argv[1], "make_tiny_tokenizer");
    const auto bpe = remat_test::train_tiny_bpe(std::string(text.begin(), text.end()), std::stoi(argv[2]));
    const std::string dir = argv[3];
    for (const auto& [name, body] : {std::pair<std::string, const std::string&>{"encoder.json", bpe.encoder_json},
                                     {"vocab.bpe", bpe.vocab_bpe}}) {
      std::ofstream out(dir + "/" + name, std::ios::binary);
      out << body;
      if (!out.flush()) {
        std::fprintf(stderr, "make_tiny_tokenizer: cannot write '%s/%s'\n", dir.c_str(), name.c_str());
        return 1;
      }
    }
    std::printf("%zu\n", 256 + bpe.merges.size() + 1);  // the vocabulary size
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_tiny_tokenizer: %s\n", e.what());
    return 1;
  }
}
