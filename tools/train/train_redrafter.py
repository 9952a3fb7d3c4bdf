#!/usr/bin/env python3
"""Trains a ReDrafter recurrent draft head (paper 003 Sec. 3.1, 3.5) for a Llama target.

Data: the target's own continuations, made and cached exactly as train_eagle.py does
(openings sampled from the target at T=1 from BOS, continued half greedily and half
at T=1; cached with the last layer's features in --work/data.npz). The continuations
are the target's own text, so training on them is distillation (Sec. 3.5).

Loss (Sec. 3.5, Eq. 2, with the target's full distributions as soft labels): for every
position t and step j = 1..--train-length, with the head fed the target's h at t, the
token y_0 = x_{t+1} and the sequence's tokens x_{t+2..t+j} (teacher forcing, "the LLM
predicts the next T tokens using the ground truth tokens as context"):
  sum_j CE(p_target(x_{t+1+j} | x_{<=t+j}) || q_head^j(t))   while x_{t+1+j} exists.

At the end: simulated T=0 tau on the held-out prompts (models/demo/heldout_prompts.txt,
greedy target continuations) of a chain of --train-length (beam width 1: depth d accepted
iff every step's argmax up to d equals the target's token), and of beam search width
--eval-width, length --train-length (tools/train/redrafter.beam_search: accepted = the
longest prefix of any candidate matching the target), on a subsample of positions.
These are cross-checks; treespec's acceptance_bench measures tau.

  nice .venv/bin/python tools/train/train_redrafter.py --target models/demo/target \
      --work out/redrafter --out models/demo/redrafter-head --time-budget 600
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
from common import fmt_num, fmt_time, log, write_json  # noqa: E402
import models as M  # noqa: E402
import redrafter as R  # noqa: E402
import train_eagle as TE  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True, help="exported HF dir of the target")
    ap.add_argument("--work", required=True, help="cache dir (data.npz)")
    ap.add_argument("--out", required=True, help="head dir to write")
    ap.add_argument("--num-seqs", type=int, default=1024)
    ap.add_argument("--gen-batch", type=int, default=256)
    ap.add_argument("--max-len", type=int, default=160)
    ap.add_argument("--gen-budget", type=float, default=300, help="seconds of data generation")
    ap.add_argument("--time-budget", type=float, default=600, help="seconds of training")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup-steps", type=int, default=30)
    ap.add_argument("--mlp-layers", type=int, default=2)
    ap.add_argument("--train-length", type=int, default=4, help="T: draft steps trained")
    ap.add_argument("--eval-width", type=int, default=3)
    ap.add_argument("--eval-beam-positions", type=int, default=300)
    ap.add_argument("--eval-prompts", default="models/demo/heldout_prompts.txt")
    ap.add_argument("--eval-len", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    return ap.parse_args()


def losses(head, target, tokens, length, feats, steps):
    """Returns (loss, metrics, [(agree, valid)] per step)."""
    b, L = tokens.shape
    f = feats[:, :L, 0].float()
    with torch.no_grad():
        h = head.context(f)
        t_logits = F.linear(h, head.lm_head_w)  # row t: the target's next-token logits
    outs = head.forward_unrolled(h, tokens, steps)
    pos = torch.arange(L)[None, :]
    total, metrics, agree = 0.0, {}, []
    for j, lg in enumerate(outs, start=1):
        valid = pos + j + 1 < length[:, None]  # x_{t+1+j} exists
        tl = F.pad(t_logits[:, j:], (0, 0, 0, j))  # p_target of x_{t+1+j}: row t+j
        p = F.softmax(tl, -1)
        lq = F.log_softmax(lg, -1)
        ce = -(p * lq).sum(-1)
        ce = (ce * valid).sum() / valid.sum().clamp(min=1)
        metrics["ce%d" % j] = float(ce)
        total = total + ce
        agree.append(((lq.argmax(-1) == tl.argmax(-1)) & valid, valid))
    return total, metrics, agree


@torch.no_grad()
def simulated_tau(head, tokens, length, feats, plens, steps):
    b, L = tokens.shape
    h = head.context(feats[:, :L, 0].float())
    outs = head.forward_unrolled(h, tokens, steps)
    pos = torch.arange(L)[None, :]
    ok = torch.ones(b, L, dtype=torch.bool)
    acc = torch.zeros(b, L)
    for j, lg in enumerate(outs, start=1):
        nxt = F.pad(tokens[:, j + 1:], (0, j + 1))
        ok = ok & (lg.argmax(-1) == nxt) & (pos + j + 1 < length[:, None])
        acc += ok.float()
    rows = (pos >= (torch.tensor(plens)[:, None] - 1)) & (pos + 2 < length[:, None])
    return float(1 + (acc * rows).sum() / rows.sum())


@torch.no_grad()
def simulated_beam_tau(head, tokens, length, feats, plens, width, steps, positions, seed):
    rng = np.random.default_rng(seed)
    cands = [(i, t) for i in range(len(tokens)) for t in range(plens[i] - 1, int(length[i]) - 2)]
    pick = rng.choice(len(cands), size=min(positions, len(cands)), replace=False)
    total = 0
    for k in pick:
        i, t = cands[k]
        h = head.context(feats[i, t, 0].float())
        beams, _ = R.beam_search(head, h, int(tokens[i, t + 1]), width, steps)
        truth = tokens[i, t + 2:t + 2 + steps].tolist()
        limit = int(length[i]) - (t + 2)
        best = 0
        for bm in beams:
            n = 0
            while n < min(steps, limit) and bm[n] == truth[n]:
                n += 1
            best = max(best, n)
        total += 1 + best
    return total / len(pick)


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
    tokens, length, feats, layers_stored = TE.load_or_make(target, args, eos, [nl - 1])
    assert layers_stored == [nl - 1], layers_stored
    cfg = R.head_config(tcfg, args.mlp_layers, args.train_length)
    head = R.RedrafterHead(cfg, target)
    n_params = sum(p.numel() for p in head.parameters())
    n_tok = int(length.sum())
    log("redrafter head: %s params (target %s); %d sequences, %s tokens" %
        (fmt_num(n_params), fmt_num(M.count_params(target)), len(tokens), fmt_num(n_tok)))
    ev_tok, ev_len, ev_plen = TE.eval_set(target, args, eos)
    ev_feat = TE.features_of(target, ev_tok, [nl - 1])

    decay = [p for p in head.parameters() if p.dim() == 2]
    nodecay = [p for p in head.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    rng = np.random.default_rng(args.seed)
    step, seen, t0, last_m = 0, 0, time.time(), {}
    while time.time() - t0 < args.time_budget:
        progress = (time.time() - t0) / args.time_budget
        lr = args.lr * min(1.0, (step + 1) / args.warmup_steps) * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.from_numpy(rng.integers(0, len(tokens), size=args.batch_size))
        Lb = int(length[idx].max())
        loss, m, _ = losses(head, target, tokens[idx, :Lb], length[idx], feats[idx], args.train_length)
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
        _, ev_m, agree = losses(head, target, ev_tok, ev_len, ev_feat, args.train_length)
        top1 = [float(a.sum() / v.sum()) for a, v in agree]
        tau = simulated_tau(head, ev_tok, ev_len, ev_feat, ev_plen, args.train_length)
        beam_tau = simulated_beam_tau(head, ev_tok, ev_len, ev_feat, ev_plen, args.eval_width, args.train_length,
                                      args.eval_beam_positions, args.seed)
    log("eval: %s | top-1 per step %s | simulated chain-%d tau %.3f | beam %dx%d tau %.3f" %
        (" ".join("%s %.4f" % kv for kv in ev_m.items()), ["%.3f" % x for x in top1], args.train_length, tau,
         args.eval_width, args.train_length, beam_tau))

    os.makedirs(args.out, exist_ok=True)
    from safetensors.torch import save_file
    save_file(head.export_state_dict(), os.path.join(args.out, "model.safetensors"))
    write_json(os.path.join(args.out, "config.json"), cfg)
    result = {"kind": "redrafter", "params": n_params, "train_sequences": len(tokens), "train_tokens_in_data": n_tok,
              "tokens_seen": seen, "steps": step, "train_seconds": round(train_s, 1), "final_train": last_m,
              "eval": ev_m, "eval_top1_per_step": top1, "simulated_tau_chain": tau,
              "simulated_tau_beam": beam_tau, "beam": [args.eval_width, args.train_length],
              "total_seconds": round(time.time() - t_start, 1),
              "command": "python " + " ".join(shlex.quote(a) for a in sys.argv)}
    write_json(os.path.join(args.work, "result_redrafter.json"), result)
    log("wrote %s (%s)" % (args.out, fmt_time(time.time() - t_start)))


if __name__ == "__main__":
    main()
