"""Compare remat's `gpt_step` benchmark with its PyTorch twin, fairly.

For every (threads, checkpoint) pair, runs our C++ binary and then
benchmarks/torch_gpt_step.py, one after the other in fresh processes (never
concurrently), pinned with taskset, twice:
  1. timing: the plain environment (MALLOC_MMAP_THRESHOLD_ would cost PyTorch's
     allocator ~7%), --steps measured steps after --warmup;
  2. memory: MALLOC_MMAP_THRESHOLD_=65536 so freed buffers leave the RSS, like for
     like: each process's RSS growth (VmHWM minus the RSS before the model), with
     our ledger's peak beside it (--rss-steps steps after one warm-up).
Beside the time ratio it prints each side's achieved model GFLOP/s (6 N + 12 L d T
FLOP per token, N the matmul weights; recomputation not counted) against this
core's fp32 GEMM peak measured by build/benchmarks/sgemm_peak, the CPU's model and
flags, which BLAS/OpenMP libraries each side mapped, and PyTorch's CPU capability,
so that a weak baseline cannot flatter us. PyTorch only supports --checkpoint
none|block; other policies run ours only.

Run from anywhere (paths are relative to the repo root), on a quiet machine:
    /usr/bin/python3 benchmarks/compare_torch.py --threads 1,2 \
        --checkpoint none,block --out benchmarks/results/torch_compare.md
Options: --bin PATH (default build/benchmarks/gpt_step), --layers --d --heads
--seq --batch --vocab --steps --warmup, --precision fp32|bf16 (PyTorch: autocast),
--rss-steps, --skip-torch, --skip-rss,
--torch-profile DIR (a torch.profiler table per PyTorch timing run).
"""
import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys

from gpt_shape import add_shape_args, pin, shape_flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_SCRIPT = os.path.join(REPO, "benchmarks", "torch_gpt_step.py")
PYTHON = "/usr/bin/python3"
TORCH_CHECKPOINTS = ("none", "block")
MiB = 1024.0 * 1024.0


