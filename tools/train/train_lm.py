#!/usr/bin/env python3
"""Trains a Llama, Mamba, Mamba-2 or Bamba (hybrid) language model: a target, or a
drafter by distillation.

Two data modes:
  --data DIR      token streams from tokenize_corpus.py (train.npy, val.npy,
                  *_starts.npy): next-token prediction on the corpus (the target).
  --distill FILE  sequences from distill_data.py: the target's own
                  continuations of corpus prompts.
  --data DIR --teacher T --kd-weight 1: pure distillation of a model (e.g. a
                  hybrid target from a Llama one) on corpus windows; the corpus
                  validation then also reports top-1 agreement and KL with T. The loss is cross-entropy on
                  the target's tokens (prompt tokens are context, not labels),
                  optionally mixed with a token-level KL to the target's full
                  distribution (--teacher DIR --kd-weight A):
                    loss = (1 - A) * CE(target tokens) + A * KL(p_target || p_drafter).

Model size comes from --config (a JSON of Hugging Face config fields, see
configs/) and --set key=value overrides; --init starts from another checkpoint's
weights (e.g. hybrid_init.py's warm-started hybrid; its config is used when no
--config is given). With --teacher or --param-reference,
the run FAILS (exit 2) before training if the model has more than
1/--max-param-ratio of the reference's parameters (embeddings included).

Training: AdamW (no decay on norms, biases, A_log, D), linear warmup then cosine
to --min-lr-ratio * --lr, gradient clipping, bf16 autocast + TF32 on CUDA
(float32 on CPU), optional torch.compile on CUDA (--compile, falls back to
eager if compiling fails). Data order is a pure function of (--seed, step), so
a resumed run sees the same batches. The schedule's progress is
max(step / max_steps, elapsed / --time-budget), so a run stopped by the time
budget still ends with a fully decayed learning rate.

Out dir: ckpt.pt (every --ckpt-every steps, at the end, and on SIGTERM/SIGINT;
--resume continues from it), final.pt (weights + config), result.json (final
losses, tokens, timing), and progress lines on stdout:
  step 400/2000 | loss 2.3141 | lr 9.1e-04 | 41.2k tok/s | 6.55M tok | 2m40s | ETA 10m40s

  python train_lm.py --config configs/target.json --data WORK/data --out-dir WORK/target \
      --batch-size 64 --seq-len 256 --tokens 30e6 --lr 1e-3
"""

import argparse
import contextlib
import inspect
import json
import math
import os
import shlex
import signal
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import die, fmt_num, fmt_time, log, read_json, write_json  # noqa: E402
import models as M  # noqa: E402

TREES = {"chain4": (1, 1, 1, 1), "tree32211": (3, 2, 2, 1, 1), "tree3321": (3, 3, 2, 1)}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=["llama", "mamba", "mamba2", "bamba"], help="default: from the config")
    ap.add_argument("--init", help="start from this checkpoint's (or HF dir's) weights; its config unless --config")
    ap.add_argument("--config", help="JSON of HF config fields")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field (value parsed as JSON)")
    ap.add_argument("--data", help="tokenize_corpus.py output dir (corpus LM mode; in distill mode: extra val)")
    ap.add_argument("--distill", help="distill_data.py .npz (drafter distillation mode)")
    ap.add_argument("--teacher", help="target model (HF dir or .pt) for KD loss and the size check")
    ap.add_argument("--kd-weight", type=float, default=0.0)
    ap.add_argument("--kd-temperature", type=float, default=1.0)
    ap.add_argument("--param-reference", help="model whose size bounds this one (default: --teacher)")
    ap.add_argument("--max-param-ratio", type=float, default=20.0,
                    help="fail if the model exceeds reference/RATIO parameters (0: no check, e.g. a "
                         "target distilled from another target)")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--tokens", type=float, default=0, help="sets max-steps from a token budget")
    ap.add_argument("--time-budget", type=float, default=0, help="seconds of training (0: none)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--align-prob", type=float, default=0.5,
                    help="corpus mode: share of windows that start at a story's BOS")
    ap.add_argument("--scan", choices=["auto", "chunked", "ref"], default="auto",
                    help="mamba selective scan: auto = chunked on CUDA, sequential on CPU; "
                         "mamba2/bamba SSD scan: auto = chunked (matrix products, fast on both)")
    ap.add_argument("--scan-chunk", type=int, default=0,
                    help="chunk length of the chunked scan (0: 16 for mamba, 64 for mamba2/bamba)")
    ap.add_argument("--eval-every", type=int, default=0, help="steps (0: only at the end)")
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--keep-best", action="store_true",
                    help="keep the weights with the best periodic val loss if the final ones are worse "
                         "(guards against overfitting on many epochs)")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--ckpt-every", type=int, default=200)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch default)")
    ap.add_argument("--compile", action="store_true", help="torch.compile on CUDA")
    ap.add_argument("--no-bf16", action="store_true", help="CUDA: train in float32")
    return ap.parse_args(argv)


