#!/usr/bin/env bash
# The resilience service thread runs as SCHED_BATCH (MEND_RESIL_SCHED_BATCH, default 1): its
# millisecond ticks must not preempt a rank's busy threads (src/resilience/README.md, "Threads and
# locks").  Two ranks over the resilient net on loopback: once both are in their timed loop, each
# rank has exactly one thread whose policy (/proc/<pid>/task/<tid>/stat, field 41) is SCHED_BATCH
# (3); with the parameter at 0, none.
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export MEND_PERF_MEMORY=host MEND_RESILIENCE=1 MEND_FORCE_TRANSPORT=net NCCL_SOCKET_IFNAME=lo

# SCHED_BATCH threads of each rank process of the job whose environment holds MEND_TEST_MARK=$T/$1.
policies() {
  python3 - "MEND_TEST_MARK=$T/$1" <<'EOF'
import os, sys
want = sys.argv[1].encode()
ranks = []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        cmd = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
        env = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
        if not cmd or not cmd[0].endswith(b"all_reduce_perf") or want not in env:
            continue
        batch = 0
        for tid in os.listdir("/proc/%s/task" % pid):
            s = open("/proc/%s/task/%s/stat" % (pid, tid)).read()
            if s[s.rindex(")") + 2:].split()[38] == "3":
                batch += 1
        ranks.append(batch)
    except (OSError, IndexError, ValueError):
        continue
print(" ".join(str(b) for b in sorted(ranks)))
EOF
}

run() { # name value-of-MEND_RESIL_SCHED_BATCH expected-per-rank
  local name=$1 val=$2 want=$3 got="" i
  # A loop long enough to look at (it is stopped once seen); MEND_TEST_MARK only marks its ranks.
  MEND_TEST_MARK="$T/$name" MEND_RESIL_SCHED_BATCH=$val timeout 120 "$B/bin/mend-run" -np 2 \
    "$B/bin/all_reduce_perf" -b 8 -e 8 -n 2000000 -w 10 -c 0 > "$T/$name.out" 2>&1 &
  local job=$!
  for i in $(seq 1 200); do # up to 20 s for the table's header: both ranks are in their loop then
    grep -q "size  *count" "$T/$name.out" 2>/dev/null && break
    sleep 0.1
  done
  sleep 0.3
  got=$(policies "$name")
  kill "$job" 2>/dev/null
  pkill -f "all_reduce_perf -b 8 -e 8 -n 2000000" 2>/dev/null
  wait "$job" 2>/dev/null
  if [ "$got" = "$want $want" ]; then
    echo "ok $name: SCHED_BATCH threads per rank: $got"
  else
    echo "not ok $name: SCHED_BATCH threads per rank: '$got', want '$want $want' ($(tail -3 "$T/$name.out" | tr '\n' ' '))"
  fi
}

run resil_sched_batch 1 1
run resil_sched_normal 0 0
