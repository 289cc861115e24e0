#!/usr/bin/env bash
# The recovery scenario across testbed hosts (benchmarks/recover_perf.c --testbed): 3 hosts, 1 and 2
# ranks per host; every rank of host 1 is SIGKILLed mid-loop, the survivors see the loss, shrink with
# NCCL_SHRINK_ABORT, and replacement processes started on host 1 join through ncclCommGrow, every
# AllReduce result checked at every stage (recover_perf exits non-zero otherwise). At the end no
# namespace of the testbed is left.
# Exit: 0 pass, 1 fail, 77 skip (not root / no network namespaces).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/testlib.sh"
tb_require

B="${MEND_BUILDDIR:-${BUILDDIR:-$HERE/../../build}}"
TOOL="$(cd "$B" 2>/dev/null && pwd)/bin/recover_perf"
if [ ! -x "$TOOL" ]; then echo "not ok recover_perf built ($TOOL missing)"; exit 1; fi
export LD_LIBRARY_PATH="$(dirname "$(dirname "$TOOL")")/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

NAME="mtg$$"
tb_track "$NAME"
T=$(mktemp -d); trap 'rm -rf "$T"; tb_cleanup_tracked' EXIT
if ! timeout -k 5 120 python3 "$TB" up --hosts 3 --rails 1 --name "$NAME" > "$T/up" 2>&1; then
  echo "not ok recover_testbed_up: $(tail -3 "$T/up")"; exit 1
fi
timeout -k 5 300 "$TOOL" --testbed "$NAME" --hosts 3 -n 3,6 -r 2 -c 16384 -T 60 > "$T/out" 2> "$T/err"; rc=$?
[ $rc -eq 0 ] && echo "ok recover_testbed_exit_0" || echo "not ok recover_testbed_exit_0: rc=$rc $(head -3 "$T/err")"
for n in 3 6; do
  grep -Eq "^ +$n( +[0-9]+\.[0-9]+ \([0-9]+\.[0-9]+\)){5}$" "$T/out" && echo "ok recover_testbed_row_$n" \
    || echo "not ok recover_testbed_row_$n: $(cat "$T/out")"
done
grep -q "on 3 hosts of testbed $NAME" "$T/out" && echo "ok recover_testbed_header" \
  || echo "not ok recover_testbed_header: $(head -1 "$T/out")"
timeout -k 5 60 python3 "$TB" down --name "$NAME" > /dev/null 2>&1
tb_exists "$NAME" && echo "not ok recover_testbed_down: namespaces of $NAME left" || echo "ok recover_testbed_down"
