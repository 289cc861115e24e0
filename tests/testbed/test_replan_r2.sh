#!/usr/bin/env bash
# R2 AllReduce under a real fault: on 4 hosts x 2 rails, one host's NIC goes down in the middle of a
# loop of checked AllReduces (replan_perf: every element of every iteration checked), for
# MEND_REPLAN=balance, r2 and auto.  Passes when every run is exact and exits 0, the r2 run planned
# R2 AllReduces after the fault (TUNING lines), and auto picked R2 too (the model's choice for a
# rank at half its bandwidth among 4: X = 0.5 > 4/10).  The busbw numbers are printed, not judged
# (this machine is shared).  Exit: 0 pass, 1 fail, 77 skip (not root / no network namespaces).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/testlib.sh"
tb_require

tb_builddir replan_r2 replan_perf

name="mtr$(( $$ % 10000 ))"
out=$(timeout -k 10 200 "$B/bin/replan_perf" --hosts 4 --rails 2 --rate 100mbit --size 2M --seconds 8 \
      --fault-at 2 --settle 2 --modes balance,r2,auto --name "$name" 2>&1)
rc=$?
echo "$out" | sed 's/^/# /'
fail=0
check() { if eval "$2"; then echo "ok replan_r2: $1"; else echo "not ok replan_r2: $1"; fail=1; fi; }
check "replan_perf finished, every result exact (exit $rc)" '[ "$rc" = 0 ]'
check "MEND_REPLAN=r2 planned R2 AllReduces" 'echo "$out" | grep -Eq "^  r2 .* r2=[1-9]"'
check "auto picked R2 after the fault" 'echo "$out" | grep -Eq "^  auto .* r2=[1-9]"'
check "balance never planned R2" '! echo "$out" | grep -Eq "^  balance .* r2="'
check "iterations after the fault were timed" '! echo "$out" | grep -Eq "^  (balance|r2|auto) +[^ ]+ +n/a"'
# Testbeds are named <name><index>: nothing of ours may be left.
left=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name[0-9](sw|h[0-9]+)$")
if [ -n "$left" ]; then
  echo "not ok replan_r2: no namespace left behind ($(echo $left))"
  for n in $(echo "$left" | sed -E 's/(sw|h[0-9]+)$//' | sort -u); do python3 "$TB" cleanup --name "$n" >/dev/null 2>&1; done
  exit 1
fi
echo "ok replan_r2: no namespace left behind"
exit "$fail"
