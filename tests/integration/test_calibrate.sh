#!/usr/bin/env bash
# mend-info --calibrate: measures every transport kind and the reduce rate within a time bound, writes
# a file MEND_CALIB_FILE reads; the library prints the constants in force (TUNING) and refuses a bad
# or missing file with a WARN, keeping its built-in constants; bad options fail with exit 2.
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-build}
TOOL="$B/bin/mend-info"
PERF="$B/bin/all_reduce_perf"
ok() { echo "ok $1"; }
nok() { echo "not ok $1: $2"; }
if [ ! -x "$TOOL" ]; then echo "not ok calibrate_built: $TOOL missing"; exit 1; fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT

start=$SECONDS
timeout 120 "$TOOL" --calibrate -o "$T/calib" > "$T/out" 2> "$T/err"; rc=$?
took=$((SECONDS - start))
[ $rc -eq 0 ] && [ $took -le 60 ] && ok "calibrate_exit_0 # ${took}s" || nok calibrate_exit_0 "rc=$rc ${took}s $(head -3 "$T/err")"
keys=$(grep -cE '^(p2p|shm|net)\.(alpha_us|bw_channel_gbs|bw_max_gbs) [0-9]+\.[0-9]+$|^(reduce_gbs|handoff_us) [0-9]+\.[0-9]+$' "$T/calib")
[ "$keys" = 11 ] && ok calibrate_file_has_every_key || nok calibrate_file_has_every_key "$keys keys: $(cat "$T/calib")"
grep -q '^# mend-info --calibrate: 3 of 3 transport kinds measured' "$T/calib" && ok calibrate_measured_all_kinds \
  || nok calibrate_measured_all_kinds "$(head -1 "$T/calib") $(grep 'not measured' "$T/out")"
zero=$(awk '$2 + 0 <= 0 {print}' <(grep -v '^#' "$T/calib"))
[ -z "$zero" ] && ok calibrate_values_positive || nok calibrate_values_positive "$zero"

# The library reads the file and says so (one line per communicator, values as measured).
alpha=$(awk '$1 == "p2p.alpha_us" {printf "%.2f", $2}' "$T/calib")
tuning() { # env assignments...: a 2-thread AllReduce with the TUNING log
  env "$@" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING LD_LIBRARY_PATH="$B/lib" \
    timeout 60 "$PERF" -t 2 -b 8 -e 8 -n 1 -w 0 -c 1 2>&1
}
tuning MEND_CALIB_FILE="$T/calib" > "$T/log"; rc=$?
[ $rc -eq 0 ] && grep -q "Cost model constants ($T/calib): p2p alpha $alpha us" "$T/log" && ok library_reads_file \
  || nok library_reads_file "rc=$rc want alpha $alpha: $(grep -m1 'Cost model' "$T/log")"
printf 'shm.alpha_us 2\nshm.alpha_us -3\n' > "$T/bad"
tuning MEND_CALIB_FILE="$T/bad" > "$T/log"; rc=$?
[ $rc -eq 0 ] && grep -q "MEND_CALIB_FILE=$T/bad: line 2: shm.alpha_us needs one number" "$T/log" \
  && grep -q "Cost model constants (built in): p2p alpha 1.00 us" "$T/log" && ok bad_file_warns_and_is_ignored \
  || nok bad_file_warns_and_is_ignored "rc=$rc $(grep -m2 -E 'CALIB|Cost model' "$T/log")"
tuning MEND_CALIB_FILE="$T/none" > "$T/log"; rc=$?
[ $rc -eq 0 ] && grep -q "MEND_CALIB_FILE=$T/none: cannot read it" "$T/log" && ok missing_file_warns \
  || nok missing_file_warns "rc=$rc $(grep -m1 CALIB "$T/log")"

# Two processes whose files differ: both plan with rank 0's constants (same estimates), and the
# rank whose own constants differ says so.
printf 'shm.alpha_us 40\np2p.alpha_us 40\n' > "$T/slow"
port=$(( 20000 + $$ % 20000 ))
for r in 0 1; do
  f="$T/calib"; [ $r = 1 ] && f="$T/slow"
  env RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MEND_PERF_CTRL=127.0.0.1:$port MEND_CALIB_FILE="$f" NCCL_DEBUG=INFO \
    NCCL_DEBUG_SUBSYS=TUNING,INIT LD_LIBRARY_PATH="$B/lib" timeout 60 "$PERF" -b 8 -e 64K -f 8 -n 1 -w 0 -c 1 \
    > "$T/r$r" 2>&1 &
