"""ReDrafter's recurrent draft head (paper 003 Sec. 3.1) in PyTorch.

The head drafts from the target's last hidden state h (the last layer's output
after the target's final norm, as Apple's ml-recurrent-drafter reads it; here
computed as target.model.norm(feature of the last layer)) and the target's own
token embedding e:

  s_1 = e(y_0)                                   y_0: the token the target just produced from h
  s_j = SiLU(U s_{j-1} + W e(y_{j-1}) + b)       j >= 2 (one-layer RNN, f = SiLU)
  x   = [s_j ; h]                                (2H)
  x   = x + SiLU(A_k x + c_k)                    k = 1..num_mlp_layers (MLP with skip connections)
  logits_j = lm_head(P x)                        P: 2H -> H, then the target's LM head

logits_j is the head's distribution of token y_j. `embed`, `lm_head` and the
final norm are the target's, frozen, and never stored with the head: the head's
tensors are rnn_u.weight, rnn_w.weight, rnn_w.bias, mlp.K.weight, mlp.K.bias and
proj.weight (core/model/redrafter_head.h reads the same names).
"""

import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


def head_config(target_cfg, num_mlp_layers, train_length):
    cfg = {"architectures": ["RedrafterHead"], "model_type": "redrafter"}
    cfg.update({k: target_cfg[k] for k in ["vocab_size", "hidden_size", "rms_norm_eps"]})
    cfg.update({"num_mlp_layers": num_mlp_layers, "redrafter_train_length": train_length,
                "redrafter_target_layer": target_cfg["num_hidden_layers"] - 1,
                "redrafter_target": "../target"})
    return cfg


class RedrafterHead(nn.Module):
    def __init__(self, cfg, target):
        super().__init__()
        self.config = cfg
        H = cfg["hidden_size"]
        self.rnn_u = nn.Linear(H, H, bias=False)
        self.rnn_w = nn.Linear(H, H, bias=True)
        self.mlp = nn.ModuleList([nn.Linear(2 * H, 2 * H, bias=True) for _ in range(cfg["num_mlp_layers"])])
        self.proj = nn.Linear(2 * H, H, bias=False)
        self.embed_w = target.model.embed_tokens.weight.detach()
        self.lm_head_w = target.lm_head.weight.detach()
        self.norm_w = target.model.norm.weight.detach()  # a tensor, not a submodule: frozen
        self.norm_eps = target.model.norm.eps
        for p in self.parameters():
            nn.init.normal_(p, 0.0, 0.02) if p.dim() == 2 else nn.init.zeros_(p)
        with torch.no_grad():
            # Start as "the target's own next-token head on h": proj = [small ; I].
            self.proj.weight[:, H:] += torch.eye(H)

    def context(self, feature):
        """The last layer's residual stream -> h (after the target's final norm)."""
        x = feature.float()
        return self.norm_w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.norm_eps))

    def init_state(self, tokens):
        return F.embedding(tokens, self.embed_w)

    def step(self, s, tokens):
        return F.silu(self.rnn_u(s) + self.rnn_w(F.embedding(tokens, self.embed_w)))

    def logits(self, s, h):
        x = torch.cat([s, h], dim=-1)
        for layer in self.mlp:
            x = x + F.silu(layer(x))
        return F.linear(self.proj(x), self.lm_head_w)

    def forward_unrolled(self, h, tokens, steps):
        """h [b, L, H]: context of row t (the target's h at position t); tokens [b, L] the
        sequence. Row t drafts after y_0 = tokens[t+1], teacher-forced along the sequence:
        returns [logits_j for j in 1..steps], logits_j [b, L, V] the distribution of
        tokens[t+1+j]."""
        outs = []
        s = self.init_state(F.pad(tokens[:, 1:], (0, 1)))
        for j in range(1, steps + 1):
            if j > 1:
                s = self.step(s, F.pad(tokens[:, j:], (0, j)))
            outs.append(self.logits(s, h))
        return outs

    def export_state_dict(self):
        out = {"rnn_u.weight": self.rnn_u.weight, "rnn_w.weight": self.rnn_w.weight,
               "rnn_w.bias": self.rnn_w.bias, "proj.weight": self.proj.weight}
        for k, layer in enumerate(self.mlp):
            out["mlp.%d.weight" % k] = layer.weight
            out["mlp.%d.bias" % k] = layer.bias
        return {k: v.detach().contiguous() for k, v in out.items()}

    def load_export(self, sd):
        with torch.no_grad():
            for name, p in self.named_parameters():
                p.copy_(sd[name].float())


def load_head(path, target):
    from safetensors.torch import load_file
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    head = RedrafterHead(cfg, target)
    head.load_export(load_file(os.path.join(path, "model.safetensors")))
    return head.eval()


@torch.no_grad()
def beam_search(head, h, root, width, length):
    """Reference beam search (Sec. 3.2) for one sequence: h [H], root int. Returns
    (tokens [width', length], per-step log-probs [width', length]) best first, width' <= width.
    Candidates are ranked by the sum of per-step log-probs; ties by lower token id."""
    s = head.init_state(torch.tensor([root]))
    hh = h[None]
    beams = [([], [], 0.0, s)]
    for _ in range(length):
        states = torch.cat([b[3] for b in beams])
        lp = F.log_softmax(head.logits(states, hh.expand(len(beams), -1)), -1)
        cand = []
        for i, b in enumerate(beams):
            top = torch.topk(lp[i], width)
            for v, t in zip(top.values.tolist(), top.indices.tolist()):
                cand.append((b[2] + v, i, t, v))
        cand.sort(key=lambda c: (-c[0], c[1], c[2]))
        nxt = []
        for score, i, t, v in cand[:width]:
            b = beams[i]
            nxt.append((b[0] + [t], b[1] + [v], score, b[3], t))
        beams = [(b[0], b[1], b[2], head.step(b[3], torch.tensor([b[4]]))) for b in nxt]
    return [b[0] for b in beams], [b[1] for b in beams]
