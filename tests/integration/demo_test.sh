#!/usr/bin/env bash
# `make demo` (tools/demo.sh) must exit 0 after streaming every completion,
# exit non-zero when a service cannot start, and in both cases leave no
# process behind. Each run gets its own session so that anything it leaves is
# found with pgrep -s.
#   demo_test.sh SOURCE_DIR BUILD_DIR
set -u
cd "$1" || exit 1
BUILD=$2
OUT=$(mktemp -d /tmp/treespec-demo-test.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
fail=0

run_demo() {  # run_demo LOG [env assignments...]
  local log=$1; shift
  env "$@" setsid bash tools/demo.sh "$BUILD" >"$log" 2>&1 &
  local sid=$!
  wait "$sid"
  local rc=$?
  sleep 0.5
  if pgrep -s "$sid" >/dev/null; then
    echo "FAIL: processes left behind by the demo:"; pgrep -a -s "$sid"
    pkill -KILL -s "$sid"
    fail=1
  fi
  return "$rc"
}

if run_demo "$OUT/ok.log"; then
  grep -q '^== demo finished' "$OUT/ok.log" || { echo "FAIL: no '== demo finished'"; fail=1; }
  n=$(grep -c 'mean accepted length' "$OUT/ok.log")
  [ "$n" -ge 4 ] || { echo "FAIL: expected at least 4 completions with statistics, got $n"; fail=1; }
  # With the SmolLM2 GGUF present, the chat section (OpenAI endpoint) must run through.
  if [ -f "${TREESPEC_SHARED_MODELS:-../shared/models}/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    grep -q '^== chat demo finished' "$OUT/ok.log" || { echo "FAIL: no '== chat demo finished'"; fail=1; }
  fi
else
  echo "FAIL: demo exited non-zero"; cat "$OUT/ok.log"; fail=1
fi

# A target that cannot load: the demo must fail, and still clean up.
mkdir -p "$OUT/broken/target"
echo '{' >"$OUT/broken/target/config.json"
if run_demo "$OUT/broken.log" TREESPEC_DEMO_MODELS="$OUT/broken"; then
  echo "FAIL: demo with a broken target exited 0"; cat "$OUT/broken.log"; fail=1
fi

[ "$fail" = 0 ] && echo "demo_test: ok"
exit "$fail"
