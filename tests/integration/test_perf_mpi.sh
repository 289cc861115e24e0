#!/usr/bin/env bash
# The perf tools' MPI launch path (TAP lines): an MPI build of all_reduce_perf (the same sources
# and -DMPI_SUPPORT as `make MPI=1`, compiled here so the test does not rebuild the library)
# started by mpirun with 2 processes, with 2 processes x 2 threads, and, still an MPI build,
# under mend-run's env launch. Exit 77 (skip) when Open MPI (mpicc, mpirun) is not installed.
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-${BUILDDIR:-build}}
B=$(cd "$B" && pwd)
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ! command -v mpicc > /dev/null || ! command -v mpirun > /dev/null; then
  echo "# SKIP Open MPI (mpicc, mpirun) is not installed"
  exit 77
fi
CHECK="python3 tests/integration/perf/check_output.py"
T=${MEND_PERF_TEST_TIMEOUT:-120}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH)

check() { # name rc checker-args...
  local n=$1 rc=$2; shift 2
  if [ "$rc" -eq 0 ] && $CHECK "$@" "$TMP/$n.out" > "$TMP/$n.chk" 2>&1; then echo "ok $n"; return; fi
  echo "not ok $n (exit $rc)"; fails=$((fails + 1))
  cat "$TMP/$n.chk" "$TMP/$n.out" | sed 's/^/    /' | tail -30
}

mkdir -p "$TMP/bin"
if ! mpicc -std=c11 -D_GNU_SOURCE -DMPI_SUPPORT -O2 -pthread -I"$B/include" -Ibenchmarks/common \
     benchmarks/all_reduce_perf.c benchmarks/common/*.c -o "$TMP/bin/all_reduce_perf" \
     -L"$B/lib" -lnccl -lm > "$TMP/mpicc.out" 2>&1; then
  echo "not ok mpi_build"; sed 's/^/    /' "$TMP/mpicc.out" | tail -20
  exit 1
fi
echo "ok mpi_build"
PROG="$TMP/bin/all_reduce_perf"

timeout -k 5 "$T" "${MPIRUN[@]}" -np 2 "$PROG" -b 8 -e 64K -f 8 -c 1 > "$TMP/mpirun_np2.out" 2>&1
check mpirun_np2 $? --coll all_reduce --nranks 2
timeout -k 5 "$T" "${MPIRUN[@]}" -np 2 "$PROG" -b 8 -e 64K -f 8 -c 1 -t 2 > "$TMP/mpirun_threads.out" 2>&1
check mpirun_threads $? --coll all_reduce --nranks 4
# A wrong result on one process is counted by all: #wrong > 0, FAILED, non-zero exit.
MEND_PERF_PLANT_ERROR=1 timeout -k 5 "$T" "${MPIRUN[@]}" -x MEND_PERF_PLANT_ERROR -np 2 "$PROG" \
  -b 64 -e 256 -f 4 -c 1 > "$TMP/mpirun_plant.out" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "^# Out of bounds values : [1-9][0-9]* FAILED" "$TMP/mpirun_plant.out"
then echo "ok mpirun_plant"
else echo "not ok mpirun_plant (exit $rc)"; fails=$((fails + 1)); sed 's/^/    /' "$TMP/mpirun_plant.out" | tail -20; fi
# Without mpirun the MPI build falls back to the env launch (mend-run) and its TCP control plane.
timeout -k 5 "$T" "$B/bin/mend-run" -np 2 --timeout "$T" "$PROG" -b 8 -e 64K -f 8 > "$TMP/env_launch.out" 2>&1
check env_launch $? --coll all_reduce --nranks 2
exit $((fails > 0))