done
wait
est() { grep -oE 'AllReduce: [0-9]+ Bytes -> Algo [A-Za-z]+ .* time [0-9.]+ us' "$1" | sort -u; }
if [ -s "$T/r0" ] && [ -n "$(est "$T/r0")" ] && [ "$(est "$T/r0")" = "$(est "$T/r1")" ] \
   && grep -q "rank 1's cost-model constants (MEND_CALIB_FILE) differ from rank 0's" "$T/r1" \
   && grep -q "Cost model constants (rank 0's, which differ from this rank's): p2p alpha $alpha us" "$T/r1" \
   && grep -q "Out of bounds values : 0 OK" "$T/r0"; then
  ok ranks_plan_with_rank0_constants
else
  nok ranks_plan_with_rank0_constants "$(est "$T/r0" | head -2) vs $(est "$T/r1" | head -2); $(grep -m2 -E 'differ|rror' "$T/r1")"
fi

# Ranks that outnumber the host's CPUs: rank 0 says how crowded the host is, and the cost model
# charges for it (every rank computes it from what all reported, so all choose alike).
cpus=$(nproc)
MEND_CALIB_FILE="$T/calib" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING LD_LIBRARY_PATH="$B/lib" \
  timeout 120 "$B/bin/mend-run" -n 4 "$PERF" -b 64K -e 64K -n 2 -w 0 -c 1 > "$T/crowd" 2>&1; rc=$?
if [ "$cpus" -lt 4 ]; then
  want=$(awk -v c="$cpus" 'BEGIN {printf "%.2f", 4 / c}')
  [ $rc -eq 0 ] && grep -q "Init: $want ranks per CPU on the most crowded host" "$T/crowd" && ok crowded_host_reported \
    || nok crowded_host_reported "rc=$rc want $want: $(grep -m1 'ranks per CPU' "$T/crowd")"
else
  [ $rc -eq 0 ] && ! grep -q "ranks per CPU" "$T/crowd" && ok "crowded_host_reported # $cpus CPUs: not crowded" \
    || nok crowded_host_reported "rc=$rc $(grep -m1 'ranks per CPU' "$T/crowd")"
fi

# Ranks bound one per CPU (`--bind`) are not crowded, although each may run on one CPU only.
if [ "$cpus" -ge 2 ]; then
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT LD_LIBRARY_PATH="$B/lib" \
    timeout 120 "$B/bin/mend-run" -n 2 --bind "$PERF" -b 8 -e 8 -n 2 -w 0 -c 1 > "$T/bound" 2>&1; rc=$?
  [ $rc -eq 0 ] && grep -q "Init COMPLETE" "$T/bound" && ! grep -q "ranks per CPU" "$T/bound" \
    && ok bound_ranks_not_crowded || nok bound_ranks_not_crowded "rc=$rc $(grep -m1 'ranks per CPU' "$T/bound")"
fi

# By default (MEND_CALIB_AUTO=1), with no file and a crowded host (more ranks than CPUs), rank 0
# measures the one-host constants at init (once per process, in two threads of its own) and every rank
# plans with them: the same estimates, no rank warns that its constants differ.  A host where every
# rank has a CPU keeps the built-in ones (no delay at init), as do MEND_CALIB_AUTO=0 and a one-rank
# communicator, and a file is never measured over.
ranks() { # n port: n ranks of the perf tool, outputs $T/a0 .. $T/a<n-1>
  for ((r = 0; r < $1; r++)); do
    env -u MEND_CALIB_AUTO RANK=$r WORLD_SIZE=$1 LOCAL_RANK=$r MEND_PERF_CTRL=127.0.0.1:$2 MEND_CALIB_FILE= \
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING,INIT LD_LIBRARY_PATH="$B/lib" timeout 60 "$PERF" -b 8 -e 1M -f 32 \
      -n 1 -w 0 -c 1 > "$T/a$r" 2>&1 &
  done
  wait
}
consts() { grep -m1 -oE "Cost model constants \(measured at init by rank 0's process\): .*" "$1"; }
n=$((cpus + 1))
if [ $n -gt 8 ]; then
  ok "init_measures # SKIP $cpus CPUs: a crowded host would take $n ranks"