# ----------------------------------------------------------------------------
# data


def load_tokens(data_dir, split):
    for ext in (".npy", ".bin"):
        p = os.path.join(data_dir, split + ext)
        if os.path.exists(p):
            arr = np.load(p, mmap_mode="r") if ext == ".npy" else np.memmap(p, dtype=np.uint16, mode="r")
            sp = os.path.join(data_dir, split + "_starts.npy")
            starts = np.load(sp) if os.path.exists(sp) else np.zeros(1, np.int64)
            return arr, starts
    die("no %s.npy or %s.bin in %s" % (split, split, data_dir))


class CorpusBatches:
    """Windows of seq_len+1 tokens from a token stream; a share start at a story BOS."""

    def __init__(self, arr, starts, seq_len, align_prob):
        self.arr, self.seq_len, self.align_prob = arr, seq_len, align_prob
        self.hi = len(arr) - seq_len - 1
        if self.hi < 1:
            die("token stream of %d tokens is shorter than seq_len+2=%d" % (len(arr), seq_len + 2))
        self.starts = starts[starts < self.hi] if len(starts) else starts
        if len(self.starts) == 0:
            self.starts = np.zeros(1, np.int64)

    def get(self, rng, batch):
        s = rng.integers(0, self.hi, size=batch)
        if self.align_prob > 0:
            al = rng.random(batch) < self.align_prob
            s = np.where(al, self.starts[rng.integers(0, len(self.starts), size=batch)], s)
        idx = s[:, None] + np.arange(self.seq_len + 1)[None, :]
        w = torch.from_numpy(np.asarray(self.arr[idx], dtype=np.int64))
        return w[:, :-1], w[:, 1:].clone(), None


class DistillBatches:
    """Rows of distill_data.py sequences: labels only where the target generated the token."""

    def __init__(self, tokens, length, prompt_len, seq_len):
        W = min(tokens.shape[1], seq_len + 1)
        self.tokens = tokens[:, :W]
        self.length = np.minimum(length, W)
        self.prompt_len = prompt_len
        self.seq_len = W - 1

    def rows(self, idx):
        t = torch.from_numpy(np.asarray(self.tokens[idx], dtype=np.int64))
        x, y = t[:, :-1], t[:, 1:].clone()
        pos = torch.arange(1, self.seq_len + 1)[None, :]  # position of the label token
        length = torch.from_numpy(np.asarray(self.length[idx], dtype=np.int64))[:, None]
        plen = torch.from_numpy(np.asarray(self.prompt_len[idx], dtype=np.int64))[:, None]
        valid = pos < length  # label is a real token (not padding)
        y[~(valid & (pos >= plen))] = -100  # hard labels: generated tokens only
        return x, y, valid

    def get(self, rng, batch):
        return self.rows(rng.integers(0, len(self.tokens), size=batch))


def load_distill(path, seq_len):
    z = np.load(path)
    tr = DistillBatches(z["tokens"], z["length"], z["prompt_len"], seq_len)
    va = None
    if "val_tokens" in z.files and len(z["val_tokens"]):
        va = DistillBatches(z["val_tokens"], z["val_length"], z["val_prompt_len"], seq_len)
        va.greedy = z["val_greedy"] if "val_greedy" in z.files else np.zeros(len(z["val_tokens"]), bool)
    return tr, va


# ----------------------------------------------------------------------------
# training


def lr_at(step, progress, args):
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    p = min(1.0, max(0.0, progress))
    lo = args.lr * args.min_lr_ratio
    return lo + 0.5 * (args.lr - lo) * (1 + math.cos(math.pi * p))


