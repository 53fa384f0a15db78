#pragma once
// SPDX-License-Identifier: MIT
// GPT-2: token and position embeddings, pre-LN blocks, final layer norm, lm head tied to wte.
// Parameter names follow Hugging Face's GPT-2 layout (wte, wpe, h.{i}.ln_1, ..., ln_f).

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "remat/nn/attention.hpp"
#include "remat/nn/blocks.hpp"
#include "remat/nn/layers.hpp"
#include "remat/ops/activation.hpp"
#include "remat/ops/elementwise.hpp"
#include "remat/ops/loss.hpp"

namespace remat {
namespace nn {

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
    const auto schedule = schedule_of(config.checkpoint, static_cast<std::int64_t>(h.size()), "remat::nn::GPT",
                                      "config.checkpoint = nn::plan_checkpoint<Cpu>(config, batch, "
                                      "seq).strategy, from remat/nn/gpt_plan.hpp");
    return run_schedule(schedule, *schedule, std::move(x), training);
  }
  /// Runs the block steps of a schedule (stages 1..L; the embedding and head steps are run by
  /// embed and head): nn::run_block_schedule (blocks.hpp) over h.0 .. h.L-1.
  Tensor<B> run_schedule(const std::shared_ptr<const plan::Schedule>& owner,
                         const plan::Schedule& steps, Tensor<B> x, bool training) const {
    const std::vector<Block<B>>* blocks = &h;
    return run_block_schedule<B>(
        owner, steps, std::move(x), static_cast<int>(h.size()), "h", "remat::nn::GPT",
        [blocks, training](std::size_t i, const Tensor<B>& in) { return (*blocks)[i](in, training); });
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
