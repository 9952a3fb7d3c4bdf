#!/usr/bin/env python3
"""Simulated temperature-0 acceptance of drafters against targets (a trainer-side cross-check,
not treespec's measurement).

For every target: greedy continuations of held-out story openings (the val split of --data,
8-32 tokens, one length per batch) generated with the target's cache; then, for every drafter,
one teacher-forced pass over those sequences. Along the accepted path a drafter sees exactly
the target's tokens, so depth d of a tree with widths (w1, w2, ...) is accepted iff the
target's token is among the drafter's top-w_d (train_lm.simulate_acceptance). Reports τ for
chain 4 and trees (3,2,2,1,1), (3,3,2,1), and the drafter's top-1 agreement on the generated
tokens.

  python sim_acceptance.py --targets models/demo/hybrid-target models/demo/mamba2-target \\
      --drafters models/demo/hybrid-mamba-drafter models/demo/hybrid-transformer-drafter \\
      --data WORK/data --json out.json
"""

import argparse
import contextlib
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import fmt_time, log, write_json  # noqa: E402
import models as M  # noqa: E402
from distill_data import generate_batch  # noqa: E402
from train_lm import load_tokens, simulate_acceptance  # noqa: E402


def prompts_from_val(data, n, batch, seed, min_p=8, max_p=32):
    arr, starts = load_tokens(data, "val")
    ends = np.append(starts[1:], len(arr))
    lens = ends - starts
    out = []
    for bi in range((n + batch - 1) // batch):
        rng = np.random.default_rng([seed, bi])
        P = int(rng.integers(min_p, max_p + 1))
        ok = np.nonzero(lens > P + 1)[0]
        nb = min(batch, n - bi * batch)
        pick = starts[ok[rng.integers(0, len(ok), size=nb)]]
        out.append(torch.from_numpy(np.asarray(arr[pick[:, None] + np.arange(P)[None, :]], dtype=np.int64)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", nargs="+", required=True)
    ap.add_argument("--drafters", nargs="+", required=True)
    ap.add_argument("--data", required=True, help="tokenize_corpus.py dir (val split: the prompts)")
    ap.add_argument("--num-prompts", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=160, help="prompt + continuation tokens")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--seed", type=int, default=99)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    if device.type == "cuda":  # float32 without TF32: greedy labels as a float32 engine computes them
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    t0 = time.time()
    drafters = []
    for d in args.drafters:
        m, _ = M.load_model(d, device)
        drafters.append((os.path.basename(os.path.normpath(d)), m))
    batches = prompts_from_val(args.data, args.num_prompts, args.batch_size, args.seed)
    results = {}
    for tdir in args.targets:
        tname = os.path.basename(os.path.normpath(tdir))
        target, cfg = M.load_model(tdir, device)
        eos = cfg["eos_token_id"]
        eos = eos[0] if isinstance(eos, list) else eos
        seqs = []
        for p in batches:
            toks, length = generate_batch(target, p.to(device), args.max_len, True, 1.0, eos, None,
                                          contextlib.nullcontext)
            seqs.append((toks, length.cpu(), p.shape[1]))
        n_gen = sum(int((ln - P).sum()) for _, ln, P in seqs)
        log("%s: %d greedy continuations, %d generated tokens (%s)" %
            (tname, sum(len(ln) for _, ln, _ in seqs), n_gen, fmt_time(time.time() - t0)))
        results[tname] = {}
        for dname, dm in drafters:
            acc = {}
            hit = cnt = 0
            for toks, length, P in seqs:
                x, y = toks[:, :-1], toks[:, 1:].clone()
                pos = torch.arange(1, toks.shape[1], device=toks.device)[None, :]
                y[(pos >= length.to(toks.device)[:, None]) | (pos < P)] = -100
                with torch.no_grad():
                    lg = dm(x).float()
                m = y != -100
                hit += ((lg.argmax(-1) == y) & m).sum().item()
                cnt += m.sum().item()
                s = simulate_acceptance(lg, y, np.ones(len(toks), bool), np.full(len(toks), P),
                                        length.numpy())
                for k, v in s.items():
                    acc.setdefault(k, []).append((v, len(toks)))
            row = {k: sum(v * n for v, n in vals) / sum(n for _, n in vals) for k, vals in acc.items()}
            row["top1_agree"] = hit / max(1, cnt)
            row["tokens"] = int(cnt)
            results[tname][dname] = row
            log("  drafter %-28s top-1 %.3f | τ chain4 %.2f | tree32211 %.2f | tree3321 %.2f" %
                (dname, row["top1_agree"], row["tau_chain4"], row["tau_tree32211"], row["tau_tree3321"]))
    print()
    print("| target | drafter | top-1 agreement | T=0 chain 4 | T=0 tree (3,2,2,1,1) | T=0 tree (3,3,2,1) |")
    print("|---|---|---|---|---|---|")
    for t, rows in results.items():
        for d, r in rows.items():
            print("| %s | %s | %.3f | %.2f | %.2f | %.2f |" % (t, d, r["top1_agree"], r["tau_chain4"],
                                                             r["tau_tree32211"], r["tau_tree3321"]))
    if args.json:
        write_json(args.json, {"num_prompts": args.num_prompts, "max_len": args.max_len, "seed": args.seed,
                               "prompts": "val split of %s, 8-32 token openings" % args.data,
                               "results": results})
    log("done (%s)" % fmt_time(time.time() - t0))


if __name__ == "__main__":
    main()
