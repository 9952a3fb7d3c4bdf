#!/usr/bin/env bash
# Makes the state-space demo models of issue 15 from the demo Llama target:
#   models/demo/hybrid-target              BambaForCausalLM (Mamba-2 + attention), f16
#   models/demo/mamba2-target              Mamba2ForCausalLM, f16
#   models/demo/hybrid-mamba-drafter       MambaForCausalLM drafter of the hybrid, f32
#   models/demo/hybrid-transformer-drafter LlamaForCausalLM drafter of the hybrid, f32
# Both targets are distilled from models/demo/target (the teacher: its logits on corpus
# windows); the drafters from the hybrid (its own continuations + its logits). CPU: about
# 3 hours (profile cpu, 1 thread); a lent GPU: one call (profile gpu, see README.md).
#
#   bash tools/train/make_hybrid_models.sh BUILD_DIR [options]
#
#   --work DIR         work dir (default out/hybrid-work; out/hybrid-smoke with --smoke)
#   --models-out DIR   where the models go (default models/demo; with --smoke: WORK/models)
#   --teacher DIR      the Llama teacher (default models/demo/target; its tokenizer is reused)
#   --smoke            tiny end-to-end test on CPU in a few minutes: the first 300 KB of
#                      sotu.txt as the corpus (no treespec binaries needed), tiny models
#   --prepare-only     stop after the data stages (what train_hybrid.sh needs on a lent GPU)
#   --import TARBALL   install train_hybrid.sh's hybrid-models.tar.gz (or its first .part-NN)
#                      instead of training here
#   --profile P        train_hybrid.sh profile: cpu (default), gpu, smoke
#   --num-samples N    stories to generate for the corpus (default 8000)
#   --seed S           corpus seed (default 200000, sample j uses S+j: disjoint from the demo
#                      target's corpus, seeds 1000..64999, so every story is new to the teacher)
#
# Stages (stamps in WORK/stamps; rerunning skips finished ones):
#   convert  stories260K.bin -> HF dir                 (BUILD_DIR/bin/treespec-convert-llama2c)
#   corpus   stories sampled at temperature 1           (BUILD_DIR/bin/treespec-generate)
#   tokenize with the teacher's tokenizer.model         (tokenize_corpus.py; 5 % val stories)
#   train    train_hybrid.sh --profile P                (or --import)
#   install  copy the four exports to --models-out
#   check    check_engine.py: trainer vs transformers (needs BambaForCausalLM: transformers >= 5,
#            e.g. PYTHON=.venv-v5/bin/python, tools/train/requirements-v5.txt) vs treespec's
#            BUILD_DIR/bin/treespec-logits (skipped when not built), chunked vs sequential scan,
#            cached decoding vs full forward
# Environment: PYTHON (default the repo's .venv-v5, then .venv), SHARED_MODELS (default
# ../shared/models beside the repo), THREADS, and train_hybrid.sh's budget variables.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 2; }
[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
BUILD=$(cd "$1" 2>/dev/null && pwd || echo "$1"); shift
WORK="" MODELS_OUT="" SMOKE=0 PREPARE_ONLY=0 IMPORT="" PROFILE="" NUM_SAMPLES=8000 SEED=200000
TEACHER=$REPO/models/demo/target
while [ $# -gt 0 ]; do
  case "$1" in
    --work) WORK=$2; shift 2 ;;
    --models-out) MODELS_OUT=$2; shift 2 ;;
    --teacher) TEACHER=$(cd "$2" && pwd); shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    --prepare-only) PREPARE_ONLY=1; shift ;;
    --import) IMPORT=$2; shift 2 ;;
    --profile) PROFILE=$2; shift 2 ;;
    --num-samples) NUM_SAMPLES=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; usage ;;
  esac
done
if [ $SMOKE = 1 ]; then
  : "${WORK:=$REPO/out/hybrid-smoke}"; PROFILE=${PROFILE:-smoke}
else
  : "${WORK:=$REPO/out/hybrid-work}"; PROFILE=${PROFILE:-cpu}
fi
mkdir -p "$WORK/stamps" "$WORK/logs"
WORK=$(cd "$WORK" && pwd)
: "${MODELS_OUT:=$([ $SMOKE = 1 ] && echo "$WORK/models" || echo "$REPO/models/demo")}"
SHARED=${SHARED_MODELS:-$REPO/../shared/models}
if [ -z "${PYTHON:-}" ]; then
  for p in "$REPO/.venv-v5/bin/python" "$REPO/.venv/bin/python" python3; do
    if "$p" -c "import torch, numpy, sentencepiece, safetensors" 2>/dev/null; then PYTHON=$p; break; fi
  done
fi
[ -n "${PYTHON:-}" ] || { echo "make_hybrid_models: no python with torch, numpy, sentencepiece, safetensors" \
  "(pip install -r tools/train/requirements-v5.txt into .venv-v5, or PYTHON=...)" >&2; exit 1; }
