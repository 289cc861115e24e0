#!/usr/bin/env bash
# The throughput monitor (src/monitor, docs/monitor.md): 2 and 4 ranks over sockets with the monitor
# on write per-process snapshots; a real Prometheus parser (python3-prometheus-client) reads them,
# and their counters are checked against the bytes the ranks moved, against each other (what one
# rank sent on a connection the other received) and against the op count.  Also JSON lines, the
# periodic writer, the monitor off, and bad parameters.
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-build}
PY=
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import prometheus_client.parser' 2>/dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
  echo "# skip: no prometheus_client for python3 (apt-get install python3-prometheus-client)"
  exit 77
fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export MEND_PERF_MEMORY=host MEND_FORCE_TRANSPORT=net NCCL_SOCKET_IFNAME=lo NCCL_ALGO=Ring
ITERS=4 WARM=1
OPS=$((2 * WARM + 2 + 2 * ITERS)) # warm-up at -e and at -b, then per in/out-of-place: 1 untimed + -n

run() { # tag np bytes [env...]: one all_reduce_perf job, snapshots in $T/<tag>-<pid>.prom
  local tag=$1 np=$2 bytes=$3; shift 3
  env MEND_MONITOR_FILE="$T/$tag-%p.prom" MEND_MONITOR_WINDOW=4 MEND_MONITOR_PERIOD_MS=50 "$@" \
    timeout 120 "$B/bin/mend-run" -np "$np" "$B/bin/all_reduce_perf" -b "$bytes" -e "$bytes" -n $ITERS -w $WARM -c 0 \
    > "$T/$tag.log" 2>&1
}

# Checks over the snapshots of two jobs (tags a, b) of np ranks moving AllReduces of bytes_a and
# bytes_b: each prints ok/not ok lines.
check() { # name np bytes_a bytes_b
  "$PY" - "$T" "$@" "$OPS" <<'EOF'
import glob, os, sys
from prometheus_client.parser import text_string_to_metric_families
d, name, np_, ba, bb, ops = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
bad = []
def load(tag):
    files = sorted(glob.glob(os.path.join(d, tag + "-*.prom")))
    if len(files) != np_:
        bad.append("%s: %d snapshot files for %d ranks" % (tag, len(files), np_))
    per = {}
    for f in files:
        fams = {m.name: m for m in text_string_to_metric_families(open(f).read())}
        info = fams["mend_monitor_info"].samples
        pid = os.path.basename(f)[len(tag) + 1:-len(".prom")]
        if len(info) != 1 or info[0].labels["pid"] != pid or info[0].labels["window"] != "4":
            bad.append("%s: mend_monitor_info %s in %s" % (tag, info, f))
        ranks = {s.labels["rank"] for s in fams["mend_comm_ops"].samples}
        if len(ranks) != 1:
            bad.append("%s: %s holds ranks %s" % (tag, f, ranks))
            continue
        per[int(ranks.pop())] = fams
    return per
def val(fams, fam, **labels):
    out = [s.value for s in fams[fam].samples if all(s.labels.get(k) == v for k, v in labels.items())]
    return out
def sample_set(fams, fam, suffix=""):
    return [s for s in fams[fam].samples if s.name == fam + suffix]
jobs = {"a": load(name + "a"), "b": load(name + "b")}
for tag, per in jobs.items():
    if sorted(per) != list(range(np_)):
        bad.append("%s: ranks %s" % (tag, sorted(per)))
        continue
    sent = {}
    for r, f in per.items():
        if val(f, "mend_comm_ops") != [ops]:
            bad.append("%s rank %d: mend_comm_ops_total %s, ops issued %d" % (tag, r, val(f, "mend_comm_ops"), ops))
        conns = sample_set(f, "mend_conn_bytes", "_total")
        if val(f, "mend_comm_net_connections") != [len(conns)] or len(conns) == 0:
            bad.append("%s rank %d: %d connection rows, mend_comm_net_connections %s" % (tag, r, len(conns), val(f, "mend_comm_net_connections")))
        if val(f, "mend_comm_plan_epoch") != [0] or val(f, "mend_comm_ranks") != [np_]:
            bad.append("%s rank %d: plan epoch %s, ranks %s" % (tag, r, val(f, "mend_comm_plan_epoch"), val(f, "mend_comm_ranks")))
        for dirc, dirn in (("send", "tx"), ("recv", "rx")):
            for fam in ("mend_conn_bytes", "mend_conn_messages"):
                nicfam = fam.replace("conn", "nic")
                total = sum(val(f, fam, dir=dirc))
                nic = sum(val(f, nicfam, dir=dirn))
                if total != nic or total <= 0:
                    bad.append("%s rank %d: %s %s sum %d, %s %s %d" % (tag, r, fam, dirc, total, nicfam, dirn, nic))
        for s in conns:
            # (sender, receiver, channel, use): from the sender's row, and from the receiver's as "recv".
            p, c, u = int(s.labels["peer"]), s.labels["channel"], s.labels["use"]
            sent[(r, p, c, u) if s.labels["dir"] == "send" else (p, r, c, u, "recv")] = s.value
        for fam in ("mend_nic_throughput_bytes_per_second", "mend_nic_window_latency_seconds", "mend_nic_window_seconds"):
            v = val(f, fam, dir="tx")
            if not v or min(v) <= 0:
                bad.append("%s rank %d: %s %s" % (tag, r, fam, v))
        if min(val(f, "mend_nic_idle_seconds")) < 0 or val(f, "mend_conn_inflight", dir="send") != [0] * len(val(f, "mend_conn_inflight", dir="send")):
            bad.append("%s rank %d: idle %s, send inflight %s after the job" % (tag, r, val(f, "mend_nic_idle_seconds"), val(f, "mend_conn_inflight", dir="send")))
    # What each rank sent on a connection is what its peer received on it.
    for key, v in sent.items():
        if len(key) == 4 and sent.get(key + ("recv",)) != v:
            bad.append("%s: rank %d sent %d bytes to rank %d on channel %s, which received %s" % (tag, key[0], v, key[1], key[2], sent.get(key + ("recv",))))
# The bytes the ranks moved: a ring AllReduce of n bytes sends 2(np-1)/np x n from each rank, so
# job b moved ops x 2(np-1)/np x (bb - ba) more per rank than job a (what does not scale with the
# size, e.g. control messages, cancels out).
want = ops * 2 * (np_ - 1) * (bb - ba) // np_
for r in range(np_):
    try:
        got = sum(val(jobs["b"][r], "mend_nic_bytes", dir="tx")) - sum(val(jobs["a"][r], "mend_nic_bytes", dir="tx"))
    except KeyError:
        continue
    if got != want:
        bad.append("rank %d: job b sent %d bytes more than job a, the ranks moved %d more" % (r, got, want))
print("not ok %s: %s" % (name, "; ".join(bad[:6])) if bad else "ok %s" % name)
EOF
}

