#!/usr/bin/env python3
"""Starts a Bamba (Mamba-2 + attention) hybrid from a trained Llama of the same width.

Both stack pre-norm decoder layers (norm -> token mixer -> residual -> norm -> SwiGLU
MLP -> residual) and share the embedding / LM head layout, so a hybrid of the Llama's
hidden size, MLP size and vocabulary can take everything from it except the token
mixers of its Mamba-2 layers:

  warm start   embed_tokens, lm_head, the final norm, every layer's input norm,
               post-attention norm (-> pre_ff_layernorm) and MLP (-> feed_forward),
               and the attention of the layers in attn_layer_indices. Bamba's
               attention rotates only the first half of each head (partial_rotary_factor
               0.5), Llama's all of it: RoPE pair j of a 32-channel Llama head turns at
               theta^(-2j/32); Bamba's pair i at theta^(-2i/16) = Llama's pair 2i. The q/k
               channels of the even Llama pairs go to Bamba's rotated half, those of the
               odd pairs to its unrotated half (their position information is lost; the
               layer-wise stage below re-fits them).
  layer-wise   (--time-budget / --max-steps > 0) every token mixer of the hybrid
               (Mamba-2 mixers and the re-roped attention) learns to reproduce the
               teacher's attention output of its layer from the teacher's own normalised
               input: loss = sum over layers of mean((out - teacher_out)^2) /
               mean(teacher_out^2). Everything else stays frozen and is not even run,
               so a step costs one teacher forward plus the mixers (about half of an
               end-to-end distillation step). The mixers then start the end-to-end stage
               (train_lm.py --init OUT/final.pt --teacher ...) close to the teacher.

--ablate prints, instead, the teacher's corpus validation loss with attention kept in
only k layers (every k-subset), MLPs intact: how much each layer's attention matters,
one input to the choice of attn_layer_indices.

Writes OUT/final.pt (train_lm.py's checkpoint format: model, config, arch) and
OUT/result.json (layer-wise losses, corpus val loss and top-1 agreement with the teacher
before and after the stage).

  python hybrid_init.py --teacher models/demo/target --config configs/hybrid_target.json \\
      --data WORK/data --out-dir WORK/run/hybrid-init --time-budget 1200
"""

import argparse
import itertools
import json
import math
import os
import shlex
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import die, fmt_num, fmt_time, log, read_json, write_json  # noqa: E402
import models as M  # noqa: E402
from train_lm import CorpusBatches, load_tokens, lr_at  # noqa: E402


def rope_permutation(head_dim):
    """Channel order for a Bamba head taken from a Llama head (see the module doc)."""
    half = head_dim // 2
    quarter = head_dim // 4
    even = list(range(0, half, 2))  # Llama pairs 0, 2, 4, ... (first halves)
    odd = list(range(1, half, 2))
    perm = even + [half + j for j in even] + odd + [half + j for j in odd]
    assert len(perm) == head_dim and len(even) == quarter
    return torch.tensor(perm)


@torch.no_grad()
def warm_start(hybrid, llama):
    """Copies the Llama's tensors into the hybrid; returns the names copied."""
    hc, lc = hybrid.config, llama.config
    for k in ("hidden_size", "intermediate_size", "vocab_size", "num_hidden_layers"):
        if hc[k] != lc[k]:
            die("warm start: %s differs (hybrid %s, llama %s)" % (k, hc[k], lc[k]))
    copied = []

    def cp(dst, src, name, rows=None):
        w = src.detach().float()
        if rows is not None:
            w = w[rows]
        if dst.shape != w.shape:
            die("warm start: %s shape %s vs %s" % (name, tuple(dst.shape), tuple(w.shape)))
        dst.copy_(w)
        copied.append(name)

    cp(hybrid.model.embed_tokens.weight, llama.model.embed_tokens.weight, "model.embed_tokens.weight")
    if not hc["tie_word_embeddings"]:
        cp(hybrid.lm_head.weight, llama.lm_head.weight, "lm_head.weight")
    cp(hybrid.model.final_layernorm.weight, llama.model.norm.weight, "model.final_layernorm.weight")
    for i, (hl, ll) in enumerate(zip(hybrid.model.layers, llama.model.layers)):
        p = "model.layers.%d." % i
        cp(hl.input_layernorm.weight, ll.input_layernorm.weight, p + "input_layernorm.weight")
        cp(hl.pre_ff_layernorm.weight, ll.post_attention_layernorm.weight, p + "pre_ff_layernorm.weight")
        for n in ("gate_proj", "up_proj", "down_proj"):
            cp(getattr(hl.feed_forward, n).weight, getattr(ll.mlp, n).weight, p + "feed_forward.%s.weight" % n)
        if hl.is_attn:
            a, la = hl.self_attn, ll.self_attn
            if (a.H, a.KV, a.hd) != (la.H, la.KV, la.hd):
                die("warm start: attention shapes differ in layer %d" % i)
            perm = rope_permutation(a.hd) if a.rot < a.hd else torch.arange(a.hd)
            q_rows = (torch.arange(a.H)[:, None] * a.hd + perm[None, :]).reshape(-1)
            k_rows = (torch.arange(a.KV)[:, None] * a.hd + perm[None, :]).reshape(-1)
            cp(a.q_proj.weight, la.q_proj.weight, p + "self_attn.q_proj.weight", q_rows)
            cp(a.k_proj.weight, la.k_proj.weight, p + "self_attn.k_proj.weight", k_rows)
            cp(a.v_proj.weight, la.v_proj.weight, p + "self_attn.v_proj.weight")
            cp(a.o_proj.weight, la.o_proj.weight, p + "self_attn.o_proj.weight")
    return copied


