#pragma once
// SPDX-License-Identifier: MIT
// train_gpt's GPT-specific preparation, before any model exists: the tokenizer, the token data
// (training and validation), the model's config from the flags or from a weights file, the
// sampling prompt, and --estimate's table. Each step checks its inputs in the flags' words.

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <remat/data/tokens.hpp>
#include <remat/io/file.hpp>
#include <remat/io/gpt2.hpp>
#include <remat/nn/gpt.hpp>
#include <remat/nn/gpt_estimate.hpp>
#include <remat/nn/gpt_plan.hpp>
#include <remat/text/tokenizer.hpp>

#include "flags.hpp"

namespace train_gpt {

using namespace remat;

inline std::string builtin_text() {
  // A few sentences, repeated with a varying counter so the model has something to learn.
  const char* lines[] = {"the cat sat on the mat. ", "a bird in the hand is worth two in the bush. ",
                         "to be or not to be, that is the question. ",
                         "all that glitters is not gold. "};
  std::string text;
  for (int i = 0; i < 400; ++i) text += lines[i % 4] + std::to_string(i % 10) + " ";
  return text;
}

// The prompt of a model without a tokenizer whose vocabulary is not bytes: token ids separated
// by blanks, each below the vocabulary size.
inline std::vector<std::int32_t> prompt_ids(const std::string& prompt, std::int64_t vocab) {
  std::vector<std::int32_t> ids;
  std::size_t i = 0;
  while (i < prompt.size()) {
    if (prompt[i] == ' ' || prompt[i] == '\t' || prompt[i] == ',') { ++i; continue; }
    std::int64_t v = 0;
    std::size_t j = i;
    while (j < prompt.size() && prompt[j] >= '0' && prompt[j] <= '9' && v < vocab)
      v = v * 10 + (prompt[j++] - '0');
    const bool at_end = j == prompt.size() || prompt[j] == ' ' || prompt[j] == '\t' || prompt[j] == ',';
    REMAT_CHECK(j > i && at_end && v < vocab, "train_gpt: --prompt '", prompt, "' is not token ids: at "
                "character ", i + 1, ", expected an id 0..", vocab - 1, " (a model of ", vocab,
                " tokens without --tokenizer takes its prompt as ids separated by blanks; pass "
                "--tokenizer DIR for a text prompt)");
    ids.push_back(static_cast<std::int32_t>(v));
    i = j;
  }
  return ids;
}

// --tokenizer: GPT-2's byte-level BPE from a directory, or a Hugging Face tokenizer.json file.
inline std::optional<text::Tokenizer> load_tokenizer(const Flags& f) {
  std::optional<text::Tokenizer> tok;
  if (f.tokenizer.empty()) return tok;
  struct ::stat sb {};
  const bool is_file = ::stat(f.tokenizer.c_str(), &sb) == 0 && S_ISREG(sb.st_mode);
  tok.emplace(is_file ? text::Tokenizer::from_tokenizer_json(f.tokenizer)
                      : text::Tokenizer::from_directory(f.tokenizer));
  REMAT_CHECK(tok->eot() >= 0, "train_gpt: the tokenizer in '", f.tokenizer, "' has no <|endoftext|> "
              "(expected GPT-2's vocabulary, where it is the document separator and the start of "
              "an empty prompt)");
  return tok;
}

// The tokens of --data or --val-data (`flag`): an llm.c .bin file holds ids already; text is
// bytes, or GPT-2 ids with --tokenizer (one document, starting with <|endoftext|> as llm.c's
// data scripts and examples/tokenize write it). No path: the built-in text; "-": standard input.
inline std::vector<std::int32_t> read_tokens(const std::string& path, const char* flag,
                                             const std::optional<text::Tokenizer>& tok) {
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0) return data::read_llmc_bin(path);
  std::string text;
  if (path.empty()) {
    text = builtin_text();
  } else {
    if (path == "-" && ::isatty(STDIN_FILENO))  // text from standard input, as text tools read it
      std::fprintf(stderr, "train_gpt: reading the text from the terminal (end it with Ctrl-D)\n");
    const std::vector<char> b =
        io::read_file(path == "-" ? "/dev/stdin" : path, (std::string("train_gpt: ") + flag).c_str());
    text.assign(b.begin(), b.end());
  }
  if (!tok) return data::bytes_as_tokens(text);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::int32_t> tokens = tok->encode(text);
  tokens.insert(tokens.begin(), tok->eot());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "train_gpt: %s: %zu bytes -> %zu GPT-2 tokens (with <|endoftext|> first) in %.0f ms\n",
               path.empty() ? "built-in text" : path == "-" ? "standard input" : path.c_str(),
               text.size(), tokens.size(), 1e3 * s);
  return tokens;
}

