#!/usr/bin/env bash
# Trains the state-space demo targets and the hybrid's drafters from prepared data:
#   hybrid-init  warm start of a Bamba hybrid from the demo Llama target + layer-wise
#                fit of its token mixers (hybrid_init.py)
#   hybrid       end-to-end distillation from the demo target (train_lm.py --init,
#                pure KL on corpus windows)                        -> export/hybrid-target (f16)
#   mamba2       a Mamba2ForCausalLM distilled from the demo target (train_lm.py,
#                pure KL on corpus windows)                        -> export/mamba2-target (f16)
#   distill      the hybrid's own continuations of story openings (distill_data.py,
#                the hybrid's cache: chunked prefill + recurrent / KV-cache decoding)
#   mamba, transformer
#                drafters distilled from the hybrid (train_lm.py --distill --teacher,
#                KD 0.5, <= 1/20 of the hybrid)  -> export/hybrid-{mamba,transformer}-drafter (f32)
#   sim          simulated T=0 acceptance of the drafters against both targets (sim_acceptance.py)
# then packs export/ + logs/ + results into one tar.gz. make_hybrid_models.sh calls it for the
# cpu and smoke profiles; the gpu profile is ONE call on a lent GPU (about 8 minutes).
#
#   bash tools/train/train_hybrid.sh WORK_DIR OUT_DIR [--profile gpu|cpu|smoke] [--teacher DIR]
#
# WORK_DIR must hold what make_hybrid_models.sh --prepare-only made:
#   WORK_DIR/data/{train,val}.npy, {train,val}_starts.npy, corpus_info.json (tokenized with the
#   teacher's tokenizer). The teacher (default models/demo/target) is a tracked directory.
# Writes WORK_DIR/run/, WORK_DIR/export/{hybrid-target,mamba2-target,hybrid-mamba-drafter,
# hybrid-transformer-drafter}, WORK_DIR/logs/, OUT_DIR/hybrid-models.tar.gz (split into
# .part-NN files over 15 MiB) and OUT_DIR/summary.json.
#
# Per-stage time budgets (seconds; env overrides): INIT_SECONDS HYBRID_SECONDS MAMBA2_SECONDS
# DISTILL_SECONDS MAMBA_SECONDS TRANSFORMER_SECONDS; TOTAL_SECONDS caps the whole run (later
# budgets shrink to fit; 0 = none). Other env: PYTHON, THREADS (CPU torch threads),
# EXTRA_{INIT,HYBRID,MAMBA2,DISTILL,MAMBA,TRANSFORMER}_ARGS (appended; argparse: last wins).
# DRAFTER_INIT=1 starts each drafter from the demo Llama target's drafter of the same
# architecture (models/demo/{mamba,transformer}-drafter: same vocabulary and sizes, and the hybrid
# imitates that Llama closely), then distils it from the hybrid; 0 (the default of the cpu and
# gpu profiles, and what made the committed drafters) trains them from scratch. The smoke profile
# defaults to 1 so that the warm start stays tested. With DRAFTER_INIT=1 a lower learning rate
# suits better, e.g. EXTRA_MAMBA_ARGS="--lr 1e-3 --warmup-steps 20" (and EXTRA_TRANSFORMER_ARGS);
# a full warm-started run has not been made yet.
# Stages are resumable (stamps in WORK_DIR/stamps, train_lm.py --resume, distill_data.py
# partial files); a failed stage does not stop the others that can still run.
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 2; }
[ $# -ge 2 ] || usage
WORK=$(mkdir -p "$1" && cd "$1" && pwd)
OUTD=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PROFILE=gpu
TEACHER=$REPO/models/demo/target
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) PROFILE=$2; shift 2 ;;
    --teacher) TEACHER=$(cd "$2" && pwd); shift 2 ;;
    *) usage ;;
  esac
