// SPDX-License-Identifier: MIT
// 04_own_model: your own model under a byte budget. A Llama-style decoder written against the
// public API (llama.hpp: composed RMSNorm and RoPE, grouped-query attention, a custom SwiGLU
// op), cut into stages, planned by remat::plan_stages for the budget, and trained by the plan.
// It prints the plan, then checks what the planner promises:
//   - the certified peak (the estimate, on the shape-only twin) = the real ledger's, to the byte;
//   - the process's memory growth (VmHWM - VmRSS before) against the ledger's peak, and with
//     --check-process within what the plan reserves for the process (the ledger's peak plus
//     plan::process_headroom: the allocator's slack, OpenBLAS's packing buffers, code), and with
//     --check-rss PCT within PCT percent of the ledger's peak (a constant of 4-10 MiB, mostly
//     OpenBLAS's, makes that a test of sizes from a few hundred MiB);
//   - the planned run's losses and weights = the plain run's, bit for bit;
//   - every checkpoint policy, each block a segment with it, keeps no more saved activations
//     than the plain run (the ledger's peak of them over a step);
//   - the layers composed from primitives keep at most 1.1x the activations of the fused ops
//     (remat::rms_norm, the SwiGLU op): as they are (their pointwise outputs kept as recipes,
//     NOTE [saved as a recipe]) and each inside checkpoint(), with the same bits as the plain
//     composed run;
//   - with --compare, the plan's step time against every fixed schedule that fits the budget.
// Exits 1 when a check fails.
//
//   Run: build/examples/04_own_model [--budget SIZE] [--layers N] [--dim D] [--seq T]
//        [--batch B] [--steps N] [--measure] [--compare] [--no-plain] [--check-process]
//        [--check-rss PCT]
//   Without --budget: 40% of the way from the leanest plan's need to keeping everything.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <remat/plan/fit_stages.hpp>
#include <remat/remat.hpp>

#include "llama.hpp"

using namespace remat;

namespace {

std::int64_t status_bytes(const char* field) {  // a kB field of /proc/self/status; -1 if none
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  const std::size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, n) == 0) kb = std::atoll(line + n);
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

struct Run {
  std::vector<float> losses;
  std::vector<std::vector<float>> params;
  std::int64_t ledger_peak = 0;
  double step_ms = 0;  // median over the steps after the first
  std::int64_t hwm = 0;  // VmHWM after the steps (before the weights are copied out)
};

