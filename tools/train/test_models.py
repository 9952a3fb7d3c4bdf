"""Tests of tools/train: scans, HF parity, KV cache, export round trip, acceptance simulation.

  .venv/bin/python -m pytest tools/train -q        (or: .venv/bin/python tools/train/test_models.py)

The transformers comparisons are skipped when transformers is not installed.
"""

import json
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import models as M  # noqa: E402

torch.set_num_threads(1)

try:
    import importlib.util
    HAVE_HF = importlib.util.find_spec("transformers") is not None
except (ImportError, ValueError):
    HAVE_HF = False

TINY_LLAMA = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2)
TINY_MAMBA = dict(vocab_size=300, hidden_size=48, num_hidden_layers=2, state_size=16)


def rel(a, b):
    return ((a - b).abs().max() / a.abs().max()).item()


def scan_inputs(b, L, C, N, strong=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(b, L, C, generator=g)
    if strong:  # large steps, strong decay (exp(S) far below float32's range within a chunk)
        dt = F.softplus(torch.randn(b, L, C, generator=g) * 2 + 1)
        A = -torch.exp(torch.rand(C, N, generator=g) * 3)
    else:  # trained-model-like: dt ~ 0.001..0.1, A = -(1..N)
        dt = F.softplus(torch.randn(b, L, C, generator=g) - 4)
        A = -torch.arange(1, N + 1).float()[None].expand(C, N).contiguous()
    return u, dt, A, torch.randn(b, L, N, generator=g), torch.randn(b, L, N, generator=g), torch.randn(C, generator=g)


def test_scan_chunked_matches_sequential():
    for L, T in [(1, 16), (5, 4), (16, 16), (37, 8), (64, 16), (100, 32), (256, 16)]:
        args = scan_inputs(2, L, 24, 16, seed=L)
        r = M.selective_scan_ref(*args)
        c = M.selective_scan_chunked(*args, chunk=T)
        assert (r - c).abs().max().item() < 1e-5, (L, T, (r - c).abs().max().item())


def test_scan_strong_decay_is_finite_and_close():
    args = scan_inputs(2, 128, 16, 16, strong=True, seed=3)
    r = M.selective_scan_ref(*args)
    c = M.selective_scan_chunked(*args, chunk=64)
    assert torch.isfinite(c).all()
    assert rel(r, c) < 1e-6


def test_scan_gradients_match():
    args = [t.clone().requires_grad_() for t in scan_inputs(2, 40, 12, 8, seed=5)]
    M.selective_scan_ref(*args).square().sum().backward()
    g_ref = [t.grad.clone() for t in args]
    for t in args:
        t.grad = None
    M.selective_scan_chunked(*args, chunk=8).square().sum().backward()
    for a, b in zip(g_ref, [t.grad for t in args]):
        assert rel(a, b) < 1e-5


def test_llama_kv_cache_matches_full_forward():
    torch.manual_seed(0)
    m = M.LlamaForCausalLM(dict(TINY_LLAMA)).eval()
    ids = torch.randint(0, 300, (3, 30))
    with torch.no_grad():
        full = m(ids)
        c = m.new_cache(40)
        parts = [m(ids[:, :7], c, 0)] + [m(ids[:, t:t + 1], c, t) for t in range(7, 12)] + [m(ids[:, 12:], c, 12)]
    assert rel(full, torch.cat(parts, 1)) < 1e-5
    if M.HAS_SDPA:  # torch 2: the SDPA path equals the manual one
        for layer in m.model.layers:
            layer.self_attn.use_sdpa = False
        with torch.no_grad():
            assert rel(full, m(ids)) < 1e-5


def test_param_count_and_tying():
    m = M.LlamaForCausalLM(dict(TINY_LLAMA, tie_word_embeddings=True))
    assert m.lm_head.weight is m.model.embed_tokens.weight
    assert "lm_head.weight" not in M.export_state_dict(m)
    cfg = M.complete_config(dict(TINY_LLAMA), "llama")
    hd = cfg["head_dim"]
    per_layer = 64 * hd * (4 * 2 + 2 * 2) + 3 * 64 * 96 + 2 * 64
    assert M.count_params(M.LlamaForCausalLM(dict(TINY_LLAMA))) == 2 * per_layer + 2 * 300 * 64 + 64
    mm = M.MambaForCausalLM(dict(TINY_MAMBA))
    assert mm.backbone.layers[0].mixer.A_log.shape == (96, 16)
    assert torch.allclose(mm.backbone.layers[0].mixer.A_log[0], torch.log(torch.arange(1, 17).float()))
    dt = F.softplus(mm.backbone.layers[0].mixer.dt_proj.bias)
    assert dt.min() >= 1e-4 - 1e-7 and dt.max() <= 0.1 + 1e-6


def _hf_llama(cfg):
    import transformers
    hc = {k: v for k, v in cfg.items() if k != "architectures"}
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**hc)).eval()


