#pragma once
// SPDX-License-Identifier: MIT
// GPT-2: token and position embeddings, pre-LN blocks, final layer norm, lm head tied to wte.
// Parameter names follow Hugging Face's GPT-2 layout (wte, wpe, h.{i}.ln_1, ..., ln_f).

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "remat/checkpoint/checkpoint.hpp"
#include "remat/nn/attention.hpp"
#include "remat/nn/layers.hpp"
#include "remat/ops/activation.hpp"
#include "remat/ops/elementwise.hpp"
#include "remat/ops/loss.hpp"
#include "remat/plan/chain.hpp"

namespace remat {
namespace nn {

/// How GPT::forward checkpoints its blocks:
///   none        every activation kept;
///   block       each block a segment;
///   every:N     runs of N blocks as segments;
///   sqrt        about sqrt(L) segments of about sqrt(L) blocks (Chen et al. 2016);
///   save_linear each block a segment that keeps its linear layers' outputs and recomputes
///               the rest (norms, GELU, the attention core); `selective` is its old name, still
///               accepted (deprecated: Megatron's selective recompute is another policy,
///               policy::megatron_selective, which recomputes only the attention core);
///   budget:SIZE the fastest schedule whose whole training step (parameters, gradients,
///               optimizer state, activations, scratch) peaks at most at SIZE bytes, e.g.
///               budget:300MiB, budget:1.5GiB (planned by nn::plan_checkpoint, gpt_plan.hpp);
///   auto        a budget of the memory free now (MemAvailable, the cgroup limit) less a margin.
/// The fixed strategies never make the last run of blocks a segment: its replay would follow
/// its forward at once. Every strategy runs as a plan::Schedule (plan/chain.hpp) through
/// checkpoint(); budget and auto carry the one their plan chose.
struct CheckpointStrategy {
  enum class Kind {
    none, block, every, sqrt, save_linear, budget, automatic,
    selective = save_linear  // deprecated name of save_linear
  };
  Kind kind = Kind::none;
  std::int64_t every = 1;
  std::int64_t budget_bytes = 0;  // budget: as given; auto: what was free when planned
  std::string spec;               // budget, auto, save_linear: the text parsed, as str() gives it back
  std::shared_ptr<const plan::Schedule> schedule;  // budget and auto, once planned
  static constexpr std::int64_t kMaxEvery = 1000000;  // every:N's largest N (no model is deeper)

