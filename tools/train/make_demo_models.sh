#!/usr/bin/env bash
# Regenerates treespec's demo models (models/demo/{target,mamba-drafter,
# transformer-drafter}) from ../shared/models. Long-running on a CPU (hours);
# `make demo-models` calls it. CI never runs it. See tools/train/README.md.
#
#   bash tools/train/make_demo_models.sh BUILD_DIR [options]
#
#   --work DIR         work dir (default out/demo-work; out/demo-smoke with --smoke)
#   --models-out DIR   where the exported models go (default models/demo;
#                      with --smoke: WORK/models)
#   --smoke            tiny end-to-end test: sotu.txt text instead of generated
#                      stories, vocab 512, tiny models, a few dozen steps (~3 min)
#   --prepare-only     stop after the data stages (corpus, tokenizer, token arrays):
#                      what gpu_train.sh needs on a lent GPU
#   --import TARBALL   take the trained models from gpu_train.sh's demo-models.tar.gz
#                      (or the first of its .part-* files) instead of training here
#   --profile P        training profile for gpu_train.sh: cpu (default), gpu, smoke
#   --num-samples N    stories to generate (default 60000, in --shards shards)
#   --shards K         corpus generation shards (default 6; each is resumable)
#   --jobs J           shards generated at once (default 1; one thread each)
#   --seed S           corpus seed (default 1000; sample j uses S+j)
#   --mix-sotu         also add sotu.txt (public domain) to the corpus
#
# Stages (a stamp in WORK/stamps marks each one done; rerunning skips them):
#   convert   stories260K.bin -> HF dir            (BUILD_DIR/bin/treespec-convert-llama2c)
#   corpus    stories sampled at temperature 1      (BUILD_DIR/bin/treespec-generate)
#   tokenizer SentencePiece BPE, vocab 2048        (train_tokenizer.py)
#   tokenize  uint16 token arrays, train/val split (tokenize_corpus.py)
#   train     target, distill data, drafters, exports (gpu_train.sh --profile P)
#   install   copy the exports to --models-out
#   check     check_engine.py (trainer vs treespec vs transformers logits); if
#             treespec-logits is not built yet it warns and the stage stays undone
# Environment: PYTHON (default: the repo's .venv, made and filled from
# requirements.txt when missing), SHARED_MODELS (default ../shared/models beside the repo).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 2; }
[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
BUILD=$(cd "$1" 2>/dev/null && pwd || echo "$1"); shift
WORK="" MODELS_OUT="" SMOKE=0 PREPARE_ONLY=0 IMPORT="" PROFILE="" NUM_SAMPLES=60000 SHARDS=6 JOBS=1 SEED=1000 MIX_SOTU=0
while [ $# -gt 0 ]; do
  case "$1" in
    --work) WORK=$2; shift 2 ;;
    --models-out) MODELS_OUT=$2; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    --prepare-only) PREPARE_ONLY=1; shift ;;
    --import) IMPORT=$2; shift 2 ;;
    --profile) PROFILE=$2; shift 2 ;;
    --num-samples) NUM_SAMPLES=$2; shift 2 ;;
    --shards) SHARDS=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --mix-sotu) MIX_SOTU=1; shift ;;
    *) echo "unknown option $1" >&2; usage ;;
  esac
done
if [ $SMOKE = 1 ]; then
  : "${WORK:=$REPO/out/demo-smoke}"; PROFILE=${PROFILE:-smoke}
else
  : "${WORK:=$REPO/out/demo-work}"; PROFILE=${PROFILE:-cpu}
fi
mkdir -p "$WORK/stamps" "$WORK/logs"
WORK=$(cd "$WORK" && pwd)
: "${MODELS_OUT:=$([ $SMOKE = 1 ] && echo "$WORK/models" || echo "$REPO/models/demo")}"
SHARED=${SHARED_MODELS:-$REPO/../shared/models}
if [ -z "${PYTHON:-}" ]; then
  # The repo's venv (as tools/goldens/make_goldens.sh): Debian's torch/numpy/sentencepiece + pinned pip packages.
  PYTHON="$REPO/.venv/bin/python"
  if [ ! -x "$PYTHON" ]; then
    /usr/bin/python3 -c 'import torch, numpy, sentencepiece' 2>/dev/null || {
      echo "make_demo_models: needs Debian's python3-torch python3-numpy python3-sentencepiece python3-venv" \
           "(apt-get install -y python3-torch python3-numpy python3-sentencepiece python3-venv), or PYTHON=..." >&2
      exit 1; }
    /usr/bin/python3 -m venv --system-site-packages "$REPO/.venv"
  fi
  "$PYTHON" -c "import safetensors, transformers" 2>/dev/null ||
    "$PYTHON" -m pip install --quiet -r "$HERE/requirements.txt"
