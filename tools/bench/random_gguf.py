#!/usr/bin/env python3
"""A random-weight Llama GGUF of any shape, for tools/bench/cpu_bench on models wider
than the caches.

The demo target (28 MB as f32) fits this machine's 32 MiB L3, and SmolLM2's K-quant
mixes keep most matrices in the fallback types (its width, 576, is not whole 256-element
blocks). A user's 7B model is neither: llama.cpp's Q4_K_M of it is Q4_K with Q6_K in half
the layers' v and ffn_down, 4 GB read per token. This writes the layer shapes asked for
(default: 2048 wide, 8 layers, GQA 16/4, ffn 5632, about 360M weights) with N(0, 0.02²)
weights as f16 (norms 1, f32) and the tokenizer metadata of an existing GGUF (the demo
target's, so that llama-bench loads it); `llama-quantize OUT Q4_K_M` then gives the
K-quant layout of a real model. The text it writes is noise; its step time is that of a
model of its size.

  P=~/.cache/treespec/llama.cpp
  $P/venv/bin/python tools/bench/random_gguf.py ~/.cache/treespec/target-f32.gguf \
      /tmp/wide-f16.gguf
  $P/build/bin/llama-quantize /tmp/wide-f16.gguf /tmp/wide-q4_k_m.gguf Q4_K_M

Needs numpy and gguf (tools/bench/build_llama_cpp.sh makes a venv with them).
"""

import argparse

import numpy as np
import gguf


def copy_tokenizer(src, w):
    """The tokenizer.* keys of GGUF `src` into writer `w`."""
    for f in src.fields.values():
        if not f.name.startswith("tokenizer."):
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            if f.types[-1] == gguf.GGUFValueType.STRING:
                w.add_array(f.name, [bytes(f.parts[i]).decode() for i in f.data])
            else:
                w.add_array(f.name, [f.parts[i].tolist()[0] for i in f.data])
        elif t == gguf.GGUFValueType.STRING:
            w.add_string(f.name, bytes(f.parts[f.data[0]]).decode())
        elif t == gguf.GGUFValueType.UINT32:
            w.add_uint32(f.name, int(f.parts[f.data[0]][0]))
        elif t == gguf.GGUFValueType.BOOL:
            w.add_bool(f.name, bool(f.parts[f.data[0]][0]))
        else:
            raise SystemExit(f"{f.name}: value type {t} is not copied")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("tokenizer_gguf", help="GGUF whose tokenizer (and vocabulary size) to use")
    p.add_argument("out")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv_heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=5632)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    src = gguf.GGUFReader(a.tokenizer_gguf)
    vocab = len(src.fields["tokenizer.ggml.tokens"].data)
    D, F, H, Hkv = a.hidden, a.ffn, a.heads, a.kv_heads
    Dh = D // H
    w = gguf.GGUFWriter(a.out, "llama")
    w.add_block_count(a.layers)
    w.add_context_length(2048)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(Hkv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    copy_tokenizer(src, w)

    rng = np.random.default_rng(a.seed)

    def r(rows, cols):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    w.add_tensor("token_embd.weight", r(vocab, D))
    w.add_tensor("output_norm.weight", np.ones(D, np.float32))
    w.add_tensor("output.weight", r(vocab, D))
    for i in range(a.layers):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", np.ones(D, np.float32))
        w.add_tensor(b + "ffn_norm.weight", np.ones(D, np.float32))
        w.add_tensor(b + "attn_q.weight", r(H * Dh, D))
        w.add_tensor(b + "attn_k.weight", r(Hkv * Dh, D))
        w.add_tensor(b + "attn_v.weight", r(Hkv * Dh, D))
        w.add_tensor(b + "attn_output.weight", r(D, H * Dh))
        w.add_tensor(b + "ffn_gate.weight", r(F, D))
        w.add_tensor(b + "ffn_up.weight", r(F, D))
        w.add_tensor(b + "ffn_down.weight", r(D, F))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