  static CheckpointStrategy parse(const std::string& s) {
    CheckpointStrategy c;
    if (s == "none") return c;
    if (s == "block") c.kind = Kind::block;
    else if (s == "sqrt") c.kind = Kind::sqrt;
    else if (s == "save_linear" || s == "selective") {  // "selective": deprecated name
      c.kind = Kind::save_linear;
      c.spec = s;
    }
    else if (s == "auto") {
      c.kind = Kind::automatic;
      c.spec = s;
    } else if (s.rfind("budget:", 0) == 0) {
      c.kind = Kind::budget;
      c.spec = s;
      c.budget_bytes = parse_bytes(s.substr(7), "remat::CheckpointStrategy: budget");
    } else if (s.rfind("every:", 0) == 0) {
      c.kind = Kind::every;
      // Decimal digits only: strtoll would take blanks and signs and clamp an overflow.
      const std::string n = s.substr(6);
      bool digits = !n.empty() && n.size() <= 7;
      c.every = 0;
      for (char ch : n) {
        digits = digits && ch >= '0' && ch <= '9';
        if (digits) c.every = c.every * 10 + (ch - '0');
      }
      REMAT_CHECK(digits && c.every >= 1 && c.every <= kMaxEvery,
                  "remat::CheckpointStrategy: '", s, "' has no valid block count (expected every:N "
                  "with N a decimal number from 1 to ", kMaxEvery, ", e.g. every:2)");
    } else {
      REMAT_CHECK(false, "remat::CheckpointStrategy: unknown strategy '", s,
                  "' (expected none, block, every:N, sqrt, save_linear, budget:SIZE or auto)");
    }
    return c;
  }
  std::string str() const {
    switch (kind) {
      case Kind::none: return "none";
      case Kind::block: return "block";
      case Kind::every: return "every:" + std::to_string(every);
      case Kind::sqrt: return "sqrt";
      case Kind::save_linear: return spec.empty() ? "save_linear" : spec;
      case Kind::budget:
      case Kind::automatic: return spec;
    }
    return "?";
  }
  /// True for budget and auto: blocks() needs a plan (nn::plan_checkpoint) before it runs.
  bool planned() const noexcept { return kind == Kind::budget || kind == Kind::automatic; }
  /// Blocks per segment of a fixed strategy for a model of L blocks (0: no segments).
  std::int64_t group(std::int64_t L) const {
    switch (kind) {
      case Kind::none: return 0;
      case Kind::block:
      case Kind::save_linear: return 1;
      case Kind::every: return every;
      case Kind::sqrt: {
        const auto segments = std::max<std::int64_t>(1, std::llround(std::sqrt(double(L))));
        return (L + segments - 1) / segments;
      }
      case Kind::budget:
      case Kind::automatic: return 0;
    }
    return 0;
  }
};

/// The options a block can run with when it is kept (a keep step of a plan::Schedule), in the
/// order of the planner's chain (gpt_plan.hpp): 0 stores everything; 1 and 2 make the block a
/// segment of its own that keeps what the policy names and replays the rest. (Recomputing the
/// whole block is a segment step, not an option.)
inline constexpr int kBlockOptions = 3;
inline const char* block_option_name(int option) {
  static const char* names[kBlockOptions] = {"keep_all", "save_all_but_attention", "save_linear"};
  REMAT_CHECK(option >= 0 && option < kBlockOptions, "remat::nn::block_option_name: option ",
              option, " (expected 0..", kBlockOptions - 1, ")");
  return names[option];
}
inline Policy block_policy(int option) {
  switch (option) {
    case 1: return policy::save_all_but_attention();
    case 2: return policy::save_linear();
    default:
      REMAT_CHECK(false, "remat::nn::block_policy: option ", option, " keeps everything: it "
                  "runs without a segment (expected 1..", kBlockOptions - 1, ")");
      return policy::recompute_all();
  }
}

/// The schedule of a fixed strategy over the chain of a GPT with L blocks: stage 0 is the
/// embedding, stages 1..L the blocks, stage L+1 the head (the chain of gpt_plan.hpp).
inline plan::Schedule fixed_schedule(const CheckpointStrategy& s, std::int64_t L) {
  REMAT_CHECK(!s.planned(), "remat::nn::fixed_schedule: '", s.str(),
              "' is planned, not fixed (hint: nn::plan_checkpoint makes its schedule)");
  const int n = static_cast<int>(L);
  plan::Schedule out{plan::make_keep(0, 0)};
  const std::int64_t group = s.group(L);
  const bool save_linear = s.kind == CheckpointStrategy::Kind::save_linear;
  for (int lo = 0; lo < n;) {
    const int hi = group <= 0 ? n : std::min(n, lo + static_cast<int>(group));
    if (hi == n) {  // the last run: no segment
      for (int i = lo; i < hi; ++i) out.push_back(plan::make_keep(i + 1, 0));
    } else if (save_linear) {
      out.push_back(plan::make_keep(lo + 1, 2));
    } else {
      plan::Schedule inner;
      for (int i = lo; i < hi; ++i) inner.push_back(plan::make_keep(i + 1, 0));
      out.push_back(plan::make_segment(lo + 1, hi, std::move(inner)));
    }
    lo = hi;
  }
  out.push_back(plan::make_keep(n + 1, 0));
  return out;
}

struct GPTConfig {
  std::int64_t vocab_size = 256;
  std::int64_t block_size = 256;  // longest sequence (rows of wpe)
  std::int64_t n_layer = 4;
  std::int64_t n_embd = 128;
  std::int64_t n_head = 4;
  float dropout = 0.0f;
  float init_std = 0.02f;
  std::uint64_t seed = 1337;
  CheckpointStrategy checkpoint;  // how forward checkpoints the blocks
  // wte's rows rounded up to a multiple of this (1: none). llm.c pads GPT-2's 50257 to 50304
  // (128): the head's GEMMs then have aligned leading dimensions. The padding is internal: its
  // rows are zero, the loss and the logits cover vocab_size classes, files hold vocab_size rows
  // (NOTE [padded parameters]).
  std::int64_t vocab_multiple = 1;
  // The type the blocks and the head compute in: f32, or bf16 (NOTE [precision policy] in
  // ops/cast.hpp): the residual stream is cast once after the embeddings, each linear layer
  // casts its weight to its input's type per forward (a recorded op, replayed with the segment
  // that holds it), norms and the loss read bf16; parameters, gradients and optimizer state
  // stay f32.
  DType precision = DType::f32;

