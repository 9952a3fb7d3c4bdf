"""Tests of tools/train: scans (Mamba selective scan, Mamba-2 SSD), HF parity, caches,
the hybrid warm start, export round trip, acceptance simulation.

  .venv/bin/python -m pytest tools/train -q        (or: .venv/bin/python tools/train/test_models.py)

The transformers comparisons are skipped when transformers is not installed (Bamba's
when it has no BambaForCausalLM: transformers < 4.48; the v5 venv has it).
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
TINY_MAMBA2 = dict(vocab_size=300, hidden_size=48, num_hidden_layers=2, head_dim=16, n_groups=2, state_size=8)
TINY_BAMBA = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, attn_layer_indices=[1, 3], mamba_n_heads=4, mamba_n_groups=2,
                  mamba_d_state=8, rope_theta=500.0)


def hf_has(name):
    """transformers has class `name` with the semantics the trainer follows. Mamba-2 / Bamba:
    transformers >= 5 only (4.x's Mamba2 torch path tiles B and C over the heads instead of
    giving head h group h // (H / G), normalises the gated output over all channels instead
    of per group, and clamps dt at time_step_min; all differ from mamba_ssm when n_groups > 1)."""
    if not HAVE_HF:
        return False
    import transformers
    if name in ("Mamba2ForCausalLM", "BambaForCausalLM") and int(transformers.__version__.split(".")[0]) < 5:
        return False
    return hasattr(transformers, name)


def perturb(model, scale=0.05, seed=0):
    """Moves parameters off their init (so parity checks mean something)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return model


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


def ssd_inputs(b, L, H, P, G, N, strong=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, L, H, P, generator=g)
    if strong:  # large steps, strong decay: products of decays underflow within a chunk
        dt = F.softplus(torch.randn(b, L, H, generator=g) * 2 + 1)
        A = -torch.exp(torch.rand(H, generator=g) * 3)
    else:
        dt = F.softplus(torch.randn(b, L, H, generator=g) - 3)
        A = -torch.arange(1, H + 1).float()
    return (x, dt, A, torch.randn(b, L, G, N, generator=g), torch.randn(b, L, G, N, generator=g),
            torch.randn(b, H, P, N, generator=g))


def test_ssd_chunked_matches_sequential():
    """Mamba-2: the chunked SSD scan (training) equals the step-by-step recurrence
    (generation), outputs and final state, with and without an initial state."""
    for L, Q in [(1, 64), (5, 4), (16, 16), (37, 8), (64, 64), (100, 32), (256, 64), (256, 256)]:
        for strong in (False, True):
            x, dt, A, B, C, h0 = ssd_inputs(2, L, 4, 8, 2, 6, strong, seed=L)
            for init in (None, h0):
                y1, h1 = M.ssd_sequential(x, dt, A, B, C, init)
                y2, h2 = M.ssd_chunked(x, dt, A, B, C, Q, init)
                assert torch.isfinite(y2).all()
                assert rel(y1, y2) < 2e-6, (L, Q, strong, rel(y1, y2))
                assert rel(h1, h2) < 2e-6, (L, Q, strong, rel(h1, h2))


def test_ssd_gradients_match():
    args = [t.clone().requires_grad_() for t in ssd_inputs(2, 40, 4, 8, 2, 6, seed=5)[:5]]
    M.ssd_sequential(*args)[0].square().sum().backward()
    g_ref = [t.grad.clone() for t in args]
    for t in args:
        t.grad = None
    M.ssd_chunked(*args, chunk=16)[0].square().sum().backward()
    for a, b in zip(g_ref, [t.grad for t in args]):
        assert rel(a, b) < 1e-5


def test_mamba2_and_bamba_cache_matches_full_forward():
    """Prefill (chunked scan, conv from zero padding) + one-token steps (recurrence, conv
    state, KV cache) + another chunk give the full forward's logits."""
    torch.manual_seed(6)
    for m in (M.Mamba2ForCausalLM(dict(TINY_MAMBA2)), M.BambaForCausalLM(dict(TINY_BAMBA))):
        m = perturb(m.eval(), seed=6)
        m.set_scan("chunked", 8)
        ids = torch.randint(0, 300, (3, 40))
        with torch.no_grad():
            full = m(ids)
            c = m.new_cache(64)
            parts = ([m(ids[:, :7], c, 0)] + [m(ids[:, t:t + 1], c, t) for t in range(7, 12)] +
                     [m(ids[:, 12:30], c, 12)] + [m(ids[:, t:t + 1], c, t) for t in range(30, 40)])
        assert rel(full, torch.cat(parts, 1)) < 1e-5, m.arch


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