for np in 2 4; do
  run "p${np}a" $np 1048576; ra=$?
  run "p${np}b" $np 2097152; rb=$?
  if [ $ra -ne 0 ] || [ $rb -ne 0 ]; then
    echo "not ok monitor_prom_${np}ranks: jobs exited $ra, $rb: $(tail -3 "$T/p${np}a.log" "$T/p${np}b.log" | tr '\n' ' ')"
  else
    check "p${np}" $np 1048576 2097152 | sed "s/^\(not \)\{0,1\}ok p${np}/\1ok monitor_prom_${np}ranks/"
  fi
done

# JSON lines (chosen by the .jsonl suffix): one object per line, the same counters.
env MEND_MONITOR_FILE="$T/j-%p.jsonl" timeout 120 "$B/bin/mend-run" -np 2 "$B/bin/all_reduce_perf" -b 64K -e 64K \
  -n $ITERS -w $WARM -c 0 > "$T/j.log" 2>&1
rc=$?
"$PY" - "$T" "$rc" "$OPS" <<'EOF'
import glob, json, sys
d, rc, ops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bad = [] if rc == 0 else ["job exited %d" % rc]
files = glob.glob(d + "/j-*.jsonl")
if len(files) != 2:
    bad.append("%d files" % len(files))
for f in files:
    rows = [json.loads(l) for l in open(f)]
    kinds = [r["kind"] for r in rows]
    comm = [r for r in rows if r["kind"] == "comm"]
    nic = sum(r["nic_bytes_total"] for r in rows if r["kind"] == "nic" and r["dir"] == "tx")
    conn = sum(r["conn_bytes_total"] for r in rows if r["kind"] == "conn" and r["dir"] == "send")
    if kinds[0] != "process" or len(comm) != 1 or comm[0]["comm_ops_total"] != ops or nic != conn or nic <= 0:
        bad.append("%s: kinds %s, comm %s, nic tx %s, conn send %s" % (f, sorted(set(kinds)), comm, nic, conn))
print("not ok monitor_json: " + "; ".join(bad) if bad else "ok monitor_json")
EOF

