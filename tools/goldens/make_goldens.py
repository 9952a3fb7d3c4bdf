#!/usr/bin/env python3
"""Writes tests/golden/data/<model>/ from Hugging Face transformers.

For every fixture under tests/fixtures/models (see tools/models/tiny_model_writer.py)
it runs transformers in float32 (attn_implementation="eager") on fixed prompts
and writes, per prompt:
  logits_<p>.npy        float32 [L, vocab]: logits at every prompt position
  conv_state_<p>.npy    Mamba only, float32 [layers, C, K]: conv state after the prompt
  ssm_state_<p>.npy     Mamba only, float32 [layers, C, N]: SSM state after the prompt
and in manifest.json (format_version 1) the prompts as id lists, the greedy
continuation (generate, do_sample=False, 20 new tokens, no stopping on eos),
the command, the package versions and the file list.

It also converts ../shared/models/stories260K/stories260K.bin to a Hugging Face
directory with build/bin/treespec-convert-llama2c, checks that the result is
tensor-for-tensor identical to this script's Python mirror of the same
algorithm, runs transformers greedy decoding from [BOS] (checked against the
reference in ../shared/models/README.md) and from a fixed text prompt, and
writes tests/golden/data/stories260K/manifest.json.

Run through tools/goldens/make_goldens.sh (`make goldens`).
"""

import argparse
import hashlib
import json
import math
import os
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import types

import numpy as np
import safetensors
import safetensors.numpy
import torch
import transformers
import transformers.generation.utils as generation_utils
from transformers import LlamaConfig, LlamaForCausalLM, MambaForCausalLM

# Debian's torch 1.13 cannot import torch.distributed.fsdp under Python 3.11, and
# generate() probes for FSDP. Nothing here is distributed.
generation_utils.is_fsdp_managed_module = lambda module: False
# torch 1.13 has no torch._dynamo; MambaCache calls mark_static_address, a pure
# torch.compile hint, so a no-op is exact.
if not hasattr(torch, "_dynamo"):
    torch._dynamo = types.SimpleNamespace(mark_static_address=lambda tensor: None,
                                          is_compiling=lambda: False)

FORMAT_VERSION = 1
NUM_NEW_TOKENS = 20
PROMPT_LENGTHS = {"p0": 48, "p1": 23, "p2": 7}
MIN_GREEDY_MARGIN = 0.02
STORIES_NEW_TOKENS = 40
STORIES_TEXT = "Tom and his dog went to the park. They"
# ../shared/models/README.md, "Greedy reference outputs", stories260K (leading BOS included).
STORIES_README_IDS = [
    1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396,
    267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261,
    370, 432, 352]
STORIES_README_TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play "
                       "outside in the park. One day, she saw a big, r")


def prompts_for(model_name, model):
    """Fixed prompts, seeded by the model family (variants of one model share the seed).

    Candidates whose greedy continuation passes a near-tie (top-1 minus top-2
    logit below MIN_GREEDY_MARGIN) are skipped: there, float32 rounding alone
    may legitimately flip the argmax, and the comparison would test nothing.
    """
    family = model_name.split("_bf16")[0].split("_f16")[0].split("_sharded")[0]
    seed = int(hashlib.sha256(family.encode()).hexdigest()[:8], 16)
    rng = np.random.RandomState(seed)
    vocab = model.config.vocab_size
    out = {}
    for name, length in PROMPT_LENGTHS.items():
        for _ in range(100):
            ids = rng.randint(3, vocab, size=length).tolist()
            ids[0] = 1  # BOS, as a real prompt starts
            margins = []
            hf_greedy(model, ids, NUM_NEW_TOKENS, margins)
            if min(margins) >= MIN_GREEDY_MARGIN:
                break
        else:
            raise RuntimeError(f"{model_name}: no prompt of length {length} without a near-tie")
        out[name] = ids
    return out


def save_npy(path, array):
    np.save(path, np.ascontiguousarray(array, dtype=np.float32))


def manual_greedy(model, ids, n):
    """Argmax decoding with a full forward per step: an independent check on generate()."""
    seq = list(ids)
    for _ in range(n):
        logits = model(torch.tensor([seq])).logits[0, -1]
        seq.append(int(torch.argmax(logits)))
    return seq[len(ids):]