fi
export PYTHON
STAMPS=$WORK/stamps
T0=$SECONDS
log() { echo "[$(date +%H:%M:%S)] make_demo_models(+$((SECONDS - T0))s): $*"; }
die() { log "ERROR: $*"; exit 1; }
done_() { [ -f "$STAMPS/$1.done" ]; }
stamp() { touch "$STAMPS/$1.done"; log "stage $1 done"; }
skip() { log "stage $1: done before (remove $STAMPS/$1.done to redo)"; }

log "build $BUILD, work $WORK, models -> $MODELS_OUT, shared $SHARED, profile $PROFILE, python $PYTHON"
"$PYTHON" -c "import torch, numpy, sentencepiece, safetensors" 2>/dev/null ||
  die "$PYTHON lacks torch/numpy/sentencepiece/safetensors (pip install -r tools/train/requirements.txt)"

# ------------------------------------------------------------------ data
if [ -z "$IMPORT" ]; then
  if [ $SMOKE = 1 ]; then
    VOCAB=512 JOIN=(--join-lines) TRIM=()
    if done_ corpus; then skip corpus; else
      [ -f "$SHARED/corpus/sotu.txt" ] || die "missing $SHARED/corpus/sotu.txt"
      head -c 300000 "$SHARED/corpus/sotu.txt" > "$WORK/corpus.txt" && stamp corpus
    fi
  else
    VOCAB=2048 JOIN=() TRIM=(--trim-incomplete)
    HF260=$WORK/stories260K-hf
    if done_ convert; then skip convert; else
      [ -x "$BUILD/bin/treespec-convert-llama2c" ] || die "missing $BUILD/bin/treespec-convert-llama2c (make build)"
      "$BUILD/bin/treespec-convert-llama2c" --checkpoint "$SHARED/stories260K/stories260K.bin" \
        --tokenizer "$SHARED/stories260K/tok512.model" --out "$HF260" 2>&1 | tee "$WORK/logs/convert.log"
      [ "${PIPESTATUS[0]}" = 0 ] || die "convert failed"
      stamp convert
    fi
    if done_ corpus; then skip corpus; else
      [ -x "$BUILD/bin/treespec-generate" ] || die "missing $BUILD/bin/treespec-generate (make build)"
      mkdir -p "$WORK/corpus"
      PER=$(( (NUM_SAMPLES + SHARDS - 1) / SHARDS ))
      gen_shard() {
        local i=$1
        # treespec-generate seeds sample j with seed + j: shard i starts at SEED + i * PER (no overlap)
        log "corpus shard $((i + 1))/$SHARDS: $PER stories, seeds $((SEED + i * PER))..$((SEED + (i + 1) * PER - 1))"
        OMP_NUM_THREADS=1 "$BUILD/bin/treespec-generate" --model "$HF260" --num_samples "$PER" --max_tokens 256 \
          --temperature 1 --seed $((SEED + i * PER)) --batch 64 --output "$WORK/corpus/part-$i.txt" \
          > "$WORK/logs/corpus-$i.log" 2>&1 || return 1
        tr '\r' '\n' < "$WORK/logs/corpus-$i.log" | tail -n 1 >> "$WORK/logs/corpus.log"
        stamp "corpus-$i"
      }
      running=0
      for i in $(seq 0 $((SHARDS - 1))); do
        if done_ "corpus-$i"; then skip "corpus-$i"; continue; fi
        gen_shard "$i" &
        running=$((running + 1))
        if [ "$running" -ge "$JOBS" ]; then wait -n || die "a corpus shard failed"; running=$((running - 1)); fi
      done
      while [ "$running" -gt 0 ]; do wait -n || die "a corpus shard failed"; running=$((running - 1)); done
      : > "$WORK/corpus.txt"
      for i in $(seq 0 $((SHARDS - 1))); do cat "$WORK/corpus/part-$i.txt" >> "$WORK/corpus.txt"; printf '\n\n' >> "$WORK/corpus.txt"; done
      stamp corpus
    fi
  fi
  INPUTS=("$WORK/corpus.txt")
  if [ $MIX_SOTU = 1 ] && [ $SMOKE = 0 ]; then INPUTS+=("$SHARED/corpus/sotu.txt"); fi
  if done_ tokenizer; then skip tokenizer; else
    "$PYTHON" "$HERE/train_tokenizer.py" --input "${INPUTS[@]}" --out-dir "$WORK/tok" --vocab-size $VOCAB \
      --num-threads "$(nproc)" "${JOIN[@]}" 2>&1 | tee "$WORK/logs/tokenizer.log"
    [ "${PIPESTATUS[0]}" = 0 ] || die "tokenizer failed"
    stamp tokenizer
  fi
  if done_ tokenize; then skip tokenize; else
    VAL=(); [ $SMOKE = 1 ] && VAL=(--val-fraction 0.05 --min-val-stories 20)
    if [ $SMOKE = 1 ]; then
      DESC="the first 300 KB of sotu.txt (US State of the Union addresses, public domain; smoke test only)"
    else
      DESC="stories sampled from stories260K (../shared/models) at temperature 1 with treespec's generation tool (treespec-generate from BOS, $NUM_SAMPLES samples of at most 256 tok512 tokens, seeds $SEED..$((SEED + NUM_SAMPLES - 1)); an unfinished last sentence is cut)"
      [ $MIX_SOTU = 1 ] && DESC="$DESC, plus sotu.txt (public domain)"
    fi
    "$PYTHON" "$HERE/tokenize_corpus.py" --input "${INPUTS[@]}" --tokenizer "$WORK/tok/tokenizer.model" \
      --out-dir "$WORK/data" "${JOIN[@]}" "${TRIM[@]}" "${VAL[@]}" --desc "$DESC" 2>&1 | tee "$WORK/logs/tokenize.log"
    [ "${PIPESTATUS[0]}" = 0 ] || die "tokenize failed"
    stamp tokenize
  fi
  if [ $PREPARE_ONLY = 1 ]; then
    log "prepared $WORK/tok and $WORK/data ($(du -sh "$WORK/data" | cut -f1)); next: gpu_train.sh on a GPU, then --import"
    exit 0
  fi
