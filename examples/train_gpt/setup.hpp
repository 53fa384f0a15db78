#pragma once
// SPDX-License-Identifier: MIT
// train_gpt's preparation, before any model exists: the tokenizer, the token data (training and
// validation), the model's config from the flags or from the --init-from files (a GPT-2 file or
// a Llama-family folder, family.hpp), the sampling prompt, and --estimate's table. Each step
// checks its inputs in the flags' words.

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

#include "family.hpp"
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

// --tokenizer: a Hugging Face tokenizer.json file, or a folder: its tokenizer.json where it has
// one (a Hugging Face download's complete description: pre-tokenizer, added tokens; its
// vocab.json and merges.txt say less), else GPT-2's encoder.json + vocab.bpe or vocab.json +
// merges.txt.
inline std::optional<text::Tokenizer> load_tokenizer(const Flags& f) {
  std::optional<text::Tokenizer> tok;
  if (f.tokenizer.empty()) return tok;
  struct ::stat sb {};
  const bool is_file = ::stat(f.tokenizer.c_str(), &sb) == 0 && S_ISREG(sb.st_mode);
  const std::string inside = (f.tokenizer.back() == '/' ? f.tokenizer : f.tokenizer + "/") + "tokenizer.json";
  tok.emplace(is_file                        ? text::Tokenizer::from_tokenizer_json(f.tokenizer)
              : io::is_regular_file(inside) ? text::Tokenizer::from_tokenizer_json(inside)
                                            : text::Tokenizer::from_directory(f.tokenizer));
  (void)document_separator(*tok, f.tokenizer);  // checked now, before any data is read
  return tok;
}

