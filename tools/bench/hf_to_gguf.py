#!/usr/bin/env python3
"""A Llama checkpoint (HF directory: config.json, model.safetensors, SentencePiece
tokenizer.model) as a GGUF file, for tools/bench/cpu_bench's llama.cpp side.

llama.cpp's convert_hf_to_gguf.py needs a torch with float8 types (>= 2.1); this machine's
Debian torch is 1.13, so this script writes the same layout with gguf-py alone: llama.*
metadata, the SentencePiece vocabulary, tensors under ggml names, and the Q/K rows permuted
from HF's half-split RoPE layout to ggml's adjacent pairs (what convert_hf_to_gguf.py does;
core/model/gguf_model.h undoes it on load). Norms stay F32; matrices are written as --outtype.

  ~/.cache/treespec/llama.cpp/venv/bin/python tools/bench/hf_to_gguf.py \
      models/demo/target /tmp/target-f16.gguf --outtype f16

Needs numpy, safetensors, sentencepiece and gguf (tools/bench/build_llama_cpp.sh makes a venv
with them).
"""

import argparse
import json
import os

import numpy as np
import gguf
import sentencepiece
from safetensors.numpy import load_file


def permute(w, n_head):
    """HF half-split rows (i, i + d/2) -> ggml adjacent rows (2i, 2i + 1), per head."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def add_vocab(writer, model_dir, cfg):
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.id_to_piece(i).encode("utf-8"))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(gguf.TokenType.UNKNOWN)
        elif sp.is_control(i):
            types.append(gguf.TokenType.CONTROL)
        elif sp.is_byte(i):
            types.append(gguf.TokenType.BYTE)
        elif sp.is_unused(i):
            types.append(gguf.TokenType.UNUSED)
        else:
            types.append(gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(cfg.get("bos_token_id", 1))
    writer.add_eos_token_id(cfg.get("eos_token_id", 2))
    writer.add_unk_token_id(sp.unk_id())
    writer.add_add_bos_token(True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=["f32", "f16"], default="f32")
    args = ap.parse_args()
    cfg = json.load(open(os.path.join(args.model_dir, "config.json")))
    if cfg.get("model_type") != "llama":
        raise SystemExit(f"config.json model_type={cfg.get('model_type')!r}: only llama is supported")
    n_head, n_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    D = cfg["hidden_size"]
    head_dim = cfg.get("head_dim", D // n_head)
    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name(os.path.basename(os.path.normpath(args.model_dir)))
    w.add_context_length(cfg.get("max_position_embeddings", 2048))
    w.add_embedding_length(D)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-5))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if args.outtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    add_vocab(w, args.model_dir, cfg)

    mat = np.float32 if args.outtype == "f32" else np.float16
    st = load_file(os.path.join(args.model_dir, "model.safetensors"))
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
                 "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    for i in range(cfg["num_hidden_layers"]):
        for hf, gg in per_layer.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"
    for hf, t in st.items():
        if hf not in names:
            raise SystemExit(f"{hf}: tensor not handled by this converter")
        t = t.astype(np.float32)
        if hf.endswith("q_proj.weight"):
            t = permute(t, n_head)
        elif hf.endswith("k_proj.weight"):
            t = permute(t, n_kv)
        w.add_tensor(names[hf], t.astype(mat) if t.ndim == 2 else t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
