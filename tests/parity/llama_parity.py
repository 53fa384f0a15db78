"""Parity of nn::Llama with a plain PyTorch implementation of Hugging Face's Llama (written here
from torch ops: RMSNorm in fp32, rotate_half rotary embeddings with Llama 3's scaling, repeat_kv
grouped-query attention, SwiGLU; Qwen 2's q/k/v biases, Qwen 3's per-head q/k RMSNorm): the
same Hugging Face-layout weights (a folder with config.json and model.safetensors), the same
token ids (one batch, every step), 5 plain SGD steps in PyTorch and in tests/parity/llama_steps, with and without
checkpointing; every step's loss must agree to 1e-4 relative.

    /usr/bin/python3 tests/parity/llama_parity.py build/tests/llama_steps
Exits 77 (skipped) when PyTorch is not installed (Debian: python3-torch).
"""
import json
import math
import os
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

B, T, STEPS, LR = 3, 24, 5, 0.1
torch.set_num_threads(1)

# name: config.json fields. The two the issue names (untied GQA at rope_theta 1e4, tied
# multi-query at 1e5), then Llama 3's rope scaling, Qwen 2's biases and Qwen 3's q/k norm with
# a head_dim apart from hidden_size / heads.
CONFIGS = {
    "llama_gqa_untied": dict(model_type="llama", vocab_size=97, hidden_size=64, intermediate_size=96,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False),
    "llama_mqa_tied": dict(model_type="llama", vocab_size=97, hidden_size=48, intermediate_size=80,
                           num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=1,
                           rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True),
    "llama3_scaled": dict(model_type="llama", vocab_size=97, hidden_size=64, intermediate_size=96,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
                          rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
    "qwen2_bias": dict(model_type="qwen2", vocab_size=97, hidden_size=64, intermediate_size=96,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True),
    "qwen3_qknorm": dict(model_type="qwen3", vocab_size=97, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                         rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False),
}


def head_dim(c):
    return c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])


