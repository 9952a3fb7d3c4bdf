#!/usr/bin/env python3
"""Checks exported models: the trainer's forward vs treespec's engine and vs transformers.

For each --model DIR (an export_hf.py directory) it runs, on the same fixed
token ids:
  1. tools/train/models.py (the trainer's forward, float32, weights read back
     from the exported model.safetensors, so rounded exactly as shipped; for
     Mamba and Mamba-2 layers the sequential scan, itself checked against the
     chunked scan; for Mamba-2 / Bamba also cached generation: the prompt's first
     part scanned chunk-wise, then one token at a time through the recurrence
     and the KV cache, against the full forward);
  2. transformers' LlamaForCausalLM / MambaForCausalLM / Mamba2ForCausalLM /
     BambaForCausalLM loaded from DIR (float32; Bamba needs transformers >= 4.48,
     e.g. the v5 venv: tools/train/requirements-v5.txt);
  3. treespec's engine: `BIN --model DIR --ids 1,2,3 --out FILE.npy`
     (float32 [num_tokens, vocab]).
and requires max|a - b| <= --tol * max|logits| for 1-vs-2 and 1-vs-3.

Exit status: 0 all checks pass; 1 a check failed; 3 the engine binary does not
exist (the transformers checks still run and are reported).

  python check_engine.py --model models/demo/target models/demo/mamba-drafter --engine build/bin/treespec-logits
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import log  # noqa: E402
import models as M  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEFAULT_IDS = "1,403,407,261,378,432,383,286,261,376,298,315,421,395,317,426,338,401,396,267,337,410,408,419"


def rel_diff(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf"), "shape %s vs %s" % (a.shape, b.shape)
    scale = max(np.abs(a).max(), 1e-30)
    d = np.abs(a - b).max()
    return d / scale, "max|diff| %.3e, max|logit| %.3f" % (d, scale)


HF_CLASSES = {"mamba": "MambaForCausalLM", "mamba2": "Mamba2ForCausalLM", "bamba": "BambaForCausalLM",
              "llama": "LlamaForCausalLM"}


def hf_logits(model_dir, ids):
    import transformers
    cfg = transformers.AutoConfig.from_pretrained(model_dir)
    cls = getattr(transformers, HF_CLASSES.get(cfg.model_type, "LlamaForCausalLM"))
    kw = {"torch_dtype": torch.float32}
    m = cls.from_pretrained(model_dir, **kw).eval()
    with torch.no_grad():
        out = m(torch.tensor([ids]), use_cache=False)
    return out.logits[0].float().numpy(), transformers.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, nargs="+", help="exported HF dir(s)")
    ap.add_argument("--engine", default=os.path.join(REPO, "build", "bin", "treespec-logits"))
    ap.add_argument("--ids", default=DEFAULT_IDS, help="comma-separated token ids")
    ap.add_argument("--tol", type=float, default=1e-4, help="relative to max |logit|")
    ap.add_argument("--no-hf", action="store_true", help="skip the transformers comparison")
    ap.add_argument("--no-engine", action="store_true",
                    help="skip treespec's engine (e.g. for architectures it does not load yet)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    ids = [int(x) for x in args.ids.split(",") if x.strip()]
    engine_ok = os.path.isfile(args.engine) and os.access(args.engine, os.X_OK) and not args.no_engine
    rows, failed = [], False
    for d in args.model:
        model, cfg = M.load_model(d)
        if max(ids) >= cfg["vocab_size"]:
            log("error: id %d outside vocab %d" % (max(ids), cfg["vocab_size"]))
            return 1
        ssm = model.arch in ("mamba", "mamba2", "bamba")
        if ssm:
            model.set_scan("ref")
        with torch.no_grad():
            x = torch.tensor([ids])
            ours = model(x)[0].float().numpy()
            if ssm:  # the chunked scan used for training
                model.set_scan("chunked", 4 if model.arch == "mamba" else 8)
                r, what = rel_diff(ours, model(x)[0].float().numpy())
                ok = r <= args.tol
                failed |= not ok
                rows.append((d, "trainer chunked scan", r, what, ok))
            if hasattr(model, "new_cache"):  # prefill (chunked) + one-token steps (recurrence / KV cache)
                cache = model.new_cache(len(ids))
                split = max(1, len(ids) // 2)
                parts = [model(x[:, :split], cache, 0)] + [model(x[:, t:t + 1], cache, t)
                                                           for t in range(split, len(ids))]
                r, what = rel_diff(ours, torch.cat(parts, 1)[0].float().numpy())
                ok = r <= args.tol
                failed |= not ok
                rows.append((d, "trainer cached decode", r, what, ok))
        hf_major = None
        try:
            import transformers
            hf_major = int(transformers.__version__.split(".")[0])
        except ImportError:
            pass
        if not args.no_hf and model.arch in ("mamba2", "bamba") and hf_major is not None and hf_major < 5:
            rows.append((d, "transformers", float("nan"), "skipped: transformers %s < 5 (its Mamba-2 torch path "
                         "differs for n_groups > 1; use the v5 venv, tools/train/requirements-v5.txt)" %
                         transformers.__version__, True))
        elif not args.no_hf:
            try:
                theirs, ver = hf_logits(d, ids)
                r, what = rel_diff(ours, theirs)
                ok = r <= args.tol
                failed |= not ok
                rows.append((d, "transformers " + ver, r, what, ok))
            except ImportError as e:
                rows.append((d, "transformers", float("nan"), "skipped: %s" % e, True))
        if engine_ok:
            with tempfile.TemporaryDirectory() as td:
                out = os.path.join(td, "logits.npy")
                cmd = [args.engine, "--model", d, "--ids", ",".join(map(str, ids)), "--out", out]
                p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                if p.returncode != 0 or not os.path.exists(out):
                    rows.append((d, "treespec", float("inf"), "engine failed (rc %d): %s" %
                                 (p.returncode, p.stdout.strip()[-500:]), False))
                    failed = True
                else:
                    eng = np.load(out)
                    r, what = rel_diff(ours, eng)
                    ok = r <= args.tol
                    failed |= not ok
                    rows.append((d, "treespec", r, what, ok))
    print()
    print("%-28s %-22s %-11s %s" % ("model", "vs", "rel diff", "detail"))
    for d, vs, r, what, ok in rows:
        name = os.path.basename(os.path.normpath(d))
        print("%-28s %-22s %-11s %s  %s" % (name, vs, "%.2e" % r, what, "ok" if ok else "FAIL"))
    print("tolerance: %g x max|logit|, %d ids" % (args.tol, len(ids)), flush=True)
    if failed:
        print("check_engine: FAILED", flush=True)
        return 1
    if args.no_engine:
        print("check_engine: all checks passed (treespec's engine not checked: --no-engine)", flush=True)
        return 0
    if not engine_ok:
        print("check_engine: treespec's engine binary %s does not exist yet; build it "
              "(make build, target treespec-logits) and rerun. Only the transformers checks ran." % args.engine,
              flush=True)
        return 3
    print("check_engine: all checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
