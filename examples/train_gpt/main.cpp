// SPDX-License-Identifier: MIT
// train_gpt: trains a GPT-2-style model from the command line, with activation checkpointing.
//   build/examples/train_gpt --layers 4 --d 128 --steps 100 --checkpoint block
//   build/examples/train_gpt --init-from model.safetensors --data train.bin --optimizer sgd
// Data: a raw text file (bytes, vocab 256), an llm.c .bin file, or (no --data) a built-in
// corpus. Weights in and out in Hugging Face's GPT-2 safetensors layout; full training-state
// snapshots (--snapshot-every, --resume) are written atomically. See --help.

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <remat/data/tokens.hpp>
#include <remat/io/gpt2.hpp>
#include <remat/io/snapshot.hpp>
#include <remat/nn/gpt_plan.hpp>
#include <remat/remat.hpp>

using namespace remat;

namespace {

struct Flags {
  int layers = 4, d = 128, heads = 0, seq = 128, vocab = 256, batch = 8, steps = 50, threads = 2;
  float lr = 3e-4f, grad_clip = 1.0f, momentum = 0.0f, weight_decay = 0.0f, dropout = 0.0f;
  float temperature = 1.0f;
  std::uint64_t seed = 1337;
  std::string optimizer = "adamw", checkpoint = "none", data, init_from, save, snapshot_path,
              resume, prompt = "The ", device = "cpu", memory_limit;
  int snapshot_every = 0, sample = 0;
  bool json = false, estimate = false, profile = true;
};

// --estimate: the predicted peak of a training step under every fixed strategy (and the plan
// of a budget, when --checkpoint asks for one), from the shape-only estimator; no training.
void print_estimates(const nn::GPTConfig& c, const Flags& f, const StepOptions& so) {
  std::printf("predicted peak of a training step (estimator, exact for the CPU ledger), batch %d, seq %d, %s:\n",
              f.batch, f.seq, so.optimizer.c_str());
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
    row(s, estimate_gpt_step<Cpu>(k, f.batch, f.seq, so).step);
  }
  if (c.checkpoint.planned()) {
    const auto cp = nn::resolve_checkpoint<Cpu>(c, f.batch, f.seq, so, {f.profile, 3});
    row(c.checkpoint.str(), cp.estimate.step);
    std::printf("\nplan for %s (%.2f s to plan):\n%s", c.checkpoint.str().c_str(), cp.plan_s,
                cp.table().c_str());
  }
}

std::vector<std::int32_t> builtin_corpus() {
  // A few sentences, repeated with a varying counter so the model has something to learn.
  const char* lines[] = {"the cat sat on the mat. ", "a bird in the hand is worth two in the bush. ",
                         "to be or not to be, that is the question. ",
                         "all that glitters is not gold. "};
  std::string text;
  for (int i = 0; i < 400; ++i) text += lines[i % 4] + std::to_string(i % 10) + " ";
  return std::vector<std::int32_t>(text.begin(), text.end());
}

std::string fmt_duration(double s) {
  const int t = static_cast<int>(s + 0.5);
  char b[32];
  std::snprintf(b, sizeof b, "%02d:%02d:%02d", t / 3600, (t / 60) % 60, t % 60);
  return b;
}

