#!/usr/bin/env python3
"""Writes the tiny random Hugging Face checkpoints under tests/fixtures/models/.

Each model is built with transformers (LlamaConfig / MambaConfig), filled with
deterministic random weights large enough that logits are far from zero (so a
golden comparison means something), and saved with save_pretrained in
safetensors format. No tokenizer is written: tests feed token ids.

  tiny_llama_gqa          vocab 128, hidden 64, 3 layers, 8 heads / 2 kv heads, untied
  tiny_llama_gqa_bf16     the same weights stored as bfloat16
  tiny_llama_gqa_f16      the same weights stored as float16
  tiny_llama_gqa_sharded  the same weights in >= 2 shards + model.safetensors.index.json
  tiny_llama3             GQA, head_dim 32, tied embeddings, rope_theta 500000 and
                          llama3 rope scaling (factor 8, low 1, high 4, original 32)
  tiny_mamba              vocab 128, hidden 64, 2 layers, state 16, conv 4, expand 2

Run with the pinned environment (tools/goldens/requirements.txt):
  .venv/bin/python tools/models/tiny_model_writer.py [--out tests/fixtures/models]
The output is byte-for-byte reproducible for fixed package versions.
"""

import argparse
import json
import math
import os
import shutil

import torch
from transformers import LlamaConfig, LlamaForCausalLM, MambaConfig, MambaForCausalLM

SEED = 20241122


def _fill(model, seed, std_for):
    """Overwrites every parameter with N(mean, std) values from one generator.

    std_for(name, param) returns (mean, std), or None to leave the parameter to
    a custom rule applied by the caller afterwards.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            rule = std_for(name, p)
            if rule is None:
                continue
            mean, std = rule
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * std + mean)
    return gen


def _llama_std(name, p):
    if name.endswith("norm.weight"):
        return (1.0, 0.1)  # norms near 1 but not all ones, so their loading is tested
    if "embed_tokens" in name or "lm_head" in name:
        return (0.0, 0.5)
    # Projections: std ~ 1.5/sqrt(fan_in) keeps activations O(1) through the layers.
    return (0.0, 1.5 / math.sqrt(p.shape[1]))


def llama_gqa_config():
    return LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        torch_dtype="float32",
    )


def llama3_config():
    # head_dim 32 with theta 500000 gives wavelengths 6.3, 14.3, 32.4, 73.6, ...:
    # with original_max_position_embeddings 32, low 1, high 4 the first is kept,
    # the second is smoothed (8 <= 14.3 <= 32) and the rest are divided by 8,
    # so every branch of the llama3 rule is exercised.
    return LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        torch_dtype="float32",
    )


def mamba_config():
    return MambaConfig(
        vocab_size=128,
        hidden_size=64,
        state_size=16,
        num_hidden_layers=2,
        conv_kernel=4,
        expand=2,
        time_step_rank="auto",
        layer_norm_epsilon=1e-5,
        use_bias=False,
        use_conv_bias=True,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        torch_dtype="float32",
    )


def build_llama(config, seed):
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    _fill(model, seed, _llama_std)
    model.tie_weights()
    return model


def build_mamba(config, seed):
    torch.manual_seed(seed)
    model = MambaForCausalLM(config).eval()

    def std_for(name, p):
        if name.endswith("norm.weight") or name.endswith("norm_f.weight"):
            return (1.0, 0.1)
        if "embeddings" in name:
            return (0.0, 0.5)
        if name.endswith("conv1d.weight"):
            return (0.0, 0.4)
        if name.endswith("conv1d.bias"):
            return (0.0, 0.1)
        if name.endswith(("A_log", "D", "dt_proj.bias")):
            return None  # structured below
        return (0.0, 1.5 / math.sqrt(p.shape[1]))

    gen = _fill(model, seed, std_for)
    C, N = config.intermediate_size, config.state_size
    with torch.no_grad():
        for layer in model.backbone.layers:
            mixer = layer.mixer
            # S4D-real initialisation (A = -(n + 1)) with jitter; D near 1.
            a = torch.arange(1, N + 1, dtype=torch.float32).expand(C, N)
            mixer.A_log.copy_(torch.log(a) + 0.1 * torch.randn((C, N), generator=gen))
            mixer.D.copy_(1.0 + 0.2 * torch.randn((C,), generator=gen))
            # dt = softplus(bias) log-uniform in [0.01, 0.3], as Mamba's own init.
            u = torch.rand((C,), generator=gen)
            dt = torch.exp(u * (math.log(0.3) - math.log(0.01)) + math.log(0.01))
            mixer.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))
    model.tie_weights()
    return model


def save(model, out_dir, **kwargs):
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True, **kwargs)
    names = sorted(os.listdir(out_dir))
    size = sum(os.path.getsize(os.path.join(out_dir, n)) for n in names)
    print(f"  {os.path.basename(out_dir):24s} {size / 1024:8.1f} KiB  {names}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.normpath(os.path.join(here, "..", "..", "tests", "fixtures", "models"))
    parser.add_argument("--out", default=default_out, help="fixtures directory")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)

    gqa = build_llama(llama_gqa_config(), SEED)
    save(gqa, os.path.join(args.out, "tiny_llama_gqa"))
    save(gqa, os.path.join(args.out, "tiny_llama_gqa_sharded"), max_shard_size="100KB")
    save(build_llama(llama_gqa_config(), SEED).to(torch.bfloat16),
         os.path.join(args.out, "tiny_llama_gqa_bf16"))
    save(build_llama(llama_gqa_config(), SEED).to(torch.float16),
         os.path.join(args.out, "tiny_llama_gqa_f16"))
    save(build_llama(llama3_config(), SEED + 1), os.path.join(args.out, "tiny_llama3"))
    save(build_mamba(mamba_config(), SEED + 2), os.path.join(args.out, "tiny_mamba"))

    shards = json.load(open(os.path.join(args.out, "tiny_llama_gqa_sharded",
                                         "model.safetensors.index.json")))
    num_shards = len(set(shards["weight_map"].values()))
    assert num_shards >= 2, f"expected >= 2 shards, got {num_shards}"
    fixtures = os.path.dirname(os.path.normpath(args.out))
    total = 0
    for root, _, files in os.walk(fixtures):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"{fixtures}: {total / 1024:.1f} KiB in all")
    if total >= 3 * 1024 * 1024:
        print("WARNING: the fixtures directory exceeds its 3 MB budget")


if __name__ == "__main__":
    main()
