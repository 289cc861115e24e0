#!/usr/bin/env bash
# Launching ranks: 2 hosts x 2 ranks get the environment a cluster gives (RANK, WORLD_SIZE,
# LOCAL_RANK, NCCL_COMM_ID on host0's mgmt address, NCCL_HOSTID, NCCL_SOCKET_IFNAME, ...),
# see only their host's NICs, and reach rank 0 at NCCL_COMM_ID over the management network
# (a bootstrap-like rendezvous). Exit codes are collected, fail-fast stops the others, and
# the controller's death (SIGTERM: teardown; SIGKILL: ranks die, `cleanup` removes the rest)
# leaves nothing behind.
# Exit: 0 pass, 1 fail, 77 skip.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/testlib.sh"
tb_require

NAME="mtl$$"
tb_track "$NAME"
cd "$HERE" || exit 1
timeout -k 5 60 python3 - "$NAME" <<'EOF'
import json, sys
from testbed import Testbed

name = sys.argv[1]
fails = []
def check(ok, what):
    print(("ok " if ok else "not ok ") + what, flush=True)
    if not ok:
        fails.append(what)

# Each rank reports its environment and NICs; rank 0 listens on NCCL_COMM_ID and every other
# rank connects to it and sends its rank: the path a bootstrap takes.
RANK_PROG = r'''
import json, os, socket, sys, time
keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NCCL_COMM_ID", "NCCL_HOSTID",
        "NCCL_SOCKET_IFNAME", "MEND_OOB_IFNAME", "MASTER_ADDR", "MASTER_PORT", "MEND_TEST_X"]
env = {k: os.environ.get(k) for k in keys}
rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
addr, port = env["NCCL_COMM_ID"].rsplit(":", 1)
peers = []
if rank == 0:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, int(port)))
    s.listen(64)
    s.settimeout(10)
    for _ in range(world - 1):
        c, a = s.accept()
        c.settimeout(5)
        peers.append([int(c.recv(16)), a[0]])
        c.close()
else:
    deadline = time.monotonic() + 10
    while True:
        try:
            c = socket.create_connection((addr, int(port)), timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    c.sendall(str(rank).encode())
    c.close()
print("RESULT " + json.dumps(dict(env=env, nics=sorted(os.listdir("/sys/class/net")),
                                  peers=sorted(peers))))
'''

