"""Compact PyTorch language models for treespec's demo models: Llama, Mamba,
Mamba-2 and the Mamba-2 + attention hybrid Bamba.

Parameter names and forward semantics follow Hugging Face transformers
(LlamaForCausalLM, MambaForCausalLM, Mamba2ForCausalLM, BambaForCausalLM), so a
state_dict exports straight to a Hugging Face directory (see export_hf.py) that
treespec's engine and transformers both load.

Runs on torch 1.13 (CPU) and torch 2.x (CPU or CUDA). Nothing here needs
transformers.

  Llama: RMSNorm x*rsqrt(mean(x^2)+eps)*w, rotate-half RoPE (HF convention),
         grouped-query attention, SwiGLU MLP, no biases, optional tied lm_head.
  Mamba: the selective-scan block of transformers' MambaMixer.slow_forward,
         with a chunked parallel scan for training (selective_scan_chunked)
         and the plain sequential recurrence as a reference
         (selective_scan_ref).
  Mamba-2: in_proj -> [z | xBC | dt], depthwise causal conv over xBC + SiLU,
         dt = softplus(dt + dt_bias) clamped to time_step_limit, A = -exp(A_log)
         per head, the SSD scan (ssd_chunked for training, ssd_sequential for
         reference and one-token decoding), D skip, gated RMSNorm per group
         (y * silu(z), normalised over each group's channels), out_proj.
  Bamba: Llama-style decoder layers whose token mixer is a Mamba-2 mixer, or
         (at config["attn_layer_indices"]) grouped-query attention with RoPE on
         the first half of each head (partial_rotary_factor 0.5, hard-coded in
         transformers' BambaConfig); input_layernorm -> mixer -> residual ->
         pre_ff_layernorm -> SwiGLU feed_forward -> residual.
  Llama, Mamba-2 and Bamba keep a cache for generation (new_cache): K/V for
  attention layers, conv and SSM states for Mamba-2 layers.
"""

import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0

LLAMA_DEFAULTS = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 2048,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": None,  # hidden_size // num_attention_heads
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "mlp_bias": False,
    "initializer_range": 0.02,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

