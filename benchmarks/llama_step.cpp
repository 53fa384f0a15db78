// SPDX-License-Identifier: MIT
// llama_step: times nn::Llama training steps (forward, backward, SGD or AdamW) at a model's
// shapes and reports the ledger's and the process's memory, one JSON line per checkpoint
// strategy. Its PyTorch twin: benchmarks/torch_llama_step.py (the same model from torch.nn
// ops). Presets: --shape smollm2-135m (30 layers, d 576, 9 heads / 3 kv heads of 64, ffn 1536,
// vocab 49152, tied) and llama-3.2-1b (16 layers, d 2048, 32 / 8 heads, ffn 8192, vocab
// 128256, tied, Llama 3 rope scaling); the weights are drawn (N(0, 0.02)), not read.
//
//   OMP_NUM_THREADS=1 build/benchmarks/llama_step --shape smollm2-135m --seq 1024 --batch 1
//                     --steps 10 --warmup 2 --threads 1 --checkpoint none,block,budget:1.2GiB
// A budget:SIZE (or auto) strategy is planned first (nn::plan_checkpoint, nn/llama_plan.hpp,
// bounding the process's growth); its line adds the budget and the planned, certified peak.

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <remat/nn/llama_plan.hpp>
#include <remat/remat.hpp>

#include "harness.hpp"

using namespace remat;

