"""PyTorch twin of remat's `gpt_step` benchmark.

Builds the same GPT-2 style model (pre-LN blocks, tied LM head, fp32, no
dropout), times full training steps (forward, backward, optimizer step,
zero_grad) on fixed random tokens, and prints one JSON line to stdout.

Run (use the system interpreter that has torch):
    /usr/bin/python3 benchmarks/torch_gpt_step.py --layers 8 --d 256 --heads 4 \
        --seq 256 --batch 4 --vocab 256 --steps 10 --warmup 3 --threads 1 \
        [--optimizer adamw|sgd] [--checkpoint none|block|seq:K] [--precision fp32|bf16]

--precision bf16 runs the forward under torch.autocast(dtype=torch.bfloat16), as users train
(fp32 parameters, AdamW state and gradients; matmuls and attention in bf16).

Data parallel (DistributedDataParallel on gloo, one process per rank, each with its
own batch; rank 0 prints, tokens_per_s is the global rate), env:// rendezvous, one
process per rank (benchmarks/data_parallel.py starts them):
    RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 \
        /usr/bin/python3 benchmarks/torch_gpt_step.py --ddp ...
"""
import os
import sys


def _early_threads(argv):
    """Read --threads from argv before torch is imported (default 1)."""
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return "1"


# Thread counts must be fixed in the environment before torch loads its BLAS.
_THREADS = _early_threads(sys.argv[1:])
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = _THREADS

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.profiler  # noqa: E402
import torch.utils.checkpoint  # noqa: E402


