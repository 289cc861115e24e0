#!/usr/bin/env python3
"""replan_perf: AllReduce bus bandwidth after one host loses one of its NICs, under each re-planning
schedule (MEND_REPLAN=backup, balance, r2, ...), measured in one run: the same testbed shape, loop
and fault for every schedule, one after the other, and their ratios.

    replan_perf --hosts 3 --rails 3 --rate 100mbit --size 16M --seconds 20 --fault-at 4
    replan_perf --modes backup,balance,r2,auto --name mtc2
    replan_perf --hosts 4 --rails 3 --down 0:0 --down 1:0 --down 1:1 --modes balance,r2,recursive

For each schedule: a fresh testbed (named NAME0, NAME1, ...), failover_loop (built next to this
program) runs the AllReduce in a loop with MEND_REPLAN set, and `nic_down` takes each --down
HOST:RAIL (default 0:0) down FAULT_AT seconds after the first timed iteration (two hosts with
different losses: recursive R2).  The plan-view agreement then makes every
rank plan under the degraded view; the iterations that start SETTLE seconds after the fault give
the busbw "after" (median), those that end before it the busbw "before".  Every iteration is
checked element by element (#wrong).  The ranks log NCCL_DEBUG_SUBSYS=TUNING, so the report also
counts the calls each schedule planned ("replan r2" lines).  The load average is printed at the
start and the end: this machine's other work shows in the numbers.  Needs root.

Diagnostics: --counters prints each host's tx bytes per rail from SETTLE after the fault to the end
(the testbed's NIC counters: is the split what the plan meant?); --bound F prints each schedule's
busbw after the fault over F x its busbw before (the surviving-capacity bound when the healthy run
fills its NICs); --log DIR --monitor-ms MS keeps every rank's output and monitor snapshots.  A
schedule may carry settings for its run only: --modes balance,balance/NCCL_MIN_NCHANNELS=6.
"""
import argparse
import importlib.machinery
import importlib.util
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.realpath(__file__))


def load_failover_perf():
    """failover_perf's parsing and testbed helpers (installed without .py next to this program)."""
    for name in ("failover_perf.py", "failover_perf"):
        path = os.path.join(HERE, name)
        if os.path.isfile(path):
            loader = importlib.machinery.SourceFileLoader("failover_perf", path)
            mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("failover_perf", loader))
            loader.exec_module(mod)
            return mod
    sys.stderr.write("replan_perf: failover_perf is not next to this program\n")
    sys.exit(2)


fp = load_failover_perf()

REPLAN = re.compile(r"AllReduce: \d+ Bytes -> replan (\w+)")


def sample_counters(tb, store):
    store.append(tb.nic_counters())


def rail_shares(samples, hosts, rails):
    """Per host, each rail's tx bytes between the two samples (after the fault settled, the end)."""
    if len(samples) < 2:
        return None
    out = []
    for h in range(hosts):
        tx = [samples[1].get((h, "rail%d" % r), (0, 0))[0] - samples[0].get((h, "rail%d" % r), (0, 0))[0]
              for r in range(rails)]
        out.append(tx)
    return out


