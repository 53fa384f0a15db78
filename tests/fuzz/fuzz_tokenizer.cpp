// SPDX-License-Identifier: MIT
// Fuzz target: the byte-level BPE tokenizer (include/remat/text/). The first byte picks what the rest is:
//   0: text, encoded with a small tokenizer trained at start-up (tests/text/tiny_bpe.hpp);
//   1: an encoder.json and a vocab.bpe, separated by the first NUL byte (Tokenizer::from_text);
//   2: a Hugging Face tokenizer.json, read from a file (Tokenizer::from_tokenizer_json).
// Properties: bad files are remat::Error; text never is; Llama 3's and Qwen 2's pre-tokens cover
// the text too, and NFC is idempotent and valid UTF-8. For any tokenizer that loads, and any
// bytes x: the pre-tokens are non-empty and concatenate to the repaired text, repair is
// idempotent, and decode(encode(x)) == to_valid_utf8(x), with and without the special token.
// A recipe input ("RCP\0", recipe.hpp) builds valid files (the 256 byte tokens, up to 9 merges,
// <|endoftext|> or not) as vocab.json + merges.txt or as a tokenizer.json, then makes one thing
// hostile: an id (nested 85,000 levels, huge, negative, not an integer), two tokens with one id,
// a key twice, a merge twice, a token spelled like <...>, a lone huge id. Beyond the properties
// above: a changed file that must be refused never loads; every token of a file that loads
// decodes to the bytes its key spells (<Ġ> is "< >"); an unchanged file loads with every token.
// Only the tokenizer's public API is used (it is not this target's to know its insides).

#include <remat/text/tokenizer.hpp>

#include "../text/tiny_bpe.hpp"
#include "fuzz_common.hpp"
#include "recipe.hpp"

