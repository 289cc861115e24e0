#!/usr/bin/env python3
"""Hot repair on a grown communicator: 2 hosts x 2 rails, 2 ranks per host. Ranks 0-2 make a
communicator, rank 3 (host 1) joins it through ncclCommGrow, and the grown communicator runs every
collective, then 4 MiB AllReduces in a loop, each checked element by element (test_grow
--testbed-repair). Once the loop runs, host 1's rail-0 link goes down (switch side); the loop goes
on for 3 s more. Checks: every rank exits 0 (every result exact, no API error), the loop ran
AllReduces after the cut, the resilient net detected the link loss and resumed traffic on a backup
path, and some of those events are the grown-in rank's (rank 3 exists only in the grown
communicator). Prints `ok <check>` / `not ok <check>: <why>`; exit 0 when all pass. Needs root.

    python3 tests/testbed/grow_repair.py --builddir build [--name mtj1]
"""
import argparse
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from testbed import Testbed  # noqa: E402
from hotrepair import parse_events  # noqa: E402

LOOP_WAIT_S = 60.0  # the loop must start within this (init and grow included)
JOB_TIMEOUT_S = 90.0
RATE = "1gbit"


def check(fails, ok, what, detail=""):
    print(("ok grow_repair: " if ok else "not ok grow_repair: ") + what + ("" if ok else ": " + detail),
          flush=True)
    if not ok:
        fails.append(what)


def wait_for(path, job, bound):
    """True once path exists; False when the bound passes or the job ended first."""
    until = time.monotonic() + bound
    while time.monotonic() < until:
        if os.path.exists(path):
            return True
        if job.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def run(builddir, name):
    fails = []
    prog = os.path.join(builddir, "tests", "test_grow")
    if not os.access(prog, os.X_OK):
        check(fails, False, "test_grow built", prog + " missing")
        return 1
    work = tempfile.mkdtemp(prefix="mend-grow-repair-")
    logdir = os.path.join(work, "log")
    os.mkdir(logdir)
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "RESIL", "NCCL_DEBUG_FILE": os.path.join(logdir, "mend.%p"),
           "LD_LIBRARY_PATH": os.path.join(builddir, "lib"), "MEND_BUILDDIR": builddir}
    try:
        with Testbed(2, 2, rate=RATE, prefix=name) as tb:
            job = tb.start([prog, "--testbed-repair", work], ranks_per_host=2, env=env, timeout=JOB_TIMEOUT_S)
            looping = wait_for(os.path.join(work, "looping"), job, LOOP_WAIT_S)
            check(fails, looping, "the grown communicator's AllReduce loop started")
            if looping:
                tb.fault("link_down", 1, 0)
                open(os.path.join(work, "faulted"), "w").close()
            else:
                job.kill("the loop never started")  # rank 0 would wait for the cut until the timeout
            res = job.wait()
            out = "\n".join(r.output for r in res.ranks)
            bad = ["rank %d %s code %d: %s" % (r.rank, r.status, r.code, r.output.strip()[-300:].replace("\n", " | "))
                   for r in res.ranks if r.code != 0]  # one line: a test summary keeps the first line only
            check(fails, not bad, "every rank exits 0 (every result exact)", "; ".join(bad))
            m = re.search(r"grow_repair: (\d+) AllReduces exact on 4 ranks, (\d+) after the cut", out)
            check(fails, m is not None and int(m.group(2)) >= 5,
                  "AllReduces ran on after the cut (%s)" % (m.group(0)[len("grow_repair: "):] if m else "no summary"),
                  out[-300:].replace("\n", " | "))
        events = parse_events(logdir)
        detects = [e for e in events if e.get("kind") == "detect"]
        resumes = [e for e in events if e.get("kind") == "resume"]
        check(fails, any(e.get("cause") == "link" for e in detects), "the link loss was detected",
              "%d detect events: %s" % (len(detects), detects[:2]))
        check(fails, bool(resumes), "traffic resumed on a backup path", "%d events" % len(events))
        grown = [e for e in detects + resumes if e.get("rank") == "3" or e.get("peer") == "3"]
        check(fails, bool(grown), "the grown-in rank's connections failed over (%d of %d events)"
              % (len(grown), len(detects + resumes)),
              "events: %s" % [(e.get("rank"), e.get("peer"), e.get("kind")) for e in detects + resumes][:8])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--builddir", default=os.environ.get("MEND_BUILDDIR", os.path.join(HERE, "..", "..", "build")))
    ap.add_argument("--name", default="mtj%d" % (os.getpid() % 100000), help="testbed name (mt[a-z0-9]{1,10})")
    args = ap.parse_args()
    return run(os.path.abspath(args.builddir), args.name)


if __name__ == "__main__":
    sys.exit(main())