// Every id of the data below the model's vocabulary.
inline void check_token_ids(const std::vector<std::int32_t>& tokens, std::int64_t vocab,
                            const char* what) {
  std::int32_t hi = 0;
  for (auto t : tokens) hi = std::max(hi, t);
  REMAT_CHECK(hi < vocab, "train_gpt: ", what, " has token id ", hi, " but the vocabulary has ",
              vocab, " entries (expected ids < vocab; raw text needs --vocab 256 or more)");
}

// The model's shapes and its weights, from --init-from (its shapes decide, the flags must agree)
// or from the flags. May shorten a default --seq to the file's positions.
struct ModelSource {
  nn::GPTConfig config;
  std::map<std::string, io::HostTensor> weights;  // empty: a new model
};

inline void note_file_heads(const Flags& f, const io::Gpt2Weights& file, const nn::GPTConfig& c,
                            std::int64_t heads) {
  if (heads == 0)
    std::fprintf(stderr, "train_gpt: note: assuming %lld attention heads (d %lld / 64): '%s' "
                 "does not record its head count (no 'n_head' in its metadata, no config.json "
                 "beside it); pass --heads N if it was trained with another\n",
                 static_cast<long long>(c.n_head), static_cast<long long>(c.n_embd), f.init_from.c_str());
  if (!file.skipped.empty()) {
    std::string list;
    for (std::size_t i = 0; i < file.skipped.size() && i < 3; ++i) list += (i ? ", " : "") + file.skipped[i];
    if (file.skipped.size() > 3) list += ", and " + std::to_string(file.skipped.size() - 3) + " more";
    std::fprintf(stderr, "train_gpt: note: skipped %zu tensor(s) of '%s' that the model does not use, "
                 "in dtypes remat does not read: %s\n", file.skipped.size(), f.init_from.c_str(),
                 list.c_str());
  }
}

inline ModelSource model_from_file(Flags& f, const CLI::App& app,
                                   const std::optional<text::Tokenizer>& tok) {
  ModelSource m;
  io::Gpt2Weights file = io::read_gpt2(f.init_from);
  // NOTE [GPT-2 head count] (io/gpt2.hpp): the head count changes no shape, so a file that
  // records it decides, --heads must agree with it, and an assumed one is said first.
  REMAT_CHECK(f.heads == 0 || file.n_head == 0 || f.heads == file.n_head, "train_gpt: --heads ",
              f.heads, " does not fit '", f.init_from, "': ", file.n_head_source, " says ",
              file.n_head, " heads (leave the flag out to take it from the file)");
  const std::int64_t heads = f.heads > 0 ? f.heads : file.n_head;
  m.weights = std::move(file.tensors);
  nn::GPTConfig& c = m.config;
  c = io::gpt2_config(m.weights, f.init_from, heads);
  note_file_heads(f, file, c, heads);
  auto agree = [&](const char* flag, std::int64_t given, std::int64_t in_file) {
    REMAT_CHECK(app.count(flag) == 0 || given == in_file, "train_gpt: ", flag, " ", given,
                " does not fit '", f.init_from, "', whose weights have ", in_file,
                " (leave the flag out to take it from the file)");
  };
  agree("--layers", f.layers, c.n_layer);
  agree("--d", f.d, c.n_embd);
  agree("--vocab", f.vocab, c.vocab_size);
  REMAT_CHECK(!tok || c.vocab_size >= tok->vocab_size(), "train_gpt: '", f.init_from, "' has ",
              c.vocab_size, " token embeddings but the tokenizer in '", f.tokenizer, "' has ",
              tok->vocab_size(), " tokens (expected a model with at least the tokenizer's "
              "vocabulary: GPT-2's has 50257, llm.c pads it to 50304)");
  // The default --seq is only a default: a file with fewer positions shortens it.
  if (app.count("--seq") == 0) f.seq = static_cast<int>(std::min<std::int64_t>(f.seq, c.block_size));
  REMAT_CHECK(f.seq <= c.block_size, "train_gpt: --seq ", f.seq, " is longer than the ",
              c.block_size, " positions of '", f.init_from, "'");
  return m;
}

