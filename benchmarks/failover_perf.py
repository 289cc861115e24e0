#!/usr/bin/env python3
"""failover_perf: one collective in a loop on the testbed, a fault injected at a given time, and
what the fault cost: per-iteration time and bus bandwidth across it, detection and recovery
time, the extra time of the iteration it hit, and the bandwidth kept (against the time before
the fault and against the line-rate model).

    failover_perf --hosts 2 --rails 2 --rate 1gbit --np-per-host 1 --op all_reduce --size 4M \\
        --seconds 20 --fault link_down:1:0:5 [--compare-off]
    failover_perf --selftest          # the parsing and summary on canned output (no testbed)

Each rank runs failover_loop (built next to this program): every iteration starts together
(the ranks meet on a TCP control plane over the management network), is timed with
CLOCK_MONOTONIC and checked element by element against integer-valued references, so a lost or
duplicated chunk shows in #wrong. A fault is KIND:host:rail:at_seconds[:args], as testbed.py
takes it, except that at_seconds counts from the first timed iteration (communicator setup does
not shift it); its injection time is taken with time.monotonic(), the ranks' clock on this
machine. The ranks run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=RESIL and the library's event
lines (`MEND_EVENT t=<s> rank=<r> kind=<detect|resume|...> peer=<r> dev=<d> cause=<c>`) give the
detection and recovery times. Needs root (network namespaces); standard library only.
"""
import argparse
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.realpath(__file__))
GOODPUT = 1448.0 / 1514.0   # TCP payload per Ethernet frame on the wire (MSS 1448, tbf counts 1514)
OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "sendrecv", "alltoall"]
DOWN_KINDS = ("nic_down", "link_down", "blackhole", "flap")
HEAD = re.compile(r"^# failover_loop (.*)$", re.M)
START = re.compile(r"^start t=([0-9.]+)$", re.M)
ITER = re.compile(r"^iter=(\d+) t0=([0-9.]+) t1=([0-9.]+) wrong=(\d+)$")
ERROR = re.compile(r"^error iter=(-?\d+) t=([0-9.]+) (.*)$")


def die(msg, code=2):
    sys.stderr.write("failover_perf: %s\n" % msg)
    sys.exit(code)


# ---- parsing what the ranks printed
def key_values(text):
    """{key: value} of the key=value tokens in text."""
    return dict(tok.split("=", 1) for tok in text.split() if "=" in tok and not tok.startswith("="))


def parse_event(line):
    """A MEND_EVENT line as a dict (t float, rank/peer/dev int, kind, cause, ...), or None."""
    at = line.find("MEND_EVENT")
    if at < 0:
        return None
    ev = key_values(line[at + len("MEND_EVENT"):])
    try:
        ev["t"] = float(ev["t"])
        ev["rank"] = int(ev.get("rank", -1))
        ev["peer"] = int(ev.get("peer", -1))
        ev["dev"] = int(ev.get("dev", -1))
    except (KeyError, ValueError):
        return None
    return ev if ev.get("kind") else None


def parse_rank(text):
    """One rank's output: header fields, loop start, {iter: (t0, t1, wrong)}, errors, events."""
    out = {"head": {}, "start": None, "iters": {}, "errors": [], "events": [], "done": False}
    m = HEAD.search(text)
    if m:
        out["head"] = key_values(m.group(1))
    m = START.search(text)
    if m:
        out["start"] = float(m.group(1))
    for line in text.splitlines():
        m = ITER.match(line)
        if m:
            out["iters"][int(m.group(1))] = (float(m.group(2)), float(m.group(3)), int(m.group(4)))
        elif ERROR.match(line):
            out["errors"].append(line)
        elif line.startswith("done iters="):
            out["done"] = True
        else:
            ev = parse_event(line)
            if ev:
                out["events"].append(ev)
    return out


class Iteration:
    """One iteration over all ranks: from the first rank's start to the last rank's end."""

    def __init__(self, index, start, end, wrong):
        self.index, self.start, self.end, self.wrong = index, start, end, wrong

    @property
    def seconds(self):
        return self.end - self.start


def merge(ranks):
    """Iterations every rank finished, in order; and how many only some ranks finished."""
    if not ranks:
        return [], 0
    common = set.intersection(*[set(r["iters"]) for r in ranks])
    partial = len(set.union(*[set(r["iters"]) for r in ranks]) - common)
    its = []
    for i in sorted(common):
        rows = [r["iters"][i] for r in ranks]
        its.append(Iteration(i, min(x[0] for x in rows), max(x[1] for x in rows), sum(x[2] for x in rows)))
    return its, partial


