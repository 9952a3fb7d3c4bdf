#!/usr/bin/env python3
"""Writes a random-weight Llama checkpoint of any shape, for benchmarks.

spec_bench's hardest GPU case (issue "Speculation that always pays") is a
7B-shape fp16 target with a drafter whose drafts are useless. No such trained
model fits this repository, so this writes one: the demo target's tokenizer
and vocabulary (so the demo drafters and a randomized drafter serve it), the
Llama-2-7B layer shapes by default, N(0, std^2) weights (norms 1) drawn with
torch on the GPU when there is one, saved as float16 safetensors shards. The
model's text is noise; its step time is a 7B model's.

  python3 tools/models/random_llama.py OUT_DIR [--tokenizer models/demo/target]
      [--hidden 4096 --layers 32 --heads 32 --kv_heads 32 --ffn 11008] [--seed 0]

Needs torch and safetensors (the GPU machine's image has both).
"""

import argparse
import json
import os
import shutil

import torch
from safetensors.torch import save_file


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--tokenizer", default="models/demo/target",
                   help="model directory whose tokenizer files and vocabulary are copied")
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv_heads", type=int, default=32)
    p.add_argument("--ffn", type=int, default=11008)
    p.add_argument("--std", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max_shard_gib", type=float, default=4.0)
    a = p.parse_args()

    with open(os.path.join(a.tokenizer, "config.json")) as f:
        base = json.load(f)
    head_dim = a.hidden // a.heads
    config = dict(base, hidden_size=a.hidden, intermediate_size=a.ffn, num_hidden_layers=a.layers,
                  num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, head_dim=head_dim,
                  max_position_embeddings=4096, tie_word_embeddings=False, torch_dtype="float16")
    os.makedirs(a.out, exist_ok=True)
    for name in os.listdir(a.tokenizer):
        if name.startswith("tokenizer") or name in ("special_tokens_map.json", "generation_config.json"):
            shutil.copy(os.path.join(a.tokenizer, name), a.out)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)

    vocab, h, kv = config["vocab_size"], a.hidden, a.kv_heads * head_dim
    shapes = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,),
              "lm_head.weight": (vocab, h)}
    for i in range(a.layers):
        pre = "model.layers.%d." % i
        shapes.update({pre + "input_layernorm.weight": (h,), pre + "post_attention_layernorm.weight": (h,),
                       pre + "self_attn.q_proj.weight": (h, h), pre + "self_attn.k_proj.weight": (kv, h),
                       pre + "self_attn.v_proj.weight": (kv, h), pre + "self_attn.o_proj.weight": (h, h),
                       pre + "mlp.gate_proj.weight": (a.ffn, h), pre + "mlp.up_proj.weight": (a.ffn, h),
                       pre + "mlp.down_proj.weight": (h, a.ffn)})
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    shards, shard, size, limit = [], {}, 0, a.max_shard_gib * 2**30
    for name, shape in shapes.items():
        if name.endswith("norm.weight"):
            t = torch.ones(shape, dtype=torch.float16)
        else:
            t = (torch.randn(shape, generator=gen, device=dev) * a.std).half().cpu()
        if shard and size + t.numel() * 2 > limit:
            shards.append(shard)
            shard, size = {}, 0
        shard[name] = t
        size += t.numel() * 2
    shards.append(shard)
    weight_map = {}
    for k, s in enumerate(shards):
        fname = "model-%05d-of-%05d.safetensors" % (k + 1, len(shards))
        save_file(s, os.path.join(a.out, fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in s})
    total = sum(t.numel() * 2 for s in shards for t in s.values())
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    print("random_llama: %s: %.2f GB in %d shards" % (a.out, total / 1e9, len(shards)))


if __name__ == "__main__":
    main()
