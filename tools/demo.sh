#!/usr/bin/env bash
# `make demo`: starts a worker, the Mamba and transformer drafters and a
# coordinator on loopback with the demo models, streams completions with their
# acceptance statistics, and shuts everything down. Exits non-zero if any step
# fails; never leaves processes behind.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
BIN="$BUILD/bin"
MODELS="${TREESPEC_DEMO_MODELS:-models/demo}"
WORK="$(mktemp -d /tmp/treespec-demo.XXXXXX)"
PIDS=()

cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT INT TERM

# start NAME VAR CMD... : runs CMD in the background, waits for its
# "listening on HOST:PORT" line and stores HOST:PORT in VAR. (Not called in a
# $(...) subshell, so that PIDS reaches the cleanup.)
start() {
  local name=$1 var=$2
  shift 2
  : >"$WORK/$name.out"
  "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  local pid=$!
  PIDS+=("$pid")
  for _ in $(seq 600); do
    if grep -q '^listening on ' "$WORK/$name.out"; then
      printf -v "$var" '%s' "$(sed -n 's/^listening on //p' "$WORK/$name.out" | head -1)"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "demo: $name exited:" >&2; cat "$WORK/$name.err" >&2; return 1
    fi
    sleep 0.1
  done
  echo "demo: $name did not start in 60 s" >&2; cat "$WORK/$name.err" >&2
  return 1
}

if [ -f "$MODELS/target/config.json" ]; then
  TARGET="$MODELS/target"
  DRAFTERS=()
  [ -f "$MODELS/mamba-drafter/config.json" ] && DRAFTERS+=("mamba:mamba:$MODELS/mamba-drafter")
  [ -f "$MODELS/transformer-drafter/config.json" ] && \
    DRAFTERS+=("transformer:transformer:$MODELS/transformer-drafter")
else
  # Before the demo models exist: stories260K (converted from ../shared) as the
  # target and as its own drafter.
  SHARED="${TREESPEC_SHARED_MODELS:-../shared/models}"
  echo "demo: $MODELS not found; using stories260K from $SHARED" >&2
  TARGET="$WORK/stories260K"
  "$BIN/treespec-convert-llama2c" --checkpoint "$SHARED/stories260K/stories260K.bin" \
    --tokenizer "$SHARED/stories260K/tok512.model" --out "$TARGET" >/dev/null
  DRAFTERS=("self:transformer:$TARGET")
fi

echo "== starting services (target $TARGET)"
start worker W "$BIN/treespec-worker" --model "$TARGET" --listen 127.0.0.1:0
echo "worker      $W"
SPEC=""
for d in "${DRAFTERS[@]}"; do
  IFS=: read -r name kind dir <<<"$d"
  start "drafter-$name" A "$BIN/treespec-drafter" --kind "$kind" --model "$dir" --listen 127.0.0.1:0
  echo "drafter     $name ($kind) $A"
  SPEC="${SPEC:+$SPEC,}$name=$A"
done
start coordinator C "$BIN/treespec-coordinator" --listen 127.0.0.1:0 --workers "$W" \
  --drafters "$SPEC" --tokenizer "$TARGET"
echo "coordinator $C"

PROMPT="${TREESPEC_DEMO_PROMPT:-Once upon a time, there was a little dog named}"
# gen LABEL ARGS...: one completion with its acceptance statistics.
gen() {
  local label=$1; shift
  echo
  echo "== $label"
  "$BIN/treespec" generate --server "$C" --prompt "$PROMPT" --max-tokens 96 "$@"
}
first=1
for d in "${DRAFTERS[@]}"; do
  IFS=: read -r name kind dir <<<"$d"
  # On a CPU a verify pass costs about one token's time per tree node, so short
  # chains win here; on a GPU a 64-node tree costs little more than one token.
  gen "greedy, drafter=$name, tree=auto (planned per step)" --drafter "$name"
  gen "greedy, drafter=$name, tree=chain:4" --drafter "$name" --tree chain:4
  gen "greedy, drafter=$name, tree=3,2,2,1,1" --drafter "$name" --tree 3,2,2,1,1
  if [ "$first" = 1 ]; then
    gen "temperature 0.8, multi-round speculative sampling, drafter=$name, tree=2,2,1,1, seed 7" \
      --drafter "$name" --tree 2,2,1,1 --temperature 0.8 --seed 7 --verify multiround
    first=0
  fi
done
gen "greedy, no drafter (plain decoding, the reference)" --drafter none
echo
echo "== demo finished"
