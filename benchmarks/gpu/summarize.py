"""Summarizes a run_gpu.sh raw folder as markdown: which steps passed, the GPU tests' result, then
tokens/s, the ledger's peak, reserved bytes (ours against the estimate) and PyTorch's allocated and
reserved peaks at GPT-2 124M shapes, and the attention's memory against sequence length.
    python3 benchmarks/gpu/summarize.py RAWDIR [TESTS_EXIT_CODE [SUMMARY_JSON]] > summary.md
SUMMARY_JSON (when given) gets one object per timed run: impl, checkpoint, seq, batch, tokens_per_s,
step_s, reserved_bytes, peak_bytes (a JSON list, empty when nothing ran).
Missing or broken files show as missing rows, never as a crash: the summary must always come back.
"""
import json
import os
import re
import sys

raw = sys.argv[1]
tests_rc = sys.argv[2] if len(sys.argv) > 2 else "?"
GiB = 1024.0 ** 3


def text(name):
    try:
        with open(os.path.join(raw, name), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def rows(name):
    out = []
    for line in text(name).splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def remat_rows(name):
    """A remat file's rows. Strategies that take turns in one process share its caching
    allocator, so reserved bytes are the first strategy's alone: the later rows get None."""
    out = rows(name)
    for d in out[1:]:
        d["peak_reserved_bytes"] = None
    return out


def gib(v):
    return "%.2f" % (v / GiB) if isinstance(v, (int, float)) else "-"


print("# GPU run")
machine = text("machine.txt").strip()
if machine:
    print("\n```\n" + machine[:1800] + "\n```")

print("\n## Steps\n")
for line in text("run.log").splitlines():
    if line.startswith("== "):
        print("- " + line[3:])

tests = text("cuda_tests.txt")
counts = re.findall(r"(\d+) passed, (\d+) failed", tests)
print("\n## GPU tests (exit code %s)\n" % tests_rc)
if counts:
    print("%s passed, %s failed." % counts[-1])
else:
    print("No \"N passed, M failed\" line in cuda_tests.txt: see its log in results.tar.gz.")
failures = [l for l in tests.splitlines() if l.startswith("FAILED")]
if failures:
    print("\n```\n" + "\n".join(failures[:40]) + "\n```")
detail = [l for l in tests.splitlines() if l.startswith("  estimator") or l.startswith("  GPT")]
if detail:
    print("\n```\n" + "\n".join(detail[:20]) + "\n```")

print("\n## GPT-2 124M shapes\n")
print("L=12, d=768, heads=12, seq=1024, batch 8, vocab 50257; fp32 with TF32 GEMMs unless a row says bf16 "
      "(remat: gpt_step_cuda --precision bf16; PyTorch: autocast), AdamW. "
      "remat: peak = the ledger's live bytes, reserved = what its caching allocator holds from "
      "cudaMalloc (predicted = the estimator's, before the run; strategies that take turns in "
      "one process share the allocator, so only the first has its own reserved bytes: block's "
      "is the run alone). PyTorch: "
      "torch.cuda.max_memory_allocated and max_memory_reserved after warm-up.\n")
print("| impl | checkpoint | tokens/s | step s | peak GiB | reserved GiB | predicted reserved GiB | launches/step | host waits/step |")
print("|---|---|---|---|---|---|---|---|---|")
if not rows("remat_gpt2_124m.jsonl") and not rows("remat_gpt2_124m_bf16.jsonl") and \
        not any(rows("torch_gpt2_124m_%s.json" % c) for c in ("none", "block")):
    print("| (no results: every step of this table failed or was skipped, see Steps) | | | | | | | | |")
for d in remat_rows("remat_gpt2_124m.jsonl") + [dict(d, checkpoint="%s (alone)" % d.get("checkpoint"))
                                                for d in remat_rows("remat_gpt2_124m_block.jsonl")] + \
        remat_rows("remat_gpt2_124m_bf16.jsonl"):
    print("| remat%s | %s | %.0f | %.4f | %s | %s | %s | %s | %s |" % (
        ", bf16" if d.get("precision") == "bf16" else "",
        d.get("checkpoint"), d.get("tokens_per_s", 0), d.get("step_s", 0), gib(d.get("peak_bytes")),
        gib(d.get("peak_reserved_bytes")), gib(d.get("predicted_reserved_bytes")),
        d.get("launches_per_step", "-"), d.get("host_waits_per_step", "-")))
for ck in ("none", "block"):
    for name in ("torch_gpt2_124m_%s.json" % ck, "torch_gpt2_124m_eager_%s.json" % ck,
                 "torch_gpt2_124m_bf16_%s.json" % ck):
        for d in rows(name):
            print("| PyTorch %s, %s%s attention%s | %s | %.0f | %.4f | %s | %s | - | - | - |" % (
                d.get("torch_version"), "autocast bf16, " if d.get("precision") == "bf16" else "",
                d.get("attention", "?"),
                ", fused AdamW" if d.get("fused_adamw") else "", ck, d.get("tokens_per_s", 0),
                d.get("step_s", 0), gib(d.get("cuda_max_memory_allocated_bytes")),
                gib(d.get("cuda_max_memory_reserved_bytes"))))

print("\n## Determinism on the device\n")
print("Each strategy's loss and gradients (wte's included) at the initial weights, hashed "
      "(gpt_step_cuda --grad-hash), in two processes: every hash must be the same.\n")
hashes = [(f, d.get("checkpoint"), d.get("grad_hash")) for f in
          ("remat_gpt2_124m.jsonl", "remat_gpt2_124m_repeat.jsonl") for d in rows(f) if d.get("grad_hash")]
if not hashes:
    print("(no hashes: the runs failed or were skipped, see Steps)")
else:
    print("| run | checkpoint | hash |")
    print("|---|---|---|")
    for f, ck, h in hashes:
        print("| %s | %s | %s |" % ("repeat" if "repeat" in f else "first", ck, h))
    print("\n%s" % ("All the same: deterministic, checkpointed = plain bit for bit."
                    if len(set(h for _, _, h in hashes)) == 1 else "**The hashes differ.**"))

print("\n## Profile (GPT-2 124M, B8 T1024; CUDA events around each launch)\n")
prof = rows("remat_profile.jsonl")
if not prof:
    print("(no profile: the step failed or was skipped, see Steps)")
for d in prof:
    print("%s: %.1f ms a step profiled (%.1f ms of device time in the kernels below and the rest of the JSON's top 40)\n" % (
        d.get("checkpoint"), 1e3 * d.get("step_s", 0), sum(k.get("ms_per_step", 0) for k in d.get("profile", []))))
    print("| ms/step | calls/step | kernel |")
    print("|---|---|---|")
    for k in d.get("profile", [])[:20]:
        print("| %.3f | %.1f | %s |" % (k.get("ms_per_step", 0), k.get("calls_per_step", 0), k.get("name")))
    print()
kinds = [l for l in text("remat_profile.log").splitlines() if l.startswith("  by kind") or
         re.match(r"^  (kind|gemm|attention|norm|pointwise|loss|embedding|optimizer) ", l)]
if kinds:
    print("By kind, against the estimator's FLOPs and bytes (from the step's log):\n\n```\n" + "\n".join(kinds) + "\n```")

print("\n## Attention alone (forward + backward, batch 8, 12 heads of 64, causal)\n")
print("Issue 12's target: remat's fused attention at least as fast as PyTorch eager (the T x T "
      "matrix materialized) at T 1024 and 4096; PyTorch's sdpa for context.\n")
print("| impl | path | seq | ms | peak GiB |")
print("|---|---|---|---|---|")
att = rows("remat_attention.jsonl") + rows("torch_attention.jsonl")
if not att:
    print("| (no results: every step of this table failed or was skipped, see Steps) | | | | |")
for d in att:
    print("| %s | %s | %s | %.2f | %s |" % (
        d.get("impl") if d.get("impl") == "remat" else "PyTorch %s" % d.get("torch_version"),
        d.get("path"), d.get("seq"), 1e3 * d.get("fwd_bwd_s", 0), gib(d.get("peak_bytes"))))

print("\n## Sequence length (batch 1, no checkpointing)\n")
print("| impl | checkpoint | seq | tokens/s | peak GiB | reserved GiB |")
print("|---|---|---|---|---|---|")
if not any(rows("%s_seq%d.%s" % (i, s, e)) for i, e in (("remat", "jsonl"), ("torch", "json"))
           for s in (1024, 4096)):
    print("| (no results: every step of this table failed or was skipped, see Steps) | | | | | |")
for seq in (1024, 4096):
    for d in remat_rows("remat_seq%d.jsonl" % seq):
        print("| remat | %s | %d | %.0f | %s | %s |" % (d.get("checkpoint"), seq, d.get("tokens_per_s", 0),
                                                      gib(d.get("peak_bytes")), gib(d.get("peak_reserved_bytes"))))
    for d in rows("torch_seq%d.json" % seq):
        print("| PyTorch %s | none | %d | %.0f | %s | %s |" % (
            d.get("attention", "?"), seq, d.get("tokens_per_s", 0),
            gib(d.get("cuda_max_memory_allocated_bytes")), gib(d.get("cuda_max_memory_reserved_bytes"))))

# summary.json: one object per timed run, remat's and PyTorch's alike
if len(sys.argv) > 3:
    runs = []
    for f in ("remat_gpt2_124m.jsonl", "remat_gpt2_124m_block.jsonl", "remat_gpt2_124m_bf16.jsonl",
              "remat_seq1024.jsonl", "remat_seq4096.jsonl"):
        for d in remat_rows(f):
            runs.append({"impl": "remat-bf16" if d.get("precision") == "bf16" else "remat", "checkpoint": d.get("checkpoint"), "seq": d.get("seq"),
                         "batch": d.get("batch"), "tokens_per_s": d.get("tokens_per_s"),
                         "step_s": d.get("step_s"), "reserved_bytes": d.get("peak_reserved_bytes"),
                         "peak_bytes": d.get("peak_bytes")})
    for f in ("torch_gpt2_124m_none.json", "torch_gpt2_124m_block.json", "torch_gpt2_124m_eager_none.json",
              "torch_gpt2_124m_eager_block.json", "torch_gpt2_124m_bf16_none.json",
              "torch_gpt2_124m_bf16_block.json", "torch_seq1024.json", "torch_seq4096.json"):
        for d in rows(f):
            runs.append({"impl": "torch-%s%s%s" % ("bf16-" if d.get("precision") == "bf16" else "",
                                                  d.get("attention", "?"),
                                                  "-fused-adamw" if d.get("fused_adamw") else ""),
                         "checkpoint": d.get("checkpoint"), "seq": d.get("seq"), "batch": d.get("batch"),
                         "tokens_per_s": d.get("tokens_per_s"), "step_s": d.get("step_s"),
                         "reserved_bytes": d.get("cuda_max_memory_reserved_bytes"),
                         "peak_bytes": d.get("cuda_max_memory_allocated_bytes")})
    with open(sys.argv[3], "w") as f:
        json.dump(runs, f, indent=1)
