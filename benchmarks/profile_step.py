"""Where a training step's CPU time goes: a per-op profile of `gpt_step` (or, with --llama,
`llama_step`) with perf.

Samples build/benchmarks/gpt_step under `perf record -e cpu-clock` (a software clock, so it
works in VMs without hardware counters), reads the samples with `perf script`, and
sorts every sample taken during the measured steps into one category: GEMM (all of OpenBLAS: kernels and packing), attention
(the fused kernel's own loops, not its GEMMs), layer norm, GELU, cross-entropy, embedding,
optimizer, other element-wise ops, allocation and page clearing (the kernel), the OpenMP
runtime, and the rest. The run includes set-up and warm-up steps; with 10 or more steps they
are left out: gpt_step reports its measured steps' span on the monotonic clock, and perf
records its samples on that clock (-k CLOCK_MONOTONIC).

Run from the repo root (perf from Debian's linux-perf; needs perf_event_paranoid <= 1 or root):
    /usr/bin/python3 benchmarks/profile_step.py --threads 1 --checkpoint none \
        --layers 12 --d 768 --heads 12 --vocab 50257 --seq 1024 --batch 1 --steps 12 --warmup 2
    /usr/bin/python3 benchmarks/profile_step.py --llama smollm2-135m --threads 1 --checkpoint none \
        --seq 1024 --batch 1 --steps 10 --warmup 2
Prints a markdown table (category, share of samples, top symbols); --out FILE also writes it.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

from gpt_shape import add_shape_args, pin, shape_flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (category, regex on "dso symbol"), first match wins.
CATEGORIES = [
    ("GEMM (OpenBLAS)", r"openblas|sgemm|gemm_kernel"),
    ("attention (fused kernel, its own loops)", r"attention|flash|causal"),
    ("softmax", r"softmax"),
    ("RMSNorm", r"rms_norm"),
    ("rotary embeddings", r"rope|rotary"),
    ("SwiGLU", r"swiglu|silu"),
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
    ("allocator", r"_int_malloc|_int_free|\bmalloc\b|\bfree\b|operator new|operator delete|CpuArena|"
                  r"StepLayout|munmap|madvise|\bmmap"),
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
    ap.add_argument("--bin", default=None, help="the benchmark (default: gpt_step, or llama_step)")
    ap.add_argument("--llama", metavar="SHAPE",
                    help="profile llama_step at a preset (smollm2-135m, llama-3.2-1b); the GPT "
                         "shape flags but --seq --batch --steps --warmup are then unused")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--checkpoint", default="none")
    add_shape_args(ap, warmup=2)
    ap.add_argument("--out", help="also write the markdown here")
    args = ap.parse_args()

    if args.llama:
        args.bin = args.bin or "build/benchmarks/llama_step"
        flags = ["--shape", args.llama]
        for name in ("seq", "batch", "steps", "warmup"):
            flags += ["--" + name, str(getattr(args, name))]
    else:
        args.bin = args.bin or "build/benchmarks/gpt_step"
        flags = shape_flags(args)
    flags += ["--threads", str(args.threads), "--checkpoint", args.checkpoint]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        # -k CLOCK_MONOTONIC: sample times on the clock gpt_step reports its measured span in.
        cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "499", "-k", "CLOCK_MONOTONIC",
               "-o", data, "--"] + pin(args.threads) + [args.bin] + flags
        shown = " ".join(shlex.quote(c) for c in cmd).replace(data, "perf.data")
        print("running: MALLOC_MMAP_THRESHOLD_=65536 " + shown, file=sys.stderr)
        run = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True)
        if run.returncode != 0:
            sys.stderr.write(run.stderr)
            sys.exit("error: perf record failed (exit %d); is perf_event_paranoid <= 1?"
                     % run.returncode)
        rep = subprocess.run(["perf", "script", "-i", data, "-F", "time,ip,sym,dso"],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
        if rep.returncode != 0:
            sys.stderr.write(rep.stderr)
            sys.exit("error: perf script failed")
    step = [l for l in run.stdout.splitlines() if l.startswith("{")]
    if not step:
        sys.exit("error: no JSON line from " + os.path.basename(args.bin))
    info = json.loads(step[-1])
    lo, hi = info["measured_from_s"], info["measured_until_s"]
    # One line per sample: "   1234.567890:  7f4b2329b378 symbol (/path/to/dso)".
    sample = re.compile(r"^\s*(\d+\.\d+):\s*(?:[0-9a-f]+\s+)?(.*?)\s*\(([^()]*)\)\s*$")
    counts, tops, kept, dropped = {}, {}, 0, 0
    for line in rep.stdout.splitlines():
        m = sample.match(line)
        if not m:
            continue
        t = float(m.group(1))
        if t < lo or t > hi:  # set-up, warm-up, tear-down
            dropped += 1
            continue
        kept += 1
        sym = m.group(2) or "[unknown]"
        dso = os.path.basename(m.group(3))
        cat = categorize(dso, sym)
        counts[cat] = counts.get(cat, 0) + 1
        key = short(sym)
        tops.setdefault(cat, {})
        tops[cat][key] = tops[cat].get(key, 0) + 1
    if kept == 0:
        sys.exit("error: no perf sample inside the measured steps")
    totals = {c: 100.0 * n / kept for c, n in counts.items()}
    tops = {c: [(100.0 * n / kept, k) for k, n in d.items()] for c, d in tops.items()}
    order = sorted(totals, key=lambda c: -totals[c])
    lines = ["| category | share of samples | largest symbols |", "|---|---|---|"]
    for c in order:
        top = sorted(tops[c], reverse=True)[:3]
        lines.append("| %s | %.1f%% | %s |" % (
            c, totals[c], "; ".join("%s %.1f%%" % (s.replace("|", "/"), p) for p, s in top)))
    gemm = totals.get("GEMM (OpenBLAS)", 0.0)
    lines.append("")
    lines.append("GEMM %.1f%%, everything else %.1f%% of the %d samples inside the %d measured "
                 "steps (%d samples of set-up and warm-up left out); median step %.3f s under "
                 "perf." % (gemm, 100.0 - gemm, kept, args.steps, dropped, info["step_s"]))
    out = "\n".join(["Command: `MALLOC_MMAP_THRESHOLD_=65536 %s`" % shown, ""] + lines)
    print(out)
    if args.out:
        with open(args.out, "w") as f:
            f.write(out + "\n")


if __name__ == "__main__":
    main()