def llama_rope(llama, L, device):
    t = torch.arange(L, device=device, dtype=torch.float32)
    freqs = t[:, None] * llama.inv_freq.float()[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


@torch.no_grad()
def teacher_trace(llama, ids):
    """Per layer: (normalised input, attention output) of the teacher; and its logits."""
    cos, sin = llama_rope(llama, ids.shape[1], ids.device)
    x = llama.model.embed_tokens(ids)
    trace = []
    for layer in llama.model.layers:
        h = layer.input_layernorm(x)
        a = layer.self_attn(h, cos, sin)
        trace.append((h, a))
        x = x + a
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return trace, llama.lm_head(llama.model.norm(x))


@torch.no_grad()
def llama_logits_keep_attn(llama, ids, keep):
    """The teacher with the attention of layers not in `keep` removed (MLPs intact)."""
    cos, sin = llama_rope(llama, ids.shape[1], ids.device)
    x = llama.model.embed_tokens(ids)
    for i, layer in enumerate(llama.model.layers):
        if i in keep:
            x = x + layer.self_attn(layer.input_layernorm(x), cos, sin)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return llama.lm_head(llama.model.norm(x))


@torch.no_grad()
def eval_vs_teacher(model, teacher, batches, n_batches, batch_size, seed):
    """Corpus val: the model's loss, top-1, and top-1 agreement / KL with the teacher."""
    model.eval()
    rng = np.random.default_rng([seed, 7])
    tot = cnt = hit = agree = kl = 0.0
    for _ in range(n_batches):
        x, y, _ = batches.get(rng, batch_size)
        lg = model(x).float()
        tl = teacher(x).float()
        tot += F.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1), reduction="sum").item()
        cnt += y.numel()
        hit += (lg.argmax(-1) == y).sum().item()
        agree += (lg.argmax(-1) == tl.argmax(-1)).sum().item()
        lt = F.log_softmax(tl, -1)
        kl += (lt.exp() * (lt - F.log_softmax(lg, -1))).sum().item()
    model.train()
    return {"loss": tot / cnt, "top1": hit / cnt, "teacher_top1_agree": agree / cnt, "teacher_kl": kl / cnt,
            "tokens": int(cnt)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", required=True, help="the Llama (HF dir or .pt)")
    ap.add_argument("--config", help="hybrid config JSON (HF Bamba fields)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--data", required=True, help="tokenize_corpus.py output dir")
    ap.add_argument("--out-dir", help="required unless --ablate")
    ap.add_argument("--ablate", type=int, default=0, metavar="K",
                    help="only print the teacher's val loss with attention in K layers (every K-subset)")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--time-budget", type=float, default=0, help="seconds of layer-wise training (0: none)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=20)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--scan-chunk", type=int, default=64)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    t_start = time.time()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    teacher, _ = M.load_model(args.teacher, device)
    if teacher.arch != "llama":
        die("the teacher must be a Llama")
    for p in teacher.parameters():
        p.requires_grad_(False)
    va_arr, va_st = load_tokens(args.data, "val")
    val_b = CorpusBatches(va_arr, va_st, min(args.seq_len, len(va_arr) - 2), 0.5)

    if args.ablate:
        L = teacher.config["num_hidden_layers"]
        rows = []
        for keep in [tuple(range(L))] + list(itertools.combinations(range(L), args.ablate)):
            rng = np.random.default_rng([args.seed, 7])
            tot = cnt = 0.0
            for _ in range(args.eval_batches):
                x, y, _ = val_b.get(rng, args.batch_size)
                lg = llama_logits_keep_attn(teacher, x.to(device), set(keep)).float()
                tot += F.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.to(device).reshape(-1), reduction="sum").item()
                cnt += y.numel()
            rows.append((tot / cnt, keep))
            log("attention kept in layers %s: val loss %.4f" % (list(keep), tot / cnt))
        print("\nbest %d-subsets (val loss, layers):" % args.ablate)
        for loss, keep in sorted(rows)[:10]:
            print("  %.4f  %s" % (loss, list(keep)))
        return

    if not args.out_dir or not args.config:
        die("give --out-dir and --config")
    os.makedirs(args.out_dir, exist_ok=True)
    cfg = read_json(args.config)
    for kv in args.set:
        k, _, v = kv.partition("=")
        try:
            cfg[k] = json.loads(v)
        except ValueError:
            cfg[k] = v
    torch.manual_seed(args.seed)
    model = M.BambaForCausalLM(cfg)
    model.set_scan("chunked", args.scan_chunk)
    copied = warm_start(model, teacher)
    n = M.count_params(model)
    n_copied = sum(dict(model.named_parameters())[k].numel() for k in copied if k in dict(model.named_parameters()))
    log("hybrid %s parameters; %s (%d tensors) warm-started from %s; attention layers %s" %
        (fmt_num(n), fmt_num(n_copied), len(copied), args.teacher, model.config["attn_layer_indices"]))
    model.to(device)
    ev0 = eval_vs_teacher(model, teacher, val_b, args.eval_batches, args.batch_size, args.seed)
    log("after the warm start: val loss %.4f | agreement with the teacher %.3f | KL %.4f" %
        (ev0["loss"], ev0["teacher_top1_agree"], ev0["teacher_kl"]))

    result = {"params": n, "warm_started_params": n_copied, "warm_started_tensors": len(copied),
              "val_after_warm_start": ev0, "config": model.config,
              "command": " ".join(["python", "tools/train/hybrid_init.py"] + [shlex.quote(a) for a in sys.argv[1:]])}
    mixers = [layer.self_attn if layer.is_attn else layer.mamba for layer in model.model.layers]
    params = [p for m in mixers for p in m.parameters()]
    steps_max = args.max_steps if args.max_steps > 0 else (10 ** 9 if args.time_budget > 0 else 0)
    if steps_max:
        tr_arr, tr_st = load_tokens(args.data, "train")
        train_b = CorpusBatches(tr_arr, tr_st, args.seq_len, 0.5)
        for p in model.parameters():
            p.requires_grad_(False)
        for p in params:
            p.requires_grad_(True)
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
        sched = argparse.Namespace(lr=args.lr, min_lr_ratio=args.min_lr_ratio, warmup_steps=args.warmup_steps)
        log("layer-wise stage: %s trainable parameters (the %d token mixers), batch %d x %d, lr %g, %s" %
            (fmt_num(sum(p.numel() for p in params)), len(mixers), args.batch_size, args.seq_len, args.lr,
             ("time budget " + fmt_time(args.time_budget)) if args.time_budget else "%d steps" % steps_max))
        cos, sin = model.rope(0, args.seq_len, device)
        t0 = time.time()
        step, acc, acc_layers, hist = 0, 0.0, np.zeros(len(mixers)), []
        while True:
            prog = step / steps_max
            if args.time_budget > 0:
                prog = max(prog, (time.time() - t0) / args.time_budget)
            if step >= steps_max or prog >= 1.0:
                break
            lr = lr_at(step, prog, sched)
            for g in opt.param_groups:
                g["lr"] = lr
            x, _, _ = train_b.get(np.random.default_rng([args.seed, step]), args.batch_size)
            trace, _ = teacher_trace(teacher, x.to(device))
            loss = 0.0
            for i, (layer, (h, a)) in enumerate(zip(model.model.layers, trace)):
                out = layer.mix(h, cos, sin)
                li = (out - a).pow(2).mean() / a.pow(2).mean().clamp(min=1e-12)
                acc_layers[i] += li.item()
                loss = loss + li
            loss.backward()
            if args.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(params, args.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            acc += loss.item()
            if step % args.log_every == 0 or step == 1:
                k = 1 if step == 1 else args.log_every
                hist.append([step, round(acc / k, 4)])
                log("layer-wise step %d | loss %.4f (per layer %s) | lr %.2e | %s" %
                    (step, acc / k, " ".join("%.3f" % v for v in acc_layers / k), lr, fmt_time(time.time() - t0)))
                acc, acc_layers = 0.0, np.zeros(len(mixers))
        for p in model.parameters():
            p.requires_grad_(True)
        result.update({"layerwise_steps": step, "layerwise_tokens": step * args.batch_size * args.seq_len,
                       "layerwise_time_s": round(time.time() - t0, 1), "layerwise_history": hist})
        ev1 = eval_vs_teacher(model, teacher, val_b, args.eval_batches, args.batch_size, args.seed)
        result["val_after_layerwise"] = ev1
        log("after the layer-wise stage (%d steps, %s): val loss %.4f | agreement with the teacher %.3f | KL %.4f" %
            (step, fmt_time(time.time() - t0), ev1["loss"], ev1["teacher_top1_agree"], ev1["teacher_kl"]))
    sd = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    torch.save({"model": sd, "config": model.config, "arch": "bamba", "result": result},
               os.path.join(args.out_dir, "final.pt"))
    write_json(os.path.join(args.out_dir, "result.json"), result)
    log("wrote %s/final.pt and result.json (%s)" % (args.out_dir, fmt_time(time.time() - t_start)))


if __name__ == "__main__":
    main()
