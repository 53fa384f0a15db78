"""A tokenizer.json (Hugging Face's format: a BPE model, <|endoftext|> an added special token)
from a tokenizer of GPT-2's format (encoder.json + vocab.bpe, as tests/text/make_tiny_tokenizer
writes one), for the command-line tests. Usage: tokenizer_json.py SRC_DIR OUT_FILE"""
import json
import sys

src, out = sys.argv[1], sys.argv[2]
vocab = json.load(open(src + "/encoder.json", encoding="utf-8"))
eot = vocab.pop("<|endoftext|>")
merges = [l.rstrip("\n") for l in open(src + "/vocab.bpe", encoding="utf-8").readlines()[1:] if l.strip()]
json.dump({"model": {"type": "BPE", "vocab": vocab, "merges": merges},
           "added_tokens": [{"id": eot, "content": "<|endoftext|>", "special": True}]},
          open(out, "w", encoding="utf-8"))
