#pragma once
// SPDX-License-Identifier: MIT
// train_gpt's trainer for any backend: train<B>(flags) is the whole run after the flags are
// parsed (main.cpp). The CPU instantiates it in main.cpp; the CUDA backend in cuda.cu (nvcc),
// or in cuda_emulated.cpp against the CUDA emulation (REMAT_CUDA_EMULATION, tests only).
// Nothing here includes a backend: a translation unit brings the one it trains on.
//
// The loop's parts that know nothing of GPT are the library's (include/remat/train/): the
// loop's schedule, the progress and JSON lines, the stop signals and the ranks' agreement, the
// output paths and the writes with a fallback, the finite-weights check, the step with
// re-planning and the data-parallel step, the validation loss, and sampling. Here is the glue: what the
// flags ask for (flags.hpp), the data and the model (setup.hpp), the model families (family.hpp:
// GPT-2 and the Llama family), and the run that ties them.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <remat/core/step.hpp>
#include <remat/core/tape.hpp>
#include <remat/data/tokens.hpp>
#include <remat/dist/comm.hpp>
#include <remat/dist/data_parallel.hpp>
#include <remat/dist/sharded_adamw.hpp>
#include <remat/io/gpt2.hpp>
#include <remat/io/snapshot.hpp>
#include <remat/nn/gpt.hpp>
#include <remat/nn/gpt_plan.hpp>
#include <remat/optim/adamw.hpp>
#include <remat/optim/grad.hpp>
#include <remat/optim/schedule.hpp>
#include <remat/optim/sgd.hpp>
#include <remat/text/tokenizer.hpp>
#include <remat/train/evaluate.hpp>
#include <remat/train/generate.hpp>
#include <remat/train/loop.hpp>
#include <remat/train/output.hpp>
#include <remat/train/progress.hpp>
#include <remat/train/signals.hpp>
#include <remat/train/snapshot.hpp>
#include <remat/train/step.hpp>

#include "flags.hpp"
#include "setup.hpp"

