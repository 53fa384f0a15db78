"""Summarizes a run_gpu.sh output folder as markdown: tokens/s and peak VRAM of remat and
PyTorch for GPT-2 124M shapes, and the attention's memory against sequence length.
    python3 benchmarks/gpu/summarize.py OUTDIR > OUTDIR/summary.md
"""
import glob
import json
import os
import sys

out = sys.argv[1]
GiB = 1024.0 ** 3


def lines(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.startswith("{")]
    except (OSError, ValueError):
        return []


print("# GPU run, %s" % os.path.basename(os.path.abspath(out)))
try:
    print("\n```\n" + open(os.path.join(out, "machine.txt")).read().strip()[:1500] + "\n```\n")
except OSError:
    pass
print("GPT-2 124M shapes: L=12, d=768, heads=12, seq=1024, batch 8, vocab 50257, fp32 (TF32 GEMMs), AdamW.\n")
print("| impl | checkpoint | tokens/s | step s | peak VRAM GiB |")
print("|---|---|---|---|---|")
for d in lines(os.path.join(out, "remat_gpt2_124m.jsonl")):
    print("| remat | %s | %.0f | %.4f | %.2f |" % (d["checkpoint"], d["tokens_per_s"], d["step_s"], d["peak_bytes"] / GiB))
for ck in ("none", "block"):
    for d in lines(os.path.join(out, "torch_gpt2_124m_%s.json" % ck)):
        print("| PyTorch %s | %s | %.0f | %.4f | %.2f |" % (d["torch_version"], ck, d["tokens_per_s"], d["step_s"],
                                                         d["cuda_max_memory_allocated_bytes"] / GiB))
print("\nSequence length (batch 1, none): peak VRAM GiB\n")
print("| impl | seq 1024 | seq 4096 | ratio |")
print("|---|---|---|---|")
for impl, pat in (("remat", "remat_seq%d.jsonl"), ("PyTorch", "torch_seq%d.json")):
    v = []
    for seq in (1024, 4096):
        rows = lines(os.path.join(out, pat % seq))
        key = "peak_bytes" if impl == "remat" else "cuda_max_memory_allocated_bytes"
        v.append(rows[0][key] / GiB if rows else float("nan"))
    print("| %s | %.2f | %.2f | %.2fx |" % (impl, v[0], v[1], v[1] / v[0] if v[0] else float("nan")))
