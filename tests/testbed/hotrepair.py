#!/usr/bin/env python3
"""Hot-repair scenarios on the multi-host testbed: real faults land inside running collectives and
the collectives must finish with exact results, no API error, and the expected resilience events.

    python3 tests/testbed/hotrepair.py [--builddir build] [--list] [scenario ...]

Each scenario builds a testbed, starts a Mend perf tool on every rank with `-n 1 -w 0 -c K`, so
every call is a checked call (fresh integer-valued inputs, every element compared exactly with a
reference computed from all ranks' inputs: a lost, duplicated or misplaced chunk shows), fires its
faults at fixed times after the start, and checks:
  - every rank exits 0 and every result row has #wrong 0 (or, for `last_path`, that the ranks fail
    with a clear error within a bound and never hang);
  - the library's MEND_EVENT lines (NCCL_DEBUG_SUBSYS=RESIL): failures detected, traffic resumed,
    fail-back, localization verdicts, health updates on every rank;
  - per-NIC byte counters where the scenario says traffic must move (fail-back).
Prints `ok <scenario>: <what>` / `not ok ...` per check; exit 0 when all pass. Needs root.
"""
import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from testbed import Testbed  # noqa: E402

EVENT = re.compile(r"MEND_EVENT (.*)$")
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)(?:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+))?")
RATE = "1gbit"


def S(hosts, rails, ppn, tool, args, faults=(), expect=None, timeout=90, sigstop=None, starve=None, load=None,
      note="", spine=False, pre=()):
    """sigstop=(rank, at, secs); starve=(rank, at, secs, stopped_ms, running_ms): the rank is stopped
    and continued in that cycle (a rank that gets a fifth of a CPU, in bursts); load=(at, secs, n): n
    busy processes compete for the machine's CPUs; spine: the rails meet at a router; pre: faults
    (kind, host, rail, *args) in place before the job starts."""
    return dict(hosts=hosts, rails=rails, ppn=ppn, tool=tool, args=args.split(), faults=list(faults),
                expect=expect or {}, timeout=timeout, sigstop=sigstop, starve=starve, load=load, note=note,
                spine=spine, pre=list(pre))


