"""Peak memory against depth for every checkpoint strategy, with the step-time overhead.

For each depth L, runs `gpt_step --checkpoint none,block,...` once (the strategies take turns
step by step in one process) and collects the allocator's exact peaks. Writes
peak_memory.{csv,json,md,png} into --out-dir: the PNG plots peak saved activations and the
total training peak against L per strategy; the markdown has both tables.

    /usr/bin/python3 benchmarks/peak_memory.py                 # L = 4 8 16 32 64
    /usr/bin/python3 benchmarks/peak_memory.py --depths 4,8 --steps 2   # quick
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
MiB = 1024.0 * 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "benchmarks", "gpt_step"))
    ap.add_argument("--depths", default="4,8,16,32,64")
    ap.add_argument("--strategies", default="none,block,every:2,sqrt,selective")
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out-dir", default=os.path.join(REPO, "benchmarks", "results"))
    a = ap.parse_args()

    strategies = a.strategies.split(",")
    rows, commands = [], []
    for L in [int(x) for x in a.depths.split(",")]:
        cmd = [a.bin, "--layers", str(L), "--d", str(a.d), "--heads", str(a.heads), "--seq", str(a.seq),
               "--batch", str(a.batch), "--vocab", str(a.vocab), "--steps", str(a.steps),
               "--warmup", str(a.warmup), "--threads", str(a.threads), "--checkpoint", a.strategies]
        commands.append(" ".join(cmd).replace(REPO + os.sep, ""))  # relative to the repo
        print("running L=%d ..." % L, file=sys.stderr, flush=True)
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        if out.returncode != 0:
            sys.stderr.write(out.stderr)
            sys.exit("gpt_step failed for L=%d" % L)
        runs = {}
        for line in out.stdout.splitlines():
            if line.startswith("{"):
                d = json.loads(line)
                runs[d["checkpoint"]] = d
        base = runs.get("none")
        for s in strategies:
            d = runs[s]
            rows.append({
                "layers": L, "strategy": s, "params": d["params"],
                "peak_bytes": d["peak_bytes"], "peak_saved_bytes": d["peak_saved_bytes"],
                "step_s": d["step_s"],
                "overhead": d["step_s"] / base["step_s"] if base else float("nan"),
                "saved_ratio": d["peak_saved_bytes"] / base["peak_saved_bytes"] if base else float("nan"),
            })

    os.makedirs(a.out_dir, exist_ok=True)
    stem = os.path.join(a.out_dir, "peak_memory")
    with open(stem + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    meta = {"date": str(datetime.date.today()), "machine": platform.processor() or platform.machine(),
            "nproc": os.cpu_count(), "commands": commands, "rows": rows}
    with open(stem + ".json", "w") as f:
        json.dump(meta, f, indent=1)

    depths = sorted({r["layers"] for r in rows})
    by = {(r["layers"], r["strategy"]): r for r in rows}
    md = ["# Peak memory against depth (%s, %d threads)" % (meta["date"], a.threads), "",
          "GPT d=%d, heads=%d, seq=%d, batch=%d, vocab=%d, fp32, AdamW; medians of %d steps after %d "
          "warm-up, strategies in turns in one process per depth." % (a.d, a.heads, a.seq, a.batch, a.vocab,
                                                                     a.steps, a.warmup), "",
          "Peak saved activations, MiB (the allocator's exact bytes):", "",
          "| L | " + " | ".join(strategies) + " |", "|---|" + "---|" * len(strategies)]
    for L in depths:
        md.append("| %d | " % L + " | ".join("%.1f" % (by[(L, s)]["peak_saved_bytes"] / MiB) for s in strategies) + " |")
    md += ["", "Total training peak (parameters, gradients, AdamW state, activations, temporaries), MiB:", "",
           "| L | " + " | ".join(strategies) + " |", "|---|" + "---|" * len(strategies)]
    for L in depths:
        md.append("| %d | " % L + " | ".join("%.1f" % (by[(L, s)]["peak_bytes"] / MiB) for s in strategies) + " |")
    md += ["", "Step time relative to none:", "",
           "| L | " + " | ".join(strategies) + " |", "|---|" + "---|" * len(strategies)]
    for L in depths:
        md.append("| %d | " % L + " | ".join("%.2fx" % by[(L, s)]["overhead"] for s in strategies) + " |")
    md += ["", "Commands:", ""] + ["    " + c for c in commands]
    with open(stem + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        print("matplotlib not installed (apt-get install python3-matplotlib): no PNG", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for s in strategies:
        axes[0].plot(depths, [by[(L, s)]["peak_saved_bytes"] / MiB for L in depths], marker="o", label=s)
        axes[1].plot(depths, [by[(L, s)]["peak_bytes"] / MiB for L in depths], marker="o", label=s)
    for ax, title in zip(axes, ["peak saved activations", "total training peak"]):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xticks(depths)
        ax.set_xticklabels([str(L) for L in depths])
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: "%g" % v))
        ax.set_xlabel("layers L")
        ax.set_ylabel("MiB")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("remat GPT d=%d seq=%d batch=%d (CPU, exact allocator bytes)" % (a.d, a.seq, a.batch))
    fig.tight_layout()
    fig.savefig(stem + ".png", dpi=110)
    print("wrote %s.{csv,json,md,png}" % stem, file=sys.stderr)


if __name__ == "__main__":
    main()
