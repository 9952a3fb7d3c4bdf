#!/usr/bin/env python3
"""Makes the drafters' training data: the target's own continuations of story openings.

As in paper 003 (ReDrafter) Sec. 3.5, the drafter learns from the target's
outputs, not from the corpus: each sequence is a prompt (the first 8-32
tokens of a corpus story, BOS included) followed by what the trained target
generates from it, up to its EOS or --max-len tokens. Half the rows of every
batch are greedy (the labels temperature-0 acceptance needs), half are sampled
at --temperature (default 1). Train prompts come from the train split, val
prompts from the val split (held out).

Generation is batched with a cache (K/V for attention layers; conv and SSM states
for Mamba-2 layers, whose prompt is scanned chunk-wise and whose continuation is
decoded with the one-step recurrence); each batch has one prompt length.
On CUDA the target runs in float32 with TF32 off (--fast for bf16), so greedy
labels match a float32 engine except at near-ties.

Writes --out (.npz): tokens uint16 [S, max_len] (0 after the end), length
int32 (tokens incl. EOS), prompt_len int32, greedy bool, and val_* the same
for the val split. Progress is saved to --out.partial.npz after each batch;
a rerun resumes from it. Batches are a pure function of (--seed, batch index).

  python distill_data.py --target WORK/export/target --data WORK/data --out WORK/distill.npz \
      --num-seqs 50000 --val-seqs 512 --batch-size 1024
"""

import argparse
import contextlib
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import die, fmt_num, fmt_time, log  # noqa: E402
import models as M  # noqa: E402
from train_lm import load_tokens  # noqa: E402


def story_table(arr, starts):
    ends = np.append(starts[1:], len(arr))
    return starts, ends - starts


@torch.no_grad()
def generate_batch(model, prompts, max_len, greedy, temperature, eos, gen, autocast):
    """prompts: LongTensor [B, P] on the model's device; greedy: bool, or BoolTensor [B]
    (per row: argmax, else a sample at `temperature`). Returns (tokens [B, max_len], length [B])."""
    B, P = prompts.shape
    dev = prompts.device
    out = torch.zeros(B, max_len, dtype=torch.long, device=dev)
    out[:, :P] = prompts
    length = torch.full((B,), max_len, dtype=torch.long, device=dev)
    finished = torch.zeros(B, dtype=torch.bool, device=dev)
    if not torch.is_tensor(greedy):
        greedy = torch.full((B,), bool(greedy), dtype=torch.bool)
    greedy = greedy.to(dev)
    any_sampled = not bool(greedy.all())
    cache = model.new_cache(max_len)
    with autocast():
        logits = model(prompts, cache, 0)[:, -1].float()
    for t in range(P, max_len):
        nxt = logits.argmax(-1)
        if any_sampled:  # Gumbel-max sampling from softmax(logits / T)
            u = torch.rand(logits.shape, generator=gen, device=dev).clamp_(1e-20, 1.0)
            nxt = torch.where(greedy, nxt, (logits / temperature - torch.log(-torch.log(u))).argmax(-1))
        nxt = torch.where(finished, torch.zeros_like(nxt), nxt)
        out[:, t] = nxt
        newly = (nxt == eos) & ~finished
        length = torch.where(newly, torch.full_like(length, t + 1), length)
        finished = finished | newly
        if t + 1 >= max_len or (t % 16 == 0 and bool(finished.all())):
            break
        with autocast():
            logits = model(nxt[:, None], cache, t)[:, -1].float()
    return out, length


def make_split(model, arr, starts, n_seqs, args, device, autocast, eos, tag, partial, t_start):
    st, ln = story_table(arr, starts)
    B = args.batch_size
    n_batches = (n_seqs + B - 1) // B
    done = partial.get(tag, [])
    if done:
        log("%s: resuming with %d/%d batches done" % (tag, len(done), n_batches))
    t0 = time.time()
    first = len(done)
    for bi in range(first, n_batches):
        if args.time_budget and time.time() - t_start > args.time_budget and done:
            log("%s: time budget reached after %d/%d batches" % (tag, len(done), n_batches))
            break
        rng = np.random.default_rng([args.seed, 0 if tag == "train" else 1, bi])
        P = int(rng.integers(args.min_prompt, args.max_prompt + 1))
        ok = np.nonzero(ln > P + 1)[0]
        if len(ok) == 0:
            die("no story longer than %d tokens" % (P + 1))
        nb = min(B, n_seqs - bi * B)
        pick = st[ok[rng.integers(0, len(ok), size=nb)]]
        prompts = np.asarray(arr[pick[:, None] + np.arange(P)[None, :]], dtype=np.int64)
        greedy = np.arange(nb) < (nb + 1) // 2  # first half of every batch greedy, the rest sampled
        gen = torch.Generator(device=device)
        gen.manual_seed(int(rng.integers(0, 2 ** 62)))
        toks, length = generate_batch(model, torch.from_numpy(prompts).to(device), args.max_len,
                                      torch.from_numpy(greedy), args.temperature, eos, gen, autocast)
        done.append({"tokens": toks.cpu().numpy().astype(np.uint16), "length": length.cpu().numpy().astype(np.int32),
                     "prompt_len": np.full(nb, P, np.int32), "greedy": greedy})
        partial[tag] = done
        save_partial(args.out, partial)
        n_done = sum(len(d["length"]) for d in done)
        gen_tok = sum(int((d["length"] - d["prompt_len"]).sum()) for d in done)
        el = time.time() - t0
        eta = el / (bi + 1 - first) * (n_batches - bi - 1)
        log("%s batch %d/%d (prompt %d) | %d seqs | %s generated tokens | mean len %.1f | %s | ETA %s" %
            (tag, bi + 1, n_batches, P, n_done,
             fmt_num(gen_tok), float(length.float().mean()), fmt_time(el), fmt_time(eta)))
    return done