def loop_info(ranks):
    """algbytes, busfactor and the op of the loop, from the ranks' header lines."""
    for r in ranks:
        h = r["head"]
        if "algbytes" in h and "busfactor" in h:
            return float(h["algbytes"]), float(h["busfactor"]), h
    return None, None, {}


def busbw(it, algbytes, factor):
    return algbytes / it.seconds / 1e9 * factor if it.seconds > 0 else 0.0


def median(vals):
    return statistics.median(vals) if vals else None


# ---- the summary
def recovery(events, fault_t):
    """(first detect after the fault, recovery seconds or None, [(rank, peer) never resumed], nconn)."""
    detects = sorted((e for e in events if e["kind"] == "detect" and e["t"] >= fault_t), key=lambda e: e["t"])
    if not detects:
        return None, None, [], 0
    first = detects[0]
    conns = {}
    for e in detects:
        conns.setdefault((e["rank"], e["peer"]), e["t"])
    ends, missing = [], []
    for conn, t_det in sorted(conns.items()):
        resumes = [e["t"] for e in events if e["kind"] == "resume" and (e["rank"], e["peer"]) == conn
                   and e["t"] >= t_det]
        if resumes:
            ends.append(min(resumes))
        else:
            missing.append(conn)
    rec = max(ends) - first["t"] if ends and not missing else None
    return first, rec, missing, len(conns)


def model_busbw(rails, rate_bps, fault):
    """Bus-bandwidth bound of a host (GB/s) before and after the fault: surviving rails x rate x
    TCP goodput; (None, None) for unshaped NICs."""
    if not rate_bps:
        return None, None
    per = rate_bps / 8 / 1e9 * GOODPUT
    before = rails * per
    if not fault or fault["rail"] == "mgmt":
        return before, before
    if fault["kind"] in DOWN_KINDS:
        return before, (rails - 1) * per
    if fault["kind"] == "rate" and fault.get("new_rate_bps") is not None:
        return before, (rails - 1) * per + fault["new_rate_bps"] / 8 / 1e9 * GOODPUT
    return before, before


def hit_iteration(its, fault_t, fault_end, detect_t):
    """The iteration the fault hit: of those running at some time between the start of the fault
    command and the later of its end and the first detection, the longest (the one that waited for
    the repair); the first to end after the fault when none ran then.  Not simply the first to end
    after the fault command: one that ends a few ms after it, before the kernel event took effect,
    would be named instead of the one that stalled."""
    window_end = max(t for t in (fault_t, fault_end, detect_t) if t is not None)
    running = [it for it in its if it.start <= window_end and it.end > fault_t]
    if running:
        return max(running, key=lambda it: it.seconds)
    return next((it for it in its if it.end > fault_t), None)


def hit_bound(hit, healthy_ms, model, fault_t, fault_end):
    """The shortest the hit iteration can be, as a multiple of a healthy one, and the share of an
    iteration it had done before the fault: that share at the healthy rate, the rest at the
    surviving capacity (the model's bound after over before), with no time at all for detection.
    The fault takes effect within its command: taking its end makes the share done the largest
    possible, so the bound is one for any moment of it.  (None, None) without a model or where the
    fault leaves the capacity as it was."""
    before, after = model
    if not healthy_ms or not before or not after or after >= before:
        return None, None
    t = fault_end if fault_end is not None else fault_t
    done = min(1.0, max(0.0, (t - hit.start) * 1e3 / healthy_ms))
    return done + (1.0 - done) * before / after, done


