#!/usr/bin/env python3
"""Writes tests/golden/data/configs/<variant>/: tiny random Hugging Face models,
one per config feature treespec must read exactly, with transformers' logits.

Each variant is built by transformers from a config (2 layers, hidden 32,
head_dim 16, vocab 64), its weights all drawn at random (biases and norm
weights too, so that none is a no-op), saved with save_pretrained (safetensors,
float32). Per variant the directory holds
  config.json           as transformers >= 5 saves it (`rope_parameters`)
  config_v4.json        the same config in the transformers 4 layout: top-level
                        `rope_theta`, `rope_scaling` (key `type` for linear /
                        dynamic as old files wrote it, `rope_type` otherwise),
                        no `layer_types`
  model.safetensors
  logits_v5.npy, logits_v4.npy   float32 [L, vocab]: transformers' logits at
                        every position of the prompt, the model loaded with
                        each config (eager attention, float32); they must agree
  rope_inv_freq.npy     float32 [head_dim / 2], the rotary embedding's inv_freq
and manifest.json (format_version 1): the prompt, the attention factor, the
command, the package versions and the file list.

Run with a Python that has torch and transformers (tools/goldens/requirements.txt):
  python tools/goldens/make_config_goldens.py
"""

import json
import os
import shlex
import shutil
import sys

import numpy as np
import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

FORMAT_VERSION = 1
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "golden", "data", "configs")
PROMPT_LEN = 24

BASE = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
            max_position_embeddings=128, tie_word_embeddings=False, bos_token_id=1,
            eos_token_id=2)

# name: (config class, model class, extra config fields)
VARIANTS = {
    "llama_theta": (LlamaConfig, LlamaForCausalLM,
                    dict(rope_parameters={"rope_type": "default", "rope_theta": 500.0})),
    "llama_linear": (LlamaConfig, LlamaForCausalLM,
                     dict(rope_parameters={"rope_type": "linear", "rope_theta": 1000.0,
                                           "factor": 4.0})),
    "llama_dynamic": (LlamaConfig, LlamaForCausalLM,
                      dict(max_position_embeddings=64,
                           rope_parameters={"rope_type": "dynamic", "rope_theta": 1000.0,
                                            "factor": 2.0})),
    "llama_yarn": (LlamaConfig, LlamaForCausalLM,
                   dict(max_position_embeddings=1024,
                        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                         "factor": 4.0, "original_max_position_embeddings": 256})),
    "llama_yarn_mscale": (LlamaConfig, LlamaForCausalLM,
                          dict(max_position_embeddings=1024,
                               rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                                "factor": 4.0, "mscale": 0.8,
                                                "mscale_all_dim": 0.5, "beta_fast": 16.0,
                                                "beta_slow": 2.0, "truncate": False,
                                                "original_max_position_embeddings": 256})),
    "llama_longrope": (LlamaConfig, LlamaForCausalLM,
                       dict(max_position_embeddings=128,
                            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                             "original_max_position_embeddings": 32,
                                             "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1,
                                                              3.8],
                                             "long_factor": [1.0, 1.5, 2.2, 3.0, 4.0, 5.2, 6.5,
                                                             8.0]})),
    "llama3": (LlamaConfig, LlamaForCausalLM,
               dict(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 32})),
    "llama_bias": (LlamaConfig, LlamaForCausalLM,
                   dict(attention_bias=True, mlp_bias=True,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "mistral_window": (MistralConfig, MistralForCausalLM,
                       dict(sliding_window=5,
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM,
              dict(head_dim=None, rope_parameters={"rope_type": "default",
                                                   "rope_theta": 1000000.0})),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM,
              dict(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.2 * noise)
            elif "embed_tokens" in name:
                p.copy_(noise)
            else:
                p.copy_(0.15 * noise)


def v4_layout(cfg):
    """transformers 4's config.json layout of the same model."""
    cfg = dict(cfg)
    rp = cfg.pop("rope_parameters")
    cfg.pop("layer_types", None)
    rp = dict(rp)
    cfg["rope_theta"] = rp.pop("rope_theta")
    kind = rp.pop("rope_type")
    if kind == "default":
        cfg["rope_scaling"] = None
    else:
        rp["type" if kind in ("linear", "dynamic") else "rope_type"] = kind
        cfg["rope_scaling"] = rp
    cfg["transformers_version"] = "4.46.3"
    return cfg


def logits_for(model_cls, directory, ids):
    model = model_cls.from_pretrained(directory, dtype=torch.float32,
                                      attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]))
    return model, out.logits[0].float().numpy()


def make(name, seed):
    cfg_cls, model_cls, extra = VARIANTS[name]
    fields = dict(BASE)
    fields.update(extra)
    if fields.get("head_dim", 0) is None:
        del fields["head_dim"]
    config = cfg_cls(**fields)
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    randomize(model, seed)
    out_dir = os.path.join(OUT, name)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)
    for extra_file in ("generation_config.json",):
        path = os.path.join(out_dir, extra_file)
        if os.path.exists(path):
            os.remove(path)
    with open(os.path.join(out_dir, "config.json")) as f:
        saved = json.load(f)
    assert "rope_parameters" in saved and "rope_theta" not in saved, saved
    with open(os.path.join(out_dir, "config_v4.json"), "w") as f:
        json.dump(v4_layout(saved), f, indent=2, sort_keys=True)
        f.write("\n")

    rng = np.random.RandomState(seed)
    ids = [1] + rng.randint(3, BASE["vocab_size"], size=PROMPT_LEN - 1).tolist()
    hf, logits_v5 = logits_for(model_cls, out_dir, ids)
    rotary = hf.model.rotary_emb
    inv_freq = rotary.inv_freq.float().numpy()
    attention_factor = float(rotary.attention_scaling)
    # The old layout, loaded through a scratch copy of the directory.
    scratch = out_dir + ".v4tmp"
    shutil.copytree(out_dir, scratch)
    shutil.copy(os.path.join(out_dir, "config_v4.json"), os.path.join(scratch, "config.json"))
    hf4, logits_v4 = logits_for(model_cls, scratch, ids)
    inv_freq_v4 = hf4.model.rotary_emb.inv_freq.float().numpy()
    shutil.rmtree(scratch)
    assert np.array_equal(inv_freq, inv_freq_v4), (name, inv_freq, inv_freq_v4)
    assert np.allclose(logits_v5, logits_v4, rtol=0, atol=1e-5), name
    np.save(os.path.join(out_dir, "logits_v5.npy"), logits_v5.astype(np.float32))
    np.save(os.path.join(out_dir, "logits_v4.npy"), logits_v4.astype(np.float32))
    np.save(os.path.join(out_dir, "rope_inv_freq.npy"), inv_freq.astype(np.float32))
    files = sorted(os.listdir(out_dir)) + ["manifest.json"]
    manifest = {
        "format_version": FORMAT_VERSION,
        "command": "python " + " ".join(shlex.quote(a) for a in
                                        [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "architecture": saved["architectures"][0],
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "seed": seed,
        "prompt_ids": ids,
        "rope_attention_factor": attention_factor,
        "logits_std": float(logits_v5.std()),
        "files": sorted(set(files)),
    }
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"{name}: {saved['architectures'][0]} logits std {logits_v5.std():.3f} "
          f"attention factor {attention_factor:.4f} inv_freq {np.round(inv_freq[:4], 5)}...")


def main():
    names = sys.argv[1:] or list(VARIANTS)
    for i, name in enumerate(VARIANTS):
        if name in names:
            make(name, seed=1000 + i)


if __name__ == "__main__":
    main()