  /// wte's rows: vocab_size rounded up to a multiple of vocab_multiple.
  std::int64_t padded_vocab() const {
    return vocab_multiple > 1 ? (vocab_size + vocab_multiple - 1) / vocab_multiple * vocab_multiple
                              : vocab_size;
  }
};

/// Pre-LN transformer block: x + attn(ln_1(x)), then + mlp(ln_2(x)).
template <class B>
class Block : public Module<B> {
 public:
  Block(Tape<B>& tape, const GPTConfig& c, std::uint64_t seed)
      : ln_1(tape, c.n_embd),
        attn(tape, c.n_embd, c.n_head, c.init_std, proj_std(c), c.dropout, seed),
        ln_2(tape, c.n_embd),
        mlp(tape, c.n_embd, c.init_std, proj_std(c), c.dropout, seed + 2) {
    this->add_module("ln_1", ln_1);
    this->add_module("attn", attn);
    this->add_module("ln_2", ln_2);
    this->add_module("mlp", mlp);
  }
  // x (B, T, C) -> (B, T, C); each residual add happens inside its c_proj's GEMM
  Tensor<B> operator()(const Tensor<B>& x, bool training = true) const {
    auto h = attn(ln_1(x), training, /*residual=*/x);
    return mlp(ln_2(h), training, /*residual=*/h);
  }
  static float proj_std(const GPTConfig& c) {
    return c.init_std / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  }

  LayerNorm<B> ln_1;
  CausalSelfAttention<B> attn;
  LayerNorm<B> ln_2;
  MLP<B> mlp;
};

template <class B>
class GPT : public Module<B> {
 public:
  GPT(Tape<B>& tape, const GPTConfig& c)
      : config(c),
        wte(tape, checked(c).padded_vocab(), c.n_embd, c.init_std, c.seed, c.vocab_size),
        wpe(tape, c.block_size, c.n_embd, c.init_std, c.seed + 1),
        ln_f(tape, c.n_embd),
        tape_(&tape) {
    this->add_module("wte", wte);
    this->add_module("wpe", wpe);
    for (std::int64_t i = 0; i < c.n_layer; ++i) {
      h.emplace_back(tape, c, c.seed + 16 + 8 * static_cast<std::uint64_t>(i));
      this->add_module("h." + std::to_string(i), h.back());
    }
    this->add_module("ln_f", ln_f);
    this->flatten_parameters();  // NOTE [flat buffers]
  }

