#!/usr/bin/env bash
# CPU smoke test of the whole demo-model pipeline (~5 minutes on 2 busy cores):
#   1. the unit tests (test_models.py: scans, HF parity, KV cache, export round trip)
#   2. make_demo_models.sh --smoke: sotu.txt text, tokenizer, token arrays, tiny
#      target, distill data, both drafters, exports, check_engine
#   3. the same command again: every stage must be skipped (stamps)
#   4. an interrupted run (SIGTERM mid-training) that must resume from its checkpoint
#   5. a dry run of gpu_train.sh's gpu profile (its real flags, time budgets and
#      tarball; batches shrunk by EXTRA_*_ARGS so it runs on a CPU)
#
#   bash tools/train/smoke_test.sh [WORK_DIR]     (PYTHON=... to pick the interpreter)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PY=${PYTHON:-$REPO/.venv/bin/python}
export PYTHON=$PY
WORK=${1:-$(mktemp -d /tmp/treespec-train-smoke.XXXXXX)}
mkdir -p "$WORK"
BUILD=${BUILD_DIR:-$REPO/build}
T0=$SECONDS
say() { echo "=== smoke_test (+$((SECONDS - T0))s): $*"; }
fail() { echo "=== smoke_test: FAILED: $*" >&2; exit 1; }

say "1. unit tests ($PY)"
(cd "$REPO" && "$PY" -m pytest -q tools/train/test_models.py) || fail "unit tests"

say "2. make_demo_models.sh --smoke (work $WORK/smoke)"
bash "$HERE/make_demo_models.sh" "$BUILD" --smoke --work "$WORK/smoke" > "$WORK/run1.log" 2>&1 ||
  { tail -30 "$WORK/run1.log"; fail "pipeline (log $WORK/run1.log)"; }
grep -E "final|check|ok$|WARNING" "$WORK/run1.log" | grep -v "^\[.*step " | tail -20
for m in target mamba-drafter transformer-drafter; do
  for f in config.json model.safetensors tokenizer.model tokenizer_config.json generation_config.json MODEL_CARD.md; do
    [ -f "$WORK/smoke/models/$m/$f" ] || fail "missing $m/$f"
  done
done

say "3. rerun: every stage must be skipped"
bash "$HERE/make_demo_models.sh" "$BUILD" --smoke --work "$WORK/smoke" > "$WORK/run2.log" 2>&1 || fail "rerun"
if grep -qE "step [0-9]+/" "$WORK/run2.log"; then fail "the rerun trained again"; fi
grep -c "done before" "$WORK/run2.log" | xargs echo "stages skipped:"

say "4. interrupted training resumes"
R=$WORK/resume
mkdir -p "$R" && cp -r "$WORK/smoke/tok" "$WORK/smoke/data" "$R/"
setsid bash "$HERE/gpu_train.sh" "$R" "$R/out" --profile smoke > "$R/a.log" 2>&1 &
PID=$!
for _ in $(seq 1 240); do grep -q "step 20/" "$R/a.log" 2>/dev/null && break; sleep 0.5; done
kill -TERM -- "-$PID" 2>/dev/null || true
wait "$PID" 2>/dev/null || true
[ -f "$R/run/target/ckpt.pt" ] || fail "no checkpoint after the interruption"
bash "$HERE/gpu_train.sh" "$R" "$R/out" --profile smoke > "$R/b.log" 2>&1 || fail "resumed run (log $R/b.log)"
grep -q "resuming from" "$R/b.log" || fail "the rerun did not resume"
grep -h "resuming from\|all stages ok" "$R/b.log"

say "5. dry run of the gpu profile on the CPU"
G=$WORK/gpudry
mkdir -p "$G" && cp -r "$WORK/smoke/tok" "$WORK/smoke/data" "$G/"
TARGET_SECONDS=20 DISTILL_SECONDS=10 MAMBA_SECONDS=10 TRANSFORMER_SECONDS=10 TOTAL_SECONDS=150 \
EXTRA_TARGET_ARGS="--batch-size 4 --seq-len 64 --threads 1 --log-every 10 --eval-every 20 --eval-batches 2" \
EXTRA_DISTILL_ARGS="--num-seqs 32 --val-seqs 8 --batch-size 8 --max-len 65 --threads 1" \
EXTRA_MAMBA_ARGS="--batch-size 4 --seq-len 64 --threads 1 --log-every 10 --eval-batches 2" \
EXTRA_TRANSFORMER_ARGS="--batch-size 4 --seq-len 64 --threads 1 --log-every 10 --eval-batches 2" \
  bash "$HERE/gpu_train.sh" "$G" "$G/out" > "$G/log" 2>&1 || { tail -30 "$G/log"; fail "gpu profile dry run"; }
tar -tzf "$G/out/demo-models.tar.gz" > "$G/tar.list" || fail "tarball unreadable"
for m in target mamba-drafter transformer-drafter; do
  grep -q "export/$m/model.safetensors" "$G/tar.list" || fail "tarball lacks export/$m"
done
grep -E "training done|time budget|tarball" "$G/log" | tail -8

say "all passed; work dir $WORK"
