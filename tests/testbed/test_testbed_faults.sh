#!/usr/bin/env bash
# Every fault kind has its kernel-visible effect, and undoing it restores traffic:
#   nic_down  -> host NIC admin down, operstate DOWN;      nic_up restores
#   link_down -> host NIC admin up, NO-CARRIER, DOWN;      link_up restores
#   blackhole -> host NIC still UP with carrier, port disabled, pings lost; unblackhole restores
#   flap      -> carrier seen both on and off, link up when it ends
#   set_rate  -> tbf rate changed on both ends and throughput follows
#   schedule / fault(..., seconds) fire on time and restore on time
# and a job that hangs (also a child that left its process group) is killed at its timeout,
# a job still running at teardown is killed, and the CLI `run` reports 124 and cleans up.
# Exit: 0 pass, 1 fail, 77 skip.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/testlib.sh"
tb_require

NAME="mtf$$"
tb_track "$NAME"
cd "$HERE" || exit 1
timeout -k 5 90 python3 - "$NAME" <<'EOF'
import os, sys, time
from testbed import Testbed, netns_pids

name = sys.argv[1]
fails = []
def check(ok, what):
    print(("ok " if ok else "not ok ") + what, flush=True)
    if not ok:
        fails.append(what)

def until(pred, timeout=3.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()

def pings(tb, a, b, r):
    return tb.ping(a, tb.addr(b, r), iface=tb.nic(r), count=3, timeout=0.5)

def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

with Testbed(2, 2, rate="1gbit", prefix=name) as tb:
    # nic_down: the host itself takes its NIC down.
    tb.nic_down(1, 0)
    st = tb.link_state(1, 0)
    check(not st["admin_up"] and st["operstate"] == "DOWN", "nic_down: h1 rail0 %s" % st)
    check(not tb.ping(0, tb.addr(1, 0), iface="rail0", count=1, timeout=0.5), "nic_down: no ping")
    tb.nic_up(1, 0)
    check(until(lambda: tb.link_state(1, 0)["operstate"] == "UP"), "nic_up: h1 rail0 UP")
    check(pings(tb, 0, 1, 0), "nic_up: ping works again")

    # link_down: carrier loss seen at the host, its NIC still admin up.
    tb.link_down(1, 0)
    st = tb.link_state(1, 0)
    check(st["admin_up"] and not st["carrier"] and "NO-CARRIER" in st["flags"]
          and st["operstate"] == "DOWN", "link_down: h1 rail0 %s" % st)
    check(tb.link_state(0, 0)["operstate"] == "UP", "link_down: h0 rail0 unaffected")
    tb.link_up(1, 0)
    check(until(lambda: tb.link_state(1, 0)["carrier"]), "link_up: carrier back")
    check(pings(tb, 0, 1, 0), "link_up: ping works again")

    # blackhole: no event anywhere, frames vanish.
    check(pings(tb, 0, 1, 1), "blackhole: ping works before")
    tb.blackhole(1, 1)
    st0, st1 = tb.link_state(0, 1), tb.link_state(1, 1)
    check(st1["operstate"] == "UP" and st1["carrier"] and st0["operstate"] == "UP",
          "blackhole: both hosts still UP with carrier")
    check(tb.port_state(1, 1) == "disabled", "blackhole: switch port disabled")
    check(not tb.ping(0, tb.addr(1, 1), iface="rail1", count=2, timeout=0.5), "blackhole: pings lost")
    check(pings(tb, 0, 1, 0), "blackhole: other rail unaffected")
    tb.unblackhole(1, 1)
    check(tb.port_state(1, 1) == "forwarding", "unblackhole: port forwarding")
    check(pings(tb, 0, 1, 1), "unblackhole: ping works again")

    # flap: sample the host's carrier while the switch port toggles every 100 ms for 1.2 s.
    fl = tb.flap(1, 0, period_ms=100, seconds=1.2)
    seen = set()
    end = time.monotonic() + 1.2
    while time.monotonic() < end:
        seen.add(tb.link_state(1, 0)["carrier"])
        time.sleep(0.01)
    check(fl.join(5.0), "flap: thread ended")
    check(seen == {True, False}, "flap: host saw carrier on and off (%s)" % seen)
    check(fl.toggles >= 8 and not fl.errors, "flap: %d toggles, errors %s" % (fl.toggles, fl.errors))
    check(until(lambda: tb.link_state(1, 0)["carrier"]), "flap: link up at the end")
    check(pings(tb, 0, 1, 0), "flap: ping works after")

    # set_rate: tbf on both ends, throughput follows.
    tb.set_rate(1, 0, "50mbit")
    check(tb.tbf_rate(1, 0) == 50e6 and tb.tbf_rate(1, 0, side="switch") == 50e6,
          "set_rate: 50mbit on both ends of h1 rail0")
    check(tb.tbf_rate(0, 0) == 1e9, "set_rate: h0 rail0 still 1gbit")
    res = tb.tcp_throughput(0, 1, 0, seconds=1.5)
    check(0.6 <= res["bps"] / 50e6 <= 1.15, "set_rate: TCP %.1f Mbit/s at 50mbit" % (res["bps"] / 1e6))
    tb.set_rate(1, 0, None)
    check(tb.tbf_rate(1, 0) is None and tb.tbf_rate(1, 0, side="switch") is None,
          "set_rate None: shaping removed")

    # schedule and fault() with automatic restore.
    t0 = time.monotonic()
    tb.schedule(0.3, tb.link_down, 0, 1)
    check(tb.link_state(0, 1)["carrier"], "schedule: not fired yet")
    check(until(lambda: not tb.link_state(0, 1)["carrier"], 2.0) and time.monotonic() - t0 >= 0.3,
          "schedule: link_down fired after 0.3 s")
    tb.link_up(0, 1)
    tb.fault("nic_down", 0, 1, "0.4")
    check(not tb.link_state(0, 1)["admin_up"], "fault nic_down:0.4 applied")
    check(until(lambda: tb.link_state(0, 1)["admin_up"], 2.0), "fault nic_down:0.4 restored")
    check(tb.wait_faults(5.0), "wait_faults: nothing pending")
    kinds = [text.split()[0] for _, text in tb.events]
    check(all(k in kinds for k in ["nic_down", "link_down", "blackhole", "rate", "flap"]),
          "event log records the faults")

    # A job that hangs, with a child that escaped into its own session, is killed at its timeout.
    res = tb.launch(["sh", "-c", "setsid sleep 1000 & exec sleep 1000"], 1, timeout=2)
    check(res.timed_out and res.codes == [124, 124], "hung job: timeout, codes %s" % res.codes)
    check(1.9 <= res.elapsed <= 5, "hung job: stopped after %.2f s" % res.elapsed)
    left = [p for ps in netns_pids(tb.namespaces()).values() for p in ps]
    check(not left, "hung job: no process left in the namespaces (%s)" % left)

    # A job still running at teardown.
    job = tb.start(["sleep", "1000"], 2, timeout=100)
    pids = job.pids
    check(until(lambda: len([p for ps in netns_pids(tb.namespaces()).values() for p in ps]) == 4),
          "running job: 4 ranks in the namespaces")
check(not any(alive(p) for p in pids), "teardown killed the running job's ranks")
print("%d checks failed" % len(fails))
sys.exit(1 if fails else 0)
EOF
rc=$?
tb_assert_gone "$NAME" || rc=1

# CLI: a hanging job ends with 124 and the testbed is gone; --fault fires during the job.
NAME2="mtg$$"
tb_track "$NAME2"
out="$(timeout -k 5 30 python3 "$TB" run --name "$NAME2" --hosts 2 --rails 1 --np-per-host 1 \
       --timeout 2 -- sleep 1000 2>&1)"; crc=$?
if [ "$crc" = 124 ] && grep -q "rank 1 (h1 local 0) timeout" <<<"$out"; then
    echo "ok CLI run: hung job -> exit 124"
else
    echo "not ok CLI run: hung job exit $crc, output:"; echo "$out"; rc=1
fi
tb_assert_gone "$NAME2" || rc=1

NAME3="mti$$"
tb_track "$NAME3"
out="$(timeout -k 5 30 python3 "$TB" run --name "$NAME3" --hosts 2 --rails 1 --np-per-host 1 \
       --timeout 10 --fault link_down:1:0:0.3 -- \
       sh -c 'sleep 1.2; cat /sys/class/net/rail0/operstate /sys/class/net/rail0/carrier' 2>&1)"; crc=$?
if [ "$crc" = 0 ] && grep -q "^\[0\] up$" <<<"$out" && grep -q "^\[1\] down$" <<<"$out" \
   && grep -q "^\[1\] 0$" <<<"$out" && grep -q "link_down h1 rail0" <<<"$out"; then
    echo "ok CLI run --fault link_down:1:0:0.3: rank 1 saw rail0 down, rank 0 up"
else
    echo "not ok CLI run --fault: exit $crc, output:"; echo "$out"; rc=1
fi
tb_assert_gone "$NAME3" || rc=1
tb_result "$rc"
