#!/usr/bin/env bash
# Hot repair on the testbed: NIC down, link down, black hole, flapping, two NICs lost on one host,
# NICs lost on two hosts on different rails (sharing a third; or none, with and without a spine),
# fail-back, three-point localization, a stopped, a starved and a CPU-loaded rank (suspicions
# refuted, no failover), and the last path lost (a clear error, no hang): every collective result checked exactly; black holes detected within 400 ms.
# The scenarios live in hotrepair.py (also runnable by hand, one at a time).
# Exit: 0 pass, 1 fail, 77 skip (not root / no network namespaces).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/testlib.sh"
tb_require

tb_builddir hotrepair all_reduce_perf

timeout -k 10 420 python3 "$HERE/hotrepair.py" --builddir "$B" &
pid=$!
wait "$pid"; rc=$?
[ "$rc" = 124 ] && echo "not ok hotrepair: scenarios finished within 420 s"
# Testbeds are named mt<owner pid % 10000><letter>: nothing of ours may be left.
left=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^mt$((pid % 10000))[a-z]*(sw|h[0-9]+)$")
if [ -n "$left" ]; then
  echo "not ok hotrepair: no namespace left behind ($(echo $left))"
  python3 "$TB" cleanup >/dev/null 2>&1
  exit 1
fi
echo "ok hotrepair: no namespace left behind"
exit "$rc"
