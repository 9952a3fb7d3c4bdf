#!/usr/bin/env python3
"""Model-card pieces and the summary for train_hybrid.sh (reads WORK/run/*/result.json).

  hybrid_card.py notes   --role R --work W --teacher T [--profile P]   how the model was made (markdown)
  hybrid_card.py command --role R --work W                             the exact training command(s)
  hybrid_card.py data    --role R --work W --teacher T                 the data description
  hybrid_card.py sim     --card MODEL_CARD.md --json sim.json --role R  adds the simulated-acceptance table
  hybrid_card.py finish  --card MODEL_CARD.md --role R                  marks the treespec table a placeholder
  hybrid_card.py measured --card MODEL_CARD.md --role R --bench F...    fills it from acceptance_bench --markdown
                                                                        outputs (F's first line: "# command: ...")
  hybrid_card.py summary --work W --profile P --wall S --status K=V...  summary.json to stdout
"""

import argparse
import json
import os
import re
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import fmt_num, fmt_time  # noqa: E402

RUNS = {"hybrid-target": "hybrid", "mamba2-target": "mamba2", "hybrid-mamba-drafter": "mamba",
        "hybrid-transformer-drafter": "transformer"}


def res(work, name):
    p = os.path.join(work, "run", name, "result.json")
    return json.load(open(p)) if os.path.exists(p) else {}


def corpus(work):
    info = json.load(open(os.path.join(work, "data", "corpus_info.json")))
    return ("%s: %d stories, %s train tokens, %s held-out val tokens, tokenized with the demo target's "
            "tokenizer.model (vocabulary 2048)" % (info.get("description") or "a text corpus", info["stories"],
                                                   fmt_num(info["train"]["tokens"]), fmt_num(info["val"]["tokens"])))


def val_line(cv):
    return ("corpus val loss %.4f, top-1 agreement with the teacher %.3f, KL(teacher || model) %.4f "
            "(teacher's own val loss on the same %d positions: %.4f)" %
            (cv["loss"], cv["teacher_top1_agree"], cv["teacher_kl"], cv["tokens"], cv["teacher_loss"]))