namespace train_gpt {

using namespace remat;

// NOTE [data parallel trainer]: under mpirun (or srun) every rank runs this program; --batch is
// one micro-batch of one rank, and a step takes `ranks x micro-steps` of them: micro-batch g of
// the step (g = rank x micro-steps + k, so a rank's micro-batches are consecutive) is the g-th
// --batch sequences of the step's global batch, read as one process would read the whole of it,
// and draws its dropout from stream_seed(seed, step, g) (NOTE [data parallel step] in
// remat/train/step.hpp). So the data, the masks and (with the fixed-order sums, NOTE [reduction
// order]) every bit of the training depend on the global batch and the micro-batch, not on how
// they are split among ranks and micro-steps. Rank 0 prints and writes; the ranks agree after
// each step whether a signal asks them to stop (NOTE [stop agreement]), and evaluate the
// validation loss together, each a share of its batches (NOTE [validation loss]).
//
// NOTE [batch-invariant]: the bits of a matrix product's rows depend on how many rows it has
// (OpenBLAS picks its blocking by the shape), and the gradient of a micro-batch sums over its
// sequences inside the products; so --batch 4 and --batch 2 x 2 micro-steps give close, not
// equal, bits.
// --batch-invariant runs each micro-batch as --batch micro-steps of one sequence: sequence s of
// the step's global batch is micro-batch s of --batch 1, with its dropout stream, and the
// per-sequence gradients are summed in the pairwise order of NOTE [reduction order]. The
// training is then bit for bit that of --batch 1 with --batch times the micro-steps, whatever
// the split of the global batch among ranks, micro-steps and micro-batches, as long as each
// rank's sequences per step (micro-steps x --batch) are a power of two (one process: any count),
// and every rank runs the same --threads (some reductions split by thread): a snapshot of 2
// ranks x --batch 4 resumes on 4 ranks x --batch 2. The price: products of --seq rows (slower
// at short sequences), and the pairwise sum holds up to log2(sequences per rank) + 1 gradient
// copies (plus the buckets' during the sum); activations are those of one sequence. The
// validation loss then runs one sequence per forward pass too.

// Everything read and checked before the model exists.
template <class Family>
struct Setup {
  Flags f;                       // as parsed, with the defaults the files settle
  train::Parallel par;           // this rank, the ranks, the micro-steps per rank
  int batch_flag = 0, micro_flag = 0;  // --batch and the micro-steps as given, for messages
  std::int64_t global_seqs = 0;  // sequences per step over all ranks
  std::optional<text::Tokenizer> tok;
  std::vector<std::int32_t> tokens, val_tokens;
  std::int64_t val_batches = 0;  // 0: no validation
  ModelSource<Family> model;
  StepOptions so;
  std::vector<std::int32_t> prompt;
};

// The split of a step over ranks and micro-steps; --batch-invariant makes each sequence a
// micro-step of its own (NOTE [batch-invariant]).
template <class Family>
void split_over_ranks(Setup<Family>& s, const CLI::App& app, const dist::Comm& comm) {
  Flags& f = s.f;
  s.par.rank = comm.rank();
  s.par.ranks = comm.size();
  s.par.micro_steps = micro_steps(f, app, s.par.ranks);
  s.batch_flag = f.batch;
  s.micro_flag = s.par.micro_steps;
  if (f.batch_invariant && f.batch > 1) {
    REMAT_CHECK(static_cast<std::int64_t>(s.par.micro_steps) * f.batch <= std::numeric_limits<int>::max(),
                "train_gpt: --batch-invariant makes ", s.par.micro_steps, " x ", f.batch,
                " micro-steps per rank, more than ", std::numeric_limits<int>::max(),
                " (expected a smaller --batch or --global-batch)");
    s.par.micro_steps *= f.batch;
    f.batch = 1;
  }
  s.global_seqs = s.par.micro_batches() * f.batch;
}

// Every rank must run the same training: the hash of the flags is compared.
inline void check_ranks_agree(const Flags& f, const CLI::App& app, dist::Comm& comm) {
  REMAT_CHECK(comm.size() == 1 || f.data != "-", "train_gpt: --data - reads standard input, which "
              "reaches rank 0 only under mpirun (expected a file with ", comm.size(), " ranks)");
  if (comm.size() == 1) return;
  std::string flags;
  for (const auto* o : app.get_options())
    for (const std::string& v : o->results()) flags += o->get_name() + "=" + v + ";";
  const auto all = comm.all_gather_u64({detail::hash_bytes(flags)});
  for (int r = 1; r < comm.size(); ++r)
    REMAT_CHECK(all[static_cast<std::size_t>(r)] == all[0], "train_gpt: rank ", r, " was started "
                "with other flags than rank 0 (expected the same command on every rank)");
}

// --save of a Llama-family model: a Hugging Face folder (config.json, model.safetensors), made
// at the end when missing; its parent must exist, and an existing path must be a folder.
inline void check_output_folder(const std::string& what, const std::string& path) {
  struct ::stat sb {};
  if (::stat(path.c_str(), &sb) == 0) {
    REMAT_CHECK(S_ISDIR(sb.st_mode), what, " '", path, "' is a file (expected a folder for a Llama-family "
                "model's config.json and model.safetensors); nothing was trained");
    return;
  }
  const std::string parent = train::folder_of(path.back() == '/' ? path.substr(0, path.size() - 1) : path);
  REMAT_CHECK(::stat(parent.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode), what, " '", path, "': the folder '",
              parent, "' does not exist (expected an existing folder to make it in); nothing was trained");
}

// NOTE [output paths] (remat/train/output.hpp): what the run writes, and what it reads.
inline void check_paths(const Flags& f, bool lead, const std::string& family) {
  if (!f.estimate && lead) {
    if (!f.save.empty() && family == "llama")
      check_output_folder("train_gpt: --save", f.save);
    else if (!f.save.empty())
      train::check_output_path("train_gpt: --save", f.save);
    if (!f.snapshot_path.empty()) train::check_output_path("train_gpt: --snapshot-path", f.snapshot_path);
  }
  train::check_input_not_directory("train_gpt: --data", f.data,
                                   "a text file, an llm.c .bin file, or - for standard input");
  std::string hint;  // a Hugging Face download's folder: the weights are inside
  if (!f.init_from.empty()) {
    const std::string inside = (f.init_from.back() == '/' ? f.init_from : f.init_from + "/") + "model.safetensors";
    struct ::stat sb {};
    if (::stat(inside.c_str(), &sb) == 0) hint = "; did you mean '" + inside + "'?";
  }
  if (family != "llama")  // a Llama-family --init-from is a folder (or a file in one)
    train::check_input_not_directory("train_gpt: --init-from", f.init_from,
                                     "a GPT-2 weights file in safetensors format", hint);
  train::check_input_not_directory("train_gpt: --resume", f.resume,
                                   "a snapshot file written by --snapshot-path");
  train::check_input_not_directory("train_gpt: --val-data", f.val_data,
                                   "a text file or an llm.c .bin file of held-out tokens");
}

// The flags, the paths, the tokenizer, the training data and the model's config: what
// --estimate needs too.
template <class Family>
Setup<Family> prepare(Flags f, const CLI::App& app, dist::Comm& comm) {
  Setup<Family> s;
  s.f = std::move(f);
  split_over_ranks(s, app, comm);
  check_ranks_agree(s.f, app, comm);
  check_paths(s.f, s.par.rank == 0, Family::kName);
  s.tok = load_tokenizer(s.f);
  s.tokens = read_tokens(s.f.data, "--data", s.tok, s.f.tokenizer);
  s.model = model_source(Family{}, s.f, app, s.tok);
  s.so.optimizer = s.f.optimizer;
  s.so.momentum = s.f.optimizer == "sgd" ? s.f.momentum : 0.0f;
  s.so.grad_clip = s.f.grad_clip;
  return s;
}

// --val-data: the held-out tokens and how many batches of --batch x --seq are evaluated.
template <class Family>
void prepare_validation(Setup<Family>& s, const CLI::App& app) {
  const Flags& f = s.f;
  const std::string file = "--val-data '" + f.val_data + "'";
  s.val_tokens = read_tokens(f.val_data, "--val-data", s.tok, f.tokenizer);
  check_token_ids(s.val_tokens, Family::vocab(s.model.config), file.c_str());
  const std::int64_t have = train::ValidationSet::available(
      static_cast<std::int64_t>(s.val_tokens.size()), s.batch_flag, f.seq);
  REMAT_CHECK(have >= 1, "train_gpt: ", file, " has ", s.val_tokens.size(), " tokens, too few for "
              "one batch of ", flag_value(app, "--batch", s.batch_flag), " x ",
              flag_value(app, "--seq", f.seq), " (expected at least ",
              static_cast<std::int64_t>(s.batch_flag) * f.seq + 1,
              " tokens; pass more held-out text, or a smaller --batch or --seq)");
  REMAT_CHECK(app.count("--val-batches") == 0 || f.val_batches <= have, "train_gpt: --val-batches ",
              f.val_batches, " is more than the ", have, " batch(es) of --batch ", s.batch_flag,
              " x --seq ", f.seq, " that ", file, " holds (expected at most ", have, ")");
  s.val_batches = std::min<std::int64_t>(f.val_batches, have);
}

// The rest of the checks of a run that trains: the prompt, the data's ids and length, and the
// validation data.
template <class Family>
void prepare_run(Setup<Family>& s, const CLI::App& app) {
  const Flags& f = s.f;
  const std::int64_t vocab = Family::vocab(s.model.config);
  s.prompt = prompt_tokens(f, app, s.tok, vocab);
  check_token_ids(s.tokens, vocab, "the data");
  REMAT_CHECK(static_cast<std::int64_t>(s.tokens.size()) >= s.global_seqs * f.seq + 1,
              "train_gpt: the data has ", s.tokens.size(), " tokens, too few for one batch of ",
              flag_value(app, "--batch", s.batch_flag), " x ", flag_value(app, "--seq", f.seq),
              s.par.micro_batches() == 1 ? std::string()
                                         : " x " + std::to_string(s.par.ranks) + " rank(s) x " +
                                               std::to_string(s.micro_flag) + " micro-step(s)",
              " (expected at least ", s.global_seqs * f.seq + 1,
              " tokens; pass a smaller --batch or --seq)");
  if (!f.val_data.empty()) prepare_validation(s, app);
}

/// One training run of a model of Family (family.hpp) on backend B, from a Setup that passed
/// every check.
template <class B, class Family>
class Trainer {
 public:
  Trainer(Setup<Family> s, const CLI::App& app, dist::Comm& comm)
      : s_(std::move(s)), f_(s_.f), app_(app), comm_(comm), lead_(s_.par.rank == 0),
        tape_(f_.seed), model_(tape_, s_.model.config), params_(model_.parameters()),
        batches_(std::move(s_.tokens), s_.global_seqs, f_.seq),
        progress_(f_.json, lead_ && train::stdout_is_terminal(), 10, f_.lr_schedule != "constant"),
        stop_(comm),
        schedule_(f_.lr_schedule == "cosine"
                      ? optim::LrSchedule::warmup_cosine(f_.lr, f_.min_lr, f_.warmup, std::max(f_.steps, 1))
                      : optim::LrSchedule::constant(f_.lr)),
        loop_{f_.steps, f_.val_every, s_.val_batches > 0, f_.snapshot_every},
        snapshot_target_(!f_.snapshot_path.empty() ? f_.snapshot_path
                                                   : "train_gpt-" + std::to_string(::getpid()) + ".state") {
    if (s_.model.from_files) Family::load(s_.model.weights, model_, f_.init_from);
    s_.model.weights = {};
    make_optimizer();
    if (s_.par.micro_batches() > 1 || f_.zero) make_data_parallel();
    if (s_.val_batches > 0)
      val_.emplace(std::move(s_.val_tokens), s_.batch_flag, f_.seq, s_.val_batches);
    loop_.check("train_gpt");  // validate() said it in the flags' words already
  }

  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// The run: returns the exit code (0, 1 when the weights went elsewhere, 128 + a signal).
  int run() {
    if (!f_.resume.empty()) resume();
    if (model_.config.checkpoint.planned()) plan_budget();
    print_header();
    train::install_stop_handlers({snapshot_target_, f_.save}, "train_gpt",
                                 "train_gpt: stopping after this step: the snapshot and the weights "
                                 "will be written (signal again to abort at once)");
    for (int step = start_; step < f_.steps && stop_.signal() == 0; ++step) run_step(step);
    progress_.finish();
    // NOTE [interrupt]: the step in flight has finished. (A signal after the last step's
    // agreement: one more, so that every rank takes the same path.)
    if (done_ > start_) stop_.agree();
    return stop_.signal() != 0 ? stopped() : finish();
  }