def test_llama_matches_transformers():
    if not HAVE_HF:
        return
    torch.manual_seed(1)
    for tie in (False, True):
        m = M.LlamaForCausalLM(dict(TINY_LLAMA, tie_word_embeddings=tie, rope_theta=500.0)).eval()
        hf = _hf_llama(m.config)
        hf.load_state_dict(M.export_state_dict(m), strict=False)
        if tie:
            hf.tie_weights()
        ids = torch.randint(0, 300, (2, 50))
        with torch.no_grad():
            assert rel(m(ids), hf(ids, use_cache=False).logits) < 1e-5


def test_mamba_matches_transformers():
    if not HAVE_HF:
        return
    import transformers
    torch.manual_seed(2)
    m = M.MambaForCausalLM(dict(TINY_MAMBA)).eval()
    with torch.no_grad():  # move parameters off their init so the check means something
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    hc = {k: v for k, v in m.config.items() if k != "architectures"}
    hf = transformers.MambaForCausalLM(transformers.MambaConfig(**hc)).eval()
    hf.load_state_dict(M.export_state_dict(m), strict=False)
    hf.tie_weights()
    ids = torch.randint(0, 300, (2, 70))
    with torch.no_grad():
        ref = hf(ids, use_cache=False).logits
        for scan in ("ref", "chunked"):
            m.set_scan(scan, 16)
            assert rel(m(ids), ref) < 1e-5, scan


def _make_tokenizer(d, vocab=300):
    import sentencepiece as spm
    rnd = random.Random(0)
    words = ["".join(rnd.choice("abcdefghij") for _ in range(rnd.randint(2, 7))) for _ in range(200)]
    text = os.path.join(d, "text.txt")
    with open(text, "w") as f:
        for _ in range(3000):
            f.write(" ".join(rnd.choice(words) for _ in range(12)) + ".\n\n")
    subprocess.run([sys.executable, os.path.join(HERE, "train_tokenizer.py"), "--input", text,
                    "--out-dir", os.path.join(d, "tok"), "--vocab-size", str(vocab), "--num-threads", "1"],
                   check=True, stdout=subprocess.DEVNULL)
    p = os.path.join(d, "tok", "tokenizer.model")
    assert spm.SentencePieceProcessor(model_file=p).get_piece_size() == vocab
    return p