def summarize(its, events, fault_t, algbytes, factor, model=(None, None), fault_end=None):
    """The numbers of the summary, as a dict (None where they do not apply)."""
    s = {"iterations": len(its), "wrong": sum(it.wrong for it in its), "events": len(events), "fault_t": fault_t}
    bw = {it.index: busbw(it, algbytes, factor) for it in its}
    before = [it for it in its if fault_t is None or it.end <= fault_t]
    s["before_n"] = len(before)
    s["before_ms"] = median([it.seconds * 1e3 for it in before])
    s["before_bw"] = median([bw[it.index] for it in before])
    s.update(hit=None, extra_ms=None, hit_bound=None, hit_done=None, detect=None, detect_s=None, recovery_s=None, missing=[],
             conns=0, after_n=0, after_bw=None, kept=None, kept_model=None)
    s["model_before"], s["model_after"] = model
    if fault_t is None:
        return s
    first, rec, missing, nconn = recovery(events, fault_t)
    s["confirmed"] = next((e for e in sorted(events, key=lambda e: e["t"]) if e["kind"] == "suspect"
                           and e.get("cause") == "path" and e["t"] >= fault_t), None)
    hit = hit_iteration(its, fault_t, fault_end, first["t"] if first else None)
    if hit:
        s["hit"] = hit
        if s["before_ms"] is not None:
            s["extra_ms"] = hit.seconds * 1e3 - s["before_ms"]
        s["hit_bound"], s["hit_done"] = hit_bound(hit, s["before_ms"], model, fault_t, fault_end)
    s["missing"], s["conns"] = missing, nconn
    if first:
        s["detect"], s["detect_s"] = first, first["t"] - fault_t
        s["recovery_s"] = rec
    # After recovery: iterations that start once every connection resumed (without events: after
    # the hit iteration ended).
    if first and rec is not None:
        settled = first["t"] + rec
    else:
        settled = hit.end if hit else None
    after = [it for it in its if settled is not None and it.start >= settled]
    s["after_n"] = len(after)
    s["after_bw"] = median([bw[it.index] for it in after])
    if s["after_bw"] is not None and s["before_bw"]:
        s["kept"] = s["after_bw"] / s["before_bw"]
    if s["after_bw"] is not None and model[1]:
        s["kept_model"] = s["after_bw"] / model[1]
    return s


def fmt(v, spec="%.3f", none="n/a"):
    return none if v is None else spec % v


def iteration_lines(its, ref_t, algbytes, factor, ref_name):
    out = ["# %6s  %12s  %10s  %11s  %8s" % ("iter", "t-%s(s)" % ref_name, "time(ms)", "busbw(GB/s)", "#wrong")]
    for it in its:
        out.append("  %6d  %12.4f  %10.2f  %11.4f  %8d" % (it.index, it.start - ref_t, it.seconds * 1e3,
                                                         busbw(it, algbytes, factor), it.wrong))
    return out


# Marks drawn on the plot: event kind -> (label, colour); the first event of each kind after the fault.
PLOT_MARKS = [("detect", "detection", "tab:red"), ("resume", "repair", "tab:green"),
              ("replan", "re-plan", "tab:purple"), ("failback", "fail-back", "tab:blue")]


