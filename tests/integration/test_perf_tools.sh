#!/usr/bin/env bash
# The perf tools' own tests (TAP lines "ok name" / "not ok name"):
#  - --selftest of every tool (parsing, counts, busbw factors, formats, test data; no communicator)
#  - output format and bus-bandwidth factor of every tool, threads in one process (-t 2)
#  - -c 1 reports 0 wrong for every type and op; a planted wrong result is caught (#wrong > 0,
#    FAILED footer, non-zero exit)
#  - the memory mode: -M host, MEND_PERF_MEMORY=host, -M device (runs on a GPU or is refused
#    with a message), a bad -M value
#  - every launcher path starts and finishes ranks: threads, ranks per thread (-g), mend-run
#    (env launch, 2 and 4 ranks), the testbed (root only); mpirun is test_perf_mpi.sh
#  - failover_perf: --selftest (parsing, summary) and a short loop on a 2x2 testbed (root only)
#  - compare.py on a tiny sweep with every peer whose library is installed (make builds them);
#    crowd_choice.py on a tiny sweep (each algorithm forced, the choice, regrets)
#  - mend-run propagates exit codes and timeouts; its usage with no arguments or no program; --bind
# Every command runs under a timeout, so a hang is a failure, not a stuck test run.
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-${BUILDDIR:-build}}
B=$(cd "$B" && pwd)
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
CHECK="python3 tests/integration/perf/check_output.py"
RUN="$B/bin/mend-run"
T=${MEND_PERF_TEST_TIMEOUT:-120}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
TOOLS="all_reduce all_gather broadcast reduce reduce_scatter sendrecv alltoall gather scatter"
fails=0

ok() { echo "ok $1${2:+ # $2}"; }
notok() { echo "not ok $1"; fails=$((fails + 1)); [ -f "${2:-}" ] && sed 's/^/    /' "$2" | tail -25; }
# run NAME CMD...: output in $TMP/NAME.out, exit code in $rc
run() { local n=$1; shift; timeout -k 5 "$T" "$@" > "$TMP/$n.out" 2>&1; rc=$?; }
expect_ok() { # name checker-args...
  local n=$1; shift
  if [ "$rc" -eq 0 ] && $CHECK "$@" "$TMP/$n.out" > "$TMP/$n.chk" 2>&1; then ok "$n"
  else echo "    exit code $rc" >> "$TMP/$n.chk"; cat "$TMP/$n.out" >> "$TMP/$n.chk"; notok "$n" "$TMP/$n.chk"; fi
}

for t in $TOOLS; do
  [ -x "$B/bin/${t}_perf" ] || { notok "build_${t}_perf"; continue; }
done

# 1. The harness checks itself, without a communicator.
for t in $TOOLS; do
  run "selftest_$t" "$B/bin/${t}_perf" --selftest
  if [ "$rc" -eq 0 ] && grep -q "^# selftest: [1-9][0-9]* passed, 0 failed" "$TMP/selftest_$t.out" &&
     ! grep -q "^not ok" "$TMP/selftest_$t.out"; then ok "selftest_$t"; else notok "selftest_$t" "$TMP/selftest_$t.out"; fi
done

# 2. Format and bus bandwidth of every tool: 2 threads, 8 B .. 1 KiB.
for t in $TOOLS; do
  run "format_$t" "$B/bin/${t}_perf" -b 8 -e 1K -f 2 -t 2 -c 1
  expect_ok "format_$t" --coll "$t" --nranks 2
done
run sweep_sizes "$B/bin/all_reduce_perf" -b 1K -e 4K -i 1K -t 2 -n 3
expect_ok sweep_sizes --coll all_reduce --nranks 2 --sizes 1024,2048,3072,4096

# 3. Every type and op is checked exactly (-c 1), in place and out of place.
run check_all_types "$B/bin/all_reduce_perf" -b 64 -e 1K -f 4 -t 2 -d all -o all -c 1 -n 2
expect_ok check_all_types --coll all_reduce --nranks 2
run check_all_types_rs "$B/bin/reduce_scatter_perf" -b 256 -e 1K -f 4 -t 3 -d all -o all -c 1 -n 2
expect_ok check_all_types_rs --coll reduce_scatter --nranks 3

