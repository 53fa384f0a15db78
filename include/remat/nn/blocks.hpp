#pragma once
// SPDX-License-Identifier: MIT
// Checkpointing a stack of transformer blocks, for any model made of one (nn::GPT, nn::Llama):
// the strategies a user names (CheckpointStrategy), the schedule of a fixed one over the chain
// embedding, blocks 1..L, head (fixed_schedule), the per-block options a plan may choose
// (block_policy) and the runner of a schedule's block steps (run_block_schedule).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "remat/checkpoint/checkpoint.hpp"
#include "remat/plan/chain.hpp"

namespace remat {
namespace nn {

/// How a model checkpoints its blocks (GPT::forward, Llama::forward):
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

/// The schedule of a fixed strategy over the chain of a model with L blocks: stage 0 is the
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

/// The schedule a model of L blocks runs for strategy cs: a planned one's (budget, auto: an
/// error naming `who` and `hint` when it has none yet), else fixed_schedule(cs, L).
inline std::shared_ptr<const plan::Schedule> schedule_of(const CheckpointStrategy& cs, std::int64_t L,
                                                         const std::string& who, const std::string& hint) {
  if (!cs.planned()) return std::make_shared<const plan::Schedule>(fixed_schedule(cs, L));
  REMAT_CHECK(cs.schedule != nullptr, who, ": checkpoint strategy '", cs.str(), "' has no plan yet (hint: ",
              hint, ")");
  return cs.schedule;
}

/// Runs the block steps of a schedule over blocks 1..L (stages 0 and L+1, the embedding and
/// the head, are the caller's): a keep step runs block i with its option (0: as is; else a
/// segment of its own under block_policy(option)), a segment step checkpoints a run of blocks
/// whose replay follows the inner schedule. block(i, x) runs block i (from 0) on x; it is
/// copied into the segments and called again in backward, so it must capture what it reads
/// by value or by a pointer that outlives the step. `owner` keeps the schedule alive for the
/// replays; segments are named "prefix.i" or "prefix.i-j" (from 0), `who` names the model in
/// errors.
template <class B, class BlockFn>
Tensor<B> run_block_schedule(const std::shared_ptr<const plan::Schedule>& owner,
                             const plan::Schedule& steps, Tensor<B> x, int L,
                             const std::string& prefix, const std::string& who, const BlockFn& block) {
  for (const plan::Step& s : steps) {
    if (s.last < 1 || s.first > L) {  // the embedding or the head
      REMAT_CHECK(s.kind == plan::Step::Kind::keep && (s.first == 0 || s.first == L + 1), who,
                  ": a schedule step covers stages ", s.first, "..", s.last, ", outside the "
                  "blocks 1..", L, " (expected the embedding 0 or the head ", L + 1, " alone)");
      continue;
    }
    REMAT_CHECK(s.first >= 1 && s.last <= L && s.first <= s.last, who, ": a schedule step covers "
                "stages ", s.first, "..", s.last, " (expected blocks within 1..", L, ")");
    if (s.kind == plan::Step::Kind::keep) {
      const std::size_t i = static_cast<std::size_t>(s.first - 1);
      if (s.option == 0) {
        x = block(i, x);
      } else {
        x = checkpoint(CheckpointOptions{}.name(prefix + "." + std::to_string(i)).policy(block_policy(s.option)),
                       [block, i](const Tensor<B>& in) { return block(i, in); }, x);
      }
    } else {
      const plan::Schedule* inner = &s.inner;
      const std::string name = prefix + "." + std::to_string(s.first - 1) +
                               (s.first == s.last ? "" : "-" + std::to_string(s.last - 1));
      x = checkpoint(CheckpointOptions{}.name(name),
                     [owner, inner, L, prefix, who, block](const Tensor<B>& in) {
                       return run_block_schedule<B>(owner, *inner, in, L, prefix, who, block);
                     },
                     x);
    }
  }
  return x;
}

}  // namespace nn
}  // namespace remat