def plot(path, its, events, fault, s, algbytes, factor, ref_t, title):
    """Per-iteration time and busbw against time (s from the fault, or the start), with the fault,
    detection, repair (every connection resumed), re-plan and fail-back marked.  Needs matplotlib
    (Debian's python3-matplotlib); returns an error text, or None once the picture is written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "--plot needs matplotlib (apt-get install python3-matplotlib) in %s" % sys.executable
    if not its:
        return "no iteration to plot"
    x = [(it.start + it.end) / 2 - ref_t for it in its]
    fig, (ax_t, ax_b) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.5))
    ax_t.plot(x, [it.seconds * 1e3 for it in its], ".-", color="tab:gray", lw=0.8, ms=3)
    ax_t.set_ylabel("iteration time (ms)")
    ax_t.set_yscale("log")
    ax_b.plot(x, [busbw(it, algbytes, factor) for it in its], ".-", color="tab:orange", lw=0.8, ms=3)
    ax_b.set_ylabel("busbw (GB/s)")
    ax_b.set_xlabel("time (s) from the %s" % ("fault" if fault else "start"))
    if s.get("model_before"):
        ax_b.axhline(s["model_before"], ls=":", color="tab:gray", lw=0.8, label="bound before")
    if fault and s.get("model_after"):
        ax_b.axhline(s["model_after"], ls="--", color="tab:gray", lw=0.8, label="bound after")
    marks = []
    if fault:
        marks.append((fault["t"], "fault %s" % fault.get("spec", fault.get("kind", "")), "black"))
        after = sorted((e for e in events if e["t"] >= fault["t"]), key=lambda e: e["t"])
        for kind, label, colour in PLOT_MARKS:
            first = next((e for e in after if e["kind"] == kind), None)
            if kind == "resume" and s.get("detect") and s.get("recovery_s") is not None:
                first = {"t": s["detect"]["t"] + s["recovery_s"]}  # the last connection's resume
            if first:
                marks.append((first["t"], label, colour))
    for t, label, colour in marks:
        for ax in (ax_t, ax_b):
            ax.axvline(t - ref_t, color=colour, lw=1, ls="-" if colour == "black" else "--")
        ax_t.annotate(label, (t - ref_t, 1.0), xycoords=("data", "axes fraction"), rotation=90, va="top",
                      ha="right", fontsize=7, color=colour)
    if s.get("hit") is not None:
        h = s["hit"]
        ax_t.axvspan(h.start - ref_t, h.end - ref_t, color="tab:red", alpha=0.12, lw=0)
    ax_b.legend(loc="lower right", fontsize=7) if ax_b.get_legend_handles_labels()[0] else None
    ax_t.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def applied(fault):
    """How long the fault command took, when known (the kernel event lies within it)."""
    if fault and fault.get("t_end") is not None and fault.get("t") is not None:
        return ", which took %.1f ms" % ((fault["t_end"] - fault["t"]) * 1e3)
    return ""


def summary_lines(s, fault, off=None):
    out = ["# Summary"]
    if fault is None:
        out.append("# no fault injected: median %s ms, busbw %s GB/s over %d iterations"
                   % (fmt(s["before_ms"], "%.2f"), fmt(s["before_bw"], "%.4f"), s["before_n"]))
    else:
        if s["detect"] is None:
            out.append("# no failover event seen (no MEND_EVENT kind=detect after the fault)")
        else:
            d = s["detect"]
            out.append("# detection time : %.1f ms from the start of the fault command%s (rank %d, peer %d, "
                       "dev %d, cause %s)" % (s["detect_s"] * 1e3, applied(fault), d["rank"], d["peer"], d["dev"],
                                              d.get("cause", "?")))
            c = s.get("confirmed")
            if c:
                out.append("# confirmation   : path silent %s ms (suspected after %s ms), probes %s ms, the other "
                           "path's probe answered in %s us" % (c.get("silent_ms", "?"), c.get("suspect_ms", "?"),
                                                                c.get("confirm_ms", "?"), c.get("ref_us", "?")))
            if s["recovery_s"] is not None:
                out.append("# recovery time  : %.1f ms (detect to the last first resume, max over %d connection(s))"
                           % (s["recovery_s"] * 1e3, s["conns"]))
            else:
                out.append("# recovery time  : n/a: no resume after the detect on %s"
                           % ", ".join("rank %d peer %d" % c for c in s["missing"]))
        hit = s["hit"]
        if hit is None:
            out.append("# hit iteration  : none (the loop ended before the fault)")
        else:
            out.append("# hit iteration  : %d, %.2f ms, extra %s ms over the median of %d iterations before the fault (%s ms)"
                       % (hit.index, hit.seconds * 1e3, fmt(s["extra_ms"], "%.2f"), s["before_n"],
                          fmt(s["before_ms"], "%.2f")))
            ratio = hit.seconds * 1e3 / s["before_ms"] if s["before_ms"] else None
            out.append("# hit / healthy  : %s (the hit iteration ran from %+.1f to %+.1f ms of the fault command)"
                       % (fmt(ratio, "%.2f"), (hit.start - s["fault_t"]) * 1e3, (hit.end - s["fault_t"]) * 1e3))
            if s.get("hit_bound") and ratio is not None:
                out.append("# hit bound      : %.2f x healthy (%.2f of an iteration done before the fault, the rest "
                           "at the surviving capacity, no time to detect); hit / bound %.2f"
                           % (s["hit_bound"], s["hit_done"], ratio / s["hit_bound"]))
        out.append("# bandwidth kept : %s of before (median busbw %s / %s GB/s, %d / %d iterations)"
                   % (fmt(s["kept"], "%.3f"), fmt(s["after_bw"], "%.4f"), fmt(s["before_bw"], "%.4f"),
                      s["after_n"], s["before_n"]))
    if s["model_after"]:
        kept = s["kept_model"] if fault is not None else (s["before_bw"] / s["model_before"] if s["before_bw"] else None)
        out.append("# vs the model   : %s of %.4f GB/s (busbw bound = surviving rails x rate per host x TCP "
                   "goodput 1448/1514)" % (fmt(kept, "%.3f"), s["model_after"] if fault else s["model_before"]))
    else:
        out.append("# vs the model   : n/a (unshaped NICs; give --rate)")
    if off is not None:
        ratio = s["before_bw"] / off["before_bw"] if s["before_bw"] and off["before_bw"] else None
        out.append("# resilience off : busbw(on)/busbw(off) = %s (median %s / %s GB/s, %d / %d iterations; "
                   "target >= 0.98)" % (fmt(ratio, "%.3f"), fmt(s["before_bw"], "%.4f"),
                                        fmt(off["before_bw"], "%.4f"), s["before_n"], off["before_n"]))
    return out


# ---- running on the testbed
def find_testbed():
    for d in (os.path.join(HERE, "..", "tests", "testbed"), os.path.join(HERE, "..", "..", "tests", "testbed"),
              os.path.join(HERE, "..", "share", "mend")):
        if os.path.isfile(os.path.join(d, "testbed.py")):
            sys.path.insert(0, os.path.abspath(d))
            import testbed
            return testbed
    die("cannot find the testbed (testbed.py in tests/testbed or share/mend)")


def find_loop(a):
    cands = [a.loop] if a.loop else [os.path.join(HERE, "failover_loop"),
                                     os.path.join(HERE, "..", "build", "bin", "failover_loop")]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    die("cannot find failover_loop (build it with make, or give --loop PATH)")


def wait_loop_start(tb, job, timeout):
    """CLOCK_MONOTONIC time of rank 0's first timed iteration, read from its output file."""
    path = os.path.join(tb.logdir, "%s.rank0.out" % job.tag)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and job.poll() is None:
        try:
            with open(path, errors="replace") as f:
                m = START.search(f.read())
            if m:
                return float(m.group(1))
        except OSError:
            pass
        time.sleep(0.02)
    return None


