#!/usr/bin/env python3
"""small_latency_trace: where an 8-byte AllReduce's time goes across two testbed hosts, per configuration.

    benchmarks/small_latency_trace.py --name mtlt [--build build] [--iters 20000]
        [--config LABEL=K=V,K=V ...]

For each --config (default: Mend as built, then `MEND_RESILIENCE=0`), two runs of the perf tool on
one testbed (2 hosts x 2 rails at 1 gbit/s), host h's rank pinned to CPU h:
  1. `perf stat` with system-call tracepoints: system calls, context switches and CPU time per
     operation (a rank that polls a socket makes a receive call per look: the count per operation
     tells how often it looked, not what the operation cost);
  2. `perf record` of the receive and send calls (tracepoints, no sampling): the median time from
     a message's arrival (a receive call that returned data) to this rank's next send (its own work
     on the critical path: placing, reducing, finishing the operation, posting the next) and the
     receive calls made in between (looks at a socket that found nothing yet), the median
     send call (which carries the message through the testbed's kernel path to the peer's socket)
     and the median time between two sends (a message's full turn).
Both runs slow the ranks (perf's own work); compare configurations within one invocation. Needs
root and `perf`; ranks are rank 0 (host 0) for the tables.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "testbed"))
import testbed  # noqa: E402

SYSCALLS = ["recvfrom", "sendmsg", "poll", "futex", "sched_yield", "read", "write", "accept4"]
DEFAULT_CONFIGS = ["mend=", "noresil=MEND_RESILIENCE=0"]


def run(tb, a, env, wrap):
    env = dict(env, LD_LIBRARY_PATH=os.path.join(a.build, "lib"))
    tool = os.path.join(a.build, "bin", "all_reduce_perf")
    argv = ["sh", "-c", 'exec %s -- taskset -c $MEND_TESTBED_HOST "$@"' % wrap, "sh", tool,
            "-b", "8", "-e", "8", "-n", str(a.iters), "-w", "100", "-c", "0"]
    res = tb.launch(argv, ranks_per_host=1, env=env, timeout=a.timeout)
    us = None
    for line in (res.ranks[0].output or "").splitlines():
        f = line.split()
        if len(f) > 6 and f[0] == "8":
            us = float(f[5])
    if us is None:
        raise RuntimeError("the perf tool failed:\n%s" % str(res)[-2000:])
    return us


def stat_counts(path):
    """{event: count} from a `perf stat -x,` file."""
    out = {}
    with open(path) as f:
        for line in f:
            p = line.strip().split(",")
            if len(p) > 2 and not p[0].startswith("#"):
                try:
                    out[p[2].split(":")[-1].replace("sys_enter_", "")] = float(p[0])
                except ValueError:
                    pass
    return out


def gaps(path):
    """Medians (us): arrival -> next send, send call, send -> send; on the busiest thread."""
    txt = subprocess.run(["perf", "script", "-i", path, "-F", "tid,time,event,trace", "--ns"],
                         capture_output=True, text=True, check=True).stdout
    ev = []
    for line in txt.splitlines():
        m = re.match(r"\s*(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)", line)
        if not m:
            continue
        tid, t, name, trace = m.group(1), float(m.group(2)) * 1e6, m.group(3), m.group(4)
        if "sys_exit_recvfrom" in name:
            r = re.search(r"0x([0-9a-f]+)", trace)
            v = int(r.group(1), 16) if r else -1
            if 0 < v < 1 << 63:
                ev.append((tid, "R", t))
        elif "sys_enter_sendmsg" in name:
            ev.append((tid, "S", t))
        elif "sys_exit_sendmsg" in name:
            ev.append((tid, "E", t))
        elif "sys_enter_recvfrom" in name:
            ev.append((tid, "L", t))
    if not ev:
        return None
    main = max(set(e[0] for e in ev), key=lambda x: sum(1 for e in ev if e[0] == x))
    rs, call, turn = [], [], []
    last_r = last_s = None
    looks = 0
    for _, k, t in (e for e in ev if e[0] == main):
        if k == "L" and last_r is not None:
            looks += 1
        elif k == "R":
            last_r = t
        elif k == "S":
            if last_r is not None:
                rs.append(t - last_r)
                last_r = None
            if last_s is not None:
                turn.append(t - last_s)
            last_s = t
        elif k == "E" and last_s is not None:
            call.append(t - last_s)
    med = lambda x: statistics.median(x) if x else float("nan")  # noqa: E731
    return med(rs), len(rs), med(call), med(turn), looks / max(len(rs), 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", required=True, help="testbed name (mt[a-z0-9]{1,10})")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--config", action="append", help="LABEL=K=V,K=V (default: %s)" % DEFAULT_CONFIGS)
    ap.add_argument("--timeout", type=float, default=300.0)
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    if not shutil.which("perf"):
        sys.stderr.write("small_latency_trace: needs perf\n")
        return 2
    configs = []
    for c in a.config or DEFAULT_CONFIGS:
        label, _, kvs = c.partition("=")
        configs.append((label, dict(kv.split("=", 1) for kv in kvs.split(",") if kv)))
    tmp = tempfile.mkdtemp(prefix="small_latency_trace.")
    events = ",".join(["task-clock", "context-switches", "raw_syscalls:sys_enter"] +
                      ["syscalls:sys_enter_%s" % s for s in SYSCALLS])
    rows = []
    try:
        with testbed.Testbed(hosts=2, rails=2, rate="1gbit", prefix=a.name) as tb:
            for label, env in configs:
                st = os.path.join(tmp, label + ".$MEND_TESTBED_HOST.stat")
                us_stat = run(tb, a, env, "perf stat -x, -e %s -o %s" % (events, st))
                c = stat_counts(os.path.join(tmp, label + ".0.stat"))
                rec = os.path.join(tmp, label + ".$MEND_TESTBED_HOST.data")
                us_rec = run(tb, a, env, "perf record -q -m 8M -c 1 -e syscalls:sys_exit_recvfrom "
                             "-e syscalls:sys_enter_recvfrom -e syscalls:sys_enter_sendmsg -e syscalls:sys_exit_sendmsg -o %s" % rec)
                g = gaps(os.path.join(tmp, label + ".0.data"))
                rows.append((label, us_stat, c, us_rec, g))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = a.iters + 100
    print("# per 8-byte AllReduce on rank 0 (%d operations; perf slows every run)" % n)
    print("%-10s %8s %8s %8s %8s %8s %8s" % ("config", "us/op", "calls", "recv", "send", "ctxsw", "cpu-us"))
    for label, us, c, _, _ in rows:
        print("%-10s %8.2f %8.2f %8.2f %8.2f %8.3f %8.2f" % (
            label, us, c.get("raw_syscalls:sys_enter", c.get("sys_enter", 0)) / n, c.get("recvfrom", 0) / n,
            c.get("sendmsg", 0) / n, c.get("context-switches", 0) / n, c.get("task-clock", 0) * 1000 / n))
    print("# medians (us) under perf record: arrival -> next send (and the receive calls made"
          " between them, on average), the send call, send -> send")
    for label, _, _, us, g in rows:
        if g:
            print("%-10s us/op %7.2f  arrival->send %6.2f (n=%d, %.2f looks)  send call %5.2f  send->send %6.2f"
                  % (label, us, g[0], g[1], g[4], g[2], g[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
