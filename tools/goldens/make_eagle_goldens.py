#!/usr/bin/env python3
"""Goldens for treespec's EAGLE heads (core/model/eagle_head.h) from the PyTorch reference.

For each head in models/demo/{eagle-head,eagle3-head} (skipped when absent) and a fixed
sequence (BOS + a prompt + the target's greedy continuation, 24 tokens in all), writes to
tests/golden/data/eagle/<head>/:
  tokens.npy    int32 [N]
  features.npy  f32 [N, W]     the target's features at every position (layers of the head's
                               config, each the residual stream after the layer, before the
                               final norm), W = layers x hidden
  hidden0.npy   f32 [N-1, H]   the head's output h of row t (input: feature t, token t+1)
  logits0.npy   f32 [N-1, V]   lm_head(norm(h)) of those rows
  logits1.npy   f32 [N-2, V]   one step deeper: row t re-fed with its own h and token t+2
                               at position t+1 (a tree node of depth 2 on anchor t)
and manifest.json (format_version 1, the command, torch version).

  .venv/bin/python tools/goldens/make_eagle_goldens.py
"""

import json
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import eagle as E  # noqa: E402
import models as M  # noqa: E402

PROMPT = [1, 362, 363, 261, 350, 1985, 351, 281, 261, 359, 498, 348]  # demo manifest's prompt
N = 24


@torch.no_grad()
def main():
    torch.set_num_threads(1)
    target, cfg = M.load_model(os.path.join(ROOT, "models/demo/target"))
    ids = torch.tensor([PROMPT])
    while ids.shape[1] < N:
        logits = target(ids)
        ids = torch.cat([ids, logits[:, -1:].argmax(-1)], dim=1)
    for name in ("eagle-head", "eagle3-head"):
        hdir = os.path.join(ROOT, "models/demo", name)
        if not os.path.exists(os.path.join(hdir, "model.safetensors")):
            print("skip", name)
            continue
        head = E.load_head(hdir, target)
        layers = head.layers_needed
        feats, _ = E.target_features(target, ids, layers)  # [1, N, k, H]
        hs = head.forward_unrolled(feats, ids, 2)
        out = os.path.join(ROOT, "tests/golden/data/eagle", name)
        os.makedirs(out, exist_ok=True)
        np.save(os.path.join(out, "tokens.npy"), ids[0].numpy().astype(np.int32))
        np.save(os.path.join(out, "features.npy"), feats[0].flatten(-2).numpy().astype(np.float32))
        np.save(os.path.join(out, "hidden0.npy"), hs[0][0, :N - 1].numpy().astype(np.float32))
        np.save(os.path.join(out, "logits0.npy"), head.logits(hs[0])[0, :N - 1].numpy().astype(np.float32))
        np.save(os.path.join(out, "logits1.npy"), head.logits(hs[1])[0, :N - 2].numpy().astype(np.float32))
        with open(os.path.join(out, "manifest.json"), "w") as f:
            json.dump({"format_version": 1, "kind": head.kind, "target_layers": layers, "n": N,
                       "command": ".venv/bin/python tools/goldens/make_eagle_goldens.py "
                                  "(tools/train/eagle.py EagleHead.forward_unrolled, float32)",
                       "torch": torch.__version__}, f, indent=2)
            f.write("\n")
        print("wrote", out)


if __name__ == "__main__":
    main()
