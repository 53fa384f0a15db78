#!/usr/bin/env python3
"""The CPU's two attention paths, fused (lse kept, P recomputed in backward; the default) and
materialized (P kept), on the same GPT step: step time, ledger peak, saved activations and the
process's RSS growth. One fresh process per (config, path), the two paths one after the other,
each process taking its strategies in turns step by step (gpt_step's comma list).

    python3 benchmarks/attention_paths.py            # writes benchmarks/results/attention_paths.md
"""
import argparse, json, os, subprocess, sys, datetime, platform

CONFIGS = [  # (name, gpt_step shape flags, steps, warmup)
    ("GPT L8 d256 h4 T256 B4", ["--layers", "8", "--d", "256", "--heads", "4", "--seq", "256",
                                "--batch", "4", "--vocab", "256"], 10, 3),
    ("GPT-2 124M shapes T1024 B1", ["--layers", "12", "--d", "768", "--heads", "12", "--seq",
                                    "1024", "--batch", "1", "--vocab", "50257"], 10, 2),
]


def main():
    # no options (the environment sets them); --help prints the docstring, anything else errs
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    threads = int(os.environ.get("THREADS", "1"))
    bin_ = os.path.join("build", "benchmarks", "gpt_step")
    rows = []
    for name, shape, steps, warmup in CONFIGS:
        for path in ["fused", "materialized"]:
            env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS=str(threads),
                       REMAT_CPU_ATTENTION=path)
            cmd = ["taskset", "-c", "0"] if threads == 1 else []
            cmd += [bin_] + shape + ["--threads", str(threads), "--checkpoint", "none,block",
                                     "--steps", str(steps), "--warmup", str(warmup)]
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
            for line in out.splitlines():
                if line.startswith("{"):
                    r = json.loads(line)
                    rows.append(dict(config=name, path=path, checkpoint=r["checkpoint"],
                                     step_s=r["step_s"], step_s_min=r["step_s_min"],
                                     peak=r["peak_bytes"], predicted=r["predicted_peak_bytes"],
                                     saved=r["peak_saved_bytes"],
                                     rss=r["rss_peak_bytes"] - r["rss_before_bytes"]))
                    print(name, path, r["checkpoint"], r["step_s"], file=sys.stderr)
    mib = lambda b: "%.1f" % (b / 2**20)
    md = ["# CPU attention: fused (memory linear in T) against materialized (P kept)", "",
          "%s; %s, %d thread(s) (`taskset -c 0` at 1), `MALLOC_MMAP_THRESHOLD_=65536`." % (
              datetime.date.today().isoformat(), platform.machine() + ", 2-core VM", threads), "",
          "Command: `python3 benchmarks/attention_paths.py` (THREADS=%d). One fresh process per "
          "config and path (`REMAT_CPU_ATTENTION`), fused first; in each, `none` and `block` take "
          "turns step by step; step time is the median of the steps after warm-up. RSS growth is "
          "the process's, over both strategies (the arena keeps the larger one's pages): compare "
          "it between paths, not between strategies." % threads, "",
          "| config | checkpoint | path | step s (median) | min | ledger peak MiB | predicted | "
          "peak saved activations MiB | RSS growth MiB |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append("| %s | %s | %s | %.3f | %.3f | %s | %s | %s | %s |" % (
            r["config"], r["checkpoint"], r["path"], r["step_s"], r["step_s_min"], mib(r["peak"]),
            mib(r["predicted"]), mib(r["saved"]), mib(r["rss"])))
    md.append("")
    for name, _, _, _ in CONFIGS:
        for ck in ["none", "block"]:
            f = next(r for r in rows if r["config"] == name and r["checkpoint"] == ck and r["path"] == "fused")
            m = next(r for r in rows if r["config"] == name and r["checkpoint"] == ck and r["path"] == "materialized")
            md.append("- %s, %s: fused/materialized step time %.3f, ledger peak %s against %s MiB, "
                      "RSS growth %s against %s MiB." % (name, ck, f["step_s"] / m["step_s"],
                                                          mib(f["peak"]), mib(m["peak"]),
                                                          mib(f["rss"]), mib(m["rss"])))
    out = os.path.join("benchmarks", "results", "attention_paths.md")
    open(out, "w").write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
