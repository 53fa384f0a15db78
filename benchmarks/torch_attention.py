"""PyTorch twin of remat's attention_cuda benchmark: attention alone, forward and backward
(loss = sum of the output), at the same shapes, fp32, one JSON line per (path, sequence length).

Paths: "eager" is the textbook graph PyTorch runs op by op (q k^T * scale, causal mask, softmax,
times v: the T x T matrix is materialized and kept for backward), the issue 12 target;
"sdpa" is torch.nn.functional.scaled_dot_product_attention (fused kernels where PyTorch has
them), for context.

    python3 benchmarks/torch_attention.py --device cuda --batch 8 --heads 12 --seq 1024,4096 --d 64
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch


def eager(q, k, v, causal):
    T = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        att = att.masked_fill(mask, float("-inf"))
    return torch.softmax(att, dim=-1) @ v


def sdpa(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", default="1024,4096")
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="no causal mask")
    ap.add_argument("--paths", default="eager,sdpa")
    a = ap.parse_args()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    for T in [int(s) for s in a.seq.split(",")]:
        for path in a.paths.split(","):
            fn = {"eager": eager, "sdpa": sdpa}[path]
            if path == "sdpa" and not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
                print("torch_attention: PyTorch %s has no scaled_dot_product_attention: sdpa "
                      "skipped" % torch.__version__, file=sys.stderr)
                continue
            g = torch.Generator(device="cpu").manual_seed(1)
            shape = (a.batch, a.heads, T, a.d)
            q, k, v = [(0.5 * torch.randn(shape, generator=g)).to(dev).requires_grad_()
                       for _ in range(3)]
            times = []
            peak = 0
            for s in range(a.warmup + a.steps):
                if cuda:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                t0 = time.perf_counter()
                fn(q, k, v, not a.full).sum().backward()
                if cuda:
                    torch.cuda.synchronize()
                dt = time.perf_counter() - t0
                q.grad = k.grad = v.grad = None
                if s >= a.warmup:
                    times.append(dt)
                    if cuda:
                        peak = max(peak, torch.cuda.max_memory_allocated() - base)
            print(json.dumps({
                "impl": "torch", "torch_version": torch.__version__, "path": path, "batch": a.batch,
                "heads": a.heads, "seq": T, "d": a.d, "causal": not a.full, "steps": a.steps,
                "fwd_bwd_s": statistics.median(times), "fwd_bwd_s_min": min(times),
                "peak_bytes": peak,
                "reserved_bytes": torch.cuda.max_memory_reserved() if cuda else 0,
                "tf32_matmul": torch.backends.cuda.matmul.allow_tf32 if cuda else False,
                "device": torch.cuda.get_device_name() if cuda else "cpu"}), flush=True)
            del q, k, v
            if cuda:
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
