// SPDX-License-Identifier: MIT
// gpt_step: times GPT training steps (forward, backward, optimizer) and reports the allocator's
// exact memory. Prints one JSON line. Compare with PyTorch: benchmarks/compare_torch.py.
//
//   build/benchmarks/gpt_step --layers 8 --d 256 --heads 4 --seq 256 --batch 4 --vocab 256
//                             --steps 10 --warmup 3 --threads 1

#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <remat/remat.hpp>

#include "harness.hpp"

using namespace remat;

int main(int argc, char** argv) {
  CLI::App app{"Time GPT training steps and report the exact memory ledger"};
  int layers = 8, d = 256, heads = 4, seq = 256, batch = 4, vocab = 256, steps = 10, warmup = 3;
  int threads = 1;
  float lr = 1e-3f;
  std::string optimizer = "adamw", checkpoint = "none";
  app.add_option("--layers", layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--d", d, "model width (n_embd)")->check(CLI::PositiveNumber);
  app.add_option("--heads", heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "sequence length")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--vocab", vocab, "vocabulary size")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "measured steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "unmeasured steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "CPU threads (ours, Eigen, OpenBLAS)")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "learning rate");
  app.add_option("--optimizer", optimizer, "adamw or sgd")->check(CLI::IsMember({"adamw", "sgd"}));
  app.add_option("--checkpoint", checkpoint, "activation checkpointing strategy")
      ->check(CLI::IsMember({"none"}));
  CLI11_PARSE(app, argc, argv);

  try {
    set_num_threads(threads);
    Tape<Cpu> tape;
    nn::GPTConfig c;
    c.vocab_size = vocab;
    c.block_size = seq;
    c.n_layer = layers;
    c.n_embd = d;
    c.n_head = heads;
    nn::GPT<Cpu> model(tape, c);
    const auto params = model.parameters();
    optim::AdamW<Cpu> adamw(params, {lr});
    optim::SGD<Cpu> sgd(params, {lr, 0.9f});

    std::vector<std::int32_t> x(static_cast<std::size_t>(batch * seq)), y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<std::int32_t>(rng::random4(7, 0, i).v[0] % static_cast<unsigned>(vocab));
      y[i] = static_cast<std::int32_t>(rng::random4(7, 1, i).v[0] % static_cast<unsigned>(vocab));
    }
    const auto idx = tape.tokens({batch, seq}, x), tgt = tape.tokens({batch, seq}, y);

    std::vector<double> times;
    std::int64_t peak = 0, peak_step = 0;
    float loss_first = 0, loss_last = 0;
    for (int s = 0; s < warmup + steps; ++s) {
      const bool measured = s >= warmup;
      if (measured) reset_peak_memory<Cpu>();
      const std::int64_t live0 = memory_stats<Cpu>().live_total;
      const double t0 = remat_bench::now_s();
      auto loss = model.loss(idx, tgt);
      tape.backward(loss);
      if (optimizer == "adamw") {
        adamw.step();
        adamw.zero_grad();
      } else {
        sgd.step();
        sgd.zero_grad();
      }
      const double dt = remat_bench::now_s() - t0;
      const float l = loss.item();
      if (s == 0) loss_first = l;
      loss_last = l;
      if (measured) {
        times.push_back(dt);
        const auto st = memory_stats<Cpu>();
        peak = std::max(peak, st.peak_total);
        peak_step = std::max(peak_step, st.peak_total - live0);
      }
    }
    const auto t = remat_bench::summarize(times);
    const auto mem = memory_stats<Cpu>();
    std::printf(
        "{\"impl\":\"remat\",\"backend\":\"%s\",\"threads\":%d,\"layers\":%d,\"d\":%d,\"heads\":%d,"
        "\"seq\":%d,\"batch\":%d,\"vocab\":%d,\"checkpoint\":\"%s\",\"optimizer\":\"%s\","
        "\"steps\":%d,\"params\":%lld,\"step_s\":%.6f,\"step_s_min\":%.6f,\"step_s_max\":%.6f,"
        "\"tokens_per_s\":%.1f,\"loss_first\":%.6f,\"loss_last\":%.6f,\"peak_bytes\":%lld,"
        "\"peak_step_bytes\":%lld,\"peak_saved_bytes\":%lld,\"memory\":%s}\n",
        Cpu::describe().c_str(), threads, layers, d, heads, seq, batch, vocab, checkpoint.c_str(),
        optimizer.c_str(), steps, static_cast<long long>(model.num_parameters()), t.median, t.min,
        t.max, batch * seq / t.median, loss_first, loss_last, static_cast<long long>(peak),
        static_cast<long long>(peak_step),
        static_cast<long long>(mem.peak_of(Category::activations)), mem.json().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
