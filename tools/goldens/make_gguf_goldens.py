#!/usr/bin/env python3
"""Goldens for loading GGUF files directly (tests/golden/gguf_test.cc).

Reference: transformers, which reads a GGUF with `gguf_file=` and dequantises every
tensor to float32 (undoing llama.cpp's Q/K row permutation), and the `gguf` package
(gguf-py, llama.cpp's own Python reader) for raw dequantised tensor values.

Writes tests/golden/data/smollm2_gguf/goldens.json (format_version 1):
  prompts:    for fixed prompts, the token ids, transformers' greedy continuation
              (generate, do_sample=False) and its text, argmax at every prompt
              position, and the top-20 ids/values of the last position's logits;
  tokenizer:  for ~20 texts, ids without and with special tokens and the decoded text
              (AutoTokenizer built from the same GGUF);
  tensors:    for a few tensors, gguf-py's dequantised values of rows 0 and the last
              row (first 64 columns) in the file's own (permuted) layout, and the
              HF-layout (un-permuted) values transformers holds for the same rows.

Run from the repository root (needs torch, transformers, gguf, numpy, accelerate from PyPI):
  python3 -m venv /tmp/venv-gguf && /tmp/venv-gguf/bin/pip install torch transformers gguf numpy accelerate
  /tmp/venv-gguf/bin/python tools/goldens/make_gguf_goldens.py
"""

import argparse
import hashlib
import json
import os

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
import gguf
from gguf import GGUFReader
from gguf.quants import dequantize

FORMAT_VERSION = 1
COMMAND = "/tmp/venv-gguf/bin/python tools/goldens/make_gguf_goldens.py"

PROMPTS = {
    "capital": "The capital of France is",
    "story": "Once upon a time, in a small village,",
    "chat": "<|im_start|>user\nWhat is the largest planet in our solar system?<|im_end|>\n"
            "<|im_start|>assistant\n",
}
NUM_NEW = 24

TEXTS = [
    "Hello world",
    "Hello, world! How are you today?",
    " leading space",
    "trailing spaces   ",
    "multiple   spaces\tand\ttabs",
    "line one\nline two\n\nline four",
    "Numbers: 1234567 and 3.14159, 2024-11-23",
    "I'm sure they'll say we've done it, didn't they?",
    "CamelCaseWords and snake_case_words",
    "def f(x):\n    return x ** 2  # square",
    "Ünïcödé: café, naïve, Zürich, ñandú",
    "中文字符和日本語のテキスト",
    "Emoji: 😀🚀👍🏽",
    "Привет, мир!",
    "<|im_start|>user\nhi<|im_end|>",
    "a<|endoftext|>b",
    "URL https://example.com/path?q=1&r=2",
    "   ",
    "",
    "The quick brown fox jumps over the lazy dog.",
    "Tabs\t\tand\r\nwindows newlines",
]

TENSORS = ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
           "blk.3.ffn_down.weight", "blk.29.attn_v.weight"]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def rnd(x):
    return [float(f"{v:.7g}") for v in x]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default="../shared/models/smollm2-135m-instruct/"
                    "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", default="tests/golden/data/smollm2_gguf/goldens.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    d, f = os.path.split(os.path.abspath(args.gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32)
    model.eval()

    out = {
        "format_version": FORMAT_VERSION,
        "command": COMMAND,
        "gguf": os.path.basename(args.gguf),
        "gguf_sha256": sha256(args.gguf),
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "gguf": getattr(gguf, "__version__", "?"), "numpy": np.__version__},
        "prompts": [],
        "tokenizer": [],
        "tensors": [],
    }
    for name, text in PROMPTS.items():
        ids = tok(text, add_special_tokens=False)["input_ids"]
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = model(x).logits[0].float()
            gen = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=NUM_NEW,
                                 do_sample=False, eos_token_id=None, pad_token_id=2)
        new = gen[0, len(ids):].tolist()
        last = logits[-1]
        top = torch.topk(last, 20)
        out["prompts"].append({
            "name": name, "text": text, "ids": ids, "greedy_new_ids": new,
            "greedy_text": tok.decode(new, skip_special_tokens=True),
            "argmax": logits.argmax(-1).tolist(),
            "top_ids": top.indices.tolist(), "top_values": rnd(top.values.tolist()),
        })
    for text in TEXTS:
        plain = tok(text, add_special_tokens=False)["input_ids"]
        special = tok(text, add_special_tokens=True)["input_ids"]
        out["tokenizer"].append({"text": text, "ids": plain, "ids_special": special,
                                 "decoded": tok.decode(plain, skip_special_tokens=True)})

    reader = GGUFReader(args.gguf)
    by_name = {t.name: t for t in reader.tensors}
    sd = model.state_dict()
    hf_names = {"token_embd.weight": "model.embed_tokens.weight",
                "blk.0.attn_q.weight": "model.layers.0.self_attn.q_proj.weight",
                "blk.0.attn_k.weight": "model.layers.0.self_attn.k_proj.weight",
                "blk.3.ffn_down.weight": "model.layers.3.mlp.down_proj.weight",
                "blk.29.attn_v.weight": "model.layers.29.self_attn.v_proj.weight"}
    for name in TENSORS:
        t = by_name[name]
        w = dequantize(t.data, t.tensor_type).reshape(tuple(int(v) for v in reversed(t.shape)))
        hf = sd[hf_names[name]].float().numpy()
        rows = [0, 1, 2, w.shape[0] - 1]
        out["tensors"].append({
            "name": name, "hf_name": hf_names[name], "type": t.tensor_type.name,
            "shape": list(w.shape), "rows": rows,
            "gguf_values": [rnd(w[r, :64]) for r in rows],
            "hf_values": [rnd(hf[r, :64]) for r in rows],
            "gguf_row_sums": [float(np.float64(w[r]).sum()) for r in rows],
        })
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(out, fh, ensure_ascii=False, indent=1)
    print("wrote", args.out)
    for p in out["prompts"]:
        print(p["name"], repr(p["greedy_text"]))


if __name__ == "__main__":
    main()
