"""EAGLE drafter heads (paper 002 Sec. 3; EAGLE-3, arXiv 2503.01840) in PyTorch.

A head drafts in the target's feature space. Row t of a head's sequence takes
the target's feature at position t and the embedding of token t+1 (the token
that feature produced) and predicts the feature at position t+1, whose logits
(the head's own final norm, then the target's LM head) give token t+2:

  g_t   = f_t                                   (eagle: the last layer's residual stream)
  g_t   = fuse([f_low; f_mid; f_high])          (eagle3: 3H -> H)
  x_t   = fc([g_t ; embed(token_{t+1})])        (2H -> H, no bias)
  h_t   = LlamaDecoderLayer(x)_t                (causal over the rows, RoPE position t)
  logits_t = lm_head(norm(h_t))                 (target's lm_head, head's own norm)

Drafting deeper than one token feeds the head its own output h as the next
row's g (the target's feature is not known there). `embed` and `lm_head` are
the target's, frozen, and never stored with the head.

`forward_unrolled` is the training-time test of EAGLE-3: step 0 reads the
target's features; step j >= 1 reads step j-1's outputs. Row t of step j sits
at position t + j and attends the step-0 rows 0..t (real features, as the
committed rows of a drafter's KV cache) and its own rows of steps 1..j (the
draft path), exactly what a drafter's tree node of depth j sees at inference.
"""

import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import models as M

EAGLE3_LAYERS_RULE = "(2, L // 2, L - 3) of the target's L layers, 0-based outputs"