# fault: (at_seconds, kind, host, rail, *args); args as testbed.py's fault kinds take them.
SCENARIOS = {
    "link_down": S(2, 2, 2, "all_reduce_perf", "-b 4M -e 4M -n 1 -w 0 -c 30",
                   [(1.5, "link_down", 1, 0)], {"detect": "link", "resume": True},
                   note="carrier lost under AllReduce, 2 ranks per host"),
    "nic_down_3hosts": S(3, 2, 1, "broadcast_perf", "-b 2M -e 2M -n 1 -w 0 -c 160",
                         [(1.5, "nic_down", 2, 1)], {"detect": "link", "resume": True},
                         note="NIC down under Broadcast, 3 hosts"),
    "blackhole": S(2, 2, 1, "reduce_scatter_perf", "-b 8M -e 8M -n 1 -w 0 -c 60",
                   [(1.5, "blackhole", 1, 1)], {"detect": "probe", "resume": True, "bound": 0.4},
                   note="switch port black-holed (no event at either host) under ReduceScatter"),
    "small_msgs": S(2, 2, 2, "all_reduce_perf", "-b 8 -e 32K -f 64 -n 1 -w 0 -c 1200",
                    [(1.0, "blackhole", 0, 0)], {"detect": "probe", "resume": True, "bound": 0.4},
                    note="black hole under small AllReduces (tree and ring)"),
    "reduce": S(2, 4, 1, "reduce_perf", "-b 4M -e 4M -n 1 -w 0 -c 100",
                [(1.5, "link_down", 0, 2)], {"detect": "link", "resume": True}, note="Reduce, 4 rails"),
    "flap": S(2, 2, 1, "sendrecv_perf", "-b 4M -e 4M -n 1 -w 0 -c 80",
              [(1.5, "flap", 1, 0, 200, 3)], {"detect": "link", "resume": True},
              note="link flapping every 200 ms for 3 s under send/recv"),
    "two_nics_one_host": S(2, 3, 1, "alltoall_perf", "-b 6M -e 6M -n 1 -w 0 -c 120",
                           [(1.5, "nic_down", 1, 0), (3.0, "nic_down", 1, 1)],
                           {"detect": "link", "resume": True}, note="two NICs of one host lost under AlltoAll"),
    "two_hosts_two_rails": S(3, 3, 1, "all_gather_perf", "-b 6M -e 6M -n 1 -w 0 -c 80",
                             [(1.5, "nic_down", 1, 0), (2.5, "link_down", 2, 1)],
                             {"detect": "link", "resume": True}, note="NICs lost on two hosts on different rails"),
    "failback": S(2, 2, 1, "all_reduce_perf", "-b 8M -e 8M -n 1 -w 0 -c 70",
                  [(1.5, "link_down", 1, 0, 2.5)], {"detect": "link", "resume": True, "failback": True,
                                                    "rail_back": 0},
                  note="the link returns: traffic goes back to it"),
    "localize": S(3, 2, 1, "all_reduce_perf", "-b 4M -e 4M -n 1 -w 0 -c 40",
                  [(1.5, "blackhole", 1, 0)], {"detect": "probe", "resume": True, "verdict": ("remote_nic", 1, 0),
                                               "bound": 0.4},
                  note="3 hosts: three-point probing blames host 1's NIC"),
    "sigstop": S(2, 2, 1, "all_reduce_perf", "-b 8M -e 8M -n 1 -w 0 -c 60", [],
                 {"no_detect": True, "refuted": True}, sigstop=(1, 1.5, 3.0),
                 note="a rank stopped 3 s under load, links healthy: suspicions refuted, no failover"),
    "starved": S(2, 2, 1, "all_reduce_perf", "-b 8M -e 8M -n 1 -w 0 -c 60", [],
                 {"no_detect": True}, starve=(1, 1.5, 3.0, 40, 10),
                 note="a rank that runs 10 ms in every 50 for 3 s, links healthy: no failover"),
    "cpu_load": S(2, 2, 1, "all_reduce_perf", "-b 8M -e 8M -n 1 -w 0 -c 60", [],
                  {"no_detect": True}, load=(1.5, 3.0, 6),
                  note="6 busy processes compete with the ranks for 3 s, links healthy: no failover"),
    "last_path_blackhole": S(2, 2, 1, "all_reduce_perf", "-b 8M -e 8M -n 1 -w 0 -c 45",
                             [(1.0, "nic_down", 1, 0), (2.5, "blackhole", 1, 1, 1.0)],
                             {"detect": "link", "resume": True, "last_kept": True},
                             note="one NIC lost, then the only path left black-holed for 1 s: its failed "
                                  "probes keep it (MEND_LAST_PATH_TIMEOUT) and the job finishes"),
    "rail_mismatch_spine": S(2, 2, 1, "all_reduce_perf", "-b 8M -e 8M -n 1 -w 0 -c 60",
                             [(1.5, "nic_down", 0, 0), (3.0, "nic_down", 1, 1)],
                             {"detect": "link", "resume": True, "cross": True}, spine=True,
                             note="host 0 loses rail 0, then host 1 rail 1, under AllReduce: no rail in "
                                  "common; the rails meet at a spine, a crossing path carries the job"),
    "rail_mismatch": S(2, 2, 1, "all_reduce_perf", "-b 8M -e 8M -n 1 -w 0 -c 200",
                       [(1.5, "nic_down", 0, 0), (3.0, "nic_down", 1, 1)], {"fail_within": 20.0},
                       note="the same without a spine and without a third host: no path at all, a clear error "
                            "in bounded time"),
    "rail_mismatch_relay": S(3, 2, 1, "all_reduce_perf", "-b 8M -e 8M -n 1 -w 0 -c 40",
                             [(1.5, "nic_down", 0, 0), (3.0, "nic_down", 1, 1)],
                             {"detect": "link", "resume": True, "relay": True},
                             note="host 0 loses rail 0, then host 1 rail 1, under AllReduce on rails that never "
                                  "meet: host 2, which has both, relays the hops between them"),
    "relay_setup": S(3, 2, 1, "all_reduce_perf", "-b 4M -e 4M -n 1 -w 0 -c 100", [],
                     {"relay_setup": True, "failback": True}, pre=[("nic_down", 0, 0, 4.0), ("nic_down", 1, 1, 4.0)],
                     note="the job starts with host 0 on rail 1 only and host 1 on rail 0 only (rails that never "
                          "meet): their connections are set up through host 2; when the NICs return at 4 s, "
                          "traffic fails back to the rails"),
    "setup_no_path": S(2, 2, 1, "all_reduce_perf", "-b 1M -e 1M -n 1 -w 0 -c 5", [], {"setup_fails_within": 15.0},
                       pre=[("nic_down", 0, 0), ("nic_down", 1, 1)],
                       note="the same start with two hosts only: no bridge, no route between the rails; the "
                            "set-up fails with a clear error in bounded time (not MEND_CONNECT_TIMEOUT_MS)"),
    "relay_alltoall": S(3, 2, 1, "alltoall_perf", "-b 6M -e 6M -n 1 -w 0 -c 80",
                        [(1.5, "nic_down", 0, 0), (3.0, "nic_down", 1, 1)],
                        {"detect": "link", "resume": True, "relay": True},
                        note="the same under AlltoAll: host 0 and host 1 send to each other through host 2"),
    "last_path": S(2, 2, 1, "all_reduce_perf", "-b 8M -e 8M -n 1 -w 0 -c 200",
                   [(1.5, "nic_down", 1, 0), (1.5, "nic_down", 1, 1)], {"fail_within": 20.0},
                   note="every path between the hosts dies: a clear error in bounded time"),
}


