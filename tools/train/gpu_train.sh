#!/usr/bin/env bash
# Trains the demo models from prepared data: target -> distill data -> Mamba
# and transformer drafters -> Hugging Face exports, then packs everything into
# one tar.gz. Written for ONE call on a lent H100 (the "gpu" profile fits in
# about 7.5 minutes wall), and used by make_demo_models.sh for the CPU
# ("cpu", hours) and smoke ("smoke", ~2 minutes) runs.
#
#   bash tools/train/gpu_train.sh WORK_DIR OUT_DIR [--profile gpu|cpu|smoke]
#
# WORK_DIR must hold what make_demo_models.sh --prepare-only made on the CPU:
#   WORK_DIR/tok/tokenizer.model   WORK_DIR/data/{train,val}.npy, {train,val}_starts.npy, corpus_info.json
# Writes WORK_DIR/run/ (checkpoints, distill.npz), WORK_DIR/export/{target,
# mamba-drafter,transformer-drafter}, WORK_DIR/logs/, and
#   OUT_DIR/demo-models.tar.gz  (export/ + logs/ + summary.json; split into
#                                demo-models.tar.gz.part-* if over 15 MiB)
#   OUT_DIR/summary.json
#
# Every stage has a hard time budget (seconds; env overrides):
#   TARGET_SECONDS DISTILL_SECONDS MAMBA_SECONDS TRANSFORMER_SECONDS, and
#   TOTAL_SECONDS: no stage runs past this since the script started (budgets shrink to fit).
# Other env: PYTHON, TARGET_DTYPE (f16) DRAFTER_DTYPE (f32), TARGET_MAX_EPOCHS,
#   DRAFT_MAX_EPOCHS, EXTRA_{TARGET,DISTILL,MAMBA,TRANSFORMER}_ARGS.
# Training stops at its budget with a fully decayed learning rate (train_lm.py
# --time-budget). Stages are resumable (stamps in WORK_DIR/stamps, train_lm.py
# --resume, distill_data.py partial files); a failed stage does not stop the
# others where they can still run, and the tarball is always written.
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 2; }
[ $# -ge 2 ] || usage
WORK=$(mkdir -p "$1" && cd "$1" && pwd)
OUTD=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
PROFILE=gpu
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) PROFILE=$2; shift 2 ;;
    *) usage ;;
  esac
done

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
T0=$SECONDS

for f in "$WORK/tok/tokenizer.model" "$WORK/data/train.npy" "$WORK/data/val.npy" "$WORK/data/corpus_info.json"; do
  [ -f "$f" ] || { echo "gpu_train: missing $f (run make_demo_models.sh --prepare-only first)" >&2; exit 2; }
done
mkdir -p "$WORK/run" "$WORK/export" "$WORK/logs" "$WORK/stamps"
RUN=$WORK/run EXP=$WORK/export LOGS=$WORK/logs STAMPS=$WORK/stamps
VOCAB=$("$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$WORK/data/corpus_info.json")
TRAIN_TOKENS=$("$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['train']['tokens'])" "$WORK/data/corpus_info.json")