def _hf_from_ours(m):
    import transformers
    hc = {k: v for k, v in M.hf_config_dict(m.config).items() if k != "architectures"}
    if m.arch == "bamba":
        hf = transformers.BambaForCausalLM(transformers.BambaConfig(**hc))
    else:
        hf = transformers.Mamba2ForCausalLM(transformers.Mamba2Config(**hc))
    missing, unexpected = hf.load_state_dict(M.export_state_dict(m), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    hf.tie_weights()
    return hf.eval()


def test_mamba2_matches_transformers():
    if not hf_has("Mamba2ForCausalLM"):
        return
    torch.manual_seed(7)
    for tie in (True, False):
        m = perturb(M.Mamba2ForCausalLM(dict(TINY_MAMBA2, tie_word_embeddings=tie)).eval(), seed=7)
        hf = _hf_from_ours(m)
        ids = torch.randint(0, 300, (2, 70))
        with torch.no_grad():
            ref = hf(ids, use_cache=False).logits
            for scan in ("ref", "chunked"):
                m.set_scan(scan, 16)
                assert rel(m(ids), ref) < 1e-5, (tie, scan)


def test_bamba_matches_transformers():
    if not hf_has("BambaForCausalLM"):
        return
    torch.manual_seed(8)
    for attn in ([1, 3], [0], []):
        m = perturb(M.BambaForCausalLM(dict(TINY_BAMBA, attn_layer_indices=attn)).eval(), seed=8)
        hf = _hf_from_ours(m)
        ids = torch.randint(0, 300, (2, 70))
        with torch.no_grad():
            ref = hf(ids, use_cache=False).logits
            for scan in ("ref", "chunked"):
                m.set_scan(scan, 16)
                assert rel(m(ids), ref) < 1e-5, (attn, scan)


def test_hybrid_warm_start_maps_llama_rope():
    """hybrid_init.warm_start: with attention in every layer, the hybrid equals the
    Llama it came from once the Llama's q/k channels of the odd RoPE pairs (those
    Bamba's half-rotary heads cannot turn) are zero; and always at one position."""
    sys.path.insert(0, HERE)
    from hybrid_init import warm_start
    torch.manual_seed(9)
    cfg = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=2, rope_theta=500.0)
    llama = perturb(M.LlamaForCausalLM(dict(cfg)).eval(), seed=9)
    hybrid = M.BambaForCausalLM(dict(cfg, attn_layer_indices=[0, 1, 2])).eval()
    ids = torch.randint(0, 300, (2, 1))
    warm_start(hybrid, llama)
    with torch.no_grad():
        assert rel(llama(ids), hybrid(ids)) < 1e-5
        hd = 16
        odd = [j for j in range(hd // 2) if j % 2] + [hd // 2 + j for j in range(hd // 2) if j % 2]
        for layer in llama.model.layers:
            for proj, heads in ((layer.self_attn.q_proj, 4), (layer.self_attn.k_proj, 2)):
                w = proj.weight.view(heads, hd, -1)
                w[:, odd] = 0.0
    warm_start(hybrid, llama)
    ids = torch.randint(0, 300, (2, 33))
    with torch.no_grad():
        assert rel(llama(ids), hybrid(ids)) < 1e-5
    mixed = M.BambaForCausalLM(dict(cfg, attn_layer_indices=[1]))
    copied = warm_start(mixed, llama)
    assert "model.layers.1.self_attn.q_proj.weight" in copied
    assert not any(k.startswith("model.layers.0.mamba") for k in copied)
    assert torch.equal(mixed.model.layers[0].feed_forward.up_proj.weight, llama.model.layers[0].mlp.up_proj.weight)


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
        arches = {"llama": "LlamaForCausalLM", "mamba": "MambaForCausalLM", "mamba2": "Mamba2ForCausalLM",
                  "bamba": "BambaForCausalLM"}
        roles = {"llama": "target", "mamba": "mamba-drafter", "mamba2": "mamba2-target", "bamba": "hybrid-target"}
        for name, model in [("llama", M.LlamaForCausalLM(dict(TINY_LLAMA))),
                            ("mamba", M.MambaForCausalLM(dict(TINY_MAMBA))),
                            ("mamba2", perturb(M.Mamba2ForCausalLM(dict(TINY_MAMBA2)), seed=3)),
                            ("bamba", perturb(M.BambaForCausalLM(dict(TINY_BAMBA)), seed=3))]:
            ck = os.path.join(d, name + ".pt")
            torch.save({"model": model.state_dict(), "config": model.config}, ck)
            for dtype in ("f32", "f16", "bf16"):
                out = os.path.join(d, "%s-%s" % (name, dtype))
                subprocess.run([sys.executable, os.path.join(HERE, "export_hf.py"), "--checkpoint", ck,
                                "--tokenizer", tok, "--out", out, "--dtype", dtype, "--role", roles[name]],
                               check=True, stdout=subprocess.DEVNULL)
                for f in ("config.json", "model.safetensors", "tokenizer.model", "tokenizer_config.json",
                          "generation_config.json", "MODEL_CARD.md"):
                    assert os.path.exists(os.path.join(out, f)), f
                cfg = json.load(open(os.path.join(out, "config.json")))
                assert cfg["architectures"] == [arches[name]]
                assert "time_step_limit" not in cfg  # the default (0, inf) is left out: JSON has no infinity
                assert cfg["torch_dtype"] == {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[dtype]
                back, _ = M.load_model(out)
                ids = torch.tensor([[1, 5, 17, 42, 99, 250, 7, 8, 9, 10]])
                with torch.no_grad():
                    a, b = model.eval()(ids), back(ids)
                tol = {"f32": 1e-6, "f16": 2e-2, "bf16": 1e-1}[dtype]  # rounding of the weights
                assert rel(a, b) < tol, (name, dtype, rel(a, b))
                if hf_has(arches[name]) and dtype != "bf16":
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


def test_distill_generation_hybrid_matches_full_recompute():
    """distill_data's batched generation with the hybrid's cache (chunked prefill, then
    the recurrence + KV cache) gives the argmax continuation of full forwards."""
    sys.path.insert(0, HERE)
    from distill_data import generate_batch
    import contextlib
    torch.manual_seed(10)
    m = perturb(M.BambaForCausalLM(dict(TINY_BAMBA)).eval(), 0.2, seed=10)
    prompts = torch.randint(3, 300, (2, 9))
    prompts[:, 0] = 1
    out, length = generate_batch(m, prompts, 30, True, 1.0, 2, torch.Generator().manual_seed(0),
                                 contextlib.nullcontext)
    seq = prompts.clone()
    with torch.no_grad():
        for _ in range(21):
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