class Checker:
    def __init__(self):
        self.fails = []

    def check(self, ok, name, what, detail=""):
        line = ("ok " if ok else "not ok ") + "%s: %s" % (name, what)
        if not ok and detail:
            line += " (%s)" % detail
        print(line, flush=True)
        if not ok:
            self.fails.append(name + ": " + what)


def parse_events(logdir):
    """Events from the ranks' library logs (NCCL_DEBUG_FILE=<logdir>/mend.%p)."""
    events = []
    for path in glob.glob(os.path.join(logdir, "mend.*")):
        with open(path, errors="replace") as f:
            for line in f:
                m = EVENT.search(line)
                if not m:
                    continue
                ev = dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv)
                ev["_rank"] = int(ev.get("rank", -1))
                events.append(ev)
    return events


def log_text(logdir):
    text = []
    for path in glob.glob(os.path.join(logdir, "mend.*")):
        with open(path, errors="replace") as f:
            text.append(f.read())
    return "\n".join(text)


def result_rows(output):
    rows = []
    for line in output.splitlines():
        m = ROW.match(line)
        if m and not line.lstrip().startswith("#"):
            rows.append(m)
    return rows


def wrong_count(m):
    """#wrong of out-of-place and, when present, in-place (nccl-tests' table)."""
    total = 0
    for g in (9, 13):
        v = m.group(g)
        if v is not None and v not in ("N/A",):
            try:
                total += int(v)
            except ValueError:
                total += 1
    return total