template <class Build>
Run train(const Build& build, const std::shared_ptr<const plan::Schedule>& schedule, int steps,
          bool keep_params) {
  Run r;
  Tape<Cpu> tape(1);
  const StageProgram<Cpu> p = build(tape);
  optim::AdamW<Cpu> opt(p.parameters, {1e-3f});
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    reset_peak_memory<Cpu>();
    const auto t0 = std::chrono::steady_clock::now();
    r.losses.push_back(optim::train_step(opt, [&] { return p.stages(p.input, schedule); }).item());
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    r.ledger_peak = memory_stats<Cpu>().peak_total;
    if (std::getenv("OWN_MODEL_TRACE"))
      std::printf("  step %d: ledger peak %lld, VmHWM %lld, VmRSS %lld\n", i + 1,
                  (long long)r.ledger_peak, (long long)status_bytes("VmHWM:"),
                  (long long)status_bytes("VmRSS:"));
  }
  if (ms.size() > 1) ms.erase(ms.begin());  // the first step plans the arena's layout
  std::sort(ms.begin(), ms.end());
  r.step_ms = ms[ms.size() / 2];
  r.hwm = status_bytes("VmHWM:");
  if (keep_params)
    for (const auto& q : p.parameters) r.params.push_back(q.to_vector());
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  llama::Config c;
  c.vocab = 512, c.dim = 128, c.heads = 4, c.kv_heads = 2, c.hidden = 344, c.layers = 8;
  std::int64_t batch = 4, seq = 128, budget = 0;
  int steps = 4;
  bool compare = false, plain = true, check_process = false;
  double check_rss = -1;  // percent
  StagePlanOptions opts;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      REMAT_CHECK(i + 1 < argc, "04_own_model: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--budget") budget = parse_bytes(next(), "--budget");
    else if (a == "--layers") c.layers = std::stoll(next());
    else if (a == "--dim") c.dim = std::stoll(next()), c.hidden = c.dim * 8 / 3 / 8 * 8;
    else if (a == "--seq") seq = std::stoll(next());
    else if (a == "--batch") batch = std::stoll(next());
    else if (a == "--steps") steps = std::max(2, std::stoi(next()));
    else if (a == "--measure") opts.measure = true;
    else if (a == "--compare") compare = true;
    else if (a == "--no-plain") plain = false;
    else if (a == "--check-process") check_process = true;
    else if (a == "--check-rss") check_rss = std::stod(next());
    else REMAT_CHECK(false, "04_own_model: unknown argument '", a, "' (see the comment at the top of main.cpp)");
  }
  c.max_seq = seq;
  std::vector<std::int32_t> ids, tgt;
  for (std::int64_t i = 0; i < batch * seq; ++i) {  // a fixed pseudo-text: only sizes matter
    ids.push_back(static_cast<std::int32_t>((i * 7919 + 13) % c.vocab));
    tgt.push_back(static_cast<std::int32_t>((i * 7919 + 7932) % c.vocab));
  }
  auto build = [&](auto& tape) { return llama::program(tape, c, batch, seq, ids, tgt); };

  const std::int64_t rss0 = status_bytes("VmRSS:");
  const plan::Chain chain = stage_chain<Cpu>(build, opts);
  const StepEstimate all = estimate_stages_step<Cpu>(build, plan::keep_all(chain));
  if (budget <= 0) {  // 40% of the way from the leanest plan's need to keeping everything
    StagePlanOptions lean = opts;
    lean.find_leanest = true;
    const std::int64_t top = all.peak() + plan::process_headroom(plan::process_overhead(), all.peak());
    const std::int64_t low = plan_stages<Cpu>(build, top, lean).leanest;
    budget = low + (top - low) * 4 / 10;
  }
  const StagePlan fit = plan_stages<Cpu>(build, budget, opts);
  std::printf("model: %lld layers, dim %lld, %lld heads (%lld kv), hidden %lld, vocab %lld; "
              "batch %lld x seq %lld; keeping everything needs %s\n%s",
              (long long)c.layers, (long long)c.dim, (long long)c.heads, (long long)c.kv_heads,
              (long long)c.hidden, (long long)c.vocab, (long long)batch, (long long)seq,
              format_bytes(all.peak()).c_str(), fit.table().c_str());
  std::printf("planned in %.1f ms: %s\n", fit.plan_s * 1e3, fit.summary().c_str());

  std::printf("planning grew the process by %s\n", format_bytes(status_bytes("VmHWM:") - rss0).c_str());
  bool ok = true;
  const Run planned = train(build, fit.schedule, steps, plain);
  const std::int64_t growth = planned.hwm - rss0;
  const double rss_vs_ledger = 100.0 * (double(growth) / double(planned.ledger_peak) - 1.0);
  std::printf("planned run: %d steps, median %.1f ms a step, loss %.4f -> %.4f\n", steps,
              planned.step_ms, planned.losses.front(), planned.losses.back());
  std::printf("ledger peak %lld B, certified %lld B: %s\n", (long long)planned.ledger_peak,
              (long long)fit.peak(), planned.ledger_peak == fit.peak() ? "equal" : "DIFFERENT");
  std::printf("process growth (VmHWM - VmRSS before) %s, ledger peak %s: %+.2f%%; the plan "
              "reserved %s beyond the ledger\n",
              format_bytes(growth).c_str(), format_bytes(planned.ledger_peak).c_str(),
              rss_vs_ledger, format_bytes(fit.overhead).c_str());
  ok = ok && planned.ledger_peak == fit.peak() && fit.process_peak() <= budget;
  if (check_process) {  // RSS is only meaningful without a sanitizer's shadow memory
    const std::int64_t reserved = fit.peak() + plan::process_headroom(fit.overhead, fit.peak());
    std::printf("process growth %s the %s the plan reserves for the process\n",
                growth <= reserved ? "within" : "ABOVE", format_bytes(reserved).c_str());
    ok = ok && growth <= reserved;
  }
  if (check_rss >= 0) {
    std::printf("process growth %s %.1f%% of the ledger's peak\n",
                rss_vs_ledger <= check_rss ? "within" : "NOT within", check_rss);
    ok = ok && rss_vs_ledger <= check_rss;
  }
  if (plain) {
    const auto all_s = std::make_shared<const plan::Schedule>(plan::keep_all(chain));
    const Run p = train(build, all_s, steps, true);
    const bool same = p.losses == planned.losses && p.params == planned.params;
    std::printf("plain run: ledger peak %s; losses and weights after %d steps %s the planned run's\n",
                format_bytes(p.ledger_peak).c_str(), steps, same ? "equal, bit for bit," : "DIFFER from");
    ok = ok && same;
  }
  {  // every policy, each block a segment with it: keeps no more than the plain run
    const std::vector<KeepOption> policies = {
        KeepOption::keep_all(), KeepOption::with(policy::save_linear()),
        KeepOption::with(policy::save_matmuls()), KeepOption::with(policy::save_all_but_attention()),
        KeepOption::with(policy::megatron_selective())};
    auto build_p = [&](auto& tape) {
      return llama::program(tape, c, batch, seq, ids, tgt, policies);
    };
    const plan::Chain pc = stage_chain<Cpu>(build_p, opts);
    const std::int64_t plain_kept = all.step.peak_of(Category::activations);
    std::printf("%-32s %16s %12s\n", "every block a segment with", "kept at most", "step peak");
    for (const plan::NamedSchedule& f : fixed_stage_schedules(pc)) {
      if (f.name == "keep_all") continue;
      const StepEstimate e = estimate_stages_step<Cpu>(build_p, f.schedule);
      const std::int64_t kept = e.step.peak_of(Category::activations);
      std::printf("%-32s %16s %12s%s\n", f.name.c_str(), format_bytes(kept).c_str(),
                  format_bytes(e.peak()).c_str(), kept <= plain_kept ? "" : "  MORE than plain");
      ok = ok && kept <= plain_kept;
    }
    std::printf("%-32s %16s %12s\n", "(the plain run)", format_bytes(plain_kept).c_str(),
                format_bytes(all.peak()).c_str());
  }
  {  // the layers composed from primitives against the library's fused ops (RMSNorm) and the
     // custom SwiGLU op: activations kept over a plain step, and composed layers inside
     // checkpoint(), whose pointwise interiors backward recomputes: the same bits, fused bytes
    auto variant = [&](bool fused, bool recompute) {
      llama::Config v = c;
      v.fused_norm = v.fused_swiglu = fused;
      v.recompute_composed = recompute;
      return [v, batch, seq, &ids, &tgt](auto& tape) {
        return llama::program(tape, v, batch, seq, ids, tgt);
      };
    };
    auto kept = [&](const auto& b) {
      const plan::Chain ch = stage_chain<Cpu>(b, opts);
      return estimate_stages_step<Cpu>(b, plan::keep_all(ch)).step.peak_of(Category::activations);
    };
    const std::int64_t fused = kept(variant(true, false)), composed = kept(variant(false, false)),
                       recomputed = kept(variant(false, true));
    std::printf("activations kept by a plain step: fused RMSNorm and SwiGLU %s; composed from "
                "primitives %s (%.3fx); composed inside checkpoint() %s (%.3fx)\n",
                format_bytes(fused).c_str(), format_bytes(composed).c_str(),
                double(composed) / double(fused), format_bytes(recomputed).c_str(),
                double(recomputed) / double(fused));
    ok = ok && composed * 10 <= fused * 11 && recomputed * 10 <= fused * 11;
    if (plain) {
      const auto keep = [](const auto& b) {
        return std::make_shared<const plan::Schedule>(plan::keep_all(stage_chain<Cpu>(b, {})));
      };
      const auto b0 = variant(false, false), b1 = variant(false, true);
      const Run r0 = train(b0, keep(b0), 2, true), r1 = train(b1, keep(b1), 2, true);
      const bool same = r0.losses == r1.losses && r0.params == r1.params;
      std::printf("composed inside checkpoint(): losses and weights after 2 steps %s the plain "
                  "composed run's\n", same ? "equal, bit for bit," : "DIFFER from");
      ok = ok && same;
    }
  }
  if (compare) {  // each fixed schedule that fits the budget, timed in this process
    std::printf("%-24s %12s %12s %10s\n", "schedule", "certified", "need", "step ms");
    double fastest = 1e300;
    for (const plan::NamedSchedule& f : fixed_stage_schedules(chain)) {
      const StepEstimate e = estimate_stages_step<Cpu>(build, f.schedule);
      const std::int64_t need = e.peak() + plan::process_headroom(plan::process_overhead(), e.peak());
      if (need > budget) {
        std::printf("%-24s %12s %12s %10s\n", f.name.c_str(), format_bytes(e.peak()).c_str(),
                    format_bytes(need).c_str(), "over");
        continue;
      }
      const Run r = train(build, std::make_shared<const plan::Schedule>(f.schedule), steps, false);
      fastest = std::min(fastest, r.step_ms);
      std::printf("%-24s %12s %12s %10.1f\n", f.name.c_str(), format_bytes(e.peak()).c_str(),
                  format_bytes(need).c_str(), r.step_ms);
    }
    const Run again = train(build, fit.schedule, steps, false);
    std::printf("%-24s %12s %12s %10.1f  (%.3fx the fastest fixed schedule that fits)\n", "plan",
                format_bytes(fit.peak()).c_str(),
                format_bytes(fit.peak() + plan::process_headroom(fit.overhead, fit.peak())).c_str(),
                again.step_ms, fastest < 1e300 ? again.step_ms / fastest : 0.0);
  }
  std::printf("%s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "04_own_model: %s\n", e.what());
  return 2;
}