def run_mode(a, tbmod, loop, mode, index):
    timeout = 3 * a.seconds + 120
    argv = [loop, "--op", "all_reduce", "--size", a.size, "--warmup", "2", "--timeout", str(timeout),
            "--seconds", str(a.seconds)]
    replan, *extra = mode.split("/")
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "RESIL,TUNING", "MEND_REPLAN": replan}
    env.update(kv.split("=", 1) for kv in extra)
    if a.log and a.monitor_ms:
        env.update({"MEND_MONITOR_FILE": os.path.join(os.path.abspath(a.log), "%s.%%h.%%p.jsonl" % index),
                    "MEND_MONITOR_PERIOD_MS": str(a.monitor_ms)})
    samples = []
    recs = [{"kind": "nic_down", "host": h, "rail": r, "args": [], "t": None} for h, r in a.down]
    with tbmod.Testbed(hosts=a.hosts, rails=a.rails, rate=a.rate, prefix="%s%d" % (a.name, index)) as tb:
        for rec in recs:
            tb.check_fault("nic_down", rec["host"], rec["rail"])
        job = tb.start(argv, ranks_per_host=1, env=env, timeout=timeout, fail_fast=True)
        start = fp.wait_loop_start(tb, job, timeout)
        for rec in recs if start is not None else []:
            tb.schedule(max(0.0, start + a.fault_at - time.monotonic()), fp.inject, tb, rec)
        if start is not None and a.counters:
            tb.schedule(max(0.0, start + a.fault_at + a.settle - time.monotonic()), sample_counters, tb, samples)
        res = job.wait()
        if samples:
            sample_counters(tb, samples)
        tb.wait_faults(5.0)
    rec = {"t": max(r["t"] for r in recs) if all(r["t"] is not None for r in recs) else None}
    ranks = [fp.parse_rank(r.output or "") for r in res.ranks]
    its, _ = fp.merge(ranks)
    algbytes, factor, _ = fp.loop_info(ranks)
    out = {"mode": mode, "before": None, "after": None, "n_after": 0, "wrong": sum(i.wrong for i in its),
           "code": res.worst_code, "planned": {}, "tx": rail_shares(samples, a.hosts, a.rails)}
    for r in res.ranks:
        if r.code != 0:   # a failed run says why, with or without --log
            tail = [l for l in (r.output or "").splitlines() if "WARN" in l or "rror" in l][-4:]
            out.setdefault("why", []).extend("rank %d (exit %s): %s" % (r.rank, r.code, l.strip()) for l in tail)
        if a.log:
            os.makedirs(a.log, exist_ok=True)
            with open(os.path.join(a.log, "%d.rank%d.out" % (index, r.rank)), "w") as f:
                f.write(r.output or "")
        for m in REPLAN.finditer(r.output or ""):
            out["planned"][m.group(1)] = out["planned"].get(m.group(1), 0) + 1
    if rec["t"] is None or algbytes is None:
        return out
    before = [fp.busbw(i, algbytes, factor) for i in its if i.end < rec["t"]]
    after = [fp.busbw(i, algbytes, factor) for i in its if i.start > rec["t"] + a.settle]
    out["before"] = statistics.median(before) if before else None
    out["after"] = statistics.median(after) if after else None
    out["n_after"] = len(after)
    return out


def report(a, rows, modes):
    """The table, why a run failed, the per-rail tx bytes and the ratios."""
    print("# %-9s %12s %12s %8s %7s %5s  %s" % ("schedule", "before GB/s", "after GB/s", "after/bf", "#after", "wrong",
                                                 "calls planned (TUNING)"))
    for r in rows:
        rel = r["after"] / r["before"] if r["after"] and r["before"] else None
        print("  %-9s %12s %12s %8s %7d %5d  %s%s" % (r["mode"], fp.fmt(r["before"], "%.4f"), fp.fmt(r["after"], "%.4f"),
                                                     fp.fmt(rel), r["n_after"], r["wrong"],
                                                     " ".join("%s=%d" % kv for kv in sorted(r["planned"].items())) or "-",
                                                     "" if r["code"] == 0 else "  (exit code %d)" % r["code"]))
    for r in rows:
        for line in r.get("why", []):
            print("# %s failed: %s" % (r["mode"], line))
    for r in rows if a.counters else []:
        for h, tx in enumerate(r["tx"] or []):
            tot = float(sum(tx)) or 1.0
            print("# %-9s host %d tx after the fault: %s" % (r["mode"], h, "  ".join(
                "rail%d %.1f MB (%.3f)" % (i, b / 1e6, b / tot) for i, b in enumerate(tx))))
    after = {r["mode"]: r["after"] for r in rows}
    pairs = [(m, modes[0]) for m in modes[1:]]
    if "r2" in after and "balance" in after and ("r2", "balance") not in pairs:
        pairs.append(("r2", "balance"))
    for r in rows:
        if r["after"] and r["before"] and a.bound:
            print("# %s after the fault / bound (%.3f x its before) = %.3f"
                  % (r["mode"], a.bound, r["after"] / (a.bound * r["before"])))
    for y, x in pairs:
        if after.get(x) and after.get(y):
            print("# after the fault: %s / %s = %.3f" % (y, x, after[y] / after[x]))