 private:
  // ---- set-up

  void make_optimizer() {
    // Only the chosen optimizer is built, so only its options are checked (and blamed). Weight
    // decay on the matrices (rank >= 2: linear weights, embeddings) unless --decay-all, as
    // GPT-2's recipes in nanoGPT and llm.c do.
    const optim::DecayOn decay_on = f_.decay_all ? optim::DecayOn::all : optim::DecayOn::matrices;
    if (f_.optimizer == "adamw")
      adamw_.emplace(params_, optim::AdamWOptions{f_.lr, 0.9f, 0.999f, 1e-8f, f_.weight_decay, decay_on});
    else
      sgd_.emplace(params_, optim::SGDOptions{f_.lr, f_.momentum, f_.weight_decay, false, decay_on});
    use_adamw_ = adamw_ ? &*adamw_ : nullptr;
    use_sgd_ = sgd_ ? &*sgd_ : nullptr;
  }

  // Several ranks or micro-steps: gradients summed by DataParallel (fixed order; one process
  // with one micro-step runs the plain step, which gives the same bits). --zero: AdamW's
  // moments sharded over the ranks (ZeRO-1, NOTE [data parallel] 8); the full AdamW object then
  // only carries a snapshot's state in and out.
  void make_data_parallel() {
    dist::DataParallelOptions o;
    o.bucket_bytes = static_cast<std::size_t>(static_cast<double>(f_.bucket_mib) * 1048576.0);
    o.first_bucket_bytes = std::min(o.first_bucket_bytes, o.bucket_bytes);
    o.shard_optimizer = f_.zero;
    dp_.emplace(tape_, model_.named_parameters(), comm_, o);
    if (f_.zero) sharded_.emplace(*dp_, adamw_->options());
  }