int run(const Flags& f, const CLI::App& app) {
  REMAT_CHECK(f.device == "cpu", "train_gpt: --device ", f.device, " is not available in this build "
              "(expected cpu; the CUDA backend comes with remat::cuda)");
  set_num_threads(f.threads);
  // ---- data
  std::vector<std::int32_t> tokens;
  if (f.data.empty())
    tokens = builtin_corpus();
  else if (f.data.size() > 4 && f.data.compare(f.data.size() - 4, 4, ".bin") == 0)
    tokens = data::read_llmc_bin(f.data);
  else
    tokens = data::read_text_bytes(f.data);

  // ---- model: from the flags, or from a weights file (its shapes decide, flags must agree)
  nn::GPTConfig c;
  std::map<std::string, io::HostTensor> weights;
  if (!f.init_from.empty()) {
    weights = io::gpt2_tensors(io::read_safetensors(f.init_from));
    c = io::gpt2_config(weights, f.init_from, f.heads);
    auto agree = [&](const char* flag, std::int64_t given, std::int64_t file) {
      REMAT_CHECK(app.count(flag) == 0 || given == file, "train_gpt: ", flag, " ", given,
                  " does not fit '", f.init_from, "', whose weights have ", file,
                  " (leave the flag out to take it from the file)");
    };
    agree("--layers", f.layers, c.n_layer);
    agree("--d", f.d, c.n_embd);
    agree("--vocab", f.vocab, c.vocab_size);
    REMAT_CHECK(f.seq <= c.block_size, "train_gpt: --seq ", f.seq, " is longer than the ",
                c.block_size, " positions of '", f.init_from, "'");
  } else {
    c.vocab_size = f.vocab;
    c.block_size = f.seq;
    c.n_layer = f.layers;
    c.n_embd = f.d;
    c.n_head = f.heads > 0 ? f.heads : std::max(1, f.d / 64);
  }
  c.dropout = f.dropout;
  c.seed = f.seed;
  c.checkpoint = nn::CheckpointStrategy::parse(f.checkpoint);
  StepOptions so;
  so.optimizer = f.optimizer;
  so.momentum = f.optimizer == "sgd" ? f.momentum : 0.0f;
  if (f.estimate) {
    print_estimates(c, f, so);
    return 0;
  }
  if (!f.memory_limit.empty())
    set_memory_limit<Cpu>(parse_bytes(f.memory_limit, "train_gpt: --memory-limit"));
  std::int32_t hi = 0;
  for (auto t : tokens) hi = std::max(hi, t);
  REMAT_CHECK(hi < c.vocab_size, "train_gpt: the data has token id ", hi, " but the vocabulary has ",
              c.vocab_size, " entries (expected ids < vocab; raw text needs --vocab 256 or more)");

  Tape<Cpu> tape(f.seed);
  nn::GPT<Cpu> model(tape, c);
  if (!weights.empty()) io::load_gpt2(weights, model, f.init_from);
  const auto params = model.parameters();
  optim::AdamW<Cpu> adamw(params, {f.lr, 0.9f, 0.999f, 1e-8f, f.weight_decay});
  optim::SGD<Cpu> sgd(params, {f.lr, f.momentum, f.weight_decay, false});
  optim::AdamW<Cpu>* use_adamw = f.optimizer == "adamw" ? &adamw : nullptr;
  optim::SGD<Cpu>* use_sgd = f.optimizer == "sgd" ? &sgd : nullptr;
  data::Batcher batches(std::move(tokens), f.batch, f.seq);

  int start = 0;
  if (!f.resume.empty()) {
    // load_state checks the snapshot's model config against these flags (--layers, --d,
    // --heads, --vocab, --seq, --dropout) and parses every field strictly.
    const io::TrainState st = io::load_state(f.resume, model, use_adamw, use_sgd);
    REMAT_CHECK(st.step <= std::numeric_limits<int>::max(), "train_gpt: '",
                f.resume, "' is at step ", st.step, ", past what --steps can count (expected at "
                "most ", std::numeric_limits<int>::max(), ")");
    REMAT_CHECK(st.data_position < static_cast<std::int64_t>(batches.tokens().size()),
                "train_gpt: '", f.resume, "' has data position ", st.data_position, " but the data has ",
                batches.tokens().size(), " tokens (resume with the data the snapshot was trained on)");
    start = static_cast<int>(st.step);
    batches.set_position(st.data_position);
    tape.set_seed(st.rng_seed);
    tape.set_rng_offset(st.rng_offset);
  }
  // budget:SIZE and auto: plan now, for these shapes (the profile times one block for real).
  const nn::ProfileOptions profile{f.profile, 3};
  // A budget bounds the process's memory (the ledger and the headroom around it); a memory limit
  // counts the ledger alone.
  auto plan_for = [&](std::int64_t budget, bool bound_process) {
    try {
      return nn::plan_checkpoint<Cpu>(c, f.batch, f.seq, budget, so, profile, {bound_process});
    } catch (const OutOfMemory&) {  // no room to time a block: plan from FLOP counts
      return nn::plan_checkpoint<Cpu>(c, f.batch, f.seq, budget, so, {false, 1}, {bound_process});
    }
  };
  if (c.checkpoint.planned()) {
    const std::int64_t limit = memory_limit<Cpu>();
    const std::int64_t budget = nn::budget_of<Cpu>(c.checkpoint);
    const auto cp = plan_for(budget, !(limit > 0 && budget == limit));
    c.checkpoint = model.config.checkpoint = cp.strategy;
    if (!f.json)
      std::printf("checkpoint %s: %s (%.2f s to plan)\n%s", c.checkpoint.str().c_str(),
                  cp.summary().c_str(), cp.plan_s, cp.table().c_str());
  }
  const bool tty = !f.json && ::isatty(STDOUT_FILENO);
  if (!f.json)
    std::printf("GPT %lld layers, d %lld, %lld heads, vocab %lld, seq %d, batch %d: %lld parameters; "
                "checkpoint %s; %s\n",
                static_cast<long long>(c.n_layer), static_cast<long long>(c.n_embd),
                static_cast<long long>(c.n_head), static_cast<long long>(c.vocab_size), f.seq,
                f.batch, static_cast<long long>(model.num_parameters()), c.checkpoint.str().c_str(),
                Cpu::describe().c_str());

  std::vector<std::int32_t> x, y;
  double total = 0;
  for (int step = start; step < f.steps; ++step) {
    reset_peak_memory<Cpu>();
    const auto t0 = std::chrono::steady_clock::now();
    batches.next(x, y);
    // NOTE [re-plan on out of memory]: a step that runs out of memory is dropped whole (its
    // graph, its gradients; the optimizer state and weights are untouched, since the optimizers
    // allocate before they update) and run again on the same batch from the same RNG counter,
    // under a plan for the memory limit: its loss is the loss that plan gives from the start.
    const std::uint64_t rng0 = tape.rng_offset();
    std::string replanned;
    float l = 0;
    for (int attempt = 0;; ++attempt) {
      try {
        const auto idx = tape.tokens({f.batch, f.seq}, x), tgt = tape.tokens({f.batch, f.seq}, y);
        const auto loss = use_adamw ? gpt_train_step(model, adamw, idx, tgt, f.grad_clip)
                                    : gpt_train_step(model, sgd, idx, tgt, f.grad_clip);
        l = loss.item();
        break;
      } catch (const OutOfMemory& e) {
        tape.clear();
        optim::zero_grad(params);
        tape.set_rng_offset(rng0);
        const std::int64_t limit = memory_limit<Cpu>();
        if (limit <= 0 || attempt >= 3) throw;
        const auto cp = plan_for(limit, false);  // an Error names the smallest feasible budget
        c.checkpoint = model.config.checkpoint = cp.strategy;
        replanned = cp.summary();
        if (!f.json)
          std::printf("%sstep %d ran out of memory (%s); re-planned for the limit %s: %s\n%s",
                      tty ? "\n" : "", step + 1, e.what(), format_bytes(limit).c_str(),
                      replanned.c_str(), cp.table().c_str());
      }
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total += dt;
    const auto mem = memory_stats<Cpu>();
    const double tps = f.batch * f.seq / dt;
    if (f.json) {
      std::printf("{\"step\":%d,\"loss\":%.9g,\"step_s\":%.6f,\"tokens_per_s\":%.1f,\"peak_bytes\":%lld,"
                  "\"peak_saved_bytes\":%lld%s}\n",
                  step + 1, l, dt, tps, static_cast<long long>(mem.peak_total),
                  static_cast<long long>(mem.peak_of(Category::activations)),
                  replanned.empty() ? "" : (",\"replanned\":\"" + c.checkpoint.str() + ": " + replanned + "\"").c_str());
      std::fflush(stdout);
    } else if (tty || step + 1 == f.steps || (step + 1) % 10 == 0) {
      const double eta = total / (step + 1 - start) * (f.steps - step - 1);
      std::printf("%sstep %d/%d | loss %.4f | %.0f tok/s | peak %.1f MiB | ETA %s%s%s", tty ? "\r" : "",
                  step + 1, f.steps, l, tps, mem.peak_total / 1048576.0, fmt_duration(eta).c_str(),
                  replanned.empty() ? "" : " | re-planned", tty ? "   " : "\n");
      std::fflush(stdout);
    }
    if (f.snapshot_every > 0 && (step + 1) % f.snapshot_every == 0) {
      REMAT_CHECK(!f.snapshot_path.empty(), "train_gpt: --snapshot-every needs --snapshot-path");
      io::TrainState st;
      st.step = step + 1;
      st.data_position = batches.position();
      st.rng_seed = tape.seed();
      st.rng_offset = tape.rng_offset();
      st.extra["checkpoint_strategy"] = c.checkpoint.str();
      io::save_state(f.snapshot_path, model, use_adamw, use_sgd, st);
    }
  }
  if (tty) std::printf("\n");
  if (!f.save.empty()) {
    io::save_gpt2(f.save, model);
    if (!f.json) std::printf("saved weights to %s\n", f.save.c_str());
  }
  if (f.sample > 0) {
    // Generate from the prompt (bytes when the vocabulary is 256, else token ids separated by
    // spaces), sampling with the temperature from the counter-based generator.
    NoGrad ng;
    std::vector<std::int32_t> ctx;
    if (c.vocab_size == 256)
      for (unsigned char ch : f.prompt) ctx.push_back(ch);
    if (ctx.empty()) ctx.push_back(0);
    std::string out;
    for (int i = 0; i < f.sample; ++i) {
      const std::int64_t T = std::min<std::int64_t>(static_cast<std::int64_t>(ctx.size()), c.block_size);
      std::vector<std::int32_t> window(ctx.end() - T, ctx.end());
      auto logits = model(tape.tokens({1, T}, window), /*training=*/false).to_vector();
      const float* last = logits.data() + (T - 1) * c.vocab_size;
      float mx = last[0];
      for (std::int64_t v = 1; v < c.vocab_size; ++v) mx = std::max(mx, last[v]);
      std::vector<double> p(static_cast<std::size_t>(c.vocab_size));
      double sum = 0;
      for (std::int64_t v = 0; v < c.vocab_size; ++v)
        sum += p[static_cast<std::size_t>(v)] = std::exp((last[v] - mx) / std::max(f.temperature, 1e-4f));
      double u = rng::uniform(f.seed, 0xabc, static_cast<std::uint64_t>(i)) * sum;
      std::int32_t next = static_cast<std::int32_t>(c.vocab_size - 1);
      for (std::int64_t v = 0; v < c.vocab_size; ++v)
        if ((u -= p[static_cast<std::size_t>(v)]) <= 0) {
          next = static_cast<std::int32_t>(v);
          break;
        }
      ctx.push_back(next);
      out += c.vocab_size == 256 ? std::string(1, static_cast<char>(next)) : std::to_string(next) + " ";
    }
    std::printf("sample: %s%s\n", c.vocab_size == 256 ? f.prompt.c_str() : "", out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Train a GPT-2-style model with activation checkpointing (remat)"};
  app.add_option("--layers", f.layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--d", f.d, "model width")->check(CLI::PositiveNumber);
  app.add_option("--heads", f.heads, "attention heads (default d/64)")->check(CLI::NonNegativeNumber);
  app.add_option("--seq", f.seq, "sequence length")->check(CLI::PositiveNumber);
  app.add_option("--vocab", f.vocab, "vocabulary size (256 for raw text)")->check(CLI::PositiveNumber);
  app.add_option("--batch", f.batch, "sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--steps", f.steps, "total steps (a resumed run continues up to it)")->check(CLI::NonNegativeNumber);
  app.add_option("--lr", f.lr, "learning rate");
  app.add_option("--seed", f.seed, "seed of the initialization and of dropout");
  app.add_option("--grad-clip", f.grad_clip, "global gradient-norm limit (0: off)");
  app.add_option("--threads", f.threads, "CPU threads")->check(CLI::PositiveNumber);
  app.add_option("--optimizer", f.optimizer, "adamw or sgd")->check(CLI::IsMember({"adamw", "sgd"}));
  app.add_option("--momentum", f.momentum, "SGD momentum");
  app.add_option("--weight-decay", f.weight_decay, "weight decay (decoupled for AdamW)");
  app.add_option("--dropout", f.dropout, "dropout probability");
  app.add_option("--checkpoint", f.checkpoint,
                 "none, block, every:N, sqrt, save_linear (old name: selective), budget:SIZE "
                 "(e.g. budget:300MiB: the fastest plan whose whole step fits) or auto (the "
                 "memory free now, less 10%)");
  app.add_option("--memory-limit", f.memory_limit,
                 "cap the CPU memory (e.g. 2GiB): past it an allocation is out of memory, and the "
                 "step is re-planned for the limit and run again");
  app.add_flag("--estimate", f.estimate,
               "print the predicted peak of a step under every fixed strategy (and the plan of a "
               "budget) without training");
  app.add_flag("!--no-profile", f.profile,
               "plan budgets from FLOP counts instead of timing a block first");
  app.add_option("--data", f.data, "a text file (bytes) or an llm.c .bin file; none: built-in text");
  app.add_option("--init-from", f.init_from, "GPT-2 weights (Hugging Face safetensors layout)");
  app.add_option("--save", f.save, "write the weights here (safetensors, GPT-2 layout)");
  app.add_option("--snapshot-every", f.snapshot_every, "write the training state every N steps");
  app.add_option("--snapshot-path", f.snapshot_path, "where the training state goes");
  app.add_option("--resume", f.resume, "continue from a training-state snapshot");
  app.add_option("--sample", f.sample, "generate N tokens after training");
  app.add_option("--prompt", f.prompt, "the prompt for --sample (raw text models)");
  app.add_option("--temperature", f.temperature, "sampling temperature");
  app.add_option("--device", f.device, "cpu (cuda with the CUDA backend)");
  app.add_flag("--json", f.json, "one JSON object per step instead of the progress line");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(f, app);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "train_gpt: error: %s\n", e.what());
    return 1;
  }
}
