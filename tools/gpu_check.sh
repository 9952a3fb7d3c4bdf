#!/usr/bin/env bash
# GPU check for the CUDA backend: runs the GPU tests (backend_ops_test,
# ssm_tree_ops_test, cuda_model_test; with a pass/fail summary),
# compute-sanitizer memcheck / racecheck of the op tests, then gpu_bench, one
# 7B verify step of 1 and of 16 tokens under ncu (kernel time by name), and
# a short stree_bench (tree scan vs unrolled verification, paper 001 §5.1),
# and prints the benchmark tables last. Meant for a GPU machine;
# keeps to ~10 minutes on an H100.
#
# Usage:
#   tools/gpu_check.sh .gpu        prebuilt bundle from tools/gpu_bundle.sh
#                                  (bin/, lib/ -> LD_LIBRARY_PATH; fixtures from
#                                  tests/fixtures/models, or DIR/fixtures if present)
#   tools/gpu_check.sh DIR         any directory holding the five binaries
#   tools/gpu_check.sh             builds them here first (needs the -dev
#                                  packages: cmake -DTREESPEC_CUDA=ON
#                                  -DCMAKE_CUDA_ARCHITECTURES=90 into build-gpu)
# Environment: GPU_CHECK_NCU=0 skips the ncu step profiles.
# GPU_CHECK_SANITIZE=0 skips compute-sanitizer (memcheck of the
# f16 op tests (backend_ops_test, then ssm_tree_ops_test), racecheck of the
# attention test; run last, within
# GPU_CHECK_BUDGET seconds overall, default 600); BENCH_ARGS are passed to
# gpu_bench, STREE_ARGS replace stree_bench's short run's arguments; logs go
# to $OUT/gpu_check (if OUT is set) or /tmp/gpu_check.
# Exit status: 0 when every test passed and the benchmark ran.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOGS="${OUT:-/tmp}/gpu_check"
mkdir -p "$LOGS"
T0=$(date +%s)
say() { printf '[gpu_check %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader \
    | sed 's/^/[gpu] /'
fi

if [ $# -ge 1 ]; then
  DIR=$(cd "$1" && pwd)
  BIN="$DIR"; [ -d "$DIR/bin" ] && BIN="$DIR/bin"
  [ -d "$DIR/lib" ] && export LD_LIBRARY_PATH="$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if [ -d "$DIR/fixtures" ]; then export TREESPEC_FIXTURES="$DIR/fixtures"; fi
  [ -f "$DIR/MANIFEST" ] && head -2 "$DIR/MANIFEST" | sed 's/^/[bundle] /'
else
  say "building (cmake -DTREESPEC_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90) into $ROOT/build-gpu"
  cmake -S "$ROOT" -B "$ROOT/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTREESPEC_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 >"$LOGS/build.log" 2>&1 &&
  ninja -C "$ROOT/build-gpu" backend_ops_test ssm_tree_ops_test cuda_model_test gpu_bench stree_bench \
    >>"$LOGS/build.log" 2>&1 ||
    { tail -30 "$LOGS/build.log"; say "BUILD FAILED"; exit 1; }
  BIN="$ROOT/build-gpu/bin"
  mkdir -p "$BIN"
  cp -f "$ROOT/build-gpu/tests/backend_ops_test" "$ROOT/build-gpu/tests/ssm_tree_ops_test" \
    "$ROOT/build-gpu/tests/cuda_model_test" "$BIN/" 2>/dev/null
fi
: "${TREESPEC_FIXTURES:=$ROOT/tests/fixtures/models}"
export TREESPEC_FIXTURES

# CUDA's runtime libraries: use the loader's, else find them (toolkit or the
# nvidia-* Python wheels) and add their directories.
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
  if ldd "$BIN/backend_ops_test" 2>/dev/null | grep -q "$lib => not found"; then
    found=$(find /usr/local/cuda*/lib* /usr/local/cuda*/targets/*/lib /usr/lib /opt /usr/local/lib \
              -name "$lib" 2>/dev/null | head -1)
    if [ -n "$found" ]; then
      export LD_LIBRARY_PATH="$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
  fi
done
missing=$(for b in backend_ops_test ssm_tree_ops_test cuda_model_test gpu_bench stree_bench; do ldd "$BIN/$b" 2>&1 | grep "not found"; done | sort -u)
if [ -n "$missing" ]; then
  echo "$missing"
  say "MISSING SHARED LIBRARIES (above); LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  exit 1
fi

declare -A RESULT
FAILED_TESTS=""
run_tests() {  # name, timeout, args...
  local name=$1 limit=$2; shift 2
  say "running $name"
  timeout "$limit" "$BIN/$name" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  local passed skipped failed
  passed=$(grep -c '^\[       OK \]' "$LOGS/$name.log")
  skipped=$(grep '^\[  SKIPPED \] [A-Za-z]' "$LOGS/$name.log" | sed 's/ (.*//' | sort -u | wc -l)
  failed=$(grep '^\[  FAILED  \] [A-Za-z]' "$LOGS/$name.log" | grep -v ' listed below' | sed 's/ (.*//; s/, where .*//' | sort -u)
  if [ $rc -eq 0 ] && [ -z "$failed" ]; then
    RESULT[$name]="PASS ($passed passed, $skipped skipped)"
  else
    RESULT[$name]="FAIL (rc $rc; $passed passed, $skipped skipped)"
    FAILED_TESTS+="$failed"$'\n'
    [ $rc -ge 124 ] && FAILED_TESTS+="  $name: exit $rc (timeout or crash); last lines:"$'\n'"$(tail -5 "$LOGS/$name.log")"$'\n'
  fi
}

run_tests backend_ops_test 150
run_tests ssm_tree_ops_test 90
run_tests cuda_model_test 150
grep -h '^\[ measured \]' "$LOGS/cuda_model_test.log" "$LOGS/ssm_tree_ops_test.log" \
  > "$LOGS/measured.txt" 2>/dev/null

say "running gpu_bench ${BENCH_ARGS:-}"
timeout 240 "$BIN/gpu_bench" ${BENCH_ARGS:-} >"$LOGS/gpu_bench.log" 2>&1
BENCH_RC=$?

# Where a 7B verify step's time goes: one step of 1 and of 16 tokens under
# Nsight Compute, kernel time summed by name (cold caches: ncu flushes them
# between kernels). Skipped without ncu or with GPU_CHECK_NCU=0.
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
: >"$LOGS/ncu_steps.txt"
if [ "${GPU_CHECK_NCU:-1}" != 0 ] && [ -n "$NCU" ]; then
  for n in 1 16; do
    say "ncu: one ${n}-token 7B step"
    timeout 120 "$NCU" --profile-from-start off --clock-control none \
      --metrics gpu__time_duration.sum --csv "$BIN/gpu_bench" --profile-step "$n" \
      >"$LOGS/ncu_step$n.csv" 2>"$LOGS/ncu_step$n.err" &&
      { echo "# one ${n}-token step"; python3 "$ROOT/tools/bench/ncu_summary.py" \
          "$LOGS/ncu_step$n.csv" --top 12; } >>"$LOGS/ncu_steps.txt" 2>&1 ||
      echo "# ncu on the ${n}-token step failed (see $LOGS/ncu_step$n.err)" >>"$LOGS/ncu_steps.txt"
  done
fi

# stree_bench, short: both methods on the 130M-class shapes first (tables
# print per model, so a timeout keeps the finished ones), then the demo
# shapes; the paper's binary trees and two drafter shapes. It also checks
# that the two agree (within --tolerance on the GPU) and exits non-zero
# otherwise (3: they disagree).
STREE_DEFAULT=(--device cuda --models mamba2-130m,bamba-136m,mamba2-demo,bamba-demo
  "--trees=binary:4;binary:5;binary:6;3,2,2,1,1;4,2,2,1,1" --batches 1,4,16 --rounds 7
  --max_gib 24 --op_batches 1,16)
say "running stree_bench ${STREE_ARGS:-${STREE_DEFAULT[*]}}"
if [ -n "${STREE_ARGS:-}" ]; then
  # shellcheck disable=SC2086
  timeout 150 "$BIN/stree_bench" $STREE_ARGS >"$LOGS/stree_bench.log" 2>&1
else
  timeout 150 "$BIN/stree_bench" "${STREE_DEFAULT[@]}" >"$LOGS/stree_bench.log" 2>&1
fi
STREE_RC=$?

# Sanitizers last, inside what is left of the time budget.
left() { echo $(( ${GPU_CHECK_BUDGET:-600} - ($(date +%s) - T0) )); }
SAN="skipped"
SAN_FAIL=0
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer \
  /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
if [ "${GPU_CHECK_SANITIZE:-1}" != 0 ] && [ -n "$SANITIZER" ] && [ "$(left)" -gt 60 ]; then
  say "compute-sanitizer memcheck of the cuda_f16 op tests"
  timeout $(( $(left) > 180 ? 180 : $(left) - 30 )) "$SANITIZER" --tool memcheck --error-exitcode 9 \
    "$BIN/backend_ops_test" --gtest_filter='*cuda_f16' >"$LOGS/memcheck.log" 2>&1
  rc=$?
  case $rc in
    0) SAN="memcheck clean" ;;
    9) SAN="memcheck ERRORS (see $LOGS/memcheck.log)"; SAN_FAIL=1; FAILED_TESTS+="memcheck: $(grep -m3 -E 'Invalid|Error' "$LOGS/memcheck.log")"$'\n' ;;
    124) SAN="memcheck timed out (inconclusive)" ;;
    *) SAN="memcheck: test failures under the tool (rc $rc)" ;;
  esac
  if [ "$(left)" -gt 60 ]; then
    say "compute-sanitizer memcheck of the cuda_f16 Mamba-2 tree op tests"
    timeout $(( $(left) > 120 ? 120 : $(left) - 30 )) "$SANITIZER" --tool memcheck --error-exitcode 9 \
      "$BIN/ssm_tree_ops_test" --gtest_filter='*cuda_f16' >"$LOGS/memcheck_ssm.log" 2>&1
    rc=$?
    case $rc in
      0) SAN+="; ssm memcheck clean" ;;
      9) SAN+="; ssm memcheck ERRORS (see $LOGS/memcheck_ssm.log)"; SAN_FAIL=1; FAILED_TESTS+="memcheck ssm: $(grep -m3 -E 'Invalid|Error' "$LOGS/memcheck_ssm.log")"$'\n' ;;
      124) SAN+="; ssm memcheck timed out (inconclusive)" ;;
      *) SAN+="; ssm memcheck: test failures under the tool (rc $rc)" ;;
    esac
  fi
  say "compute-sanitizer racecheck of the cuda_f16 attention test"
  timeout $(( $(left) > 120 ? 120 : ($(left) > 20 ? $(left) - 10 : 10) )) "$SANITIZER" --tool racecheck --error-exitcode 9 \
    "$BIN/backend_ops_test" --gtest_filter='*Attention*cuda_f16' >"$LOGS/racecheck.log" 2>&1
  rc=$?
  case $rc in
    0) SAN+="; racecheck clean" ;;
    9) SAN+="; racecheck HAZARDS (see $LOGS/racecheck.log)"; SAN_FAIL=1; FAILED_TESTS+="racecheck: $(grep -m3 -iE 'hazard|error' "$LOGS/racecheck.log")"$'\n' ;;
    124) SAN+="; racecheck timed out (inconclusive)" ;;
    *) SAN+="; racecheck rc $rc" ;;
  esac
