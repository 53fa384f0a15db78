#pragma once
// SPDX-License-Identifier: MIT
// gpt_step's body for any backend: times GPT training steps (forward, backward, optimizer) and
// reports the allocator's exact memory, one JSON line per checkpoint strategy.
// Hooks per backend: set_threads<B>, backend_json<B>, device_work<B> (defined by gpt_step.cpp /
// gpt_step_cuda.cu).

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <remat/nn/gpt_plan.hpp>

#include "harness.hpp"

using namespace remat;

template <class B> void set_threads(int threads);
template <class B> std::string backend_json();
/// What the host has sent to the device so far: kernel launches (with cuBLAS calls and device
/// copies), host waits, and (in the CUDA emulation) launches per kernel. launches < 0: no device.
struct DeviceWork {
  std::int64_t launches = -1, gemms = -1, host_waits = -1;
  std::map<std::string, std::int64_t> by_kernel;
};
template <class B> DeviceWork device_work();

/// The whole benchmark for backend B (Cpu here; Cuda in gpt_step_cuda.cu).
template <class B>
int gpt_step_main(int argc, char** argv) {
  CLI::App app{"Time GPT training steps and report the exact memory ledger"};
  int layers = 8, d = 256, heads = 4, seq = 256, batch = 4, vocab = 256, steps = 10, warmup = 3;
  int threads = 1;
  float lr = 1e-3f;
  std::string optimizer = "adamw", checkpoint = "none";
  bool print_segments = false, no_profile = false, plan_only = false, launch_table = false;
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
  app.add_option("--checkpoint", checkpoint,
                 "activation checkpointing: none, block, every:N, sqrt, selective, budget:SIZE or auto; a comma "
                 "list runs them in turns, step by step, and prints one JSON line each");
  app.add_flag("--segments", print_segments, "print the per-segment ledger (and plans) as tables (stderr)");
  app.add_flag("--no-profile", no_profile, "plan budgets from FLOP counts instead of timing a block");
  app.add_flag("--launch-table", launch_table,
               "print the launches of one step per kernel to stderr (the CUDA emulation names them)");
  app.add_flag("--plan-only", plan_only, "print the predicted peaks (and the smallest feasible "
               "budget) as JSON lines, without stepping");
  CLI11_PARSE(app, argc, argv);

  try {
    const std::int64_t rss_before = remat_bench::rss_bytes("VmRSS");
    set_threads<B>(threads);
    Tape<B> tape;
    nn::GPTConfig c;
    c.vocab_size = vocab;
    c.block_size = seq;
    c.n_layer = layers;
    c.n_embd = d;
    c.n_head = heads;
    nn::GPT<B> model(tape, c);
    const auto params = model.parameters();
    optim::AdamW<B> adamw(params, {lr});
    optim::SGD<B> sgd(params, {lr, 0.9f});

    std::vector<std::int32_t> x(static_cast<std::size_t>(batch * seq)), y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<std::int32_t>(rng::random4(7, 0, i).v[0] % static_cast<unsigned>(vocab));
      y[i] = static_cast<std::int32_t>(rng::random4(7, 1, i).v[0] % static_cast<unsigned>(vocab));
    }
    const auto idx = tape.tokens({batch, seq}, x), tgt = tape.tokens({batch, seq}, y);

    // Several strategies (--checkpoint none,block) take turns step by step on the same model,
    // so a drift of the machine's speed hits them alike.
    struct Result {
      std::string name;
      nn::CheckpointStrategy strategy;
      std::vector<double> times;
      std::int64_t peak = 0, peak_step = 0, peak_saved = 0;
      float loss_first = 0, loss_last = 0;
      bool seen = false;
      std::int64_t predicted_peak = -1;  // the estimator's peak_total (-1: no estimator)
      std::int64_t predicted_reserved = -1;  // what it predicts the allocator reserves (0: not
                                             // modelled, the CPU)
      int plan_segments = -1;            // budget and auto: the plan's segments
      double estimate_s = -1;            // time the estimator took (two steps, shapes only)
      MemoryStats mem;  // the peaks of its worst step by category
      std::vector<SegmentStats> segments;  // its last step's ledger
      std::int64_t launches = -1, gemms = -1, host_waits = -1;  // its last measured step's
      std::map<std::string, std::int64_t> by_kernel;            // (forward, backward, optimizer)
    };
    std::vector<Result> results;
    StepOptions so;
    so.optimizer = optimizer;
    so.momentum = optimizer == "sgd" ? 0.9f : 0.0f;
    for (std::size_t at = 0;;) {
      const std::size_t comma = checkpoint.find(',', at);
      Result r;
      r.name = checkpoint.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      r.strategy = nn::CheckpointStrategy::parse(r.name);
      // budget:SIZE and auto are planned here (a block timed for real); every strategy's peak
      // is predicted by the estimator, where the backend has a shape-only twin.
      if constexpr (has_meta_twin_v<B>) {
        nn::GPTConfig k = c;
        k.checkpoint = r.strategy;
        StepEstimate est;
        if (r.strategy.planned()) {  // the plan comes certified: its estimate is already made
          const auto cp = nn::resolve_checkpoint<B>(k, batch, seq, so, {!no_profile, 3});
          r.strategy = cp.strategy;
          r.plan_segments = cp.plan.segments;
          est = cp.estimate;
          if (print_segments) std::fprintf(stderr, "%s: %s", r.name.c_str(), cp.table().c_str());
        } else {
          est = estimate_gpt_step<B>(k, batch, seq, so);
        }
        r.predicted_peak = est.peak();
        r.predicted_reserved = est.reserved_peak;
        r.estimate_s = est.seconds;
      } else {
        REMAT_CHECK(!r.strategy.planned(), "gpt_step: ", r.name, " needs the estimator, which "
                    "backend ", B::name, " has no shape-only twin for yet");
      }
      results.push_back(r);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    if (plan_only) {  // what the estimator and the planner say, without stepping
      if constexpr (has_meta_twin_v<B>) {
        const auto any = nn::plan_checkpoint<B>(c, batch, seq, std::int64_t{1} << 60, so, {false, 1},
                                                {true, /*find_leanest=*/true});
        std::printf("{\"impl\":\"remat\",\"min_feasible_bytes\":%lld,\"params\":%lld,"
                    "\"plan_s\":%.6f}\n",
                    static_cast<long long>(any.leanest),
                    static_cast<long long>(model.num_parameters()), any.plan_s);
      }
      for (const Result& r : results)
        std::printf("{\"impl\":\"remat\",\"checkpoint\":\"%s\",\"predicted_peak_bytes\":%lld,"
                    "\"predicted_reserved_bytes\":%lld,\"estimate_s\":%.6f,\"plan_segments\":%d}\n",
                    r.name.c_str(), static_cast<long long>(r.predicted_peak),
                    static_cast<long long>(r.predicted_reserved), r.estimate_s, r.plan_segments);
      return 0;
    }
    const int n = static_cast<int>(results.size());
    // The measured steps' span on the monotonic clock (benchmarks/profile_step.py keeps only
    // the perf samples inside it).
    double measured_from = 0.0, measured_until = 0.0;
    for (int s = 0; s < (warmup + steps) * n; ++s) {
      Result& r = results[static_cast<std::size_t>(s % n)];
      const bool measured = s >= warmup * n;
      StepScope<B> step_scope;  // as gpt_train_step: the CPU arena plans the step's buffers
      model.config.checkpoint = r.strategy;
      tape.segment_stats().clear();
      reset_peak_memory<B>();
      const std::int64_t live0 = memory_stats<B>().live_total;
      const DeviceWork work0 = device_work<B>();
      const double t0 = remat_bench::now_s();
      if (s == warmup * n) measured_from = t0;
      auto loss = model.loss(idx, tgt);
      tape.backward(loss);
      if (optimizer == "adamw") {
        adamw.step();
        adamw.zero_grad();
      } else {
        sgd.step();
        sgd.zero_grad();
      }
      const DeviceWork work1 = device_work<B>();  // before the benchmark's own wait and read
      B::synchronize();  // a GPU step ends when its kernels do
      const double dt = remat_bench::now_s() - t0;
      measured_until = t0 + dt;
      const float l = loss.item();
      if (!r.seen) r.loss_first = l;
      r.seen = true;
      r.loss_last = l;
      if (measured) {
        r.times.push_back(dt);
        const auto st = memory_stats<B>();
        if (st.peak_total > r.peak) r.mem = st;
        r.peak = std::max(r.peak, st.peak_total);
        r.peak_step = std::max(r.peak_step, st.peak_total - live0);
        r.peak_saved = std::max(r.peak_saved, st.peak_of(Category::activations));
        r.segments = tape.segment_stats();
        r.launches = work1.launches - work0.launches;
        r.gemms = work1.gemms - work0.gemms;
        r.host_waits = work1.host_waits - work0.host_waits;
        r.by_kernel.clear();
        for (const auto& [k, c] : work1.by_kernel) {
          const auto before = work0.by_kernel.find(k);
          const std::int64_t d = c - (before == work0.by_kernel.end() ? 0 : before->second);
          if (d > 0) r.by_kernel[k] = d;
        }
      }
    }
    for (const Result& r : results) {
      const auto t = remat_bench::summarize(r.times);
      std::printf(
          "{\"impl\":\"remat\",\"backend\":\"%s\",\"threads\":%d,\"layers\":%d,\"d\":%d,"
          "\"heads\":%d,\"seq\":%d,\"batch\":%d,\"vocab\":%d,\"checkpoint\":\"%s\","
          "\"optimizer\":\"%s\",\"steps\":%d,\"params\":%lld,\"step_s\":%.6f,\"step_s_min\":%.6f,"
          "\"step_s_max\":%.6f,\"tokens_per_s\":%.1f,\"loss_first\":%.6f,\"loss_last\":%.6f,"
          "\"peak_bytes\":%lld,\"predicted_peak_bytes\":%lld,\"predicted_reserved_bytes\":%lld,"
          "\"estimate_s\":%.6f,\"plan_segments\":%d,"
          "\"peak_step_bytes\":%lld,\"peak_saved_bytes\":%lld,"
          "%s,\"rss_before_bytes\":%lld,\"rss_peak_bytes\":%lld,"
          "\"measured_from_s\":%.6f,\"measured_until_s\":%.6f,\"libs\":%s,\"memory\":%s,"
          "\"segments\":%s%s}\n",
          B::describe().c_str(), threads, layers, d, heads, seq, batch, vocab, r.name.c_str(),
          optimizer.c_str(), steps, static_cast<long long>(model.num_parameters()), t.median,
          t.min, t.max, batch * seq / t.median, r.loss_first, r.loss_last,
          static_cast<long long>(r.peak), static_cast<long long>(r.predicted_peak),
          static_cast<long long>(r.predicted_reserved), r.estimate_s,
          r.plan_segments, static_cast<long long>(r.peak_step),
          static_cast<long long>(r.peak_saved), backend_json<B>().c_str(),
          static_cast<long long>(rss_before), static_cast<long long>(remat_bench::rss_bytes("VmHWM")),
          measured_from, measured_until, remat_bench::loaded_libs_json().c_str(),
          r.mem.json().c_str(), remat_bench::segments_json(r.segments).c_str(),
          r.launches < 0 ? ""
                         : (",\"launches_per_step\":" + std::to_string(r.launches) +
                            ",\"gemms_per_step\":" + std::to_string(r.gemms) +
                            ",\"host_waits_per_step\":" + std::to_string(r.host_waits)).c_str());
      if (launch_table && !r.by_kernel.empty()) {
        std::vector<std::pair<std::int64_t, std::string>> rows;
        for (const auto& [k, c] : r.by_kernel) rows.push_back({c, k});
        std::sort(rows.rbegin(), rows.rend());
        std::fprintf(stderr, "launches of one step, checkpoint %s (kernels %lld, cuBLAS %lld, "
                     "host waits %lld):\n", r.name.c_str(), static_cast<long long>(r.launches - r.gemms),
                     static_cast<long long>(r.gemms), static_cast<long long>(r.host_waits));
        for (const auto& [c, k] : rows) std::fprintf(stderr, "  %6lld  %s\n", static_cast<long long>(c), k.c_str());
      }
    }
    if (print_segments) std::fprintf(stderr, "%s", segment_table(tape).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