def inject(tb, rec):
    rec["t"] = time.monotonic()
    try:
        tb.fault(rec["kind"], rec["host"], rec["rail"], *rec["args"])
    except Exception as e:    # recorded and reported; the loop goes on
        rec["error"] = str(e)
    rec["t_end"] = time.monotonic()


def run_once(a, tbmod, loop, faults, env_extra):
    """One testbed, one job; returns (parsed ranks, job result, fault records, loop start, events)."""
    argv = [loop, "--op", a.op, "--size", a.size, "--warmup", str(a.warmup), "--timeout", str(int(a.timeout))]
    argv += ["--iters", str(a.iters)] if a.iters else ["--seconds", str(a.seconds)]
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "RESIL"}
    env.update(a.env)
    env.update(env_extra)
    with tbmod.Testbed(hosts=a.hosts, rails=a.rails, rate=a.rate, prefix=a.name, spine=a.spine) as tb:
        recs = []
        for f in faults:
            tb.check_fault(f["kind"], f["host"], f["rail"], *f["args"])
            recs.append(dict(f))
        job = tb.start(argv, ranks_per_host=a.np_per_host, env=env, timeout=a.timeout, fail_fast=True)
        start = wait_loop_start(tb, job, a.timeout) if recs else None
        if recs and start is None:
            sys.stderr.write("failover_perf: the loop did not start; no fault injected\n")
        for rec in recs if start is not None else []:
            tb.schedule(max(0.0, start + rec["at"] - time.monotonic()), inject, tb, rec)
        res = job.wait()
        tb.wait_faults(5.0)
        tb_events = list(tb.events)
    ranks = [parse_rank(r.output or "") for r in res.ranks]
    return ranks, res, recs, start, tb_events


def report_run(title, ranks, res, its, partial):
    lines = ["# %s: job %s after %.1f s, worst exit code %d" % (title, res.reason or "ended", res.elapsed, res.worst_code)]
    for r, rr in zip(ranks, res.ranks):
        for e in r["errors"]:
            lines.append("# rank %d: %s" % (rr.rank, e))
        if rr.code != 0:
            tail = (rr.output or "").strip().splitlines()[-3:]
            lines.append("# rank %d (host %d) %s, code %d: %s" % (rr.rank, rr.host, rr.status, rr.code, " | ".join(tail)))
    if partial:
        lines.append("# %d iteration(s) finished on some ranks only (not shown)" % partial)
    if not its:
        lines.append("# no iteration finished on every rank")
    return lines