# The thread writes snapshots while the job runs (every 50 ms), not only at the end.
MEND_MONITOR_FILE="$T/live-%p.prom" MEND_MONITOR_PERIOD_MS=50 timeout 120 "$B/bin/mend-run" -np 2 \
  "$B/bin/all_reduce_perf" -b 1M -e 1M -n 400 -w 1 -c 0 > "$T/live.log" 2>&1 &
job=$!
seen=0
for _ in $(seq 1 1000); do
  if compgen -G "$T/live-*.prom" > /dev/null; then
    kill -0 $job 2>/dev/null && seen=1
    break
  fi
  kill -0 $job 2>/dev/null || break
  sleep 0.01
done
wait $job; rc=$?
if [ $rc -eq 0 ] && [ $seen -eq 1 ]; then echo "ok monitor_periodic"
else echo "not ok monitor_periodic: rc=$rc, snapshot seen while running: $seen"; fi

# Off: MEND_MONITOR=0 wins over a file; bad values warn and the job still runs.
run off 2 65536 MEND_MONITOR=0; rc=$?
n=$(ls "$T"/off-*.prom 2>/dev/null | wc -l)
if [ $rc -eq 0 ] && [ "$n" -eq 0 ]; then echo "ok monitor_off"; else echo "not ok monitor_off: rc=$rc, $n files"; fi
env MEND_MONITOR_FILE="$T/bad-%q.prom" NCCL_DEBUG=WARN timeout 120 "$B/bin/mend-run" -np 2 "$B/bin/all_reduce_perf" \
  -b 8 -e 8 -n 1 -w 0 -c 1 > "$T/bad.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "MEND_MONITOR_FILE=.*'%q'" "$T/bad.log" && ! ls "$T"/bad-* > /dev/null 2>&1; then
  echo "ok monitor_bad_file"
else echo "not ok monitor_bad_file: rc=$rc: $(grep -m2 WARN "$T/bad.log")"; fi
env MEND_MONITOR_FILE="$T/w-%p.prom" MEND_MONITOR_WINDOW=0 MEND_MONITOR_ANOMALY=2 NCCL_DEBUG=WARN timeout 120 \
  "$B/bin/mend-run" -np 2 "$B/bin/all_reduce_perf" -b 8 -e 8 -n 1 -w 0 -c 1 > "$T/w.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "MEND_MONITOR_WINDOW=0 is outside" "$T/w.log" && grep -q "MEND_MONITOR_ANOMALY=2 is not" "$T/w.log" &&
   [ "$(cat "$T"/w-*.prom | grep -c '^mend_monitor_info{.*window="8"}')" -eq 2 ]; then
  echo "ok monitor_bad_values"
else echo "not ok monitor_bad_values: rc=$rc: $(grep -m3 WARN "$T/w.log" | tr '\n' ' ')"; fi