export PYTHON
STAMPS=$WORK/stamps
T0=$SECONDS
log() { echo "[$(date +%H:%M:%S)] make_hybrid_models(+$((SECONDS - T0))s): $*"; }
die() { log "ERROR: $*"; exit 1; }
done_() { [ -f "$STAMPS/$1.done" ]; }
stamp() { touch "$STAMPS/$1.done"; log "stage $1 done"; }
skip() { log "stage $1: done before (remove $STAMPS/$1.done to redo)"; }

log "build $BUILD, work $WORK, models -> $MODELS_OUT, teacher $TEACHER, profile $PROFILE, python $PYTHON"
[ -f "$TEACHER/tokenizer.model" ] || die "missing $TEACHER/tokenizer.model"

# ------------------------------------------------------------------ data
if [ -z "$IMPORT" ]; then
  if [ $SMOKE = 1 ]; then
    JOIN=(--join-lines) TRIM=() VAL=(--val-fraction 0.05 --min-val-stories 20)
    DESC="the first 300 KB of sotu.txt (US State of the Union addresses, public domain; smoke test only)"
    if done_ corpus; then skip corpus; else
      [ -f "$SHARED/corpus/sotu.txt" ] || die "missing $SHARED/corpus/sotu.txt"
      head -c 300000 "$SHARED/corpus/sotu.txt" > "$WORK/corpus.txt" && stamp corpus
    fi
  else
    JOIN=() TRIM=(--trim-incomplete) VAL=(--val-fraction 0.05 --min-val-stories 300)
    DESC="stories sampled from stories260K (../shared/models) at temperature 1 with treespec's generation tool (treespec-generate from BOS, $NUM_SAMPLES samples of at most 256 tok512 tokens, seeds $SEED..$((SEED + NUM_SAMPLES - 1)), disjoint from the demo target's corpus seeds 1000..64999; an unfinished last sentence is cut)"
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
      log "corpus: $NUM_SAMPLES stories, seeds $SEED..$((SEED + NUM_SAMPLES - 1))"
      OMP_NUM_THREADS=1 "$BUILD/bin/treespec-generate" --model "$HF260" --num_samples "$NUM_SAMPLES" \
        --max_tokens 256 --temperature 1 --seed "$SEED" --batch 64 --device cpu:1 \
        --output "$WORK/corpus/part-0.txt" > "$WORK/logs/corpus-0.log" 2>&1 || die "corpus generation failed"
      cp "$WORK/corpus/part-0.txt" "$WORK/corpus.txt"
      stamp corpus
    fi
  fi
  if done_ tokenize; then skip tokenize; else
    "$PYTHON" "$HERE/tokenize_corpus.py" --input "$WORK/corpus.txt" --tokenizer "$TEACHER/tokenizer.model" \
      --out-dir "$WORK/data" "${JOIN[@]}" "${TRIM[@]}" "${VAL[@]}" --desc "$DESC" 2>&1 | tee "$WORK/logs/tokenize.log"
    [ "${PIPESTATUS[0]}" = 0 ] || die "tokenize failed"
    stamp tokenize
  fi
  if [ $PREPARE_ONLY = 1 ]; then
    log "prepared $WORK/data ($(du -sh "$WORK/data" | cut -f1)); next: train_hybrid.sh on a GPU, then --import"
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
    bash "$HERE/train_hybrid.sh" "$WORK" "$WORK/pack" --profile "$PROFILE" --teacher "$TEACHER" ||
      die "training failed (see $WORK/logs)"
    stamp train
  fi
fi

# ------------------------------------------------------------------ install + check
MODELS=(hybrid-target mamba2-target hybrid-mamba-drafter hybrid-transformer-drafter)
if done_ install; then skip install; else
  mkdir -p "$MODELS_OUT"
  for m in "${MODELS[@]}"; do
    [ -f "$WORK/export/$m/model.safetensors" ] || die "missing $WORK/export/$m"
    rm -rf "${MODELS_OUT:?}/$m" && cp -r "$WORK/export/$m" "$MODELS_OUT/$m"
  done
  log "installed: $(du -sh "${MODELS[@]/#/$MODELS_OUT/}" | tr '\n\t' '  ')"
  stamp install
fi
if done_ check; then skip check; else
  "$PYTHON" -c "import transformers; transformers.BambaForCausalLM" 2>/dev/null ||
    log "WARNING: $PYTHON's transformers has no BambaForCausalLM; the hybrid's transformers check will fail (use the v5 venv)"
  ENGINE=(--no-engine)  # treespec's own logits too, when built
  [ -x "$BUILD/bin/treespec-logits" ] && ENGINE=(--engine "$BUILD/bin/treespec-logits")
  "$PYTHON" "$HERE/check_engine.py" "${ENGINE[@]}" --model "${MODELS[@]/#/$MODELS_OUT/}" \
    2>&1 | grep -v "fast path is not available\|falling back to its reference\|Loading weights" | tee "$WORK/logs/check.log"
  rc=${PIPESTATUS[0]}
  case $rc in
    0|3) stamp check ;;
    *) die "check_engine failed (rc $rc)" ;;
  esac
fi
log "done in $((SECONDS - T0))s; models in $MODELS_OUT; summary $WORK/summary.json"