fi

echo
echo "==================== gpu_check summary ($(( $(date +%s) - T0 )) s) ===================="
for n in backend_ops_test ssm_tree_ops_test cuda_model_test; do printf '  %-18s %s\n' "$n" "${RESULT[$n]}"; done
printf '  %-18s %s\n' "sanitizer" "$SAN"
printf '  %-18s %s\n' "gpu_bench" "$([ $BENCH_RC -eq 0 ] && echo ok || echo "FAILED (rc $BENCH_RC)")"
printf '  %-18s %s\n' "stree_bench" "$([ $STREE_RC -eq 0 ] && echo ok || echo "FAILED (rc $STREE_RC; 3: the methods disagree, 124: timeout)")"
if [ -n "${FAILED_TESTS//$'\n'/}" ]; then
  echo "  failures:"; printf '%s' "$FAILED_TESTS" | sed '/^$/d; s/^/    /' | head -40
  echo "  first failure messages:"
  grep -h -A3 -E '^[^ ]*\.cc:[0-9]+: Failure' "$LOGS/backend_ops_test.log" "$LOGS/ssm_tree_ops_test.log" \
    "$LOGS/cuda_model_test.log" 2>/dev/null | head -30 | sed 's/^/    /'
fi
if [ -s "$LOGS/measured.txt" ]; then echo "  model error (measured):"; sed 's/^/    /' "$LOGS/measured.txt"; fi
echo "  logs: $LOGS"
echo "==================== gpu_bench ===================="
cat "$LOGS/gpu_bench.log"
if [ -s "$LOGS/ncu_steps.txt" ]; then
  echo "==================== ncu: kernel time of one 7B step ===================="
  cat "$LOGS/ncu_steps.txt"
fi
echo "==================== stree_bench ===================="
cat "$LOGS/stree_bench.log"
ok=1
for n in backend_ops_test ssm_tree_ops_test cuda_model_test; do [[ "${RESULT[$n]}" == PASS* ]] || ok=0; done
[ $BENCH_RC -eq 0 ] || ok=0
[ $STREE_RC -eq 0 ] || ok=0
[ $SAN_FAIL -eq 0 ] || ok=0
[ $ok -eq 1 ]
