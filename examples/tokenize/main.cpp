// SPDX-License-Identifier: MIT
// tokenize: text files -> an llm.c token file (.bin: a 256-int32 header, magic 20240520,
// version 1, then uint16 GPT-2 ids), ready for `train_gpt --data`. Each file is one document
// and starts with <|endoftext|>, as llm.c's data scripts write them.
//
//   build/examples/tokenize --tokenizer gpt2/ -o my.bin my.txt more.txt
//   build/examples/tokenize --tokenizer gpt2/ --decode my.bin | head     # back to text
//
// The tokenizer directory holds GPT-2's encoder.json + vocab.bpe, or Hugging Face's
// vocab.json + merges.txt or tokenizer.json (include/remat/text/tokenizer.hpp).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <remat/data/tokens.hpp>
#include <remat/io/safetensors.hpp>
#include <remat/text/tokenizer.hpp>

namespace {

std::string read_text(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  const std::vector<char> b = remat::io::read_file(path, "tokenize");
  return std::string(b.begin(), b.end());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tokenize: text files -> llm.c .bin of GPT-2 token ids (or --decode one back)"};
  std::string dir, out, decode;
  std::vector<std::string> files;
  bool no_eot = false;
  app.add_option("--tokenizer", dir, "directory with encoder.json + vocab.bpe, vocab.json + merges.txt, "
                                     "or tokenizer.json")->required();
  app.add_option("-o,--output", out, "the .bin to write");
  app.add_option("files", files, "text files, one document each ('-' reads standard input)");
  app.add_flag("--no-eot", no_eot, "do not start each document with <|endoftext|>");
  app.add_option("--decode", decode, "print the text of this .bin instead");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto tok = remat::text::Tokenizer::from_directory(dir);
    if (!decode.empty()) {
      const std::vector<std::int32_t> ids = remat::data::read_llmc_bin(decode);
      const std::string text = tok.decode(ids);
      std::fwrite(text.data(), 1, text.size(), stdout);
      return 0;
    }
    if (out.empty() || files.empty()) {
      std::fprintf(stderr, "tokenize: give -o OUT.bin and at least one text file (or --decode FILE.bin)\n");
      return 2;
    }
    REMAT_CHECK(tok.vocab_size() <= 65536, "tokenize: the vocabulary has ", tok.vocab_size(),
                " tokens, more than llm.c's uint16 ids can hold (expected at most 65536)");
    REMAT_CHECK(no_eot || tok.eot() >= 0, "tokenize: the tokenizer in '", dir,
                "' has no <|endoftext|> (hint: pass --no-eot)");
    std::vector<std::int32_t> ids;
    std::size_t bytes = 0;
    double seconds = 0;
    for (const std::string& f : files) {
      const std::string text = read_text(f);
      bytes += text.size();
      if (!no_eot) ids.push_back(tok.eot());
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<std::int32_t> doc = tok.encode(text);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ids.insert(ids.end(), doc.begin(), doc.end());
    }
    remat::data::write_llmc_bin(out, ids);
    std::printf("tokenize: %zu file(s), %zu bytes -> %zu tokens in '%s' (%.2f bytes a token; encoding "
                "%.2f s, %.1f MB/s)\n", files.size(), bytes, ids.size(), out.c_str(),
                ids.empty() ? 0.0 : static_cast<double>(bytes) / static_cast<double>(ids.size()), seconds,
                seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0.0);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenize: %s\n", e.what());
    return 1;
  }
}