# 3b. nccl-tests' other flags run and keep the format: registration, aggregation, blocking modes,
#     time across ranks, cycles, cputime, per-iteration columns, timestamps, memory line, unaligned
#     buffers, graphs (ignored in host mode), CTA policy, timeout, parallel init, stream null.
nflags=0
for f in "-R 1" "-R 2" "-m 3" "-z 1" "-z 2" "-z 3" "-a 0" "-a 2" "-a 3" "-N 2" "-C 1" "-I 1" "-S 1" \
         "-M 1" "-u 1" "-G 2" "-x 1" "-T 30" "-p 1" "-y 1" "-w 0"; do
  # shellcheck disable=SC2086
  run flag "$B/bin/all_reduce_perf" -t 2 -b 8 -e 1K -f 4 -c 1 $f
  if [ "$rc" -eq 0 ] && $CHECK --coll all_reduce --nranks 2 "$TMP/flag.out" > "$TMP/flag.chk" 2>&1; then nflags=$((nflags + 1))
  else echo "    flag $f: exit $rc" >> "$TMP/flags.chk"; cat "$TMP/flag.chk" "$TMP/flag.out" >> "$TMP/flags.chk"; fi
done
if [ "$nflags" -eq 21 ]; then ok flags "21 flag settings"; else notok flags "$TMP/flags.chk"; fi
run json "$B/bin/all_gather_perf" -t 2 -b 1K -e 4K -f 2 -J "$TMP/out.json"
if [ "$rc" -eq 0 ] && python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
r = j["results"]
assert [x["size"] for x in r] == [1024, 2048, 4096] and j["out_of_bounds"]["count"] == 0
assert all(x["out_of_place"]["nwrong"] == 0 and x["in_place"]["bus_bw"] > 0 for x in r)
' "$TMP/out.json" > "$TMP/json.chk" 2>&1; then ok json
else cat "$TMP/json.out" >> "$TMP/json.chk"; notok json "$TMP/json.chk"; fi

# 4. A planted wrong result must be caught: #wrong > 0, FAILED, non-zero exit.
for t in $TOOLS; do
  MEND_PERF_PLANT_ERROR=1 run "plant_$t" "$B/bin/${t}_perf" -b 64 -e 256 -f 4 -t 2 -r 1 -c 1
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && $CHECK --coll "$t" --nranks 2 --wrong some "$TMP/plant_$t.out" > "$TMP/plant_$t.chk" 2>&1 &&
     grep -q "^# Out of bounds values : [1-9][0-9]* FAILED" "$TMP/plant_$t.out"; then ok "plant_$t"
  else echo "    exit code $rc" >> "$TMP/plant_$t.chk"; cat "$TMP/plant_$t.out" >> "$TMP/plant_$t.chk"; notok "plant_$t" "$TMP/plant_$t.chk"; fi
done

# 5. Bad command lines: exit 2 with a message, before any communicator exists.
run bad_args "$B/bin/all_reduce_perf" -b 2M -e 1M
if [ "$rc" -eq 2 ] && grep -q "minbytes" "$TMP/bad_args.out"; then ok bad_args; else notok bad_args "$TMP/bad_args.out"; fi

# 5b. Memory mode (-M host|device, MEND_PERF_MEMORY; the other tests run in the default mode: device
#     with a GPU in a CUDA build, else host). The header names the mode; -M host always runs on host
#     buffers; -M device runs on a GPU or stops with a message (no GPU, no CUDA in the build, or a
#     library that does not run communicators in device mode).
run mem_host "$B/bin/all_reduce_perf" -b 8 -e 1K -f 4 -t 2 -c 1 -M host -M 1
if [ "$rc" -eq 0 ] && grep -q "^# Memory mode: host (" "$TMP/mem_host.out" && grep -q "^# Host memory usage" "$TMP/mem_host.out" &&
   $CHECK --coll all_reduce --nranks 2 "$TMP/mem_host.out" > "$TMP/mem_host.chk" 2>&1; then ok mem_host
else cat "$TMP/mem_host.out" >> "$TMP/mem_host.chk"; notok mem_host "$TMP/mem_host.chk"; fi
MEND_PERF_MEMORY=host run mem_env "$B/bin/all_gather_perf" -b 8 -e 1K -f 4 -t 2 -c 1
if [ "$rc" -eq 0 ] && grep -q "^# Memory mode: host (-M host or MEND_PERF_MEMORY=host)" "$TMP/mem_env.out" &&
   ! grep -q "device *[0-9]* \[[0-9a-f]*:" "$TMP/mem_env.out"; then ok mem_env
