#!/usr/bin/env bash
# Testbed topology: 2 hosts x 2 rails. Every rail and mgmt reach across; rails are separate
# switches (a broadcast on one rail reaches no other NIC, a rail never carries another rail's
# subnet); tbf at 200mbit holds one TCP stream to 0.6..1.15x of the rate; teardown leaves
# no namespace, no switch and no state file.
# Exit: 0 pass, 1 fail, 77 skip (not root / no network namespaces).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/testlib.sh"
tb_require

NAME="mtb$$"
tb_track "$NAME"
cd "$HERE" || exit 1
timeout -k 5 60 python3 - "$NAME" <<'EOF'
import json, subprocess, sys, time
from testbed import Testbed, _run

name = sys.argv[1]
fails = []
def check(ok, what):
    print(("ok " if ok else "not ok ") + what, flush=True)
    if not ok:
        fails.append(what)

RATE = 200e6
with Testbed(2, 2, rate="200mbit", prefix=name) as tb:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for ns in tb.namespaces():
        check(ns in names, "namespace %s exists" % ns)
    # Each switch port sits on the bridge of its own rail.
    ports = json.loads(_run(["bridge", "-j", "-n", tb.switch_ns, "link", "show"]).stdout)
    master = {p["ifname"]: p.get("master") for p in ports}
    for h in range(2):
        for r in [0, 1, "mgmt"]:
            check(master.get(tb.switch_port(h, r)) == tb.bridge(r),
                  "port %s on %s" % (tb.switch_port(h, r), tb.bridge(r)))
    # Host view: exactly lo, mgmt0, rail0, rail1, each with its documented address.
    for h in range(2):
        out = tb.exec(h, ["ip", "-j", "-4", "addr", "show"], check=True).stdout
        addrs = {l["ifname"]: [a["local"] + "/" + str(a["prefixlen"]) for a in l["addr_info"]]
                 for l in json.loads(out)}
        want = {"lo": ["127.0.0.1/8"], "mgmt0": ["10.200.0.%d/24" % (h + 1)],
                "rail0": ["10.200.1.%d/24" % (h + 1)], "rail1": ["10.200.2.%d/24" % (h + 1)]}
        check(addrs == want, "h%d addresses %s" % (h, addrs))
    # Reachability over each rail and mgmt, both ways.
    for r in [0, 1, "mgmt"]:
        for a, b in [(0, 1), (1, 0)]:
            check(tb.ping(a, tb.addr(b, r), iface=tb.nic(r), count=3, timeout=1),
                  "ping h%d -> h%d over %s" % (a, b, tb.nic(r)))
    # A rail never carries another rail's subnet.
    for r, other in [(0, 1), (1, 0)]:
        check(not tb.ping(0, tb.addr(1, other), iface=tb.nic(r), count=2, timeout=0.5),
              "h0 %s cannot reach h1's %s address" % (tb.nic(r), tb.nic(other)))
    # A broadcast on one rail reaches only that rail's NICs. 20 frames of 64 bytes; the other
    # NICs may see a stray ARP (42 bytes) but not the broadcasts.
    for r in [0, 1, "mgmt"]:
        before = tb.nic_counters()
        tb.broadcast(0, r, count=20)
        time.sleep(0.3)
        after = tb.nic_counters()
        rx = {nic: after[(1, nic)][1] - before[(1, nic)][1] for nic in ["rail0", "rail1", "mgmt0"]}
        got = [nic for nic, n in rx.items() if n >= 20 * 64]
        check(got == [tb.nic(r)], "broadcast on h0 %s reached only h1 %s (rx bytes %s)"
              % (tb.nic(r), tb.nic(r), rx))
    # Line rate: tbf on both ends.
    check(tb.tbf_rate(0, 0) == RATE and tb.tbf_rate(0, 0, side="switch") == RATE,
          "tbf 200mbit on both ends of h0 rail0")
    check(tb.tbf_rate(0, "mgmt") is None, "mgmt0 unshaped by default")
    for r in [0, 1]:
        res = tb.tcp_throughput(0, 1, r, seconds=2.0)
        ratio = res["bps"] / RATE
        check(0.6 <= ratio <= 1.15, "rail%d TCP %.1f Mbit/s = %.2fx of 200mbit"
              % (r, res["bps"] / 1e6, ratio))
    before = tb.nic_counters()
    check(before[(0, "rail0")][0] > 40e6 and before[(1, "rail0")][1] > 40e6,
          "byte counters saw the stream on h0 rail0 tx / h1 rail0 rx")

left = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                  text=True).stdout.split() if n.startswith(name)]
check(not left, "no namespace left after teardown (%s)" % left)
sw = subprocess.run(["ip", "-n", name + "sw", "link"], capture_output=True, text=True)
check(sw.returncode != 0, "switch namespace and its bridges are gone")
print("%d checks failed" % len(fails))
sys.exit(1 if fails else 0)
EOF
rc=$?
tb_assert_gone "$NAME" || rc=1
tb_result "$rc"
