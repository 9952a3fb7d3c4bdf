"""Compact PyTorch Llama and Mamba language models for treespec's demo models.

Parameter names and forward semantics follow Hugging Face transformers
(LlamaForCausalLM, MambaForCausalLM), so a state_dict exports straight to a
Hugging Face directory (see export_hf.py) that treespec's engine and
transformers both load.

Runs on torch 1.13 (CPU) and torch 2.x (CPU or CUDA). Nothing here needs
transformers.

  Llama: RMSNorm x*rsqrt(mean(x^2)+eps)*w, rotate-half RoPE (HF convention),
         grouped-query attention, SwiGLU MLP, no biases, optional tied lm_head.
  Mamba: the selective-scan block of transformers' MambaMixer.slow_forward,
         with a chunked parallel scan for training (selective_scan_chunked)
         and the plain sequential recurrence as a reference
         (selective_scan_ref).
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


def arch_of(cfg):
    a = (cfg.get("architectures") or [None])[0]
    if a == "MambaForCausalLM" or cfg.get("model_type") == "mamba":
        return "mamba"
    return "llama"


def complete_config(cfg, arch=None):
    """Fills HF defaults and derived fields; returns a new dict."""
    arch = arch or arch_of(cfg)
    base = dict(MAMBA_DEFAULTS if arch == "mamba" else LLAMA_DEFAULTS)
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
    def __init__(self, cfg, layer_idx):
        super().__init__()
        D, H, KV, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.H, self.KV, self.hd, self.layer_idx = H, KV, hd, layer_idx
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
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
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
# helpers


def build_model(cfg, arch=None):
    arch = arch or arch_of(cfg)
    return MambaForCausalLM(cfg) if arch == "mamba" else LlamaForCausalLM(cfg)


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
        emb = model.backbone.embeddings if model.arch == "mamba" else model.model.embed_tokens
        model.lm_head.weight = emb.weight


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
