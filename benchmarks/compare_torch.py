"""Compare remat's `gpt_step` benchmark with its PyTorch twin.

For every (threads, checkpoint) pair, runs our C++ binary and then
benchmarks/torch_gpt_step.py, one after the other in fresh processes (never
concurrently), both with MALLOC_MMAP_THRESHOLD_=65536 so freed buffers leave
the RSS. Prints a markdown table of step times and memory (RSS growth of each
process, like for like, with our ledger's peak beside), plus machine facts.
PyTorch only supports --checkpoint none|block; other policies run ours only.

Run from anywhere (paths are relative to the repo root):
    /usr/bin/python3 benchmarks/compare_torch.py --threads 1,2 \
        --checkpoint none,block --out benchmarks/results/torch_compare.md
Options: --bin PATH (default build/benchmarks/gpt_step), --layers --d --heads
--seq --batch --vocab --steps --warmup, --skip-torch.
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


def run_json(cmd, env):
    """Run cmd; return (parsed last JSON line of stdout, command string).

    Exits the whole script (non-zero) if the run fails or prints no JSON.
    """
    shown = " ".join(shlex.quote(c) for c in cmd)
    print("running: MALLOC_MMAP_THRESHOLD_=65536 " + shown, file=sys.stderr)
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


def machine_facts(torch_version, backend):
    """Markdown bullet list describing the machine."""
    model = "unknown"
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE,
                             universal_newlines=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    facts = ["- CPU: " + model, "- nproc: %d" % os.cpu_count(),
             "- threads pinned with taskset to cores 0..n-1",
             "- torch: " + (torch_version or "not run")]
    if backend is not None:
        facts.append("- remat backend: %s" % (backend,))
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
    ap.add_argument("--out", help="also write the markdown table here")
    ap.add_argument("--skip-torch", action="store_true")
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

    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    shape = shape_flags(args)

    rows, commands = [], []
    torch_version, backend = None, None
    for n in threads:
        for ck in checkpoints:
            flags = shape + ["--threads", str(n), "--checkpoint", ck]
            ours, cmd = run_json(pin(n) + [bin_path] + flags, env)
            commands.append(cmd.replace(REPO + os.sep, ""))  # relative to the repo
            backend = ours.get("backend", backend)
            theirs = None
            if use_torch and ck in TORCH_CHECKPOINTS:
                theirs, cmd = run_json(pin(n) + [PYTHON, TORCH_SCRIPT] + flags, env)
                commands.append(cmd.replace(REPO + os.sep, ""))
                torch_version = theirs.get("torch_version", torch_version)

            # Like for like: our process's RSS growth against PyTorch's; our ledger peak
            # beside them, never in their place.
            ours_rss = (ours["rss_peak_bytes"] - ours["rss_before_bytes"]) / MiB
            ours_ledger = ours["peak_bytes"] / MiB
            if theirs is not None:
                torch_rss = theirs["rss_growth_bytes"] / MiB
                row = [str(n), ck, fmt_time(ours), fmt_time(theirs),
                       fmt_ratio(ours["step_s"], theirs["step_s"]),
                       "%.1f" % ours_rss, "%.1f" % torch_rss,
                       fmt_ratio(ours_rss, torch_rss), "%.1f" % ours_ledger]
            else:
                row = [str(n), ck, fmt_time(ours), "-", "-",
                       "%.1f" % ours_rss, "-", "-", "%.1f" % ours_ledger]
            rows.append(row)

    header = ["threads", "checkpoint", "ours step s (median [min-max])",
              "torch step s (median [min-max])", "time ratio ours/torch",
              "ours RSS growth MiB", "torch RSS growth MiB", "RSS ratio ours/torch",
              "ours ledger peak MiB"]
    table = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    table += ["| " + " | ".join(r) + " |" for r in rows]
    facts = machine_facts(torch_version, backend)

    print("\n".join(table))
    print()
    print("\n".join(facts))

    if args.out:
        out_path = os.path.abspath(args.out)
        doc = ["# remat gpt_step vs PyTorch (%s)" % datetime.date.today(), "",
               "Commands (each with MALLOC_MMAP_THRESHOLD_=65536):", "",
               "```"] + commands + ["```", ""] + table + [""] + facts
        with open(out_path, "w") as f:
            f.write("\n".join(doc) + "\n")
        print("\nwrote " + out_path, file=sys.stderr)


if __name__ == "__main__":
    main()