def weights(c, seed):
    """Hugging Face's names; torch.nn.Linear weights [out, in]."""
    g = torch.Generator().manual_seed(seed)
    d, F_, V, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    H, KVH, D = c["num_attention_heads"], c["num_key_value_heads"], head_dim(c)
    rnd = lambda *s: torch.randn(*s, generator=g)
    w = {"model.embed_tokens.weight": rnd(V, d) * 0.1, "model.norm.weight": 1 + 0.1 * rnd(d)}
    for i in range(L):
        p = "model.layers.%d." % i
        w[p + "input_layernorm.weight"] = 1 + 0.1 * rnd(d)
        w[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rnd(d)
        for x, out in (("q", H * D), ("k", KVH * D), ("v", KVH * D)):
            w[p + "self_attn.%s_proj.weight" % x] = rnd(out, d) / math.sqrt(d)
            if c["model_type"] == "qwen2":
                w[p + "self_attn.%s_proj.bias" % x] = 0.1 * rnd(out)
        w[p + "self_attn.o_proj.weight"] = rnd(d, H * D) / math.sqrt(H * D)
        if c["model_type"] == "qwen3":
            w[p + "self_attn.q_norm.weight"] = 1 + 0.1 * rnd(D)
            w[p + "self_attn.k_norm.weight"] = 1 + 0.1 * rnd(D)
        w[p + "mlp.gate_proj.weight"] = rnd(F_, d) / math.sqrt(d)
        w[p + "mlp.up_proj.weight"] = rnd(F_, d) / math.sqrt(d)
        w[p + "mlp.down_proj.weight"] = rnd(d, F_) / math.sqrt(F_)
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = rnd(V, d) / math.sqrt(d)
    return {k: v.float().contiguous() for k, v in w.items()}


def inv_freq(c):
    """Hugging Face's _compute_default_rope_parameters / _compute_llama3_parameters."""
    D = head_dim(c)
    f = 1.0 / (c["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    s = c.get("rope_scaling")
    if s:
        factor, low, high, old = s["factor"], s["low_freq_factor"], s["high_freq_factor"], \
            s["original_max_position_embeddings"]
        low_wl, high_wl = old / low, old / high
        wl = 2 * math.pi / f
        scaled = torch.where(wl > low_wl, f / factor, f)
        smooth = (old / wl - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wl < high_wl) * ~(wl > low_wl)
        f = torch.where(medium, smoothed, scaled)
    return f


def rms_norm(x, w, eps):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward(c, w, idx, tgt):
    H, KVH, D, eps = c["num_attention_heads"], c["num_key_value_heads"], head_dim(c), c["rms_norm_eps"]
    freqs = torch.arange(T).float()[:, None] * inv_freq(c)[None, :]  # (T, D/2), float32 as HF
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x = w["model.embed_tokens.weight"][idx]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)

        def proj(name, heads):
            y = h @ w[p + "self_attn.%s_proj.weight" % name].t()
            if p + "self_attn.%s_proj.bias" % name in w:
                y = y + w[p + "self_attn.%s_proj.bias" % name]
            return y.view(B, T, heads, D)
        q, k, v = proj("q", H), proj("k", KVH), proj("v", KVH)
        if c["model_type"] == "qwen3":
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, D)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KVH, dim=1)  # repeat_kv
        v = v.repeat_interleave(H // KVH, dim=1)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        s = s.masked_fill(mask, float("-inf"))
        a = (F.softmax(s.float(), dim=-1) @ v).transpose(1, 2).reshape(B, T, H * D)
        x = x + a @ w[p + "self_attn.o_proj.weight"].t()
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        m = F.silu(h @ w[p + "mlp.gate_proj.weight"].t()) * (h @ w[p + "mlp.up_proj.weight"].t())
        x = x + m @ w[p + "mlp.down_proj.weight"].t()
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    return F.cross_entropy((x @ head.t()).view(-1, c["vocab_size"]), tgt.reshape(-1))


def torch_losses(c, weights, ids):
    w = {k: v.clone().requires_grad_(True) for k, v in weights.items()}
    opt = torch.optim.SGD(list(w.values()), lr=LR)
    losses = []
    for s in range(STEPS):
        rows = torch.tensor(ids[s * B * (T + 1):(s + 1) * B * (T + 1)]).view(B, T + 1)
        loss = forward(c, w, rows[:, :-1], rows[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    binary = sys.argv[1]
    root = tempfile.mkdtemp()
    worst, failed = 0.0, False
    for n, (name, c) in enumerate(CONFIGS.items()):
        d = os.path.join(root, name)
        os.mkdir(d)
        cfg = dict(c, architectures=["LlamaForCausalLM"], hidden_act="silu", torch_dtype="float32")
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        w = weights(c, 10 + n)
        write_safetensors(os.path.join(d, "model.safetensors"), w)
        g = torch.Generator().manual_seed(100 + n)
        # one batch, every step: the loss must fall (below)
        ids = torch.randint(0, c["vocab_size"], (B * (T + 1),), generator=g).tolist() * STEPS
        with open(os.path.join(d, "ids.txt"), "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
        ref = torch_losses(c, w, ids)
        for strategy in ("none", "block", "save_linear"):
            cmd = [binary, d, os.path.join(d, "ids.txt"), str(STEPS), str(LR), str(B), str(T), strategy]
            out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                                 env=dict(os.environ, OMP_NUM_THREADS="1"))
            if out.returncode != 0:
                print("llama_steps failed on %s: %s" % (name, out.stderr))
                sys.exit(1)
            ours = [float(l) for l in out.stdout.split()]
            if len(ours) != STEPS:
                print("expected %d losses from llama_steps, got %d" % (STEPS, len(ours)))
                failed = True
            for step, (a, b) in enumerate(zip(ours, ref), 1):
                rel = abs(a - b) / abs(b)
                worst = max(worst, rel)
                flag = "" if rel <= 1e-4 else "  <-- beyond 1e-4"
                failed |= rel > 1e-4
                print("%-16s %-11s step %d: remat %.7f  torch %.7f  rel %.2e%s"
                      % (name, strategy, step, a, b, rel, flag))
        # the steps must move the loss: parity of a model that does not learn proves less
        if not ref[-1] < ref[0]:
            print("%s: the reference loss did not fall (%.4f -> %.4f)" % (name, ref[0], ref[-1]))
            failed = True
    print("worst relative difference %.2e (limit 1e-4)" % worst)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