# mend-top --once: one frame from the 2-rank job's snapshots, from its JSON lines, and from a
# snapshot written here with known values (a NIC down, an anomaly, failovers).
TOP="$B/bin/mend-top"
out=$("$PY" "$TOP" --once "$T/p2a-*.prom" 2>&1); rc=$?
rows=$(echo "$out" | grep -cE '^[0-9]+ +[0-9a-f]{16} +[01] +0 +lo +- +[0-9.]+ [KMG]?B/s .* +[0-9]+\*? +-$')
ops=$(echo "$out" | grep -cE "^[0-9]+ +[0-9a-f]{16} +[01] +$OPS +0 +0 +0 +4$")
if [ $rc -eq 0 ] && [ "$rows" -eq 2 ] && [ "$ops" -eq 2 ]; then echo "ok mend_top_once"
else echo "not ok mend_top_once: rc=$rc, $rows NIC rows, $ops comm rows: $out"; fi
out=$("$PY" "$TOP" --once "$T/j-*.jsonl" 2>&1); rc=$?
if [ $rc -eq 0 ] && [ "$(echo "$out" | grep -cE '^[0-9]+ +[0-9a-f]{16} +[01] +0 +lo ')" -eq 2 ]; then echo "ok mend_top_jsonl"
else echo "not ok mend_top_jsonl: rc=$rc: $out"; fi
cat > "$T/fixed.prom" <<'PROM'
# TYPE mend_monitor_info gauge
mend_monitor_info{host="h1",pid="4242",window="8"} 1
mend_monitor_snapshot_timestamp_seconds 1700000000.5
mend_comm_ops_total{comm="00000000000000ab",rank="3"} 777
mend_comm_plan_epoch{comm="00000000000000ab",rank="3"} 2
mend_comm_failovers_total{comm="00000000000000ab",rank="3"} 5
mend_comm_failbacks_total{comm="00000000000000ab",rank="3"} 1
mend_comm_net_connections{comm="00000000000000ab",rank="3"} 8
mend_nic_bytes_total{comm="00000000000000ab",rank="3",nic="1",nic_name="rail\"1",dir="tx"} 1000
mend_nic_throughput_bytes_per_second{comm="00000000000000ab",rank="3",nic="1",nic_name="rail\"1",dir="tx"} 125000000
mend_nic_throughput_bytes_per_second{comm="00000000000000ab",rank="3",nic="1",nic_name="rail\"1",dir="rx"} 2500
mend_nic_anomalies_total{comm="00000000000000ab",rank="3",nic="1",nic_name="rail\"1",dir="tx"} 4
mend_nic_anomaly{comm="00000000000000ab",rank="3",nic="1",nic_name="rail\"1",dir="tx"} 1
mend_nic_state{comm="00000000000000ab",rank="3",peer="3",nic="1"} 1
mend_nic_state{comm="00000000000000ab",rank="3",peer="2",nic="1"} 0
mend_conn_stalled_seconds{comm="00000000000000ab",rank="3",peer="2",channel="1",dir="send",use="coll",nic="1"} 0.25
mend_conn_stalled_seconds{comm="00000000000000ab",rank="3",peer="2",channel="3",dir="send",use="coll",nic="1"} 0.5
PROM
out=$("$PY" "$TOP" --once "$T/fixed.prom" 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -qE '^4242 +00000000000000ab +3 +1 +rail"1 +down +125.00 MB/s +- +2.50 KB/s +- +4\* +0.500s$' &&
   echo "$out" | grep -qE '^4242 +00000000000000ab +3 +777 +2 +5 +1 +8$'; then echo "ok mend_top_values"
else echo "not ok mend_top_values: rc=$rc: $out"; fi
echo "garbage line" > "$T/broken.prom"
out=$("$PY" "$TOP" --once "$T/broken.prom" 2>&1); rc=$?
if [ $rc -eq 1 ] && echo "$out" | grep -q "not a sample line"; then echo "ok mend_top_bad_file"
else echo "not ok mend_top_bad_file: rc=$rc: $out"; fi

# mend-top live, in a terminal (tmux): while a job runs it refreshes, and the last-second averages
# fill in (they need two reads); Ctrl-C ends it.
if command -v tmux > /dev/null; then
  sock="$T/tmux.sock"
  MEND_MONITOR_FILE="$T/tl-%p.prom" MEND_MONITOR_PERIOD_MS=50 timeout 120 "$B/bin/mend-run" -np 2 \
    "$B/bin/all_reduce_perf" -b 1M -e 1M -n 3000 -w 1 -c 0 > "$T/tl.log" 2>&1 &
  job=$!
  tmux -S "$sock" new-session -d -x 150 -y 20 "$PY $TOP --interval 0.2 --span 1 '$T/tl-*.prom'"
  live=0 screen=
  for _ in $(seq 1 150); do
    sleep 0.1
    screen=$(tmux -S "$sock" capture-pane -p 2>/dev/null)
    # a NIC row with the window and the 1 s average of tx, and the window of rx: 3 rates
    if echo "$screen" | head -1 | grep -q '^mend-top ' &&
       [ "$(echo "$screen" | grep -E '^[0-9]+ +[0-9a-f]{16} +[01] +0 +lo ' | grep -o 'B/s' | wc -l)" -ge 6 ]; then
      live=1; break
    fi
    kill -0 $job 2>/dev/null || break
  done
  tmux -S "$sock" send-keys C-c
  gone=0
  for _ in $(seq 1 30); do tmux -S "$sock" has-session 2>/dev/null || { gone=1; break; }; sleep 0.1; done
  tmux -S "$sock" kill-server 2>/dev/null
  kill $job 2>/dev/null; wait $job 2>/dev/null
  if [ $live -eq 1 ] && [ $gone -eq 1 ]; then echo "ok mend_top_live"
  else echo "not ok mend_top_live: averages shown $live, ended by Ctrl-C $gone: $screen"; fi
else
  echo "# mend_top_live skipped: no tmux"
fi

# Snapshots are written to a temporary file renamed over the target: none is left behind.
left=$(ls "$T" | grep -c '\.tmp\.' || true)
if [ "$left" -eq 0 ]; then echo "ok monitor_no_temp_files"; else echo "not ok monitor_no_temp_files: $(ls "$T" | grep '\.tmp\.' | head -3)"; fi