# ---------------------------------------------------------------- profiles
# Model sizes: configs/*.json (target 7.3M, Mamba drafter 311k, transformer
# drafter 230k; drafters <= target/20 is enforced by train_lm.py).
TARGET_CFG=(--config "$HERE/configs/target.json" --set vocab_size=$VOCAB)
MAMBA_CFG=(--config "$HERE/configs/mamba_drafter.json" --set vocab_size=$VOCAB)
TRANS_CFG=(--config "$HERE/configs/transformer_drafter.json" --set vocab_size=$VOCAB)
COMMON=()
case "$PROFILE" in
  gpu)
    : "${TARGET_SECONDS:=200}" "${DISTILL_SECONDS:=50}" "${MAMBA_SECONDS:=80}" "${TRANSFORMER_SECONDS:=55}"
    : "${TOTAL_SECONDS:=480}"
    : "${TARGET_MAX_EPOCHS:=10}" "${DRAFT_MAX_EPOCHS:=8}"
    TARGET_ARGS=(--batch-size 128 --seq-len 256 --lr 1.5e-3 --warmup-steps 200 --log-every 100
                 --eval-every 500 --eval-batches 16 --ckpt-every 1000 --keep-best)
    DISTILL_ARGS=(--num-seqs 80000 --val-seqs 1024 --batch-size 2048 --max-len 257)
    MAMBA_ARGS=(--batch-size 128 --seq-len 256 --lr 3e-3 --warmup-steps 200 --kd-weight 0.5
                --log-every 100 --ckpt-every 1000 --eval-batches 16)
    TRANS_ARGS=(--batch-size 256 --seq-len 256 --lr 3e-3 --warmup-steps 200 --kd-weight 0.5
                --log-every 100 --ckpt-every 1000 --eval-batches 16)
    ;;
  cpu)  # full sizes on a CPU: hours (see README.md)
    : "${TARGET_SECONDS:=0}" "${DISTILL_SECONDS:=0}" "${MAMBA_SECONDS:=0}" "${TRANSFORMER_SECONDS:=0}"
    : "${TOTAL_SECONDS:=0}"
    : "${TARGET_MAX_EPOCHS:=100}" "${DRAFT_MAX_EPOCHS:=100}"
    : "${TARGET_TOKENS:=3.2e6}" "${MAMBA_TOKENS:=1.5e6}" "${TRANSFORMER_TOKENS:=3e6}"
    TARGET_ARGS=(--batch-size 16 --seq-len 256 --lr 1e-3 --warmup-steps 50 --log-every 10
                 --eval-every 200 --eval-batches 8 --ckpt-every 20 --tokens "$TARGET_TOKENS")
    DISTILL_ARGS=(--num-seqs 4096 --val-seqs 256 --batch-size 128 --max-len 257)
    MAMBA_ARGS=(--batch-size 16 --seq-len 256 --lr 3e-3 --warmup-steps 50 --kd-weight 0.5
                --log-every 10 --ckpt-every 20 --eval-batches 8 --tokens "$MAMBA_TOKENS")
    TRANS_ARGS=(--batch-size 16 --seq-len 256 --lr 3e-3 --warmup-steps 50 --kd-weight 0.5
                --log-every 10 --ckpt-every 50 --eval-batches 8 --tokens "$TRANSFORMER_TOKENS")
    ;;
  smoke)  # tiny models, a few dozen steps, one thread: every stage runs in ~2 minutes
    : "${TARGET_SECONDS:=120}" "${DISTILL_SECONDS:=60}" "${MAMBA_SECONDS:=60}" "${TRANSFORMER_SECONDS:=60}"
    : "${TOTAL_SECONDS:=900}"
    : "${TARGET_MAX_EPOCHS:=100}" "${DRAFT_MAX_EPOCHS:=100}"
    TARGET_CFG+=(--set hidden_size=128 --set intermediate_size=384 --set num_hidden_layers=2
                 --set num_attention_heads=4 --set num_key_value_heads=2)
    MAMBA_CFG+=(--set hidden_size=16 --set num_hidden_layers=2)
    TRANS_CFG+=(--set hidden_size=16 --set intermediate_size=48 --set num_attention_heads=2
                --set num_key_value_heads=1)
    COMMON=(--threads 1)
    TARGET_ARGS=(--batch-size 8 --seq-len 128 --lr 3e-3 --warmup-steps 5 --max-steps 40 --log-every 10
                 --eval-every 20 --eval-batches 2 --ckpt-every 10 --keep-best)
    DISTILL_ARGS=(--num-seqs 64 --val-seqs 16 --batch-size 16 --max-len 129 --threads 1)
    MAMBA_ARGS=(--batch-size 8 --seq-len 128 --lr 3e-3 --warmup-steps 5 --max-steps 30 --kd-weight 0.5
                --log-every 10 --ckpt-every 10 --eval-batches 2)
    TRANS_ARGS=(--batch-size 8 --seq-len 128 --lr 3e-3 --warmup-steps 5 --max-steps 30 --kd-weight 0.5
                --log-every 10 --ckpt-every 10 --eval-batches 2)
    ;;
  *) echo "gpu_train: unknown profile $PROFILE" >&2; exit 2 ;;