def parse_args(argv):
    p = argparse.ArgumentParser(prog="failover_perf", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--op", default="all_reduce", choices=OPS, help="collective (all_reduce)")
    p.add_argument("--size", default="4M", help="bytes per call, nccl-tests' -b syntax (4M)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--iters", type=int, help="timed iterations")
    g.add_argument("--seconds", type=float, help="run time of the timed loop (10 unless --iters)")
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations first (2)")
    p.add_argument("--hosts", type=int, default=2, help="testbed hosts (2)")
    p.add_argument("--rails", type=int, default=2, help="data NICs per host (2)")
    p.add_argument("--rate", help="NIC line rate, e.g. 1gbit (unshaped if omitted: no model)")
    p.add_argument("--np-per-host", type=int, default=1, help="ranks per host (1)")
    p.add_argument("--spine", action="store_true", help="the rails meet at a router (crossing paths can work)")
    p.add_argument("--fault", action="append", default=[], help="KIND:host:rail:at_seconds[:args], "
                   "at_seconds after the first timed iteration (repeatable)")
    p.add_argument("--compare-off", action="store_true",
                   help="also run the loop with MEND_RESILIENCE=0 and no fault; print busbw(on)/busbw(off)")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="rank environment (repeatable)")
    p.add_argument("--timeout", type=float, help="bound on each job, seconds (3 x the loop + 120)")
    p.add_argument("--name", help="testbed name, mt[a-z0-9]{1,10} (default: testbed.py's own)")
    p.add_argument("--loop", help="failover_loop program (default: next to this one)")
    p.add_argument("--quiet", action="store_true", help="no per-iteration lines")
    p.add_argument("--selftest", action="store_true", help="check parsing and summary on canned output")
    p.add_argument("--plot", metavar="OUT.png", help="draw per-iteration time and busbw across the fault, with the "
                   "fault, detection, repair, re-plan and fail-back marked (needs python3-matplotlib)")
    a = p.parse_args(argv)
    if a.selftest:
        return a
    if a.iters is not None and a.iters < 1:
        p.error("--iters must be at least 1")
    if a.iters is None and a.seconds is None:
        a.seconds = 10.0
    if a.seconds is not None and not 0 < a.seconds <= 3600:
        p.error("--seconds must be in (0, 3600]")
    if a.hosts < 1 or a.rails < 1 or a.np_per_host < 1 or a.warmup < 0:
        p.error("--hosts, --rails and --np-per-host must be at least 1, --warmup at least 0")
    if a.timeout is None:
        a.timeout = 3 * (a.seconds or a.iters * 2.0) + 120
    env = {}
    for kv in a.env:
        if "=" not in kv or kv.startswith("="):
            p.error("--env wants K=V, got %r" % kv)
        env[kv.split("=", 1)[0]] = kv.split("=", 1)[1]
    a.env = env
    return a


def parse_faults(a, tbmod):
    faults = []
    for spec in a.fault:
        try:
            kind, host, rail, at, args = tbmod.parse_fault_spec(spec)
        except ValueError as e:
            die(str(e))
        f = {"spec": spec, "kind": kind, "host": host, "rail": rail, "at": at, "args": args}
        if kind == "rate" and args:
            f["new_rate_bps"] = tbmod.parse_rate(args[0])
        faults.append(f)
    return faults


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.selftest:
        return selftest()
    if os.geteuid() != 0:
        die("the testbed needs root (network namespaces)", 77)
    tbmod = find_testbed()
    loop = find_loop(a)
    faults = parse_faults(a, tbmod)
    rate_bps = tbmod.parse_rate(a.rate) if a.rate else None
    resil = a.env.get("MEND_RESILIENCE", os.environ.get("MEND_RESILIENCE", "auto (-2)"))
    print("# failover_perf: %s, size %s per call, %d hosts x %d rails at %s, %d rank(s) per host, MEND_RESILIENCE=%s"
          % (a.op, a.size, a.hosts, a.rails, a.rate or "unshaped", a.np_per_host, resil))
    ranks, res, recs, start, tb_events = run_once(a, tbmod, loop, faults, {})
    its, partial = merge(ranks)
    algbytes, factor, head = loop_info(ranks)
    events = [e for r in ranks for e in r["events"]]
    fault = recs[0] if recs and "t" in recs[0] else None
    for rec in recs:
        if "t" not in rec:
            print("# fault %s not injected (the loop ended or never started)" % rec["spec"])
        else:
            print("# fault %s injected at loop start + %.3f s (CLOCK_MONOTONIC %.6f), applied in %.1f ms%s"
                  % (rec["spec"], rec["t"] - start, rec["t"], (rec["t_end"] - rec["t"]) * 1e3,
                     ": FAILED: " + rec["error"] if rec.get("error") else ""))
    for t, text in tb_events:
        print("# testbed t=%.3fs %s" % (t, text))
    for line in report_run("loop", ranks, res, its, partial):
        print(line)
    if algbytes is None:
        print("# no loop header from any rank: nothing to summarize")
        return 1
    print("# %d rank(s), %s bytes per rank, algbw bytes %.0f, busbw factor %.4f; %d MEND_EVENT line(s)"
          % (int(head.get("ranks", 0)), head.get("bytes", "?"), algbytes, factor, len(events)))
    ref_t, ref_name = (fault["t"], "fault") if fault else ((start if start else (its[0].start if its else 0.0)), "start")
    if not a.quiet:
        for line in iteration_lines(its, ref_t, algbytes, factor, ref_name):
            print(line)
    model = model_busbw(a.rails, rate_bps, fault)
    s = summarize(its, events, fault["t"] if fault else None, algbytes, factor, model,
                  fault.get("t_end") if fault else None)
    off = None
    if a.compare_off:
        oranks, ores, _, _, _ = run_once(a, tbmod, loop, [], {"MEND_RESILIENCE": "0"})
        oits, opartial = merge(oranks)
        for line in report_run("resilience off", oranks, ores, oits, opartial):
            print(line)
        off = summarize(oits, [], None, algbytes, factor)
    for line in summary_lines(s, fault, off):
        print(line)
    if a.plot:
        err = plot(a.plot, its, events, fault, s, algbytes, factor, ref_t,
                   "%s %s, %d x %d at %s" % (a.op, a.size, a.hosts, a.rails, a.rate or "unshaped"))
        print("# plot: %s" % (err or a.plot))
        if err:
            return 1
    bad = res.worst_code != 0 or s["wrong"] > 0 or (off is not None and (ores.worst_code != 0 or off["wrong"] > 0))
    return 1 if bad else 0