inline ModelSource model_from_flags(Flags& f, const CLI::App& app,
                                    const std::optional<text::Tokenizer>& tok) {
  ModelSource m;
  // A new model with a tokenizer takes its vocabulary size unless --vocab pads it.
  if (tok && app.count("--vocab") == 0) f.vocab = static_cast<int>(tok->vocab_size());
  REMAT_CHECK(!tok || f.vocab >= tok->vocab_size(), "train_gpt: --vocab ", f.vocab, " is smaller "
              "than the ", tok->vocab_size(), " tokens of the tokenizer in '", f.tokenizer,
              "' (expected at least that many; leave --vocab out to take it from the tokenizer)");
  nn::GPTConfig& c = m.config;
  c.vocab_size = f.vocab;
  c.block_size = f.seq;
  c.n_layer = f.layers;
  c.n_embd = f.d;
  c.n_head = f.heads > 0 ? f.heads : std::max(1, f.d / 64);
  return m;
}

// The whole config: the shapes (file or flags), then what only the flags say.
inline ModelSource model_source(Flags& f, const CLI::App& app,
                                const std::optional<text::Tokenizer>& tok) {
  ModelSource m = f.init_from.empty() ? model_from_flags(f, app, tok) : model_from_file(f, app, tok);
  m.config.vocab_multiple = f.vocab_multiple;  // internal: files keep vocab_size rows
  m.config.dropout = f.dropout;
  m.config.precision = f.precision == "bf16" ? DType::bf16 : DType::f32;
  m.config.seed = f.seed;
  m.config.checkpoint = nn::CheckpointStrategy::parse(f.checkpoint);
  return m;
}

// The prompt of --sample, checked now rather than after training: text with --tokenizer (empty:
// <|endoftext|>), bytes for a 256-token vocabulary, else token ids separated by blanks.
inline std::vector<std::int32_t> prompt_tokens(const Flags& f, const CLI::App& app,
                                               const std::optional<text::Tokenizer>& tok,
                                               std::int64_t vocab) {
  std::vector<std::int32_t> prompt;
  if (tok)
    prompt = tok->encode(f.prompt);
  else if (vocab == 256)
    prompt = data::bytes_as_tokens(f.prompt);
  else if (app.count("--prompt"))
    prompt = prompt_ids(f.prompt, vocab);
  if (prompt.empty()) prompt.push_back(tok ? tok->eot() : 0);
  return prompt;
}

// --estimate: the predicted peak of a training step under every fixed strategy (and the plan
// of a budget, when --checkpoint asks for one), from the shape-only estimator; no training.
template <class B>
void print_estimates(const nn::GPTConfig& c, const Flags& f, const StepOptions& so) {
  std::printf("predicted peak of a training step (estimator, exact for the %s ledger), batch %d, "
              "seq %d, %s:\n", B::name, f.batch, f.seq, so.optimizer.c_str());
  std::printf("%-16s %12s %12s %12s %12s %12s %12s\n", "strategy", "peak MiB", "params",
              "gradients", "optimizer", "activations", "temporaries");
  auto row = [&](const std::string& name, const MemoryStats& m) {
    auto mib = [](std::int64_t b) { return static_cast<double>(b) / 1048576.0; };
    std::printf("%-16s %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f\n", name.c_str(), mib(m.peak_total),
                mib(m.at_peak_of(Category::parameters)), mib(m.at_peak_of(Category::gradients)),
                mib(m.at_peak_of(Category::optimizer_state)), mib(m.at_peak_of(Category::activations)),
                mib(m.at_peak_of(Category::temporaries)));
  };
  for (const std::string& s : nn::fixed_strategies(c.n_layer)) {
    nn::GPTConfig k = c;
    k.checkpoint = nn::CheckpointStrategy::parse(s);
    row(s, estimate_gpt_step<B>(k, f.batch, f.seq, so).step);
  }
  if (c.checkpoint.planned()) {
    const auto cp = nn::resolve_checkpoint<B>(c, f.batch, f.seq, so, {f.profile, 3});
    row(c.checkpoint.str(), cp.estimate.step);
    std::printf("\nplan for %s (%.2f s to plan):\n%s", c.checkpoint.str().c_str(), cp.plan_s,
                cp.table().c_str());
  }
}

}  // namespace train_gpt