with Testbed(2, 2, prefix=name) as tb:
    res = tb.launch([sys.executable, "-c", RANK_PROG], 2, env={"MEND_TEST_X": "42"}, timeout=30)
    check(res.reason is None and res.codes == [0, 0, 0, 0], "4 ranks exit 0 (%s)" % res.codes)
    for r in res.ranks:
        lines = [l for l in r.output.splitlines() if l.startswith("RESULT ")]
        if not lines:
            check(False, "rank %d printed a result: %r" % (r.rank, r.output[-500:]))
            continue
        got = json.loads(lines[0][7:])
        h, l = r.rank // 2, r.rank % 2
        want = {"RANK": str(r.rank), "WORLD_SIZE": "4", "LOCAL_RANK": str(l),
                "LOCAL_WORLD_SIZE": "2", "NCCL_COMM_ID": "10.200.0.1:%d" % res.port,
                "NCCL_HOSTID": "%sh%d" % (name, h), "NCCL_SOCKET_IFNAME": "rail",
                "MEND_OOB_IFNAME": "mgmt0", "MASTER_ADDR": "10.200.0.1",
                "MASTER_PORT": str(res.port + 1), "MEND_TEST_X": "42"}
        check(got["env"] == want, "rank %d env %s" % (r.rank, got["env"]))
        check((r.host, r.local_rank) == (h, l), "rank %d placed on h%d local %d" % (r.rank, h, l))
        check(got["nics"] == ["lo", "mgmt0", "rail0", "rail1"], "rank %d sees %s" % (r.rank, got["nics"]))
        if r.rank == 0:
            want_peers = [[k, "10.200.0.%d" % (k // 2 + 1)] for k in (1, 2, 3)]
            check(got["peers"] == want_peers,
                  "rank 0 reached by every rank over mgmt: %s" % got["peers"])

    # Exit codes per rank, and user env that overrides / removes testbed variables.
    res = tb.launch(["sh", "-c", 'echo "$NCCL_SOCKET_IFNAME/${MEND_OOB_IFNAME-unset}"; exit $RANK'],
                    2, env={"NCCL_SOCKET_IFNAME": "rail0", "MEND_OOB_IFNAME": None}, timeout=10)
    check(res.codes == [0, 1, 2, 3] and res.worst_code == 3, "exit codes %s" % res.codes)
    check(all(r.output.strip() == "rail0/unset" for r in res.ranks), "user env overrides/removes")

    # Separate stderr; death by signal maps to 128+N.
    res = tb.launch(["sh", "-c", 'echo out; echo err >&2; [ "$RANK" = 3 ] && kill -9 $$; true'],
                    2, merge_stderr=False, timeout=10)
    check([r.output for r in res.ranks] == ["out\n"] * 4 and
          [r.stderr for r in res.ranks] == ["err\n"] * 4, "stdout and stderr captured apart")
    check(res.codes == [0, 0, 0, 137], "killed rank -> 137 (%s)" % res.codes)

    # fail_fast: rank 1 fails, the others are stopped soon after instead of at the timeout.
    res = tb.launch(["sh", "-c", '[ "$RANK" = 1 ] && exit 7; exec sleep 100'], 2, timeout=20,
                    fail_fast=True)
    check(res.reason == "failure" and res.elapsed < 6, "fail_fast ended the job after %.1f s (%s)"
          % (res.elapsed, res.reason))
    check([r.status for r in res.ranks] == ["killed", "failed", "killed", "killed"]
          and res.ranks[1].code == 7, "fail_fast statuses %s" % [r.status for r in res.ranks])
print("%d checks failed" % len(fails))
sys.exit(1 if fails else 0)
EOF
rc=$?
tb_assert_gone "$NAME" || rc=1

# CLI run: per-rank output prefixed with [rank], byte table, exit code 0.
NAME2="mtm$$"
tb_track "$NAME2"
out="$(timeout -k 5 30 python3 "$TB" run --name "$NAME2" --hosts 2 --rails 2 --np-per-host 2 \
       --rate 1gbit -- sh -c 'echo "hi $RANK on $NCCL_HOSTID"' 2>&1)"; crc=$?
ok=1
for r in 0 1 2 3; do
    grep -q "^\[$r\] hi $r on ${NAME2}h$((r / 2))$" <<<"$out" || ok=0
done
grep -q "^h1     rail1 " <<<"$out" || ok=0
if [ "$crc" = 0 ] && [ "$ok" = 1 ]; then
    echo "ok CLI run: [rank] output and NIC table"
else
    echo "not ok CLI run: exit $crc, output:"; echo "$out"; rc=1
fi
tb_assert_gone "$NAME2" || rc=1

# Wait (bounded) until testbed $1 has a process in host namespace h1: the job is running.
wait_running() {
    local i
    for i in $(seq 1 100); do
        [ -n "$(ip netns pids "${1}h1" 2>/dev/null)" ] && return 0
        sleep 0.1
    done
    return 1
}
# Wait (bounded) until pid $1 is gone.
wait_gone() {
    local i
    for i in $(seq 1 100); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}

# SIGTERM to the controller: it tears everything down and exits 143.
NAME3="mtn$$"
tb_track "$NAME3"
python3 "$TB" run --name "$NAME3" --hosts 2 --rails 1 --np-per-host 1 --timeout 30 \
    -- sleep 100 >/dev/null 2>&1 &
ctl=$!
if wait_running "$NAME3"; then
    ranks="$(ip netns pids "${NAME3}h0") $(ip netns pids "${NAME3}h1")"
    kill -TERM "$ctl"
    wait_gone "$ctl"; wait "$ctl"; crc=$?
    alive=""
    for p in $ranks; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
    if [ "$crc" = 143 ] && [ -z "$alive" ]; then
        echo "ok SIGTERM to controller: exit 143, ranks gone"
    else
        echo "not ok SIGTERM to controller: exit $crc, ranks alive:$alive"; rc=1
    fi
else
    echo "not ok SIGTERM test: job never started"; rc=1; kill -KILL "$ctl" 2>/dev/null
fi
tb_assert_gone "$NAME3" || rc=1

# SIGKILL to the controller: ranks die with it (parent-death signal); the namespaces stay
# until `cleanup`, which removes them because their owner is gone but keeps a live testbed.
NAME4="mto$$"
NAME5="mtp$$"
tb_track "$NAME4"
tb_track "$NAME5"
python3 "$TB" run --name "$NAME4" --hosts 2 --rails 1 --np-per-host 1 --timeout 30 \
    -- sleep 100 >/dev/null 2>&1 &
ctl=$!
python3 "$TB" run --name "$NAME5" --hosts 2 --rails 1 --np-per-host 1 --timeout 30 \
    -- sleep 100 >/dev/null 2>&1 &
live=$!
if wait_running "$NAME4" && wait_running "$NAME5"; then
    ranks="$(ip netns pids "${NAME4}h0") $(ip netns pids "${NAME4}h1")"
    kill -KILL "$ctl"; wait "$ctl" 2>/dev/null
    gone=1
    for p in $ranks; do wait_gone "$p" || gone=0; done
    [ "$gone" = 1 ] && echo "ok SIGKILL to controller: ranks died with it" \
        || { echo "not ok SIGKILL to controller: ranks survived"; rc=1; }
    tb_exists "$NAME4" && echo "ok orphan testbed $NAME4 still there before cleanup" \
        || { echo "not ok orphan testbed vanished by itself?"; rc=1; }
    cout="$(timeout -k 5 30 python3 "$TB" cleanup --name "$NAME4" --name "$NAME5" 2>&1)"
    if grep -q "removed $NAME4; kept (owner running) $NAME5" <<<"$cout" && tb_exists "$NAME5"; then
        echo "ok cleanup removed the orphan and kept the live testbed"
    else
        echo "not ok cleanup: $cout"; rc=1
    fi
else
    echo "not ok SIGKILL test: jobs never started"; rc=1; kill -KILL "$ctl" 2>/dev/null
fi
tb_assert_gone "$NAME4" || rc=1
kill -TERM "$live" 2>/dev/null
wait_gone "$live"; wait "$live" 2>/dev/null
tb_assert_gone "$NAME5" || rc=1
tb_result "$rc"
