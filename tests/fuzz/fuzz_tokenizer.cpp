// SPDX-License-Identifier: MIT
// Fuzz target: GPT-2's tokenizer (include/remat/text/). The first byte picks what the rest is:
//   0: text, encoded with a small tokenizer trained at start-up (tests/text/tiny_bpe.hpp);
//   1: an encoder.json and a vocab.bpe, separated by the first NUL byte (Gpt2Tokenizer::from_text);
//   2: a Hugging Face tokenizer.json, read from a file (Gpt2Tokenizer::from_tokenizer_json).
// Properties: bad files are remat::Error; text never is. For any tokenizer that loads, and any
// bytes x: the pre-tokens are non-empty and concatenate to the repaired text, repair is
// idempotent, and decode(encode(x)) == to_valid_utf8(x), with and without the special token.

#include <remat/text/gpt2_tokenizer.hpp>

#include "../text/tiny_bpe.hpp"
#include "fuzz_common.hpp"

namespace {

const remat::text::Gpt2Tokenizer& tiny() {
  static const auto* t = [] {
    const auto b = remat_test::train_tiny_bpe(remat_test::tiny_training_text(), 120);
    return new remat::text::Gpt2Tokenizer(remat::text::Gpt2Tokenizer::from_text(b.encoder_json, b.vocab_bpe));
  }();
  return *t;
}

void check_text(const remat::text::Gpt2Tokenizer& t, std::string_view x) {
  const std::string valid = remat::text::to_valid_utf8(x);
  if (remat::text::to_valid_utf8(valid) != valid)
    throw std::logic_error("to_valid_utf8: not idempotent");
  std::string joined;
  remat::text::pretokenize(valid, [&](std::string_view p) {
    if (p.empty()) throw std::logic_error("pretokenize: an empty piece");
    joined += p;
  });
  if (joined != valid) throw std::logic_error("pretokenize: the pieces do not make the text");
  if (t.decode(t.encode_ordinary(x)) != valid) throw std::logic_error("decode(encode_ordinary(x)) != x");
  if (t.decode(t.encode(x)) != valid) throw std::logic_error("decode(encode(x)) != x");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  remat_fuzz::init_environment();
  tiny();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string rest = remat_fuzz::as_string(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      check_text(tiny(), rest);  // text is never an error
      return 0;
    case 1:
      return remat_fuzz::guarded([&] {
        const std::size_t nul = rest.find('\0');
        const std::string vocab = rest.substr(0, nul);
        const std::string merges = nul == std::string::npos ? std::string() : rest.substr(nul + 1);
        const auto t = remat::text::Gpt2Tokenizer::from_text(vocab, merges);
        check_text(t, "Hello world, it's 2024! caf\xc3\xa9 <|endoftext|> \xff");
        check_text(t, merges);
      });
    default:
      return remat_fuzz::guarded([&] {
        const std::string& path = remat_fuzz::mem_file().write(data + 1, size - 1);
        const auto t = remat::text::Gpt2Tokenizer::from_tokenizer_json(path);
        check_text(t, "Hello world, it's 2024! caf\xc3\xa9 <|endoftext|> \xff");
      });
  }
}
