#!/usr/bin/env python3
"""Goldens for treespec's ReDrafter head (core/model/redrafter_head.h) and beam search
(drafter_service/redrafter_beam_search.h) from the PyTorch reference (tools/train/redrafter.py).

For models/demo/redrafter-head (or --head) and a fixed sequence (BOS + the demo manifest's
prompt + the target's greedy continuation, 24 tokens in all), writes to
tests/golden/data/redrafter/<head>/:
  tokens.npy        int32 [N]
  features.npy      f32 [N, H]     the target's last layer output at every position (residual
                                   stream, before the final norm)
  context.npy       f32 [N, H]     h = the target's final norm of those (the head's context)
  logits1.npy       f32 [N-2, V]   row t: step 1 after root tokens[t+1] with context t
  logits2.npy       f32 [N-3, V]   row t: step 2, the RNN fed tokens[t+2]
  beam_anchors.npy  int32 [A]      positions t whose (context t, root tokens[t+1]) seed a search
  beam_tokens.npy   int32 [A, W, L]  redrafter.beam_search's candidates, best first
  beam_logprobs.npy f32 [A, W, L]    their per-step log-probabilities
and manifest.json (format_version 1, the command, torch version, width W, length L).

  .venv/bin/python tools/goldens/make_redrafter_goldens.py
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import eagle as E  # noqa: E402
import models as M  # noqa: E402
import redrafter as R  # noqa: E402

PROMPT = [1, 362, 363, 261, 350, 1985, 351, 281, 261, 359, 498, 348]  # demo manifest's prompt
N = 24
ANCHORS = [11, 15, 19]
WIDTH, LENGTH = 3, 4


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--head", default=os.path.join(ROOT, "models/demo/redrafter-head"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    target, cfg = M.load_model(os.path.join(ROOT, "models/demo/target"))
    ids = torch.tensor([PROMPT])
    while ids.shape[1] < N:
        ids = torch.cat([ids, target(ids)[:, -1:].argmax(-1)], dim=1)
    head = R.load_head(args.head, target)
    last = cfg["num_hidden_layers"] - 1
    feats, _ = E.target_features(target, ids, [last])  # [1, N, 1, H]
    f = feats[0, :, 0]
    h = head.context(f)
    lg = head.forward_unrolled(h[None], ids, 2)
    bt, bl = [], []
    for t in ANCHORS:
        toks, lps = R.beam_search(head, h[t], int(ids[0, t + 1]), WIDTH, LENGTH)
        bt.append(toks)
        bl.append(lps)
    out = args.out or os.path.join(ROOT, "tests/golden/data/redrafter", os.path.basename(args.head.rstrip("/")))
    os.makedirs(out, exist_ok=True)
    save = lambda name, a: np.save(os.path.join(out, name), a)  # noqa: E731
    save("tokens.npy", ids[0].numpy().astype(np.int32))
    save("features.npy", f.numpy().astype(np.float32))
    save("context.npy", h.numpy().astype(np.float32))
    save("logits1.npy", lg[0][0, :N - 2].numpy().astype(np.float32))
    save("logits2.npy", lg[1][0, :N - 3].numpy().astype(np.float32))
    save("beam_anchors.npy", np.array(ANCHORS, dtype=np.int32))
    save("beam_tokens.npy", np.array(bt, dtype=np.int32))
    save("beam_logprobs.npy", np.array(bl, dtype=np.float32))
    with open(os.path.join(out, "manifest.json"), "w") as fh:
        json.dump({"format_version": 1, "kind": "redrafter", "target_layer": last, "n": N,
                   "beam_width": WIDTH, "beam_length": LENGTH,
                   "command": ".venv/bin/python tools/goldens/make_redrafter_goldens.py "
                              "(tools/train/redrafter.py RedrafterHead.forward_unrolled, beam_search, float32)",
                   "torch": torch.__version__}, fh, indent=2)
        fh.write("\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