namespace {

nn::LlamaConfig preset(const std::string& shape) {
  nn::LlamaConfig c;
  c.rms_norm_eps = 1e-5f;
  c.tie_word_embeddings = true;
  if (shape == "smollm2-135m") {
    c.vocab_size = 49152, c.hidden_size = 576, c.intermediate_size = 1536, c.num_layers = 30;
    c.num_heads = 9, c.num_kv_heads = 3, c.head_dim = 64;
    c.rope.theta = 100000.0f;
  } else if (shape == "llama-3.2-1b") {
    c.vocab_size = 128256, c.hidden_size = 2048, c.intermediate_size = 8192, c.num_layers = 16;
    c.num_heads = 32, c.num_kv_heads = 8, c.head_dim = 64;
    c.rope = RopeConfig{500000.0f, 32.0f, 1.0f, 4.0f, 8192};
  } else {
    REMAT_CHECK(false, "llama_step: --shape '", shape, "' (expected smollm2-135m or llama-3.2-1b)");
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nn::Llama training steps at a model's shapes"};
  std::string shape = "smollm2-135m", strategies = "none,block", optimizer = "sgd";
  int seq = 1024, batch = 1, steps = 10, warmup = 2, threads = 1, layers = 0;
  app.add_option("--shape", shape, "smollm2-135m or llama-3.2-1b");
  app.add_option("--layers", layers, "override the preset's layer count (0: the preset's)");
  app.add_option("--seq", seq);
  app.add_option("--batch", batch);
  app.add_option("--steps", steps, "timed steps (the median is reported)");
  app.add_option("--warmup", warmup);
  app.add_option("--threads", threads);
  app.add_option("--checkpoint", strategies, "comma-separated strategies (fixed, budget:SIZE, auto)");
  app.add_option("--optimizer", optimizer, "sgd or adamw");
  CLI11_PARSE(app, argc, argv);
  try {
    set_num_threads(threads);
    nn::LlamaConfig c = preset(shape);
    if (layers > 0) c.num_layers = layers;
    const std::int64_t rss0 = remat_bench::rss_bytes("VmRSS");
    std::stringstream list(strategies);
    for (std::string s; std::getline(list, s, ',');) {
      c.checkpoint = nn::CheckpointStrategy::parse(s);
      std::int64_t budget = 0, certified = 0, process = 0;
      double plan_s = 0;
      if (c.checkpoint.planned()) {
        StepOptions so;
        so.optimizer = optimizer;  // SGD without momentum, or AdamW: the step below
        const nn::CheckpointPlan cp = nn::resolve_checkpoint<Cpu>(c, batch, seq, so);
        c.checkpoint = cp.strategy;
        budget = cp.budget, certified = cp.peak(), process = cp.process_peak(), plan_s = cp.plan_s;
        std::fprintf(stderr, "%s: %s (%.2f s to plan)\n%s", s.c_str(), cp.summary().c_str(), cp.plan_s,
                     cp.table().c_str());
      }
      Tape<Cpu> tape(1);
      nn::Llama<Cpu> model(tape, c);
      const auto params = model.parameters();
      std::vector<std::int32_t> x(static_cast<std::size_t>(batch) * seq), y(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        x[i] = static_cast<std::int32_t>((i * 7919) % static_cast<std::size_t>(c.vocab_size));
        y[i] = static_cast<std::int32_t>((i * 104729 + 1) % static_cast<std::size_t>(c.vocab_size));
      }
      const Tensor<Cpu> ids = tape.tokens({batch, seq}, x), tgt = tape.tokens({batch, seq}, y);
      std::unique_ptr<optim::SGD<Cpu>> sgd;
      std::unique_ptr<optim::AdamW<Cpu>> adamw;
      if (optimizer == "adamw") adamw = std::make_unique<optim::AdamW<Cpu>>(params, optim::AdamWOptions{1e-4f});
      else sgd = std::make_unique<optim::SGD<Cpu>>(params, optim::SGDOptions{1e-4f});
      std::vector<double> times;
      float loss = 0.0f;
      reset_peak_memory<Cpu>();
      // the measured steps' span on the monotonic clock (benchmarks/profile_step.py keeps only
      // the samples inside it)
      double measured_from = 0.0, measured_until = 0.0;
      for (int i = 0; i < warmup + steps; ++i) {
        const double t0 = remat_bench::now_s();
        if (i == warmup) measured_from = t0;
        loss = (adamw ? nn::train_lm_step(model, *adamw, ids, tgt) : nn::train_lm_step(model, *sgd, ids, tgt)).item();
        if (i >= warmup) times.push_back(remat_bench::now_s() - t0);
        measured_until = remat_bench::now_s();
      }
      const auto t = remat_bench::summarize(times);
      const MemoryStats m = memory_stats<Cpu>();
      std::printf("{\"bench\":\"llama_step\",\"shape\":\"%s\",\"layers\":%lld,\"seq\":%d,\"batch\":%d,"
                  "\"threads\":%d,\"optimizer\":\"%s\",\"checkpoint\":\"%s\",\"parameters\":%lld,"
                  "\"loss\":%.6f,\"steps\":%d,\"step_s\":%.4f,\"step_s_median\":%.4f,\"step_s_min\":%.4f,\"step_s_max\":%.4f,"
                  "\"peak_bytes\":%lld,\"peak_activation_bytes\":%lld,\"rss_growth_bytes\":%lld,"
                  "\"rss_hwm_bytes\":%lld,\"budget_bytes\":%lld,\"certified_peak_bytes\":%lld,"
                  "\"planned_process_bytes\":%lld,\"plan_s\":%.3f,\"measured_from_s\":%.6f,"
                  "\"measured_until_s\":%.6f,\"libs\":%s}\n",
                  shape.c_str(), static_cast<long long>(c.num_layers), seq, batch, threads, optimizer.c_str(),
                  s.c_str(), static_cast<long long>(model.num_parameters()), loss, steps, t.median, t.median, t.min, t.max,
                  static_cast<long long>(m.peak_total), static_cast<long long>(m.peak_of(Category::activations)),
                  static_cast<long long>(remat_bench::rss_bytes("VmHWM") - rss0),
                  static_cast<long long>(remat_bench::rss_bytes("VmHWM")), static_cast<long long>(budget),
                  static_cast<long long>(certified), static_cast<long long>(process), plan_s, measured_from,
                  measured_until, remat_bench::loaded_libs_json().c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llama_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
