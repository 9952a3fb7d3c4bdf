#!/usr/bin/env python3
"""How much dynamic tree attention saves (paper 003 Sec. 4.3.2, Fig. 6 left): beam-search
candidates of the ReDrafter head (tools/train/redrafter.beam_search) at 150 random positions
of the trainer's cached data (out/redrafter/data.npz, the target's own continuations), and the
number of tree nodes once shared prefixes are merged (what core/spec/beam_tree.h's PackBeams
keeps).

  .venv/bin/python tools/train/redrafter_compression.py
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models as M  # noqa: E402
import redrafter as R  # noqa: E402


@torch.no_grad()
def main():
    torch.set_num_threads(1)
    target, _ = M.load_model("models/demo/target")
    head = R.load_head("models/demo/redrafter-head", target)
    z = np.load("out/redrafter/data.npz")
    tok = torch.from_numpy(z["tokens"].astype(np.int64))
    ln = z["length"]
    f = torch.from_numpy(z["features"]).view(torch.float16)
    rng = np.random.default_rng(0)
    for W, L in [(3, 4), (8, 5), (16, 5)]:
        tot, packed = 0, 0
        for _ in range(150):
            i = int(rng.integers(0, len(tok)))
            t = int(rng.integers(20, int(ln[i]) - 2))
            h = head.context(f[i, t, 0].float())
            beams, _ = R.beam_search(head, h, int(tok[i, t + 1]), W, L)
            prefixes = set()
            for b in beams:
                for j in range(L):
                    prefixes.add(tuple(b[:j + 1]))
            tot += len(beams) * L
            packed += len(prefixes)
        print("beam %dx%d: %d tokens -> %d packed nodes (%.1f%% fewer)" %
              (W, L, tot, packed, 100 * (1 - packed / tot)))


if __name__ == "__main__":
    main()
