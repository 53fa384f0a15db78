#pragma once
// SPDX-License-Identifier: MIT
// GPT-2: token and position embeddings, pre-LN blocks, final layer norm, lm head tied to wte.
// Parameter names follow Hugging Face's GPT-2 layout (wte, wpe, h.{i}.ln_1, ..., ln_f).

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "remat/checkpoint/checkpoint.hpp"
#include "remat/nn/attention.hpp"
#include "remat/nn/layers.hpp"
#include "remat/ops/activation.hpp"
#include "remat/ops/elementwise.hpp"
#include "remat/ops/loss.hpp"

namespace remat {
namespace nn {

/// How GPT::forward checkpoints its blocks:
///   none        every activation kept;
///   block       each block a segment;
///   every:N     runs of N blocks as segments;
///   sqrt        about sqrt(L) segments of about sqrt(L) blocks (Chen et al. 2016);
///   selective   each block a segment that keeps its linear layers' outputs (Megatron).
/// The last run of blocks is never a segment: its replay would follow its forward at once.
struct CheckpointStrategy {
  enum class Kind { none, block, every, sqrt, selective };
  Kind kind = Kind::none;
  std::int64_t every = 1;

  static CheckpointStrategy parse(const std::string& s) {
    CheckpointStrategy c;
    if (s == "none") return c;
    if (s == "block") c.kind = Kind::block;
    else if (s == "sqrt") c.kind = Kind::sqrt;
    else if (s == "selective") c.kind = Kind::selective;
    else if (s.rfind("every:", 0) == 0) {
      c.kind = Kind::every;
      const std::string n = s.substr(6);
      char* end = nullptr;
      c.every = std::strtoll(n.c_str(), &end, 10);
      REMAT_CHECK(!n.empty() && end && *end == '\0' && c.every >= 1,
                  "remat::CheckpointStrategy: '", s, "' has no valid block count (expected every:N "
                  "with N >= 1, e.g. every:2)");
    } else {
      REMAT_CHECK(false, "remat::CheckpointStrategy: unknown strategy '", s,
                  "' (expected none, block, every:N, sqrt or selective)");
    }
    return c;
  }
  std::string str() const {
    switch (kind) {
      case Kind::none: return "none";
      case Kind::block: return "block";
      case Kind::every: return "every:" + std::to_string(every);
      case Kind::sqrt: return "sqrt";
      case Kind::selective: return "selective";
    }
    return "?";
  }
  /// Blocks per segment for a model of L blocks (0: no segments).
  std::int64_t group(std::int64_t L) const {
    switch (kind) {
      case Kind::none: return 0;
      case Kind::block:
      case Kind::selective: return 1;
      case Kind::every: return every;
      case Kind::sqrt: {
        const auto segments = std::max<std::int64_t>(1, std::llround(std::sqrt(double(L))));
        return (L + segments - 1) / segments;
      }
    }
    return 0;
  }
};

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
  // x (B, T, C) -> (B, T, C)
  Tensor<B> operator()(const Tensor<B>& x, bool training = true) const {
    auto h = x + attn(ln_1(x), training);
    return h + mlp(ln_2(h), training);
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
        wte(tape, c.vocab_size, c.n_embd, c.init_std, c.seed),
        wpe(tape, c.block_size, c.n_embd, c.init_std, c.seed + 1),
        ln_f(tape, c.n_embd),
        tape_(&tape) {
    REMAT_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer >= 0 && c.n_embd > 0,
                "remat::nn::GPT: config has vocab_size ", c.vocab_size, ", block_size ",
                c.block_size, ", n_layer ", c.n_layer, ", n_embd ", c.n_embd,
                " (expected all positive, n_layer >= 0)");
    this->add_module("wte", wte);
    this->add_module("wpe", wpe);
    for (std::int64_t i = 0; i < c.n_layer; ++i) {
      h.emplace_back(tape, c, c.seed + 16 + 8 * static_cast<std::uint64_t>(i));
      this->add_module("h." + std::to_string(i), h.back());
    }
    this->add_module("ln_f", ln_f);
  }

  /// The residual stream after the embeddings: idx (B, T) i32 -> (B, T, C).
  Tensor<B> embed(const Tensor<B>& idx) const {
    REMAT_CHECK(idx.rank() == 2 && idx.dtype() == DType::i32, "remat::nn::GPT: token ids are ",
                dtype_name(idx.dtype()), " ", idx.shape().str(), " (expected i32 [B, T])");
    const std::int64_t T = idx.size(1);
    REMAT_CHECK(T <= config.block_size, "remat::nn::GPT: sequence length ", T,
                " exceeds block_size ", config.block_size,
                " (expected T <= block_size; build the model with a larger block_size)");
    std::vector<std::int32_t> pos(static_cast<std::size_t>(T));
    for (std::int64_t t = 0; t < T; ++t) pos[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(t);
    return wte(idx) + wpe(tape_->tokens({T}, pos));  // (B, T, C) + (T, C)
  }
  /// Final layer norm and the tied lm head: x (B, T, C) -> logits (B, T, V).
  Tensor<B> head(const Tensor<B>& x) const {
    return matmul(ln_f(x), wte.weight, false, /*tb=*/true);
  }
  /// The blocks on the residual stream x (B, T, C), checkpointed per config.checkpoint.
  Tensor<B> blocks(Tensor<B> x, bool training = true) const {
    const std::int64_t L = static_cast<std::int64_t>(h.size());
    auto run = [this, training](std::int64_t lo, std::int64_t hi) {
      return [this, training, lo, hi](const Tensor<B>& in) {
        Tensor<B> t = in;
        for (std::int64_t i = lo; i < hi; ++i) t = h[static_cast<std::size_t>(i)](t, training);
        return t;
      };
    };
    const std::int64_t group = config.checkpoint.group(L);
    if (group <= 0) return run(0, L)(x);
    const bool selective = config.checkpoint.kind == CheckpointStrategy::Kind::selective;
    for (std::int64_t lo = 0; lo < L; lo += group) {
      const std::int64_t hi = std::min(L, lo + group);
      if (hi == L) return run(lo, hi)(x);  // the last run: no segment (see CheckpointStrategy)
      CheckpointOptions o;
      o.name(hi - lo == 1 ? "h." + std::to_string(lo)
                          : "h." + std::to_string(lo) + "-" + std::to_string(hi - 1));
      if (selective) o.policy(policy::save_linear());
      x = checkpoint(o, run(lo, hi), x);
    }
    return x;
  }
  /// idx (B, T) i32 -> logits (B, T, V).
  Tensor<B> operator()(const Tensor<B>& idx, bool training = true) const {
    return head(blocks(embed(idx), training));
  }
  /// Mean cross-entropy of the next-token predictions against targets (B, T).
  Tensor<B> loss(const Tensor<B>& idx, const Tensor<B>& targets, bool training = true) const {
    return cross_entropy((*this)(idx, training), targets);
  }

  GPTConfig config;
  Embedding<B> wte, wpe;
  std::vector<Block<B>> h;
  LayerNorm<B> ln_f;

 private:
  Tape<B>* tape_;
};

}  // namespace nn
}  // namespace remat