def hf_greedy(model, ids, n, margins=None):
    """generate() greedy ids; appends each step's top-1 minus top-2 logit to `margins`."""
    out = model.generate(torch.tensor([ids]),
                         attention_mask=torch.ones(1, len(ids), dtype=torch.long),
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


def check_llama3_rope(model):
    """The llama3 fixture must make the scaling change frequencies in all three ways."""
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
    plain = 1.0 / (cfg.rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    scaled = model.model.rotary_emb.inv_freq.float()
    rs = cfg.rope_scaling
    wavelen = 2 * math.pi / plain
    low = rs["original_max_position_embeddings"] / rs["low_freq_factor"]
    high = rs["original_max_position_embeddings"] / rs["high_freq_factor"]
    kept = (wavelen < high).sum().item()
    divided = (wavelen > low).sum().item()
    smoothed = len(plain) - kept - divided
    assert kept > 0 and divided > 0 and smoothed > 0, (kept, divided, smoothed)
    assert not torch.allclose(plain, scaled)
    return scaled


def make_model_goldens(fixture_dir, out_dir, command):
    name = os.path.basename(fixture_dir)
    with open(os.path.join(fixture_dir, "config.json")) as f:
        arch = json.load(f)["architectures"][0]
    is_mamba = arch == "MambaForCausalLM"
    cls = MambaForCausalLM if is_mamba else LlamaForCausalLM
    kwargs = {} if is_mamba else {"attn_implementation": "eager"}
    model = cls.from_pretrained(fixture_dir, torch_dtype=torch.float32, **kwargs).eval()
    vocab = model.config.vocab_size

    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    files = []
    prompts = []
    if not is_mamba:
        inv_freq = model.model.rotary_emb.inv_freq.float().numpy()
        if getattr(model.config, "rope_scaling", None):
            check_llama3_rope(model)
        save_npy(os.path.join(out_dir, "rope_inv_freq.npy"), inv_freq)
        files.append("rope_inv_freq.npy")
    with torch.no_grad():
        for pname, ids in prompts_for(name, model).items():
            entry = {"name": pname, "ids": ids}
            if is_mamba:
                out = model(torch.tensor([ids]), use_cache=True)
                cache = out.cache_params
                conv = cache.conv_states[:, 0].numpy()  # [layers, C, K]
                ssm = cache.ssm_states[:, 0].numpy()    # [layers, C, N]
                save_npy(os.path.join(out_dir, f"conv_state_{pname}.npy"), conv)
                save_npy(os.path.join(out_dir, f"ssm_state_{pname}.npy"), ssm)
                entry["conv_state"] = f"conv_state_{pname}.npy"
                entry["ssm_state"] = f"ssm_state_{pname}.npy"
                files += [entry["conv_state"], entry["ssm_state"]]
            else:
                out = model(torch.tensor([ids]))
            logits = out.logits[0].float().numpy()
            save_npy(os.path.join(out_dir, f"logits_{pname}.npy"), logits)
            entry["logits"] = f"logits_{pname}.npy"
            files.append(entry["logits"])
            margins = []
            greedy = hf_greedy(model, ids, NUM_NEW_TOKENS, margins)
            check = manual_greedy(model, ids, NUM_NEW_TOKENS)
            assert greedy == check, f"{name}/{pname}: generate {greedy} != argmax loop {check}"
            entry["greedy_new_ids"] = greedy
            top2 = np.sort(logits, axis=-1)[:, -2:]
            entry["logits_std"] = float(logits.std())
            entry["min_top2_margin"] = float((top2[:, 1] - top2[:, 0]).min())
            entry["min_greedy_margin"] = min(margins)
            prompts.append(entry)
            print(f"  {name}/{pname}: L={len(ids)} logits std {logits.std():.3f} "
                  f"max {np.abs(logits).max():.3f}; greedy {greedy[:8]}...")
    manifest = {
        "format_version": FORMAT_VERSION,
        "command": command,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "model": os.path.relpath(fixture_dir, ROOT),
        "architecture": arch,
        "compute_dtype": "float32",
        "attn_implementation": None if is_mamba else "eager",
        "greedy": {"max_new_tokens": NUM_NEW_TOKENS, "do_sample": False, "stop_on_eos": False},
        "prompts": prompts,
        "files": sorted(files),
    }
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


# ---- llama2.c legacy .bin -> Hugging Face (Python mirror of treespec-convert-llama2c) ----

def permute_rotary(w, n_heads):
    """transformers convert_llama_weights_to_hf.permute: interleaved pairs -> rotate-half."""
    dim1, dim2 = w.shape
    w = w.reshape(n_heads, dim1 // n_heads // 2, 2, dim2)
    return w.transpose(0, 2, 1, 3).reshape(dim1, dim2)


def convert_llama2c_python(bin_path, tokenizer_path, out_dir):
    raw = open(bin_path, "rb").read()
    dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    head = dim // n_heads
    kv_dim = n_kv_heads * head
    data = np.frombuffer(raw, dtype="<f4", offset=28)
    at = 0

    def take(*shape):
        nonlocal at
        n = int(np.prod(shape))
        a = data[at:at + n].reshape(shape)
        at += n
        return a

    emb = take(vocab, dim)
    rms_att = take(n_layers, dim)
    wq = take(n_layers, dim, dim)
    wk = take(n_layers, kv_dim, dim)
    wv = take(n_layers, kv_dim, dim)
    wo = take(n_layers, dim, dim)
    rms_ffn = take(n_layers, dim)
    w1 = take(n_layers, hidden, dim)
    w2 = take(n_layers, dim, hidden)
    w3 = take(n_layers, hidden, dim)
    rms_final = take(dim)
    take(seq_len, head // 2)
    take(seq_len, head // 2)
    wcls = None if shared else take(vocab, dim)
    assert at == data.size, f"{bin_path}: {data.size - at} trailing floats"
    t = {"model.embed_tokens.weight": emb, "model.norm.weight": rms_final}
    for l in range(n_layers):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = rms_att[l]
        t[p + "post_attention_layernorm.weight"] = rms_ffn[l]
        t[p + "self_attn.q_proj.weight"] = permute_rotary(wq[l], n_heads)
        t[p + "self_attn.k_proj.weight"] = permute_rotary(wk[l], n_kv_heads)
        t[p + "self_attn.v_proj.weight"] = wv[l]
        t[p + "self_attn.o_proj.weight"] = wo[l]
        t[p + "mlp.gate_proj.weight"] = w1[l]
        t[p + "mlp.down_proj.weight"] = w2[l]
        t[p + "mlp.up_proj.weight"] = w3[l]
    if wcls is not None:
        t["lm_head.weight"] = wcls
    os.makedirs(out_dir, exist_ok=True)
    safetensors.numpy.save_file({k: np.ascontiguousarray(v) for k, v in t.items()},
                                os.path.join(out_dir, "model.safetensors"),
                                metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": vocab, "hidden_size": dim, "intermediate_size": hidden,
        "num_hidden_layers": n_layers, "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv_heads, "max_position_embeddings": seq_len,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": shared, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    shutil.copyfile(tokenizer_path, os.path.join(out_dir, "tokenizer.model"))
    return config


def compare_conversions(a_dir, b_dir):
    a = safetensors.numpy.load_file(os.path.join(a_dir, "model.safetensors"))
    b = safetensors.numpy.load_file(os.path.join(b_dir, "model.safetensors"))
    assert sorted(a) == sorted(b), f"tensor names differ: {sorted(set(a) ^ set(b))}"
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert np.array_equal(a[k], b[k]), f"tensor {k} differs"
    ca = json.load(open(os.path.join(a_dir, "config.json")))
    cb = json.load(open(os.path.join(b_dir, "config.json")))
    for k, v in cb.items():
        assert ca.get(k) == v, f"config.json field {k}: {ca.get(k)} != {v}"
    return len(a)


def make_stories_goldens(shared_dir, converter, out_dir, command):
    bin_path = os.path.join(shared_dir, "stories260K", "stories260K.bin")
    tok_path = os.path.join(shared_dir, "stories260K", "tok512.model")
    if not os.path.exists(bin_path):
        print(f"  skipping stories260K: {bin_path} not found")
        return
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=tok_path)
    with tempfile.TemporaryDirectory() as tmp:
        py_dir = os.path.join(tmp, "python")
        convert_llama2c_python(bin_path, tok_path, py_dir)
        if converter and os.path.exists(converter):
            model_dir = os.path.join(tmp, "cpp")
            subprocess.run([converter, bin_path, tok_path, model_dir], check=True)
            n = compare_conversions(model_dir, py_dir)
            how = (f"{os.path.relpath(converter, ROOT)} "
                   f"(identical to the Python mirror: {n} tensors)")
        else:
            print(f"  WARNING: {converter} not built; using the Python mirror only")
            model_dir = py_dir
            how = "make_goldens.py Python mirror (treespec-convert-llama2c was not built)"
        print(f"  stories260K converted with {how}")
        model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                 attn_implementation="eager").eval()
        text_ids = [1] + sp.encode(STORIES_TEXT)
        tok_check = None
        if os.path.exists(os.path.join(model_dir, "tokenizer_config.json")):
            tok = transformers.AutoTokenizer.from_pretrained(model_dir)
            tok_check = tok(STORIES_TEXT)["input_ids"]
            assert tok_check == text_ids, f"HF tokenizer {tok_check} != sentencepiece {text_ids}"
        with torch.no_grad():
            bos_new = hf_greedy(model, [1], STORIES_NEW_TOKENS)
            assert bos_new == manual_greedy(model, [1], STORIES_NEW_TOKENS)
            bos_full = [1] + bos_new
            assert bos_full == STORIES_README_IDS, (
                f"BOS continuation {bos_full} differs from ../shared/models/README.md "
                f"{STORIES_README_IDS}")
            assert sp.decode(bos_new) == STORIES_README_TEXT, sp.decode(bos_new)
            text_new = hf_greedy(model, text_ids, STORIES_NEW_TOKENS)
            assert text_new == manual_greedy(model, text_ids, STORIES_NEW_TOKENS)
            logits = model(torch.tensor([text_ids])).logits[0].numpy()
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    save_npy(os.path.join(out_dir, "logits_text.npy"), logits)
    print(f"  stories260K BOS: {sp.decode(bos_new)!r}")
    print(f"  stories260K text: {STORIES_TEXT!r} -> {sp.decode(text_new)!r}")
    manifest = {
        "format_version": FORMAT_VERSION,
        "command": command,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "source": "../shared/models/stories260K/stories260K.bin + tok512.model",
        "converter": how,
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "greedy": {"max_new_tokens": STORIES_NEW_TOKENS, "do_sample": False, "stop_on_eos": False},
        "prompts": [
            {"name": "bos", "ids": [1], "greedy_new_ids": bos_new,
             "greedy_text": sp.decode(bos_new),
             "matches_readme_reference": True},
            {"name": "text", "text": STORIES_TEXT, "ids": text_ids, "greedy_new_ids": text_new,
             "greedy_text": sp.decode(text_new), "logits": "logits_text.npy",
             "hf_tokenizer_agrees": tok_check is not None},
        ],
        "files": ["logits_text.npy"],
    }
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main():
    parser = argparse.ArgumentParser(description="Writes tests/golden/data from transformers.")
    parser.add_argument("--fixtures", default=os.path.join(ROOT, "tests", "fixtures", "models"))
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "golden", "data"))
    parser.add_argument("--converter",
                        default=os.path.join(ROOT, "build", "bin", "treespec-convert-llama2c"))
    parser.add_argument("--shared", default=os.path.join(ROOT, "..", "shared", "models"))
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rel = lambda p: os.path.relpath(os.path.abspath(p), ROOT)
    python = sys.executable
    if python.startswith(ROOT):
        python = os.path.relpath(python, ROOT)
    command = " ".join([python, "tools/goldens/make_goldens.py",
                        "--fixtures", shlex.quote(rel(args.fixtures)),
                        "--out", shlex.quote(rel(args.out)),
                        "--converter", shlex.quote(rel(args.converter)),
                        "--shared", shlex.quote(rel(args.shared))])
    command += "   (run by `make goldens` = bash tools/goldens/make_goldens.sh)"
    for name in sorted(os.listdir(args.fixtures)):
        d = os.path.join(args.fixtures, name)
        if os.path.exists(os.path.join(d, "config.json")):
            make_model_goldens(d, os.path.join(args.out, name), command)
    make_stories_goldens(args.shared, args.converter, os.path.join(args.out, "stories260K"),
                         command)


if __name__ == "__main__":
    main()