def main(argv=None):
    p = argparse.ArgumentParser(prog="replan_perf", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--hosts", type=int, default=3, help="testbed hosts (3)")
    p.add_argument("--rails", type=int, default=3, help="NICs per host (3)")
    p.add_argument("--rate", default="100mbit", help="NIC line rate (100mbit)")
    p.add_argument("--size", default="16M", help="bytes per AllReduce (16M)")
    p.add_argument("--seconds", type=int, default=20, help="timed loop per schedule (20)")
    p.add_argument("--fault-at", type=float, default=4.0, help="seconds after the first timed iteration (4)")
    p.add_argument("--settle", type=float, default=3.0, help="seconds after the fault before 'after' counts (3)")
    p.add_argument("--down", action="append", default=None, metavar="HOST:RAIL",
                   help="a NIC that goes down (repeatable; 0:0)")
    p.add_argument("--modes", default="backup,balance,r2",
                   help="MEND_REPLAN values, in order (backup,balance,r2); a value may carry environment "
                        "settings for its run after slashes: balance/MEND_CHUNKSIZE=131072")
    p.add_argument("--log", default=None, help="directory for every rank's output, as I.rankR.out (I: the mode's index)")
    p.add_argument("--bound", type=float, default=None, metavar="F",
                   help="print each schedule's busbw after the fault over F x its busbw before (the "
                        "surviving-capacity bound: 2/3 when 1 of 3 NICs of the slowest host is lost)")
    p.add_argument("--counters", action="store_true",
                   help="print each host's tx bytes per rail from SETTLE after the fault to the end")
    p.add_argument("--monitor-ms", type=int, default=0, metavar="MS",
                   help="with --log: every rank writes monitor snapshots (JSON lines) there every MS ms")
    p.add_argument("--name", default="mtr", help="testbed name prefix, 'mt' + up to 8 letters/digits (mtr)")
    a = p.parse_args(argv)
    try:
        a.down = [tuple(int(x) for x in d.split(":")) for d in (a.down or ["0:0"])]
        if any(len(d) != 2 or not 0 <= d[0] < a.hosts or not 0 <= d[1] < a.rails for d in a.down):
            raise ValueError
    except ValueError:
        fp.die("--down takes HOST:RAIL within %d hosts x %d rails" % (a.hosts, a.rails))
    if not re.fullmatch(r"mt[a-z0-9]{1,8}", a.name):
        fp.die("--name %r must be 'mt' followed by 1 to 8 lower-case letters or digits" % a.name)
    if os.geteuid() != 0:
        fp.die("the testbed needs root (network namespaces)", 77)
    tbmod = fp.find_testbed()
    loop = fp.find_loop(argparse.Namespace(loop=None))
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        if not all(re.fullmatch(r"[A-Z_][A-Z0-9_]*=[^,]*", kv) for kv in m.split("/")[1:]):
            fp.die("--modes: %r: settings after a schedule are NAME=VALUE, separated by slashes" % m)
    print("# replan_perf: %d hosts x %d rails at %s, AllReduce %s, nic_down %s at %.1f s, %d s per schedule"
          % (a.hosts, a.rails, a.rate, a.size, " ".join("host %d rail %d" % d for d in a.down), a.fault_at, a.seconds))
    print("# load average at start: %.2f %.2f %.2f" % os.getloadavg())
    rows = [run_mode(a, tbmod, loop, m, i) for i, m in enumerate(modes)]
    print("# load average at end:   %.2f %.2f %.2f" % os.getloadavg())
    report(a, rows, modes)
    return 0 if all(r["code"] == 0 and r["wrong"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
