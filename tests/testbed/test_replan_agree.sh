#!/usr/bin/env bash
# Plan-view agreement on the testbed: a NIC goes down in the middle of a run of checked AllReduces
# and returns 2 s later, on 2 hosts x 2 rails (2 ranks per host) and 3 hosts x 3 rails (one NIC; two
# NICs of one host at once; one NIC under every collective and send/recv of tests/mh_colls): results exact,
# every rank logs the same plan-view hash for every op (NCCL_DEBUG=TRACE, SUBSYS=TUNING), a view
# without the NIC is in force after the fault and the fail-back view after it returns, and the time
# from the fault to the new view in force is printed.  The scenarios live in replan_agree.py.
# Exit: 0 pass, 1 fail, 77 skip (not root / no network namespaces).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/testlib.sh"
tb_require

tb_builddir replan_agree all_reduce_perf
if [ ! -x "$B/tests/mh_colls" ]; then echo "not ok replan_agree: mh_colls built ($B/tests/mh_colls missing)"; exit 1; fi

name="mta$(( $$ % 100000 ))"
timeout -k 10 200 python3 "$HERE/replan_agree.py" --builddir "$B" --name "$name" &
wait $!; rc=$?
[ "$rc" = 124 ] && echo "not ok replan_agree: scenarios finished within 200 s"
# Testbeds are named mta<this script's pid % 100000><letter>: nothing of ours may be left.
left=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name[a-z](sw|h[0-9]+)$")
if [ -n "$left" ]; then
  echo "not ok replan_agree: no namespace left behind ($(echo $left))"
  for n in $(echo "$left" | sed -E 's/(sw|h[0-9]+)$//' | sort -u); do python3 "$TB" cleanup --name "$n" >/dev/null 2>&1; done
  exit 1
fi
echo "ok replan_agree: no namespace left behind"
exit "$rc"
