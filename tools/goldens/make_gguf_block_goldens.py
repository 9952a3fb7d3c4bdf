#!/usr/bin/env python3
"""Block dequantisation goldens for tests/unit/gguf_dequant_test.cc.

For each ggml type treespec reads (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
Q6_K)
writes 3 blocks of seeded random bytes (every f16 scale field replaced by a finite
random half in [-2, 2] so no block is NaN/Inf) and gguf-py's (llama.cpp's own
Python reference) dequantised float32 values, to
tests/golden/data/gguf_blocks/blocks.json (format_version 1).

Run from the repository root:
  python3 -m venv /tmp/venv-gguf && /tmp/venv-gguf/bin/pip install gguf numpy
  /tmp/venv-gguf/bin/python tools/goldens/make_gguf_block_goldens.py
"""

import json
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import GGML_QUANT_SIZES, dequantize

FORMAT_VERSION = 1
COMMAND = "/tmp/venv-gguf/bin/python tools/goldens/make_gguf_block_goldens.py"
NUM_BLOCKS = 3

# Byte offsets of the f16 scale fields inside one block.
HALF_FIELDS = {
    T.F16: None, T.BF16: None,
    T.Q8_0: [0], T.Q4_0: [0], T.Q4_1: [0, 2],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.Q5_0: [0], T.Q5_1: [0, 2],  # added later: last, so the others' bytes stay the same
}


def main():
    rng = np.random.default_rng(20261123)
    out = {"format_version": FORMAT_VERSION, "command": COMMAND,
           "gguf_version": getattr(gguf, "__version__", "0.19.0"), "types": []}
    for t, fields in HALF_FIELDS.items():
        block_elems, block_bytes = GGML_QUANT_SIZES[t]
        if t in (T.F16, T.BF16):
            # 64 elements of random finite values.
            vals = rng.uniform(-3, 3, 64).astype(np.float32)
            if t == T.F16:
                raw = vals.astype(np.float16).view(np.uint8)
            else:
                raw = (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
        else:
            raw = rng.integers(0, 256, NUM_BLOCKS * block_bytes, dtype=np.uint8)
            for b in range(NUM_BLOCKS):
                for off in fields:
                    h = np.array([rng.uniform(-2, 2)], dtype=np.float16).view(np.uint8)
                    raw[b * block_bytes + off: b * block_bytes + off + 2] = h
        values = dequantize(raw, t).astype(np.float32).reshape(-1)
        out["types"].append({"type": t.name, "ggml_type": int(t), "hex": raw.tobytes().hex(),
                             "values": [float(v) for v in values]})
    path = "tests/golden/data/gguf_blocks/blocks.json"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=0)
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
