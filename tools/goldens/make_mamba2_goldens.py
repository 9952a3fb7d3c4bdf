#!/usr/bin/env python3
"""Writes the Mamba-2 and Bamba fixtures and their goldens from transformers 5.

Needs transformers >= 5 (Mamba2ForCausalLM, BambaForCausalLM and their cache
layout); run with the v5 venv through tools/goldens/make_goldens.sh, or
  .venv-v5/bin/python tools/goldens/make_mamba2_goldens.py

Fixtures (tests/fixtures/models), tiny random weights, safetensors:
  tiny_mamba2        Mamba2ForCausalLM: vocab 128, hidden 64, 2 layers, 8 heads of 16,
                     state 16, n_groups 2, conv 4, chunk_size 8 (prompts cross chunks)
  tiny_mamba2_f16    the same weights stored as float16
  tiny_mamba2_bf16   the same weights stored as bfloat16
  tiny_bamba         BambaForCausalLM: vocab 128, hidden 64, 3 layers (attention at
                     layer 1: 4 heads / 2 kv heads of 16, partial rotary 0.5), Mamba-2
                     mixers of 4 heads of 16 (expand 1), state 16, n_groups 1,
                     chunk_size 8, SwiGLU MLP 64 in every layer
  tiny_bamba_f16, tiny_bamba_bf16   likewise
  tiny_mamba2_bias   one layer with in_proj / out_proj biases, no conv bias, one group,
                     conv 3, tied embeddings
  tiny_bamba_bias    attention (first layer, 2 heads / 1 kv head) and MLP biases, mixer
                     projection biases, no conv bias, two groups, tied embeddings

Goldens (tests/golden/data/<fixture>/, format_version 1 as make_goldens.py):
per prompt, logits at every position (one forward over the prompt, the chunked
scan), the final conv and SSM states of the Mamba-2 layers from the cache
  conv_state_<p>.npy   float32 [mamba layers, conv_dim, K]
  ssm_state_<p>.npy    float32 [mamba layers, heads, head_dim, state]
and the greedy continuation (generate, do_sample=False: cached one-token steps).
f16 / bf16 variants are run in float32 (weights widened), like the Llama ones.
"""

import argparse
import hashlib
import json
import math
import os
import shlex
import shutil
import sys

import numpy as np
import torch
import transformers
from transformers import BambaConfig, BambaForCausalLM, Mamba2Config, Mamba2ForCausalLM

FORMAT_VERSION = 1
SEED = 20250301
NUM_NEW_TOKENS = 20
PROMPT_LENGTHS = {"p0": 48, "p1": 23, "p2": 7}
MIN_GREEDY_MARGIN = 0.02
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def mamba2_config():
    return Mamba2Config(vocab_size=128, hidden_size=64, num_heads=8, head_dim=16, state_size=16,
                        num_hidden_layers=2, n_groups=2, conv_kernel=4, expand=2, chunk_size=8,
                        layer_norm_epsilon=1e-5, tie_word_embeddings=False,
                        bos_token_id=1, eos_token_id=2, pad_token_id=0)


def bamba_config():
    return BambaConfig(vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, attn_layer_indices=[1],
                       mamba_n_heads=4, mamba_d_head=16, mamba_expand=1, mamba_n_groups=1,
                       mamba_d_state=16, mamba_d_conv=4, mamba_chunk_size=8,
                       rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=4096,
                       bos_token_id=1, eos_token_id=2, pad_token_id=0)


def mamba2_bias_config():
    """The other branches of the mixer: in_proj / out_proj biases, no conv bias,
    one group, tied embeddings, one layer."""
    return Mamba2Config(vocab_size=128, hidden_size=32, num_heads=4, head_dim=16, state_size=8,
                        num_hidden_layers=1, n_groups=1, conv_kernel=3, expand=2, chunk_size=4,
                        use_bias=True, use_conv_bias=False, tie_word_embeddings=True,
                        bos_token_id=1, eos_token_id=2, pad_token_id=0)


