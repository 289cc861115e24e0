#!/usr/bin/env bash
# Runs every Mend test and ends with one line: "tests: N passed, M failed[, K skipped]".
#  - $BUILDDIR/tests/unit_tests (GoogleTest): each test case counts.
#  - $BUILDDIR/tests/<program> (tests/integration/*.c), tests/integration/*.sh, tests/testbed/test_*.sh:
#    lines "ok <name>" / "not ok <name>" count one test each; otherwise exit 0 passes, 77 skips.
# MEND_TEST_FILTER (an extended regex on the test program's name) runs a subset.
set -u
cd "$(dirname "$0")/.."
BUILDDIR=${BUILDDIR:-build}
BUILDDIR=$(cd "$BUILDDIR" && pwd)
export LD_LIBRARY_PATH="$BUILDDIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MEND_BUILDDIR="$BUILDDIR"
FILTER=${MEND_TEST_FILTER:-.}
TIMEOUT=${MEND_TEST_TIMEOUT:-600}
LOGDIR="$BUILDDIR/test-logs"
mkdir -p "$LOGDIR"
pass=0; fail=0; skip=0; note=""; failed_names=(); failed_excerpts=()

# Every run must use Mend's library, never NVIDIA's from the CUDA toolkit.
lib="$BUILDDIR/lib/libnccl.so.2"
# (Each test program also checks at run time, with dladdr, that the library it loaded is this one.)
. tests/common/tally.sh
check_mend_lib "$lib"


run_one() { # name cmd...
  local name=$1; shift
  [[ "$name" =~ $FILTER ]] || return 0
  local log="$LOGDIR/$name.log" start=$SECONDS rc
  timeout -k 10 "$TIMEOUT" "$@" > "$log" 2>&1; rc=$?
  [ $rc -eq 124 ] && echo "not ok $name: timed out after ${TIMEOUT}s" >> "$log"
  count_output "$name" "$log" "$rc"
  printf '%-40s rc=%-3d %4ds\n' "$name" "$rc" $((SECONDS - start))
}

# GoogleTest suite: count test cases from its JSON report.  run_gtest name [env assignments] -- [gtest args]
# ($GTEST_BIN: another build of the suite, e.g. a sanitizer's.)  An exit status other than 0 with no
# failed test counts one failure: a sanitizer (LeakSanitizer at exit) reports after the JSON is written.
run_gtest() {
  local name=$1; shift
  local envs=() bin=${GTEST_BIN:-$BUILDDIR/tests/unit_tests}
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  [ -x "$bin" ] && [[ $name =~ $FILTER ]] || return 0
  local json="$LOGDIR/$name.json" start=$SECONDS rc t f d
  rm -f "$json"
  env "${envs[@]}" timeout -k 10 "$TIMEOUT" "$bin" --gtest_output=json:"$json" "$@" \
    > "$LOGDIR/$name.log" 2>&1
  rc=$?
  if [ -f "$json" ]; then
    read -r t f d < <(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["tests"], j["failures"], j.get("disabled",0))' "$json")
    pass=$((pass + t - f - d)); fail=$((fail + f))
    [ "$f" -gt 0 ] && failed_names+=("$name: $(grep -E '^\[  FAILED  \] [A-Za-z]' "$LOGDIR/$name.log" | sort -u | head -10 | tr '\n' ' ')")
    if [ "$f" -eq 0 ] && [ "$rc" -ne 0 ]; then
      fail=$((fail + 1))
      failed_names+=("$name (exit $rc after its tests: $(grep -m1 -E '^SUMMARY|ERROR: [A-Za-z]+Sanitizer' "$LOGDIR/$name.log"))")
    fi
  else
    # No report: a sanitizer halted the suite (halt_on_error).  Keep its report's head for the end
    # of the run, where CI's excerpt of the output shows it.
    fail=$((fail + 1)); failed_names+=("$name (exit $rc, no report)")
    grep -m1 -A40 -E 'WARNING: [A-Za-z]+Sanitizer|ERROR: [A-Za-z]+Sanitizer' "$LOGDIR/$name.log" \
      > "$LOGDIR/$name.excerpt" && failed_excerpts+=("$LOGDIR/$name.excerpt")
  fi
  printf '%-40s rc=%-3d %4ds\n' "$name" "$rc" $((SECONDS - start))
}
run_gtest unit_tests --
# The CUDA kernel's own source built for the CPU (the kernel-cpu executor, src/device/kernel.cu):
# the schedule suites run through it as well as through the host engine.
run_gtest unit_tests_kernel_cpu MEND_EXECUTOR=kernel-cpu -- --gtest_filter='Engine*:KernelCpu*'

for t in "$BUILDDIR"/tests/*; do
  [ -x "$t" ] && [ -f "$t" ] || continue
  n=$(basename "$t"); [ "$n" = unit_tests ] && continue
  run_one "$n" "$t"
done
# The multi-process collectives (shm and sockets) through the kernel's CPU build too.
[ -x "$BUILDDIR/tests/test_collectives" ] && run_one test_collectives_kernel_cpu env MEND_EXECUTOR=kernel-cpu \
  "$BUILDDIR/tests/test_collectives"
for t in tests/integration/*.sh tests/testbed/test_*.sh; do
  [ -f "$t" ] || continue
  run_one "$(basename "$t" .sh)" bash "$t"
done

# Sanitizer passes, after the normal suite (`make test` builds them: makefiles/fuzz.mk,
# tests/fuzz/README.md).  MEND_CI_SANITIZERS=0 skips them.
if [ "${MEND_CI_SANITIZERS:-1}" != 0 ]; then
  # The unit suite under ASan+UBSan, leak checking on (any report fails the run).
  san_opts=(ASAN_OPTIONS=detect_leaks=1:halt_on_error=1
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
  GTEST_BIN=${MEND_SAN_BUILDDIR:-$BUILDDIR/asan}/tests/unit_tests run_gtest unit_tests_asan "${san_opts[@]}" --
  # Every fuzz target for MEND_FUZZ_SECONDS (default 20) each; one test per target.
  run_one fuzz env BUILDDIR="$BUILDDIR" bash tests/fuzz/run.sh "${MEND_FUZZ_SECONDS:-20}"
  # The unit suite under TSan (make tsan-tests): the suites whose threads share the most, less the
  # engine's long type-by-op sweeps (4 minutes more under TSan; MEND_TSAN_FILTER='Rnet*:NetSocket*:Engine*'
  # runs them too), the executor's short path into the net transport (NetDirect, 3 s), and relay paths
  # with their bridge's thread (less the 5 s wait for a link's bound).
  GTEST_BIN=${MEND_TSAN_BUILDDIR:-$BUILDDIR/tsan}/tests/unit_tests run_gtest unit_tests_tsan \
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 -- \
    --gtest_filter="${MEND_TSAN_FILTER:-Rnet*:NetSocket*:Engine*:HostEngineDirect*:*NetDirect*:Relay*:-EngineR2.*:EngineCollectives.*:EngineAllReduce.*:RelayTest.BridgeClosesALinkNobodyAccepts}"
fi

for e in "${failed_excerpts[@]}"; do echo "--- $(basename "$e" .excerpt): the sanitizer's report"; cat "$e"; done
for n in "${failed_names[@]}"; do echo "FAILED: $n"; done
[ "$skip" -gt 0 ] && echo "tests: $pass passed, $fail failed, $skip skipped" || echo "tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