else notok mem_env "$TMP/mem_env.out"; fi
run mem_device "$B/bin/all_reduce_perf" -b 8 -e 1K -f 4 -c 1 -M device
if [ "$rc" -eq 0 ] && grep -q "^# Memory mode: device (" "$TMP/mem_device.out" &&
   $CHECK --coll all_reduce --nranks 1 "$TMP/mem_device.out" > /dev/null 2>&1; then ok mem_device "on a GPU"
elif [ "$rc" -eq 1 ] && grep -qE "no usable GPU|built without CUDA|does not run in device mode" "$TMP/mem_device.out"; then
  ok mem_device "refused here: $(grep -oE 'no usable GPU|built without CUDA|does not run in device mode' "$TMP/mem_device.out" | head -1)"
else notok mem_device "$TMP/mem_device.out"; fi
run mem_bad "$B/bin/all_reduce_perf" -M gpu
if [ "$rc" -eq 2 ] && grep -q "Invalid value 'gpu' for -M" "$TMP/mem_bad.out"; then ok mem_bad; else notok mem_bad "$TMP/mem_bad.out"; fi

# 6. Launchers: ranks per thread, env launch via mend-run (2 and 4 ranks), MPI, testbed.
run launch_gpus_per_thread "$B/bin/all_reduce_perf" -b 8 -e 64K -f 8 -t 1 -g 2
expect_ok launch_gpus_per_thread --coll all_reduce --nranks 2
run launch_parallel_init "$B/bin/all_gather_perf" -b 1K -e 64K -f 8 -t 2 -p 1
expect_ok launch_parallel_init --coll all_gather --nranks 2
for n in 2 4; do
  run "launch_env_np$n" "$RUN" -np "$n" --timeout "$T" "$B/bin/all_reduce_perf" -b 8 -e 64K -f 8 -c 1
  expect_ok "launch_env_np$n" --coll all_reduce --nranks "$n"
done
run launch_env_threads "$RUN" -np 2 --timeout "$T" "$B/bin/alltoall_perf" -b 1K -e 64K -f 8 -t 2
expect_ok launch_env_threads --coll alltoall --nranks 4

# MPI (mpirun): tests/integration/test_perf_mpi.sh (skipped, exit 77, without Open MPI).

if [ "$(id -u)" -ne 0 ]; then ok launch_testbed "SKIP the testbed needs root"
elif ! ip netns list > /dev/null 2>&1; then ok launch_testbed "SKIP no network namespaces here"
elif [ ! -f tests/testbed/testbed.py ] && [ ! -f "$B/share/mend/testbed.py" ]; then ok launch_testbed "SKIP testbed.py missing"
else
  run launch_testbed "$RUN" -np 4 --hosts 2 --rails 2 --rate 1gbit --counters --timeout "$T" \
    "$B/bin/all_reduce_perf" -b 8 -e 1M -f 16 -c 1
  expect_ok launch_testbed --coll all_reduce --nranks 4
  if grep -q "^# host" "$TMP/launch_testbed.out" && grep -q "rail1" "$TMP/launch_testbed.out"; then ok testbed_counters
  else notok testbed_counters "$TMP/launch_testbed.out"; fi
fi

# 7. failover_perf: its parsing and summary on canned output, and (root) a short loop on a 2x2
#    testbed without a fault: every rank iterates, every result is right, the summary is printed.
run failover_selftest "$B/bin/failover_perf" --selftest
if [ "$rc" -eq 0 ] && grep -q "^# selftest: [1-9][0-9]* passed, 0 failed" "$TMP/failover_selftest.out"; then ok failover_selftest
else notok failover_selftest "$TMP/failover_selftest.out"; fi
if [ "$(id -u)" -ne 0 ] || ! ip netns list > /dev/null 2>&1; then ok failover_testbed "SKIP needs root and namespaces"
else
  run failover_testbed timeout -k 5 40 "$B/bin/failover_perf" --hosts 2 --rails 2 --rate 1gbit \
    --op all_reduce --size 256K --seconds 3 --timeout 30
  iters=$(grep -cE '^ +[0-9]+ +-?[0-9.]+ +[0-9.]+ +[0-9.]+ +0$' "$TMP/failover_testbed.out")
  if [ "$rc" -eq 0 ] && [ "$iters" -ge 5 ] && grep -q "^# no fault injected: median" "$TMP/failover_testbed.out" &&
     grep -q "^# 2 rank(s), 262144 bytes" "$TMP/failover_testbed.out" &&
     ! grep -qE '^ +[0-9]+ +-?[0-9.]+ +[0-9.]+ +[0-9.]+ +[1-9]' "$TMP/failover_testbed.out"; then ok failover_testbed "$iters iterations"
  else echo "    exit code $rc, $iters iterations" >> "$TMP/failover_testbed.out"; notok failover_testbed "$TMP/failover_testbed.out"; fi