def save_partial(out, partial):
    flat = {}
    for tag, parts in partial.items():
        for i, d in enumerate(parts):
            for k, v in d.items():
                flat["%s.%d.%s" % (tag, i, k)] = v
    tmp = out + ".partial.tmp.npz"
    np.savez(tmp, **flat)
    os.replace(tmp, out + ".partial.npz")


def load_partial(out):
    p = out + ".partial.npz"
    if not os.path.exists(p):
        return {}
    z = np.load(p)
    partial = {}
    for key in z.files:
        tag, i, k = key.split(".")
        parts = partial.setdefault(tag, [])
        while len(parts) <= int(i):
            parts.append({})
        parts[int(i)][k] = z[key]
    return partial


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True, help="exported HF dir or train_lm final.pt")
    ap.add_argument("--data", required=True, help="tokenize_corpus.py output dir (prompts)")
    ap.add_argument("--out", required=True, help=".npz to write")
    ap.add_argument("--num-seqs", type=int, default=50000)
    ap.add_argument("--val-seqs", type=int, default=512)
    ap.add_argument("--min-prompt", type=int, default=8)
    ap.add_argument("--max-prompt", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=257, help="prompt + continuation tokens")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--time-budget", type=float, default=0, help="seconds; stops early, keeping what is done")
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--fast", action="store_true", help="CUDA: bf16 autocast instead of float32")
    args = ap.parse_args()

    t_start = time.time()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = bool(args.fast)
        torch.backends.cudnn.allow_tf32 = bool(args.fast)

    def autocast():
        if device.type == "cuda" and args.fast:
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    if args.min_prompt < 1 or args.max_prompt < args.min_prompt or args.max_len <= args.max_prompt:
        die("need 1 <= min-prompt <= max-prompt < max-len")
    model, cfg = M.load_model(args.target, device)
    if not hasattr(model, "new_cache"):
        die("the target must be a model with a generation cache (Llama, Mamba-2 or Bamba), not %s" % model.arch)
    eos = cfg["eos_token_id"]
    eos = eos[0] if isinstance(eos, list) else eos
    log("distill_data: target %s (%s params) on %s; %d train + %d val sequences, prompts %d-%d, max_len %d" %
        (args.target, fmt_num(M.count_params(model)), device, args.num_seqs, args.val_seqs, args.min_prompt,
         args.max_prompt, args.max_len))
    if os.path.exists(args.out):
        log("distill_data: %s exists; nothing to do" % args.out)
        return
    partial = load_partial(args.out)
    tr_arr, tr_st = load_tokens(args.data, "train")
    va_arr, va_st = load_tokens(args.data, "val")
    val = make_split(model, va_arr, va_st, args.val_seqs, args, device, autocast, eos, "val", partial,
                     time.time()) if args.val_seqs else []
    train = make_split(model, tr_arr, tr_st, args.num_seqs, args, device, autocast, eos, "train", partial, t_start)

    def cat(parts, k):
        return np.concatenate([p[k] for p in parts]) if parts else np.zeros((0,), np.int32)

    out = {k: cat(train, k) for k in ("tokens", "length", "prompt_len", "greedy")}
    for k in ("tokens", "length", "prompt_len", "greedy"):
        out["val_" + k] = cat(val, k)
    tmp = args.out + ".tmp.npz"
    np.savez(tmp, **out)
    os.replace(tmp, args.out)
    os.remove(args.out + ".partial.npz")
    gen_tok = int((out["length"] - out["prompt_len"]).sum())
    eos_frac = float((out["length"] < args.max_len).mean()) if len(out["length"]) else 0.0
    log("distill_data: wrote %s: %d train seqs (%s generated tokens, %.0f%% ended with EOS), %d val; %s" %
        (args.out, len(out["length"]), fmt_num(gen_tok), 100 * eos_frac, len(out["val_length"]),
         fmt_time(time.time() - t_start)))


if __name__ == "__main__":
    main()
