#pragma once
// SPDX-License-Identifier: MIT
// gpt_step's body for any backend: times GPT training steps (forward, backward, optimizer) and
// reports the allocator's exact memory, one JSON line per checkpoint strategy.
// Hooks per backend: set_threads<B>, backend_json<B>, device_work<B> (defined by gpt_step.cpp /
// gpt_step_cuda.cu).

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <remat/nn/gpt_plan.hpp>
#include <remat/plan/roofline.hpp>

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
/// --profile: per-kernel device time (CUDA events around every launch and cuBLAS call,
/// backend/cuda/profile.cuh). profile_begin turns it on; profile_end turns it off and returns
/// what was recorded since, by name. No device: nothing.
struct KernelTime {
  std::string name;
  std::int64_t calls = 0;
  double seconds = 0.0;
};
template <class B> void profile_begin();
template <class B> std::vector<KernelTime> profile_end();
/// A graph of the step's forward and backward (CUDA: backend/cuda/graph.cuh); null where the
/// backend has none (the CPU).
struct StepGraph {
  virtual ~StepGraph() = default;
  virtual void capture(const std::function<void()>& fn) = 0;
  virtual void replay() = 0;
};
template <class B> std::unique_ptr<StepGraph> make_step_graph();

/// One strategy's captured forward and backward (NOTE [CUDA graphs]): the graph, its loss and
/// the parameters' gradient buffers it writes. Several strategies take turns on one model, so
/// each keeps its own gradients and lends them to the parameters for the optimizer's update.
template <class B>
struct GraphedStep {
  std::shared_ptr<StepGraph> graph;
  Tensor<B> loss;
  std::vector<std::shared_ptr<Storage<B>>> grads;

  /// Captures model.loss and backward (the gradients must be dropped before).
  void capture(const nn::GPT<B>& model, const std::vector<Tensor<B>>& params, const Tensor<B>& idx,
               const Tensor<B>& tgt) {
    graph = make_step_graph<B>();
    graph->capture([&] {
      loss = model.loss(idx, tgt);
      loss.tape().backward(loss);
    });
    grads.clear();
    for (const auto& p : params) {
      grads.push_back(p.impl()->grad);
      p.clear_grad();
    }
  }
  /// A replay and the optimizer's update on its gradients (then dropped from the parameters
  /// again: the graph keeps them).
  template <class Optimizer>
  void step(const std::vector<Tensor<B>>& params, Optimizer& opt) {
    graph->replay();
    for (std::size_t i = 0; i < params.size(); ++i) params[i].impl()->grad = grads[i];
    opt.step();
    for (const auto& p : params) p.clear_grad();
  }
};

/// The kind of work a kernel or cuBLAS call does, from its name (core/work.hpp's kinds).
inline WorkKind kind_of_kernel(const std::string& k) {
  auto has = [&](const char* w) { return k.find(w) != std::string::npos; };
  if (has("cublas")) return WorkKind::gemm;
  if (has("flash") || has("attention")) return WorkKind::attention;
  if (has("layer_norm") || has("softmax")) return WorkKind::norm;
  if (has("cross_entropy") || has("mean_kernel")) return WorkKind::loss;
  if (has("embedding")) return WorkKind::embedding;
  if (has("adamw") || has("sgd") || has("sum_squares") || has("scale")) return WorkKind::optimizer;
  return WorkKind::pointwise;
}

