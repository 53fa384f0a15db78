"""Parity of train_gpt with PyTorch: the same GPT-2 weights (written here to safetensors in the
Hugging Face layout), the same llm.c .bin data, 5 SGD steps in PyTorch and in train_gpt, with
and without checkpointing; the per-step losses must agree to 1e-4 relative.

    /usr/bin/python3 tests/parity/torch_parity.py build/examples/train_gpt
Exits 77 (skipped) when PyTorch is not installed (Debian: python3-torch).
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: PyTorch is not installed (apt-get install python3-torch)")
    sys.exit(77)

from safetensors_out import write_safetensors

L, D, H, T, V, B, STEPS, LR = 2, 64, 2, 32, 96, 4, 5, 0.1
torch.manual_seed(0)
torch.set_num_threads(1)


def gpt2_weights():
    """HF GPT-2 names and layout: Conv1D weights are [in, out]."""
    w = {"wte.weight": torch.randn(V, D) * 0.1, "wpe.weight": torch.randn(T, D) * 0.1,
         "ln_f.weight": 1 + 0.1 * torch.randn(D), "ln_f.bias": 0.1 * torch.randn(D)}
    for i in range(L):
        p = "h.%d." % i
        for ln in ("ln_1", "ln_2"):
            w[p + ln + ".weight"] = 1 + 0.1 * torch.randn(D)
            w[p + ln + ".bias"] = 0.1 * torch.randn(D)
        for name, shape in (("attn.c_attn", (D, 3 * D)), ("attn.c_proj", (D, D)),
                            ("mlp.c_fc", (D, 4 * D)), ("mlp.c_proj", (4 * D, D))):
            w[p + name + ".weight"] = 0.05 * torch.randn(*shape)
            w[p + name + ".bias"] = 0.05 * torch.randn(shape[1])
        w[p + "attn.bias"] = torch.tril(torch.ones(1, 1, T, T))  # HF's mask buffer: must be skipped
    return {k: v.float().contiguous() for k, v in w.items()}


def write_bin(path, tokens):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def forward(w, idx, tgt):
    x = w["wte.weight"][idx] + w["wpe.weight"][torch.arange(idx.shape[1])]
    for i in range(L):
        p = "h.%d." % i
        h = F.layer_norm(x, (D,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], 1e-5)
        q, k, v = (h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]).split(D, dim=2)
        q, k, v = [t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v)]
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D // H)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, D)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (D,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], 1e-5)
        h = F.gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (D,), w["ln_f.weight"], w["ln_f.bias"], 1e-5)
    return F.cross_entropy((x @ w["wte.weight"].t()).view(-1, V), tgt.view(-1))


def torch_losses(weights, tokens):
    w = {k: v.clone().requires_grad_(True) for k, v in weights.items() if not k.endswith(".attn.bias")}
    opt = torch.optim.SGD(list(w.values()), lr=LR)
    pos, losses = 0, []
    for _ in range(STEPS):  # llm.c's loader: B*T+1 tokens, advance by B*T, wrap
        if pos + B * T + 1 > len(tokens):
            pos = 0
        chunk = torch.tensor(tokens[pos:pos + B * T + 1])
        pos += B * T
        loss = forward(w, chunk[:-1].view(B, T), chunk[1:].view(B, T))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    binary = sys.argv[1]
    d = tempfile.mkdtemp()
    weights = gpt2_weights()
    write_safetensors(os.path.join(d, "w.safetensors"), weights)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, V, (B * T * 3 + 7,), generator=g).tolist()
    write_bin(os.path.join(d, "data.bin"), tokens)
    ref = torch_losses(weights, tokens)
    worst, failed = 0.0, False
    for strategy in ("none", "block", "selective"):
        cmd = [binary, "--init-from", os.path.join(d, "w.safetensors"), "--data", os.path.join(d, "data.bin"),
               "--heads", str(H), "--seq", str(T), "--batch", str(B), "--steps", str(STEPS),
               "--optimizer", "sgd", "--lr", str(LR), "--momentum", "0", "--grad-clip", "0",
               "--threads", "1", "--checkpoint", strategy, "--json"]
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        if out.returncode != 0:
            print("train_gpt failed:", out.stderr)
            sys.exit(1)
        ours = [json.loads(l)["loss"] for l in out.stdout.splitlines() if l.startswith("{")]
        for step, (a, b) in enumerate(zip(ours, ref), 1):
            rel = abs(a - b) / abs(b)
            worst = max(worst, rel)
            flag = "" if rel <= 1e-4 else "  <-- beyond 1e-4"
            failed |= rel > 1e-4
            print("%-9s step %d: remat %.7f  torch %.7f  rel %.2e%s" % (strategy, step, a, b, rel, flag))
        if len(ours) != STEPS:
            print("expected %d losses from train_gpt, got %d" % (STEPS, len(ours)))
            failed = True
    print("worst relative difference %.2e (limit 1e-4)" % worst)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