def bamba_bias_config():
    """Bamba with every bias (attention, MLP, mixer projections), no conv bias,
    two groups, tied embeddings, the attention layer first."""
    return BambaConfig(vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=1, attn_layer_indices=[0],
                       mamba_n_heads=4, mamba_d_head=16, mamba_expand=2, mamba_n_groups=2,
                       mamba_d_state=8, mamba_d_conv=3, mamba_chunk_size=4, mamba_conv_bias=False,
                       mamba_proj_bias=True, attention_bias=True, mlp_bias=True,
                       rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=4096,
                       bos_token_id=1, eos_token_id=2, pad_token_id=0)


CONFIGS = {"mamba2": (Mamba2ForCausalLM, mamba2_config), "bamba": (BambaForCausalLM, bamba_config),
           "mamba2_bias": (Mamba2ForCausalLM, mamba2_bias_config),
           "bamba_bias": (BambaForCausalLM, bamba_bias_config)}


def fill(model, seed):
    """Deterministic weights large enough that logits are far from zero, with SSM
    parameters as the Mamba-2 initialisation draws them (jittered)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith(("A_log", ".D", "dt_bias")):
                continue
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                mean, std = 1.0, 0.1
            elif "embed" in name or "lm_head" in name:
                mean, std = 0.0, 0.5
            elif name.endswith("conv1d.weight"):
                mean, std = 0.0, 0.4
            elif name.endswith("conv1d.bias"):
                mean, std = 0.0, 0.1
            else:
                mean, std = 0.0, 1.5 / math.sqrt(p.shape[-1])
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * std + mean)
        for module in model.modules():
            if not hasattr(module, "A_log"):
                continue
            H = module.A_log.shape[0]
            module.A_log.copy_(torch.log(torch.arange(1, H + 1, dtype=torch.float32)) +
                               0.1 * torch.randn((H,), generator=gen))
            module.D.copy_(1.0 + 0.2 * torch.randn((H,), generator=gen))
            u = torch.rand((H,), generator=gen)
            dt = torch.exp(u * (math.log(0.3) - math.log(0.01)) + math.log(0.01))
            module.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))


def build(kind, seed):
    torch.manual_seed(seed)
    cls, config = CONFIGS[kind]
    model = cls(config()).eval()
    fill(model, seed)
    if model.config.tie_word_embeddings:
        model.tie_weights()
    return model


def save_fixture(model, out_dir):
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)
    for n in os.listdir(out_dir):
        os.chmod(os.path.join(out_dir, n), 0o644)
    size = sum(os.path.getsize(os.path.join(out_dir, n)) for n in os.listdir(out_dir))
    print(f"  {os.path.basename(out_dir):20s} {size / 1024:8.1f} KiB")


def hf_greedy(model, ids, n, margins=None):
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         max_new_tokens=n, min_new_tokens=0, do_sample=False, num_beams=1,
                         eos_token_id=None, pad_token_id=0, output_scores=True,
                         return_dict_in_generate=True)
    new = out.sequences[0, len(ids):].tolist()
    assert len(new) == n, f"generate stopped early: {new}"
    if margins is not None:
        for scores in out.scores:
            top2 = torch.topk(scores[0].float(), 2).values
            margins.append(float(top2[0] - top2[1]))
    return new


def prompts_for(name, model):
    """Fixed prompts seeded by the family; near-tie continuations are skipped."""
    family = name.split("_bf16")[0].split("_f16")[0]
    rng = np.random.RandomState(int(hashlib.sha256(family.encode()).hexdigest()[:8], 16))
    out = {}
    for pname, length in PROMPT_LENGTHS.items():
        for _ in range(100):
            ids = rng.randint(3, model.config.vocab_size, size=length).tolist()
            ids[0] = 1
            margins = []
            hf_greedy(model, ids, NUM_NEW_TOKENS, margins)
            if min(margins) >= MIN_GREEDY_MARGIN:
                break
        else:
            raise RuntimeError(f"{name}: no prompt of length {length} without a near-tie")
        out[pname] = ids
    return out


def mamba_layers(model):
    return [i for i, l in enumerate(model.config.layer_types) if l == "linear_attention"]


def save_npy(path, array):
    np.save(path, np.ascontiguousarray(array, dtype=np.float32))


def make_goldens(fixture_dir, out_dir, command):
    name = os.path.basename(fixture_dir)
    arch = json.load(open(os.path.join(fixture_dir, "config.json")))["architectures"][0]
    cls = Mamba2ForCausalLM if arch == "Mamba2ForCausalLM" else BambaForCausalLM
    model = cls.from_pretrained(fixture_dir, dtype=torch.float32,
                                attn_implementation="eager").eval()
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    files, prompts = [], []
    layers = mamba_layers(model)
    with torch.no_grad():
        for pname, ids in prompts_for(name, model).items():
            entry = {"name": pname, "ids": ids}
            out = model(torch.tensor([ids]), use_cache=True)
            cache = out.cache_params if arch == "Mamba2ForCausalLM" else out.past_key_values
            conv = torch.stack([cache.get_conv_state(l, state_idx=0)[0] for l in layers])
            ssm = torch.stack([cache.get_recurrent_state(l, state_idx=0)[0] for l in layers])
            logits = out.logits[0].float().numpy()
            for key, array in (("logits", logits), ("conv_state", conv.float().numpy()),
                               ("ssm_state", ssm.float().numpy())):
                entry[key] = f"{key}_{pname}.npy"
                save_npy(os.path.join(out_dir, entry[key]), array)
                files.append(entry[key])
            margins = []
            entry["greedy_new_ids"] = hf_greedy(model, ids, NUM_NEW_TOKENS, margins)
            entry["logits_std"] = float(logits.std())
            entry["min_greedy_margin"] = min(margins)
            prompts.append(entry)
            print(f"  {name}/{pname}: L={len(ids)} logits std {logits.std():.3f}; "
                  f"greedy {entry['greedy_new_ids'][:8]}...")
    manifest = {
        "format_version": FORMAT_VERSION,
        "command": command,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "model": os.path.relpath(fixture_dir, ROOT),
        "architecture": arch,
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "mamba_layers": layers,
        "chunk_size": int(getattr(model.config, "chunk_size", 0) or
                          getattr(model.config, "mamba_chunk_size", 0)),
        "greedy": {"max_new_tokens": NUM_NEW_TOKENS, "do_sample": False, "stop_on_eos": False},
        "prompts": prompts,
        "files": sorted(files),
    }
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fixtures", default=os.path.join(ROOT, "tests", "fixtures", "models"))
    parser.add_argument("--goldens", default=os.path.join(ROOT, "tests", "golden", "data"))
    args = parser.parse_args()
    assert int(transformers.__version__.split(".")[0]) >= 5, "needs transformers >= 5"
    torch.set_num_threads(1)
    command = "python " + " ".join(shlex.quote(a) for a in
                                   [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    names = []
    for kind, seed in (("mamba2", SEED), ("bamba", SEED + 1)):
        base = f"tiny_{kind}"
        save_fixture(build(kind, seed), os.path.join(args.fixtures, base))
        save_fixture(build(kind, seed).to(torch.float16), os.path.join(args.fixtures, base + "_f16"))
        save_fixture(build(kind, seed).to(torch.bfloat16),
                     os.path.join(args.fixtures, base + "_bf16"))
        names += [base, base + "_f16", base + "_bf16"]
    for kind, seed in (("mamba2_bias", SEED + 2), ("bamba_bias", SEED + 3)):
        save_fixture(build(kind, seed), os.path.join(args.fixtures, f"tiny_{kind}"))
        names.append(f"tiny_{kind}")
    for name in names:
        make_goldens(os.path.join(args.fixtures, name), os.path.join(args.goldens, name), command)


if __name__ == "__main__":
    main()
