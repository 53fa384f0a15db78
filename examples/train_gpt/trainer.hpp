#pragma once
// SPDX-License-Identifier: MIT
// train_gpt's trainer for any backend: train<B>(flags) is the whole run after the flags are
// parsed (main.cpp). The CPU instantiates it in main.cpp; the CUDA backend in cuda.cu (nvcc),
// or in cuda_emulated.cpp against the CUDA emulation (REMAT_CUDA_EMULATION, tests only).
// Nothing here includes a backend: a translation unit brings the one it trains on.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
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
#include <remat/text/gpt2_tokenizer.hpp>

namespace train_gpt {

using namespace remat;


struct Flags {
  int layers = 4, d = 128, heads = 0, seq = 128, vocab = 256, batch = 8, steps = 50, threads = 2;
  float lr = 3e-4f, grad_clip = 1.0f, momentum = 0.0f, weight_decay = 0.0f, dropout = 0.0f;
  std::string lr_schedule = "constant";  // or cosine: --warmup steps, then decay to --min-lr
  int warmup = 0;
  float min_lr = 0.0f;
  float temperature = 1.0f, bucket_mib = 25.0f;
  std::uint64_t seed = 1337;
  std::string optimizer = "adamw", checkpoint = "none", data, init_from, save, snapshot_path,
              resume, prompt = "The ", device = "cpu", memory_limit, tokenizer;
  int snapshot_every = 0, sample = 0, grad_accum = 1, global_batch = 0, vocab_multiple = 1;
  bool json = false, estimate = false, profile = true, zero = false, batch_invariant = false;
  bool decay_all = false;  // --weight-decay on every parameter, not only on matrices
};

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

inline std::string fmt_duration(double s) {
  const int t = static_cast<int>(s + 0.5);
  char b[32];
  std::snprintf(b, sizeof b, "%02d:%02d:%02d", t / 3600, (t / 60) % 60, t % 60);
  return b;
}

// ---- flags

// A flag and its value as messages show it: "--seq 128", or "--seq 128 (the default)" when the
// user did not pass it, so a default is never reported as if it had been typed.
template <class T>
inline std::string flag_value(const CLI::App& app, const char* flag, const T& value) {
  std::ostringstream os;
  os << flag << " " << value << (app.count(flag) ? "" : " (the default)");
  return os.str();
}

// Every flag in its own words, before anything is read or trained: a value that would silently
// do something else (a NaN learning rate, clipping turned off by -1, a negative count that is
// ignored) is an error naming the flag and what it expects.
inline void validate(const Flags& f, const CLI::App& app) {
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
  REMAT_CHECK(!f.zero || f.optimizer == "adamw", "train_gpt: --zero shards AdamW's state "
              "(expected --optimizer adamw with --zero)");
  REMAT_CHECK(app.count("--grad-accum") == 0 || app.count("--global-batch") == 0, "train_gpt: "
              "--grad-accum and --global-batch both set the micro-steps (expected one of them: "
              "--global-batch G makes G / (ranks x --batch) micro-steps)");
}

// NOTE [data parallel trainer]: under mpirun (or srun) every rank runs this program; --batch is
// one micro-batch of one rank, and a step takes `ranks x micro-steps` of them: micro-batch g of
// the step (g = rank x micro-steps + k, so a rank's micro-batches are consecutive) is the g-th
// --batch sequences of the step's global batch, read as one process would read the whole of it,
// and draws its dropout from stream_seed(seed, step, g). So the data, the masks and (with the
// fixed-order sums, NOTE [reduction order]) every bit of the training depend on the global
// batch and the micro-batch, not on how they are split among ranks and micro-steps. Rank 0
// prints and writes; the ranks agree after each step whether a signal asks them to stop.
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
// copies (plus the buckets' during the sum); activations are those of one sequence.
struct Parallel {
  dist::Comm* comm = nullptr;
  int rank = 0, ranks = 1, micro_steps = 1;
  std::int64_t micro_batches() const { return static_cast<std::int64_t>(ranks) * micro_steps; }
};

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

// ---- paths

// The folder of a path: "." for a bare file name.
inline std::string folder_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// An input path that is a directory gets a message saying what is expected instead (a reader
// would say "not a regular file"). A missing path is left to the reader, which names it.
inline void check_input_path(const char* flag, const std::string& path, const char* expected) {
  struct ::stat sb {};
  if (path == "-" || ::stat(path.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) return;
  std::string hint;
  const std::string inside = (path.back() == '/' ? path : path + "/") + "model.safetensors";
  if (std::string(flag) == "--init-from" && ::stat(inside.c_str(), &sb) == 0)
    hint = "; did you mean '" + inside + "'?";
  REMAT_CHECK(false, "train_gpt: ", flag, " '", path, "' is a directory (expected ", expected, ")",
              hint);
}

// NOTE [output paths]: every path the run will write is checked before the first step, so a
// run never trains for hours to fail at its save: the path is not a directory, its folder
// exists, and a file can be created in it. The last is tried for real (a file created and
// removed, named as io::AtomicFile names its temporaries): permission bits say nothing of
// read-only mounts, or of root.
inline void check_output_path(const char* flag, const std::string& path) {
  REMAT_CHECK(!path.empty(), "train_gpt: ", flag, " is empty (expected a file path)");
  struct ::stat sb {};
  REMAT_CHECK(::stat(path.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode), "train_gpt: ", flag, " '",
              path, "' is a directory (expected a file path, e.g. '",
              path.back() == '/' ? path : path + "/", "model.safetensors'); nothing was trained");
  const std::string dir = folder_of(path);
  if (::stat(dir.c_str(), &sb) != 0) {
    const int e = errno;
    REMAT_CHECK(false, "train_gpt: ", flag, " '", path, "': the folder '", dir, "' ",
                e == ENOENT ? "does not exist" : std::strerror(e),
                " (expected an existing folder: create it first); nothing was trained");
  }
  REMAT_CHECK(S_ISDIR(sb.st_mode), "train_gpt: ", flag, " '", path, "': '", dir,
              "' is not a folder (expected an existing folder); nothing was trained");
  const std::string probe = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0 && errno != EEXIST) {
    const int e = errno;
    REMAT_CHECK(false, "train_gpt: ", flag, " '", path, "': cannot create a file in the folder '",
                dir, "': ", std::strerror(e), " (expected a writable folder); nothing was trained");
  }
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
  }
}