  void resume() {
    // load_state checks the snapshot's model config against the one these flags made (--layers,
    // --d, --heads, --vocab, --seq, --dropout: n_layer, n_embd, n_head, vocab_size, block_size,
    // dropout in its errors) and parses every field strictly.
    const io::TrainState st = io::load_state(f_.resume, model_, use_adamw_, use_sgd_);
    if (sharded_) {  // this rank's chunks at the first step; the full state is dropped then
      sharded_->resume_from(std::make_shared<optim::AdamW<B>>(std::move(*adamw_)));
      adamw_.reset();
      use_adamw_ = nullptr;
    }
    REMAT_CHECK(st.step <= std::numeric_limits<int>::max(), "train_gpt: '",
                f_.resume, "' is at step ", st.step, ", past what --steps can count (expected at "
                "most ", std::numeric_limits<int>::max(), ")");
    REMAT_CHECK(st.step <= f_.steps, "train_gpt: ", flag_value(app_, "--steps", f_.steps),
                " is below step ", st.step, " of the snapshot '", f_.resume, "' (--steps is the "
                "total a resumed run continues up to: expected --steps >= ", st.step, ")");
    REMAT_CHECK(st.data_position < static_cast<std::int64_t>(batches_.tokens().size()),
                "train_gpt: '", f_.resume, "' has data position ", st.data_position, " but the data has ",
                batches_.tokens().size(), " tokens (resume with the data the snapshot was trained on)");
    start_ = done_ = static_cast<int>(st.step);
    snapshot_ = {start_, f_.resume};
    batches_.set_position(st.data_position);
    tape_.set_seed(st.rng_seed);
    tape_.set_rng_offset(st.rng_offset);
    note_other_batch(st);
  }

