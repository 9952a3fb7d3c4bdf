#!/usr/bin/env python3
"""Tokenizes a story corpus into uint16 token arrays for train_lm.py.

Input: text files with one story per blank-line-separated block. Each story
becomes [BOS] + ids + [EOS]; stories are concatenated. Stories are split into
train and val by a seeded shuffle (val is never trained on), and the stories
of the val split also give held-out prompts for the acceptance measurement.

Writes to --out-dir:
  train.npy, val.npy              uint16 token streams (or .bin raw with --format bin)
  train_starts.npy, val_starts.npy  int64 offset of every story's BOS
  heldout_prompts.txt             --num-heldout story openings from val, one per line
  corpus_info.json                counts

  python tokenize_corpus.py --input corpus.txt --tokenizer WORK/tok/tokenizer.model --out-dir WORK/data
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import die, fmt_num, log, read_blocks, write_json  # noqa: E402


def opening(text, max_words=12):
    """First sentence of a story, at most max_words words (a prompt)."""
    words = text.replace("\n", " ").split()
    out = []
    for w in words:
        out.append(w)
        if len(out) >= 4 and w.endswith((".", "!", "?")):
            break
        if len(out) >= max_words:
            break
    return " ".join(out)


def trim_incomplete(text):
    """Cuts an unfinished last sentence (a sample stopped by its token limit), so
    EOS follows a sentence end. Text without any sentence end is kept whole."""
    t = text.rstrip()
    if not t or t[-1] in '.!?"\'':
        return t
    cut = max(t.rfind(c) for c in ".!?")
    if cut < 0:
        return t
    if cut + 1 < len(t) and t[cut + 1] in '"\'':
        cut += 1
    return t[:cut + 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, nargs="+")
    ap.add_argument("--tokenizer", required=True, help="tokenizer.model")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--val-fraction", type=float, default=0.01)
    ap.add_argument("--min-val-stories", type=int, default=100)
    ap.add_argument("--num-heldout", type=int, default=50, help="held-out prompts written from val stories")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--join-lines", action="store_true", help="join the lines of a block with spaces")
    ap.add_argument("--min-chars", type=int, default=20, help="drop blocks shorter than this")
    ap.add_argument("--max-stories", type=int, default=0, help="use at most this many (0: all)")
    ap.add_argument("--trim-incomplete", action="store_true",
                    help="cut a story's unfinished last sentence (samples that hit the token limit)")
    ap.add_argument("--format", choices=["npy", "bin"], default="npy")
    ap.add_argument("--desc", default="", help="one-line description of the corpus (for model cards)")
    args = ap.parse_args()

    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=args.tokenizer)
    if sp.get_piece_size() > 65535:
        die("vocab too large for uint16")
    bos, eos = sp.bos_id(), sp.eos_id()
    if bos < 0 or eos < 0:
        die("tokenizer has no BOS/EOS")

    stories = []
    for path in args.input:
        stories.extend(read_blocks(path, join_lines=args.join_lines, min_chars=args.min_chars))
    if args.max_stories:
        stories = stories[:args.max_stories]
    if args.trim_incomplete:
        n_cut = sum(1 for t in stories if trim_incomplete(t) != t.rstrip())
        stories = [trim_incomplete(t) for t in stories]
        stories = [t for t in stories if len(t) >= args.min_chars]
        log("tokenize_corpus: cut an unfinished last sentence in %d stories" % n_cut)
    if len(stories) < 2:
        die("need at least 2 stories, got %d" % len(stories))
    log("tokenize_corpus: %d stories" % len(stories))

    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(stories))
    n_val = max(min(args.min_val_stories, len(stories) // 2), int(round(len(stories) * args.val_fraction)))
    val_idx = set(order[:n_val].tolist())

    os.makedirs(args.out_dir, exist_ok=True)
    info = {"stories": len(stories), "vocab_size": sp.get_piece_size(), "bos_id": bos, "eos_id": eos,
            "inputs": [os.path.abspath(p) for p in args.input], "description": args.desc}
    chunk = 2000
    for split in ("train", "val"):
        idx = [i for i in range(len(stories)) if (i in val_idx) == (split == "val")]
        parts, starts, n = [], [], 0
        for j in range(0, len(idx), chunk):
            batch = [stories[i] for i in idx[j:j + chunk]]
            for ids in sp.encode(batch):
                starts.append(n)
                seq = np.empty(len(ids) + 2, dtype=np.uint16)
                seq[0], seq[-1] = bos, eos
                seq[1:-1] = ids
                parts.append(seq)
                n += len(seq)
            if split == "train" and (j // chunk) % 10 == 0:
                log("tokenize_corpus: %s %d/%d stories, %s tokens" % (split, j + len(batch), len(idx), fmt_num(n)))
        arr = np.concatenate(parts) if parts else np.zeros(0, np.uint16)
        if args.format == "npy":
            np.save(os.path.join(args.out_dir, split + ".npy"), arr)
        else:
            arr.tofile(os.path.join(args.out_dir, split + ".bin"))
        np.save(os.path.join(args.out_dir, split + "_starts.npy"), np.asarray(starts, dtype=np.int64))
        lens = np.diff(np.append(np.asarray(starts), n))
        info[split] = {"stories": len(idx), "tokens": int(n),
                       "mean_story_tokens": float(lens.mean()) if len(lens) else 0.0}
        log("tokenize_corpus: %s: %d stories, %s tokens (%.1f per story)" %
            (split, len(idx), fmt_num(n), info[split]["mean_story_tokens"]))
        if split == "val":
            with open(os.path.join(args.out_dir, "heldout_prompts.txt"), "w", encoding="utf-8") as f:
                for i in idx[:args.num_heldout]:
                    f.write(opening(stories[i]) + "\n")
    write_json(os.path.join(args.out_dir, "corpus_info.json"), info)


if __name__ == "__main__":
    main()
