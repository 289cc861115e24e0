#!/usr/bin/env python3
"""Plan-view agreement on the multi-host testbed: a NIC goes down in the middle of a run of checked
AllReduces and comes back later; every rank must adopt the same plan view at the same op.

    python3 tests/testbed/replan_agree.py [--builddir build] [--list] [scenario ...]

Each scenario starts all_reduce_perf with `-n 1 -w 0 -c K` (every call checked exactly), or
tests/mh_colls (every collective and send/recv, each checked exactly), under NCCL_DEBUG=TRACE
NCCL_DEBUG_SUBSYS=TUNING,RESIL, puts one or more NICs down at a fixed time and up again later,
and checks from the ranks' logs:
  - every rank exits 0 and every result is exact;
  - every rank logs the per-op plan-view hash of every op, and all ranks log the same hash per op;
  - a view agreed with the NIC out of the picture (epoch > 0) was in force after the fault, and a
    later view with an empty picture (the fail-back view) was in force after the NIC returned;
  - the time from the health change to the new view in force (the ranks' INFO lines) is printed.
Prints `ok <scenario>: <what>` / `not ok ...` per check; exit 0 when all pass.  Needs root.
"""
import argparse
import glob
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from testbed import Testbed  # noqa: E402
from hotrepair import Checker, result_rows, wrong_count, first_error  # noqa: E402

OPHASH = re.compile(r"(\w+): opCount (\d+) rank (\d+) plan view epoch (\d+) hash ([0-9a-f]+)")
P2P = {"Send", "Recv"}  # planned by the ranks that take part only
MH_COLLS = ["AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "SendRecv", "AlltoAll", "Gather",
            "Scatter"]
AGREED = re.compile(r"Rank (\d+): plan view epoch (\d+) agreed from op (\d+) \(hash ([0-9a-f]+), (\d+) NIC\(s\)"
                    r"[^)]*channel weights ([0-9:.]+)")
INFORCE = re.compile(r"Rank (\d+): plan view epoch (\d+) in force from op (\d+) \(hash ([0-9a-f]+)\), (-?\d+) ms after "
                     r"the health change \(t=(\d+) ms\)")
ROUND = re.compile(r"Agreement: round (\d+): fromOp (\d+) chosen .* picture of (\d+) NIC\(s\) .*, (-?\d+) ms after")
RATE = "1gbit"

# nics: [(host, rail)...], all down at `down` s after the start, all up `back` s later.
SCENARIOS = {
    "2x2": dict(hosts=2, rails=2, ppn=2, args="-b 1M -e 1M -n 1 -w 0 -c 500", nics=[(1, 0)], down=1.5, back=2.0,
                timeout=90),
    # Balance: the channel of the lost rail fails over to the next NIC, which then carries two
    # channels; the lone one gets twice the data (weights 2:1:1, the same on every rank).
    "3x3": dict(hosts=3, rails=3, ppn=1, args="-b 1M -e 1M -n 1 -w 0 -c 500", nics=[(2, 1)], down=1.5, back=2.0,
                timeout=90, weights="2:1:1"),
    # Two NICs of one host: its last NIC carries all its channels (capacity 333 permille), then both return.
    "3x3-two": dict(hosts=3, rails=3, ppn=1, args="-b 1M -e 1M -n 1 -w 0 -c 500", nics=[(1, 0), (1, 2)], down=1.5,
                    back=2.0, timeout=90),
    # Every collective and send/recv (tests/mh_colls: each checked element by element against a
    # reference computed from every rank's inputs) while a NIC goes down and comes back.
    "3x3-colls": dict(hosts=3, rails=3, ppn=1, prog="mh_colls", args="--large 4194304", nics=[(0, 1)], down=1.0,
                      back=2.0, timeout=90, rate="150mbit"),
}


def read_logs(logdir):
    texts = []
    for path in sorted(glob.glob(os.path.join(logdir, "mend.*"))):
        with open(path, errors="replace") as f:
            texts.append(f.read())
    return texts