// Where a file goes when its own path fails at write time (the folder went away, the disk is
// full, the path became a directory): beside it, then in the temporary folder.
inline std::vector<std::string> fallback_paths(const std::string& path) {
  const std::string pid = std::to_string(::getpid());
  const char* tmp = std::getenv("TMPDIR");
  const std::string tmpdir = tmp && *tmp ? tmp : "/tmp";
  const std::size_t slash = path.rfind('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return {path + ".rescued-" + pid, tmpdir + "/train_gpt-" + pid + "-" + base};
}

// Writes with `write(path)`; if that fails, to the fallbacks in turn. Returns the path written
// and, in `why`, the failure at `path` (empty when `path` itself was written). Throws only when
// every place failed, naming each.
inline std::string write_somewhere(const std::string& path, const std::function<void(const std::string&)>& write,
                            std::string& why) {
  why.clear();
  std::string errors;
  std::vector<std::string> tries{path};
  for (const std::string& p : fallback_paths(path)) tries.push_back(p);
  for (const std::string& p : tries) {
    try {
      write(p);
      return p;
    } catch (const std::exception& e) {
      if (why.empty()) why = e.what();
      errors += std::string(errors.empty() ? "" : "; ") + "'" + p + "': " + e.what();
    }
  }
  throw Error(detail::cat("train_gpt: could not write anywhere: ", errors));
}

// ---- interrupts

// NOTE [interrupt]: the first SIGINT or SIGTERM only records the signal (a sig_atomic_t, the
// one thing a handler may safely touch) and says, with write(), that the run will stop. The
// training loop sees it between steps: the current step finishes, the snapshot and the weights
// are written, and the process exits 128 + the signal (130 for SIGINT, 143 for SIGTERM). A
// second signal aborts at once: the handler removes the temporaries this process may be
// writing (their names are fixed in advance: "<target>.tmp.<pid>", io/atomic_file.hpp) with
// unlink(), which is async-signal-safe, and dies of the signal by its default action. The
// targets themselves are only ever replaced by rename(), so they stay whole.
inline volatile std::sig_atomic_t g_signal = 0;
inline constexpr int kMaxTemporaries = 8;
inline char g_temporaries[kMaxTemporaries][4096] = {};

inline void on_signal(int sig) {
  if (g_signal == 0) {
    g_signal = sig;
    static const char msg[] = "\ntrain_gpt: stopping after this step: the snapshot and the weights "
                              "will be written (signal again to abort at once)\n";
    const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
    return;
  }
  for (auto& p : g_temporaries)
    if (p[0]) ::unlink(p);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// Registers the temporaries of `targets` (and of their fallbacks) for the handler, then
// installs it for SIGINT and SIGTERM. A signal ignored when the process started stays ignored,
// as shells expect (a background job of a script must not stop on the terminal's Ctrl-C).
inline void install_signal_handlers(const std::vector<std::string>& targets) {
  int k = 0;
  for (const std::string& t : targets) {
    if (t.empty()) continue;
    std::vector<std::string> all{t};
    for (const std::string& p : fallback_paths(t)) all.push_back(p);
    for (const std::string& p : all) {
      const std::string tmp = p + ".tmp." + std::to_string(::getpid());
      if (k < kMaxTemporaries && tmp.size() < sizeof g_temporaries[0])
        std::memcpy(g_temporaries[k++], tmp.c_str(), tmp.size() + 1);
    }
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (const int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
}

// ---- divergence

// NOTE [diverged run]: a step whose loss is not finite stops the run with an error naming the
// step, and nothing is written after it: the last snapshot (written from finite weights) stays
// as it was. A step can also make the weights non-finite while its loss (computed before the
// update) was finite, so every snapshot and save first checks the weights.
// The first parameter with a NaN or an infinity, or "" when all are finite.
// Read through a host buffer of 1 Mi floats, so a device's weights are checked too and no
// backend holds a second copy of a whole tensor for it.
template <class B>
std::string nonfinite_parameter(const nn::GPT<B>& model) {
  std::vector<float> buf(std::size_t{1} << 20);
  for (const auto& [name, t] : model.named_parameters()) {
    const float* p = t.template data<float>();
    float acc = 0.0f;  // x * 0 is 0 for a finite x, NaN for an infinity or NaN: one sum tells
    for (std::int64_t at = 0; at < t.numel(); at += static_cast<std::int64_t>(buf.size())) {
      const std::int64_t n = std::min<std::int64_t>(t.numel() - at, static_cast<std::int64_t>(buf.size()));
      B::copy_to_host(buf.data(), p + at, static_cast<std::size_t>(n) * sizeof(float));
      for (std::int64_t i = 0; i < n; ++i) acc += buf[static_cast<std::size_t>(i)] * 0.0f;
    }
    if (acc != 0.0f) return name;
  }
  return "";
}

/// The whole run on backend B, after the flags are parsed: returns the exit code.
template <class B>
int train(Flags f, const CLI::App& app, dist::Comm& comm) {
  validate(f, app);
  Parallel par;
  par.comm = &comm;
  par.rank = comm.rank();
  par.ranks = comm.size();
  par.micro_steps = micro_steps(f, app, par.ranks);
  const int batch_flag = f.batch, micro_flag = par.micro_steps;  // as given, for messages
  if (f.batch_invariant && f.batch > 1) {  // NOTE [batch-invariant]: one sequence per micro-step
    REMAT_CHECK(static_cast<std::int64_t>(par.micro_steps) * f.batch <= std::numeric_limits<int>::max(),
                "train_gpt: --batch-invariant makes ", par.micro_steps, " x ", f.batch,
                " micro-steps per rank, more than ", std::numeric_limits<int>::max(),
                " (expected a smaller --batch or --global-batch)");
    par.micro_steps *= f.batch;
    f.batch = 1;
  }
  const bool lead = par.rank == 0;  // prints and writes
  REMAT_CHECK(par.ranks == 1 || f.data != "-", "train_gpt: --data - reads standard input, which "
              "reaches rank 0 only under mpirun (expected a file with ", par.ranks, " ranks)");
  if (par.ranks > 1) {  // every rank must run the same training: compare the flags' hash
    std::string flags;
    for (const auto* o : app.get_options())
      for (const std::string& v : o->results()) flags += o->get_name() + "=" + v + ";";
    const auto all = comm.all_gather_u64({detail::hash_bytes(flags)});
    for (int r = 1; r < par.ranks; ++r)
      REMAT_CHECK(all[static_cast<std::size_t>(r)] == all[0], "train_gpt: rank ", r, " was started "
                  "with other flags than rank 0 (expected the same command on every rank)");
  }
  if (!f.estimate && lead) {
    if (!f.save.empty()) check_output_path("--save", f.save);
    if (!f.snapshot_path.empty()) check_output_path("--snapshot-path", f.snapshot_path);
  }
  check_input_path("--data", f.data, "a text file, an llm.c .bin file, or - for standard input");
  check_input_path("--init-from", f.init_from, "a GPT-2 weights file in safetensors format");
  check_input_path("--resume", f.resume, "a snapshot file written by --snapshot-path");
  // ---- tokenizer: GPT-2's byte-level BPE from a directory (include/remat/text/)
  std::optional<text::Gpt2Tokenizer> tok;
  if (!f.tokenizer.empty()) {
    // a directory, or a Hugging Face tokenizer.json given as a file
    struct ::stat sb {};
    const bool is_file = ::stat(f.tokenizer.c_str(), &sb) == 0 && S_ISREG(sb.st_mode);
    tok.emplace(is_file ? text::Gpt2Tokenizer::from_tokenizer_json(f.tokenizer)
                        : text::Gpt2Tokenizer::from_directory(f.tokenizer));
    REMAT_CHECK(tok->eot() >= 0, "train_gpt: the tokenizer in '", f.tokenizer, "' has no <|endoftext|> "
                "(expected GPT-2's vocabulary, where it is the document separator and the start of "
                "an empty prompt)");
  }
  // ---- data: text is bytes, or GPT-2 ids with --tokenizer (one document, starting with
  // <|endoftext|> as llm.c's data scripts and examples/tokenize write it); .bin is ids already.
  std::vector<std::int32_t> tokens;
  const bool is_bin = f.data.size() > 4 && f.data.compare(f.data.size() - 4, 4, ".bin") == 0;
  if (is_bin) {
    tokens = data::read_llmc_bin(f.data);
  } else {
    std::string text;
    if (f.data.empty()) {
      text = builtin_text();
    } else {
      if (f.data == "-" && ::isatty(STDIN_FILENO))  // text from standard input, as text tools read it
        std::fprintf(stderr, "train_gpt: reading the text from the terminal (end it with Ctrl-D)\n");
      const std::vector<char> b = io::read_file(f.data == "-" ? "/dev/stdin" : f.data, "train_gpt: --data");
      text.assign(b.begin(), b.end());
    }
    if (tok) {
      const auto t0 = std::chrono::steady_clock::now();
      tokens = tok->encode(text);
      tokens.insert(tokens.begin(), tok->eot());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "train_gpt: %s: %zu bytes -> %zu GPT-2 tokens (with <|endoftext|> first) in %.0f ms\n",
                   f.data.empty() ? "built-in text" : f.data == "-" ? "standard input" : f.data.c_str(),
                   text.size(), tokens.size(), 1e3 * s);
    } else {
      tokens = data::bytes_as_tokens(text);
    }
  }

  // ---- model: from the flags, or from a weights file (its shapes decide, flags must agree)
  nn::GPTConfig c;
  std::map<std::string, io::HostTensor> weights;
  if (!f.init_from.empty()) {
    io::Gpt2Weights file = io::read_gpt2(f.init_from);
    // NOTE [GPT-2 head count] (io/gpt2.hpp): the head count changes no shape, so a file that
    // records it decides, --heads must agree with it, and an assumed one is said first.
    REMAT_CHECK(f.heads == 0 || file.n_head == 0 || f.heads == file.n_head, "train_gpt: --heads ",
                f.heads, " does not fit '", f.init_from, "': ", file.n_head_source, " says ",
                file.n_head, " heads (leave the flag out to take it from the file)");
    const std::int64_t heads = f.heads > 0 ? f.heads : file.n_head;
    weights = std::move(file.tensors);
    c = io::gpt2_config(weights, f.init_from, heads);
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
  } else {
    // A new model with a tokenizer takes its vocabulary size unless --vocab pads it.
    if (tok && app.count("--vocab") == 0) f.vocab = static_cast<int>(tok->vocab_size());
    REMAT_CHECK(!tok || f.vocab >= tok->vocab_size(), "train_gpt: --vocab ", f.vocab, " is smaller "
                "than the ", tok->vocab_size(), " tokens of the tokenizer in '", f.tokenizer,
                "' (expected at least that many; leave --vocab out to take it from the tokenizer)");
    c.vocab_size = f.vocab;
    c.block_size = f.seq;
    c.n_layer = f.layers;
    c.n_embd = f.d;
    c.n_head = f.heads > 0 ? f.heads : std::max(1, f.d / 64);
  }
  c.vocab_multiple = f.vocab_multiple;  // internal: files keep c.vocab_size rows
  c.dropout = f.dropout;
  c.seed = f.seed;
  c.checkpoint = nn::CheckpointStrategy::parse(f.checkpoint);
  StepOptions so;
  so.optimizer = f.optimizer;
  so.momentum = f.optimizer == "sgd" ? f.momentum : 0.0f;
  so.grad_clip = f.grad_clip;
  if (f.estimate) {
    print_estimates<B>(c, f, so);
    return 0;
  }
  // The prompt, checked now rather than after training (see the sampling at the end).
  std::vector<std::int32_t> prompt;
  if (tok)
    prompt = tok->encode(f.prompt);
  else if (c.vocab_size == 256)
    prompt = data::bytes_as_tokens(f.prompt);
  else if (app.count("--prompt"))
    prompt = prompt_ids(f.prompt, c.vocab_size);
  if (prompt.empty()) prompt.push_back(tok ? tok->eot() : 0);
  if (!f.memory_limit.empty())
    set_memory_limit<B>(parse_bytes(f.memory_limit, "train_gpt: --memory-limit"));
  std::int32_t hi = 0;
  for (auto t : tokens) hi = std::max(hi, t);
  REMAT_CHECK(hi < c.vocab_size, "train_gpt: the data has token id ", hi, " but the vocabulary has ",
              c.vocab_size, " entries (expected ids < vocab; raw text needs --vocab 256 or more)");
  const std::int64_t global_seqs = par.micro_batches() * f.batch;  // sequences per step
  REMAT_CHECK(static_cast<std::int64_t>(tokens.size()) >= global_seqs * f.seq + 1,
              "train_gpt: the data has ", tokens.size(), " tokens, too few for one batch of ",
              flag_value(app, "--batch", batch_flag), " x ", flag_value(app, "--seq", f.seq),
              par.micro_batches() == 1 ? std::string()
                                       : " x " + std::to_string(par.ranks) + " rank(s) x " +
                                             std::to_string(micro_flag) + " micro-step(s)",
              " (expected at least ", global_seqs * f.seq + 1,
              " tokens; pass a smaller --batch or --seq)");

  Tape<B> tape(f.seed);
  nn::GPT<B> model(tape, c);
  if (!weights.empty()) io::load_gpt2(weights, model, f.init_from);
  const auto params = model.parameters();
  // Only the chosen optimizer is built, so only its options are checked (and blamed).
  std::optional<optim::AdamW<B>> adamw;
  std::optional<optim::SGD<B>> sgd;
  // weight decay on the matrices (rank >= 2: linear weights, embeddings) unless --decay-all,
  // as GPT-2's recipes in nanoGPT and llm.c do
  const optim::DecayOn decay_on = f.decay_all ? optim::DecayOn::all : optim::DecayOn::matrices;
  if (f.optimizer == "adamw")
    adamw.emplace(params, optim::AdamWOptions{f.lr, 0.9f, 0.999f, 1e-8f, f.weight_decay, decay_on});
  else
    sgd.emplace(params, optim::SGDOptions{f.lr, f.momentum, f.weight_decay, false, decay_on});
  optim::AdamW<B>* use_adamw = adamw ? &*adamw : nullptr;
  optim::SGD<B>* use_sgd = sgd ? &*sgd : nullptr;
  // One batcher of the whole global batch on every rank (NOTE [data parallel trainer]).
  data::Batcher batches(std::move(tokens), global_seqs, f.seq);
  // Several ranks or micro-steps: gradients summed by DataParallel (fixed order; one process
  // with one micro-step runs the plain step, which gives the same bits).
  // --zero: AdamW's moments sharded over the ranks (ZeRO-1, NOTE [data parallel] 8); the full
  // AdamW object then only carries a snapshot's state in and out.
  std::optional<dist::DataParallel<B>> dp;
  std::optional<dist::ShardedAdamW<B>> sharded;
  if (par.micro_batches() > 1 || f.zero) {
    dist::DataParallelOptions o;
    o.bucket_bytes = static_cast<std::size_t>(static_cast<double>(f.bucket_mib) * 1048576.0);
    o.first_bucket_bytes = std::min(o.first_bucket_bytes, o.bucket_bytes);
    o.shard_optimizer = f.zero;
    dp.emplace(tape, model.named_parameters(), comm, o);
    if (f.zero) sharded.emplace(*dp, adamw->options());
  }

  int start = 0;
  if (!f.resume.empty()) {
    // load_state checks the snapshot's model config against the one these flags made (--layers,
    // --d, --heads, --vocab, --seq, --dropout: n_layer, n_embd, n_head, vocab_size, block_size,
    // dropout in its errors) and parses every field strictly.
    const io::TrainState st = io::load_state(f.resume, model, use_adamw, use_sgd);
    if (sharded) {  // this rank's chunks at the first step; the full state is dropped then
      sharded->resume_from(std::make_shared<optim::AdamW<B>>(std::move(*adamw)));
      adamw.reset();
      use_adamw = nullptr;
    }
    REMAT_CHECK(st.step <= std::numeric_limits<int>::max(), "train_gpt: '",
                f.resume, "' is at step ", st.step, ", past what --steps can count (expected at "
                "most ", std::numeric_limits<int>::max(), ")");
    REMAT_CHECK(st.step <= f.steps, "train_gpt: ", flag_value(app, "--steps", f.steps),
                " is below step ", st.step, " of the snapshot '", f.resume, "' (--steps is the "
                "total a resumed run continues up to: expected --steps >= ", st.step, ")");
    REMAT_CHECK(st.data_position < static_cast<std::int64_t>(batches.tokens().size()),
                "train_gpt: '", f.resume, "' has data position ", st.data_position, " but the data has ",
                batches.tokens().size(), " tokens (resume with the data the snapshot was trained on)");
    start = static_cast<int>(st.step);
    batches.set_position(st.data_position);
    tape.set_seed(st.rng_seed);
    tape.set_rng_offset(st.rng_offset);
    const auto was = st.extra.find("global_batch");
    if (lead && was != st.extra.end() && was->second != std::to_string(global_seqs))
      std::fprintf(stderr, "train_gpt: note: '%s' was trained with a global batch of %s sequences, "
                   "this run takes %lld per step (%d rank(s) x %d micro-step(s) x --batch %d)\n",
                   f.resume.c_str(), was->second.c_str(), static_cast<long long>(global_seqs),
                   par.ranks, micro_flag, batch_flag);
    const auto mb = st.extra.find("forward_batch");
    if (lead && mb != st.extra.end() && mb->second != std::to_string(f.batch))
      std::fprintf(stderr, "train_gpt: note: '%s' was trained with %s sequence(s) per forward pass, "
                   "this run takes %d: its sums differ in the last bits from the uninterrupted "
                   "run's (--batch-invariant takes one whatever --batch; NOTE [batch-invariant])\n",
                   f.resume.c_str(), mb->second.c_str(), f.batch);
  }
  // budget:SIZE and auto: plan now, for these shapes (the profile times one block for real).
  const nn::ProfileOptions profile{f.profile, 3};
  // A budget bounds the process's memory (the ledger and the headroom around it); a memory limit
  // counts the ledger alone.
  auto plan_for = [&](std::int64_t budget, bool bound_process) {
    try {
      return nn::plan_checkpoint<B>(c, f.batch, f.seq, budget, so, profile, {bound_process});
    } catch (const OutOfMemory&) {  // no room to time a block: plan from FLOP counts
      return nn::plan_checkpoint<B>(c, f.batch, f.seq, budget, so, {false, 1}, {bound_process});
    }
  };
  if (c.checkpoint.planned()) {
    const std::int64_t limit = memory_limit<B>();
    const std::int64_t budget = nn::budget_of<B>(c.checkpoint);
    const auto cp = plan_for(budget, !(limit > 0 && budget == limit));
    c.checkpoint = model.config.checkpoint = cp.strategy;
    if (!f.json && lead)
      std::printf("checkpoint %s: %s (%.2f s to plan)\n%s", c.checkpoint.str().c_str(),
                  cp.summary().c_str(), cp.plan_s, cp.table().c_str());
  }
  const bool tty = !f.json && lead && ::isatty(STDOUT_FILENO);
  if (!f.json && lead)
    std::printf("GPT %lld layers, d %lld, %lld heads, vocab %lld, seq %d, batch %d: %lld parameters; "
                "checkpoint %s; %s\n",
                static_cast<long long>(c.n_layer), static_cast<long long>(c.n_embd),
                static_cast<long long>(c.n_head), static_cast<long long>(c.vocab_size), f.seq,
                batch_flag, static_cast<long long>(model.num_parameters()), c.checkpoint.str().c_str(),
                B::describe().c_str());
  if (!f.json && lead && par.micro_batches() > 1)
    std::printf("data parallel: %d rank(s) x %d micro-step(s) x %d sequences = %lld sequences per "
                "step; gradients summed in fixed order%s\n", par.ranks, micro_flag, batch_flag,
                static_cast<long long>(global_seqs),
                f.batch_invariant ? "; batch-invariant: one sequence per micro-step" : "");

  // ---- writing what was trained
  // The snapshot of an interrupted run goes to --snapshot-path, or (none given) beside the
  // working folder's other files under a name of this process.
  const std::string snapshot_target = !f.snapshot_path.empty()
                                          ? f.snapshot_path
                                          : "train_gpt-" + std::to_string(::getpid()) + ".state";
  int done = start;               // steps done, counted from the start of training
  // The last snapshot: the one resumed from, then each one this run writes.
  int snapshot_step = f.resume.empty() ? -1 : start;
  std::string snapshot_written = f.resume;
  auto check_finite = [&](const char* what) {
    const std::string bad = nonfinite_parameter(model);
    REMAT_CHECK(bad.empty(), "train_gpt: the weights are no longer finite after step ", done,
                " (parameter '", bad, "' holds a NaN or an infinity): the run diverged (is ",
                flag_value(app, "--lr", f.lr), " too high? --grad-clip bounds each update); ", what,
                " was not written",
                snapshot_written.empty() ? std::string("")
                                         : "; the last good snapshot is '" + snapshot_written +
                                               "' (step " + std::to_string(snapshot_step) + ")");
  };
  // Every rank calls it (ZeRO-1 gathers the sharded moments from all of them); rank 0 writes.
  auto write_snapshot = [&](const std::string& path) {
    check_finite("the snapshot");
    std::unique_ptr<optim::AdamW<B>> full;  // --zero: the whole optimizer state, gathered
    if (sharded) {
      full = std::make_unique<optim::AdamW<B>>(params, sharded->options());
      sharded->gather_into(*full);
    }
    if (!lead) {
      snapshot_step = done;
      return;
    }
    io::TrainState st;
    st.step = done;
    st.data_position = batches.position();
    st.rng_seed = tape.seed();
    st.rng_offset = tape.rng_offset();
    st.extra["checkpoint_strategy"] = c.checkpoint.str();
    st.extra["global_batch"] = std::to_string(global_seqs);
    st.extra["forward_batch"] = std::to_string(f.batch);  // 1 with --batch-invariant
    std::string why;
    const std::string at = write_somewhere(path, [&](const std::string& p) {
      io::save_state(p, model, full ? full.get() : use_adamw, use_sgd, st);
    }, why);
    if (!why.empty())
      std::fprintf(stderr, "train_gpt: warning: writing the snapshot of step %d to '%s' failed (%s); "
                   "it is in '%s' instead\n", done, path.c_str(), why.c_str(), at.c_str());
    snapshot_step = done;
    snapshot_written = at;
  };
  // Returns false when the weights went elsewhere than --save (said on stderr).
  auto write_weights = [&]() {
    check_finite("--save");
    std::string why;
    const std::string at = write_somewhere(f.save, [&](const std::string& p) { io::save_gpt2(p, model); }, why);
    if (why.empty()) {
      if (!f.json) std::printf("saved weights to %s\n", f.save.c_str());
      return true;
    }
    std::fprintf(stderr, "train_gpt: error: saving the weights to '%s' failed (%s); they are in "
                 "'%s' instead\n", f.save.c_str(), why.c_str(), at.c_str());
    return false;
  };
  install_signal_handlers({snapshot_target, f.save});

  std::vector<std::int32_t> x, y;
  // NOTE [data parallel trainer]: this rank's micro-steps, their gradients summed over ranks by
  // DataParallel; the step's loss is the mean of every micro-batch's, summed in global order.
  auto parallel_step = [&](int step) {
    StepScope<B> scope;
    const std::int64_t n = static_cast<std::int64_t>(f.batch) * f.seq;
    std::vector<double> losses;  // this rank's micro-batches' (global order: g)
    for (int k = 0; k < par.micro_steps; ++k) {
      const std::int64_t g = static_cast<std::int64_t>(par.rank) * par.micro_steps + k;
      tape.set_seed(dist::stream_seed(f.seed, step, g));
      tape.set_rng_offset(0);
      const std::vector<std::int32_t> xs(x.begin() + g * n, x.begin() + (g + 1) * n);
      const std::vector<std::int32_t> ys(y.begin() + g * n, y.begin() + (g + 1) * n);
      const auto loss = model.loss(tape.tokens({f.batch, f.seq}, xs), tape.tokens({f.batch, f.seq}, ys));
      losses.push_back(loss.item());
      dp->backward(loss, k, par.micro_steps);
    }
    // The norm from fixed blocks of the summed gradients: the same on any rank count, sharded
    // or not (NOTE [data parallel] 9).
    if (f.grad_clip > 0.0f) dp->clip_grad_norm(f.grad_clip);
    if (sharded) {
      sharded->step();
    } else if (use_adamw) {
      use_adamw->step();
    } else {
      use_sgd->step();
    }
    optim::zero_grad(params);
    return static_cast<float>(comm.sum_in_rank_order(losses) /
                              static_cast<double>(par.micro_batches()));
  };
  // NOTE [interrupt], several ranks: a signal on any of them ends the run after the same step.
  // They stop on the signal they agreed on in an all-gather after each step, never on their own
  // view of it: a signal that lands on one rank between that gather and the loop's test must not
  // let it leave while the others start the next step and wait for it in a collective.
  int agreed = 0;
  auto agree_to_stop = [&]() {
    if (par.ranks == 1) return;
    for (std::uint64_t v : comm.all_gather_u64({static_cast<std::uint64_t>(g_signal)}))
      if (v != 0 && agreed == 0) agreed = static_cast<int>(v);
    if (agreed != 0 && g_signal == 0) g_signal = agreed;
  };
  auto stopping = [&]() { return par.ranks == 1 ? g_signal : agreed; };
  double total = 0;
  // The rate of each update from its index (resumed runs included): constant, or warmup then
  // cosine decay over the whole run (optim::LrSchedule).
  const optim::LrSchedule schedule =
      f.lr_schedule == "cosine"
          ? optim::LrSchedule::warmup_cosine(f.lr, f.min_lr, f.warmup, std::max(f.steps, 1))
          : optim::LrSchedule::constant(f.lr);
  for (int step = start; step < f.steps && stopping() == 0; ++step) {
    reset_peak_memory<B>();
    const float lr_now = schedule.at(step);
    if (use_adamw) use_adamw->options().lr = lr_now;
    if (use_sgd) use_sgd->options().lr = lr_now;
    if (sharded) sharded->options().lr = lr_now;
    const auto t0 = std::chrono::steady_clock::now();
    batches.next(x, y);
    // NOTE [re-plan on out of memory]: a step that runs out of memory is dropped whole (its
    // graph, its gradients; the optimizer state and weights are untouched, since the optimizers
    // allocate before they update) and run again on the same batch from the same RNG counter,
    // under a plan for the memory limit: its loss is the loss that plan gives from the start.
    std::string replanned;
    float l = 0;
    for (int attempt = 0; !dp; ++attempt) {
      try {
        tape.set_seed(dist::stream_seed(f.seed, step, 0));  // NOTE [data parallel trainer]
        tape.set_rng_offset(0);
        const auto idx = tape.tokens({f.batch, f.seq}, x), tgt = tape.tokens({f.batch, f.seq}, y);
        const auto loss = use_adamw ? gpt_train_step(model, *use_adamw, idx, tgt, f.grad_clip)
                                    : gpt_train_step(model, *use_sgd, idx, tgt, f.grad_clip);
        l = loss.item();
        break;
      } catch (const OutOfMemory& e) {
        tape.clear();
        optim::zero_grad(params);
        const std::int64_t limit = memory_limit<B>();
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
    if (dp) {
      try {
        l = parallel_step(step);
      } catch (const OutOfMemory& e) {  // every rank would have to re-plan alike: not done
        REMAT_CHECK(false, "train_gpt: step ", step + 1, " ran out of memory with ", par.ranks,
                    " rank(s) x ", micro_flag, " micro-step(s) of ", batch_flag, " sequence(s)",
                    f.batch_invariant ? " (--batch-invariant: one at a time)" : "", ": ",
                    e.what(), " (re-planning runs in one process with one micro-step only; pass "
                    "a smaller --batch, with more micro-steps, or a --checkpoint plan that fits)");
      }
    }
    agree_to_stop();
    done = step + 1;
    // NOTE [diverged run]: stop here; nothing of this step is written.
    if (!std::isfinite(l)) {
      if (tty) std::printf("\n");
      std::fflush(stdout);
      REMAT_CHECK(false, "train_gpt: the loss of step ", done, " is ", l, ": the run diverged (is ",
                  flag_value(app, "--lr", f.lr), " too high? --grad-clip bounds each update); "
                  "nothing after step ", done - 1, " is written",
                  snapshot_written.empty() ? std::string("")
                                           : "; the last good snapshot is '" + snapshot_written +
                                                 "' (step " + std::to_string(snapshot_step) + ")");
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total += dt;
    const auto mem = memory_stats<B>();
    const double tps = static_cast<double>(global_seqs) * f.seq / dt;  // all ranks together
    if (!lead) {
      // quiet: rank 0 prints for all
    } else if (f.json) {
      std::string comm_json;  // the last micro-step's reduction (NOTE [data parallel] 4)
      if (dp) {
        const auto& rs = dp->stats();
        char b[256];
        std::snprintf(b, sizeof b, ",\"ranks\":%d,\"micro_steps\":%d,\"buckets\":%d,"
                      "\"buckets_in_backward\":%d,\"comm_exposed_s\":%.6f,\"comm_pack_s\":%.6f,"
                      "\"optimizer_state_bytes\":%lld",
                      par.ranks, par.micro_steps, rs.buckets, rs.launched_in_backward, rs.exposed_s,
                      rs.pack_s, static_cast<long long>(mem.live_of(Category::optimizer_state)));
        comm_json = b;
      }
      std::printf("{\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"step_s\":%.6f,\"tokens_per_s\":%.1f,"
                  "\"peak_bytes\":%lld,\"peak_saved_bytes\":%lld%s%s}\n",
                  step + 1, l, static_cast<double>(lr_now), dt, tps, static_cast<long long>(mem.peak_total),
                  static_cast<long long>(mem.peak_of(Category::activations)), comm_json.c_str(),
                  replanned.empty() ? "" : (",\"replanned\":\"" + c.checkpoint.str() + ": " + replanned + "\"").c_str());
      std::fflush(stdout);
    } else if (tty || step + 1 == f.steps || (step + 1) % 10 == 0) {
      const double eta = total / (step + 1 - start) * (f.steps - step - 1);
      char lr_part[40] = "";
      if (f.lr_schedule != "constant")
        std::snprintf(lr_part, sizeof lr_part, " | lr %.3g", static_cast<double>(lr_now));
      std::printf("%sstep %d/%d | loss %.4f%s | %.0f tok/s | peak %.1f MiB | ETA %s%s%s", tty ? "\r" : "",
                  step + 1, f.steps, l, lr_part, tps, mem.peak_total / 1048576.0, fmt_duration(eta).c_str(),
                  replanned.empty() ? "" : " | re-planned", tty ? "   " : "\n");
      std::fflush(stdout);
    }
    if (f.snapshot_every > 0 && done % f.snapshot_every == 0) write_snapshot(f.snapshot_path);
  }
  if (tty) std::printf("\n");
  std::fflush(stdout);

  // NOTE [interrupt]: the step in flight has finished; write everything, say where, exit. (A
  // signal after the last step's agreement: one more, so that every rank takes the same path.)
  if (done > start) agree_to_stop();
  if (stopping() != 0) {
    const int sig = stopping();
    const char* name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
    if (done == start) {
      std::fprintf(stderr, "train_gpt: interrupted by %s before the first step: nothing to save; "
                   "exit %d\n", name, 128 + sig);
      return 128 + sig;
    }
    if (snapshot_step != done) write_snapshot(snapshot_target);
    if (!lead) return 128 + sig;  // rank 0 writes
    const bool saved = f.save.empty() || write_weights();
    std::fprintf(stderr, "train_gpt: interrupted by %s after step %d of %d: the snapshot is in '%s' "
                 "(continue with the same flags and --resume %s)%s%s; exit %d\n", name, done, f.steps,
                 snapshot_written.c_str(), snapshot_written.c_str(),
                 f.save.empty() || !saved ? "" : ", the weights in ",
                 f.save.empty() || !saved ? "" : f.save.c_str(), 128 + sig);
    return 128 + sig;
  }
  // The end of the run: a snapshot path keeps the final state too, and the weights are saved.
  if (!f.snapshot_path.empty() && snapshot_step != done && done > start) write_snapshot(f.snapshot_path);
  if (!lead) return 0;  // rank 0 writes and samples
  if (!f.save.empty() && !write_weights()) return 1;
  if (f.sample > 0) {
    // Generate from the prompt, sampling with the temperature from the counter-based generator.
    // The prompt and the output are text with --tokenizer (an empty prompt starts a document:
    // <|endoftext|>; ids past the tokenizer's vocabulary, llm.c's padding, are never drawn),
    // bytes when the vocabulary is 256, else token ids separated by blanks.
    NoGrad ng;
    std::vector<std::int32_t> ctx = prompt;
    const std::int64_t drawn = tok ? tok->vocab_size() : c.vocab_size;  // ids that may be drawn
    std::vector<std::int32_t> generated;
    std::string out;
    for (int i = 0; i < f.sample && g_signal == 0; ++i) {  // Ctrl-C stops the sampling too
      const std::int64_t T = std::min<std::int64_t>(static_cast<std::int64_t>(ctx.size()), c.block_size);
      std::vector<std::int32_t> window(ctx.end() - T, ctx.end());
      auto logits = model(tape.tokens({1, T}, window), /*training=*/false).to_vector();
      const float* last = logits.data() + (T - 1) * c.vocab_size;
      float mx = last[0];
      for (std::int64_t v = 1; v < drawn; ++v) mx = std::max(mx, last[v]);
      std::vector<double> p(static_cast<std::size_t>(drawn));
      double sum = 0;
      for (std::int64_t v = 0; v < drawn; ++v)
        sum += p[static_cast<std::size_t>(v)] = std::exp((last[v] - mx) / std::max(f.temperature, 1e-4f));
      double u = rng::uniform(f.seed, 0xabc, static_cast<std::uint64_t>(i)) * sum;
      std::int32_t next = static_cast<std::int32_t>(drawn - 1);
      for (std::int64_t v = 0; v < drawn; ++v)
        if ((u -= p[static_cast<std::size_t>(v)]) <= 0) {
          next = static_cast<std::int32_t>(v);
          break;
        }
      ctx.push_back(next);
      generated.push_back(next);
    }
    if (tok) {
      // Tokens' bytes may split a UTF-8 character: the text is repaired as GPT-2's decode does
      // (errors="replace"), so the terminal gets valid UTF-8.
      out = text::to_valid_utf8(f.prompt + tok->decode(generated));
    } else if (c.vocab_size == 256) {
      out = f.prompt;
      for (auto t : generated) out += static_cast<char>(t);
    } else {
      for (auto t : generated) out += (out.empty() ? "" : " ") + std::to_string(t);
    }
    std::printf("sample: %s\n", out.c_str());
  }
  return g_signal != 0 ? 128 + g_signal : 0;  // a signal during the save or the sampling
}

}  // namespace train_gpt