def make_optimizer(model, args, device):
    decay, no_decay, seen = [], [], set()
    for name, p in model.named_parameters():
        if id(p) in seen or not p.requires_grad:
            continue
        seen.add(id(p))
        if p.dim() < 2 or name.endswith(("A_log", ".D", "dt_bias")):
            no_decay.append(p)
        else:
            decay.append(p)
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kw = {}
    if device.type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW.__init__).parameters:
        kw["fused"] = True
    return torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), eps=1e-8, **kw)


def masked_ce(logits, y):
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)


def kd_loss(logits, t_logits, valid, temp):
    """Mean over valid positions of KL(p_teacher || p_student) at temperature temp."""
    s = F.log_softmax(logits.float() / temp, dim=-1)
    t = F.log_softmax(t_logits.float() / temp, dim=-1)
    kl = (t.exp() * (t - s)).sum(-1)
    v = valid.to(kl.dtype)
    return (kl * v).sum() / v.sum().clamp(min=1.0) * (temp * temp)


def simulate_acceptance(logits, labels, greedy_rows, plens, lengths):
    """Mean accepted tokens per target step (tau) at temperature 0, from one
    teacher-forced drafter pass over the target's greedy continuations.

    Along the accepted path the drafter sees exactly the target's tokens, so a
    tree with widths (w1, w2, ...) accepts depth d iff the target's token is
    among the drafter's top-w_d there; a chain is widths (1, 1, ...)."""
    # rank of the label token among the drafter's predictions: [b, L]
    lab = labels.clamp(min=0)
    lab_logit = logits.gather(-1, lab[..., None])
    rank = (logits > lab_logit).sum(-1).cpu().numpy()
    out = {}
    for name, widths in TREES.items():
        toks = steps = 0
        for r in range(rank.shape[0]):
            if not greedy_rows[r]:
                continue
            pos, end = int(plens[r]) - 1, int(lengths[r]) - 1  # predict label index pos (token pos+1)
            while pos < end:
                a = 0
                while a < len(widths) and pos + a < end and rank[r, pos + a] < widths[a]:
                    a += 1
                gained = min(a + 1, end - pos)  # accepted + the target's own token
                toks += gained
                steps += 1
                pos += gained
        out["tau_" + name] = toks / steps if steps else float("nan")
    return out


@torch.no_grad()
def evaluate(model, batches, args, device, autocast, n_batches, seed_tag, greedy_sim=False, teacher=None):
    """Loss and top-1 on val batches; with a teacher also the teacher's own loss, top-1
    agreement (argmax equal) and KL(teacher || model), averaged over the same positions."""
    model.eval()
    rng = np.random.default_rng([args.seed, seed_tag])
    tot = cnt = hit = 0.0
    t_tot = t_agree = t_kl = 0.0
    sims = []
    for i in range(n_batches):
        if isinstance(batches, DistillBatches):
            lo = (i * args.batch_size) % max(1, len(batches.tokens))
            idx = np.arange(lo, min(lo + args.batch_size, len(batches.tokens)))
            x, y, valid = batches.rows(idx)
        else:
            idx = None
            x, y, valid = batches.get(rng, args.batch_size)
        x, y = x.to(device), y.to(device)
        with autocast():
            logits = model(x)
        logits = logits.float()
        m = y != -100
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100,
                               reduction="sum")
        tot += loss.item()
        cnt += m.sum().item()
        hit += ((logits.argmax(-1) == y) & m).sum().item()
        if teacher is not None:
            with autocast():
                tl = teacher(x)
            tl = tl.float()
            t_tot += F.cross_entropy(tl.reshape(-1, tl.shape[-1]), y.reshape(-1), ignore_index=-100,
                                     reduction="sum").item()
            t_agree += ((logits.argmax(-1) == tl.argmax(-1)) & m).sum().item()
            lt = F.log_softmax(tl, -1)
            t_kl += ((lt.exp() * (lt - F.log_softmax(logits, -1))).sum(-1) * m).sum().item()
        if greedy_sim and idx is not None:
            sims.append(simulate_acceptance(logits, y, batches.greedy[idx], batches.prompt_len[idx],
                                            batches.length[idx]))
        if isinstance(batches, DistillBatches) and lo + args.batch_size >= len(batches.tokens):
            break
    model.train()
    res = {"loss": tot / max(1.0, cnt), "top1": hit / max(1.0, cnt), "tokens": int(cnt)}
    if teacher is not None:
        res.update({"teacher_loss": t_tot / max(1.0, cnt), "teacher_top1_agree": t_agree / max(1.0, cnt),
                    "teacher_kl": t_kl / max(1.0, cnt)})
    if sims:
        for k in sims[0]:
            vals = [s[k] for s in sims if not math.isnan(s[k])]
            res[k] = sum(vals) / len(vals) if vals else float("nan")
    return res


