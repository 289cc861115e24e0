#!/usr/bin/env bash
# Logs a user can trust: an orderly ncclCommDestroy is silent at INFO (no "connection ... lost"),
# for ranks as processes (mend-run) and as threads (one all_reduce_perf with -t 4).
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-build}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=BOOTSTRAP MEND_PERF_MEMORY=host
check() { # name log rc
  local lost; lost=$(grep -c 'lost' "$2")
  if [ "$3" -eq 0 ] && [ "$lost" -eq 0 ]; then echo "ok $1"; else echo "not ok $1: rc=$3, $lost 'lost' line(s): $(grep -m2 lost "$2" | tr '\n' ' ')"; fi
}
timeout 120 "$B/bin/mend-run" -np 3 "$B/bin/all_reduce_perf" -b 8 -e 64K -f 8 -c 1 > "$T/procs" 2>&1
check quiet_teardown_processes "$T/procs" $?
timeout 120 "$B/bin/all_reduce_perf" -b 8 -e 64K -f 8 -t 4 -c 1 > "$T/threads" 2>&1
check quiet_teardown_threads "$T/threads" $?