  // A snapshot of another global batch or forward batch resumes, and says so.
  void note_other_batch(const io::TrainState& st) const {
    if (!lead_) return;
    const auto was = st.extra.find("global_batch");
    if (was != st.extra.end() && was->second != std::to_string(s_.global_seqs))
      std::fprintf(stderr, "train_gpt: note: '%s' was trained with a global batch of %s sequences, "
                   "this run takes %lld per step (%d rank(s) x %d micro-step(s) x --batch %d)\n",
                   f_.resume.c_str(), was->second.c_str(), static_cast<long long>(s_.global_seqs),
                   s_.par.ranks, s_.micro_flag, s_.batch_flag);
    const auto mb = st.extra.find("forward_batch");
    if (mb != st.extra.end() && mb->second != std::to_string(f_.batch))
      std::fprintf(stderr, "train_gpt: note: '%s' was trained with %s sequence(s) per forward pass, "
                   "this run takes %d: its sums differ in the last bits from the uninterrupted "
                   "run's (--batch-invariant takes one whatever --batch; NOTE [batch-invariant])\n",
                   f_.resume.c_str(), mb->second.c_str(), f_.batch);
  }

  // A budget bounds the process's memory (the ledger and the headroom around it); a memory
  // limit counts the ledger alone. The profile times one block for real; with no room for it,
  // the plan comes from FLOP counts.
  nn::CheckpointPlan plan_for(std::int64_t budget, bool bound_process) const {
    try {
      return nn::plan_checkpoint<B>(model_.config, f_.batch, f_.seq, budget, s_.so, {f_.profile, 3},
                                    {bound_process});
    } catch (const OutOfMemory&) {
      return nn::plan_checkpoint<B>(model_.config, f_.batch, f_.seq, budget, s_.so, {false, 1},
                                    {bound_process});
    }
  }

  // budget:SIZE and auto: plan now, for these shapes.
  void plan_budget() {
    const std::int64_t limit = memory_limit<B>();
    const std::int64_t budget = nn::budget_of<B>(model_.config.checkpoint);
    const auto cp = plan_for(budget, !(limit > 0 && budget == limit));
    model_.config.checkpoint = cp.strategy;
    if (!f_.json && lead_)
      std::printf("checkpoint %s: %s (%.2f s to plan)\n%s", model_.config.checkpoint.str().c_str(),
                  cp.summary().c_str(), cp.plan_s, cp.table().c_str());
  }

  void print_header() const {
    if (f_.json || !lead_) return;
    const auto& c = model_.config;
    std::printf("%s, seq %d, batch %d: %lld parameters; checkpoint %s; %s%s\n",
                Family::describe(c).c_str(), f_.seq, s_.batch_flag,
                static_cast<long long>(model_.num_parameters()), c.checkpoint.str().c_str(),
                c.precision == DType::bf16 ? "bf16 activations; " : "", B::describe().c_str());
    if (s_.par.micro_batches() > 1)
      std::printf("data parallel: %d rank(s) x %d micro-step(s) x %d sequences = %lld sequences per "
                  "step; gradients summed in fixed order%s\n", s_.par.ranks, s_.micro_flag,
                  s_.batch_flag, static_cast<long long>(s_.global_seqs),
                  f_.batch_invariant ? "; batch-invariant: one sequence per micro-step" : "");
    if (val_)
      std::printf("validation: %lld batch(es) of %d x %d tokens from %s, after %s\n",
                  static_cast<long long>(val_->batches()), s_.batch_flag, f_.seq, f_.val_data.c_str(),
                  f_.val_every > 0 ? ("every " + std::to_string(f_.val_every) + " steps and the last").c_str()
                                   : "the last step");
  }

  // ---- the loop

  void run_step(int step) {
    reset_peak_memory<B>();
    const float lr = schedule_.at(step);  // from the update's index: resumed runs included
    if (use_adamw_) use_adamw_->options().lr = lr;
    if (use_sgd_) use_sgd_->options().lr = lr;
    if (sharded_) sharded_->options().lr = lr;
    const auto t0 = std::chrono::steady_clock::now();
    batches_.next(x_, y_);
    std::string replanned;
    const float loss = dp_ ? parallel_step(step) : plain_step(step, replanned);
    stop_.agree();
    done_ = step + 1;
    check_loss(loss);
    train::StepReport r;
    r.step = done_;
    r.steps = f_.steps;
    r.loss = loss;
    r.lr = lr;
    r.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.tokens_per_s = static_cast<double>(s_.global_seqs) * f_.seq / r.step_s;  // all ranks together
    total_s_ += r.step_s;
    const MemoryStats mem = memory_stats<B>();  // the step's, before an evaluation
    r.peak_bytes = mem.peak_total;
    r.peak_saved_bytes = mem.peak_of(Category::activations);
    r.extra_json = comm_fields(mem);
    if (!replanned.empty()) r.replanned = model_.config.checkpoint.str() + ": " + replanned;
    if (loop_.evaluates_after(done_)) r.val_loss = evaluate();
    if (lead_) progress_.print(r, total_s_ / (done_ - start_) * (f_.steps - done_));
    if (loop_.snapshots_after(done_)) write_snapshot(f_.snapshot_path);
  }