def save_atomic(obj, path):
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(argv)
    t_start = time.time()
    os.makedirs(args.out_dir, exist_ok=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    use_bf16 = cuda and not args.no_bf16

    def autocast():
        if use_bf16:
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # ---- config and model
    cfg = read_json(args.config) if args.config else {}
    for kv in args.set:
        k, _, v = kv.partition("=")
        try:
            cfg[k] = json.loads(v)
        except ValueError:
            cfg[k] = v
    init = None
    if args.init:
        if os.path.isdir(args.init):
            init_model, init_cfg = M.load_model(args.init)
            init = {"config": init_cfg, "model": init_model.state_dict()}
            del init_model
        else:
            init = M.torch_load(args.init)
        if not args.config:
            cfg = dict(init["config"])
            for kv in args.set:
                k, _, v = kv.partition("=")
                try:
                    cfg[k] = json.loads(v)
                except ValueError:
                    cfg[k] = v
    ckpt_path = os.path.join(args.out_dir, "ckpt.pt")
    resume = None
    if args.resume and os.path.exists(ckpt_path):
        resume = M.torch_load(ckpt_path)
        cfg = resume["config"]
        log("resuming from %s at step %d" % (ckpt_path, resume["step"]))
    arch = args.arch or M.arch_of(cfg)
    cfg = M.complete_config(cfg, arch)
    if args.data is None and args.distill is None:
        die("give --data or --distill")
    torch.manual_seed(args.seed)
    model = M.build_model(cfg, arch)
    if hasattr(model, "set_scan"):
        model.set_scan(args.scan, args.scan_chunk or (16 if arch == "mamba" else 64))
    if init is not None and resume is None:
        M.load_state_dict_hf(model, init["model"])
        log("initialised from %s" % args.init)
    n_params = M.count_params(model)
    log("model: %s, %s parameters (%d), config %s" % (arch, fmt_num(n_params), n_params,
        {k: cfg[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size",
                             "num_attention_heads", "num_key_value_heads", "state_size", "num_heads",
                             "head_dim", "n_groups", "attn_layer_indices", "mamba_n_heads", "mamba_d_head",
                             "mamba_n_groups", "mamba_d_state", "time_step_rank", "tie_word_embeddings")
         if k in cfg}))

    teacher = None
    ref_path = args.param_reference or args.teacher
    if ref_path:
        ref_model, ref_cfg = M.load_model(ref_path)
        ref_params = M.count_params(ref_model)
        limit = ref_params / args.max_param_ratio if args.max_param_ratio > 0 else float("inf")
        log("reference %s: %s parameters; limit %s; this model %s (ratio 1/%.1f)" %
            (ref_path, fmt_num(ref_params), ("1/%g = %s" % (args.max_param_ratio, fmt_num(limit)))
             if args.max_param_ratio > 0 else "none (--max-param-ratio 0)", fmt_num(n_params),
             ref_params / n_params))
        if n_params > limit:
            print("FAIL: %d parameters > %d = reference %d / %g" % (n_params, limit, ref_params,
                  args.max_param_ratio), flush=True)
            sys.exit(2)
        if ref_cfg["vocab_size"] != cfg["vocab_size"]:
            die("vocab mismatch with the reference: %d vs %d" % (ref_cfg["vocab_size"], cfg["vocab_size"]))
        if args.teacher and args.kd_weight > 0:
            teacher = ref_model.to(device).eval()
            for p in teacher.parameters():
                p.requires_grad_(False)
        del ref_model
    elif args.kd_weight > 0:
        die("--kd-weight needs --teacher")

    # ---- data
    corpus_val = None
    if args.data:
        tr_arr, tr_starts = load_tokens(args.data, "train")
        va_arr, va_starts = load_tokens(args.data, "val")
        if int(tr_arr.max()) >= cfg["vocab_size"]:
            die("token id %d >= vocab_size %d" % (int(tr_arr.max()), cfg["vocab_size"]))
        corpus_val = CorpusBatches(va_arr, va_starts, min(args.seq_len, len(va_arr) - 2), args.align_prob)
    if args.distill:
        train_b, val_b = load_distill(args.distill, args.seq_len)
        log("distill data: %d train sequences, %d val; seq_len %d" %
            (len(train_b.tokens), len(val_b.tokens) if val_b else 0, train_b.seq_len))
    else:
        train_b, val_b = CorpusBatches(tr_arr, tr_starts, args.seq_len, args.align_prob), None
        log("corpus: %s train tokens, %s val tokens" % (fmt_num(len(tr_arr)), fmt_num(len(va_arr))))
    seq_len = train_b.seq_len
    tok_per_step = args.batch_size * seq_len * args.grad_accum
    max_steps = args.max_steps
    if args.tokens:
        max_steps = int(math.ceil(args.tokens / tok_per_step))
    if max_steps <= 0 and args.time_budget <= 0:
        die("give --max-steps, --tokens or --time-budget")
    if max_steps <= 0:
        max_steps = 10 ** 9

    # ---- optimizer, resume
    model.to(device)
    model.train()
    opt = make_optimizer(model, args, device)
    step, tokens_seen, elapsed_before, ema = 0, 0, 0.0, None
    history = []
    if resume is not None:
        M.load_state_dict_hf(model, resume["model"])
        opt.load_state_dict(resume["optimizer"])
        step, tokens_seen = resume["step"], resume["tokens_seen"]
        elapsed_before, ema = resume["elapsed"], resume.get("ema_loss")
        history = resume.get("history", [])
    best = resume.get("best") if resume is not None and resume.get("best") else {"loss": float("inf")}
    fwd = model
    if args.compile and cuda and hasattr(torch, "compile"):
        try:
            fwd = torch.compile(model)
            log("torch.compile enabled")
        except Exception as e:  # noqa: BLE001
            log("warning: torch.compile failed (%s); eager" % e)
            fwd = model

    stop = {"sig": None}

    def on_signal(signum, frame):
        stop["sig"] = signum

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def checkpoint(done=False):
        save_atomic({"model": model.state_dict(), "optimizer": opt.state_dict(), "config": cfg, "arch": arch,
                     "step": step, "tokens_seen": tokens_seen, "elapsed": elapsed_before + time.time() - t0,
                     "ema_loss": ema, "history": history, "args": vars(args), "done": done, "best": best},
                    ckpt_path)

    log("training: %s steps x %d tokens (batch %d x seq %d x accum %d)%s, lr %g, device %s%s" %
        ("unbounded" if max_steps >= 10 ** 9 else max_steps, tok_per_step, args.batch_size, seq_len,
         args.grad_accum, (", time budget %s" % fmt_time(args.time_budget)) if args.time_budget else "",
         args.lr, device, ", bf16" if use_bf16 else ""))
    t0 = time.time()
    t_log, tok_log = t0, tokens_seen
    loss_acc = torch.zeros((), device=device)
    n_acc = 0

    def progress_now():
        p = step / max_steps
        if args.time_budget > 0:
            p = max(p, (elapsed_before + time.time() - t0) / args.time_budget)
        return p

    while True:
        prog = progress_now()
        if step >= max_steps or prog >= 1.0:
            break
        if stop["sig"] is not None:
            checkpoint()
            log("signal %d: checkpointed at step %d; exiting (rerun with --resume)" % (stop["sig"], step))
            os._exit(130)
        lr = lr_at(step, prog, args)
        for g in opt.param_groups:
            g["lr"] = lr
        rng = np.random.default_rng([args.seed, step])
        for micro in range(args.grad_accum):
            x, y, valid = train_b.get(rng, args.batch_size)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with autocast():
                try:
                    logits = fwd(x)
                except Exception as e:  # noqa: BLE001
                    if fwd is model:
                        raise
                    log("warning: compiled forward failed (%s: %s); eager" % (type(e).__name__, str(e)[:200]))
                    fwd = model
                    logits = fwd(x)
                loss = masked_ce(logits, y)
                if teacher is not None:
                    with torch.no_grad():
                        t_logits = teacher(x)
                    v = valid.to(device) if valid is not None else torch.ones_like(y, dtype=torch.bool)
                    loss = (1 - args.kd_weight) * loss + args.kd_weight * kd_loss(
                        logits, t_logits, v, args.kd_temperature)
            (loss / args.grad_accum).backward()
            loss_acc += loss.detach()
            n_acc += 1
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        tokens_seen += tok_per_step

        last = step >= max_steps or progress_now() >= 1.0
        if step % args.log_every == 0 or last or step == 1:
            lv = (loss_acc / max(1, n_acc)).item()
            loss_acc.zero_()
            n_acc = 0
            if not math.isfinite(lv):
                checkpoint()
                die("loss is %s at step %d" % (lv, step))
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
            now = time.time()
            tps = (tokens_seen - tok_log) / max(1e-9, now - t_log)
            t_log, tok_log = now, tokens_seen
            el = elapsed_before + now - t0
            p = progress_now()
            eta = el / p * (1 - p) if p > 0 else 0
            history.append([step, round(lv, 4)])
            log("step %d/%s | loss %.4f | lr %.2e | %s tok/s | %s tok | %s | ETA %s" %
                (step, "?" if max_steps >= 10 ** 9 else max_steps, lv, lr, fmt_num(tps), fmt_num(tokens_seen),
                 fmt_time(el), fmt_time(eta)))
        if args.eval_every and step % args.eval_every == 0 and not last:
            ev = evaluate(model, val_b or corpus_val, args, device, autocast, args.eval_batches, 7,
                          teacher=teacher if val_b is None else None)
            log("eval step %d | val loss %.4f | top1 %.3f%s" % (step, ev["loss"], ev["top1"],
                (" | teacher agreement %.3f | KL %.4f" % (ev["teacher_top1_agree"], ev["teacher_kl"]))
                if "teacher_kl" in ev else ""))
            if args.keep_best and ev["loss"] < best["loss"]:
                best = {"loss": ev["loss"], "step": step,
                        "model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}}
        if step % args.ckpt_every == 0 and not last:
            checkpoint()

    train_time = elapsed_before + time.time() - t0
    checkpoint(done=True)
    log("training done: %d steps, %s tokens, %s" % (step, fmt_num(tokens_seen), fmt_time(train_time)))

    # ---- final eval and outputs
    result = {"arch": arch, "params": n_params, "steps": step, "tokens_seen": tokens_seen,
              "train_time_s": round(train_time, 1), "tokens_per_s": round(tokens_seen / max(1e-9, train_time)),
              "train_loss": round(ema, 4) if ema is not None else None,
              "last_logged_loss": history[-1][1] if history else None,
              "device": str(device) + (" " + torch.cuda.get_device_name(0) if cuda else ""),
              "torch": str(torch.__version__), "config": cfg, "args": vars(args),
              "command": " ".join(["python", "tools/train/train_lm.py"] +
                                  [shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)])}
    if args.keep_best and best.get("model") is not None:
        ev = evaluate(model, val_b or corpus_val, args, device, autocast, args.eval_batches, 7)
        if best["loss"] < ev["loss"] - 1e-4:
            log("keep-best: val loss %.4f at step %d beats the final %.4f; using those weights" %
                (best["loss"], best["step"], ev["loss"]))
            M.load_state_dict_hf(model, best["model"])
            result["kept_best_step"] = best["step"]
            result["final_step_val_loss"] = round(ev["loss"], 4)
    if val_b is not None:
        ev = evaluate(model, val_b, args, device, autocast, 10 ** 6, 7, greedy_sim=True)
        result["distill_val"] = ev
        log("final distill val: loss %.4f | top1 agreement %.3f | simulated T=0 tau: %s" %
            (ev["loss"], ev["top1"], ", ".join("%s %.2f" % (k[4:], v) for k, v in ev.items()
                                                 if k.startswith("tau_"))))
    if corpus_val is not None:
        ev = evaluate(model, corpus_val, args, device, autocast, args.eval_batches, 7, teacher=teacher)
        result["corpus_val"] = ev
        result["val_loss"] = round(ev["loss"], 4)
        log("final corpus val: loss %.4f (ppl %.2f) | top1 %.3f%s" % (ev["loss"], math.exp(ev["loss"]), ev["top1"],
            (" | teacher: loss %.4f, top-1 agreement %.3f, KL %.4f" %
             (ev["teacher_loss"], ev["teacher_top1_agree"], ev["teacher_kl"])) if teacher is not None else ""))
    model_sd = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    save_atomic({"model": model_sd, "config": cfg, "arch": arch, "result": {k: v for k, v in result.items()
                                                                              if k != "args"}},
                os.path.join(args.out_dir, "final.pt"))
    result["history"] = history
    write_json(os.path.join(args.out_dir, "result.json"), result)
    log("wrote %s/final.pt and result.json (%s total)" % (args.out_dir, fmt_time(time.time() - t_start)))


if __name__ == "__main__":
    main()