else
  ranks $n $(( 20000 + ($$ + 7) % 20000 ))
  last=$((n - 1))
  line=$(grep -m1 -oE "Calibration at init \(CPUs [0-9]+ and [0-9]+, [0-9]+ ms\): hop [0-9.]+ us, stream [0-9.]+ GB/s, hand-off [0-9.]+ us, reduce [0-9.]+ GB/s" "$T/a0")
  if [ "$cpus" -lt 2 ]; then
    grep -q "Calibration at init: not measured (fewer than 2 CPUs)" "$T/a0" && ok "init_measures # 1 CPU: not measured" \
      || nok init_measures "$(grep -m1 Calibration "$T/a0")"
  elif [ -n "$line" ] && [ -n "$(est "$T/a0")" ] && [ "$(est "$T/a0")" = "$(est "$T/a$last")" ] \
     && ! grep -q "Calibration at init" "$T/a$last" && ! grep -qE "differ from rank 0|WARN" "$T/a0" "$T/a$last" \
     && [ -n "$(consts "$T/a0")" ] && [ "$(consts "$T/a0")" = "$(consts "$T/a$last")" ] \
     && grep -q "Out of bounds values : 0 OK" "$T/a0"; then
    ok "init_measures # $n ranks: $line"
  else
    nok init_measures "$n ranks: line '$line'; $(est "$T/a0" | head -2) vs $(est "$T/a$last" | head -2); $(grep -m2 -E 'WARN|differ|Cost model' "$T/a$last"); rank 0 ended: $(tail -3 "$T/a0" | tr '\n' ' '); rank $last ended: $(tail -3 "$T/a$last" | tr '\n' ' ')"
  fi
fi
if [ "$cpus" -ge 2 ]; then
  ranks 2 $(( 20000 + ($$ + 11) % 20000 ))
  if ! grep -q "Calibration at init" "$T/a0" && grep -q "Cost model constants (built in)" "$T/a0" \
     && grep -q "Cost model constants (built in)" "$T/a1" && grep -q "Out of bounds values : 0 OK" "$T/a0"; then
    ok uncrowded_keeps_built_in
  else
    nok uncrowded_keeps_built_in "$(grep -m2 -E 'Calibration|Cost model' "$T/a0")"
  fi
fi
# Crowded (n threads of one process on fewer CPUs), MEND_CALIB_AUTO=0: nothing measured.
env MEND_CALIB_FILE= MEND_CALIB_AUTO=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING,INIT LD_LIBRARY_PATH="$B/lib" \
  timeout 60 "$PERF" -t $((cpus + 1)) -b 8 -e 8 -n 1 -w 0 -c 1 > "$T/log" 2>&1; rc=$?
[ $rc -eq 0 ] && ! grep -q "Calibration at init" "$T/log" && grep -q "Cost model constants (built in)" "$T/log" \
  && ok auto_off_keeps_built_in || nok auto_off_keeps_built_in "rc=$rc $(grep -m2 -E 'Calibration|Cost model' "$T/log")"
env -u MEND_CALIB_AUTO MEND_CALIB_FILE= NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING,INIT LD_LIBRARY_PATH="$B/lib" \
  timeout 60 "$PERF" -t 1 -b 8 -e 8 -n 1 -w 0 -c 1 > "$T/log" 2>&1; rc=$?
[ $rc -eq 0 ] && ! grep -q "Calibration at init" "$T/log" && grep -q "Cost model constants (built in)" "$T/log" \
  && ok one_rank_not_measured || nok one_rank_not_measured "rc=$rc $(grep -m2 -E 'Calibration|Cost model' "$T/log")"
tuning MEND_CALIB_FILE="$T/calib" MEND_CALIB_AUTO=1 > "$T/log"; rc=$?
[ $rc -eq 0 ] && ! grep -q "Calibration at init" "$T/log" && ok file_is_not_measured_over \
  || nok file_is_not_measured_over "rc=$rc $(grep -m1 Calibration "$T/log")"

"$TOOL" --calibrate --bogus > /dev/null 2> "$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q "unknown or incomplete option '--bogus'" "$T/err" && ok bad_option_exit_2 \
  || nok bad_option_exit_2 "rc=$rc $(cat "$T/err")"
"$TOOL" --calibrate -o > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && ok missing_path_exit_2 || nok missing_path_exit_2 "rc=$rc"
"$TOOL" -h | grep -q -- '--calibrate' && ok help_lists_calibrate || nok help_lists_calibrate "not in -h"
exit 0