done
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
T0=$SECONDS
for f in "$WORK/data/train.npy" "$WORK/data/val.npy" "$WORK/data/corpus_info.json" "$TEACHER/config.json" \
         "$TEACHER/model.safetensors" "$TEACHER/tokenizer.model"; do
  [ -f "$f" ] || { echo "train_hybrid: missing $f (run make_hybrid_models.sh --prepare-only first)" >&2; exit 2; }
done
mkdir -p "$WORK/run" "$WORK/export" "$WORK/logs" "$WORK/stamps"
RUN=$WORK/run EXP=$WORK/export LOGS=$WORK/logs STAMPS=$WORK/stamps
TOK=$TEACHER/tokenizer.model

# ---------------------------------------------------------------- profiles
HYBRID_CFG=(--config "$HERE/configs/hybrid_target.json")
MAMBA2_CFG=(--config "$HERE/configs/mamba2_target.json")
MAMBA_CFG=(--config "$HERE/configs/mamba_drafter.json")
TRANS_CFG=(--config "$HERE/configs/transformer_drafter.json")
COMMON=()
case "$PROFILE" in
  gpu)  # one call on a lent H100; the corpus is small (~1.1 M tokens), so epochs cap the targets
    : "${INIT_SECONDS:=60}" "${HYBRID_SECONDS:=150}" "${MAMBA2_SECONDS:=100}" "${DISTILL_SECONDS:=40}"
    : "${MAMBA_SECONDS:=60}" "${TRANSFORMER_SECONDS:=40}" "${TOTAL_SECONDS:=540}"
    : "${TARGET_TOKENS:=200e6}" "${DRAFT_TOKENS:=60e6}"
    INIT_ARGS=(--batch-size 64 --seq-len 256 --lr 1.5e-3 --warmup-steps 30 --eval-batches 16 --log-every 50)
    HYBRID_ARGS=(--batch-size 64 --seq-len 256 --lr 6e-4 --warmup-steps 100 --log-every 100 --eval-every 500
                 --eval-batches 16 --ckpt-every 1000 --keep-best --tokens "$TARGET_TOKENS")
    MAMBA2_ARGS=(--batch-size 64 --seq-len 256 --lr 2e-3 --warmup-steps 200 --log-every 100 --eval-every 500
                 --eval-batches 16 --ckpt-every 1000 --keep-best --tokens "$TARGET_TOKENS")
    DISTILL_ARGS=(--num-seqs 40000 --val-seqs 512 --batch-size 2048 --max-len 257)
    MAMBA_ARGS=(--batch-size 128 --seq-len 256 --lr 3e-3 --warmup-steps 200 --log-every 100 --ckpt-every 1000
                --eval-batches 16 --tokens "$DRAFT_TOKENS")
    TRANS_ARGS=(--batch-size 256 --seq-len 256 --lr 3e-3 --warmup-steps 200 --log-every 100 --ckpt-every 1000
                --eval-batches 16 --tokens "$DRAFT_TOKENS")
    SIM_ARGS=(--num-prompts 256 --batch-size 256)
    ;;
  cpu)  # what made the committed models: 1 thread, 2.75 hours of stage budgets on a shared 2-core machine
    : "${INIT_SECONDS:=1200}" "${HYBRID_SECONDS:=2700}" "${MAMBA2_SECONDS:=3000}" "${DISTILL_SECONDS:=600}"
    : "${MAMBA_SECONDS:=1800}" "${TRANSFORMER_SECONDS:=600}" "${TOTAL_SECONDS:=0}"
    : "${TARGET_TOKENS:=100e6}" "${DRAFT_TOKENS:=100e6}"
    COMMON=(--threads "${THREADS:-1}")
    INIT_ARGS=(--batch-size 16 --seq-len 256 --lr 1.5e-3 --warmup-steps 30 --eval-batches 16 --log-every 10)
    HYBRID_ARGS=(--batch-size 16 --seq-len 256 --lr 6e-4 --warmup-steps 30 --log-every 10 --eval-every 200
                 --eval-batches 16 --ckpt-every 20 --tokens "$TARGET_TOKENS")
    MAMBA2_ARGS=(--batch-size 16 --seq-len 256 --lr 2e-3 --warmup-steps 50 --log-every 10 --eval-every 200
                 --eval-batches 16 --ckpt-every 20 --tokens "$TARGET_TOKENS")
    DISTILL_ARGS=(--num-seqs 4096 --val-seqs 256 --batch-size 128 --max-len 257)
    MAMBA_ARGS=(--batch-size 16 --seq-len 256 --lr 3e-3 --warmup-steps 50 --log-every 10 --ckpt-every 20
                --eval-batches 8 --tokens "$DRAFT_TOKENS")
    TRANS_ARGS=(--batch-size 16 --seq-len 256 --lr 3e-3 --warmup-steps 50 --log-every 10 --ckpt-every 50
                --eval-batches 8 --tokens "$DRAFT_TOKENS")
    SIM_ARGS=(--num-prompts 128 --batch-size 64)
    ;;
  smoke)  # tiny models, a few dozen steps, one thread: a few minutes
    : "${INIT_SECONDS:=30}" "${HYBRID_SECONDS:=60}" "${MAMBA2_SECONDS:=60}" "${DISTILL_SECONDS:=60}"
    : "${MAMBA_SECONDS:=60}" "${TRANSFORMER_SECONDS:=60}" "${TOTAL_SECONDS:=900}"
    HYBRID_CFG+=(--set mamba_n_heads=4 --set mamba_d_head=128 --set mamba_d_state=16)
    MAMBA2_CFG+=(--set hidden_size=64 --set num_hidden_layers=2 --set state_size=16)
    : "${DRAFTER_INIT:=1}"  # drafters at full size: their warm start is part of what the smoke run tests
    COMMON=(--threads 1)
    INIT_ARGS=(--batch-size 4 --seq-len 64 --lr 2e-3 --warmup-steps 2 --max-steps 6 --eval-batches 2 --log-every 2)
    HYBRID_ARGS=(--batch-size 4 --seq-len 64 --lr 6e-4 --warmup-steps 2 --max-steps 12 --log-every 4 --eval-every 6
                 --eval-batches 2 --ckpt-every 4 --keep-best)
    MAMBA2_ARGS=(--batch-size 4 --seq-len 64 --lr 3e-3 --warmup-steps 2 --max-steps 12 --log-every 4 --eval-every 6
                 --eval-batches 2 --ckpt-every 4)
    DISTILL_ARGS=(--num-seqs 16 --val-seqs 8 --batch-size 8 --max-len 65)
    MAMBA_ARGS=(--batch-size 4 --seq-len 64 --lr 3e-3 --warmup-steps 2 --max-steps 10 --log-every 5 --ckpt-every 5
                --eval-batches 2)
    TRANS_ARGS=(--batch-size 4 --seq-len 64 --lr 3e-3 --warmup-steps 2 --max-steps 10 --log-every 5 --ckpt-every 5
                --eval-batches 2)
    SIM_ARGS=(--num-prompts 8 --batch-size 8 --max-len 48)
    ;;
  *) echo "train_hybrid: unknown profile $PROFILE" >&2; exit 2 ;;