// The tokens of --data or --val-data (`flag`): an llm.c .bin file holds ids already; text is
// bytes, or the tokenizer's ids with --tokenizer (one document, starting with the document
// separator, <|endoftext|> for GPT-2, as llm.c's data scripts and examples/tokenize write it).
// No path: the built-in text; "-": standard input.
inline std::vector<std::int32_t> read_tokens(const std::string& path, const char* flag,
                                             const std::optional<text::Tokenizer>& tok,
                                             const std::string& tok_path = "") {
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
  const std::int32_t first = document_separator(*tok, tok_path);
  tokens.insert(tokens.begin(), first);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "train_gpt: %s: %zu bytes -> %zu tokens (with %s first) in %.0f ms\n",
               path.empty() ? "built-in text" : path == "-" ? "standard input" : path.c_str(),
               text.size(), tokens.size(), tok->token_bytes(first).c_str(), 1e3 * s);
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
template <class Family>
struct ModelSource {
  typename Family::Config config;
  typename Family::Weights weights;  // empty: a new model
  bool from_files = false;
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

inline ModelSource<GptFamily> gpt_from_file(Flags& f, const CLI::App& app,
                                            const std::optional<text::Tokenizer>& tok) {
  ModelSource<GptFamily> m;
  m.from_files = true;
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

// A new model with a tokenizer takes its vocabulary size unless --vocab pads it.
inline void vocab_from_tokenizer(Flags& f, const CLI::App& app, const std::optional<text::Tokenizer>& tok) {
  if (tok && app.count("--vocab") == 0) f.vocab = static_cast<int>(tok->vocab_size());
  REMAT_CHECK(!tok || f.vocab >= tok->vocab_size(), "train_gpt: --vocab ", f.vocab, " is smaller "
              "than the ", tok->vocab_size(), " tokens of the tokenizer in '", f.tokenizer,
              "' (expected at least that many; leave --vocab out to take it from the tokenizer)");
}

inline ModelSource<GptFamily> gpt_from_flags(Flags& f, const CLI::App& app,
                                             const std::optional<text::Tokenizer>& tok) {
  ModelSource<GptFamily> m;
  vocab_from_tokenizer(f, app, tok);
  nn::GPTConfig& c = m.config;
  c.vocab_size = f.vocab;
  c.block_size = f.seq;
  c.n_layer = f.layers;
  c.n_embd = f.d;
  c.n_head = f.heads > 0 ? f.heads : std::max(1, f.d / 64);
  return m;
}

// A Llama-family folder (config.json and model.safetensors, or its shards): its config decides,
// the shape flags must agree with it.
inline ModelSource<LlamaFamily> llama_from_files(Flags& f, const CLI::App& app,
                                                 const std::optional<text::Tokenizer>& tok) {
  ModelSource<LlamaFamily> m;
  m.from_files = true;
  m.weights = io::read_llama(f.init_from);
  if (!m.weights.skipped.empty())
    std::fprintf(stderr, "train_gpt: note: skipped %zu tensor(s) of '%s' that the model does not use (%s%s)\n",
                 m.weights.skipped.size(), f.init_from.c_str(), m.weights.skipped[0].c_str(),
                 m.weights.skipped.size() > 1 ? ", ..." : "");
  nn::LlamaConfig& c = m.config;
  c = m.weights.config;
  auto agree = [&](const char* flag, std::int64_t given, std::int64_t in_file) {
    REMAT_CHECK(app.count(flag) == 0 || given == in_file, "train_gpt: ", flag, " ", given,
                " does not fit '", f.init_from, "', whose config.json says ", in_file,
                " (leave the flag out to take it from the files)");
  };
  agree("--layers", f.layers, c.num_layers);
  agree("--d", f.d, c.hidden_size);
  agree("--heads", f.heads, c.num_heads);
  agree("--kv-heads", f.kv_heads, c.num_kv_heads);
  agree("--ffn", f.ffn, c.intermediate_size);
  agree("--vocab", f.vocab, c.vocab_size);
  REMAT_CHECK(!tok || c.vocab_size >= tok->vocab_size(), "train_gpt: '", f.init_from, "' has ",
              c.vocab_size, " token embeddings but the tokenizer in '", f.tokenizer, "' has ",
              tok->vocab_size(), " tokens (expected the model's own tokenizer.json)");
  REMAT_CHECK(c.max_position_embeddings <= 0 || f.seq <= c.max_position_embeddings, "train_gpt: --seq ",
              f.seq, " is longer than the ", c.max_position_embeddings, " positions '", f.init_from,
              "' was trained for (max_position_embeddings)");
  return m;
}

// A new Llama-style model from the shape flags: --heads (default d / 64), --kv-heads (default
// --heads), --ffn (default 8d/3 rounded up to a multiple of 64), a tied head, rope_theta 1e4.
inline ModelSource<LlamaFamily> llama_from_flags(Flags& f, const CLI::App& app,
                                                 const std::optional<text::Tokenizer>& tok) {
  ModelSource<LlamaFamily> m;
  vocab_from_tokenizer(f, app, tok);
  nn::LlamaConfig& c = m.config;
  c.model_type = "llama";
  c.vocab_size = f.vocab;
  c.hidden_size = f.d;
  c.num_layers = f.layers;
  c.num_heads = f.heads > 0 ? f.heads : std::max(1, f.d / 64);
  c.num_kv_heads = f.kv_heads > 0 ? f.kv_heads : c.num_heads;
  REMAT_CHECK(f.d % c.num_heads == 0, "train_gpt: --d ", f.d, " is not a multiple of the ", c.num_heads,
              " heads (expected --d = heads x head size; pass --heads)");
  c.head_dim = f.d / c.num_heads;
  c.intermediate_size = f.ffn > 0 ? f.ffn : (8 * std::int64_t{f.d} / 3 + 63) / 64 * 64;
  c.max_position_embeddings = f.seq;
  c.rms_norm_eps = 1e-5f;
  c.rope.theta = 10000.0f;
  c.tie_word_embeddings = true;
  c.check("train_gpt: --model llama");
  return m;
}

// Flags of one family only.
inline void check_family_flags(const std::string& family, const Flags& f, const CLI::App& app) {
  if (family == "llama") {
    REMAT_CHECK(app.count("--dropout") == 0, "train_gpt: --dropout ", f.dropout, " applies to GPT-2; "
                "the Llama family has no dropout (leave --dropout out)");
    REMAT_CHECK(app.count("--vocab-multiple") == 0, "train_gpt: --vocab-multiple pads GPT-2's token "
                "embedding; the Llama family keeps its vocabulary as the files have it (leave it out)");
  } else {
    REMAT_CHECK(app.count("--kv-heads") == 0 && app.count("--ffn") == 0, "train_gpt: --kv-heads and --ffn "
                "shape a Llama-family model (expected --model llama, or --init-from a Llama-family "
                "folder, with them)");
  }
}

// The whole config: the shapes (files or flags), then what only the flags say.
inline ModelSource<GptFamily> model_source(GptFamily, Flags& f, const CLI::App& app,
                                           const std::optional<text::Tokenizer>& tok) {
  ModelSource<GptFamily> m = f.init_from.empty() ? gpt_from_flags(f, app, tok) : gpt_from_file(f, app, tok);
  m.config.vocab_multiple = f.vocab_multiple;  // internal: files keep vocab_size rows
  m.config.dropout = f.dropout;
  m.config.precision = f.precision == "bf16" ? DType::bf16 : DType::f32;
  m.config.seed = f.seed;
  m.config.checkpoint = nn::CheckpointStrategy::parse(f.checkpoint);
  return m;
}
inline ModelSource<LlamaFamily> model_source(LlamaFamily, Flags& f, const CLI::App& app,
                                             const std::optional<text::Tokenizer>& tok) {
  ModelSource<LlamaFamily> m = f.init_from.empty() ? llama_from_flags(f, app, tok) : llama_from_files(f, app, tok);
  m.config.precision = f.precision == "bf16" ? DType::bf16 : DType::f32;
  m.config.seed = f.seed;
  m.config.checkpoint = nn::CheckpointStrategy::parse(f.checkpoint);
  return m;
}

// The prompt of --sample, checked now rather than after training: text with --tokenizer (empty:
// the document separator, <|endoftext|> for GPT-2), bytes for a 256-token vocabulary, else token ids separated by blanks.
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
  if (prompt.empty()) prompt.push_back(tok ? document_separator(*tok, f.tokenizer) : 0);
  return prompt;
}

// --estimate: the predicted peak of a training step under every fixed strategy (and the plan
// of a budget, when --checkpoint asks for one), from the shape-only estimator; no training.
template <class B, class Family>
void print_estimates(const typename Family::Config& c, const Flags& f, const StepOptions& so) {
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
  for (const std::string& s : nn::fixed_strategies(Family::layers(c))) {
    typename Family::Config k = c;
    k.checkpoint = nn::CheckpointStrategy::parse(s);
    row(s, Family::template estimate<B>(k, f.batch, f.seq, so).step);
  }
  if (c.checkpoint.planned()) {
    const auto cp = nn::resolve_checkpoint<B>(c, f.batch, f.seq, so, {f.profile, 3});
    row(c.checkpoint.str(), cp.estimate.step);
    std::printf("\nplan for %s (%.2f s to plan):\n%s", c.checkpoint.str().c_str(), cp.plan_s,
                cp.table().c_str());
  }
}

}  // namespace train_gpt
