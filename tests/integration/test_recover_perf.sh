#!/usr/bin/env bash
# recover_perf (benchmarks/recover_perf.c): a short run over shared memory and over sockets finishes,
# every stage of the table has a time, two lost ranks and a lost rank 0 work, and bad arguments are
# refused (exit 2).  Across testbed hosts: tests/testbed/test_recover_testbed.sh.
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-build}
TOOL="$B/bin/recover_perf"
ok() { echo "ok $1"; }
nok() { echo "not ok $1: $2"; }
if [ ! -x "$TOOL" ]; then echo "not ok recover_perf_built: $TOOL missing"; exit 1; fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# A row: the size, then five "median (worst)" pairs, all numbers.
ROW='^ +3( +[0-9]+\.[0-9]+ \([0-9]+\.[0-9]+\)){5}$'
for mode in shm sockets; do
  flag=; [ $mode = sockets ] && flag=--sockets
  timeout 120 "$TOOL" -n 3 -r 2 -c 4096 -T 60 $flag > "$T/$mode" 2> "$T/$mode.err"; rc=$?
  [ $rc -eq 0 ] && ok recover_perf_${mode}_exit_0 || nok recover_perf_${mode}_exit_0 "rc=$rc $(head -3 "$T/$mode.err")"
  grep -Eq "$ROW" "$T/$mode" && ok recover_perf_${mode}_row || nok recover_perf_${mode}_row "$(cat "$T/$mode")"
  grep -q '^# load average before: ' "$T/$mode" && grep -q '^# load average after: ' "$T/$mode" \
    && ok recover_perf_${mode}_load || nok recover_perf_${mode}_load "$(head -2 "$T/$mode")"
done
# Two ranks lost at once (two replacements join).
timeout 120 "$TOOL" -n 4 -r 1 -k 1 -K 2 -c 1024 -T 60 > "$T/k2" 2> "$T/k2.err"; rc=$?
[ $rc -eq 0 ] && grep -Eq '^ +4( +[0-9]+\.[0-9]+ \([0-9]+\.[0-9]+\)){5}$' "$T/k2" && ok recover_perf_two_lost \
  || nok recover_perf_two_lost "rc=$rc $(head -3 "$T/k2.err")"
# The victim may be rank 0 (the coordinator is then the next survivor).
timeout 120 "$TOOL" -n 3 -r 1 -k 0 -c 1024 -T 60 > "$T/k0" 2> "$T/k0.err"; rc=$?
[ $rc -eq 0 ] && grep -Eq "$ROW" "$T/k0" && ok recover_perf_victim_0 || nok recover_perf_victim_0 "rc=$rc $(head -3 "$T/k0.err")"
for bad in "-n 1" "-n 4 -k 4" "-n 4 -k 3 -K 2" "-n 2 -k 0 -K 2" "-K 0" "-r 0" "-c 0" "--testbed mtx" "--hosts 2" "-x" "extra"; do
  "$TOOL" $bad > /dev/null 2>&1; rc=$?
  [ $rc -eq 2 ] && ok "recover_perf_refuses_${bad// /_}" || nok "recover_perf_refuses_${bad// /_}" "rc=$rc"
done
