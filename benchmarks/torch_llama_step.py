"""PyTorch's side of benchmarks/llama_step.cpp: the same Llama-family model written from torch.nn
ops as Hugging Face's LlamaForCausalLM computes it (RMSNorm in fp32, rotate_half rotary
embeddings, repeat_kv grouped-query attention through scaled_dot_product_attention where the
PyTorch has it, else the explicit softmax; SwiGLU; a tied head), the same shapes, drawn
weights, the same training step (forward, backward, SGD or AdamW). One JSON line per
checkpoint strategy ("block": torch.utils.checkpoint around each decoder layer).

    OMP_NUM_THREADS=1 /usr/bin/python3 benchmarks/torch_llama_step.py --shape smollm2-135m \
        --seq 1024 --batch 1 --steps 10 --warmup 2 --threads 1 --checkpoint none
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

SHAPES = {
    "smollm2-135m": dict(vocab=49152, d=576, ffn=1536, layers=30, heads=9, kv=3, head_dim=64, theta=1e5),
    "llama-3.2-1b": dict(vocab=128256, d=2048, ffn=8192, layers=16, heads=32, kv=8, head_dim=64, theta=5e5),
}


def rss(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return -1


class RMSNorm(nn.Module):
    def __init__(self, n, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Layer(nn.Module):
    def __init__(self, s):
        super().__init__()
        d, H, KV, D = s["d"], s["heads"], s["kv"], s["head_dim"]
        self.H, self.KV, self.D = H, KV, D
        self.input_layernorm = RMSNorm(d)
        self.q_proj = nn.Linear(d, H * D, bias=False)
        self.k_proj = nn.Linear(d, KV * D, bias=False)
        self.v_proj = nn.Linear(d, KV * D, bias=False)
        self.o_proj = nn.Linear(H * D, d, bias=False)
        self.post_attention_layernorm = RMSNorm(d)
        self.gate_proj = nn.Linear(d, s["ffn"], bias=False)
        self.up_proj = nn.Linear(d, s["ffn"], bias=False)
        self.down_proj = nn.Linear(s["ffn"], d, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.H, self.D).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.KV, self.D).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.KV, self.D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.H // self.KV, dim=1)
        v = v.repeat_interleave(self.H // self.KV, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch 1.13: the explicit softmax, as Hugging Face's eager attention
            s = (q @ k.transpose(-2, -1)) / math.sqrt(self.D)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            a = F.softmax(s.float(), dim=-1) @ v
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, T, self.H * self.D))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.embed_tokens = nn.Embedding(s["vocab"], s["d"])
        self.layers = nn.ModuleList([Layer(s) for _ in range(s["layers"])])
        self.norm = RMSNorm(s["d"])
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)
        D = s["head_dim"]
        self.inv_freq = 1.0 / (s["theta"] ** (torch.arange(0, D, 2).float() / D))
        self.checkpoint = False

    def forward(self, ids, tgt):
        T = ids.shape[1]
        freqs = torch.arange(T).float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = self.embed_tokens(ids)
        for layer in self.layers:
            if self.checkpoint:
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        logits = self.norm(x) @ self.embed_tokens.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="smollm2-135m", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--checkpoint", default="none", choices=["none", "block"])
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    s = dict(SHAPES[a.shape])
    if a.layers > 0:
        s["layers"] = a.layers
    rss0 = rss("VmRSS")
    model = Llama(s)
    model.checkpoint = a.checkpoint == "block"
    opt = (torch.optim.AdamW(model.parameters(), lr=1e-4) if a.optimizer == "adamw"
           else torch.optim.SGD(model.parameters(), lr=1e-4))
    n = a.batch * a.seq
    ids = (torch.arange(n) * 7919 % s["vocab"]).view(a.batch, a.seq)
    tgt = ((torch.arange(n) * 104729 + 1) % s["vocab"]).view(a.batch, a.seq)
    times, loss = [], 0.0
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        l = model(ids, tgt)
        l.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = l.item()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    m = len(times)
    med = times[m // 2] if m % 2 else 0.5 * (times[m // 2 - 1] + times[m // 2])
    print(json.dumps({"bench": "torch_llama_step", "torch": torch.__version__, "shape": a.shape,
                      "layers": s["layers"], "seq": a.seq, "batch": a.batch, "threads": a.threads,
                      "optimizer": a.optimizer, "checkpoint": a.checkpoint,
                      "parameters": sum(p.numel() for p in model.parameters()), "loss": loss,
                      "steps": a.steps, "step_s_median": med, "step_s_min": times[0], "step_s_max": times[-1],
                      "sdpa": hasattr(F, "scaled_dot_product_attention"),
                      "rss_growth_bytes": rss("VmHWM") - rss0, "rss_hwm_bytes": rss("VmHWM")}))


if __name__ == "__main__":
    main()