  /// The residual stream after the embeddings: idx (B, T) i32 -> (B, T, C).
  Tensor<B> embed(const Tensor<B>& idx) const {
    REMAT_CHECK(idx.rank() == 2 && idx.dtype() == DType::i32, "remat::nn::GPT: token ids are ",
                dtype_name(idx.dtype()), " ", idx.shape().str(), " (expected i32 [B, T])");
    const std::int64_t T = idx.size(1);
    REMAT_CHECK(T <= config.block_size, "remat::nn::GPT: sequence length ", T,
                " exceeds block_size ", config.block_size,
                " (expected T <= block_size; build the model with a larger block_size)");
    return to_dtype(wte(idx) + wpe(tape_->positions(T)), config.precision);  // (B, T, C) + (T, C)
  }
  /// Final layer norm and the tied lm head: x (B, T, C) -> logits (B, T, Vp), Vp =
  /// config.padded_vocab(): the columns past vocab_size are the padding's (zero).
  Tensor<B> head(const Tensor<B>& x) const {
    return matmul(ln_f(x), to_dtype(wte.weight, x.dtype()), false, /*tb=*/true);
  }
  /// The blocks on the residual stream x (B, T, C), checkpointed per config.checkpoint.
  Tensor<B> blocks(Tensor<B> x, bool training = true) const {
    const CheckpointStrategy& cs = config.checkpoint;
    std::shared_ptr<const plan::Schedule> schedule = cs.schedule;
    if (cs.planned())
      REMAT_CHECK(schedule != nullptr, "remat::nn::GPT: checkpoint strategy '", cs.str(),
                  "' has no plan yet (hint: config.checkpoint = nn::plan_checkpoint<Cpu>(config, "
                  "batch, seq).strategy, from remat/nn/gpt_plan.hpp)");
    else
      schedule = std::make_shared<const plan::Schedule>(
          fixed_schedule(cs, static_cast<std::int64_t>(h.size())));
    return run_schedule(schedule, *schedule, std::move(x), training);
  }
  /// Runs the block steps of a schedule (stages 1..L; the embedding and head steps are run by
  /// embed and head): a keep step runs block i with its option, a segment step checkpoints a run
  /// of blocks whose replay follows the inner schedule. `owner` keeps the schedule alive for
  /// the replays in backward.
  Tensor<B> run_schedule(const std::shared_ptr<const plan::Schedule>& owner,
                         const plan::Schedule& steps, Tensor<B> x, bool training) const {
    const int L = static_cast<int>(h.size());
    for (const plan::Step& s : steps) {
      if (s.last < 1 || s.first > L) {  // the embedding or the head
        REMAT_CHECK(s.kind == plan::Step::Kind::keep && (s.first == 0 || s.first == L + 1),
                    "remat::nn::GPT: a schedule step covers stages ", s.first, "..", s.last,
                    ", outside the blocks 1..", L, " (expected the embedding 0 or the head ",
                    L + 1, " alone)");
        continue;
      }
      REMAT_CHECK(s.first >= 1 && s.last <= L && s.first <= s.last, "remat::nn::GPT: a schedule "
                  "step covers stages ", s.first, "..", s.last, " (expected blocks within 1..", L,
                  ")");
      if (s.kind == plan::Step::Kind::keep) {
        const std::size_t i = static_cast<std::size_t>(s.first - 1);
        if (s.option == 0) {
          x = h[i](x, training);
        } else {
          const Block<B>* blk = &h[i];
          x = checkpoint(CheckpointOptions{}.name("h." + std::to_string(i)).policy(block_policy(s.option)),
                         [blk, training](const Tensor<B>& in) { return (*blk)(in, training); }, x);
        }
      } else {
        const plan::Schedule* inner = &s.inner;
        const std::string name = s.first == s.last ? "h." + std::to_string(s.first - 1)
                                                   : "h." + std::to_string(s.first - 1) + "-" +
                                                         std::to_string(s.last - 1);
        x = checkpoint(CheckpointOptions{}.name(name),
                       [this, owner, inner, training](const Tensor<B>& in) {
                         return run_schedule(owner, *inner, in, training);
                       },
                       x);
      }
    }
    return x;
  }
  /// idx (B, T) i32 -> logits (B, T, V) f32, V = config.vocab_size (a padded head's columns
  /// cut off: they are never predicted or sampled); bf16 logits are widened.
  Tensor<B> operator()(const Tensor<B>& idx, bool training = true) const {
    Tensor<B> logits = to_dtype(head(blocks(embed(idx), training)), DType::f32);
    const std::int64_t V = config.vocab_size;
    return logits.size(-1) == V ? logits : slice(logits, -1, 0, V);
  }
  /// Mean cross-entropy of the next-token predictions against targets (B, T): over the padded
  /// head's first vocab_size columns, without cutting them out.
  Tensor<B> loss(const Tensor<B>& idx, const Tensor<B>& targets, bool training = true) const {
    return cross_entropy(head(blocks(embed(idx), training)), targets, config.vocab_size);
  }

  GPTConfig config;
  Embedding<B> wte, wpe;
  std::vector<Block<B>> h;
  LayerNorm<B> ln_f;

 private:
  static const GPTConfig& checked(const GPTConfig& c) {  // before any parameter is made
    REMAT_CHECK(c.precision == DType::f32 || c.precision == DType::bf16,
                "remat::nn::GPT: config has precision ", dtype_name(c.precision),
                " (expected f32 or bf16)");
    REMAT_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer >= 0 && c.n_embd > 0 &&
                    c.vocab_multiple >= 1 && c.vocab_multiple <= (std::int64_t{1} << 20),
                "remat::nn::GPT: config has vocab_size ", c.vocab_size, ", block_size ",
                c.block_size, ", n_layer ", c.n_layer, ", n_embd ", c.n_embd, ", vocab_multiple ",
                c.vocab_multiple, " (expected all positive, n_layer >= 0, vocab_multiple 1..2^20)");
    return c;
  }
  Tape<B>* tape_;
};

}  // namespace nn
}  // namespace remat
