#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang with ASan + UBSan, in
# build-fuzz/) and runs each for a bounded time from its seed corpus
# (tests/fuzz/corpus/<target>/, never written to: new inputs go to
# build-fuzz/corpus/). Fails if any target crashes, leaks, hits undefined
# behaviour, times out on one input or runs out of memory; the input is left
# in build-fuzz/artifacts/.
#
#   tools/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET ...]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
shift || true
BUILD=${FUZZ_BUILD:-build-fuzz}
JOBS=${JOBS:-$(nproc)}

bash tools/install_deps.sh fuzz
start=$(date +%s)
if [ ! -f "$BUILD/build.ninja" ]; then
  launcher=""
  if command -v ccache >/dev/null; then launcher="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"; fi
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTREESPEC_FUZZ=ON -DTREESPEC_CUDA=OFF $launcher
fi
cmake --build "$BUILD" -j "$JOBS"
built=$(date +%s)
echo "fuzz build: $((built - start)) s"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for bin in "$BUILD"/bin/*_fuzz; do targets+=("$(basename "$bin" _fuzz)"); done
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
summary=()
mkdir -p "$BUILD/artifacts"
for t in "${targets[@]}"; do
  seeds="tests/fuzz/corpus/$t"
  work="$BUILD/corpus/$t"
  log="$BUILD/artifacts/$t.log"
  if [ ! -d "$seeds" ]; then echo "no seed corpus $seeds" >&2; exit 1; fi
  mkdir -p "$work"
  dict=()
  case "$t" in
    model_config|tokenizer_json|tokenizer_config|openai_request) dict=(-dict=tests/fuzz/json.dict) ;;
    chat_template) dict=(-dict=tests/fuzz/chat_template.dict) ;;
  esac
  echo "== $t: ${SECONDS_PER_TARGET}s"
  t0=$(date +%s)
  if "$BUILD/bin/${t}_fuzz" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 \
      -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 "${dict[@]}" \
      -artifact_prefix="$BUILD/artifacts/$t-" "$work" "$seeds" >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$t")
    tail -n 60 "$log" >&2
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || echo "?")
  summary+=("$(printf '%-18s %-7s %6s s %10s runs %6s edges' "$t" "$status" \
    "$(($(date +%s) - t0))" "$runs" "$cov")")
done
printf '%s\n' "target             status  time       executions  coverage" "${summary[@]}"
echo "fuzz build $((built - start)) s, runs $(($(date +%s) - built)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz targets failed: ${failed[*]} (inputs and logs in $BUILD/artifacts/)" >&2
  exit 1
fi
