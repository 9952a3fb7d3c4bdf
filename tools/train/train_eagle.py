#!/usr/bin/env python3
"""Trains an EAGLE (paper 002 Sec. 3) or EAGLE-3 (arXiv 2503.01840) drafter head for a Llama target.

Data: the target's own continuations (as distill_data.py, whose batched KV-cache
generator this reuses). With no corpus at hand, each sequence's opening is
itself sampled from the target at T=1 from BOS (8-32 tokens, one length per
batch), then continued to --max-len tokens, half the rows greedily, half
sampled at T=1. The data and the target's features on it are cached in
--work (data.npz), so the second head reuses them.

Features: the target's residual stream after the layers the head needs
(eagle: the last; eagle3: a low, a middle and a high one, rule (2, L//2, L-3)),
before the final norm, in float32 (eagle.target_features). check_engine_features.py
compares them with treespec's engine (treespec-logits --hidden-layers).

Loss (per row t, valid while token t+j+2 exists):
  eagle:  smooth-L1(h_t, f_{t+1}) + 0.1 * CE(p_target(t+1) || q_head(t))   (paper 002 Sec. 3.2,
          with uniform noise on the input features, Sec. 3.2 / App. B)
  eagle3: sum over --ttt-steps unrolled steps j of CE(p_target(t+j+1) || q_head^j(t)), each
          step fed the previous step's outputs (training-time test), no feature loss.
p_target is the target's full next-token distribution (soft labels).

At the end: a simulated T=0 chain-4 tau on held-out prompts (models/demo/heldout_prompts.txt,
greedy target continuations): teacher-forced unrolled steps, depth d accepted iff every
step's argmax up to d equals the target's token (along the accepted path the head sees
exactly those tokens). It is a cross-check; treespec's acceptance_bench measures tau.

  python tools/train/train_eagle.py --kind eagle --target models/demo/target \
      --work out/eagle --out models/demo/eagle-head --time-budget 900
"""

import argparse
import os
import shlex
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import die, fmt_num, fmt_time, log, write_json  # noqa: E402
import eagle as E  # noqa: E402
import models as M  # noqa: E402
from distill_data import generate_batch  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=["eagle", "eagle3"], required=True)
    ap.add_argument("--target", required=True, help="exported HF dir of the target")
    ap.add_argument("--work", required=True, help="cache dir (data.npz)")
    ap.add_argument("--out", required=True, help="head dir to write")
    ap.add_argument("--num-seqs", type=int, default=2048)
    ap.add_argument("--gen-batch", type=int, default=128)
    ap.add_argument("--max-len", type=int, default=160)
    ap.add_argument("--gen-budget", type=float, default=420, help="seconds of data generation")
    ap.add_argument("--time-budget", type=float, default=900, help="seconds of training")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup-steps", type=int, default=30)
    ap.add_argument("--ttt-steps", type=int, default=3, help="eagle3: unrolled steps")
    ap.add_argument("--noise", type=float, default=0.1, help="eagle: feature noise, x feature RMS")
    ap.add_argument("--cls-weight", type=float, default=0.1, help="eagle: CE weight")
    ap.add_argument("--eval-prompts", default="models/demo/heldout_prompts.txt")
    ap.add_argument("--eval-len", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    return ap.parse_args()


@torch.no_grad()
def make_data(target, args, eos):
    """Sequences [S, max_len] int64 and lengths: target-sampled openings, continued
    greedily (first half of each batch) or sampled at T=1."""
    rows, lens, t0 = [], [], time.time()
    for bi in range((args.num_seqs + args.gen_batch - 1) // args.gen_batch):
        if time.time() - t0 > args.gen_budget and rows:
            log("data: generation budget reached after %d batches" % bi)
            break
        rng = np.random.default_rng([args.seed, bi])
        P = int(rng.integers(8, 33))
        B = args.gen_batch
        gen = torch.Generator()
        gen.manual_seed(int(rng.integers(0, 2 ** 62)))
        bos = torch.full((B, 1), 1, dtype=torch.long)
        opening, _ = generate_batch(target, bos, P, False, 1.0, eos, gen, _null)
        greedy = torch.arange(B) < B // 2
        toks, length = generate_batch(target, opening, args.max_len, greedy, 1.0, eos, gen, _null)
        # An EOS inside the sampled opening ends the row there.
        first_eos = [(r == eos).nonzero() for r in opening[:, 1:]]
        for i, fe in enumerate(first_eos):
            if len(fe):
                length[i] = min(int(length[i]), int(fe[0]) + 2)
        rows.append(toks)
        lens.append(length)
        log("data batch %d | opening %d | mean len %.1f | %s" %
            (bi + 1, P, float(length.float().mean()), fmt_time(time.time() - t0)))
    return torch.cat(rows), torch.cat(lens)


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


@torch.no_grad()
def features_of(target, tokens, layers, bs=32):
    feats = []
    for i in range(0, len(tokens), bs):
        f, _ = E.target_features(target, tokens[i:i + bs], layers)
        feats.append(f.half())
    return torch.cat(feats)


def load_or_make(target, args, eos, all_layers):
    path = os.path.join(args.work, "data.npz")
    if os.path.exists(path):
        z = np.load(path)
        log("data: %s (%d sequences)" % (path, len(z["length"])))
        return (torch.from_numpy(z["tokens"].astype(np.int64)), torch.from_numpy(z["length"].astype(np.int64)),
                torch.from_numpy(z["features"]).view(torch.float16), [int(x) for x in z["layers"]])
    tokens, length = make_data(target, args, eos)
    t0 = time.time()
    feats = features_of(target, tokens, all_layers)
    log("data: features of %d sequences (layers %s) in %s" % (len(tokens), all_layers, fmt_time(time.time() - t0)))
    os.makedirs(args.work, exist_ok=True)
    np.savez(path + ".tmp.npz", tokens=tokens.numpy().astype(np.uint16), length=length.numpy().astype(np.int32),
             features=feats.view(torch.int16).numpy(), layers=np.array(all_layers))
    os.replace(path + ".tmp.npz", path)
    return tokens, length, feats, all_layers


def eval_set(target, args, eos):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.target, "tokenizer.model"))
    with open(args.eval_prompts) as f:
        prompts = [[1] + sp.encode(line.strip()) for line in f if line.strip()]
    toks, lens = [], []
    for P in sorted(set(len(p) for p in prompts)):
        group = torch.tensor([p for p in prompts if len(p) == P])
        t, n = generate_batch(target, group, min(P + args.eval_len, args.max_len), True, 1.0, eos, None, _null)
        t = F.pad(t, (0, args.max_len - t.shape[1]))
        toks.append(t)
        lens.append(n)
    return torch.cat(toks), torch.cat(lens), [len(p) for p in prompts]