esac
: "${TARGET_DTYPE:=f16}" "${DRAFTER_DTYPE:=f32}"
# Extra flags appended to a stage's command (argparse: the last occurrence wins),
# e.g. EXTRA_TARGET_ARGS="--compile" or, for a dry run of the gpu profile on a CPU,
# EXTRA_TARGET_ARGS="--batch-size 4 --seq-len 64".
read -r -a X_TARGET <<< "${EXTRA_TARGET_ARGS:-}"
read -r -a X_DISTILL <<< "${EXTRA_DISTILL_ARGS:-}"
read -r -a X_MAMBA <<< "${EXTRA_MAMBA_ARGS:-}"
read -r -a X_TRANS <<< "${EXTRA_TRANSFORMER_ARGS:-}"
TARGET_ARGS+=("${X_TARGET[@]}") DISTILL_ARGS+=("${X_DISTILL[@]}")
MAMBA_ARGS+=("${X_MAMBA[@]}") TRANS_ARGS+=("${X_TRANS[@]}")

log() { echo "[$(date +%H:%M:%S)] gpu_train($PROFILE, +$((SECONDS - T0))s): $*"; }
STATUS=()
status() { STATUS+=("$1=$2"); log "stage $1: $2"; }

# budget STAGE_SECONDS RESERVE: the stage's budget, shrunk so that RESERVE
# seconds remain for later stages before TOTAL_SECONDS (0 = no limit).
budget() {
  local want=$1 reserve=$2
  if [ "$TOTAL_SECONDS" -le 0 ]; then echo "$want"; return; fi
  local left=$((TOTAL_SECONDS - (SECONDS - T0) - reserve))
  if [ "$want" -le 0 ] || [ "$left" -lt "$want" ]; then want=$left; fi
  [ "$want" -lt 10 ] && want=10
  echo "$want"
}

# run_logged NAME HARD_TIMEOUT CMD...: runs with output to logs/NAME.log (and stdout).
run_logged() {
  local name=$1 hard=$2; shift 2
  log "$name: $*"
  local rc
  if [ "$hard" -gt 0 ]; then
    # --foreground: stay in our process group, so a TERM to the group reaches python too
    timeout --foreground -s TERM -k 30 "$hard" "$@" 2>&1 | tee -a "$LOGS/$name.log"; rc=${PIPESTATUS[0]}
  else
    "$@" 2>&1 | tee -a "$LOGS/$name.log"; rc=${PIPESTATUS[0]}
  fi
  return "$rc"
}

max_tokens() {  # EPOCHS TOKENS_PER_EPOCH -> a --tokens cap
  "$PYTHON" -c "import sys; print(int(float(sys.argv[1]) * float(sys.argv[2])))" "$1" "$2"
}

# train NAME STAGE_SECONDS RESERVE CFG... -- ARGS...: train_lm.py with resume and a time budget.
train() {
  local name=$1 secs=$2 reserve=$3; shift 3
  if [ -f "$STAMPS/train-$name.done" ]; then status "train-$name" "done before"; return 0; fi
  local b; b=$(budget "$secs" "$reserve")
  local tb=() hard=0
  if [ "$secs" -gt 0 ] || [ "$TOTAL_SECONDS" -gt 0 ]; then tb=(--time-budget "$b"); hard=$((b + 120)); fi
  run_logged "train-$name" "$hard" "$PYTHON" "$HERE/train_lm.py" "$@" "${tb[@]}" "${COMMON[@]}" \
    --out-dir "$RUN/$name" --resume
  local rc=$?
  if [ $rc = 0 ]; then
    touch "$STAMPS/train-$name.done"; status "train-$name" ok; return 0
  fi
  status "train-$name" "FAILED (rc $rc)"; return 1
}

# export NAME ROLE DTYPE: final.pt (or, after a failure, the last ckpt.pt) -> export/ROLE.
export_model() {
  local name=$1 role=$2 dtype=$3 ck=$RUN/$1/final.pt
  if [ ! -f "$ck" ]; then
    ck=$RUN/$name/ckpt.pt
    [ -f "$ck" ] || { status "export-$role" "FAILED (no checkpoint)"; return 1; }
    log "warning: $name has no final.pt; exporting its last checkpoint"
  fi
  if run_logged "export-$role" 0 "$PYTHON" "$HERE/export_hf.py" --checkpoint "$ck" \
       --tokenizer "$WORK/tok/tokenizer.model" --out "$EXP/$role" --dtype "$dtype" --role "$role" \
       --data-desc "$(data_desc "$role")"; then
    status "export-$role" ok; return 0
  fi
  status "export-$role" "FAILED"; return 1
}