def proc_status_bytes(field):
    """Value of a kB field (VmRSS, VmHWM, ...) of /proc/self/status, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


# Resident set size after imports, before any model memory exists.
RSS_BEFORE = proc_status_bytes("VmRSS")


# "sdpa": F.scaled_dot_product_attention (torch >= 2.0), what a user picks where it exists;
# "eager": the (B, H, T, T) scores and probabilities as tensors (the only way in torch 1.13).
ATTENTION = "eager"


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        q, k, v = self.c_attn(x).split(C, dim=2)
        # (B, T, C) -> (B, H, T, D)
        q = q.view(B, T, H, D).transpose(1, 2)
        k = k.view(B, T, H, D).transpose(1, 2)
        v = v.view(B, T, H, D).transpose(1, 2)
        if ATTENTION == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        att = F.softmax(scores, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = CausalSelfAttention(d, heads)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, layers, d, heads, seq, vocab, checkpoint):
        super().__init__()
        self.checkpoint = checkpoint
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.h = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        self._init(layers)

    def _init(self, layers):
        # GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2L).
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif name.startswith(("wte", "wpe")) or (
                    name.endswith(".weight") and p.dim() == 2):
                nn.init.normal_(p, 0.0, 0.02)
            elif "ln_" in name and name.endswith(".weight"):
                nn.init.ones_(p)
            else:  # all biases
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        if self.checkpoint.startswith("seq:"):
            # torch's checkpoint_sequential: K equal runs, all but the last checkpointed
            segments = int(self.checkpoint[4:])
            try:  # torch >= 2 takes use_reentrant; 1.13 has only the reentrant form
                x = torch.utils.checkpoint.checkpoint_sequential(
                    self.h, segments, x, use_reentrant=False)
            except ValueError:
                x = torch.utils.checkpoint.checkpoint_sequential(self.h, segments, x)
        else:
            for block in self.h:
                if self.checkpoint == "block":
                    x = torch.utils.checkpoint.checkpoint(
                        block, x, use_reentrant=False)
                else:
                    x = block(x)
        x = self.ln_f(x)
        logits = x @ self.wte.weight.t()  # tied LM head
        return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))


def loaded_libs():
    """The BLAS/LAPACK/OpenMP/oneDNN libraries this process has mapped (/proc/self/maps)."""
    libs = []
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if "/" in line else ""
            name = os.path.basename(path)
            if any(k in name for k in ("blas", "lapack", "gomp", "libomp", "mkl", "dnnl")) \
                    and path not in libs:
                libs.append(path)
    return libs


def cpu_capability():
    """The vector ISA torch's kernels dispatch to (its build summary's 'CPU capability')."""
    for line in torch.__config__.show().splitlines():
        if "CPU capability" in line:
            return line.split(":", 1)[1].strip()
    return None


def mm_peak(dev):
    """GFLOP/s of torch.mm on 2048 x 2048 fp32 matrices, the best of 5 after a warm-up."""
    a = torch.full((2048, 2048), 0.5, device=dev)
    b = torch.full((2048, 2048), 0.25, device=dev)
    best = 0.0
    for i in range(6):
        t0 = time.perf_counter()
        torch.mm(a, b)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i:
            best = max(best, 2.0 * 2048 ** 3 / (time.perf_counter() - t0) / 1e9)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--checkpoint", default="none",
                    help="none, block (each block checkpointed) or seq:K "
                         "(torch.utils.checkpoint.checkpoint_sequential with K segments)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ddp", action="store_true",
                    help="DistributedDataParallel on gloo (launch with torch.distributed.run)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: fp32 (TF32 matmuls allowed), peak = torch.cuda.max_memory_allocated "
                         "and max_memory_reserved")
    ap.add_argument("--attention", choices=["auto", "eager", "sdpa"], default="auto",
                    help="auto: sdpa where torch has it (>= 2.0), else eager")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: the forward under torch.autocast(dtype=torch.bfloat16), fp32 "
                         "parameters and optimizer state")
    ap.add_argument("--profile", metavar="PATH",
                    help="also write torch.profiler's per-op table (self CPU time) of the "
                         "measured steps to PATH")
    ap.add_argument("--mm-peak", action="store_true",
                    help="also time torch.mm at 2048^3 (best of 5) and report its GFLOP/s")
    args = ap.parse_args()
    if args.d % args.heads != 0:
        ap.error("--d must be divisible by --heads")
    if args.steps < 1:
        ap.error("--steps must be >= 1")
    if not (args.checkpoint in ("none", "block") or (
            args.checkpoint.startswith("seq:") and args.checkpoint[4:].isdigit()
            and 1 <= int(args.checkpoint[4:]) <= args.layers)):
        ap.error("--checkpoint must be none, block or seq:K with 1 <= K <= layers")

    global ATTENTION
    has_sdpa = hasattr(F, "scaled_dot_product_attention")
    if args.attention == "sdpa" and not has_sdpa:
        ap.error("--attention sdpa needs torch >= 2.0 (this is %s)" % torch.__version__)
    ATTENTION = ("sdpa" if has_sdpa else "eager") if args.attention == "auto" else args.attention
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set (interop pool started)

    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # as remat's cuBLAS GEMMs
        torch.backends.cudnn.allow_tf32 = True
    model = GPT(args.layers, args.d, args.heads, args.seq, args.vocab,
                args.checkpoint).to(dev)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    world, rank = 1, 0
    if args.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        world, rank = dist.get_world_size(), dist.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(model)

    fused = False
    if args.optimizer == "adamw":
        kw = {}
        if args.device == "cuda":  # the fused kernel where torch has it (>= 2.0), as users pick
            try:
                torch.optim.AdamW([torch.zeros(1, device=dev, requires_grad=True)], fused=True)
                kw["fused"] = fused = True
            except (TypeError, RuntimeError):
                pass
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr,
                                betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.01, **kw)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    # Fixed random data, made once.
    gen = torch.Generator().manual_seed(args.seed + rank)  # each rank its own batch
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen).to(dev)
    tgt = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen).to(dev)

    def step():
        if args.precision == "bf16":
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                loss = model(idx, tgt)
        else:
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    losses = []
    for _ in range(args.warmup):
        losses.append(step())
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    prof = None
    if args.profile:
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        prof.__enter__()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        losses.append(step())  # loss.item() synchronizes
        times.append(time.perf_counter() - t0)
    if prof is not None:
        prof.__exit__(None, None, None)
        with open(args.profile, "w") as f:
            f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    mm_gflops = mm_peak(dev) if args.mm_peak else None

    median = statistics.median(times)
    rss_peak = proc_status_bytes("VmHWM")
    if rank != 0:
        return
    print(json.dumps({
        "ranks": world,
        "impl": "pytorch",
        "torch_version": torch.__version__,
        "threads": args.threads,
        "layers": args.layers,
        "d": args.d,
        "heads": args.heads,
        "seq": args.seq,
        "batch": args.batch,
        "vocab": args.vocab,
        "checkpoint": args.checkpoint,
        "optimizer": args.optimizer,
        "precision": args.precision,
        "steps": args.steps,
        "step_s": median,
        "step_s_min": min(times),
        "step_s_max": max(times),
        "tokens_per_s": world * args.batch * args.seq / median,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "rss_before_bytes": RSS_BEFORE,
        "rss_peak_bytes": rss_peak,
        "rss_growth_bytes": rss_peak - RSS_BEFORE,
        "params": params,
        "device": args.device,
        "attention": ATTENTION,
        "fused_adamw": fused,
        "cpu_capability": cpu_capability(),
        "libs": loaded_libs(),
        "mm_2048_gflops": mm_gflops,
        "cuda_max_memory_allocated_bytes":
            torch.cuda.max_memory_allocated() if args.device == "cuda" else None,
        "cuda_max_memory_reserved_bytes":
            torch.cuda.max_memory_reserved() if args.device == "cuda" else None,
    }))


if __name__ == "__main__":
    main()