def run_scenario(name, sc, builddir, ck, prefix=None):
    logdir = tempfile.mkdtemp(prefix="mend-hotrepair-")
    try:
        run_in(name, sc, builddir, ck, logdir, prefix)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def run_in(name, sc, builddir, ck, logdir, prefix=None):
    prog = os.path.join(builddir, "bin", sc["tool"])
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "RESIL", "NCCL_DEBUG_FILE": os.path.join(logdir, "mend.%p"),
           "LD_LIBRARY_PATH": os.path.join(builddir, "lib")}
    t_setup = time.monotonic()
    with Testbed(sc["hosts"], sc["rails"], rate=RATE, prefix=prefix, spine=sc["spine"]) as tb:
        for f in sc["pre"]:
            tb.fault(*f)
        before = tb.nic_counters()
        job = tb.start([prog] + sc["args"], ranks_per_host=sc["ppn"], env=env, timeout=sc["timeout"])
        t0 = time.monotonic()
        fault_times = []
        for f in sc["faults"]:
            at, kind, host, rail = f[:4]
            fault_times.append(t0 + at)
            tb.schedule(at, tb.fault, kind, host, rail, *f[4:])
        mid = {}
        if "rail_back" in sc["expect"]:
            # Counters once the link is back and traffic had time to return, and again at the end.
            back_at = max(f[0] + (f[4] if len(f) > 4 else 0) for f in sc["faults"]) + 2.5
            tb.schedule(back_at, lambda: mid.update(tb.nic_counters()))
        if sc["sigstop"]:
            rank, at, secs = sc["sigstop"]
            pid = job.pids[rank]
            tb.schedule(at, os.kill, pid, signal.SIGSTOP)
            tb.schedule(at + secs, os.kill, pid, signal.SIGCONT)
        if sc["starve"]:
            tb.schedule(sc["starve"][1], starve, job.pids[sc["starve"][0]], *sc["starve"][2:])
        if sc["load"]:
            tb.schedule(sc["load"][0], cpu_load, *sc["load"][1:])
        res = job.wait()
        t_end = time.monotonic()
        after = tb.nic_counters()
    events = parse_events(logdir)
    exp = sc["expect"]
    disturb = [t0 + d[1] + d[2] for d in (sc["sigstop"], sc["starve"]) if d]
    disturb += [t0 + sc["load"][0] + sc["load"][1]] if sc["load"] else []
    if (fault_times or disturb) and "fail_within" not in exp:
        last = max(fault_times + disturb)
        ck.check(t_end - last >= 1.0, name, "the job ran on after the last fault (%.1f s after it)" % (t_end - last),
                 "raise the scenario's check count so the fault lands inside running collectives")
    detail = "%d ranks, %.1f s, events: %s" % (len(res.ranks), t_end - t0,
                                               ",".join(sorted({e.get("kind", "?") for e in events})))
    if "fail_within" in exp:
        check_last_path(name, sc, res, events, fault_times, ck, log_text(logdir))
        return
    if "setup_fails_within" in exp:
        ck.check(not res.timed_out and any(r.code != 0 for r in res.ranks), name, "the set-up fails, no rank hangs",
                 "codes %s" % [r.code for r in res.ranks])
        ck.check(t_end - t0 <= exp["setup_fails_within"], name, "it fails %.1f s after the start (bound %.0f s)" %
                 (t_end - t0, exp["setup_fails_within"]))
        ck.check("did not connect" in log_text(logdir) + "".join(r.output for r in res.ranks), name,
                 "the error says no path was found", first_error(res))
        return
    codes = [r.code for r in res.ranks]
    ck.check(res.worst_code == 0 and not res.timed_out, name, "every rank finished with exit 0",
             "codes %s%s" % (codes, "; " + first_error(res) if res.worst_code else ""))
    rows = result_rows(res.ranks[0].output)
    wrong = sum(wrong_count(m) for m in rows)
    ck.check(len(rows) > 0 and wrong == 0, name, "every checked result exact (%d rows, #wrong %d)" % (len(rows), wrong))
    ck.check(all("Out of bounds values : 0 OK" in r.output for r in res.ranks[:1]), name, "no out-of-bounds values")
    detects = [e for e in events if e.get("kind") == "detect"]
    if exp.get("no_detect"):
        ck.check(not detects, name, "no failover while every link is healthy",
                 "%d detect events: %s" % (len(detects), detects[:2]))
        sus = [e for e in events if e.get("kind") == "suspect"]
        print("# %s: %d suspicion(s): %s" % (name, len(sus), ", ".join(
            "%s=%d" % (c, sum(1 for e in sus if e.get("cause") == c)) for c in sorted({e.get("cause") for e in sus}))))
        if exp.get("refuted"):
            ck.check(any(e.get("cause") == "refuted" for e in sus), name,
                     "the stalled peer was suspected and the probes refuted it", detail)
        return
    if "detect" in exp:
        causes = {e.get("cause") for e in detects}
        ck.check(exp["detect"] in causes, name, "the fault was detected (cause %s)" % exp["detect"],
                 "causes seen: %s; %s" % (sorted(causes), detail))
        if detects and fault_times and "bound" in exp:
            first = min(float(e["t"]) for e in detects)
            lag = first - fault_times[0]
            ck.check(0 <= lag <= exp["bound"], name, "detected %.0f ms after the fault (bound %.0f ms)" %
                     (lag * 1e3, exp["bound"] * 1e3))
    if exp.get("resume"):
        ck.check(any(e.get("kind") == "resume" for e in events), name, "traffic resumed on a backup path", detail)
    if exp.get("cross"):
        cross = [e for e in events if e.get("kind") == "cross"]
        ck.check(len(cross) > 0, name, "a crossing path was built (%d connections)" % len(cross), detail)
    if exp.get("relay"):
        relay = [e for e in events if e.get("kind") == "relay"]
        ck.check(len(relay) > 0, name, "a relay path through a bridge was built (%d connections)" % len(relay), detail)
        t_relay = min((float(e["t"]) for e in relay), default=None)
        resumed = [e for e in events if e.get("kind") == "resume" and t_relay is not None and float(e["t"]) >= t_relay]
        ck.check(len(resumed) > 0, name, "traffic resumed on the relay paths (%d resume events after the first "
                 "relay, %.0f ms after the second fault)" % (len(resumed), (t_relay - fault_times[-1]) * 1e3
                                                             if t_relay else -1), detail)
    if exp.get("relay_setup"):
        setup = [e for e in events if e.get("kind") == "relay" and e.get("cause") == "setup"]
        ck.check(len(setup) >= 2, name, "connections were set up through a bridge (%d)" % len(setup), detail)
    if exp.get("last_kept"):
        ck.check("kept for now" in log_text(logdir), name, "a failed probe of the only live path kept it", detail)
    if exp.get("failback"):
        fb = [e for e in events if e.get("kind") == "failback"]
        ck.check(len(fb) > 0, name, "traffic failed back to the restored path (%d connections)" % len(fb), detail)
    if "rail_back" in exp and mid:
        rail = exp["rail_back"]
        moved = min((after[(h, "rail%d" % rail)][0] - mid[(h, "rail%d" % rail)][0]) for h in range(sc["hosts"]))
        ck.check(moved > (4 << 20), name, "the restored rail%d carries traffic again (%d bytes after it returned)"
                 % (rail, moved))
    if "verdict" in exp:
        code, host, rail = exp["verdict"]
        ranks_on_host = {r.rank for r in res.ranks if r.host == host}
        loc = [e for e in events if e.get("kind") == "localize"]
        hit = [e for e in loc if e.get("verdict") == code and int(e.get("peer", -1)) in ranks_on_host
               and int(e.get("remote_dev", -1)) == rail]
        ck.check(len(hit) > 0, name, "localized: %s on host %d rail %d" % (code, host, rail),
                 "verdicts: %s" % [(e.get("_rank"), e.get("verdict"), e.get("peer"), e.get("remote_dev")) for e in loc])
        down = {(e["_rank"]) for e in events if e.get("kind") == "health" and e.get("cause") == "down"
                and int(e.get("peer", -1)) in ranks_on_host and int(e.get("dev", -1)) == rail}
        ck.check(len(down) == len(res.ranks), name, "every rank's health registry marks that NIC down (%d of %d)"
                 % (len(down), len(res.ranks)))