data_desc() {
  "$PYTHON" - "$1" "$WORK/data/corpus_info.json" "$RUN/distill.npz" <<'EOF'
import json, os, sys
role, info, distill = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
desc = info.get("description") or "a text corpus"
src = ("%s: %d stories (blank-line separated blocks), %d train tokens, %d held-out val tokens, tokenized "
       "with this directory's tokenizer.model (SentencePiece BPE, trained on the same corpus)" %
       (desc, info["stories"], info["train"]["tokens"], info["val"]["tokens"]))
if role == "target":
    print("Next-token prediction on " + src + ".")
else:
    d = ""
    if os.path.exists(distill):
        import numpy as np
        z = np.load(distill)
        gen = int((z["length"] - z["prompt_len"]).sum())
        d = (" %d sequences, %d tokens generated by the target (half greedy, half sampled at temperature 1) "
             "from story openings of 8-32 tokens of the train split;" % (len(z["length"]), gen))
    print("Distilled from the target (paper 003 Sec. 3.5):" + d + " loss = 0.5 x cross-entropy on the "
          "target's tokens + 0.5 x KL(target || drafter) on the target's full next-token distribution. "
          "The prompts come from " + src + ".")
EOF
}

log "work $WORK, out $OUTD, python $PYTHON, vocab $VOCAB, $TRAIN_TOKENS train tokens"
"$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" 2>&1 | tee -a "$LOGS/env.log"

# ---------------------------------------------------------------- 1. target
has_len_flag() { local x; for x in "$@"; do [ "$x" = --tokens ] || [ "$x" = --max-steps ] && return 0; done; return 1; }
TOK_FLAG=()
has_len_flag "${TARGET_ARGS[@]}" || TOK_FLAG=(--tokens "$(max_tokens "$TARGET_MAX_EPOCHS" "$TRAIN_TOKENS")")
RESERVE_AFTER_TARGET=$((DISTILL_SECONDS + MAMBA_SECONDS + TRANSFORMER_SECONDS + 60))
TARGET_OK=0
if train target "$TARGET_SECONDS" "$RESERVE_AFTER_TARGET" "${TARGET_CFG[@]}" --data "$WORK/data" \
     "${TARGET_ARGS[@]}" "${TOK_FLAG[@]}" || [ -f "$RUN/target/ckpt.pt" ]; then
  export_model target target "$TARGET_DTYPE" && TARGET_OK=1
fi
if [ $TARGET_OK = 1 ] && [ -f "$WORK/data/heldout_prompts.txt" ]; then  # greedy text, to judge coherence
  run_logged target-samples 120 "$PYTHON" "$HERE/sample.py" --model "$EXP/target" \
    --prompts-file "$WORK/data/heldout_prompts.txt" --num 5 --max-new 80 --json "$LOGS/target_samples.json" ||
    log "warning: sampling the target failed (not fatal)"
fi

# ---------------------------------------------------------------- 2. distill data
DISTILL_OK=0
if [ $TARGET_OK = 1 ]; then
  if [ -f "$STAMPS/distill.done" ]; then
    DISTILL_OK=1; status distill "done before"
  else
    b=$(budget "$DISTILL_SECONDS" $((MAMBA_SECONDS + TRANSFORMER_SECONDS + 40)))
    tb=(); hard=0
    if [ "$DISTILL_SECONDS" -gt 0 ] || [ "$TOTAL_SECONDS" -gt 0 ]; then tb=(--time-budget "$b"); hard=$((b + 120)); fi
    run_logged distill "$hard" "$PYTHON" "$HERE/distill_data.py" --target "$EXP/target" --data "$WORK/data" \
      --out "$RUN/distill.npz" "${DISTILL_ARGS[@]}" "${tb[@]}"
    rc=$?
    if [ $rc = 0 ]; then
      touch "$STAMPS/distill.done"; DISTILL_OK=1; status distill ok
    else
      status distill "FAILED (rc $rc)"
    fi
  fi
fi