fi

# ------------------------------------------------------------------ train (or import)
if [ -n "$IMPORT" ]; then
  if done_ import; then skip import; else
    rm -rf "$WORK/imported" && mkdir -p "$WORK/imported"
    case "$IMPORT" in
      *.part-*) cat "${IMPORT%.part-*}".part-* | tar -C "$WORK/imported" -xzf - ;;
      *) tar -C "$WORK/imported" -xzf "$IMPORT" ;;
    esac || die "cannot extract $IMPORT"
    rm -rf "$WORK/export" && cp -r "$WORK/imported/export" "$WORK/export" || die "no export/ in $IMPORT"
    cp "$WORK/imported/summary.json" "$WORK/summary.json" 2>/dev/null
    stamp import
  fi
else
  if done_ train; then skip train; else
    bash "$HERE/gpu_train.sh" "$WORK" "$WORK/pack" --profile "$PROFILE" || die "training failed (see $WORK/logs)"
    stamp train
  fi
fi

# ------------------------------------------------------------------ install + check
if done_ install; then skip install; else
  mkdir -p "$MODELS_OUT"
  for m in target mamba-drafter transformer-drafter; do
    [ -f "$WORK/export/$m/model.safetensors" ] || die "missing $WORK/export/$m"
    rm -rf "${MODELS_OUT:?}/$m" && cp -r "$WORK/export/$m" "$MODELS_OUT/$m"
  done
  log "installed: $(du -sh "$MODELS_OUT"/* | tr '\n\t' '  ')"
  stamp install
fi
if done_ check; then skip check; else
  "$PYTHON" "$HERE/check_engine.py" --engine "$BUILD/bin/treespec-logits" \
    --model "$MODELS_OUT/target" "$MODELS_OUT/mamba-drafter" "$MODELS_OUT/transformer-drafter" \
    2>&1 | grep -v "fast path is not available" | tee "$WORK/logs/check.log"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) stamp check ;;
    3) log "WARNING: treespec-logits is not built; the engine check did not run (rerun this script later)" ;;
    *) die "check_engine failed (rc $rc)" ;;
  esac
fi
log "done in $((SECONDS - T0))s; models in $MODELS_OUT; summary $WORK/summary.json"