def notes(args):
    role, work = args.role, args.work
    out = ["## How it was made", ""]
    teacher = os.path.relpath(args.teacher, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    if role == "hybrid-target":
        ri, rh = res(work, "hybrid-init"), res(work, "hybrid")
        out.append("Distilled from the demo Llama target (`%s`, 7.34M parameters; the teacher) in two stages, "
                   "in this run (`%s` profile of `train_hybrid.sh`):" % (teacher, args.profile))
        out.append("")
        if ri:
            out.append("1. **Warm start + layer-wise fit** (`tools/train/hybrid_init.py`): the hybrid has the "
                       "teacher's hidden size, MLP size and vocabulary, so %s of its %s parameters (%d tensors: "
                       "embeddings, LM head, all norms and MLPs, and the attention of layers %s) were copied from "
                       "the teacher; Bamba rotates only half of each attention head (partial_rotary_factor 0.5), so "
                       "the q/k channels of the teacher's even RoPE frequency pairs went to the rotated half and those "
                       "of its odd pairs to the unrotated half. The 6 Mamba-2 mixers started from the HF-style init. "
                       "Then every token mixer (the 6 Mamba-2 mixers and the 2 re-roped attention layers; the rest "
                       "frozen) was fitted to the teacher's attention output of its layer, from the teacher's own "
                       "normalised input (relative MSE): %d steps, %s tokens, %s." %
                       (fmt_num(ri["warm_started_params"]), fmt_num(ri["params"]), ri["warm_started_tensors"],
                        ri["config"]["attn_layer_indices"], ri.get("layerwise_steps", 0),
                        fmt_num(ri.get("layerwise_tokens", 0)), fmt_time(ri.get("layerwise_time_s", 0))))
            v0, v1 = ri["val_after_warm_start"], ri.get("val_after_layerwise")
            out.append("   After the warm start alone: val loss %.4f, top-1 agreement with the teacher %.3f; "
                       "after the layer-wise fit: %.4f, %.3f." %
                       (v0["loss"], v0["teacher_top1_agree"], v1["loss"] if v1 else float("nan"),
                        v1["teacher_top1_agree"] if v1 else float("nan")))
        if rh:
            out.append("2. **End-to-end distillation** (`tools/train/train_lm.py --init`): all parameters, "
                       "loss = KL(teacher || hybrid) on the teacher's full next-token distribution (no hard labels), "
                       "on windows of the corpus above: %d steps, %s tokens, %s (%s tok/s, %s)." %
                       (rh["steps"], fmt_num(rh["tokens_seen"]), fmt_time(rh["train_time_s"]),
                        fmt_num(rh["tokens_per_s"]), rh["device"]))
            if "corpus_val" in rh:
                out.append("   Final: " + val_line(rh["corpus_val"]) + ".")
        cfg = (ri or rh).get("config", {})
        if cfg.get("attn_layer_indices") == [3, 6] and cfg.get("hidden_size") == 256 and \
                cfg.get("mamba_n_heads") == 8 and cfg.get("mamba_n_groups") == 2:
            out.append("")
            out.append("Attention layers 3 and 6: removing the teacher's attention from all but two layers "
                       "(`hybrid_init.py --ablate 2`, MLPs kept) hurts least when layers 3 and 6 keep it "
                       "(val loss 2.96 against 2.40 with all eight; the worst pair, 0 and 1, gives 3.57), and that "
                       "pair also spaces the attention through the depth as Bamba / Nemotron-H do, with Mamba-2 "
                       "mixers for the first layers' local work. Mamba-2 sizes: 8 heads x head_dim 64 (expand 2), "
                       "n_groups 2, d_state 32, conv 4, so tensor parallelism 2 splits heads (4 per rank) and groups "
                       "(1 per rank); the out_proj is not square, so a transposed load is caught by shape.")
    elif role == "mamba2-target":
        rm = res(work, "mamba2")
        out.append("Trained from scratch (HF-style init) by distillation from the demo Llama target (`%s`): loss "
                   "= KL(teacher || model) on the teacher's full next-token distribution (no hard labels), on "
                   "windows of the corpus above, in this run (`%s` profile of `train_hybrid.sh`)." %
                   (teacher, args.profile))
        if rm:
            out.append("")
            out.append("%d steps, %s tokens, %s (%s tok/s, %s). Final: %s." %
                       (rm["steps"], fmt_num(rm["tokens_seen"]), fmt_time(rm["train_time_s"]),
                        fmt_num(rm["tokens_per_s"]), rm["device"],
                        val_line(rm["corpus_val"]) if "corpus_val" in rm else "?"))
        if rm:
            c = rm["config"]
            out.append("")
            out.append("Smaller than the demo target (%s against 7.34M parameters) to fit the CPU training budget "
                       "(it learns everything from scratch, without the hybrid's warm start) and the ~25 MB budget "
                       "of committed demo models. Sizes: d_model %d, %d layers, %d heads x head_dim %d (expand %d), "
                       "n_groups %d, d_state %d, conv %d%s: tensor parallelism 2 splits heads (%s per rank) and "
                       "groups (%s per rank)." %
                       (fmt_num(rm["params"]), c["hidden_size"], c["num_hidden_layers"], c["num_heads"],
                        c["head_dim"], c["expand"], c["n_groups"], c["state_size"], c["conv_kernel"],
                        ", lm_head tied" if c["tie_word_embeddings"] else "", c["num_heads"] // 2, c["n_groups"] // 2))
        out.append("")
        out.append("Drafters: the hybrid's (`../hybrid-mamba-drafter`, `../hybrid-transformer-drafter`) serve this "
                   "target too: same tokenizer and vocabulary, and both this model and the hybrid imitate the same "
                   "teacher, so the drafters predict much of its text (see the simulated table; no drafter was "
                   "distilled from this model itself). Sized for the hybrid (<= 1/20 of it), they are a larger "
                   "share of this smaller model (about 1/8 and 1/10): fine for correctness tests (greedy "
                   "speculative == plain output); a dedicated smaller drafter would serve speed measurements better.")
    else:
        rd = res(work, RUNS[role])
        init = (rd.get("args") or {}).get("init")
        if init:
            out.append("Started from `%s` (the demo Llama target's drafter of the same architecture and size, "
                       "trained on a GPU on 26M tokens of that target's continuations; the hybrid imitates that "
                       "target closely, top-1 agreement 0.89), then distilled from the hybrid target "
                       "(`../hybrid-target`)" % os.path.relpath(init, os.path.join(os.path.dirname(
                           os.path.abspath(__file__)), "..", "..")))
        else:
            out.append("Distilled from the hybrid target (`../hybrid-target`), from scratch,")
        out[-1] += (" with `tools/train/train_lm.py --distill`: loss = 0.5 x cross-entropy on the hybrid's generated "
                    "tokens + 0.5 x KL(hybrid || drafter) on its full next-token distribution, within train_lm.py's "
                    "1/20 size limit (checked against the hybrid).")
        if rd:
            out.append("")
            out.append("%d steps, %s tokens, %s (%s tok/s, %s)." %
                       (rd["steps"], fmt_num(rd["tokens_seen"]), fmt_time(rd["train_time_s"]),
                        fmt_num(rd["tokens_per_s"]), rd["device"]))
    if args.profile == "cpu":
        out.append("")
        what = {"hybrid-target": "It imitates the teacher closely (the warm start did most of the work); its "
                                 "corpus val loss is about the teacher's own on the same positions.",
                "mamba2-target": "Learning from scratch, it got %s tokens in 50 minutes: it imitates the teacher "
                                 "less closely than the hybrid and its val loss is above the teacher's." %
                                 fmt_num(res(work, "mamba2").get("tokens_seen", 0))}.get(
            role, "A drafter trained for %s on a CPU: compare its acceptance with the demo target's drafters' in "
                  "the tables below." % fmt_time(res(work, RUNS.get(role, "")).get("train_time_s", 0)))
        out.append("**Quality note.** Trained on 1 thread of a shared, busy 2-core CPU within a budget of a few hours "
                   "(GPU-free); the numbers above are what that reached. %s It is meant to exercise treespec's %s path "
                   "with sensible (story-like, teacher-like) distributions; a lent GPU (`train_hybrid.sh --profile "
                   "gpu`) would train it further." % (what, "state-space / hybrid" if role.endswith("target")
                                                      else "drafting"))
    return "\n".join(out) + "\n"


def command(args):
    role, work = args.role, args.work
    cmds = []
    if role == "hybrid-target":
        cmds.append(res(work, "hybrid-init").get("command", "?"))
    cmds.append(res(work, RUNS[role]).get("command", "?"))
    return "\n".join(cmds)


def data(args):
    role, work = args.role, args.work
    if role in ("hybrid-target", "mamba2-target"):
        return ("Windows of 256 tokens (half aligned to a story start) of %s. The teacher's logits on them are the "
                "only training signal." % corpus(work))
    p = os.path.join(work, "run", "distill.npz")
    d = ""
    if os.path.exists(p):
        import numpy as np
        z = np.load(p)
        d = (" %d sequences, %d tokens generated by the hybrid target (half greedy, half sampled at "
             "temperature 1; its own cache: chunked prefill, then the Mamba-2 recurrence and the attention KV "
             "cache) from story openings of 8-32 tokens of the train split;" %
             (len(z["length"]), int((z["length"] - z["prompt_len"]).sum())))
    return ("Distilled from the hybrid target (paper 003 Sec. 3.5):" + d + " the prompts come from " + corpus(work) + ".")


PLACEHOLDER = (
    "<!-- ACCEPTANCE TABLE: PLACEHOLDER, to be filled by `hybrid_card.py measured` from treespec's "
    "acceptance_bench; the numbers are not measured yet. -->\n"
    "**Placeholder: not measured yet.** The TBD cells are filled from `build/bin/acceptance_bench --markdown` "
    "(`tools/train/hybrid_card.py measured`). Until then see the trainer's simulated numbers below.\n")


def finish(args):
    text = open(args.card).read()
    old = "<!-- ACCEPTANCE TABLE: filled in by the lead from treespec's measurement. -->"
    if old in text:
        text = text.replace(old, PLACEHOLDER)
    on = "" if args.role in ("hybrid-target", "mamba2-target") else " (on hybrid-target)"
    text = text.replace("| mamba | TBD |", "| hybrid-mamba-drafter%s | TBD |" % on).replace(
        "| transformer | TBD |", "| hybrid-transformer-drafter%s | TBD |" % on)
    open(args.card, "w").write(text)


SHAPES = ("chain:4", "3,2,2,1,1", "3,3,2,1")
DEMO_OF = {"hybrid-mamba-drafter": "mamba-drafter", "hybrid-transformer-drafter": "transformer-drafter"}


def read_bench(path):
    """acceptance_bench --markdown output with its command on the first line -> (command, rows, footer).

    rows: [(target, drafter, {(temperature, tree): tau})], names = the directories' basenames."""
    lines = open(path).read().splitlines()
    if not lines or not lines[0].startswith("# command: "):
        sys.exit("%s: the first line must be '# command: ...'" % path)
    cmd = lines[0][len("# command: "):]
    argv = shlex.split(cmd)
    flag = lambda name, default: next((a.split("=", 1)[1] for a in argv if a.startswith("--%s=" % name)),  # noqa
                                      argv[argv.index("--" + name) + 1] if "--" + name in argv else default)
    target = os.path.basename(flag("target", "models/demo/target").rstrip("/"))
    # KIND=DIR, or LABEL:KIND=DIR where the table names the drafter by its LABEL
    pairs = [kd.split("=", 1) for kd in flag("drafters", "").split(",") if kd]
    dirs = {k.split(":")[0]: v.split("|")[0] for k, v in pairs}
    taus, footer = {}, ""
    for ln in lines[1:]:
        m = re.match(r"\|\s*(\w+)\s*\|\s*([\w:,]+)\s*\|\s*([\d.]+)\s*\|\s*\w+\s*\|\s*([\d.]+)\s*\|", ln)
        if m:
            taus.setdefault(m.group(1), {})[(float(m.group(3)), m.group(2))] = float(m.group(4))
        elif re.match(r"\d+ prompts, \d+ new tokens", ln):
            footer = ln.strip()
    rows = [(target, os.path.basename(dirs[k].rstrip("/")), t) for k, t in taus.items()]
    return cmd, rows, footer


def measured(args):
    """Replaces the placeholder (or an earlier measured table) with the acceptance_bench numbers."""
    benches = [read_bench(p) for p in args.bench]
    role = args.role
    keep = lambda t, d: (role in (t, d) or d == DEMO_OF.get(role))  # noqa: E731
    head = "| target | drafter | " + " | ".join(
        "T=%d %s" % (temp, "chain 4" if s == "chain:4" else "tree (%s)" % s) for temp in (0, 1) for s in SHAPES)
    rows = [head + " |", "|---|---|" + "---:|" * (2 * len(SHAPES))]
    cmds, footers, demo_rows = [], set(), False
    for cmd, rs, footer in benches:
        used = False
        for t, d, taus in rs:
            if not keep(t, d):
                continue
            used = True
            demo_rows = demo_rows or d in DEMO_OF.values()
            cells = ["%.2f" % taus[(temp, s)] if (temp, s) in taus else "n/a" for temp in (0.0, 1.0) for s in SHAPES]
            rows.append("| %s | %s | %s |" % (t, d, " | ".join(cells)))
        if used:
            cmds.append(cmd)
            footers.add(footer)
    if len(rows) == 2:
        sys.exit("measured: no row of %s is about %s" % (args.bench, role))
    sec = ("<!-- ACCEPTANCE TABLE: measured by treespec's acceptance_bench (hybrid_card.py measured). -->\n"
           "Measured with `build/bin/acceptance_bench --markdown` (tools/bench/acceptance_bench.cc: the worker and "
           "drafter cores in process, CPU backend) on the prompts of `models/demo/heldout_prompts.txt` (openings "
           "of validation-split stories of the demo target's corpus, in no training data here)%s. τ counts "
           "accepted draft tokens plus the bonus token per target step. T=0: greedy verification; T=1: multi-round "
           "speculative sampling, children drawn without replacement from the drafter's top-32 distribution q. The "
           "target's Mamba-2 state is verified as a token tree (STree).%s%s\n\n"
           % (": " + "; ".join(sorted(f for f in footers if f)) if any(footers) else "",
              " `mamba-drafter` / `transformer-drafter` are the demo Llama target's drafters (`../mamba-drafter`, "
              "`../transformer-drafter`), for comparison." if demo_rows else "",
              (" " + args.note) if args.note else "")
           + "\n".join(rows) + "\n\nCommands:\n\n```\n" + "\n".join(cmds) + "\n```\n")
    text = open(args.card).read()
    start = text.find("<!-- ACCEPTANCE TABLE:")
    if start < 0:
        sys.exit("measured: %s has no acceptance table marker" % args.card)
    # the old block: the marker, its text, its table and (from an earlier `measured`) its commands
    lines = text[start:].split("\n")
    i = 0
    while i < len(lines) and not lines[i].startswith("|"):
        i += 1
    while i < len(lines) and lines[i].startswith("|"):
        i += 1
    j = i
    while j < len(lines) and not lines[j].strip():
        j += 1
    if j < len(lines) and lines[j] == "Commands:":
        j += 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        j += 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        i = j + 1
    end = start + len("\n".join(lines[:i]))
    text = text[:start] + sec.rstrip("\n") + text[end:]
    open(args.card, "w").write(re.sub(r"\n{3,}", "\n\n", text))


def sim(args):
    js = json.load(open(args.json))
    rows = ["| target | drafter | top-1 agreement | T=0 chain 4 | T=0 tree (3,2,2,1,1) | T=0 tree (3,3,2,1) |",
            "|---|---|---|---|---|---|"]
    for t, ds in js["results"].items():
        for d, r in ds.items():
            if args.role not in (t, d) and not (args.role.endswith("drafter") and d in ("mamba-drafter",
                                                                                          "transformer-drafter")):
                continue
            rows.append("| %s | %s | %.3f | %.2f | %.2f | %.2f |" % (t, d, r["top1_agree"], r["tau_chain4"],
                                                                      r["tau_tree32211"], r["tau_tree3321"]))
    sec = ("## Simulated acceptance (trainer, not treespec)\n\n"
           "`tools/train/sim_acceptance.py`: greedy continuations (up to %d tokens) of %d held-out story openings "
           "(val split, 8-32 tokens) by each target, then one teacher-forced pass of each drafter; along the "
           "accepted path a drafter sees the target's own tokens, so depth d is accepted iff the target's token is "
           "in the drafter's top-w_d. τ counts accepted tokens + the bonus token per target step. "
           "`mamba-drafter` / `transformer-drafter` are the demo Llama target's drafters (`../mamba-drafter`, "
           "`../transformer-drafter`), shown for comparison.\n\n" % (js["max_len"], js["num_prompts"])
           + "\n".join(rows) + "\n")
    cmp = []
    for t, ds in js["results"].items():
        new = [r["tau_chain4"] for d, r in ds.items() if d.startswith("hybrid-")]
        old = [r["tau_chain4"] for d, r in ds.items() if d in ("mamba-drafter", "transformer-drafter")]
        if new and old:
            cmp.append("against %s, chain-4 τ %.2f (best of the hybrid's drafters) vs %.2f (best of the demo "
                       "target's)" % (t, max(new), max(old)))
    if cmp:
        sec += "\nSummary: " + "; ".join(cmp) + ".\n"
    text = open(args.card).read()
    marker = "## Simulated acceptance (trainer, not treespec)"
    if marker in text:
        head, rest = text.split(marker, 1)
        nxt = rest.find("\n## ")
        text = head + sec + (rest[nxt + 1:] if nxt >= 0 else "")
    else:
        text = text.replace("## Licence of the inputs", sec + "\n## Licence of the inputs")
    open(args.card, "w").write(text)


def summary(args):
    out = {"profile": args.profile, "wall_s": int(args.wall),
           "stages": dict(s.split("=", 1) for s in args.status), "models": {}}
    for name in ("hybrid-init", "hybrid", "mamba2", "mamba", "transformer"):
        r = res(args.work, name)
        if not r:
            continue
        keys = ("arch", "params", "steps", "tokens_seen", "train_time_s", "tokens_per_s", "last_logged_loss",
                "val_loss", "device", "corpus_val", "distill_val", "warm_started_params", "layerwise_steps",
                "layerwise_tokens", "layerwise_time_s", "val_after_warm_start", "val_after_layerwise")
        out["models"][name] = {k: r[k] for k in keys if k in r}
    p = os.path.join(args.work, "run", "sim_acceptance.json")
    if os.path.exists(p):
        out["sim_acceptance"] = json.load(open(p))["results"]
    print(json.dumps(out, indent=2))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["notes", "command", "data", "sim", "finish", "measured", "summary"])
    ap.add_argument("--role")
    ap.add_argument("--work")
    ap.add_argument("--teacher", default="models/demo/target")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--card")
    ap.add_argument("--json")
    ap.add_argument("--wall", default=0)
    ap.add_argument("--status", nargs="*", default=[])
    ap.add_argument("--bench", nargs="+", default=[], help="measured: acceptance_bench --markdown outputs")
    ap.add_argument("--note", default="", help="measured: a sentence appended to the table's description")
    args = ap.parse_args()
    if args.what in ("notes", "command", "data"):
        sys.stdout.write({"notes": notes, "command": command, "data": data}[args.what](args))
        if args.what != "notes":
            sys.stdout.write("\n")
    else:
        {"sim": sim, "finish": finish, "measured": measured, "summary": summary}[args.what](args)


if __name__ == "__main__":
    main()