fi

# 7b. compare.py end to end on a tiny sweep: its section is written between its markers, the rest
#     of the file is kept, and every peer that is built gets a numeric ratio per size.  `make`
#     builds a peer wherever its library is installed (Open MPI: mpicc; Gloo: libgloo-dev's
#     headers), so an installed library without its peer is a failed build, not a skip; with
#     neither installed (.ci/install-deps --no-peers) the comparison runs Mend alone.
printf '# kept\n' > "$TMP/results.md"
peers=""; missing=""
for p in mpi gloo; do
  case $p in mpi) have=$(command -v mpicc);; gloo) have=$(ls /usr/include/gloo/allreduce.h 2>/dev/null);; esac
  if [ -x "$B/bin/peers/${p}_perf" ]; then peers="$peers${peers:+,}$p"
  elif [ -n "$have" ]; then missing="$missing $p"; fi
done
if [ -n "$missing" ]; then notok compare_peers_built
  echo "    installed but not built by make:$missing (expected $B/bin/peers/<peer>_perf)"
else ok compare_peers_built "${peers:-no peer library installed}"; fi
run compare python3 benchmarks/compare.py --builddir "$B" --ranks 2 --colls allreduce --max 64 \
  --factor 8 --repeats 1 --peers "${peers:-none}" --timeout 60 --out "$TMP/results.md"
if [ "$rc" -eq 0 ] && python3 - "$TMP/results.md" "$peers" > "$TMP/compare.chk" 2>&1 <<'PY'
import sys
text, peers = open(sys.argv[1]).read(), [p for p in sys.argv[2].split(",") if p]
assert text.startswith("# kept\n") and "<!-- compare.py one-host: end -->" in text, "markers or kept text"
rows = [l.split("|")[1:-1] for l in text.splitlines() if l.startswith("| 8 |") or l.startswith("| 64 |")]
assert len(rows) == 2, rows
for r in rows:   # size, Mend time, Mend busbw, one busbw and one ratio per peer
    assert len(r) == 3 + 2 * len(peers), r
    assert float(r[1]) > 0 and all(float(x) > 0 for x in r[3 + len(peers):]), r
PY
then ok compare "peers: ${peers:-none}"
else cat "$TMP/compare.chk" "$TMP/results.md" >> "$TMP/compare.out"; notok compare "$TMP/compare.out"; fi

# 7c. crowd_choice.py on a tiny sweep: every algorithm forced and the model's choice, a regret per
#     cell (the choice's time over the best algorithm's) and their summary.
run crowd_choice python3 benchmarks/crowd_choice.py --build "$B" --rounds 1 --ranks 2 --colls allreduce,allgather \
  --sizes "-b 1K -e 4K -f 4" --iters "-n 3 -w 1"
if [ "$rc" -eq 0 ] && grep -q "^choice / best algorithm over 4 cells: geometric mean [0-9.]*, worst [0-9.]*$" "$TMP/crowd_choice.out" &&
   [ "$(grep -cE '^ +(1024|4096) +[0-9.]+ .* [0-9.]+$' "$TMP/crowd_choice.out")" -eq 4 ]; then ok crowd_choice
else notok crowd_choice "$TMP/crowd_choice.out"; fi

# 8. mend-run itself: the worst exit code, timeouts, every rank started with its own RANK.
run mendrun_ranks "$RUN" -np 3 --all-output sh -c 'echo "rank=$RANK of $WORLD_SIZE local=$LOCAL_RANK id=$NCCL_COMM_ID"'
if [ "$rc" -eq 0 ] && [ "$(grep -c 'rank=[0-2] of 3 local=[0-2] id=127.0.0.1:[0-9]' "$TMP/mendrun_ranks.out")" -eq 3 ] &&
   [ "$(grep -o 'id=[0-9.:]*' "$TMP/mendrun_ranks.out" | sort -u | wc -l)" -eq 1 ]; then ok mendrun_ranks
