#!/usr/bin/env bash
# Runs Mend's GPU suite (tests/gpu; see README.md) and ends with one line: "tests: N passed, M failed".
#  - $BUILDDIR/tests/gpu/test_gpu_* (built by `make test-gpu` or `make tests` where the CUDA toolkit
#    is), one run per configuration, each under `timeout`;
#  - tests/gpu/torch_check.py with Mend preloaded, when python3 can import torch and sees a GPU.
# Lines "ok <name>" / "not ok <name>" count one test each; a run without such lines counts one test by
# its exit status (0 passes, 77 skips).  Logs: $BUILDDIR/test-logs/gpu/<run>.log.
# MEND_TEST_FILTER (an extended regex on the run's name) selects runs; MEND_TEST_GPU_TIMEOUT (seconds,
# default 300) bounds each run (twice that for runs with one process per rank, and for PyTorch);
# MEND_TEST_GPU_NO_TORCH=1 leaves PyTorch out.
set -u
cd "$(dirname "$0")/../.."
BUILDDIR=${BUILDDIR:-build}
BUILDDIR=$(cd "$BUILDDIR" && pwd)
export LD_LIBRARY_PATH="$BUILDDIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MEND_BUILDDIR="$BUILDDIR"
FILTER=${MEND_TEST_FILTER:-.}
TIMEOUT=${MEND_TEST_GPU_TIMEOUT:-300}
# Runs with one process per rank get twice as long: CUDA contexts of several processes time-slice the GPU.
LONG=$((TIMEOUT * 2))
LOGDIR="$BUILDDIR/test-logs/gpu"
BIN="$BUILDDIR/tests/gpu"
mkdir -p "$LOGDIR"
pass=0; fail=0; skip=0; note=""; failed_names=()

lib="$BUILDDIR/lib/libnccl.so.2"
. tests/common/tally.sh
check_mend_lib "$lib"


run_one() { # name seconds cmd...
  local name=$1 t=$2; shift 2
  [[ "$name" =~ $FILTER ]] || return 0
  local log="$LOGDIR/$name.log" start=$SECONDS rc
  # The program's own watchdog fires first, so a hang leaves a "not ok watchdog" line in the log.
  timeout -k 10 "$t" env MEND_TEST_GPU_WATCHDOG_S=$((t - 20)) "$@" > "$log" 2>&1; rc=$?
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "not ok $name: timed out after ${t}s" >> "$log"
  note=""
  count_output "$name" "$log" "$rc"
  printf '%-40s rc=%-3d %4ds%s\n' "$name" "$rc" $((SECONDS - start)) "$note"
}

if ! ls "$BIN"/test_gpu_* > /dev/null 2>&1; then
  echo "FATAL: no GPU test programs in $BIN (build them with 'make test-gpu'; they need the CUDA toolkit)"
  echo "tests: 0 passed, 1 failed"; exit 1
fi

# (1) every collective; threads, one thread over ncclCommInitAll, processes
for n in 1 2 3 4 8; do run_one "gpu_colls_threads_$n" "$TIMEOUT" "$BIN/test_gpu_colls" --threads "$n"; done
run_one gpu_colls_initall_4 "$TIMEOUT" "$BIN/test_gpu_colls" --initall 4
for n in 2 4; do run_one "gpu_colls_procs_$n" "$LONG" "$BIN/test_gpu_colls" --procs "$n"; done
# (3) CUDA graphs
for n in 2 4; do run_one "gpu_graph_threads_$n" "$TIMEOUT" "$BIN/test_gpu_graph" --threads "$n"; done
run_one gpu_graph_procs_2 "$LONG" "$BIN/test_gpu_graph" --procs 2
# (4) abort and bad pointers
run_one gpu_abort "$TIMEOUT" "$BIN/test_gpu_abort"

# (5) PyTorch, with Mend preloaded
if [ "${MEND_TEST_GPU_NO_TORCH:-0}" != 1 ] && [[ torch_check =~ $FILTER ]]; then
  if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' > /dev/null 2>&1; then
    run_one torch_check "$LONG" env MEND_TEST_LIB="$lib" LD_PRELOAD="$lib" python3 tests/gpu/torch_check.py \
      --world-sizes 2,4 --timeout $((LONG / 2 - 20))
  else
    echo "torch_check: skipped (python3 cannot import torch, or torch sees no GPU)"; skip=$((skip + 1))
  fi
fi

for n in "${failed_names[@]}"; do echo "FAILED: $n"; done
[ "$skip" -gt 0 ] && echo "tests: $pass passed, $fail failed, $skip skipped" || echo "tests: $pass passed, $fail failed"
# Nothing ran (no GPU here): say so with 77 rather than pass.
[ "$fail" -eq 0 ] && [ "$pass" -eq 0 ] && [ "$skip" -gt 0 ] && exit 77
[ "$fail" -eq 0 ]