MAMBA_DEFAULTS = {
    "architectures": ["MambaForCausalLM"],
    "model_type": "mamba",
    "vocab_size": 2048,
    "hidden_size": 64,
    "state_size": 16,
    "num_hidden_layers": 4,
    "expand": 2,
    "intermediate_size": None,  # expand * hidden_size
    "conv_kernel": 4,
    "time_step_rank": None,  # ceil(hidden_size / 16), HF's "auto"
    "layer_norm_epsilon": 1e-5,
    "use_bias": False,
    "use_conv_bias": True,
    "hidden_act": "silu",
    "initializer_range": 0.1,
    "residual_in_fp32": True,
    "rescale_prenorm_residual": False,
    "time_step_scale": 1.0,
    "time_step_min": 0.001,
    "time_step_max": 0.1,
    "time_step_init_scheme": "random",
    "time_step_floor": 1e-4,
    "tie_word_embeddings": True,
    "use_cache": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


MAMBA2_DEFAULTS = {
    "architectures": ["Mamba2ForCausalLM"],
    "model_type": "mamba2",
    "vocab_size": 2048,
    "hidden_size": 192,
    "num_hidden_layers": 8,
    "state_size": 32,
    "expand": 2,
    "num_heads": None,  # expand * hidden_size // head_dim
    "head_dim": 64,
    "n_groups": 2,
    "conv_kernel": 4,
    "layer_norm_epsilon": 1e-5,
    "use_bias": False,
    "use_conv_bias": True,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "residual_in_fp32": True,
    "time_step_rank": None,  # ceil(hidden_size / 16); unused by Mamba-2, written as HF does
    "time_step_min": 0.001,
    "time_step_max": 0.1,
    "time_step_floor": 1e-4,
    "rescale_prenorm_residual": False,
    "chunk_size": 256,
    "tie_word_embeddings": True,
    "use_cache": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}

BAMBA_DEFAULTS = {
    "architectures": ["BambaForCausalLM"],
    "model_type": "bamba",
    "vocab_size": 2048,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "attn_layer_indices": [],
    "mamba_n_heads": 8,
    "mamba_d_head": None,  # mamba_expand * hidden_size // mamba_n_heads (HF's "auto")
    "mamba_n_groups": 2,
    "mamba_d_state": 32,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_chunk_size": 256,
    "mamba_conv_bias": True,
    "mamba_proj_bias": False,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "partial_rotary_factor": 0.5,  # BambaConfig hard-codes it
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "mlp_bias": False,
    "z_loss_coefficient": 0.0,
    "num_logits_to_keep": 1,
    "initializer_range": 0.02,
    "use_cache": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    # trainer-only init of the Mamba-2 dt bias (not HF config fields of Bamba; dropped on export)
    "time_step_min": 0.001,
    "time_step_max": 0.1,
    "time_step_floor": 1e-4,
}

ARCHS = {"LlamaForCausalLM": "llama", "MambaForCausalLM": "mamba", "Mamba2ForCausalLM": "mamba2",
         "BambaForCausalLM": "bamba"}
DEFAULTS = {"llama": LLAMA_DEFAULTS, "mamba": MAMBA_DEFAULTS, "mamba2": MAMBA2_DEFAULTS, "bamba": BAMBA_DEFAULTS}
# Config keys that are trainer-only and not written to config.json, per arch.
TRAINER_ONLY_KEYS = {"bamba": ("time_step_min", "time_step_max", "time_step_floor")}


def arch_of(cfg):
    a = (cfg.get("architectures") or [None])[0]
    if a in ARCHS:
        return ARCHS[a]
    mt = cfg.get("model_type")
    if mt in DEFAULTS:
        return mt
    return "llama"


def _time_step_limit(cfg):
    """(lo, hi) from config (absent: HF's default (0, inf)). JSON has no infinity, so an
    exported config omits the default; a finite limit is written as a list."""
    lim = cfg.get("time_step_limit")
    if lim is None:
        return (0.0, float("inf"))
    lo, hi = float(lim[0]), float(lim[1])
    return (lo, hi)


def complete_config(cfg, arch=None):
    """Fills HF defaults and derived fields; returns a new dict."""
    arch = arch or arch_of(cfg)
    base = dict(DEFAULTS[arch])
    base.update({k: v for k, v in cfg.items() if v is not None or k not in base})
    if arch == "mamba":
        base["architectures"] = ["MambaForCausalLM"]
        base["model_type"] = "mamba"
        if not base.get("intermediate_size"):
            base["intermediate_size"] = int(base["expand"]) * int(base["hidden_size"])
        if base.get("time_step_rank") in (None, "auto"):
            base["time_step_rank"] = int(math.ceil(base["hidden_size"] / 16))
        if base["use_bias"]:
            raise ValueError("mamba use_bias=true is not supported")
    elif arch == "mamba2":
        base["architectures"] = ["Mamba2ForCausalLM"]
        base["model_type"] = "mamba2"
        inner = int(base["expand"]) * int(base["hidden_size"])
        if not base.get("num_heads"):
            base["num_heads"] = inner // int(base["head_dim"])
        if base["num_heads"] * base["head_dim"] != inner:
            raise ValueError("mamba2: num_heads * head_dim (%d * %d) must equal expand * hidden_size (%d)" %
                             (base["num_heads"], base["head_dim"], inner))
        if base["num_heads"] % base["n_groups"]:
            raise ValueError("mamba2: n_groups must divide num_heads")
        if base.get("time_step_rank") in (None, "auto"):
            base["time_step_rank"] = int(math.ceil(base["hidden_size"] / 16))
        if base.get("hidden_act") != "silu":
            raise ValueError("mamba2: only hidden_act silu is supported")
    elif arch == "bamba":
        base["architectures"] = ["BambaForCausalLM"]
        base["model_type"] = "bamba"
        rp = base.pop("rope_parameters", None)  # transformers 5 layout
        if isinstance(rp, dict):
            base["rope_theta"] = rp.get("rope_theta", base["rope_theta"])
            base["partial_rotary_factor"] = rp.get("partial_rotary_factor", 0.5)
            if rp.get("rope_type", "default") != "default":
                raise ValueError("bamba: rope_type %r is not supported" % rp.get("rope_type"))
        if float(base.get("partial_rotary_factor", 0.5)) != 0.5:
            raise ValueError("bamba: transformers' BambaConfig hard-codes partial_rotary_factor 0.5")
        inner = int(base["mamba_expand"]) * int(base["hidden_size"])
        if base.get("mamba_d_head") in (None, "auto"):
            base["mamba_d_head"] = inner // int(base["mamba_n_heads"])
        if base["mamba_n_heads"] * base["mamba_d_head"] != inner:
            raise ValueError("bamba: mamba_n_heads * mamba_d_head must equal mamba_expand * hidden_size")
        if base["mamba_n_heads"] % base["mamba_n_groups"]:
            raise ValueError("bamba: mamba_n_groups must divide mamba_n_heads")
        if base["num_attention_heads"] % base["num_key_value_heads"]:
            raise ValueError("num_key_value_heads must divide num_attention_heads")
        idx = sorted(int(i) for i in (base.get("attn_layer_indices") or []))
        if any(i < 0 or i >= base["num_hidden_layers"] for i in idx):
            raise ValueError("bamba: attn_layer_indices %s outside 0..%d" % (idx, base["num_hidden_layers"] - 1))
        base["attn_layer_indices"] = idx
        if base.get("hidden_act") != "silu":
            raise ValueError("bamba: only hidden_act silu is supported")
        for k in ("attention_bias", "mlp_bias", "mamba_proj_bias"):
            if base.get(k):
                raise ValueError("bamba: %s=true is not supported" % k)
    else:
        base["architectures"] = ["LlamaForCausalLM"]
        base["model_type"] = "llama"
        if not base.get("head_dim"):
            base["head_dim"] = base["hidden_size"] // base["num_attention_heads"]
        if base["num_attention_heads"] % base["num_key_value_heads"]:
            raise ValueError("num_key_value_heads must divide num_attention_heads")
        if base["head_dim"] % 2:
            raise ValueError("head_dim must be even")
    return base


class RMSNorm(nn.Module):
    """HF LlamaRMSNorm / MambaRMSNorm: w * (x * rsqrt(mean(x^2) + eps)), in float32."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


# ----------------------------------------------------------------------------
# Llama


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class KVCache:
    """Preallocated per-layer K/V buffers [batch, kv_heads, max_len, head_dim]."""

    def __init__(self, num_layers, max_len):
        self.max_len = max_len
        self.k = [None] * num_layers
        self.v = [None] * num_layers

    def update(self, layer, k, v, pos):
        L = k.shape[2]
        if self.k[layer] is None:
            shape = (k.shape[0], k.shape[1], self.max_len, k.shape[3])
            self.k[layer] = k.new_zeros(shape)
            self.v[layer] = v.new_zeros(shape)
        if pos + L > self.max_len:
            raise ValueError("KV cache overflow: %d > %d" % (pos + L, self.max_len))
        self.k[layer][:, :, pos:pos + L] = k
        self.v[layer][:, :, pos:pos + L] = v
        return self.k[layer][:, :, :pos + L], self.v[layer][:, :, :pos + L]


class LlamaAttention(nn.Module):
    """Grouped-query attention with rotate-half RoPE on the first rotary_dim channels
    of every head (all of them for Llama; half for Bamba), the rest passed through."""

    def __init__(self, cfg, layer_idx, rotary_dim=None):
        super().__init__()
        D, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        hd = cfg.get("head_dim") or D // H
        self.H, self.KV, self.hd, self.layer_idx = H, KV, hd, layer_idx
        self.rot = rotary_dim or hd
        self.q_proj = nn.Linear(D, H * hd, bias=False)
        self.k_proj = nn.Linear(D, KV * hd, bias=False)
        self.v_proj = nn.Linear(D, KV * hd, bias=False)
        self.o_proj = nn.Linear(H * hd, D, bias=False)
        self.use_sdpa = HAS_SDPA

    def forward(self, x, cos, sin, cache=None, pos=0):
        b, L, _ = x.shape
        q = self.q_proj(x).view(b, L, self.H, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, L, self.KV, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, L, self.KV, self.hd).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        if self.rot == self.hd:
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        else:  # partial rotary: RoPE on the first self.rot channels of each head
            qr, qp = q[..., :self.rot], q[..., self.rot:]
            kr, kp = k[..., :self.rot], k[..., self.rot:]
            q = torch.cat((qr * cos + rotate_half(qr) * sin, qp), dim=-1)
            k = torch.cat((kr * cos + rotate_half(kr) * sin, kp), dim=-1)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v, pos)
        S = k.shape[2]  # keys: positions [0, pos + L)
        rep = self.H // self.KV  # HF repeat_kv: query head h reads kv head h // rep
        if self.use_sdpa and cache is None:
            if rep > 1:
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=L > 1)
        else:
            # Grouped matmuls, no copy of K/V: the rep query heads of a kv
            # head are stacked along the row axis, row = r * L + l.
            qg = q.reshape(b, self.KV, rep * L, self.hd)
            att = torch.matmul(qg, k.transpose(2, 3)) / math.sqrt(self.hd)
            if L > 1:
                mask = torch.ones(L, S, dtype=torch.bool, device=x.device).tril(S - L).repeat(rep, 1)
                att = att.masked_fill(~mask, torch.finfo(att.dtype).min)
            att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
            o = torch.matmul(att, v).view(b, self.H, L, self.hd)
        o = o.transpose(1, 2).reshape(b, L, self.H * self.hd)
        return self.o_proj(o)


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, I = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(D, I, bias=False)
        self.up_proj = nn.Linear(D, I, bias=False)
        self.down_proj = nn.Linear(I, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.self_attn = LlamaAttention(cfg, layer_idx)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.mlp = LlamaMLP(cfg)

    def forward(self, x, cos, sin, cache=None, pos=0):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, pos)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class LlamaForCausalLM(nn.Module):
    arch = "llama"

    def __init__(self, cfg):
        super().__init__()
        cfg = complete_config(cfg, "llama")
        self.config = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        hd = cfg["head_dim"]
        inv = 1.0 / (float(cfg["rope_theta"]) ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        self.register_buffer("inv_freq", inv, persistent=False)
        self.reset_parameters()
        if cfg["tie_word_embeddings"]:
            self.lm_head.weight = self.model.embed_tokens.weight

    def reset_parameters(self):
        std = self.config["initializer_range"]
        n = self.config["num_hidden_layers"]
        for name, p in self.named_parameters():
            if p.dim() == 2:
                s = std
                if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                    s = std / math.sqrt(2 * n)  # GPT-2 style residual scaling
                nn.init.normal_(p, 0.0, s)
            else:
                nn.init.ones_(p)  # RMSNorm weights

    def new_cache(self, max_len):
        return KVCache(self.config["num_hidden_layers"], max_len)

    def forward(self, ids, cache=None, pos=0):
        """ids [b, L] int64 -> logits [b, L, vocab]. With cache, ids sit at positions pos..pos+L-1."""
        L = ids.shape[1]
        t = torch.arange(pos, pos + L, device=ids.device, dtype=torch.float32)
        freqs = t[:, None] * self.inv_freq.float()[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, cache, pos)
        return self.lm_head(self.model.norm(x))


# ----------------------------------------------------------------------------
# Mamba selective scan


def selective_scan_ref(u, delta, A, Bm, Cm, D):
    """Sequential reference, as MambaMixer.slow_forward.

    u, delta: [b, L, C]; A: [C, N] (negative); Bm, Cm: [b, L, N]; D: [C].
    h_t = exp(delta_t A) h_{t-1} + delta_t B_t u_t ;  y_t = C_t . h_t + D u_t.
    """
    b, L, C = u.shape
    h = u.new_zeros(b, C, A.shape[1])
    ys = []
    for t in range(L):
        dA = torch.exp(delta[:, t, :, None] * A)
        dBu = delta[:, t, :, None] * Bm[:, t, None, :] * u[:, t, :, None]
        h = dA * h + dBu
        ys.append(torch.matmul(h, Cm[:, t, :, None])[..., 0])
    return torch.stack(ys, dim=1) + u * D


def selective_scan_chunked(u, delta, A, Bm, Cm, D, chunk=16):
    """Same result as selective_scan_ref, with ~L/chunk + chunk sequential steps instead of L.

    The sequence is cut into nc chunks of `chunk` steps, processed side by side:
      1. inside every chunk at once, the recurrence runs from a zero state
         (chunk steps, each on a [b, nc, C, N] tensor);
      2. the log-decays delta*A are summed cumulatively inside each chunk
         (log space), P_t = exp(S_t) <= 1 is the decay since the chunk start;
      3. a sequential carry over the nc chunks gives every chunk's start
         state, h_start(c+1) = h_end(c) + P_end(c) * h_start(c), and
         h_t += P_t * h_start adds it back.
    Every factor is a decay <= 1, so nothing overflows however strong the decay
    (unlike exp(S_t) * cumsum(exp(-S_s) ...), which overflows once S < -88).
    chunk ~ sqrt(L) minimises the number of sequential steps.
    """
    b, L, C = u.shape
    N = A.shape[1]
    T = max(1, min(int(chunk), L))
    nc = (L + T - 1) // T
    Lp = nc * T
    if Lp != L:  # delta = 0 in the padding: decay 1, no input, so the state is untouched
        pad = Lp - L
        u = F.pad(u, (0, 0, 0, pad))
        delta = F.pad(delta, (0, 0, 0, pad))
        Bm = F.pad(Bm, (0, 0, 0, pad))
    dl = delta.view(b, nc, T, C)
    du = (delta * u).view(b, nc, T, C)
    Bc = Bm.view(b, nc, T, N)
    h = u.new_zeros(b, nc, C, N)
    hs = []
    for t in range(T):
        h = torch.exp(dl[:, :, t, :, None] * A) * h + du[:, :, t, :, None] * Bc[:, :, t, None, :]
        hs.append(h)
    H = torch.stack(hs, dim=2)  # [b, nc, T, C, N], each chunk started from zero
    if nc > 1:
        P = torch.exp(torch.cumsum(dl[..., None] * A, dim=2))  # decay since the chunk start
        starts = [u.new_zeros(b, C, N)]
        for c in range(nc - 1):
            starts.append(H[:, c, -1] + P[:, c, -1] * starts[-1])
        H = H + P * torch.stack(starts, dim=1)[:, :, None]
    H = H.view(b, Lp, C, N)[:, :L]
    y = torch.matmul(H, Cm[..., None])[..., 0]
    return y + u[:, :L] * D


class MambaMixer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        D, C, N, K, R = (cfg["hidden_size"], cfg["intermediate_size"], cfg["state_size"],
                         cfg["conv_kernel"], cfg["time_step_rank"])
        self.C, self.N, self.R, self.K, self.layer_idx = C, N, R, K, layer_idx
        self.in_proj = nn.Linear(D, 2 * C, bias=False)
        self.conv1d = nn.Conv1d(C, C, K, groups=C, padding=K - 1, bias=cfg["use_conv_bias"])
        self.x_proj = nn.Linear(C, R + 2 * N, bias=False)
        self.dt_proj = nn.Linear(R, C, bias=True)
        A = torch.arange(1, N + 1, dtype=torch.float32)[None, :].expand(C, -1).contiguous()
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(C))
        self.out_proj = nn.Linear(C, D, bias=False)
        self.scan = "auto"  # "auto" | "chunked" | "ref"
        self.chunk = 16

    def forward(self, x):
        b, L, _ = x.shape
        xs, z = self.in_proj(x).chunk(2, dim=-1)
        xs = self.conv1d(xs.transpose(1, 2))[..., :L]  # causal depthwise conv + bias
        xs = F.silu(xs).transpose(1, 2)  # [b, L, C]
        dt, Bm, Cm = torch.split(self.x_proj(xs), [self.R, self.N, self.N], dim=-1)
        dt = F.softplus(self.dt_proj(dt))  # [b, L, C]
        A = -torch.exp(self.A_log.float())
        args = (xs.float(), dt.float(), A, Bm.float(), Cm.float(), self.D.float())
        # "auto": the chunked scan on CUDA (few, large kernels); on the CPU the
        # plain loop is as fast or faster (it touches less memory).
        if self.scan == "ref" or (self.scan == "auto" and not x.is_cuda):
            y = selective_scan_ref(*args)
        else:
            y = selective_scan_chunked(*args, chunk=self.chunk)
        y = y * F.silu(z.float())
        return self.out_proj(y.to(x.dtype))


class MambaBlock(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.norm = RMSNorm(cfg["hidden_size"], cfg["layer_norm_epsilon"])
        self.mixer = MambaMixer(cfg, layer_idx)

    def forward(self, x):
        return x + self.mixer(self.norm(x))


class MambaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embeddings = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([MambaBlock(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.norm_f = RMSNorm(cfg["hidden_size"], cfg["layer_norm_epsilon"])


class MambaForCausalLM(nn.Module):
    arch = "mamba"

    def __init__(self, cfg):
        super().__init__()
        cfg = complete_config(cfg, "mamba")
        self.config = cfg
        self.backbone = MambaModel(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        self.reset_parameters()
        if cfg["tie_word_embeddings"]:
            self.lm_head.weight = self.backbone.embeddings.weight

    def reset_parameters(self):
        """As transformers' MambaPreTrainedModel._init_weights (Linear weights keep
        PyTorch's default init; biases zero except dt_proj's)."""
        cfg = self.config
        nn.init.normal_(self.backbone.embeddings.weight, 0.0, cfg["initializer_range"])
        if not cfg["tie_word_embeddings"]:
            nn.init.normal_(self.lm_head.weight, 0.0, cfg["initializer_range"])
        for blk in self.backbone.layers:
            m = blk.mixer
            R = cfg["time_step_rank"]
            std = R ** -0.5 * cfg["time_step_scale"]
            with torch.no_grad():
                if cfg["time_step_init_scheme"] == "constant":
                    nn.init.constant_(m.dt_proj.weight, std)
                else:
                    nn.init.uniform_(m.dt_proj.weight, -std, std)
                lo, hi = math.log(cfg["time_step_min"]), math.log(cfg["time_step_max"])
                dt = torch.exp(torch.rand(m.C) * (hi - lo) + lo).clamp(min=cfg["time_step_floor"])
                m.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
                A = torch.arange(1, m.N + 1, dtype=torch.float32)[None, :].expand(m.C, -1)
                m.A_log.copy_(torch.log(A))
                m.D.fill_(1.0)
                if cfg["rescale_prenorm_residual"]:
                    nn.init.kaiming_uniform_(m.out_proj.weight, a=math.sqrt(5))
                    m.out_proj.weight /= math.sqrt(cfg["num_hidden_layers"])

    def set_scan(self, scan="auto", chunk=16):
        for blk in self.backbone.layers:
            blk.mixer.scan = scan
            blk.mixer.chunk = chunk

    def forward(self, ids, cache=None, pos=0):
        if cache is not None or pos:
            raise NotImplementedError("MambaForCausalLM here has no incremental state")
        x = self.backbone.embeddings(ids)
        for blk in self.backbone.layers:
            x = blk(x)
        return self.lm_head(self.backbone.norm_f(x))


# ----------------------------------------------------------------------------
# Mamba-2: the SSD scan


def ssd_sequential(x, dt, A, B, C, h0=None):
    """The Mamba-2 recurrence, one step at a time (reference; one-token decoding).

    x: [b, L, H, P]; dt: [b, L, H] (after softplus and clamping); A: [H] (negative);
    B, C: [b, L, G, N] with head h reading group h // (H // G); h0: [b, H, P, N] or None.
      h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T ;  y_t = h_t C_t      (per head)
    Returns y [b, L, H, P] (without the D skip) and the final state [b, H, P, N].
    """
    b, L, H, P = x.shape
    R = H // B.shape[2]
    Bh = B.repeat_interleave(R, dim=2)
    Ch = C.repeat_interleave(R, dim=2)
    h = x.new_zeros(b, H, P, B.shape[-1]) if h0 is None else h0
    ys = []
    for t in range(L):
        dA = torch.exp(dt[:, t] * A)  # [b, H]
        h = h * dA[..., None, None] + (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        ys.append(torch.matmul(h, Ch[:, t, :, :, None])[..., 0])
    return torch.stack(ys, dim=1), h


def ssd_chunked(x, dt, A, B, C, chunk=64, h0=None):
    """Same result as ssd_sequential, computed chunk-wise with matrix products (the SSD
    "state space dual" form, Mamba-2 paper Sec. 6): the sequence is cut into chunks of
    `chunk` steps;
      1. inside each chunk, y = (C B^T o decay) (dt x): a masked, attention-like
         product, decay[l, s] = exp(sum_{k=s+1..l} dt_k A) for s <= l, else 0 (the
         segment sums are taken exactly, by a masked cumulative sum, not as a
         difference of two long prefix sums);
      2. each chunk's contribution to the state at its end, sum_s decay[end, s] dt_s x_s B_s^T;
      3. a sequential pass over the chunks carries the state from chunk to chunk
         (h_in(c+1) = exp(sum of the chunk's dt A) h_in(c) + contribution(c));
      4. y += exp(sum_{k<=l} dt_k A) C_l h_in(c).
    Every exponent is a sum of non-positive terms, so nothing overflows. Padding
    steps (dt = 0, x = 0) leave the state unchanged, so the returned final state is
    exact for any length.
    """
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    R = H // G
    Q = max(1, min(int(chunk), L))
    nc = (L + Q - 1) // Q
    pad = nc * Q - L
    a = dt * A  # [b, L, H], log-decay per step (<= 0)
    xd = x * dt[..., None]
    if pad:
        a = F.pad(a, (0, 0, 0, pad))
        xd = F.pad(xd, (0, 0, 0, 0, 0, pad))
        B = F.pad(B, (0, 0, 0, 0, 0, pad))
        C = F.pad(C, (0, 0, 0, 0, 0, pad))
    a = a.view(b, nc, Q, H).permute(0, 1, 3, 2)  # [b, nc, H, Q]
    xd = xd.view(b, nc, Q, G, R, P)
    B = B.view(b, nc, Q, G, N)
    C = C.view(b, nc, Q, G, N)
    S = torch.cumsum(a, dim=-1)  # decay from the chunk start through step l
    ones = torch.ones(Q, Q, dtype=torch.bool, device=x.device)
    strict = torch.tril(ones, -1)  # [k, s]: k > s
    # seg[l, s] = sum_{k=s+1..l} a_k (rows l, columns s), exact for l >= s
    seg = torch.cumsum(a[..., :, None].expand(b, nc, H, Q, Q).masked_fill(~strict, 0.0), dim=-2)
    decay = torch.exp(seg.masked_fill(~torch.tril(ones), float("-inf"))).view(b, nc, G, R, Q, Q)
    CB = torch.einsum("bclgn,bcsgn->bcgls", C, B)
    y = torch.einsum("bcgrls,bcsgrp->bclgrp", CB[:, :, :, None] * decay, xd)
    to_end = torch.exp(seg[..., -1, :]).view(b, nc, G, R, Q)  # decay from step s to the chunk end
    contrib = torch.einsum("bcgrs,bcsgn,bcsgrp->bcgrpn", to_end, B, xd)
    chunk_decay = torch.exp(S[..., -1]).view(b, nc, G, R)
    h = x.new_zeros(b, G, R, P, N) if h0 is None else h0.reshape(b, G, R, P, N)
    starts = []
    for c in range(nc):
        starts.append(h)
        h = chunk_decay[:, c, :, :, None, None] * h + contrib[:, c]
    H_in = torch.stack(starts, dim=1)  # [b, nc, G, R, P, N], the state entering each chunk
    from_start = torch.exp(S).view(b, nc, G, R, Q).permute(0, 1, 4, 2, 3)  # [b, nc, Q, G, R]
    y = y + torch.einsum("bclgn,bcgrpn->bclgrp", C, H_in) * from_start[..., None]
    return y.reshape(b, nc * Q, H, P)[:, :L], h.reshape(b, H, P, N)


class GatedRMSNorm(nn.Module):
    """HF MambaRMSNormGated / BambaRMSNormGated: h = y * silu(z), RMS-normalised over
    each group of group_size channels, times weight (float32 inside)."""

    def __init__(self, dim, group_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.group_size = group_size
        self.eps = eps

    def forward(self, y, z):
        dtype = y.dtype
        h = y.float() * F.silu(z.float())
        shape = h.shape
        h = h.view(*shape[:-1], shape[-1] // self.group_size, self.group_size)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.view(shape).to(dtype)


class SSMCache(KVCache):
    """Generation state: K/V of attention layers (KVCache) plus, per Mamba-2 layer,
    conv [b, conv_dim, conv_kernel - 1] (the last raw xBC inputs) and ssm [b, H, P, N]."""

    def __init__(self, num_layers, max_len):
        super().__init__(num_layers, max_len)
        self.conv = [None] * num_layers
        self.ssm = [None] * num_layers


class Mamba2Mixer(nn.Module):
    """Mamba-2 block of HF Mamba2Mixer / BambaMixer (torch path, no padding mask)."""

    def __init__(self, hidden, n_heads, head_dim, n_groups, d_state, d_conv, conv_bias, eps, layer_idx,
                 dt_limit=(0.0, float("inf"))):
        super().__init__()
        I = n_heads * head_dim
        self.H, self.P, self.G, self.N, self.K, self.I = n_heads, head_dim, n_groups, d_state, d_conv, I
        self.conv_dim = I + 2 * n_groups * d_state
        self.layer_idx = layer_idx
        self.dt_limit = (float(dt_limit[0]), float(dt_limit[1]))
        self.in_proj = nn.Linear(hidden, I + self.conv_dim + n_heads, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim, padding=d_conv - 1,
                                bias=conv_bias)
        self.dt_bias = nn.Parameter(torch.ones(n_heads))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, n_heads + 1, dtype=torch.float32)))
        self.D = nn.Parameter(torch.ones(n_heads))
        self.norm = GatedRMSNorm(I, I // n_groups, eps)
        self.out_proj = nn.Linear(I, hidden, bias=False)
        self.scan = "auto"  # "auto"/"chunked": ssd_chunked; "ref": ssd_sequential
        self.chunk = 64

    def forward(self, x, cache=None):
        b, L, _ = x.shape
        z, xBC, dt = torch.split(self.in_proj(x), [self.I, self.conv_dim, self.H], dim=-1)
        xBC = xBC.transpose(1, 2)  # [b, conv_dim, L]
        if cache is None:
            xBC = self.conv1d(xBC)[..., :L]
        else:  # prepend the previous K-1 raw inputs (zeros at the start: the causal padding)
            prev = cache.conv[self.layer_idx]
            if prev is None:
                prev = xBC.new_zeros(b, self.conv_dim, self.K - 1)
            full = torch.cat([prev, xBC], dim=-1)
            cache.conv[self.layer_idx] = full[..., full.shape[-1] - (self.K - 1):].detach().clone()
            xBC = F.conv1d(full, self.conv1d.weight, self.conv1d.bias, groups=self.conv_dim)
        xBC = F.silu(xBC).transpose(1, 2)  # [b, L, conv_dim]
        xs, Bm, Cm = torch.split(xBC, [self.I, self.G * self.N, self.G * self.N], dim=-1)
        dt = F.softplus(dt.float() + self.dt_bias.float())
        if self.dt_limit != (0.0, float("inf")):
            dt = dt.clamp(self.dt_limit[0], self.dt_limit[1])
        A = -torch.exp(self.A_log.float())
        xs = xs.float().reshape(b, L, self.H, self.P)
        Bm = Bm.float().reshape(b, L, self.G, self.N)
        Cm = Cm.float().reshape(b, L, self.G, self.N)
        h0 = cache.ssm[self.layer_idx] if cache is not None else None
        if self.scan == "ref" or (cache is not None and L == 1):
            y, h = ssd_sequential(xs, dt, A, Bm, Cm, h0)
        else:
            y, h = ssd_chunked(xs, dt, A, Bm, Cm, self.chunk, h0)
        if cache is not None:
            cache.ssm[self.layer_idx] = h.detach()
        y = y + xs * self.D.float()[:, None]
        y = self.norm(y.reshape(b, L, self.I), z)
        return self.out_proj(y.to(x.dtype))

    @torch.no_grad()
    def init_mamba2(self, cfg):
        """As HF Mamba2Mixer.init_mamba2_weights (A_log = log(1..H), D = 1, dt_bias the
        inverse softplus of dt log-uniform in [time_step_min, time_step_max]); conv1d keeps
        PyTorch's default init, as HF's _init_weights."""
        self.A_log.copy_(torch.log(torch.arange(1, self.H + 1, dtype=torch.float32)))
        self.D.fill_(1.0)
        lo, hi = math.log(cfg["time_step_min"]), math.log(cfg["time_step_max"])
        dt = torch.exp(torch.rand(self.H) * (hi - lo) + lo).clamp(min=cfg["time_step_floor"])
        self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))
        if self.conv1d.bias is not None:
            self.conv1d.bias.zero_()


def _init_linear_and_embeddings(model, std, n_layers):
    """Linear and embedding weights ~ N(0, std); out_proj / o_proj / down_proj scaled by
    1/sqrt(2 n_layers) (GPT-2 style); norms 1; conv1d weights keep PyTorch's init."""
    for name, mod in model.named_modules():
        if isinstance(mod, (nn.Linear, nn.Embedding)):
            s = std
            if name.endswith(("out_proj", "o_proj", "down_proj")):
                s = std / math.sqrt(2 * n_layers)
            nn.init.normal_(mod.weight, 0.0, s)
            if getattr(mod, "bias", None) is not None:
                nn.init.zeros_(mod.bias)
        elif isinstance(mod, (RMSNorm, GatedRMSNorm)):
            nn.init.ones_(mod.weight)


class Mamba2Block(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.norm = RMSNorm(cfg["hidden_size"], cfg["layer_norm_epsilon"])
        self.mixer = Mamba2Mixer(cfg["hidden_size"], cfg["num_heads"], cfg["head_dim"], cfg["n_groups"],
                                 cfg["state_size"], cfg["conv_kernel"], cfg["use_conv_bias"],
                                 cfg["layer_norm_epsilon"], layer_idx, _time_step_limit(cfg))

    def forward(self, x, cache=None):
        return x + self.mixer(self.norm(x), cache)


class Mamba2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embeddings = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([Mamba2Block(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.norm_f = RMSNorm(cfg["hidden_size"], cfg["layer_norm_epsilon"])


class Mamba2ForCausalLM(nn.Module):
    arch = "mamba2"

    def __init__(self, cfg):
        super().__init__()
        cfg = complete_config(cfg, "mamba2")
        if cfg["use_bias"]:
            raise ValueError("mamba2 use_bias=true is not supported")
        self.config = cfg
        self.backbone = Mamba2Model(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        self.reset_parameters()
        if cfg["tie_word_embeddings"]:
            self.lm_head.weight = self.backbone.embeddings.weight

    def reset_parameters(self):
        cfg = self.config
        _init_linear_and_embeddings(self, cfg["initializer_range"], cfg["num_hidden_layers"])
        for blk in self.backbone.layers:
            blk.mixer.init_mamba2(cfg)

    def set_scan(self, scan="auto", chunk=64):
        for blk in self.backbone.layers:
            blk.mixer.scan = scan
            blk.mixer.chunk = chunk

    def new_cache(self, max_len):
        return SSMCache(self.config["num_hidden_layers"], max_len)

    def forward(self, ids, cache=None, pos=0):
        """ids [b, L] -> logits [b, L, vocab]; with cache, continues from its state (pos unused)."""
        x = self.backbone.embeddings(ids)
        for blk in self.backbone.layers:
            x = blk(x, cache)
        return self.lm_head(self.backbone.norm_f(x))


# ----------------------------------------------------------------------------
# Bamba: Mamba-2 + attention hybrid


class BambaDecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx, rotary_dim):
        super().__init__()
        D = cfg["hidden_size"]
        self.input_layernorm = RMSNorm(D, cfg["rms_norm_eps"])
        self.is_attn = layer_idx in cfg["attn_layer_indices"]
        if self.is_attn:
            self.self_attn = LlamaAttention(cfg, layer_idx, rotary_dim)
        else:
            self.mamba = Mamba2Mixer(D, cfg["mamba_n_heads"], cfg["mamba_d_head"], cfg["mamba_n_groups"],
                                     cfg["mamba_d_state"], cfg["mamba_d_conv"], cfg["mamba_conv_bias"],
                                     cfg["rms_norm_eps"], layer_idx, _time_step_limit(cfg))
        self.pre_ff_layernorm = RMSNorm(D, cfg["rms_norm_eps"])
        self.feed_forward = LlamaMLP(cfg)

    def mix(self, h, cos, sin, cache=None, pos=0):
        """The token mixer on the normalised input h."""
        if self.is_attn:
            return self.self_attn(h, cos, sin, cache, pos)
        return self.mamba(h, cache)

    def forward(self, x, cos, sin, cache=None, pos=0):
        x = x + self.mix(self.input_layernorm(x), cos, sin, cache, pos)
        return x + self.feed_forward(self.pre_ff_layernorm(x))


class BambaModel(nn.Module):
    def __init__(self, cfg, rotary_dim):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([BambaDecoderLayer(cfg, i, rotary_dim)
                                     for i in range(cfg["num_hidden_layers"])])
        self.final_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class BambaForCausalLM(nn.Module):
    arch = "bamba"

    def __init__(self, cfg):
        super().__init__()
        cfg = complete_config(cfg, "bamba")
        self.config = cfg
        hd = cfg["hidden_size"] // cfg["num_attention_heads"]  # HF Bamba: no head_dim field
        self.rotary_dim = int(hd * cfg["partial_rotary_factor"])
        self.model = BambaModel(cfg, self.rotary_dim)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        r = self.rotary_dim
        inv = 1.0 / (float(cfg["rope_theta"]) ** (torch.arange(0, r, 2, dtype=torch.int64).float() / r))
        self.register_buffer("inv_freq", inv, persistent=False)
        self.reset_parameters()
        if cfg["tie_word_embeddings"]:
            self.lm_head.weight = self.model.embed_tokens.weight

    def reset_parameters(self):
        cfg = self.config
        _init_linear_and_embeddings(self, cfg["initializer_range"], cfg["num_hidden_layers"])
        for layer in self.model.layers:
            if not layer.is_attn:
                layer.mamba.init_mamba2(cfg)

    def set_scan(self, scan="auto", chunk=64):
        for layer in self.model.layers:
            if not layer.is_attn:
                layer.mamba.scan = scan
                layer.mamba.chunk = chunk

    def new_cache(self, max_len):
        return SSMCache(self.config["num_hidden_layers"], max_len)

    def rope(self, pos, L, device):
        t = torch.arange(pos, pos + L, device=device, dtype=torch.float32)
        freqs = t[:, None] * self.inv_freq.float()[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def forward(self, ids, cache=None, pos=0):
        """ids [b, L] -> logits [b, L, vocab]. With cache, ids sit at positions pos..pos+L-1."""
        cos, sin = self.rope(pos, ids.shape[1], ids.device)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, cache, pos)
        return self.lm_head(self.model.final_layernorm(x))


# ----------------------------------------------------------------------------
# helpers


def build_model(cfg, arch=None):
    arch = arch or arch_of(cfg)
    return {"mamba": MambaForCausalLM, "mamba2": Mamba2ForCausalLM, "bamba": BambaForCausalLM,
            "llama": LlamaForCausalLM}[arch](cfg)


def input_embedding(model):
    return {"mamba": lambda m: m.backbone.embeddings, "mamba2": lambda m: m.backbone.embeddings,
            "bamba": lambda m: m.model.embed_tokens, "llama": lambda m: m.model.embed_tokens}[model.arch](model)


def hf_config_dict(cfg):
    """The config.json fields for a completed config: None values and trainer-only keys
    dropped; Bamba's RoPE also in transformers 5's `rope_parameters` layout (with the
    hard-coded partial_rotary_factor 0.5), beside the top-level rope_theta of the 4.x layout."""
    arch = arch_of(cfg)
    drop = set(TRAINER_ONLY_KEYS.get(arch, ()))
    out = {k: v for k, v in cfg.items() if v is not None and k not in drop}
    if arch == "bamba":
        out["rope_parameters"] = {"rope_type": "default", "rope_theta": float(cfg["rope_theta"]),
                                  "partial_rotary_factor": float(cfg["partial_rotary_factor"])}
    if arch in ("mamba2", "bamba") and "time_step_limit" in out:
        lo, hi = _time_step_limit(cfg)
        if math.isinf(hi) and lo == 0.0:
            del out["time_step_limit"]  # HF's default; JSON has no infinity
        else:
            out["time_step_limit"] = [lo, hi]
    return out


def count_params(model):
    """Distinct parameters (tied weights counted once), embeddings included."""
    seen, n = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


def export_state_dict(model):
    """HF-named tensors to write; drops lm_head.weight when tied."""
    sd = model.state_dict()
    if model.config.get("tie_word_embeddings"):
        sd.pop("lm_head.weight", None)
    return sd


def load_state_dict_hf(model, sd):
    sd = {k: v for k, v in sd.items()}
    if model.config.get("tie_word_embeddings"):
        sd.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    allowed = {"lm_head.weight"} if model.config.get("tie_word_embeddings") else set()
    bad_missing = [k for k in missing if k not in allowed]
    if bad_missing or unexpected:
        raise KeyError("state_dict mismatch: missing %s, unexpected %s" % (bad_missing, list(unexpected)))
    if model.config.get("tie_word_embeddings"):  # load_state_dict keeps the tie, but be explicit
        model.lm_head.weight = input_embedding(model).weight


def torch_load(path):
    """torch.load of our own checkpoints (dicts of tensors, numbers, strings). torch >= 2.6
    defaults to weights_only=True, which rejects some plain objects; 1.13 lacks nothing needed."""
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except TypeError:  # a torch without the weights_only argument
        return torch.load(path, map_location="cpu")


def load_model(path, device="cpu"):
    """Loads an exported HF dir (config.json + model.safetensors) or a trainer
    checkpoint (.pt with 'config' and 'model'). Returns (model in eval mode, config)."""
    if os.path.isdir(path):
        from safetensors.torch import load_file
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
        model = build_model(cfg)
        sd = load_file(os.path.join(path, "model.safetensors"))
        sd = {k: v.float() for k, v in sd.items()}
    else:
        ck = torch_load(path)
        cfg = ck["config"]
        model = build_model(cfg)
        sd = ck["model"]
    load_state_dict_hf(model, sd)
    model.to(device).eval()
    return model, model.config
