#!/usr/bin/env bash
# Speculation against plain decoding on a GPU, through the real services
# (issue "Speculation that always pays", bar 7): spec_bench --device cuda on
#   (1) the demo pair: the demo target with its Mamba and transformer drafters
#       and a useless drafter (the transformer drafter's weights randomized by
#       tools/models/randomize_weights.py), default (auto) trees and chain:4;
#   (2) a 7B-shape fp16 Llama with random weights (tools/models/random_llama.py,
#       the demo vocabulary) and the useless drafter, concurrency 1, 16, 64.
# Each table prints the speedup over plain decoding measured in the same run.
#
# Usage: tools/gpu_spec_check.sh .gpu     (bundle from tools/gpu_bundle.sh with
#        spec_bench, treespec-worker and treespec-drafter in .gpu/bin)
# Environment: SPEC_ROUNDS (default 2), SPEC_TREES (default "auto;chain:4"; the
# bars are on auto, the default), SPEC_SKIP_7B=1, SPEC_7B_DIR (default
# /tmp/random-7b, written if missing; 13.5 GB), SPEC_BUDGET seconds (default 300:
# the 7B part is skipped when less than 100 s are left).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DIR=$(cd "${1:-.gpu}" && pwd)
BIN="$DIR/bin"
[ -d "$DIR/lib" ] && export LD_LIBRARY_PATH="$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
T0=$(date +%s)
say() { printf '[gpu_spec %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
left() { echo $(( ${SPEC_BUDGET:-300} - ($(date +%s) - T0) )); }
ROUNDS=${SPEC_ROUNDS:-2}
TREES=${SPEC_TREES:-auto;chain:4}
USELESS=/tmp/useless-drafter
[ -f "$USELESS/model.safetensors" ] ||
  python3 tools/models/randomize_weights.py models/demo/transformer-drafter "$USELESS" >/dev/null

say "demo pair, --device cuda"
timeout $(( $(left) > 200 ? 200 : $(left) )) "$BIN/spec_bench" --bin "$BIN" --device cuda \
  --target models/demo/target \
  --drafters "mamba=models/demo/mamba-drafter,transformer=models/demo/transformer-drafter,useless:transformer=$USELESS" \
  --trees "$TREES" --concurrency 1,4,16,64 --rounds "$ROUNDS"
say "demo pair: exit $?"

if [ "${SPEC_SKIP_7B:-0}" != 1 ] && [ "$(left)" -gt 100 ]; then
  BIG=${SPEC_7B_DIR:-/tmp/random-7b}
  if [ ! -f "$BIG/model.safetensors.index.json" ]; then
    say "writing a 7B-shape random fp16 Llama to $BIG"
    python3 tools/models/random_llama.py "$BIG" || exit 1
  fi
  say "7B-shape fp16 target, useless drafter, --device cuda"
  timeout $(( $(left) - 5 )) "$BIN/spec_bench" --bin "$BIN" --device cuda --target "$BIG" \
    --drafters "useless:transformer=$USELESS" --trees "$TREES" --concurrency 1,16,64 \
    --max_tokens 128 --requests_per_client 2 --rounds "$ROUNDS"
  say "7B: exit $?"
else
  say "7B part skipped ($(left) s left)"
fi