def test_export_round_trip():
    with tempfile.TemporaryDirectory() as d:
        tok = _make_tokenizer(d)
        torch.manual_seed(3)
        for name, model in [("llama", M.LlamaForCausalLM(dict(TINY_LLAMA))),
                            ("mamba", M.MambaForCausalLM(dict(TINY_MAMBA)))]:
            ck = os.path.join(d, name + ".pt")
            torch.save({"model": model.state_dict(), "config": model.config}, ck)
            for dtype in ("f32", "f16", "bf16"):
                out = os.path.join(d, "%s-%s" % (name, dtype))
                subprocess.run([sys.executable, os.path.join(HERE, "export_hf.py"), "--checkpoint", ck,
                                "--tokenizer", tok, "--out", out, "--dtype", dtype,
                                "--role", "target" if name == "llama" else "mamba-drafter"],
                               check=True, stdout=subprocess.DEVNULL)
                for f in ("config.json", "model.safetensors", "tokenizer.model", "tokenizer_config.json",
                          "generation_config.json", "MODEL_CARD.md"):
                    assert os.path.exists(os.path.join(out, f)), f
                cfg = json.load(open(os.path.join(out, "config.json")))
                assert cfg["architectures"] == ["LlamaForCausalLM" if name == "llama" else "MambaForCausalLM"]
                assert cfg["torch_dtype"] == {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[dtype]
                back, _ = M.load_model(out)
                ids = torch.tensor([[1, 5, 17, 42, 99, 250, 7, 8, 9, 10]])
                with torch.no_grad():
                    a, b = model.eval()(ids), back(ids)
                tol = {"f32": 1e-6, "f16": 2e-2, "bf16": 1e-1}[dtype]  # rounding of the weights
                assert rel(a, b) < tol, (name, dtype, rel(a, b))
                if HAVE_HF and dtype != "bf16":
                    sys.path.insert(0, HERE)
                    from check_engine import hf_logits
                    theirs, _ = hf_logits(out, ids[0].tolist())
                    assert rel(b[0], torch.from_numpy(theirs)) < 1e-4
            if HAVE_HF:
                import transformers
                t = transformers.LlamaTokenizer.from_pretrained(out, legacy=True)
                enc = t("abc def")["input_ids"]
                assert enc[0] == 1 and enc[-1] != 2


def test_distill_greedy_generation_matches_full_recompute():
    sys.path.insert(0, HERE)
    from distill_data import generate_batch
    import contextlib
    torch.manual_seed(4)
    m = M.LlamaForCausalLM(dict(TINY_LLAMA)).eval()
    prompts = torch.randint(3, 300, (2, 5))
    prompts[:, 0] = 1
    out, length = generate_batch(m, prompts, 20, True, 1.0, 2, torch.Generator().manual_seed(0),
                                 contextlib.nullcontext)
    seq = prompts.clone()
    with torch.no_grad():
        for _ in range(15):
            seq = torch.cat([seq, m(seq)[:, -1].argmax(-1, keepdim=True)], 1)
    for r in range(2):
        n = int(length[r])
        assert torch.equal(out[r, :n], seq[r, :n])


def test_simulated_acceptance():
    sys.path.insert(0, HERE)
    from train_lm import simulate_acceptance
    V, L = 10, 12
    labels = torch.arange(L)[None] % V
    logits = torch.zeros(1, L, V)
    logits[0, torch.arange(L), labels[0]] = 5.0  # drafter always right: tau = depth + 1
    out = simulate_acceptance(logits, labels, np.array([True]), np.array([1]), np.array([L + 1]))
    # 12 generated tokens; chain 4 gains 4 accepted + 1 per step: 5, 5, 2 -> tau 4;
    # tree (3,2,2,1,1) gains 6 per step: 6, 6 -> tau 6
    assert abs(out["tau_chain4"] - 4.0) < 1e-9, out
    assert abs(out["tau_tree32211"] - 6.0) < 1e-9, out
    logits[0, :, :] = 0
    logits[0, torch.arange(L), (labels[0] + 1) % V] = 5.0  # top-1 always wrong, label second
    logits[0, torch.arange(L), labels[0]] = 4.0
    out = simulate_acceptance(logits, labels, np.array([True]), np.array([1]), np.array([L + 1]))
    assert abs(out["tau_chain4"] - 1.0) < 1e-9, out  # nothing accepted: one token per step
    # depths with width >= 2 accept (3 of them), the 4th (width 1) does not: 4 per step
    assert abs(out["tau_tree32211"] - 4.0) < 1e-9, out
    assert abs(out["tau_tree3321"] - 4.0) < 1e-9, out
    # sampled (non-greedy) rows are ignored
    out = simulate_acceptance(logits, labels, np.array([False]), np.array([1]), np.array([L + 1]))
    assert np.isnan(out["tau_chain4"])

if __name__ == "__main__":
    fails = 0
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                print("ok  ", name, flush=True)
            except Exception as e:  # noqa: BLE001
                fails += 1
                print("FAIL", name, repr(e), flush=True)
    sys.exit(1 if fails else 0)