def starve(pid, secs, stopped_ms, running_ms):
    """Stop and continue pid in a cycle for secs seconds; it is left running."""
    end = time.monotonic() + secs
    try:
        while time.monotonic() < end:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stopped_ms / 1e3)
            os.kill(pid, signal.SIGCONT)
            time.sleep(running_ms / 1e3)
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass


def cpu_load(secs, n):
    """n busy processes for secs seconds (each bounds itself; waited for here)."""
    code = "import time\nt = time.monotonic() + %f\nwhile time.monotonic() < t: pass\n" % secs
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    for p in procs:
        try:
            p.wait(timeout=secs + 10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def first_error(res):
    for r in res.ranks:
        if r.code:
            for line in r.output.splitlines():
                if "WARN" in line or "error" in line.lower():
                    return "rank %d: %s" % (r.rank, line.strip()[:200])
    return ""


def check_last_path(name, sc, res, events, fault_times, ck, logs):
    bound = sc["expect"]["fail_within"]
    ck.check(not res.timed_out, name, "no rank hangs when no path is left", "reason %s" % res.reason)
    failed = [r for r in res.ranks if r.code != 0]
    ck.check(len(failed) > 0, name, "the collective fails instead of pretending", "codes %s" % [r.code for r in res.ranks])
    lost = [e for e in events if e.get("kind") == "lost"]
    ck.check(len(lost) > 0, name, "a 'no path left' event is reported")
    if lost and fault_times:
        lag = min(float(e["t"]) for e in lost) - max(fault_times)
        ck.check(lag <= bound, name, "the loss is declared %.1f s after the last fault (bound %.0f s)" % (lag, bound))
    text = "\n".join(r.output for r in res.ranks) + logs
    ck.check(re.search(r"remote error|system error|ncclRemoteError|ncclSystemError", text) is not None, name,
             "the error names a network/remote failure", first_error(res))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--builddir", default=os.environ.get("MEND_BUILDDIR", os.path.join(HERE, "..", "..", "build")))
    ap.add_argument("--list", action="store_true", help="list the scenarios")
    ap.add_argument("--name", help="testbed name (mt[a-z0-9]{1,10}; default: testbed.py's own)")
    ap.add_argument("scenarios", nargs="*", help="scenarios to run (default: all)")
    a = ap.parse_args()
    if a.list:
        for k, v in SCENARIOS.items():
            print("%-20s %dx%d rails, %d/host, %s: %s" % (k, v["hosts"], v["rails"], v["ppn"], v["tool"], v["note"]))
        return 0
    builddir = os.path.abspath(a.builddir)
    names = a.scenarios or list(SCENARIOS)
    ck = Checker()
    for n in names:
        if n not in SCENARIOS:
            ck.check(False, n, "is a known scenario")
            continue
        t = time.monotonic()
        try:
            run_scenario(n, SCENARIOS[n], builddir, ck, a.name)
        except Exception as e:  # a broken scenario must fail, not stop the others
            ck.check(False, n, "ran", "%s: %s" % (type(e).__name__, e))
        print("# %s: %.1f s" % (n, time.monotonic() - t), flush=True)
    return 1 if ck.fails else 0


if __name__ == "__main__":
    sys.exit(main())