def run_json(cmd, env, note=""):
    """Run cmd; return (parsed last JSON line of stdout, command string).

    Exits the whole script (non-zero) if the run fails or prints no JSON.
    """
    shown = " ".join(shlex.quote(c) for c in cmd)
    print("running: " + note + shown, file=sys.stderr)
    proc = subprocess.run(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        sys.exit("error: command failed with exit code %d: %s"
                 % (proc.returncode, shown))
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if not lines:
        sys.stderr.write(proc.stderr)
        sys.exit("error: no JSON line in the output of: " + shown)
    try:
        return json.loads(lines[-1]), shown
    except ValueError as e:
        sys.stderr.write(proc.stderr)
        sys.exit("error: bad JSON (%s) from: %s" % (e, shown))


def model_flops_per_step(a):
    """Model FLOP of one training step (PaLM's count): 6 N + 12 L d T per token, N = the
    matmul weights (12 d^2 per block and the d x vocab head); recomputation not counted."""
    n = 12 * a.layers * a.d * a.d + a.d * a.vocab
    tokens = a.batch * a.seq
    return tokens * (6 * n + 12 * a.layers * a.d * a.seq)


def rel(cmd):
    return cmd.replace(REPO + os.sep, "")


def torch_available():
    """True if PYTHON can import torch."""
    try:
        return subprocess.run([PYTHON, "-c", "import torch"],
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0
    except OSError:
        return False


def fmt_time(r):
    return "%.4f [%.4f-%.4f]" % (r["step_s"], r["step_s_min"], r["step_s_max"])


def fmt_ratio(a, b):
    return "%.2f" % (a / b) if b else "-"


def machine_facts(torch_info, backend, ours_libs, peak):
    """Markdown bullet list describing the machine and both sides' libraries."""
    model, flags = "unknown", []
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                have = line.split(":", 1)[1].split()
                flags = [x for x in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")
                         if x in have]
    facts = ["- CPU: %s, %d cores, flags: %s" % (model, os.cpu_count(), " ".join(flags)),
             "- threads pinned with taskset to cores 0..n-1",
             "- remat backend: %s" % (backend,),
             "- remat mapped: " + (", ".join(ours_libs) or "-")]
    if peak:
        facts.append("- fp32 GEMM peak of this core (build/benchmarks/sgemm_peak, best of 5, "
                     "2048^3 and 4096x4096x1024): " + ", ".join(
                         "%d thread(s) %.1f GFLOP/s" % (n, g) for n, g in sorted(peak.items())))
    if torch_info:
        facts += ["- torch: %s, CPU capability %s, attention %s" % (
                      torch_info["torch_version"], torch_info.get("cpu_capability"),
                      torch_info.get("attention", "eager")),
                  "- torch mapped: " + ", ".join(torch_info.get("libs") or ["-"])]
    else:
        facts.append("- torch: not run")
    return facts


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bin", default="build/benchmarks/gpt_step",
                    help="our binary, relative to the repo root")
    ap.add_argument("--threads", default="1,2", help="comma list")
    add_shape_args(ap, warmup=3)
    ap.add_argument("--checkpoint", default="none",
                    help="comma list: none|block|every:N|sqrt|selective")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: ours with --precision bf16, PyTorch under autocast(bfloat16)")
    ap.add_argument("--out", help="also write the markdown table here")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-rss", action="store_true", help="timing runs only")
    ap.add_argument("--rss-steps", type=int, default=2,
                    help="steps of the memory runs (after 1 warm-up)")
    ap.add_argument("--torch-profile", metavar="DIR",
                    help="write torch.profiler's per-op table of each PyTorch timing run here")
    args = ap.parse_args()

    bin_path = os.path.join(REPO, args.bin)  # absolute --bin is kept as is
    if not os.path.isfile(bin_path):
        sys.exit("error: benchmark binary not found: " + bin_path)
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    checkpoints = [c.strip() for c in args.checkpoint.split(",") if c.strip()]

    use_torch = not args.skip_torch
    if use_torch and not torch_available():
        print("note: %s cannot import torch; running ours only" % PYTHON,
              file=sys.stderr)
        use_torch = False

    plain_env = dict(os.environ)
    plain_env.pop("MALLOC_MMAP_THRESHOLD_", None)
    rss_env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    shape = shape_flags(args)
    rss_shape = shape_flags(argparse.Namespace(**dict(vars(args), steps=args.rss_steps, warmup=1)))
    flops = model_flops_per_step(args)

    commands = []
    peak = {}
    peak_bin = os.path.join(os.path.dirname(bin_path), "sgemm_peak")
    if os.path.isfile(peak_bin):
        for n in threads:
            r, cmd = run_json(pin(n) + [peak_bin, "--threads", str(n)], plain_env)
            commands.append(rel(cmd))
            peak[n] = r["peak_gflops"]

    rows = []
    torch_info, backend, ours_libs = None, None, []
    for n in threads:
        for ck in checkpoints:
            flags = ["--threads", str(n), "--checkpoint", ck, "--precision", args.precision]
            ours, cmd = run_json(pin(n) + [bin_path] + shape + flags, plain_env)
            commands.append(rel(cmd))
            backend = ours.get("backend", backend)
            ours_libs = ours.get("libs", ours_libs)
            theirs = None
            with_torch = use_torch and ck in TORCH_CHECKPOINTS
            if with_torch:
                extra = []
                if args.torch_profile:
                    os.makedirs(args.torch_profile, exist_ok=True)
                    extra = ["--profile", os.path.join(args.torch_profile,
                                                       "torch-%dt-%s.txt" % (n, ck))]
                theirs, cmd = run_json(pin(n) + [PYTHON, TORCH_SCRIPT] + shape + flags + extra,
                                       plain_env)
                commands.append(rel(cmd))
                torch_info = theirs
            ours_rss = torch_rss = None
            if not args.skip_rss:  # memory: separate fresh processes, with the variable
                r, cmd = run_json(pin(n) + [bin_path] + rss_shape + flags, rss_env,
                                  "MALLOC_MMAP_THRESHOLD_=65536 ")
                commands.append("MALLOC_MMAP_THRESHOLD_=65536 " + rel(cmd))
                ours_rss = (r["rss_peak_bytes"] - r["rss_before_bytes"]) / MiB
                if with_torch:
                    r, cmd = run_json(pin(n) + [PYTHON, TORCH_SCRIPT] + rss_shape + flags, rss_env,
                                      "MALLOC_MMAP_THRESHOLD_=65536 ")
                    commands.append("MALLOC_MMAP_THRESHOLD_=65536 " + rel(cmd))
                    torch_rss = r["rss_growth_bytes"] / MiB

            def gf(res):
                g = flops / res["step_s"] / 1e9
                return "%.1f (%.0f%%)" % (g, 100 * g / peak[n]) if n in peak else "%.1f" % g

            # Like for like: our process's RSS growth against PyTorch's; our ledger peak
            # beside them, never in their place.
            mib = lambda v: "-" if v is None else "%.1f" % v
            rows.append([str(n), ck, fmt_time(ours), fmt_time(theirs) if theirs else "-",
                         fmt_ratio(ours["step_s"], theirs["step_s"]) if theirs else "-",
                         gf(ours), gf(theirs) if theirs else "-",
                         mib(ours_rss), mib(torch_rss),
                         fmt_ratio(ours_rss, torch_rss) if ours_rss and torch_rss else "-",
                         "%.1f" % (ours["peak_bytes"] / MiB)])

    header = ["threads", "checkpoint", "ours step s (median [min-max])",
              "torch step s (median [min-max])", "time ratio ours/torch",
              "ours GFLOP/s (% of GEMM peak)", "torch GFLOP/s (% of GEMM peak)",
              "ours RSS growth MiB", "torch RSS growth MiB", "RSS ratio ours/torch",
              "ours ledger peak MiB"]
    table = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    table += ["| " + " | ".join(r) + " |" for r in rows]
    facts = machine_facts(torch_info, backend, ours_libs, peak)
    facts.append("- model FLOP per step: %.1f GFLOP (6 N + 12 L d T per token)" % (flops / 1e9))

    print("\n".join(table))
    print()
    print("\n".join(facts))

    if args.out:
        out_path = os.path.abspath(args.out)
        doc = ["# remat gpt_step vs PyTorch (%s, %s)" % (args.precision, datetime.date.today()), "",
               "Commands (timing runs in the plain environment; memory runs with "
               "MALLOC_MMAP_THRESHOLD_=65536, as shown):", "",
               "```"] + commands + ["```", ""] + table + [""] + facts
        with open(out_path, "w") as f:
            f.write("\n".join(doc) + "\n")
        print("\nwrote " + out_path, file=sys.stderr)


if __name__ == "__main__":
    main()
