#!/usr/bin/env bash
# The throughput monitor on the testbed (issue 14): a NIC throttled by tc from 1 Gbit/s to
# 200 Mbit/s under a running AllReduce shows in the snapshots within 150 ms (the delay is printed;
# no send is judged slow in flight before the change),
# and a black hole shows the drop, the failover and the NIC down, also live in mend-top (tmux).
# The scenarios live in monitor_tb.py (also runnable by hand).
# Exit: 0 pass, 1 fail, 77 skip (not root / no network namespaces).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/testlib.sh"
tb_require

tb_builddir monitor_tb all_reduce_perf
name="mtm$$"
name=${name:0:12}
tb_track "${name}t"
tb_track "${name}b"
timeout -k 10 240 python3 "$HERE/monitor_tb.py" --builddir "$B" --name "$name"
rc=$?
[ "$rc" = 124 ] && echo "not ok monitor_tb: scenarios finished within 240 s"
for n in "${name}t" "${name}b"; do
  if tb_exists "$n"; then echo "not ok monitor_tb: testbed $n left behind"; rc=1; fi
done
exit "$rc"