# ---- --selftest: the parsing and the summary on canned output
def _canned(rank, fault_t, events, n_before=10, n_after=8, skip=()):
    """A rank's output: iterations of 100 ms, one of 500 ms hit by the fault at fault_t, then
    200 ms ones (half the bandwidth); times in CLOCK_MONOTONIC seconds."""
    lines = ["mt1h0:1:1 [-1] NCCL INFO something else",
             "# failover_loop op=all_reduce ranks=2 rank=%d bytes=4194304 count=1048576 algbytes=4194304 "
             "busfactor=1.000000 type=float host=mt1h%d" % (rank, rank),
             "start t=%.6f" % (fault_t - n_before * 0.1 - 0.05)]
    t, i = fault_t - n_before * 0.1 - 0.05, 0
    for _ in range(n_before):
        lines.append("iter=%d t0=%.6f t1=%.6f wrong=0" % (i, t + 0.001 * rank, t + 0.1))
        t, i = t + 0.1, i + 1
    lines.append("iter=%d t0=%.6f t1=%.6f wrong=%d" % (i, t, t + 0.5, 3 if rank == 1 else 0))
    t, i = t + 0.5, i + 1
    for _ in range(n_after):
        if i not in skip:
            lines.append("iter=%d t0=%.6f t1=%.6f wrong=0" % (i, t, t + 0.2))
        t, i = t + 0.2, i + 1
    for kind, dt, peer, cause in events:
        lines.append("mt1h%d:42:43 [-1] NCCL INFO MEND_EVENT t=%.6f rank=%d kind=%s peer=%d dev=0 path=0 cause=%s"
                     % (rank, fault_t + dt, rank, kind, peer, cause))
    lines += ["MEND_EVENT t=bad rank=x kind=detect", "iter=zz", "done iters=%d wrong=0" % i]
    return "\n".join(lines) + "\n"