else notok mendrun_ranks "$TMP/mendrun_ranks.out"; fi
# --bind: rank r runs on the r-th allowed CPU (mod their number), each on exactly one.
run mendrun_bind "$RUN" -np 3 --bind --all-output python3 -c 'import os; print("rank", os.environ["RANK"], "cpus", sorted(os.sched_getaffinity(0)))'
ncpu=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
want=$(python3 -c 'import os; c=sorted(os.sched_getaffinity(0)); print(" ".join("rank %d cpus [%d]" % (r, c[r % len(c)]) for r in range(3)))')
got=$(sed -n 's/^\[[0-9]*\] //p' "$TMP/mendrun_bind.out" | sort | tr '\n' ' ' | sed 's/ $//')
if [ "$rc" -eq 0 ] && [ "$got" = "$want" ]; then ok mendrun_bind "$ncpu CPUs"
else echo "    want: $want" >> "$TMP/mendrun_bind.out"; notok mendrun_bind "$TMP/mendrun_bind.out"; fi
run mendrun_bind_testbed "$RUN" -np 2 --hosts 2 --bind true
if [ "$rc" -eq 2 ] && grep -q -- '--bind is for ranks on this machine' "$TMP/mendrun_bind_testbed.out"; then ok mendrun_bind_testbed
else notok mendrun_bind_testbed "$TMP/mendrun_bind_testbed.out"; fi
run mendrun_exitcode "$RUN" -np 3 sh -c '[ "$RANK" = 2 ] && exit 7; exit 0'
if [ "$rc" -eq 7 ] && grep -q "rank 2 exited with 7" "$TMP/mendrun_exitcode.out"; then ok mendrun_exitcode
else notok mendrun_exitcode "$TMP/mendrun_exitcode.out"; fi
# With no arguments: the usage and every option on stderr, exit 2; no program: that, not "args".
run mendrun_usage "$RUN"
if [ "$rc" -eq 2 ] && grep -q '^usage: mend-run -np N \[options\] PROG \[ARGS...\]' "$TMP/mendrun_usage.out" &&
   grep -q -- '--timeout' "$TMP/mendrun_usage.out" && ! grep -q 'required' "$TMP/mendrun_usage.out"; then ok mendrun_usage
else notok mendrun_usage "$TMP/mendrun_usage.out"; fi
run mendrun_no_program "$RUN" -np 2
if [ "$rc" -eq 2 ] && grep -q 'error: no program to run$' "$TMP/mendrun_no_program.out" &&
   ! grep -q 'args' "$TMP/mendrun_no_program.out"; then ok mendrun_no_program
else notok mendrun_no_program "$TMP/mendrun_no_program.out"; fi
run mendrun_timeout "$RUN" -np 2 --timeout 1 sleep 30
if [ "$rc" -eq 124 ]; then ok mendrun_timeout; else notok mendrun_timeout "$TMP/mendrun_timeout.out"; fi
run mendrun_failfast "$RUN" -np 2 --grace 1 sh -c '[ "$RANK" = 1 ] && exit 3; sleep 30'
if [ "$rc" -eq 3 ]; then ok mendrun_failfast; else notok mendrun_failfast "$TMP/mendrun_failfast.out"; fi
# SIGTERM to mend-run: its ranks killed, exit 143, and its folder of rank logs removed (the rank
# processes' own TMPDIR is a fresh folder that must end empty).
mkdir -p "$TMP/mr_tmp"
TMPDIR="$TMP/mr_tmp" "$RUN" -np 2 sh -c 'echo $$ > "'"$TMP"'/mr_pid.$RANK"; exec sleep 30' > "$TMP/mendrun_sigterm.out" 2>&1 &
mr=$!
for _ in $(seq 100); do [ -s "$TMP/mr_pid.0" ] && [ -s "$TMP/mr_pid.1" ] && break; sleep 0.1; done
kill -TERM "$mr"; wait "$mr"; rc=$?
alive=""
for f in "$TMP"/mr_pid.*; do [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && alive="$alive $(cat "$f")"; done
left=$(ls -A "$TMP/mr_tmp")
if [ "$rc" -eq 143 ] && [ -z "$alive" ] && [ -z "$left" ]; then ok mendrun_sigterm
else echo "    rc=$rc alive:$alive left: $left" >> "$TMP/mendrun_sigterm.out"; notok mendrun_sigterm "$TMP/mendrun_sigterm.out"; fi

exit $((fails > 0))
