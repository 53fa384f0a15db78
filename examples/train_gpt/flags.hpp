#pragma once
// SPDX-License-Identifier: MIT
// train_gpt's flags: their values (Flags, filled by main.cpp's CLI11 options) and their checks
// in the flags' own words, all made before anything is read or trained.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <remat/core/error.hpp>

namespace train_gpt {

struct Flags {
  int layers = 4, d = 128, heads = 0, seq = 128, vocab = 256, batch = 8, steps = 50, threads = 2;
  float lr = 3e-4f, grad_clip = 1.0f, momentum = 0.0f, weight_decay = 0.0f, dropout = 0.0f;
  std::string lr_schedule = "constant";  // or cosine: --warmup steps, then decay to --min-lr
  int warmup = 0;
  float min_lr = 0.0f;
  float temperature = 1.0f, bucket_mib = 25.0f;
  std::uint64_t seed = 1337;
  std::string model;  // gpt or llama; "": from --init-from's config.json, else gpt
  int kv_heads = 0, ffn = 0;  // the Llama family: key/value heads (0: --heads), SwiGLU width (0: 8d/3 rounded up to 64)
  std::string optimizer = "adamw", checkpoint = "none", data, init_from, save, snapshot_path,
              resume, prompt = "The ", device = "cpu", memory_limit, tokenizer;
  std::string precision = "fp32";  // or bf16: what the blocks and the head compute in
  std::string save_dtype = "fp32";  // or bf16: the type --save writes the weights in
  int snapshot_every = 0, sample = 0, grad_accum = 1, global_batch = 0, vocab_multiple = 1;
  bool json = false, estimate = false, profile = true, zero = false, batch_invariant = false;
  bool decay_all = false;  // --weight-decay on every parameter, not only on matrices
  // validation (NOTE [validation loss] in remat/train/evaluate.hpp): --val-batches batches of
  // --batch x --seq tokens from --val-data, after every --val-every steps and the last one
  std::string val_data;
  int val_every = 0, val_batches = 20;
};

// A flag and its value as messages show it: "--seq 128", or "--seq 128 (the default)" when the
// user did not pass it, so a default is never reported as if it had been typed.
template <class T>
inline std::string flag_value(const CLI::App& app, const char* flag, const T& value) {
  std::ostringstream os;
  os << flag << " " << value << (app.count(flag) ? "" : " (the default)");
  return os.str();
}

// Numbers out of their range: a value that would silently do something else (a NaN learning
// rate, clipping turned off by -1, a negative count that is ignored) is an error naming the
// flag and what it expects.
inline void validate_ranges(const Flags& f) {
  auto expect = [](bool ok, const char* flag, double v, const char* expected) {
    REMAT_CHECK(ok, "train_gpt: ", flag, " ", v, " is out of range (expected ", expected, ")");
  };
  expect(std::isfinite(f.lr) && f.lr >= 0.0f, "--lr", f.lr, "a finite learning rate >= 0");
  REMAT_CHECK(f.lr_schedule == "constant" || f.lr_schedule == "cosine", "train_gpt: "
              "--lr-schedule '", f.lr_schedule, "' is not a schedule (expected constant, or "
              "cosine: --warmup steps of linear warmup, then cosine decay towards --min-lr over "
              "the run)");
  expect(f.warmup >= 0 && (f.lr_schedule == "constant" || f.warmup < std::max(f.steps, 1)),
         "--warmup", f.warmup, "0 <= warmup < --steps");
  expect(std::isfinite(f.min_lr) && f.min_lr >= 0.0f && f.min_lr <= f.lr, "--min-lr", f.min_lr,
         "a rate between 0 and --lr");
  expect(std::isfinite(f.weight_decay) && f.weight_decay >= 0.0f, "--weight-decay", f.weight_decay,
         "a finite weight decay >= 0");
  expect(std::isfinite(f.grad_clip) && f.grad_clip >= 0.0f, "--grad-clip", f.grad_clip,
         "a finite gradient-norm limit > 0, or 0 to turn clipping off");
  expect(std::isfinite(f.momentum) && f.momentum >= 0.0f && f.momentum < 1.0f, "--momentum",
         f.momentum, "a momentum in [0, 1)");
  expect(std::isfinite(f.dropout) && f.dropout >= 0.0f && f.dropout < 1.0f, "--dropout", f.dropout,
         "a probability in [0, 1)");
  expect(std::isfinite(f.temperature) && f.temperature >= 0.0f, "--temperature", f.temperature,
         "a finite temperature >= 0; 0 always takes the most likely token");
  expect(f.snapshot_every >= 0, "--snapshot-every", f.snapshot_every,
         "a number of steps >= 1, or 0 for no periodic snapshot");
  expect(f.sample >= 0, "--sample", f.sample, "a number of tokens to generate >= 0");
  expect(std::isfinite(f.bucket_mib) && f.bucket_mib >= 0.001f && f.bucket_mib <= 4096.0f,
         "--bucket-mib", f.bucket_mib, "a bucket size from 0.001 to 4096 MiB");
  expect(f.val_every >= 0, "--val-every", f.val_every,
         "a number of steps >= 1, or 0 to evaluate after the last step only");
  expect(f.val_batches >= 1, "--val-batches", f.val_batches, "a number of batches >= 1");
}

// Flags that only make sense together, or never together.
inline void validate_combinations(const Flags& f, const CLI::App& app) {
  REMAT_CHECK(f.optimizer == "sgd" || app.count("--momentum") == 0, "train_gpt: --momentum ",
              f.momentum, " applies to --optimizer sgd only (AdamW's betas are 0.9 and 0.999; "
              "leave --momentum out, or pass --optimizer sgd)");
  REMAT_CHECK(f.snapshot_every == 0 || !f.snapshot_path.empty(), "train_gpt: --snapshot-every ",
              f.snapshot_every, " needs --snapshot-path (where the training state goes)");
  REMAT_CHECK(f.sample > 0 || (app.count("--prompt") == 0 && app.count("--temperature") == 0),
              "train_gpt: --prompt and --temperature are for sampling after training, which "
              "--sample N turns on (expected --sample N > 0 with them)");
  REMAT_CHECK(f.save.empty() || f.save != f.snapshot_path, "train_gpt: --save and --snapshot-path "
              "are both '", f.save, "' (expected two files: the weights and the training state)");
  REMAT_CHECK(app.count("--save-dtype") == 0 || !f.save.empty(), "train_gpt: --save-dtype ",
              f.save_dtype, " is the type of the weights --save writes (expected --save FILE "
              "with it)");
  REMAT_CHECK(!f.zero || f.optimizer == "adamw", "train_gpt: --zero shards AdamW's state "
              "(expected --optimizer adamw with --zero)");
  REMAT_CHECK(app.count("--grad-accum") == 0 || app.count("--global-batch") == 0, "train_gpt: "
              "--grad-accum and --global-batch both set the micro-steps (expected one of them: "
              "--global-batch G makes G / (ranks x --batch) micro-steps)");
  REMAT_CHECK(app.count("--val-data") == 0 || !f.val_data.empty(), "train_gpt: --val-data is "
              "empty (expected a text file or an llm.c .bin file of held-out tokens)");
  REMAT_CHECK(f.val_data != "-", "train_gpt: --val-data - would read standard input (expected a "
              "file: standard input can feed --data only)");
  REMAT_CHECK(!f.val_data.empty() || (app.count("--val-every") == 0 && app.count("--val-batches") == 0),
              "train_gpt: --val-every and --val-batches set when the validation loss is computed, "
              "which --val-data FILE turns on (expected --val-data with them)");
}

// Every flag in its own words, before anything is read or trained.
inline void validate(const Flags& f, const CLI::App& app) {
  validate_ranges(f);
  validate_combinations(f, app);
}

// The micro-steps per rank: --grad-accum, or --global-batch / (ranks x --batch), which must divide.
inline int micro_steps(const Flags& f, const CLI::App& app, int ranks) {
  if (app.count("--global-batch") == 0) return f.grad_accum;
  const std::int64_t per = static_cast<std::int64_t>(ranks) * f.batch;
  REMAT_CHECK(f.global_batch % per == 0, "train_gpt: --global-batch ", f.global_batch,
              " is not a multiple of ", ranks, " rank(s) x ", flag_value(app, "--batch", f.batch),
              " = ", per, " sequences (expected --global-batch = ranks x --batch x micro-steps; "
              "e.g. --global-batch ", per * std::max<std::int64_t>(1, f.global_batch / per), ")");
  return static_cast<int>(f.global_batch / per);
}

}  // namespace train_gpt