def losses(head, target, tokens, length, feats, layer_idx, args, train):
    """Returns (loss, dict of metrics, per-step argmax agreement tensors)."""
    b, L = tokens.shape
    f = feats[:, :L].float()
    last = f[:, :, layer_idx[-1]]  # the last layer (for soft labels and eagle's regression)
    inp = f[:, :, layer_idx[:-1]] if head.kind == "eagle3" else f[:, :, [layer_idx[-1]]]
    if train and head.kind == "eagle" and args.noise > 0:
        rms = inp.pow(2).mean().sqrt()
        inp = inp + (torch.rand_like(inp) * 2 - 1) * args.noise * rms
    steps = args.ttt_steps if head.kind == "eagle3" else 1
    hs = head.forward_unrolled(inp, tokens, steps)
    pos = torch.arange(L)[None, :]
    total, metrics, agree = 0.0, {}, []
    with torch.no_grad():
        t_logits = F.linear(target.model.norm(last), head.lm_head_w)
    for j, h in enumerate(hs):
        valid = (pos + j + 2 < length[:, None])  # token t+j+2 exists
        tl = F.pad(t_logits[:, j + 1:], (0, 0, 0, j + 1))  # p_target at row t+j+1
        p = F.softmax(tl, -1)
        lq = F.log_softmax(head.logits(h), -1)
        ce = -(p * lq).sum(-1)
        ce = (ce * valid).sum() / valid.sum().clamp(min=1)
        step_loss = ce
        if head.kind == "eagle":
            tgt = F.pad(last[:, j + 1:], (0, 0, 0, j + 1))
            reg = F.smooth_l1_loss(h, tgt, reduction="none").mean(-1)
            reg = (reg * valid).sum() / valid.sum().clamp(min=1)
            metrics["reg%d" % j] = float(reg)
            step_loss = reg + args.cls_weight * ce
        metrics["ce%d" % j] = float(ce)
        total = total + step_loss
        agree.append(((lq.argmax(-1) == tl.argmax(-1)) & valid, valid))
    return total, metrics, agree


