#!/usr/bin/env python3
"""Copies a model directory with its float32 weights replaced by random ones.

The copy keeps the architecture, vocabulary and tokenizer, so it serves as a
drafter whose drafts are useless (spec_bench's worst case for tree=auto).
Norm weights are kept; every other tensor is drawn from N(0, std²) with a
fixed seed, so the output is reproducible. Standard library only.

  python3 tools/models/randomize_weights.py models/demo/transformer-drafter \
      build/useless-drafter [--std 0.5] [--seed 12345]
"""

import argparse
import array
import json
import os
import random
import shutil
import struct


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--std", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=12345)
    args = parser.parse_args()
    os.makedirs(args.dst, exist_ok=True)
    for name in os.listdir(args.src):
        if name != "model.safetensors":
            shutil.copy(os.path.join(args.src, name), args.dst)
    with open(os.path.join(args.src, "model.safetensors"), "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = bytearray(blob[8 + n:])
    rng = random.Random(args.seed)
    for key, info in header.items():
        if key == "__metadata__" or "norm" in key:
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{key}: dtype {info['dtype']} is not F32")
        start, end = info["data_offsets"]
        values = array.array("f", [rng.gauss(0.0, args.std) for _ in range((end - start) // 4)])
        data[start:end] = values.tobytes()
    with open(os.path.join(args.dst, "model.safetensors"), "wb") as f:
        f.write(blob[:8 + n] + bytes(data))


if __name__ == "__main__":
    main()