  // One process, one micro-step: the plain step, re-planned when it runs out of memory under
  // --memory-limit (NOTE [re-plan on out of memory] in remat/train/step.hpp).
  float plain_step(int step, std::string& replanned) {
    return train::step_with_replanning(tape_, params_, [&] {
      tape_.set_seed(dist::stream_seed(f_.seed, step, 0));  // NOTE [data parallel trainer]
      tape_.set_rng_offset(0);
      const auto idx = tape_.tokens({f_.batch, f_.seq}, x_), tgt = tape_.tokens({f_.batch, f_.seq}, y_);
      const auto loss = use_adamw_ ? nn::train_lm_step(model_, *use_adamw_, idx, tgt, f_.grad_clip)
                                   : nn::train_lm_step(model_, *use_sgd_, idx, tgt, f_.grad_clip);
      return loss.item();
    }, [&](const OutOfMemory& e) {
      const std::int64_t limit = memory_limit<B>();
      if (limit <= 0) return false;
      const auto cp = plan_for(limit, false);  // an Error names the smallest feasible budget
      model_.config.checkpoint = cp.strategy;
      replanned = cp.summary();
      if (!f_.json)
        std::printf("%sstep %d ran out of memory (%s); re-planned for the limit %s: %s\n%s",
                    progress_.break_line(), step + 1, e.what(), format_bytes(limit).c_str(),
                    replanned.c_str(), cp.table().c_str());
      return true;
    });
  }

  // NOTE [data parallel trainer]: this rank's micro-steps, their gradients summed over ranks by
  // DataParallel; the step's loss is the mean of every micro-batch's, summed in global order.
  float parallel_step(int step) {
    const std::int64_t n = static_cast<std::int64_t>(f_.batch) * f_.seq;
    const auto micro_batch = [&](std::int64_t g) {
      const std::vector<std::int32_t> xs(x_.begin() + g * n, x_.begin() + (g + 1) * n);
      const std::vector<std::int32_t> ys(y_.begin() + g * n, y_.begin() + (g + 1) * n);
      return model_.loss(tape_.tokens({f_.batch, f_.seq}, xs), tape_.tokens({f_.batch, f_.seq}, ys));
    };
    const auto update = [&] {
      if (sharded_)
        sharded_->step();
      else if (use_adamw_)
        use_adamw_->step();
      else
        use_sgd_->step();
    };
    try {
      return train::data_parallel_step(tape_, *dp_, comm_, s_.par, f_.seed, step, f_.grad_clip,
                                       params_, micro_batch, update);
    } catch (const OutOfMemory& e) {  // every rank would have to re-plan alike: not done
      REMAT_CHECK(false, "train_gpt: step ", step + 1, " ran out of memory with ", s_.par.ranks,
                  " rank(s) x ", s_.micro_flag, " micro-step(s) of ", s_.batch_flag, " sequence(s)",
                  f_.batch_invariant ? " (--batch-invariant: one at a time)" : "", ": ", e.what(),
                  " (re-planning runs in one process with one micro-step only; pass a smaller "
                  "--batch, with more micro-steps, or a --checkpoint plan that fits)");
      return 0.0f;
    }
  }

  // NOTE [diverged run] (remat/train/snapshot.hpp): stop here; nothing of this step is written.
  void check_loss(float loss) {
    if (std::isfinite(loss)) return;
    progress_.finish();
    REMAT_CHECK(false, "train_gpt: the loss of step ", done_, " is ", loss, ": the run diverged (is ",
                flag_value(app_, "--lr", f_.lr), " too high? --grad-clip bounds each update); "
                "nothing after step ", done_ - 1, " is written", snapshot_.last_good());
  }

  // The last micro-step's reduction (NOTE [data parallel] 4), for the JSON line.
  std::string comm_fields(const MemoryStats& mem) const {
    if (!dp_) return "";
    const auto& rs = dp_->stats();
    char b[256];
    std::snprintf(b, sizeof b, ",\"ranks\":%d,\"micro_steps\":%d,\"buckets\":%d,"
                  "\"buckets_in_backward\":%d,\"comm_exposed_s\":%.6f,\"comm_pack_s\":%.6f,"
                  "\"optimizer_state_bytes\":%lld",
                  s_.par.ranks, s_.micro_flag, rs.buckets, rs.launched_in_backward, rs.exposed_s,
                  rs.pack_s, static_cast<long long>(mem.live_of(Category::optimizer_state)));
    return b;
  }

  // ---- validation (NOTE [validation loss] in remat/train/evaluate.hpp)