def results_exact(name, sc, res, ck):
    """all_reduce_perf: its result rows show no wrong element; mh_colls: every collective ok on every rank."""
    if sc.get("prog") != "mh_colls":
        rows = result_rows(res.ranks[0].output)
        wrong = sum(wrong_count(m) for m in rows)
        ck.check(len(rows) > 0 and wrong == 0, name, "every checked result exact (%d rows, #wrong %d)" % (len(rows), wrong))
        return
    bad = ["rank %d: %s" % (r.rank, c) for r in res.ranks for c in MH_COLLS
           if not re.search(r"^mh %s ok \d+ checks" % c, r.output or "", re.M)]
    ck.check(not bad, name, "every collective and send/recv exact on every rank (%d collectives)" % len(MH_COLLS),
             "not ok: %s" % bad[:4])


def run_in(name, sc, builddir, ck, logdir, prefix):
    if sc.get("prog") == "mh_colls":
        prog = os.path.join(builddir, "tests", "mh_colls")
    else:
        prog = os.path.join(builddir, "bin", "all_reduce_perf")
    env = {"NCCL_DEBUG": "TRACE", "NCCL_DEBUG_SUBSYS": "TUNING,RESIL", "MEND_BUILDDIR": builddir,
           "NCCL_DEBUG_FILE": os.path.join(logdir, "mend.%p"), "LD_LIBRARY_PATH": os.path.join(builddir, "lib")}
    with Testbed(sc["hosts"], sc["rails"], rate=sc.get("rate", RATE), prefix=prefix) as tb:
        job = tb.start([prog] + sc["args"].split(), ranks_per_host=sc["ppn"], env=env, timeout=sc["timeout"])
        t0 = time.monotonic()
        fault_ms = []

        def nic_down():  # the time is CLOCK_MONOTONIC, as the ranks' t= (one kernel, one clock)
            fault_ms.append(time.monotonic() * 1e3)
            for host, rail in sc["nics"]:
                tb.fault("nic_down", host, rail, sc["back"])
        tb.schedule(sc["down"], nic_down)
        res = job.wait()
        t_end = time.monotonic()
        events = list(tb.events)
    n = len(res.ranks)
    ck.check(t_end - t0 >= sc["down"] + sc["back"] + 1.0, name, "the job ran on after the NIC returned (%.1f s)"
             % (t_end - t0), "raise -c so the fault and the fail-back land inside the run")
    codes = [r.code for r in res.ranks]
    ck.check(res.worst_code == 0 and not res.timed_out, name, "every rank finished with exit 0",
             "codes %s%s" % (codes, "; " + first_error(res) if res.worst_code else ""))
    results_exact(name, sc, res, ck)

    texts = read_logs(logdir)
    per_op = {}        # op -> {rank: (epoch, hash)}
    funcs = {}         # op -> functions planned with that op count
    agreed = {}        # epoch -> picture size
    weights = {}       # epoch -> {channel weights logged by the ranks}
    in_force = {}      # epoch -> [ms after the change, per rank]
    rounds = []
    for text in texts:
        for m in OPHASH.finditer(text):
            per_op.setdefault(int(m.group(2)), {})[int(m.group(3))] = (int(m.group(4)), m.group(5))
            funcs.setdefault(int(m.group(2)), set()).add(m.group(1))
        for m in AGREED.finditer(text):
            agreed[int(m.group(2))] = int(m.group(5))
            weights.setdefault(int(m.group(2)), set()).add(m.group(6))
        for m in INFORCE.finditer(text):
            in_force.setdefault(int(m.group(2)), []).append((int(m.group(5)), int(m.group(6))))
        rounds += [(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4))) for m in ROUND.finditer(text)]
    ops = sorted(per_op)
    missing = [op for op in ops if len(per_op[op]) != n and not funcs[op] <= P2P]
    ck.check(len(ops) > 0 and not missing, name, "every rank logged the plan-view hash of every op (%d ops, %d ranks)"
             % (len(ops), n), "ops missing ranks: %s" % missing[:5])
    split = [op for op in ops if len(set(per_op[op].values())) != 1]
    ck.check(len(ops) > 0 and not split, name, "every op planned under one view on every rank",
             "ops with different views: %s" % [(op, per_op[op]) for op in split[:3]])
    epochs = sorted({e for op in ops for (e, _) in per_op[op].values()})
    faulted = [e for e in epochs if e > 0 and agreed.get(e, 0) > 0]
    back = [e for e in epochs if e > 0 and agreed.get(e, -1) == 0]
    whole = [e for e in faulted if agreed[e] >= len(sc["nics"])]
    ck.check(len(whole) > 0, name, "a view with all %d faulted NIC(s) out of the picture was in force (epochs %s)"
             % (len(sc["nics"]), whole), "pictures in force %s" % {e: agreed[e] for e in faulted})
    ck.check(len(faulted) > 0, name, "a view with the NIC(s) out of the picture was in force (epochs %s)" % faulted,
             "epochs in force %s, agreed pictures %s, testbed events %s" % (epochs, agreed, events))
    ck.check(len(back) > 0 and len(faulted) > 0 and max(back) > max(faulted) and epochs[-1] == max(back), name,
             "the fail-back view (empty picture) was in force after the NIC returned (epoch %s)" % (back[-1:]),
             "epochs in force %s, agreed pictures %s" % (epochs, agreed))
    if faulted:
        first = min(faulted)
        at = min(op for op in ops if per_op[op][0][0] >= first)
        times = in_force.get(first, [])
        since_change = max(x[0] for x in times) if times else -1
        since_fault = max(x[1] for x in times) - fault_ms[0] if times and fault_ms else -1
        ck.check(len(times) == n and 0 <= since_fault < 10000, name, "view epoch %d in force on every rank from op %d: "
                 "%.0f ms after the NIC went down, %d ms after the health change (max over %d ranks)"
                 % (first, at, since_fault, since_change, len(times)))
    if sc.get("weights") and whole:
        got = {e: sorted(weights.get(e, ())) for e in whole}
        ck.check(all(w == [sc["weights"]] for w in got.values()), name, "every rank agreed on channel weights %s "
                 "with the NIC(s) out (epochs %s)" % (sc["weights"], whole), "weights per epoch %s" % got)
    under = sorted({f for op in ops if any(e in faulted for (e, _) in per_op[op].values()) for f in funcs[op]})
    print("# %s: planned under a view without the NIC(s): %s" % (name, ", ".join(under) or "nothing"))
    for r in sorted(set(rounds)):
        print("# %s: round %d: fromOp %d, picture of %d NIC(s), agreed %d ms after the change" % ((name,) + r))
    for e in sorted(in_force):
        ms = [x[0] for x in in_force[e]]
        print("# %s: view epoch %d in force %d..%d ms after the change on %d ranks" % (name, e, min(ms), max(ms), len(ms)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--builddir", default=os.environ.get("MEND_BUILDDIR", os.path.join(HERE, "..", "..", "build")))
    ap.add_argument("--list", action="store_true", help="list the scenarios")
    ap.add_argument("--name", default="mta%d" % (os.getpid() % 100000),
                    help="testbed name stem: scenario i runs in testbed <name><letter i>")
    ap.add_argument("scenarios", nargs="*", help="scenarios to run (default: all)")
    a = ap.parse_args()
    if a.list:
        for k, v in SCENARIOS.items():
            print("%-8s %dx%d rails, %d/host: NIC(s) %s down at %.1f s for %.1f s" %
                  (k, v["hosts"], v["rails"], v["ppn"], v["nics"], v["down"], v["back"]))
        return 0
    builddir = os.path.abspath(a.builddir)
    ck = Checker()
    for i, name in enumerate(a.scenarios or list(SCENARIOS)):
        if name not in SCENARIOS:
            ck.check(False, name, "is a known scenario")
            continue
        t = time.monotonic()
        logdir = tempfile.mkdtemp(prefix="mend-agree-")
        try:
            run_in(name, SCENARIOS[name], builddir, ck, logdir, a.name + "abcdefgh"[i % 8])
        except Exception as e:  # a broken scenario must fail, not stop the others
            ck.check(False, name, "ran", "%s: %s" % (type(e).__name__, e))
        finally:
            shutil.rmtree(logdir, ignore_errors=True)
        print("# %s: %.1f s" % (name, time.monotonic() - t), flush=True)
    return 1 if ck.fails else 0


if __name__ == "__main__":
    sys.exit(main())