def eagle3_layers(num_layers):
    return [2, num_layers // 2, num_layers - 3]


def head_config(target_cfg, kind, layers):
    """The head's config.json: a one-layer Llama of the target's width plus EAGLE fields."""
    keys = ["vocab_size", "hidden_size", "intermediate_size", "num_attention_heads",
            "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta",
            "max_position_embeddings", "bos_token_id", "eos_token_id"]
    cfg = {"architectures": ["EagleHead"], "model_type": kind}
    cfg.update({k: target_cfg[k] for k in keys})
    cfg.update({"num_hidden_layers": 1, "tie_word_embeddings": False, "hidden_act": "silu",
                "attention_bias": False, "mlp_bias": False, "eagle_kind": kind,
                "eagle_target_layers": list(layers), "eagle_target": "../target"})
    return cfg


class EagleHead(nn.Module):
    def __init__(self, cfg, target):
        super().__init__()
        self.config = cfg
        H = cfg["hidden_size"]
        self.kind = cfg["eagle_kind"]
        self.layers_needed = list(cfg["eagle_target_layers"])
        lcfg = M.complete_config(dict(cfg, architectures=["LlamaForCausalLM"], model_type="llama"), "llama")
        self.lcfg = lcfg
        if self.kind == "eagle3":
            self.fuse = nn.Linear(len(self.layers_needed) * H, H, bias=False)
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.layer = M.LlamaDecoderLayer(lcfg, 0)
        self.norm = M.RMSNorm(H, lcfg["rms_norm_eps"])
        hd = lcfg["head_dim"]
        inv = 1.0 / (float(lcfg["rope_theta"]) ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        self.register_buffer("inv_freq", inv, persistent=False)
        # The target's frozen pieces (not parameters of the head, never exported).
        self.embed_w = target.model.embed_tokens.weight.detach()
        self.lm_head_w = target.lm_head.weight.detach()
        self.target_norm = target.model.norm
        std = lcfg["initializer_range"]
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, std)
        with torch.no_grad():
            self.norm.weight.copy_(target.model.norm.weight.detach())
            # fc starts as "take the feature": [I ; small] keeps early training stable.
            self.fc.weight[:, :H] += torch.eye(H)
            if self.kind == "eagle3":
                self.fuse.weight[:, -H:] += torch.eye(H)

    def export_state_dict(self):
        """The head's own weights under the names treespec's loader reads."""
        out = {"fc.weight": self.fc.weight, "model.norm.weight": self.norm.weight}
        if self.kind == "eagle3":
            out["fuse.weight"] = self.fuse.weight
        for k, v in self.layer.state_dict().items():
            out["model.layers.0." + k] = v
        return {k: v.detach().contiguous() for k, v in out.items()}

    def load_export(self, sd):
        with torch.no_grad():
            self.fc.weight.copy_(sd["fc.weight"].float())
            self.norm.weight.copy_(sd["model.norm.weight"].float())
            if self.kind == "eagle3":
                self.fuse.weight.copy_(sd["fuse.weight"].float())
            layer = {k[len("model.layers.0."):]: v.float() for k, v in sd.items() if k.startswith("model.layers.0.")}
            self.layer.load_state_dict(layer)

    def rope(self, pos):
        freqs = pos.float()[:, None] * self.inv_freq.float()[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def real_feature(self, feats):
        """feats: [..., len(layers), H] target features -> g [..., H]."""
        if self.kind == "eagle3":
            return self.fuse(feats.flatten(-2))
        return feats[..., 0, :]

    def logits(self, h):
        return F.linear(self.norm(h), self.lm_head_w)

    def _qkv(self, x, pos):
        a = self.layer.self_attn
        b, L, _ = x.shape
        hx = self.layer.input_layernorm(x)
        q = a.q_proj(hx).view(b, L, a.H, a.hd).transpose(1, 2)
        k = a.k_proj(hx).view(b, L, a.KV, a.hd).transpose(1, 2)
        v = a.v_proj(hx).view(b, L, a.KV, a.hd).transpose(1, 2)
        cos, sin = self.rope(pos)
        q = q * cos + M.rotate_half(q) * sin
        k = k * cos + M.rotate_half(k) * sin
        rep = a.H // a.KV
        return q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)

    def _finish(self, x, o):
        a = self.layer.self_attn
        b, L, _ = x.shape
        x = x + a.o_proj(o.transpose(1, 2).reshape(b, L, a.H * a.hd))
        return x + self.layer.mlp(self.layer.post_attention_layernorm(x))

    def forward_unrolled(self, feats, tokens, steps):
        """feats [b, L, len(layers), H] target features; tokens [b, L] (token t+1 of row t
        at index t+1, i.e. the sequence itself). Returns [h_j for j in range(steps)],
        h_j [b, L, H]: row t of step j predicts the feature at t+j+1 (logits for token t+j+2)."""
        b, L = tokens.shape
        dev = tokens.device
        g = self.real_feature(feats)
        pos = torch.arange(L, device=dev)
        causal = torch.ones(L, L, dtype=torch.bool, device=dev).tril()
        ks, vs, outs = [], [], []
        for j in range(steps):
            tok = F.pad(tokens[:, j + 1:], (0, j + 1))
            x = self.fc(torch.cat([g, F.embedding(tok, self.embed_w)], dim=-1))
            q, k, v = self._qkv(x, pos + j)
            scale = 1.0 / math.sqrt(q.shape[-1])
            if j == 0:
                k0, v0 = k, v
                s0 = torch.matmul(q, k0.transpose(2, 3)) * scale
                s0 = s0.masked_fill(~causal, float("-inf"))
                o = torch.matmul(F.softmax(s0, dim=-1), v0)
            else:
                ks.append(k)
                vs.append(v)
                s0 = (torch.matmul(q, k0.transpose(2, 3)) * scale).masked_fill(~causal, float("-inf"))
                sd = torch.stack([(q * kk).sum(-1) * scale for kk in ks], dim=-1)  # [b, H, L, j]
                p = F.softmax(torch.cat([s0, sd], dim=-1), dim=-1)
                o = torch.matmul(p[..., :L], v0)
                for i, vv in enumerate(vs):
                    o = o + p[..., L + i:L + i + 1] * vv
            h = self._finish(x, o)
            outs.append(h)
            g = h
        return outs


def load_head(path, target):
    from safetensors.torch import load_file
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    head = EagleHead(cfg, target)
    head.load_export(load_file(os.path.join(path, "model.safetensors")))
    return head.eval()


def target_features(target, ids, layers):
    """ids [b, L] -> features [b, L, len(layers), H] (the residual stream after each layer
    of `layers`, before the final norm) and the target's logits [b, L, V]."""
    L = ids.shape[1]
    t = torch.arange(0, L, dtype=torch.float32)
    freqs = t[:, None] * target.inv_freq.float()[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x = target.model.embed_tokens(ids)
    keep = {}
    for i, layer in enumerate(target.model.layers):
        x = layer(x, cos, sin)
        if i in layers:
            keep[i] = x
    return torch.stack([keep[i] for i in layers], dim=2), target.lm_head(target.model.norm(x))
