#!/usr/bin/env python3
"""Fit a GPT into N bytes: step time against peak memory for remat's planner at many budgets,
for remat's fixed strategies and for PyTorch's checkpoint_sequential at each segment count.

Three passes, one after the other (never two processes at once):
  1. memory: one fresh process per point (MALLOC_MMAP_THRESHOLD_=65536), a few steps: the
     ledger's peak, the process's RSS growth, the estimator's prediction, the budget;
  2. time: remat's points in one process, taking turns step by step (gpt_step's comma list),
     medians of --steps steps after --warmup, in the plain environment;
  3. PyTorch 1.13 (/usr/bin/python3): none, block and checkpoint_sequential with K segments, two
     fresh processes each: the median step time in the plain environment (the variable costs
     PyTorch's allocator ~7%), then the RSS growth with the variable (--mem-steps steps).
Writes <out>/planner_pareto.{json,csv,md,png}.

    python3 benchmarks/planner_pareto.py --layers 24 --d 256 --seq 256 --batch 4 --budgets 12
"""
import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bin", default=os.path.join("build", "benchmarks", "gpt_step"))
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--budgets", type=int, default=12, help="planner budgets, min feasible .. none")
    ap.add_argument("--up-to", type=float, default=0,
                    help="the largest budget in MiB (default: none's peak), to sweep the small ones")
    ap.add_argument("--fixed", default="none,selective,block,every:2,every:4,sqrt")
    ap.add_argument("--torch-segments", default="2,3,4,6,8,12")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--mem-steps", type=int, default=3)
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-time", action="store_true", help="memory pass only")
    ap.add_argument("--tag", default="", help="suffix of the output files")
    ap.add_argument("--out-dir", default=os.path.join("benchmarks", "results"))
    ap.add_argument("--plot-only", action="store_true",
                    help="redraw <out-dir>/planner_pareto<tag>.png from its .json; run nothing")
    a = ap.parse_args()
    if a.plot_only:
        base = os.path.join(a.out_dir, "planner_pareto" + a.tag)
        with open(base + ".json") as f:
            doc = json.load(f)
        plot(doc["rows"], doc["meta"]["config"], base + ".png")
        return

    shape = ["--layers", str(a.layers), "--d", str(a.d), "--heads", str(a.heads), "--seq", str(a.seq),
             "--batch", str(a.batch), "--vocab", str(a.vocab), "--threads", str(a.threads)]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS=str(a.threads))
    time_env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    time_env.pop("MALLOC_MMAP_THRESHOLD_", None)
    fixed = a.fixed.split(",")
    plan0 = run_json([a.bin] + shape + ["--plan-only", "--checkpoint", ",".join(fixed)], env)
    lo = plan0[0]["min_feasible_bytes"]  # a budget of the process: ledger + headroom
    none_ledger = next(r["predicted_peak_bytes"] for r in plan0[1:] if r["checkpoint"] == "none")
    # nn::process_headroom: 1% (at least 1 MiB) of the ledger's peak + nn::process_overhead
    overhead = 4 * 2**20 + 1024 * min(4096, max(a.vocab, 4 * a.d, a.batch * a.seq))
    none = none_ledger + max(none_ledger // 100, 2**20) + overhead
    top = min(none, int(a.up_to * 2**20)) if a.up_to > 0 else none
    budgets = [int(lo + (top - lo) * i / max(1, a.budgets - 1)) for i in range(a.budgets)]
    budget_names = ["budget:%d" % b for b in budgets]
    print("budgets from %.1f to %.1f MiB" % (lo / 2**20, top / 2**20), file=sys.stderr)

    # 1. memory, one process per point
    rows = {}
    for name in budget_names + fixed:
        r = run_json([a.bin] + shape + ["--checkpoint", name, "--steps", str(a.mem_steps),
                                        "--warmup", "1"], env)[0]
        rows[name] = {
            "series": "remat planner" if name.startswith("budget:") else "remat fixed",
            "checkpoint": name,
            "budget_bytes": int(name[7:]) if name.startswith("budget:") else None,
            "predicted_peak_bytes": r["predicted_peak_bytes"],
            "predicted_process_bytes": r["predicted_peak_bytes"] + overhead,
            "ledger_peak_bytes": r["peak_bytes"],
            "rss_growth_bytes": r["rss_peak_bytes"] - r["rss_before_bytes"],
            "plan_segments": r["plan_segments"],
            "step_s_alone": r["step_s"],
        }
        print("%-22s ledger %8.1f MiB  rss %8.1f MiB  predicted %8.1f MiB" % (
            name, r["peak_bytes"] / 2**20, rows[name]["rss_growth_bytes"] / 2**20,
            r["predicted_peak_bytes"] / 2**20), file=sys.stderr)

    # 2. time, remat's points taking turns in one process
    if not a.skip_time:
        names = budget_names + fixed
        for r in run_json([a.bin] + shape + ["--checkpoint", ",".join(names), "--steps",
                                             str(a.steps), "--warmup", str(a.warmup)], time_env):
            rows[r["checkpoint"]]["step_s"] = r["step_s"]

    # 3. PyTorch, one process per point
    torch_rows = []
    if not a.skip_torch:
        for ck in ["none", "block"] + ["seq:" + k for k in a.torch_segments.split(",")]:
            script = ["/usr/bin/python3", os.path.join("benchmarks", "torch_gpt_step.py")] + shape
            r = run_json(script + ["--checkpoint", ck, "--steps", str(a.steps), "--warmup",
                                   str(a.warmup)], time_env)[0]
            m = run_json(script + ["--checkpoint", ck, "--steps", str(a.mem_steps), "--warmup", "1"],
                         env)[0]
            torch_rows.append({"series": "pytorch", "checkpoint": ck, "step_s": r["step_s"],
                               "rss_growth_bytes": m["rss_growth_bytes"]})
            print("torch %-8s %.3f s  rss %.1f MiB" % (ck, r["step_s"], m["rss_growth_bytes"] / 2**20),
                  file=sys.stderr)

    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": "%s, %d cores (%s)" % (platform.machine(), os.cpu_count() or 0, platform.node() and "VM"),
        "command": "python3 benchmarks/planner_pareto.py " + " ".join(sys.argv[1:]),
        "config": {k: getattr(a, k) for k in ("layers", "d", "heads", "seq", "batch", "vocab", "threads")},
        "min_feasible_bytes": lo, "none_predicted_bytes": none,
    }
    os.makedirs(a.out_dir, exist_ok=True)
    base = os.path.join(a.out_dir, "planner_pareto" + a.tag)
    allrows = list(rows.values()) + torch_rows
    with open(base + ".json", "w") as f:
        json.dump({"meta": meta, "rows": allrows}, f, indent=1)
    keys = ["series", "checkpoint", "budget_bytes", "predicted_peak_bytes", "ledger_peak_bytes",
            "predicted_process_bytes", "rss_growth_bytes", "step_s", "plan_segments"]
    with open(base + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for r in allrows:
            w.writerow(r)
    mib = lambda b: "" if b is None else "%.1f" % (b / 2**20)
    with open(base + ".md", "w") as f:
        f.write("# Fit a GPT into N bytes: the planner's Pareto curve\n\n")
        f.write("%s; %s; GPT L%d d%d h%d T%d B%d V%d, fp32, AdamW, %d thread(s).\n\n" % (
            meta["date"], meta["machine"], a.layers, a.d, a.heads, a.seq, a.batch, a.vocab, a.threads))
        f.write("Command: `%s`\n\n" % meta["command"])
        f.write("Memory: one fresh process per point, `MALLOC_MMAP_THRESHOLD_=65536`; RSS growth = "
                "VmHWM - VmRSS at start; ledger = remat's exact allocator peak; predicted = the "
                "estimator (shape-only dry run). Time: remat's points take turns step by step in one "
                "process (median of %d steps after %d warm-up); PyTorch %s one process per point.\n\n" % (
                    a.steps, a.warmup, "1.13 (Debian), "))
        f.write("| series | checkpoint | budget MiB | ledger: predicted | ledger: measured | "
                "process: predicted | process: RSS growth | step s | segments |\n"
                "|---|---|---|---|---|---|---|---|---|\n")
        for r in allrows:
            f.write("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n" % (
                r["series"], r["checkpoint"].replace("budget:", "budget "), mib(r.get("budget_bytes")),
                mib(r.get("predicted_peak_bytes")), mib(r.get("ledger_peak_bytes")),
                mib(r.get("predicted_process_bytes")), mib(r.get("rss_growth_bytes")),
                "%.3f" % r["step_s"] if "step_s" in r else "", r.get("plan_segments", "")))
        plan = [r for r in allrows if r.get("budget_bytes")]
        if plan:
            worst = max(abs(r["rss_growth_bytes"] / r["predicted_process_bytes"] - 1) for r in plan)
            over = [r["checkpoint"] for r in plan
                    if r["rss_growth_bytes"] > r["budget_bytes"] or r["ledger_peak_bytes"] > r["budget_bytes"]]
            exact = all(r["ledger_peak_bytes"] == r["predicted_peak_bytes"] for r in allrows
                        if "ledger_peak_bytes" in r)
            f.write("\nPlanner points: %d; over budget (RSS growth or ledger): %s; ledger = prediction "
                    "to the byte at every remat point: %s; worst |RSS growth / predicted process - 1|: "
                    "%.2f%%.\n" % (len(plan), ", ".join(over) or "none", "yes" if exact else "NO",
                                    100 * worst))
    plot(list(rows.values()) + torch_rows, meta["config"], base + ".png")


def plot(allrows, cfg, path):
    """Step time against RSS growth: the planner's budgets, the fixed strategies, PyTorch."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: skipped the plot (apt-get install python3-matplotlib, then "
              "--plot-only)", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    plan = sorted([r for r in allrows if r["series"] == "remat planner" and "step_s" in r],
                  key=lambda r: r["rss_growth_bytes"])
    ax.plot([r["rss_growth_bytes"] / 2**20 for r in plan], [r["step_s"] for r in plan], "o-",
            label="remat planner (budget sweep)")
    for r in allrows:
        if r["series"] == "remat fixed" and "step_s" in r:
            ax.plot(r["rss_growth_bytes"] / 2**20, r["step_s"], "s", color="tab:green")
            ax.annotate(r["checkpoint"], (r["rss_growth_bytes"] / 2**20, r["step_s"]), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
    ax.plot([], [], "s", color="tab:green", label="remat fixed strategies")
    torch_rows = [r for r in allrows if r["series"] == "pytorch"]
    if torch_rows:
        ax.plot([r["rss_growth_bytes"] / 2**20 for r in torch_rows], [r["step_s"] for r in torch_rows],
                "^", color="tab:red", label="PyTorch 1.13 (none, block, checkpoint_sequential K)")
        for r in torch_rows:
            ax.annotate(r["checkpoint"], (r["rss_growth_bytes"] / 2**20, r["step_s"]), fontsize=7,
                        xytext=(3, -9), textcoords="offset points", color="tab:red")
    ax.set_xlabel("peak memory: RSS growth of the process (MiB)")
    ax.set_ylabel("step time (s, median)")
    ax.set_title("GPT L%d d%d T%d B%d, %d thread: time vs memory" % (
        cfg["layers"], cfg["d"], cfg["seq"], cfg["batch"], cfg["threads"]))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)

if __name__ == "__main__":
    main()
