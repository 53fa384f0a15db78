#!/usr/bin/env python3
"""Data parallel on this machine: global tokens/s of train_gpt with 1 process and with 2 ranks
(mpirun), 1 thread each, against PyTorch DDP (gloo) on the same model, one run after the other
(never at the same time); and the communication our ranks wait for after backward (exposed) or
hide inside it. Medians over the steps after the first WARMUP.

    python3 benchmarks/data_parallel.py     # writes benchmarks/results/<date>-data-parallel.md
    STEPS=20 WARMUP=5 CHECKPOINTS=none,block python3 benchmarks/data_parallel.py
"""
import argparse, datetime, json, os, platform, statistics, subprocess, sys

SHAPE = ["--layers", "8", "--d", "256", "--heads", "4", "--seq", "256", "--vocab", "256"]
BATCH = 4  # sequences per rank and step


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def ours(ranks, checkpoint, steps, warmup, bucket_mib=None):
    cmd = []
    if ranks > 1:
        cmd = ["mpiexec", "-n", str(ranks), "--bind-to", "core"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    cmd += [os.path.join("build", "examples", "train_gpt")] + SHAPE + [
        "--batch", str(BATCH), "--threads", "1", "--checkpoint", checkpoint, "--steps",
        str(steps + warmup), "--lr", "1e-4", "--json"]
    if bucket_mib:
        cmd += ["--bucket-mib", str(bucket_mib)]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")  # timing: the plain
    env.pop("MALLOC_MMAP_THRESHOLD_", None)                                   # environment
    if ranks == 1:
        cmd = ["taskset", "-c", "0"] + cmd
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")][warmup:]
    return dict(cmd=" ".join(cmd), tok_s=median([r["tokens_per_s"] for r in rows]),
                step_s=median([r["step_s"] for r in rows]),
                exposed_s=median([r.get("comm_exposed_s", 0.0) for r in rows]),
                pack_s=median([r.get("comm_pack_s", 0.0) for r in rows]),
                buckets=rows[-1].get("buckets", 0),
                in_backward=rows[-1].get("buckets_in_backward", 0))


def torch_ddp(ranks, checkpoint, steps, warmup):
    script = os.path.join("benchmarks", "torch_gpt_step.py")
    args = SHAPE + ["--batch", str(BATCH), "--threads", "1", "--steps", str(steps), "--warmup",
                    str(warmup), "--checkpoint", checkpoint, "--lr", "1e-4"]
    env = dict(os.environ, OMP_NUM_THREADS="1")  # timing: PyTorch without MALLOC_MMAP_THRESHOLD_
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    if ranks == 1:
        cmd = ["taskset", "-c", "0", "/usr/bin/python3", script] + args
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    else:
        # One process per rank, started here (Debian's torch 1.13 launcher, torch.distributed.run,
        # fails under Python 3.11): the env:// rendezvous of init_process_group("gloo").
        cmd = ["/usr/bin/python3", script, "--ddp"] + args
        procs = []
        for r in range(ranks):
            e = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT="29517", RANK=str(r),
                     LOCAL_RANK=str(r), WORLD_SIZE=str(ranks))
            procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, text=True))
        outs = [p.communicate()[0] for p in procs]
        if any(p.returncode for p in procs):
            raise SystemExit("PyTorch DDP failed: exit codes %s" % [p.returncode for p in procs])
        out = outs[0]
        cmd = ["RANK=r", "WORLD_SIZE=%d" % ranks, "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29517"] + cmd
    r = [json.loads(l) for l in out.splitlines() if l.startswith("{")][-1]
    return dict(cmd=" ".join(cmd), tok_s=r["tokens_per_s"], step_s=r["step_s"])


def main():
    # no options (the environment sets them); --help prints the docstring, anything else errs
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    steps = int(os.environ.get("STEPS", "12"))
    warmup = int(os.environ.get("WARMUP", "4"))
    checkpoints = os.environ.get("CHECKPOINTS", "none,block").split(",")
    lines = []
    table = []
    for ck in checkpoints:
        res = {}
        for impl, fn in (("remat", ours), ("pytorch", torch_ddp)):
            for ranks in (1, 2):
                r = fn(ranks, ck, steps, warmup)
                res[(impl, ranks)] = r
                print(impl, ck, ranks, "ranks:", "%.0f tok/s" % r["tok_s"], file=sys.stderr)
        # Smaller buckets: more of them issued while backward runs, less waiting after it.
        small = ours(2, ck, steps, warmup, bucket_mib=4)
        res[("remat, 4 MiB buckets", 1)] = res[("remat", 1)]
        res[("remat, 4 MiB buckets", 2)] = small
        print("remat", ck, "2 ranks, 4 MiB buckets:", "%.0f tok/s" % small["tok_s"], file=sys.stderr)
        for impl in ("remat", "remat, 4 MiB buckets", "pytorch"):
            one, two = res[(impl, 1)], res[(impl, 2)]
            extra = ""
            if impl.startswith("remat"):
                extra = "%.1f / %.1f ms, %d of %d" % (two["exposed_s"] * 1e3, two["pack_s"] * 1e3,
                                                     two["in_backward"], two["buckets"])
            table.append("| %s | %s | %.0f | %.0f | **%.2fx** | %s |" % (
                impl, ck, one["tok_s"], two["tok_s"], two["tok_s"] / one["tok_s"], extra or "n/a"))
        lines += ["- `%s`" % res[(i, n)]["cmd"] for i in ("remat", "pytorch") for n in (1, 2)]
        lines.append("- `%s`" % small["cmd"])
    cpu = platform.processor() or "x86_64"
    doc = [
        "# Data parallel: 1 vs 2 ranks, 1 thread each (%s)" % datetime.date.today().isoformat(),
        "",
        "Machine: %d vCPUs (%s), Linux %s; Open MPI from Debian, PyTorch %s (gloo)." % (
            os.cpu_count(), cpu, platform.release(),
            subprocess.run(["/usr/bin/python3", "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True).stdout.strip()),
        "Model: GPT L8 d256 h4 T256 vocab 256, batch %d sequences per rank, AdamW, fp32. Median of "
        "%d steps after %d warm-up steps; global tokens/s (all ranks). The runs went one after "
        "the other. Our 1-rank run is pinned to core 0 (taskset); our 2 ranks are bound one per "
        "core (--bind-to core); PyTorch's 2 ranks are placed by the OS." % (BATCH, steps, warmup),
        "",
        "| impl | checkpoint | 1 rank tok/s | 2 ranks tok/s | speed-up | comm exposed / pack ms, "
        "buckets issued in backward |",
        "|---|---|---:|---:|---:|---|",
    ] + table + [
        "",
        "Exposed: the time a rank waits for the sums after its backward ended (not hidden by "
        "compute); pack: copying gradients into and out of the buckets (our 2-rank run).",
        "",
        "Commands (from the repository root, after `bash tests/run.sh` built `build/`):",
        "",
        "- `python3 benchmarks/data_parallel.py` runs them all:",
    ] + ["  " + l for l in lines]
    os.makedirs(os.path.join("benchmarks", "results"), exist_ok=True)
    path = os.path.join("benchmarks", "results",
                        "%s-data-parallel.md" % datetime.date.today().isoformat())
    with open(path, "w") as f:
        f.write("\n".join(doc) + "\n")
    print("\n".join(doc))


if __name__ == "__main__":
    main()