# ---------------------------------------------------------------- 3. drafters
# Data: the distilled sequences, or (fallback when distillation failed) corpus
# windows with pure KD from the target. Length: the profile's --tokens /
# --max-steps, else DRAFT_MAX_EPOCHS passes over the data, within the time budget.
if [ $TARGET_OK = 1 ]; then
  if [ $DISTILL_OK = 1 ]; then
    DD=(--distill "$RUN/distill.npz" --data "$WORK/data")
    DTOK=$("$PYTHON" -c "import numpy as np,sys; print(int(np.load(sys.argv[1])['length'].sum()))" "$RUN/distill.npz")
  else
    log "warning: no distill data; the drafters fall back to pure KD on corpus windows"
    DD=(--data "$WORK/data" --kd-weight 1.0)
    DTOK=$TRAIN_TOKENS
  fi
  DCAP=(--tokens "$(max_tokens "$DRAFT_MAX_EPOCHS" "$DTOK")")
  M_CAP=("${DCAP[@]}"); has_len_flag "${MAMBA_ARGS[@]}" && M_CAP=()
  T_CAP=("${DCAP[@]}"); has_len_flag "${TRANS_ARGS[@]}" && T_CAP=()
  # (argparse: a later --kd-weight wins, so the fallback's 1.0 goes last)
  if train mamba "$MAMBA_SECONDS" $((TRANSFORMER_SECONDS + 25)) "${MAMBA_CFG[@]}" --teacher "$EXP/target" \
       "${MAMBA_ARGS[@]}" "${M_CAP[@]}" "${DD[@]}" || [ -f "$RUN/mamba/ckpt.pt" ]; then
    export_model mamba mamba-drafter "$DRAFTER_DTYPE"
  fi
  if train transformer "$TRANSFORMER_SECONDS" 15 "${TRANS_CFG[@]}" --teacher "$EXP/target" \
       "${TRANS_ARGS[@]}" "${T_CAP[@]}" "${DD[@]}" || [ -f "$RUN/transformer/ckpt.pt" ]; then
    export_model transformer transformer-drafter "$DRAFTER_DTYPE"
  fi
fi

# ---------------------------------------------------------------- 4. summary + tarball
"$PYTHON" - "$WORK" "$PROFILE" "$((SECONDS - T0))" "${STATUS[@]}" > "$OUTD/summary.json" <<'EOF'
import json, os, sys
work, profile, wall = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {"profile": profile, "wall_s": wall, "stages": dict(s.split("=", 1) for s in sys.argv[4:]), "models": {}}
for name in ("target", "mamba", "transformer"):
    p = os.path.join(work, "run", name, "result.json")
    if os.path.exists(p):
        r = json.load(open(p))
        out["models"][name] = {k: r.get(k) for k in ("arch", "params", "steps", "tokens_seen", "train_time_s",
                                                     "tokens_per_s", "last_logged_loss", "val_loss", "device")}
        for k in ("corpus_val", "distill_val"):
            if k in r:
                out["models"][name][k] = r[k]
if "target" in out["models"]:
    t = out["models"]["target"]["params"]
    for d in ("mamba", "transformer"):
        if d in out["models"]:
            out["models"][d]["fraction_of_target"] = round(out["models"][d]["params"] / t, 4)
json.dump(out, sys.stdout, indent=2)
print()
EOF
cp "$OUTD/summary.json" "$WORK/summary.json"
log "summary: $(cat "$OUTD/summary.json" | tr -s ' \n' ' ' | cut -c1-2000)"
rm -f "$OUTD"/demo-models.tar.gz "$OUTD"/demo-models.tar.gz.part-*
tar -C "$WORK" -czf "$OUTD/demo-models.tar.gz" export logs summary.json $(cd "$WORK" && ls run/*/result.json 2>/dev/null)
SIZE=$(stat -c %s "$OUTD/demo-models.tar.gz")
if [ "$SIZE" -gt $((15 * 1024 * 1024)) ]; then
  (cd "$OUTD" && split -b 15M -d demo-models.tar.gz demo-models.tar.gz.part- && rm demo-models.tar.gz)
  log "tarball $SIZE bytes, split: $(cd "$OUTD" && ls demo-models.tar.gz.part-* | tr '\n' ' ') (cat them back together)"
else
  log "tarball $OUTD/demo-models.tar.gz ($SIZE bytes)"
fi
FAILED=0
for s in "${STATUS[@]}"; do case "$s" in *FAILED*) FAILED=1 ;; esac; done
log "done in $((SECONDS - T0))s; $([ $FAILED = 1 ] && echo 'SOME STAGES FAILED' || echo 'all stages ok')"
exit $FAILED
