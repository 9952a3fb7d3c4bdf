#!/usr/bin/env python3
"""Writes MODEL_CARD.md of an EAGLE head from train_eagle.py's result JSON.

  python tools/train/eagle_card.py --result out/eagle/result_eagle.json --out models/demo/eagle-head \
      [--acceptance FILE.md]   (treespec's acceptance_bench --markdown table, pasted in as is)
"""

import argparse
import json
import os

KIND_TEXT = {
    "eagle": "EAGLE-1 head (paper 002 Sec. 3): FC over [feature ; embedding of the next token] (2H -> H) and one "
             "Llama decoder layer, reading the target's last-layer feature (the residual stream after layer 7, "
             "before the final norm). Loss: smooth-L1 regression of the next feature + 0.1 x cross-entropy "
             "against the target's next-token distribution, with uniform noise (0.1 x feature RMS) on the input "
             "features; teacher-forced (one step).",
    "eagle3": "EAGLE-3 head (arXiv 2503.01840): the target's low, middle and high features (layers 2, 4, 5: the "
              "rule (2, L/2, L-3)) fused by an FC (3H -> H), then FC over [fused ; embedding of the next token] "
              "(2H -> H) and one Llama decoder layer. Loss: cross-entropy against the target's next-token "
              "distribution only, summed over 3 unrolled steps of training-time test (step j >= 1 reads the "
              "head's own output of step j-1 at position t+j, attending the real rows up to t and its own "
              "draft path), no feature regression.",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--result", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--acceptance", help="Markdown table from acceptance_bench --markdown")
    args = ap.parse_args()
    with open(args.result) as f:
        r = json.load(f)
    with open(os.path.join(args.out, "config.json")) as f:
        cfg = json.load(f)
    acc = open(args.acceptance).read().strip() if args.acceptance else "(not measured yet)"
    ev = " ".join("%s %.4f" % kv for kv in r["eval"].items())
    tr = " ".join("%s %.4f" % kv for kv in r["final_train"].items())
    card = f"""# treespec demo {r['kind']} head

{KIND_TEXT[r['kind']]}

| | |
|---|---|
| kind | `{cfg['eagle_kind']}` (config.json `eagle_kind`), target layers {cfg['eagle_target_layers']} (`eagle_target_layers`) |
| target | `../target` (its `model.embed_tokens.weight` and `lm_head.weight` are read from the target's checkpoint at load time; they are **not** in this directory) |
| parameters | {r['params']:,} (fc, {'fuse, ' if r['kind'] == 'eagle3' else ''}one decoder layer, norm) |
| weights | `model.safetensors`, float32: only the head's own tensors |
| trained on | {r['tokens_seen']:,} tokens seen ({r['steps']} steps, {r['train_seconds']:.0f} s on 1 CPU thread, torch CPU) |
| data | {r['train_sequences']} sequences, {r['train_tokens_in_data']:,} tokens: the target's own continuations (below) |
| final training loss terms | {tr} |
| held-out loss terms | {ev} |
| held-out top-1 agreement with the target, per unrolled step | {', '.join('%.3f' % x for x in r['eval_top1_per_step'])} |
| simulated T=0 chain-4 τ (trainer, teacher-forced on held-out greedy continuations) | {r['simulated_tau_chain4']:.2f} |

## Data

No corpus is used: each sequence opens with 8-32 tokens the target itself samples from BOS at
temperature 1 (one length per batch of 256), and the target continues it to 160 tokens, the first
half of each batch greedily, the rest sampled at temperature 1 (`distill_data.generate_batch`,
float32, the exported f16 target). The target's features on these sequences (PyTorch, float32;
checked against treespec's engine by `tests/golden/eagle_head_golden_test`) are the inputs, its
next-token distributions the soft labels. Held-out evaluation: the 50 prompts of
`../heldout_prompts.txt` with 96-token greedy target continuations (never trained on).

## Training command

```
{r['command']}
```

(`tools/train/train_eagle.py`; this card: `tools/train/eagle_card.py`.)

## Acceptance (measured with treespec)

`build/bin/acceptance_bench --markdown --drafters mamba=models/demo/mamba-drafter,transformer=models/demo/transformer-drafter,eagle=models/demo/eagle-head,eagle3=models/demo/eagle3-head --temperatures 0` (T=1 rows: `--drafters eagle=...,eagle3=... --temperatures 1`, multi-round verification with children drawn from the head's top-32 q; the Mamba and transformer drafters' T=1 rows are in their own cards)
(run as two invocations with the same settings, the second with `--drafters eagle3=models/demo/eagle3-head`;
worker and drafter cores in process, the 50 held-out prompts, 128 new tokens each, CPU). τ counts
accepted draft tokens plus the bonus token per target step.

{acc}

## Licence of the inputs

The target (`../target`, see its card) generated all training data; stories260K (MIT) generated
the target's corpus. Nothing else is used.
"""
    with open(os.path.join(args.out, "MODEL_CARD.md"), "w") as f:
        f.write(card)
    print("wrote", os.path.join(args.out, "MODEL_CARD.md"))


if __name__ == "__main__":
    main()
