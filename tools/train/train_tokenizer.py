#!/usr/bin/env python3
"""Trains a SentencePiece BPE tokenizer (tokenizer.model) on a text corpus.

The corpus is one story per blank-line-separated block. Each block becomes one
training sentence. The recipe follows llama2.c's `train_vocab` (BPE,
byte_fallback, identity normalization, split digits), so unknown bytes map to
<0xNN> pieces and nothing is ever <unk>. Ids: 0 <unk>, 1 <s> (BOS), 2 </s> (EOS),
3..258 <0x00>..<0xFF>, then merges.

Deterministic for a given input, --seed and --num-threads (the sentence
sample drawn when the corpus exceeds --input-sentence-size uses the seed).

  python train_tokenizer.py --input corpus.txt --out-dir WORK/tok --vocab-size 2048
"""

import argparse
import hashlib
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import die, log, read_blocks, write_json  # noqa: E402


def _train(spm, args):
    spm.SentencePieceTrainer.train(
        input="tokenizer_train_sentences.txt",
        model_prefix="tokenizer",
        model_type="bpe",
        vocab_size=args.vocab_size,
        self_test_sample_size=0,
        input_format="text",
        character_coverage=1.0,
        num_threads=args.num_threads,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        byte_fallback=True,
        unk_surface=r" \342\201\207 ",
        normalization_rule_name="identity",
        max_sentence_length=1 << 16,
        input_sentence_size=args.input_sentence_size,
        shuffle_input_sentence=False,  # we sampled above, with our seed
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        minloglevel=2,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, nargs="+", help="text file(s), one story per blank-line block")
    ap.add_argument("--out-dir", required=True, help="writes tokenizer.model and tokenizer.vocab here")
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--input-sentence-size", type=int, default=200000,
                    help="at most this many stories are used (a seeded sample when there are more)")
    ap.add_argument("--max-chars", type=int, default=200_000_000, help="cap on the total training text")
    ap.add_argument("--num-threads", type=int, default=2)
    ap.add_argument("--join-lines", action="store_true", help="join the lines of a block with spaces")
    args = ap.parse_args()

    import sentencepiece as spm

    os.makedirs(args.out_dir, exist_ok=True)
    blocks = []
    for path in args.input:
        for b in read_blocks(path, join_lines=args.join_lines):
            if len(b) <= 16000:
                blocks.append(b.replace("\n", " "))  # one sentence per block for the trainer
            else:  # very long block: one sentence per line
                blocks.extend(line for line in b.split("\n") if line.strip())
    if not blocks:
        die("no text in %s" % args.input)
    rng = random.Random(args.seed)
    if len(blocks) > args.input_sentence_size:
        blocks = rng.sample(blocks, args.input_sentence_size)
    total, kept = 0, []
    for b in blocks:
        if total + len(b) > args.max_chars:
            break
        kept.append(b)
        total += len(b)
    sent_path = os.path.join(args.out_dir, "tokenizer_train_sentences.txt")
    with open(sent_path, "w", encoding="utf-8") as f:
        for b in kept:
            f.write(b + "\n")
    log("train_tokenizer: %d sentences, %d chars -> vocab %d" % (len(kept), total, args.vocab_size))
    if hasattr(spm, "set_random_generator_seed"):
        spm.set_random_generator_seed(args.seed)
    prefix = os.path.join(args.out_dir, "tokenizer")
    # The trainer spec (input and prefix paths included) is stored inside
    # tokenizer.model: train from inside out_dir with relative names so the
    # file's bytes do not depend on where it was written.
    cwd = os.getcwd()
    os.chdir(args.out_dir)
    try:
        _train(spm, args)
    finally:
        os.chdir(cwd)
    os.remove(sent_path)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    if sp.get_piece_size() != args.vocab_size:
        die("vocab size %d != %d" % (sp.get_piece_size(), args.vocab_size))
    sample = kept[0][:200]
    ids = sp.encode(sample)
    chars_per_tok = sum(len(b) for b in kept[:2000]) / max(1, sum(len(sp.encode(b)) for b in kept[:2000]))
    with open(prefix + ".model", "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    info = {"vocab_size": args.vocab_size, "sentences": len(kept), "chars": total, "seed": args.seed,
            "chars_per_token": round(chars_per_tok, 3), "sha256": sha,
            "bos_id": sp.bos_id(), "eos_id": sp.eos_id(), "unk_id": sp.unk_id()}
    write_json(os.path.join(args.out_dir, "tokenizer_info.json"), info)
    log("train_tokenizer: wrote %s.model (sha256 %s..., %.2f chars/token); sample %r -> %s" %
        (prefix, sha[:12], chars_per_tok, sample[:60], ids[:16]))
    if sp.decode(ids) != sample:
        log("warning: decode(encode(sample)) differs from the sample")


if __name__ == "__main__":
    main()