  // After every --val-every steps and the last (loop_.evaluates_after), every rank, its share
  // of the batches. A batch runs in forward passes of the training's
  // micro-batch size (one sequence with --batch-invariant, whose bits then do not depend on
  // --batch either); its loss is the mean of theirs.
  double evaluate() {
    const std::int64_t rows = f_.batch, parts = val_->batch() / rows, n = rows * f_.seq;
    return train::evaluate(comm_, *val_, [&](const std::vector<std::int32_t>& x,
                                             const std::vector<std::int32_t>& y) {
      double sum = 0.0;
      for (std::int64_t p = 0; p < parts; ++p) {
        const std::vector<std::int32_t> xs(x.begin() + p * n, x.begin() + (p + 1) * n);
        const std::vector<std::int32_t> ys(y.begin() + p * n, y.begin() + (p + 1) * n);
        sum += Family::eval_loss(model_, tape_.tokens({rows, f_.seq}, xs), tape_.tokens({rows, f_.seq}, ys))
                   .item();
      }
      return sum / static_cast<double>(parts);
    });
  }

  // ---- writing what was trained

  // NOTE [diverged run]: the weights must be finite before `what` is written.
  void check_finite(const char* what) const {
    const std::string bad = train::nonfinite_parameter<B>(model_.named_parameters());
    REMAT_CHECK(bad.empty(), "train_gpt: the weights are no longer finite after step ", done_,
                " (parameter '", bad, "' holds a NaN or an infinity): the run diverged (is ",
                flag_value(app_, "--lr", f_.lr), " too high? --grad-clip bounds each update); ", what,
                " was not written", snapshot_.last_good());
  }

  // Every rank calls it (ZeRO-1 gathers the sharded moments from all of them); rank 0 writes.
  void write_snapshot(const std::string& path) {
    check_finite("the snapshot");
    std::unique_ptr<optim::AdamW<B>> full;  // --zero: the whole optimizer state, gathered
    if (sharded_) {
      full = std::make_unique<optim::AdamW<B>>(params_, sharded_->options());
      sharded_->gather_into(*full);
    }
    if (!lead_) {
      snapshot_.step = done_;
      return;
    }
    io::TrainState st;
    st.step = done_;
    st.data_position = batches_.position();
    st.rng_seed = tape_.seed();
    st.rng_offset = tape_.rng_offset();
    st.extra["checkpoint_strategy"] = model_.config.checkpoint.str();
    st.extra["global_batch"] = std::to_string(s_.global_seqs);
    st.extra["forward_batch"] = std::to_string(f_.batch);  // 1 with --batch-invariant
    std::string why;
    const std::string at = train::write_with_fallback(path, "train_gpt", [&](const std::string& p) {
      io::save_state(p, model_, full ? full.get() : use_adamw_, use_sgd_, st);
    }, why);
    if (!why.empty())
      std::fprintf(stderr, "train_gpt: warning: writing the snapshot of step %d to '%s' failed (%s); "
                   "it is in '%s' instead\n", done_, path.c_str(), why.c_str(), at.c_str());
    snapshot_ = {done_, at};
  }

  // Returns false when the weights went elsewhere than --save (said on stderr).
  bool write_weights() {
    check_finite("--save");
    std::string why;
    const std::string at = train::write_with_fallback(
        f_.save, "train_gpt", [&](const std::string& p) {
          Family::save(p, model_, f_.save_dtype == "bf16" ? DType::bf16 : DType::f32);
        }, why);
    if (why.empty()) {
      if (!f_.json)
        std::printf("saved weights to %s%s\n", f_.save.c_str(), f_.save_dtype == "bf16" ? " (BF16)" : "");
      return true;
    }
    std::fprintf(stderr, "train_gpt: error: saving the weights to '%s' failed (%s); they are in "
                 "'%s' instead\n", f_.save.c_str(), why.c_str(), at.c_str());
    return false;
  }

  // ---- the end

  // NOTE [interrupt]: write everything, say where, exit 128 + the signal. The snapshot of an
  // interrupted run goes to --snapshot-path, or (none given) to the working folder under a name
  // of this process.
  int stopped() {
    const int sig = stop_.signal();
    const char* name = train::stop_signal_name(sig);
    if (done_ == start_) {
      std::fprintf(stderr, "train_gpt: interrupted by %s before the first step: nothing to save; "
                   "exit %d\n", name, 128 + sig);
      return 128 + sig;
    }
    if (snapshot_.step != done_) write_snapshot(snapshot_target_);
    if (!lead_) return 128 + sig;  // rank 0 writes
    const bool saved = f_.save.empty() || write_weights();
    std::fprintf(stderr, "train_gpt: interrupted by %s after step %d of %d: the snapshot is in '%s' "
                 "(continue with the same flags and --resume %s)%s%s; exit %d\n", name, done_, f_.steps,
                 snapshot_.path.c_str(), snapshot_.path.c_str(),
                 f_.save.empty() || !saved ? "" : ", the weights in ",
                 f_.save.empty() || !saved ? "" : f_.save.c_str(), 128 + sig);
    return 128 + sig;
  }