@torch.no_grad()
def simulated_tau(head, target, tokens, length, feats, layer_idx, plens, args, depth=4):
    """Chain-`depth` tau at T=0 over every position after the prompt (greedy rows)."""
    b, L = tokens.shape
    f = feats[:, :L].float()
    inp = f[:, :, layer_idx[:-1]] if head.kind == "eagle3" else f[:, :, [layer_idx[-1]]]
    hs = head.forward_unrolled(inp, tokens, depth)  # eagle too drafts from its own outputs
    pos = torch.arange(L)[None, :]
    ok = torch.ones(b, L, dtype=torch.bool)
    acc = torch.zeros(b, L)
    for j, h in enumerate(hs):
        nxt = F.pad(tokens[:, j + 2:], (0, j + 2))
        ok = ok & (head.logits(h).argmax(-1) == nxt) & (pos + j + 2 < length[:, None])
        acc += ok.float()
    rows = (pos >= (torch.tensor(plens)[:, None] - 1)) & (pos + 2 < length[:, None])
    return float(1 + (acc * rows).sum() / rows.sum())


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t_start = time.time()
    target, tcfg = M.load_model(args.target)
    for p in target.parameters():
        p.requires_grad_(False)
    eos = tcfg["eos_token_id"]
    nl = tcfg["num_hidden_layers"]
    all_layers = sorted(set(E.eagle3_layers(nl) + [nl - 1]))
    tokens, length, feats, layers_stored = load_or_make(target, args, eos, all_layers)
    need = E.eagle3_layers(nl) if args.kind == "eagle3" else [nl - 1]
    layer_idx = [layers_stored.index(x) for x in need + ([nl - 1] if args.kind == "eagle3" else [])]
    if args.kind == "eagle":
        layer_idx = [layers_stored.index(nl - 1)]
    cfg = E.head_config(tcfg, args.kind, need)
    head = E.EagleHead(cfg, target)
    n_params = sum(p.numel() for p in head.parameters())
    n_tok = int(length.sum())
    log("%s head: %s params (target %s); %d sequences, %s tokens" %
        (args.kind, fmt_num(n_params), fmt_num(M.count_params(target)), len(tokens), fmt_num(n_tok)))

    ev_tok, ev_len, ev_plen = eval_set(target, args, eos)
    ev_feat = features_of(target, ev_tok, layers_stored)

    decay = [p for n, p in head.named_parameters() if p.dim() == 2]
    nodecay = [p for n, p in head.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    rng = np.random.default_rng(args.seed)
    step, seen, t0 = 0, 0, time.time()
    last_m = {}
    while True:
        el = time.time() - t0
        if el > args.time_budget:
            break
        progress = el / args.time_budget
        lr = args.lr * min(1.0, (step + 1) / args.warmup_steps) * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.from_numpy(rng.integers(0, len(tokens), size=args.batch_size))
        Lb = int(length[idx].max())
        loss, m, _ = losses(head, target, tokens[idx, :Lb], length[idx], feats[idx], layer_idx, args, True)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        step += 1
        seen += int(length[idx].sum())
        last_m = m
        if step % 20 == 0:
            log("step %d | loss %.4f | %s | lr %.2e | %s tok | %s" %
                (step, float(loss), " ".join("%s %.4f" % kv for kv in m.items()), lr, fmt_num(seen),
                 fmt_time(time.time() - t0)))
    train_s = time.time() - t0
    head.eval()
    with torch.no_grad():
        _, ev_m, agree = losses(head, target, ev_tok, ev_len, ev_feat, layer_idx, args, False)
        top1 = [float(a.sum() / v.sum()) for a, v in agree]
        tau = simulated_tau(head, target, ev_tok, ev_len, ev_feat, layer_idx, ev_plen, args)
    log("eval: %s | top-1 agreement per step %s | simulated chain-4 tau %.3f" %
        (" ".join("%s %.4f" % kv for kv in ev_m.items()), ["%.3f" % x for x in top1], tau))

    os.makedirs(args.out, exist_ok=True)
    from safetensors.torch import save_file
    save_file(head.export_state_dict(), os.path.join(args.out, "model.safetensors"))
    write_json(os.path.join(args.out, "config.json"), cfg)
    result = {"kind": args.kind, "params": n_params, "train_sequences": len(tokens), "train_tokens_in_data": n_tok,
              "tokens_seen": seen, "steps": step, "train_seconds": round(train_s, 1),
              "final_train": last_m, "eval": ev_m, "eval_top1_per_step": top1, "simulated_tau_chain4": tau,
              "total_seconds": round(time.time() - t_start, 1),
              "command": "python " + " ".join(shlex.quote(a) for a in sys.argv)}
    write_json(os.path.join(args.work, "result_%s.json" % args.kind), result)
    log("wrote %s (%s)" % (args.out, fmt_time(time.time() - t_start)))


if __name__ == "__main__":
    main()