/// The whole benchmark for backend B (Cpu here; Cuda in gpt_step_cuda.cu).
template <class B>
int gpt_step_main(int argc, char** argv) {
  CLI::App app{"Time GPT training steps and report the exact memory ledger"};
  int layers = 8, d = 256, heads = 4, seq = 256, batch = 4, vocab = 256, steps = 10, warmup = 3;
  int threads = 1, vocab_multiple = 1;
  float lr = 1e-3f;
  std::string optimizer = "adamw", checkpoint = "none", precision = "fp32";
  bool print_segments = false, no_profile = false, plan_only = false, launch_table = false;
  bool grad_hash = false, profile = false, no_graph = false;
  app.add_option("--layers", layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--d", d, "model width (n_embd)")->check(CLI::PositiveNumber);
  app.add_option("--heads", heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "sequence length")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--vocab", vocab, "vocabulary size")->check(CLI::PositiveNumber);
  app.add_option("--vocab-multiple", vocab_multiple,
                 "pad the token embedding's rows to a multiple of this (128: GPT-2's 50257 -> "
                 "50304, llm.c's choice for aligned head GEMMs); the loss covers --vocab classes")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--steps", steps, "measured steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "unmeasured steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "CPU threads (ours, Eigen, OpenBLAS)")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "learning rate");
  app.add_option("--optimizer", optimizer, "adamw or sgd")->check(CLI::IsMember({"adamw", "sgd"}));
  app.add_option("--precision", precision, "fp32, or bf16 (nn::GPTConfig::precision)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--checkpoint", checkpoint,
                 "activation checkpointing: none, block, every:N, sqrt, selective, budget:SIZE or auto; a comma "
                 "list runs them in turns, step by step, and prints one JSON line each");
  app.add_flag("--segments", print_segments, "print the per-segment ledger (and plans) as tables (stderr)");
  app.add_flag("--no-profile", no_profile, "plan budgets from FLOP counts instead of timing a block");
  app.add_flag("--launch-table", launch_table,
               "print the launches of one step per kernel to stderr (the CUDA emulation names them)");
  app.add_flag("--grad-hash", grad_hash,
               "before timing, one forward and backward per strategy at the initial weights: print "
               "a hash of the loss and every parameter's gradient (grad_hash; equal on two runs and "
               "for every strategy when the step is deterministic)");
  app.add_flag("--profile", profile,
               "time every kernel and cuBLAS call of the measured steps with CUDA events; print a "
               "table per strategy to stderr (time per step by kernel, and by kind against the "
               "estimator's FLOPs and bytes: achieved TFLOP/s, GB/s, share of the H200's roofs) "
               "and the top kernels in the JSON (profiled steps are slower: time them apart)");
  app.add_flag("--no-graph", no_graph,
               "send every launch of the step from the host (on CUDA the forward and backward are "
               "otherwise captured once per strategy and replayed as one CUDA graph; the CPU has "
               "no graphs; --profile turns them off)");
  app.add_flag("--plan-only", plan_only, "print the predicted peaks (and the smallest feasible "
               "budget) as JSON lines, without stepping");
  CLI11_PARSE(app, argc, argv);

  try {
    const std::int64_t rss_before = remat_bench::rss_bytes("VmRSS");
    set_threads<B>(threads);
    Tape<B> tape;
    nn::GPTConfig c;
    c.vocab_size = vocab;
    c.vocab_multiple = vocab_multiple;
    c.block_size = seq;
    c.n_layer = layers;
    c.n_embd = d;
    c.n_head = heads;
    c.precision = precision == "bf16" ? DType::bf16 : DType::f32;
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
    const bool use_graph = !no_graph && !profile && make_step_graph<B>() != nullptr;

    // Several strategies (--checkpoint none,block) take turns step by step on the same model,
    // so a drift of the machine's speed hits them alike (eager steps; graphs: see below).
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
      std::string grad_hash;  // --grad-hash: FNV-1a of the loss's and the gradients' bits
      Work work;              // the estimator's count of the step's FLOPs and bytes by kind
      std::map<std::string, KernelTime> profile;  // --profile: summed over its measured steps
      GraphedStep<B> graphed;  // the graph of its forward and backward (use_graph)
      MemoryStats graph_mem;   // ... the ledger at its capture
      std::int64_t graph_peak_step = 0;
      std::vector<SegmentStats> graph_segments;
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
        r.work = est.work;
        r.estimate_s = est.seconds;
      } else {
        REMAT_CHECK(!r.strategy.planned(), "gpt_step: ", r.name, " needs the estimator, which "
                    "backend ", B::name, " has no shape-only twin for yet");
      }
      results.push_back(r);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    // The CUDA backend (on a GPU or emulated): the step's predicted time on an H200 from the
    // estimator's FLOP and byte counts and the launches counted here (plan/roofline.hpp).
    const DeviceRoofline h200 = DeviceRoofline::h200();
    const bool mma_attention = d % heads == 0 && (d / heads == 64 || d / heads == 128);
    auto prediction_json = [&](const Result& r) -> std::string {
      if (std::string(B::name) != "cuda" || r.work.total_flops() == 0 || r.launches < 0) return "";
      const StepPrediction p = predict_step(r.work, r.launches, h200, mma_attention);
      std::string j = ",\"predicted_h200_step_s\":" + std::to_string(p.total_s) +
                      ",\"predicted_h200_tokens_per_s\":" + std::to_string(batch * seq / p.total_s) +
                      ",\"predicted_h200_roofline_s\":" + std::to_string(p.roofline_s) +
                      ",\"predicted_h200_launch_s\":" + std::to_string(p.launch_s) + ",\"work\":{";
      for (int i = 0; i < kWorkKinds; ++i)
        j += std::string(i ? "," : "") + "\"" + work_kind_name(static_cast<WorkKind>(i)) +
             "\":{\"flops\":" + std::to_string(r.work.flops[i]) + ",\"bytes\":" +
             std::to_string(r.work.bytes[i]) + ",\"predicted_s\":" + std::to_string(p.seconds[i]) +
             ",\"memory_bound\":" + (p.memory_bound[i] ? "true" : "false") + "}";
      return j + "}";
    };
    // --plan-only on the CUDA backend: launches per step depend on the layers, the ops and the
    // strategy, not on d, T or V; count them on a small model with the same layers (two steps,
    // the second counted), so the prediction holds at shapes the emulation could not step.
    auto count_launches = [&](Result& r) {
      nn::GPTConfig small = c;
      // one head of the model's head size class: fused attention up to 128 (3 launches each way
      // at any size), above it the materialized path (per batch row: batch 1 here undercounts)
      small.n_head = 1;
      small.n_embd = d / heads <= 128 ? 64 : d / heads;
      small.vocab_size = 64;
      small.block_size = 16;
      small.checkpoint = r.strategy;
      Tape<B> t2;
      nn::GPT<B> m2(t2, small);
      optim::AdamW<B> a2(m2.parameters(), {lr});
      optim::SGD<B> s2(m2.parameters(), {lr, 0.9f});
      const std::vector<std::int32_t> ids(16, 1);
      if (use_graph) {  // a replay and the update, the second one counted
        const auto x2 = t2.tokens({1, 16}, ids), y2 = t2.tokens({1, 16}, ids);
        GraphedStep<B> g;
        g.capture(m2, m2.parameters(), x2, y2);
        for (int s = 0; s < 2; ++s) {
          const DeviceWork w0 = device_work<B>();
          if (optimizer == "adamw")
            g.step(m2.parameters(), a2);
          else
            g.step(m2.parameters(), s2);
          r.launches = device_work<B>().launches - w0.launches;
        }
        return;
      }
      for (int s = 0; s < 2; ++s) {
        const DeviceWork w0 = device_work<B>();
        const auto x2 = t2.tokens({1, 16}, ids), y2 = t2.tokens({1, 16}, ids);
        if (optimizer == "adamw")
          (void)gpt_train_step(m2, a2, x2, y2);
        else
          (void)gpt_train_step(m2, s2, x2, y2);
        r.launches = device_work<B>().launches - w0.launches;
      }
    };
    if (plan_only) {  // what the estimator and the planner say, without stepping
      if constexpr (has_meta_twin_v<B>) {
        const auto any = nn::plan_checkpoint<B>(c, batch, seq, std::int64_t{1} << 60, so, {false, 1},
                                                {true, /*find_leanest=*/true});
        std::printf("{\"impl\":\"remat\",\"min_feasible_bytes\":%lld,\"params\":%lld,"
                    "\"plan_s\":%.6f}\n",
                    static_cast<long long>(any.leanest),
                    static_cast<long long>(model.num_parameters()), any.plan_s);
      }
      for (Result& r : results) {
        if (std::string(B::name) == "cuda" && r.work.total_flops() > 0) count_launches(r);
        std::printf("{\"impl\":\"remat\",\"checkpoint\":\"%s\",\"predicted_peak_bytes\":%lld,"
                    "\"predicted_reserved_bytes\":%lld,\"estimate_s\":%.6f,\"plan_segments\":%d,"
                    "\"graph\":%s%s%s}\n",
                    r.name.c_str(), static_cast<long long>(r.predicted_peak),
                    static_cast<long long>(r.predicted_reserved), r.estimate_s, r.plan_segments,
                    use_graph ? "true" : "false", r.launches < 0 ? "" : (",\"launches_per_step\":" + std::to_string(r.launches)).c_str(),
                    prediction_json(r).c_str());
      }
      return 0;
    }
    if (grad_hash)  // every strategy at the same (initial) weights: no optimizer step here
      for (Result& r : results) {
        StepScope<B> step_scope;
        model.config.checkpoint = r.strategy;
        auto loss = model.loss(idx, tgt);
        tape.backward(loss);
        std::uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bits
        auto mix = [&h](const void* data, std::size_t bytes) {
          for (std::size_t i = 0; i < bytes; ++i) {
            h ^= static_cast<const unsigned char*>(data)[i];
            h *= 1099511628211ull;
          }
        };
        const float l = loss.item();
        mix(&l, sizeof l);
        for (const auto& p : params) {
          const auto g = p.grad().template to_vector<float>();
          mix(g.data(), g.size() * sizeof(float));
        }
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
        r.grad_hash = hex;
        adamw.zero_grad();
      }
    const int n = static_cast<int>(results.size());
    // The measured steps' span on the monotonic clock (benchmarks/profile_step.py keeps only
    // the perf samples inside it).
    double measured_from = 0.0, measured_until = 0.0;
    // Under graphs the strategies run one after the other instead, and each one's graph (its
    // held blocks and gradients) goes after its last step, so at most one graph holds memory.
    const int per = warmup + steps;
    for (int s = 0; s < per * n; ++s) {
      Result& r = results[static_cast<std::size_t>(use_graph ? s / per : s % n)];
      const bool measured = use_graph ? s % per >= warmup : s >= warmup * n;
      StepScope<B> step_scope;  // as gpt_train_step: the CPU arena plans the step's buffers
      model.config.checkpoint = r.strategy;
      tape.segment_stats().clear();
      reset_peak_memory<B>();
      std::int64_t live0 = memory_stats<B>().live_total;
      // under graphs the warm-up steps are eager (the pool settles); the first measured step
      // captures (the ledger sees it) and every measured step replays
      const bool graphed = use_graph && measured;
      if (graphed && !r.graphed.graph) {
        r.graphed.capture(model, params, idx, tgt);
        r.graph_mem = memory_stats<B>();
        r.graph_peak_step = r.graph_mem.peak_total - live0;
        r.graph_segments = tape.segment_stats();
        reset_peak_memory<B>();
        live0 = memory_stats<B>().live_total;
      }
      const DeviceWork work0 = device_work<B>();
      if (profile && measured) profile_begin<B>();
      const double t0 = remat_bench::now_s();
      if (measured && measured_from == 0.0) measured_from = t0;
      Tensor<B> loss;
      if (graphed) {
        if (optimizer == "adamw")
          r.graphed.step(params, adamw);
        else
          r.graphed.step(params, sgd);
        loss = r.graphed.loss;
      } else {
        loss = model.loss(idx, tgt);
        tape.backward(loss);
        if (optimizer == "adamw") {
          adamw.step();
          adamw.zero_grad();
        } else {
          sgd.step();
          sgd.zero_grad();
        }
      }
      const DeviceWork work1 = device_work<B>();  // before the benchmark's own wait and read
      B::synchronize();  // a GPU step ends when its kernels do
      const double dt = remat_bench::now_s() - t0;
      measured_until = t0 + dt;
      if (profile && measured)
        for (const KernelTime& k : profile_end<B>()) {
          KernelTime& into = r.profile[k.name];
          into.name = k.name;
          into.calls += k.calls;
          into.seconds += k.seconds;
        }
      const float l = loss.item();
      if (!r.seen) r.loss_first = l;
      r.seen = true;
      r.loss_last = l;
      if (measured) {
        r.times.push_back(dt);
        // under a graph the host's ledger saw the step at the capture (the replays change
        // nothing there): its peaks are the capture's
        const auto st = graphed ? r.graph_mem : memory_stats<B>();
        const std::int64_t step_peak = graphed ? r.graph_peak_step : st.peak_total - live0;
        if (st.peak_total > r.peak) r.mem = st;
        r.peak = std::max(r.peak, st.peak_total);
        r.peak_step = std::max(r.peak_step, step_peak);
        r.peak_saved = std::max(r.peak_saved, st.peak_of(Category::activations));
        r.segments = graphed ? r.graph_segments : tape.segment_stats();
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
      if (use_graph && s % per == per - 1) {
        r.graphed = GraphedStep<B>{};  // its last step: the graph and its buffers go
        B::synchronize();
      }
    }
    // --profile: the kernels by time per step, and by kind against the estimator's work
    auto sorted_profile = [&](const Result& r) {
      std::vector<KernelTime> v;
      for (const auto& [name, k] : r.profile) v.push_back(k);
      std::sort(v.begin(), v.end(), [](const KernelTime& a, const KernelTime& b) { return a.seconds > b.seconds; });
      return v;
    };
    auto profile_json = [&](const Result& r) -> std::string {
      if (r.profile.empty()) return "";
      std::string j = ",\"profile\":[";
      const auto v = sorted_profile(r);
      for (std::size_t i = 0; i < v.size() && i < 40; ++i)
        j += std::string(i ? "," : "") + "{\"name\":\"" + v[i].name + "\",\"calls_per_step\":" +
             std::to_string(static_cast<double>(v[i].calls) / steps) + ",\"ms_per_step\":" +
             std::to_string(1e3 * v[i].seconds / steps) + "}";
      return j + "]";
    };
    auto print_profile = [&](const Result& r) {
      const auto v = sorted_profile(r);
      double total = 0;
      double by_kind[kWorkKinds] = {};
      for (const KernelTime& k : v) {
        total += k.seconds;
        by_kind[static_cast<int>(kind_of_kernel(k.name))] += k.seconds;
      }
      std::fprintf(stderr, "profile, checkpoint %s: %.3f ms of device time a step in %zu kernels "
                   "and cuBLAS calls (events around each launch)\n  %9s %8s %6s  %s\n",
                   r.name.c_str(), 1e3 * total / steps, v.size(), "ms/step", "calls", "share", "kernel");
      for (const KernelTime& k : v)
        std::fprintf(stderr, "  %9.3f %8.1f %5.1f%%  %s\n", 1e3 * k.seconds / steps,
                     static_cast<double>(k.calls) / steps, total > 0 ? 100 * k.seconds / total : 0.0,
                     k.name.c_str());
      if (r.work.total_flops() == 0) return;
      std::fprintf(stderr, "  by kind, against the estimator's work and %s's roofs:\n  %-10s %9s %9s %9s %9s %9s\n",
                   h200.name.c_str(), "kind", "ms/step", "TFLOP/s", "GB/s", "%flops", "%bytes");
      for (int i = 0; i < kWorkKinds; ++i) {
        const double sec = by_kind[i] / steps;
        if (sec <= 0) continue;
        const double tf = r.work.flops[i] / sec / 1e12, gbs = r.work.bytes[i] / sec / 1e9;
        const double roof = i == static_cast<int>(WorkKind::gemm) ||
                                    (i == static_cast<int>(WorkKind::attention) && mma_attention)
                                ? h200.tensor_flops : h200.simt_flops;
        std::fprintf(stderr, "  %-10s %9.3f %9.2f %9.1f %8.1f%% %8.1f%%\n",
                     work_kind_name(static_cast<WorkKind>(i)), 1e3 * sec, tf, gbs,
                     100 * tf * 1e12 / roof, 100 * gbs * 1e9 / h200.bytes_per_s);
      }
    };
    for (const Result& r : results) {
      const auto t = remat_bench::summarize(r.times);
      std::printf(
          "{\"impl\":\"remat\",\"backend\":\"%s\",\"threads\":%d,\"layers\":%d,\"d\":%d,"
          "\"heads\":%d,\"seq\":%d,\"batch\":%d,\"vocab\":%d,\"vocab_padded\":%lld,"
          "\"checkpoint\":\"%s\",\"graph\":%s,\"precision\":\"%s\","
          "\"optimizer\":\"%s\",\"steps\":%d,\"params\":%lld,\"step_s\":%.6f,\"step_s_min\":%.6f,"
          "\"step_s_max\":%.6f,\"tokens_per_s\":%.1f,\"loss_first\":%.6f,\"loss_last\":%.6f,"
          "\"peak_bytes\":%lld,\"predicted_peak_bytes\":%lld,\"predicted_reserved_bytes\":%lld,"
          "\"estimate_s\":%.6f,\"plan_segments\":%d,"
          "\"peak_step_bytes\":%lld,\"peak_saved_bytes\":%lld,"
          "%s,\"rss_before_bytes\":%lld,\"rss_peak_bytes\":%lld,"
          "\"measured_from_s\":%.6f,\"measured_until_s\":%.6f,\"libs\":%s,\"memory\":%s,"
          "\"segments\":%s%s%s%s}\n",
          B::describe().c_str(), threads, layers, d, heads, seq, batch, vocab,
          static_cast<long long>(c.padded_vocab()), r.name.c_str(), use_graph ? "true" : "false",
          precision.c_str(), optimizer.c_str(), steps, static_cast<long long>(model.num_parameters()), t.median,
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
                            ",\"host_waits_per_step\":" + std::to_string(r.host_waits)).c_str(),
          r.grad_hash.empty() ? "" : (",\"grad_hash\":\"" + r.grad_hash + "\"").c_str(),
          (prediction_json(r) + profile_json(r)).c_str());
      if (!r.profile.empty()) print_profile(r);
      if (launch_table && !r.by_kernel.empty()) {
        std::vector<std::pair<std::int64_t, std::string>> rows;
        for (const auto& [k, c] : r.by_kernel) rows.push_back({c, k});
        std::sort(rows.rbegin(), rows.rend());
        std::fprintf(stderr, "launches of one step, checkpoint %s (kernels %lld, cuBLAS %lld, "
                     "host waits %lld):\n", r.name.c_str(), static_cast<long long>(r.launches - r.gemms),
                     static_cast<long long>(r.gemms), static_cast<long long>(r.host_waits));
        for (const auto& [c, k] : rows) std::fprintf(stderr, "  %6lld  %s\n", static_cast<long long>(c), k.c_str());
        if (!prediction_json(r).empty()) {
          const StepPrediction p = predict_step(r.work, r.launches, h200, mma_attention);
          std::fprintf(stderr, "predicted on %s, checkpoint %s (attention on %s): %.2f ms "
                       "(the roofline's floor %.2f ms)\n  %-10s %10s %10s %9s  %s\n",
                       h200.name.c_str(), r.name.c_str(), mma_attention ? "tensor cores" : "CUDA cores",
                       1e3 * p.total_s, 1e3 * p.roofline_s, "kind", "GFLOP", "GB", "ms", "bound by");
          for (int i = 0; i < kWorkKinds; ++i)
            std::fprintf(stderr, "  %-10s %10.2f %10.3f %9.3f  %s\n", work_kind_name(static_cast<WorkKind>(i)),
                         r.work.flops[i] / 1e9, r.work.bytes[i] / 1e9, 1e3 * p.seconds[i],
                         p.memory_bound[i] ? "memory" : "arithmetic");
          std::fprintf(stderr, "  %-10s %10lld %10s %9.3f\n", "launches", static_cast<long long>(r.launches), "",
                       1e3 * p.launch_s);
        }
      }
    }
    if (print_segments) std::fprintf(stderr, "%s", segment_table(tape).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
