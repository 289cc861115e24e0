#!/usr/bin/env bash
# The GPU proofs in order of weight, for a GPU machine lent for minutes: each step runs under its
# own timeout and only while the time budget lasts, so the steps that matter most run first and a
# short lease still returns a verdict for them.
#
#   BUILDDIR=build bash tests/gpu/proof.sh [outdir]      (default outdir: $BUILDDIR/test-logs/gpu-proof)
#
# $BUILDDIR holds lib/libnccl.so.2, tests/gpu/test_gpu_* and bin/ (the perf tools, d2d_bw), as `make
# default gpu-tests` leaves them (and include/nccl.h, which torch_check.py reads the version from).
# MEND_TEST_PROOF_BUDGET_S (default 420) bounds the whole run; MEND_TEST_FILTER (an extended regex on
# step names) picks steps.  One log
# per step in outdir, and outdir/summary.txt: per step its exit status, seconds, "ok"/"not ok" counts,
# the first failure, and for perf steps their result rows.  Ends with "tests: N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
BUILDDIR=$(cd "${BUILDDIR:-build}" && pwd)
OUTDIR=${1:-$BUILDDIR/test-logs/gpu-proof}
BUDGET=${MEND_TEST_PROOF_BUDGET_S:-420}
LIB="$BUILDDIR/lib/libnccl.so.2"
T="$BUILDDIR/tests/gpu"
B="$BUILDDIR/bin"
export LD_LIBRARY_PATH="$BUILDDIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MEND_BUILDDIR="$BUILDDIR"
mkdir -p "$OUTDIR"
SUM="$OUTDIR/summary.txt"
: > "$SUM"
pass=0; fail=0; skipped=0

say() { echo "$*" | tee -a "$SUM"; }

step() { # name seconds cmd...: run under timeout; count its "ok"/"not ok" lines, or its exit status
  local name=$1 t=$2; shift 2
  [[ "$name" =~ ${MEND_TEST_FILTER:-.} ]] || return 1
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 20 ]; then say "$name: not run (budget spent)"; skipped=$((skipped + 1)); return 1; fi
  [ "$t" -gt "$left" ] && t=$left
  local log="$OUTDIR/$name.log" start=$SECONDS rc
  timeout -k 5 "$t" env MEND_TEST_GPU_WATCHDOG_S=$((t - 8)) MEND_TEST_GPU_WAIT_S=$((t / 3)) "$@" > "$log" 2>&1
  rc=$?
  local ok bad
  ok=$(grep -c '^ok ' "$log"); bad=$(grep -c '^not ok ' "$log")
  if [ "$ok" -eq 0 ] && [ "$bad" -eq 0 ]; then
    if [ "$rc" -eq 0 ]; then ok=1; else bad=1; fi
  elif [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
    bad=1 # the program failed after its last result line (a crash, a timeout)
  fi
  pass=$((pass + ok)); fail=$((fail + bad))
  say "$(printf '%-24s rc=%-3d %4ds  ok %-4d not ok %d' "$name" "$rc" $((SECONDS - start)) "$ok" "$bad")"
  grep -m 3 -E '^not ok |FAIL|Error|error:|WARN' "$log" | cut -c1-300 | sed 's/^/    /' | tee -a "$SUM"
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && say "    timed out after ${t}s"
  return 0
}

perf() { # name seconds cmd...: a perf tool; its result rows go to the summary
  step "$@" || return 0
  grep -E '^ +[0-9]+ ' "$OUTDIR/$1.log" | sed 's/^/    /' | tee -a "$SUM"
  grep -E 'Avg bus bandwidth|empty kernel' "$OUTDIR/$1.log" | head -2 | sed 's/^/    /' | tee -a "$SUM"
}

torch() { # world size
  step "torch_$1" 130 env MEND_TEST_LIB="$LIB" LD_PRELOAD="$LIB" python3 tests/gpu/torch_check.py \
    --world-sizes "$1" --timeout 110
}

say "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
say "# $(uname -r); torch $(python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1 | tail -1)"
say "# library: $(readlink -f "$LIB")"

step gpu_colls_threads_2 90 "$T/test_gpu_colls" --threads 2
torch 2
torch 4
step gpu_colls_threads_8 90 "$T/test_gpu_colls" --threads 8
step gpu_colls_threads_3 90 "$T/test_gpu_colls" --threads 3
step gpu_abort 60 "$T/test_gpu_abort"
step gpu_graph_threads_2 60 "$T/test_gpu_graph" --threads 2
perf d2d_bw 30 "$B/d2d_bw" -b 16M -e 1G -f 64
perf ar_8B_t2 40 "$B/all_reduce_perf" -M device -b 8 -e 8 -n 1000 -w 50 -t 2 -c 1
for n in 3 5 7; do perf "ag_t$n" 40 "$B/all_gather_perf" -M device -b 1K -e 16M -f 16 -t "$n" -c 1 -w 2 -n 10; done
perf ar_1G_t8 90 "$B/all_reduce_perf" -M device -b 1G -e 1G -t 8 -c 1 -w 1 -n 3
step gpu_colls_initall_4 90 "$T/test_gpu_colls" --initall 4
step gpu_colls_threads_4 90 "$T/test_gpu_colls" --threads 4
step gpu_graph_threads_4 60 "$T/test_gpu_graph" --threads 4
step gpu_colls_procs_2 120 "$T/test_gpu_colls" --procs 2
step gpu_graph_procs_2 120 "$T/test_gpu_graph" --procs 2

if [ "$skipped" -gt 0 ]; then say "tests: $pass passed, $fail failed, $skipped skipped"
else say "tests: $pass passed, $fail failed"; fi
[ "$fail" -eq 0 ]