def selftest():
    results = []

    def check(ok, name):
        results.append(bool(ok))
        print("%s %s" % ("ok" if ok else "not ok", name))

    fault_t = 1000.0
    r0 = parse_rank(_canned(0, fault_t, [("detect", 0.012, 1, "link"), ("resume", 0.050, 1, "link")]))
    r1 = parse_rank(_canned(1, fault_t, [("detect", 0.015, 0, "peer"), ("resume", 0.080, 0, "peer"),
                                         ("failback", 9.0, 0, "link")], skip=(15,)))
    check(r0["head"].get("op") == "all_reduce" and r0["start"] is not None and len(r0["iters"]) == 19 and
          r0["done"], "parse_rank: header, start, iterations, done")
    check(len(r0["events"]) == 2 and r0["events"][0]["kind"] == "detect" and r0["events"][0]["peer"] == 1 and
          abs(r0["events"][0]["t"] - 1000.012) < 1e-9, "parse_event: MEND_EVENT fields, malformed lines ignored")
    its, partial = merge([r0, r1])
    check(len(its) == 18 and partial == 1, "merge: only iterations every rank finished")
    check(abs(its[0].seconds - 0.1) < 1e-6 and its[10].wrong == 3, "merge: first start to last end, #wrong summed")
    algbytes, factor, _ = loop_info([r0, r1])
    events = r0["events"] + r1["events"]
    s = summarize(its, events, fault_t, algbytes, factor, model_busbw(2, 1e9, {"kind": "link_down", "rail": 0}))
    check(abs(s["detect_s"] - 0.012) < 1e-6 and s["detect"]["rank"] == 0, "detection: first detect after the fault")
    check(abs(s["recovery_s"] - 0.068) < 1e-6 and s["conns"] == 2, "recovery: to the last first resume, over connections")
    check(s["hit"].index == 10 and abs(s["extra_ms"] - 400.0) < 1e-3, "hit iteration and its extra time")
    check(abs(s["kept"] - 0.5) < 1e-6 and s["after_n"] == 7 and s["before_n"] == 10, "bandwidth kept: after / before")
    model_after = 1e9 / 8 / 1e9 * GOODPUT
    check(abs(s["model_after"] - model_after) < 1e-9 and abs(s["kept_model"] - (4194304 / 0.2 / 1e9) / model_after) < 1e-6,
          "model: surviving rails x rate x 1448/1514")
    check(s["wrong"] == 3, "#wrong over all iterations")
    # Iteration 10 began 50 ms (half a healthy iteration) before the fault; one rail of two is left.
    check(abs(s["hit_done"] - 0.5) < 1e-6 and abs(s["hit_bound"] - 1.5) < 1e-6 and
          "hit bound      : 1.50 x healthy (0.50 of an iteration" in "\n".join(summary_lines(s, {"kind": "link_down"}))
          and "hit / bound 3.33" in "\n".join(summary_lines(s, {"kind": "link_down"})),
          "hit bound: the share done at the healthy rate, the rest at the surviving capacity")
    late = summarize(its, events, fault_t, algbytes, factor, model_busbw(2, 1e9, {"kind": "link_down", "rail": 0}),
                     fault_end=fault_t + 0.5)
    check(late["hit_done"] == 1.0 and abs(late["hit_bound"] - 1.0) < 1e-9 and
          summarize(its, events, fault_t, algbytes, factor, model_busbw(2, 1e9, None))["hit_bound"] is None,
          "hit bound: the command's end counts, clamped; none where the capacity is unchanged")
    text = "\n".join(summary_lines(s, {"kind": "link_down"}))
    check("detection time : 12.0 ms from" in text and "recovery time  : 68.0 ms" in text, "summary lines")
    quiet = summarize(its, [], fault_t, algbytes, factor)
    text = "\n".join(summary_lines(quiet, {"kind": "link_down"}))
    check(quiet["detect"] is None and "no failover event seen" in text and quiet["kept"] is not None and
          quiet["after_n"] == 7, "without events: 'no failover event seen', bandwidth after the hit iteration")
    # A fault command issued 14 ms before iteration 9 ends: iteration 9 ends first, but iteration 10
    # is the one that stalls until detection (300 ms after the fault): it is the hit one.
    early = fault_t - 0.064
    s3 = summarize(its, [dict(e, t=early + 0.3) if e["kind"] == "detect" else e for e in events], early,
                   algbytes, factor, fault_end=early + 0.002)
    check(s3["hit"].index == 10 and abs(s3["extra_ms"] - 400.0) < 1e-3,
          "hit iteration: the one that stalled, not the first to end after the fault command")
    r2 = parse_rank(_canned(1, fault_t, [("detect", 0.015, 0, "peer")]))
    s2 = summarize(merge([r0, r2])[0], r0["events"] + r2["events"], fault_t, algbytes, factor)
    check(s2["recovery_s"] is None and s2["missing"] == [(1, 0)], "a connection that never resumes is named")
    base = summarize(its, [], None, algbytes, factor)
    off = {"before_bw": base["before_bw"] / 0.99, "before_n": 18}
    check(base["before_n"] == 18 and "busbw(on)/busbw(off) = 0.990" in "\n".join(summary_lines(base, None, off)),
          "no fault: every iteration counts; --compare-off ratio")
    check(model_busbw(2, None, None) == (None, None) and model_busbw(3, 8e9, {"kind": "rate", "rail": 1,
          "new_rate_bps": 4e9})[1] == (2 * 1 + 0.5) * GOODPUT, "model: unshaped, rate fault")
    try:
        import matplotlib  # noqa: F401
        have_mpl = True
    except ImportError:
        have_mpl = False
    if have_mpl:
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "f.png")
            ev = events + [dict(events[0], kind="replan", t=fault_t + 0.3), dict(events[0], kind="failback", t=fault_t + 2)]
            err = plot(out, its, ev, {"t": fault_t, "spec": "link_down:1:0:5"}, s, algbytes, factor, fault_t, "selftest")
            with open(out, "rb") if err is None else open(os.devnull, "rb") as f:
                magic = f.read(8)
            check(err is None and magic == b"\x89PNG\r\n\x1a\n", "--plot writes a PNG with the marks")
    else:
        print("ok --plot # SKIP no matplotlib in %s" % sys.executable)
    print("# selftest: %d passed, %d failed" % (results.count(True), results.count(False)))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
