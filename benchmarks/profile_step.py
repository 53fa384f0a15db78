"""Where a training step's CPU time goes: a per-op profile of `gpt_step` with perf.

Samples build/benchmarks/gpt_step under `perf record -e cpu-clock` (a software clock, so it
works in VMs without hardware counters), reads `perf report` by shared object and symbol, and
sorts every sample into one category: GEMM (all of OpenBLAS: kernels and packing), attention
(the fused kernel's own loops, not its GEMMs), layer norm, GELU, cross-entropy, embedding,
optimizer, other element-wise ops, allocation and page clearing (the kernel), the OpenMP
runtime, and the rest. The run includes set-up and warm-up steps; with 10 or more steps they
are a few percent of the samples.

Run from the repo root (perf from Debian's linux-perf; needs perf_event_paranoid <= 1 or root):
    /usr/bin/python3 benchmarks/profile_step.py --threads 1 --checkpoint none \
        --layers 12 --d 768 --heads 12 --vocab 50257 --seq 1024 --batch 1 --steps 12 --warmup 2
Prints a markdown table (category, share of samples, top symbols); --out FILE also writes it.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (category, regex on "dso symbol"), first match wins.
CATEGORIES = [
    ("GEMM (OpenBLAS)", r"openblas|sgemm|gemm_kernel"),
    ("attention (fused kernel, its own loops)", r"attention|flash|causal"),
    ("softmax", r"softmax"),
    ("layer norm", r"layer_norm"),
    ("GELU", r"gelu"),
    ("cross-entropy", r"cross_entropy"),
    ("embedding", r"embedding"),
    ("optimizer (AdamW/SGD, clipping)", r"adamw|sgd|optim|clip|grad_norm"),
    ("dropout", r"dropout"),
    ("other element-wise (add, scale, copy, reduce)",
     r"binary|unary|pointwise|broadcast|axpy|scale|fill|reduce|sum_rows|copy_|transpose"),
    ("memset/memcpy", r"memset|memcpy|memmove"),
    ("kernel (page faults, clearing pages)", r"\[kernel|kallsyms|clear_page|page_fault"),
    ("OpenMP runtime (waits, barriers)", r"gomp|libgomp|omp_"),
    ("allocator", r"malloc|free|operator new|operator delete|Allocator|Arena|libc\.so"),
]


def categorize(dso, sym):
    text = dso + " " + sym
    for name, rx in CATEGORIES:
        if re.search(rx, text, re.IGNORECASE):
            return name
    return "other"


def short(sym, width=70):
    sym = re.sub(r"\(.*", "", sym) if "::{lambda" not in sym else sym
    return sym if len(sym) <= width else sym[:width - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/benchmarks/gpt_step")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--checkpoint", default="none")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out", help="also write the markdown here")
    args = ap.parse_args()

    flags = ["--layers", args.layers, "--d", args.d, "--heads", args.heads, "--seq", args.seq,
             "--batch", args.batch, "--vocab", args.vocab, "--steps", args.steps,
             "--warmup", args.warmup, "--threads", args.threads, "--checkpoint", args.checkpoint]
    flags = [str(f) for f in flags]
    pin = ["taskset", "-c", ",".join(str(i) for i in range(args.threads))]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "499", "-o", data, "--"] + pin + \
              [args.bin] + flags
        shown = " ".join(shlex.quote(c) for c in cmd).replace(data, "perf.data")
        print("running: MALLOC_MMAP_THRESHOLD_=65536 " + shown, file=sys.stderr)
        run = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True)
        if run.returncode != 0:
            sys.stderr.write(run.stderr)
            sys.exit("error: perf record failed (exit %d); is perf_event_paranoid <= 1?"
                     % run.returncode)
        rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                              "--sort", "dso,symbol", "--percent-limit", "0", "-F",
                              "overhead,dso,sym", "--field-separator", "\t"],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
        if rep.returncode != 0:
            sys.stderr.write(rep.stderr)
            sys.exit("error: perf report failed")
    step = [l for l in run.stdout.splitlines() if l.startswith("{")]
    totals, tops = {}, {}
    for line in rep.stdout.splitlines():
        if not line or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) < 3 or not parts[0].strip().endswith("%"):
            continue
        pct = float(parts[0].strip().rstrip("%"))
        dso, sym = parts[1].strip(), parts[2].strip()
        sym = re.sub(r"^\[[.k]\]\s*", "", sym)
        cat = categorize(dso, sym)
        totals[cat] = totals.get(cat, 0.0) + pct
        tops.setdefault(cat, []).append((pct, short(sym)))
    order = sorted(totals, key=lambda c: -totals[c])
    lines = ["| category | share of samples | largest symbols |", "|---|---|---|"]
    for c in order:
        top = sorted(tops[c], reverse=True)[:3]
        lines.append("| %s | %.1f%% | %s |" % (
            c, totals[c], "; ".join("%s %.1f%%" % (s.replace("|", "/"), p) for p, s in top)))
    gemm = totals.get("GEMM (OpenBLAS)", 0.0)
    lines.append("")
    lines.append("GEMM %.1f%%, everything else %.1f%% of the samples." % (gemm, 100.0 - gemm))
    if step:
        lines.append("")
        lines.append("The profiled run's JSON line: `%s`" % step[-1][:400])
    out = "\n".join(["Command: `MALLOC_MMAP_THRESHOLD_=65536 %s`" % shown, ""] + lines)
    print(out)
    if args.out:
        with open(args.out, "w") as f:
            f.write(out + "\n")


if __name__ == "__main__":
    main()