  // The end of the run: a snapshot path keeps the final state too, the weights are saved, and
  // rank 0 samples.
  int finish() {
    if (!f_.snapshot_path.empty() && snapshot_.step != done_ && done_ > start_)
      write_snapshot(f_.snapshot_path);
    if (!lead_) return 0;
    if (!f_.save.empty() && !write_weights()) return 1;
    if (f_.sample > 0) sample();
    const int sig = train::stop_signal();  // a signal during the save or the sampling
    return sig != 0 ? 128 + sig : 0;
  }

  // --sample N from --prompt: text with --tokenizer (ids past the tokenizer's vocabulary, llm.c's
  // padding, are never drawn), bytes when the vocabulary is 256, else token ids.
  void sample() {
    const std::int64_t V = Family::vocab(model_.config);
    train::SampleOptions o;
    o.temperature = f_.temperature;
    o.seed = f_.seed;
    o.context = Family::context(model_.config, f_.seq);
    o.drawable = s_.tok ? std::min(s_.tok->vocab_size(), V) : V;
    const auto last_logits = [&](const std::vector<std::int32_t>& window) {
      const std::int64_t T = static_cast<std::int64_t>(window.size());
      const std::vector<float> logits = Family::logits(model_, tape_.tokens({1, T}, window)).to_vector();
      return std::vector<float>(logits.begin() + (T - 1) * V, logits.begin() + T * V);
    };
    const std::vector<std::int32_t> generated =
        train::generate(last_logits, s_.prompt, f_.sample, o, [] { return train::stop_signal() == 0; });
    std::string out;
    if (s_.tok) {
      // Tokens' bytes may split a UTF-8 character: the text is repaired as GPT-2's decode does
      // (errors="replace"), so the terminal gets valid UTF-8.
      out = text::to_valid_utf8(f_.prompt + s_.tok->decode(generated));
    } else if (V == 256) {
      out = f_.prompt;
      for (auto t : generated) out += static_cast<char>(t);
    } else {
      for (auto t : generated) out += (out.empty() ? "" : " ") + std::to_string(t);
    }
    std::printf("sample: %s\n", out.c_str());
  }

  Setup<Family> s_;
  const Flags& f_;
  const CLI::App& app_;
  dist::Comm& comm_;
  const bool lead_;  // rank 0: prints and writes
  Tape<B> tape_;
  typename Family::template Model<B> model_;
  const std::vector<Tensor<B>> params_;
  std::optional<optim::AdamW<B>> adamw_;
  std::optional<optim::SGD<B>> sgd_;
  optim::AdamW<B>* use_adamw_ = nullptr;
  optim::SGD<B>* use_sgd_ = nullptr;
  data::Batcher batches_;  // one batcher of the whole global batch on every rank
  std::optional<dist::DataParallel<B>> dp_;
  std::optional<dist::ShardedAdamW<B>> sharded_;
  std::optional<train::ValidationSet> val_;
  train::Progress progress_;
  train::StopAgreement stop_;
  const optim::LrSchedule schedule_;
  const train::LoopOptions loop_;  // when to evaluate and write snapshots
  const std::string snapshot_target_;
  std::vector<std::int32_t> x_, y_;  // the step's global batch
  int start_ = 0, done_ = 0;         // the first step, and the steps done, from the run's start
  train::SnapshotLog snapshot_;      // the last snapshot: the one resumed from, then each written
  double total_s_ = 0.0;             // the steps' time, for the ETA
};

/// The whole run of a Family model on backend B: returns the exit code.
template <class B, class Family>
int train_family(Flags f, const CLI::App& app, dist::Comm& comm) {
  Setup<Family> s = prepare<Family>(std::move(f), app, comm);
  if (s.f.estimate) {
    print_estimates<B, Family>(s.model.config, s.f, s.so);
    return 0;
  }
  prepare_run(s, app);
  if (!s.f.memory_limit.empty())
    set_memory_limit<B>(parse_bytes(s.f.memory_limit, "train_gpt: --memory-limit"));
  Trainer<B, Family> trainer(std::move(s), app, comm);
  return trainer.run();
}

/// The whole run on backend B, after the flags are parsed: the flags' checks, then the model
/// family's run (NOTE [model families] in family.hpp). Returns the exit code.
template <class B>
int train(Flags f, const CLI::App& app, dist::Comm& comm) {
  validate(f, app);
  const std::string family = family_of(f);
  check_family_flags(family, f, app);
  if (family == "llama") return train_family<B, LlamaFamily>(std::move(f), app, comm);
  return train_family<B, GptFamily>(std::move(f), app, comm);
}

}  // namespace train_gpt