esac
[ ${#COMMON[@]} -gt 0 ] && DISTILL_ARGS+=("${COMMON[@]}") && SIM_ARGS+=("${COMMON[@]}")
read -r -a X_INIT <<< "${EXTRA_INIT_ARGS:-}"
read -r -a X_HYBRID <<< "${EXTRA_HYBRID_ARGS:-}"
read -r -a X_MAMBA2 <<< "${EXTRA_MAMBA2_ARGS:-}"
read -r -a X_DISTILL <<< "${EXTRA_DISTILL_ARGS:-}"
read -r -a X_MAMBA <<< "${EXTRA_MAMBA_ARGS:-}"
read -r -a X_TRANS <<< "${EXTRA_TRANSFORMER_ARGS:-}"
INIT_ARGS+=("${X_INIT[@]}") HYBRID_ARGS+=("${X_HYBRID[@]}") MAMBA2_ARGS+=("${X_MAMBA2[@]}")
DISTILL_ARGS+=("${X_DISTILL[@]}") MAMBA_ARGS+=("${X_MAMBA[@]}") TRANS_ARGS+=("${X_TRANS[@]}")

log() { echo "[$(date +%H:%M:%S)] train_hybrid($PROFILE, +$((SECONDS - T0))s): $*"; }
STATUS=()
status() { STATUS+=("$1=$2"); log "stage $1: $2"; }

# budget STAGE_SECONDS RESERVE: the stage's budget, shrunk so that RESERVE seconds remain
# before TOTAL_SECONDS (0 = no limit).
budget() {
  local want=$1 reserve=$2
  if [ "$TOTAL_SECONDS" -le 0 ]; then echo "$want"; return; fi
  local left=$((TOTAL_SECONDS - (SECONDS - T0) - reserve))
  if [ "$want" -le 0 ] || [ "$left" -lt "$want" ]; then want=$left; fi
  [ "$want" -lt 10 ] && want=10
  echo "$want"
}

run_logged() {  # NAME HARD_TIMEOUT CMD...
  local name=$1 hard=$2; shift 2
  log "$name: $*"
  local rc
  if [ "$hard" -gt 0 ]; then
    timeout --foreground -s TERM -k 30 "$hard" "$@" 2>&1 | tee -a "$LOGS/$name.log"; rc=${PIPESTATUS[0]}
  else
    "$@" 2>&1 | tee -a "$LOGS/$name.log"; rc=${PIPESTATUS[0]}
  fi
  return "$rc"
}

# stage NAME SECONDS RESERVE CMD...: runs CMD with --time-budget (when budgeted), once (stamp).
stage() {
  local name=$1 secs=$2 reserve=$3; shift 3
  if [ -f "$STAMPS/$name.done" ]; then status "$name" "done before"; return 0; fi
  local b; b=$(budget "$secs" "$reserve")
  local tb=() hard=0
  if [ "$secs" -gt 0 ] || [ "$TOTAL_SECONDS" -gt 0 ]; then tb=(--time-budget "$b"); hard=$((b + 180)); fi
  run_logged "$name" "$hard" "$@" "${tb[@]}"
  local rc=$?
  if [ $rc = 0 ]; then touch "$STAMPS/$name.done"; status "$name" ok; return 0; fi
  status "$name" "FAILED (rc $rc)"; return 1
}

# export NAME ROLE DTYPE NOTES_KIND: run/NAME/final.pt (or its last ckpt.pt) -> export/ROLE + model card.
export_model() {
  local name=$1 role=$2 dtype=$3 ck=$RUN/$1/final.pt
  if [ ! -f "$ck" ]; then
    ck=$RUN/$name/ckpt.pt
    [ -f "$ck" ] || { status "export-$role" "FAILED (no checkpoint)"; return 1; }
    log "warning: $name has no final.pt; exporting its last checkpoint"
  fi
  "$PYTHON" "$HERE/hybrid_card.py" notes --role "$role" --work "$WORK" --teacher "$TEACHER" \
    --profile "$PROFILE" > "$RUN/$name/notes.md" 2>> "$LOGS/export-$role.log"
  local cmd; cmd=$("$PYTHON" "$HERE/hybrid_card.py" command --role "$role" --work "$WORK" 2>> "$LOGS/export-$role.log")
  if run_logged "export-$role" 0 "$PYTHON" "$HERE/export_hf.py" --checkpoint "$ck" --tokenizer "$TOK" \
       --out "$EXP/$role" --dtype "$dtype" --role "$role" --notes "$RUN/$name/notes.md" \
       --pipeline tools/train/make_hybrid_models.sh --command "$cmd" \
       --data-desc "$("$PYTHON" "$HERE/hybrid_card.py" data --role "$role" --work "$WORK" --teacher "$TEACHER")"; then
    "$PYTHON" "$HERE/hybrid_card.py" finish --card "$EXP/$role/MODEL_CARD.md" --role "$role"
    status "export-$role" ok; return 0
  fi
  status "export-$role" FAILED; return 1
}

log "work $WORK, out $OUTD, teacher $TEACHER, python $PYTHON"
"$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" 2>&1 | tee -a "$LOGS/env.log"
# reserve for everything after the hybrid stages
AFTER_HYBRID=$((MAMBA2_SECONDS + DISTILL_SECONDS + MAMBA_SECONDS + TRANSFORMER_SECONDS + 90))

# ---------------------------------------------------------------- 1. hybrid target
HYBRID_OK=0
if stage hybrid-init "$INIT_SECONDS" $((HYBRID_SECONDS + AFTER_HYBRID)) "$PYTHON" "$HERE/hybrid_init.py" \
     --teacher "$TEACHER" "${HYBRID_CFG[@]}" --data "$WORK/data" --out-dir "$RUN/hybrid-init" \
     "${INIT_ARGS[@]}" "${COMMON[@]}"; then
  if stage train-hybrid "$HYBRID_SECONDS" "$AFTER_HYBRID" "$PYTHON" "$HERE/train_lm.py" \
       --init "$RUN/hybrid-init/final.pt" --data "$WORK/data" --teacher "$TEACHER" --kd-weight 1.0 \
       --max-param-ratio 0 "${HYBRID_ARGS[@]}" "${COMMON[@]}" --out-dir "$RUN/hybrid" --resume ||
     [ -f "$RUN/hybrid/ckpt.pt" ]; then
    export_model hybrid hybrid-target f16 && HYBRID_OK=1
  fi
fi

# ---------------------------------------------------------------- 2. pure Mamba-2 target
if stage train-mamba2 "$MAMBA2_SECONDS" $((DISTILL_SECONDS + MAMBA_SECONDS + TRANSFORMER_SECONDS + 60)) \
     "$PYTHON" "$HERE/train_lm.py" "${MAMBA2_CFG[@]}" --data "$WORK/data" --teacher "$TEACHER" --kd-weight 1.0 \
     --max-param-ratio 0 "${MAMBA2_ARGS[@]}" "${COMMON[@]}" --out-dir "$RUN/mamba2" --resume ||
   [ -f "$RUN/mamba2/ckpt.pt" ]; then
  export_model mamba2 mamba2-target f16
fi

# ---------------------------------------------------------------- 3. distill data from the hybrid
DISTILL_OK=0
if [ $HYBRID_OK = 1 ]; then
  stage distill "$DISTILL_SECONDS" $((MAMBA_SECONDS + TRANSFORMER_SECONDS + 40)) "$PYTHON" "$HERE/distill_data.py" \
    --target "$EXP/hybrid-target" --data "$WORK/data" --out "$RUN/distill.npz" "${DISTILL_ARGS[@]}" && DISTILL_OK=1
fi

# ---------------------------------------------------------------- 4. drafters of the hybrid
MAMBA_INIT=() TRANS_INIT=()
if [ "${DRAFTER_INIT:-0}" = 1 ]; then
  [ -f "$REPO/models/demo/mamba-drafter/model.safetensors" ] && MAMBA_INIT=(--init "$REPO/models/demo/mamba-drafter")
  [ -f "$REPO/models/demo/transformer-drafter/model.safetensors" ] &&
    TRANS_INIT=(--init "$REPO/models/demo/transformer-drafter")
fi
if [ $DISTILL_OK = 1 ]; then
  DD=(--distill "$RUN/distill.npz" --data "$WORK/data" --teacher "$EXP/hybrid-target" --kd-weight 0.5)
  if stage train-mamba "$MAMBA_SECONDS" $((TRANSFORMER_SECONDS + 25)) "$PYTHON" "$HERE/train_lm.py" \
       "${MAMBA_CFG[@]}" "${MAMBA_INIT[@]}" "${DD[@]}" "${MAMBA_ARGS[@]}" "${COMMON[@]}" --out-dir "$RUN/mamba" --resume ||
     [ -f "$RUN/mamba/ckpt.pt" ]; then
    export_model mamba hybrid-mamba-drafter f32
  fi
  if stage train-transformer "$TRANSFORMER_SECONDS" 15 "$PYTHON" "$HERE/train_lm.py" \
       "${TRANS_CFG[@]}" "${TRANS_INIT[@]}" "${DD[@]}" "${TRANS_ARGS[@]}" "${COMMON[@]}" --out-dir "$RUN/transformer" \
       --resume ||
     [ -f "$RUN/transformer/ckpt.pt" ]; then
    export_model transformer hybrid-transformer-drafter f32
  fi
fi

# ---------------------------------------------------------------- 5. simulated acceptance
SIM_T=() SIM_D=()
for t in hybrid-target mamba2-target; do [ -f "$EXP/$t/model.safetensors" ] && SIM_T+=("$EXP/$t"); done
for d in hybrid-mamba-drafter hybrid-transformer-drafter; do [ -f "$EXP/$d/model.safetensors" ] && SIM_D+=("$EXP/$d"); done
if [ ${#SIM_T[@]} -gt 0 ] && [ ${#SIM_D[@]} -gt 0 ]; then
  if [ -f "$STAMPS/sim.done" ]; then status sim "done before"
  elif run_logged sim 900 "$PYTHON" "$HERE/sim_acceptance.py" --targets "${SIM_T[@]}" --drafters "${SIM_D[@]}" \
       "$REPO/models/demo/mamba-drafter" "$REPO/models/demo/transformer-drafter" --data "$WORK/data" \
       --json "$RUN/sim_acceptance.json" "${SIM_ARGS[@]}"; then
    touch "$STAMPS/sim.done"; status sim ok
    for d in hybrid-mamba-drafter hybrid-transformer-drafter mamba2-target hybrid-target; do  # cards get the table
      [ -f "$EXP/$d/MODEL_CARD.md" ] && "$PYTHON" "$HERE/hybrid_card.py" sim --card "$EXP/$d/MODEL_CARD.md" \
        --json "$RUN/sim_acceptance.json" --role "$d"
    done
  else
    status sim FAILED
  fi
fi

# ---------------------------------------------------------------- 6. summary + tarball
"$PYTHON" "$HERE/hybrid_card.py" summary --work "$WORK" --profile "$PROFILE" --wall "$((SECONDS - T0))" \
  --status "${STATUS[@]}" > "$OUTD/summary.json"
cp "$OUTD/summary.json" "$WORK/summary.json"
log "summary: $(tr -s ' \n' ' ' < "$OUTD/summary.json" | cut -c1-3000)"
rm -f "$OUTD"/hybrid-models.tar.gz "$OUTD"/hybrid-models.tar.gz.part-*
tar -C "$WORK" -czf "$OUTD/hybrid-models.tar.gz" export logs summary.json \
  $(cd "$WORK" && ls run/*/result.json run/sim_acceptance.json 2>/dev/null)
SIZE=$(stat -c %s "$OUTD/hybrid-models.tar.gz")
if [ "$SIZE" -gt $((15 * 1024 * 1024)) ]; then
  (cd "$OUTD" && split -b 15M -d hybrid-models.tar.gz hybrid-models.tar.gz.part- && rm hybrid-models.tar.gz)
  log "tarball $SIZE bytes, split: $(cd "$OUTD" && ls hybrid-models.tar.gz.part-* | tr '\n' ' ')"
else
  log "tarball $OUTD/hybrid-models.tar.gz ($SIZE bytes)"
fi
FAILED=0
for s in "${STATUS[@]}"; do case "$s" in *FAILED*) FAILED=1 ;; esac; done
log "done in $((SECONDS - T0))s; $([ $FAILED = 1 ] && echo 'SOME STAGES FAILED' || echo 'all stages ok')"
exit $FAILED
