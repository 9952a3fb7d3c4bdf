#!/usr/bin/env python3
"""Prints a model's continuations of text prompts (greedy by default) — to judge
the target's coherence, or to make reference outputs for tests.

  python sample.py --model models/demo/target --prompt "Once upon a time" --max-new 64
  python sample.py --model WORK/export/target --prompts-file WORK/data/heldout_prompts.txt --num 5 --json out.json

Prompts are encoded as treespec does: BOS + SentencePiece ids (add_bos_token
true, no EOS). Generation stops at EOS. Llama, Mamba-2 and Bamba models use their
cache (K/V, SSM states); Mamba recomputes the prefix each step (fine for short outputs).
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models as M  # noqa: E402


@torch.no_grad()
def continue_ids(model, ids, max_new, eos, temperature=0.0, gen=None):
    out = list(ids)
    x = torch.tensor([ids])
    cache = model.new_cache(len(ids) + max_new) if hasattr(model, "new_cache") else None
    logits = model(x, cache, 0)[0, -1] if cache is not None else model(x)[0, -1]
    for _ in range(max_new):
        if temperature > 0:
            nxt = int(torch.multinomial(torch.softmax(logits.float() / temperature, -1), 1, generator=gen))
        else:
            nxt = int(logits.argmax())
        out.append(nxt)
        if nxt == eos:
            break
        if cache is not None:
            logits = model(torch.tensor([[nxt]]), cache, len(out) - 1)[0, -1]
        else:
            logits = model(torch.tensor([out]))[0, -1]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="exported HF dir (with tokenizer.model)")
    ap.add_argument("--tokenizer", help="default: MODEL/tokenizer.model")
    ap.add_argument("--prompt", action="append", default=[])
    ap.add_argument("--prompts-file", help="one prompt per line")
    ap.add_argument("--num", type=int, default=0, help="use the first NUM prompts of the file")
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write [{prompt, ids, text}] here")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=args.tokenizer or os.path.join(args.model, "tokenizer.model"))
    model, cfg = M.load_model(args.model)
    eos = cfg["eos_token_id"]
    eos = eos[0] if isinstance(eos, list) else eos
    prompts = list(args.prompt)
    if args.prompts_file:
        with open(args.prompts_file) as f:
            lines = [line.rstrip("\n") for line in f if line.strip()]
        prompts += lines[:args.num] if args.num else lines
    if not prompts:
        prompts = ["Once upon a time"]
    gen = torch.Generator().manual_seed(args.seed)
    results = []
    for p in prompts:
        ids = [sp.bos_id()] + sp.encode(p)
        out = continue_ids(model, ids, args.max_new, eos, args.temperature, gen)
        new = out[len(ids):]
        text = sp.decode([t for t in new if t != eos])
        results.append({"prompt": p, "prompt_ids": ids, "new_ids": new, "text": text})
        print("%s >>> %s%s" % (p, text, " <EOS>" if new and new[-1] == eos else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