namespace {

const remat::text::Tokenizer& tiny() {
  static const auto* t = [] {
    const auto b = remat_test::train_tiny_bpe(remat_test::tiny_training_text(), 120);
    return new remat::text::Tokenizer(remat::text::Tokenizer::from_text(b.encoder_json, b.vocab_bpe));
  }();
  return *t;
}

void check_text(const remat::text::Tokenizer& t, std::string_view x) {
  const std::string valid = remat::text::to_valid_utf8(x);
  if (remat::text::to_valid_utf8(valid) != valid)
    throw std::logic_error("to_valid_utf8: not idempotent");
  std::string joined;
  remat::text::pretokenize(valid, t.pretokenizer(), [&](std::string_view p) {
    if (p.empty()) throw std::logic_error("pretokenize: an empty piece");
    joined += p;
  });
  if (joined != valid) throw std::logic_error("pretokenize: the pieces do not make the text");
  if (t.normalizes_nfc()) {  // an NFC tokenizer gives back the text in NFC
    const std::string n = remat::text::nfc(valid);
    if (remat::text::nfc(n) != n) throw std::logic_error("nfc: not idempotent");
    if (n != valid) return;
  }
  if (t.decode(t.encode_ordinary(x)) != valid) throw std::logic_error("decode(encode_ordinary(x)) != x");
  if (t.decode(t.encode(x)) != valid) throw std::logic_error("decode(encode(x)) != x");
}

// The vocabulary of a recipe: keys (spelled JSON texts), ids (JSON texts), and the raw bytes
// each key stands for (empty for <|endoftext|>).
struct Vocab {
  std::vector<std::string> keys, ids, raw;
  std::string json() const {
    std::string s = "{";
    for (std::size_t i = 0; i < keys.size(); ++i) s += (i ? ", " : "") + keys[i] + ": " + ids[i];
    return s + "}";
  }
};

void run_recipe(const std::uint8_t* data, std::size_t size) {
  remat_fuzz::Recipe r(data + 4, size - 4);
  const std::uint64_t op = r.below(8);
  const bool tokenizer_json = r.coin(), eot = r.coin();
  Vocab v;
  for (int b = 0; b < 256; ++b) {
    const std::string raw(1, static_cast<char>(b));
    v.keys.push_back(remat_fuzz::json_string(remat_test::spelled(raw)));
    v.ids.push_back(std::to_string(b));
    v.raw.push_back(raw);
  }
  std::vector<std::string> merges;  // "a b", spelled
  const std::uint64_t k = r.below(10);
  for (std::uint64_t i = 0; i < k; ++i) {
    const std::string a = v.raw[r.below(v.raw.size())], b = v.raw[r.below(v.raw.size())];
    bool known = false;
    for (const std::string& x : v.raw) known = known || x == a + b;
    if (known) continue;
    merges.push_back(remat_test::spelled(a) + " " + remat_test::spelled(b));
    v.keys.push_back(remat_fuzz::json_string(remat_test::spelled(a + b)));
    v.ids.push_back(std::to_string(v.raw.size()));
    v.raw.push_back(a + b);
  }
  if (eot) {
    v.keys.push_back("\"<|endoftext|>\"");
    v.ids.push_back(std::to_string(v.raw.size()));
    v.raw.push_back("<|endoftext|>");
  }
  remat_fuzz::Change change;
  change.must_refuse = true;
  const std::size_t at = r.below(v.keys.size());
  switch (op) {
    case 0:
      change = remat_fuzz::Change{};
      break;
    case 1: {  // a hostile id
      const remat_fuzz::Hostile h = remat_fuzz::hostile_value(r);
      change.what = "token " + v.keys[at] + " with id " + h.text.substr(0, 40);
      change.must_refuse = !(h.text == "-0" && at == 0);
      v.ids[at] = h.text;
      break;
    }
    case 2: {  // two tokens, one id
      const std::size_t other = (at + 1 + r.below(v.keys.size() - 1)) % v.keys.size();
      v.ids[at] = v.ids[other];
      change.what = "tokens " + v.keys[at] + " and " + v.keys[other] + " with one id";
      break;
    }
    case 3:  // a key twice
      v.keys.push_back(v.keys[at]);
      v.ids.push_back(std::to_string(v.raw.size()));
      v.raw.push_back(v.raw[at]);
      change.what = "key " + v.keys[at] + " twice";
      break;
    case 4:  // a merge twice (encoder.py keeps the last rank; or an error): no certain outcome
      if (!merges.empty()) merges.push_back(merges[r.below(merges.size())]);
      change.what = "a merge twice";
      change.must_refuse = false;
      break;
    case 5: {  // a token spelled like a special one, <...>, that the files do not declare
      const std::string raw = "<" + v.raw[r.below(256)] + ">";
      v.keys.push_back(remat_fuzz::json_string(remat_test::spelled(raw)));
      v.ids.push_back(std::to_string(v.raw.size()));
      v.raw.push_back(raw);
      change.what = "a token " + v.keys.back() + " spelled <...>";
      change.must_refuse = false;
      break;
    }
    case 6: {  // a merge of tokens the vocabulary lacks, or a line that is no merge
      static const char* const lines[] = {"x", "a b c", " a", "a  b", "\u0120 \u0120\u0120\u0120", "#version: 0.2"};
      merges.push_back(r.pick(lines));
      change.what = "the merge line '" + merges.back() + "'";
      change.must_refuse = false;
      break;
    }
    default: {  // a huge id (the 15-byte {"!": 16777215} sized a 16M-entry table)
      static const char* const ids[] = {"16777215", "2147483647", "1000000", "4294967295"};
      v.keys = {"\"!\""};
      v.ids = {r.pick(ids)};
      v.raw = {"!"};
      merges.clear();
      change.what = "a lone token with id " + v.ids[0];
    }
  }
  if (remat_fuzz::verbose())
    std::fprintf(stderr, "  recipe: %s, %zu tokens, %zu merges, %s\n",
                 tokenizer_json ? "tokenizer.json" : "vocab.json + merges.txt", v.keys.size(), merges.size(),
                 change.what.c_str());
  remat_fuzz::guarded([&] {
    remat::text::Tokenizer t = [&] {
      try {
        if (!tokenizer_json) {
          std::string m = "#version: 0.2\n";
          for (const std::string& x : merges) m += x + "\n";
          return remat::text::Tokenizer::from_text(v.json(), m);
        }
        std::string j = "{\"model\": {\"type\": \"BPE\", \"vocab\": " + v.json() + ", \"merges\": [";
        for (std::size_t i = 0; i < merges.size(); ++i) j += (i ? ", " : "") + remat_fuzz::json_string(merges[i]);
        j += "]}";
        if (eot && op != 7)
          j += ", \"added_tokens\": [{\"id\": " + v.ids[v.keys.size() - 1 - (op == 3 || op == 5 ? 1 : 0)] +
               ", \"content\": \"<|endoftext|>\", \"special\": true}]";
        j += "}";
        const std::string& path =
            remat_fuzz::mem_file().write(reinterpret_cast<const std::uint8_t*>(j.data()), j.size());
        return remat::text::Tokenizer::from_tokenizer_json(path);
      } catch (const remat::Error& e) {
        if (change.what == "none")
          throw std::logic_error(std::string("Tokenizer refused valid files: ") + e.what());
        throw;
      }
    }();
    if (change.must_refuse) throw std::logic_error("Tokenizer accepted files with " + change.what);
    for (std::size_t i = 0; i < v.keys.size(); ++i) {
      const std::int64_t id = std::stoll(v.ids[i]);
      if (id < 0 || id >= t.vocab_size())
        throw std::logic_error("Tokenizer: token " + v.keys[i] + " has no id " + v.ids[i] + " after loading");
      if (t.token_bytes(static_cast<std::int32_t>(id)) != v.raw[i])
        throw std::logic_error("Tokenizer: token " + v.keys[i] + " (id " + v.ids[i] +
                               ") decodes to other bytes than its key spells");
    }
    if (change.what == "none" && t.vocab_size() != static_cast<std::int64_t>(v.keys.size()))
      throw std::logic_error("Tokenizer: valid files loaded with another vocabulary size");
    std::string sample = "Hello world, it's 2024! caf\xc3\xa9 <|endoftext|> \xff";
    for (const std::string& x : v.raw) sample += x;
    check_text(t, sample);
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  remat_fuzz::init_environment();
  tiny();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  if (remat_fuzz::is_recipe(data, size)) {
    run_recipe(data, size);
    return 0;
  }
  const std::string rest = remat_fuzz::as_string(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      check_text(tiny(), rest);  // text is never an error
      // Llama 3's and Qwen 2's pre-tokenizers, and NFC, on the same text
      const std::string valid = remat::text::to_valid_utf8(rest);
      for (auto kind : {remat::text::Pretokenizer::llama3, remat::text::Pretokenizer::qwen2}) {
        std::string joined;
        remat::text::pretokenize(valid, kind, [&](std::string_view p) {
          if (p.empty()) throw std::logic_error("pretokenize (Llama 3 / Qwen 2): an empty piece");
          joined += p;
        });
        if (joined != valid) throw std::logic_error("pretokenize (Llama 3 / Qwen 2): the pieces do not make the text");
      }
      const std::string n = remat::text::nfc(valid);
      if (remat::text::nfc(n) != n || remat::text::to_valid_utf8(n) != n) throw std::logic_error("nfc: not idempotent");
      return 0;
    }
    case 1:
      return remat_fuzz::guarded([&] {
        const std::size_t nul = rest.find('\0');
        const std::string vocab = rest.substr(0, nul);
        const std::string merges = nul == std::string::npos ? std::string() : rest.substr(nul + 1);
        const auto t = remat::text::Tokenizer::from_text(vocab, merges);
        check_text(t, "Hello world, it's 2024! caf\xc3\xa9 <|endoftext|> \xff");
        check_text(t, merges);
      });
    default:
      return remat_fuzz::guarded([&] {
        const std::string& path = remat_fuzz::mem_file().write(data + 1, size - 1);
        const auto t = remat::text::Tokenizer::from_tokenizer_json(path);
        check_text(t, "Hello world, it's 2024! caf\xc3\xa9 <|endoftext|> \xff");
      });
  }
}
