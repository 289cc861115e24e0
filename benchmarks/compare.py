#!/usr/bin/env python3
"""Runs Mend's perf tools and the peers (Open MPI, Gloo) back to back on the same placement and
writes the bus-bandwidth ratios (Mend / peer, per size) into benchmarks/RESULTS.md.

    python3 benchmarks/compare.py                       # 2 and 4 ranks, one host, 8 B .. 64 MiB
    python3 benchmarks/compare.py --ranks 4 --colls allreduce --max 16M
    python3 benchmarks/compare.py --hosts 2 --rails 1 --rate 1gbit --ranks 2   # testbed (root)

Every library runs the same sizes with the same flags (float, sum) and prints nccl-tests' table;
the out-of-place columns are compared. The libraries take turns (Mend, Open MPI, Gloo, Mend, ...)
--repeats times and the best time per size is kept, so load from other programs on the machine
hits all of them alike and a one-off stall does not decide a ratio. A peer that is not installed,
not built or fails shows as "not available" (the peers are built once: make -C benchmarks/peers).
Open MPI runs on one host only here (on the testbed it needs mpirun started through
tests/testbed/netns_rsh.sh, see RESULTS.md's transports section); Gloo
runs on the testbed bound to rail0. The results replace only this placement's section of
RESULTS.md (between its markers); the rest of the file is kept. Standard library only.
"""
import argparse
import datetime
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
COLLS = {  # name: Mend tool (the peers take the name itself)
    "allreduce": "all_reduce_perf", "allgather": "all_gather_perf", "broadcast": "broadcast_perf",
    "reduce_scatter": "reduce_scatter_perf", "alltoall": "alltoall_perf",
}
FACTORS = {  # nccl-tests' busbw factor; for these five, algbw = size column / time
    "allreduce": lambda n: 2.0 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0, "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
}
PEER_NAMES = {"mpi": "Open MPI", "gloo": "Gloo"}
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")
SMALL, LARGE = 64 << 10, 1 << 20   # summary groups: sizes <= 64 KiB and >= 1 MiB


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--builddir", default=os.path.join(ROOT, "build"), help="Mend build directory (build)")
    p.add_argument("--ranks", default="2,4", help="rank counts, comma-separated (2,4)")
    p.add_argument("--colls", default=",".join(COLLS), help="collectives (%s)" % ",".join(COLLS))
    p.add_argument("--min", default="8", help="smallest size (8)")
    p.add_argument("--max", default="64M", help="largest size (64M)")
    p.add_argument("--factor", default="2", help="size factor (2: every power of two, 8 B .. 64 MiB)")
    p.add_argument("--iters", default="20", help="timed iterations per size (20)")
    p.add_argument("--warmup", default="5", help="warm-up iterations (5)")
    p.add_argument("--check", default="1", help="check iterations per size (1)")
    p.add_argument("--repeats", type=int, default=3, help="turns per library; best time kept (3)")
    p.add_argument("--peers", default="mpi,gloo", help="peers to run (mpi,gloo)")
    p.add_argument("--hosts", type=int, help="run on the testbed with this many hosts (root)")
    p.add_argument("--rails", type=int, default=1, help="testbed rails per host (1)")
    p.add_argument("--rate", help="testbed NIC rate, e.g. 1gbit")
    p.add_argument("--timeout", type=int, default=900, help="seconds per run (900)")
    p.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="markdown file to update")
    p.add_argument("--keep-logs", help="directory to keep every run's full output in")
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error("--repeats must be at least 1")
    return a


def machine():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    return "`nproc` %d (%s), kernel `uname -r` %s, %.1f GiB memory" % (
        os.cpu_count() or 0, model, platform.release(), mem)


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def parse_table(text):
    """{size: (time_us, busbw, wrong)} from the out-of-place columns of an nccl-tests table."""
    rows = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m and not line.startswith("#"):
            try:
                wrong = 0 if m.group(6) == "N/A" else int(float(m.group(6)))
                rows[int(m.group(1))] = (float(m.group(3)), float(m.group(5)), wrong)
            except ValueError:
                pass
    return rows


def best_of(runs):
    """Per size, the run with the shortest time (a wrong result in any run is kept as wrong)."""
    best = {}
    for rows in runs:
        for size, (t, bw, wrong) in rows.items():
            old = best.get(size)
            wrong_any = wrong + (old[2] if old else 0)
            if old is None or t < old[0]:
                best[size] = (t, bw, wrong_any)
            else:
                best[size] = (old[0], old[1], wrong_any)
    return best


class Runner:
    def __init__(self, a):
        self.a = a
        self.b = os.path.abspath(a.builddir)
        self.commands = []
        self.labels = {}
        self.failures = {}     # (lib, coll, n): [exit code of each failed turn]
        self.logdir = a.keep_logs
        self.peers_built = False
        if self.logdir:
            os.makedirs(self.logdir, exist_ok=True)

    def sweep_flags(self):
        a = self.a
        return ["-b", a.min, "-e", a.max, "-f", a.factor, "-n", a.iters, "-w", a.warmup, "-c", a.check]

    def mend_run(self, n, extra_env=None):
        cmd = [os.path.join(self.b, "bin", "mend-run"), "-np", str(n), "--timeout", str(self.a.timeout)]
        if self.a.hosts:
            cmd += ["--hosts", str(self.a.hosts), "--rails", str(self.a.rails)]
            cmd += ["--rate", self.a.rate] if self.a.rate else []
        for k, v in (extra_env or {}).items():
            cmd += ["--env", "%s=%s" % (k, v)]
        return cmd

    def shown(self, cmd):
        """The command as the results show it: $BUILD for the build directory, paths relative."""
        text = " ".join(shlex.quote(c) for c in cmd).replace(self.b + os.sep, "$BUILD/").replace(ROOT + os.sep, "")
        return re.sub(r"MEND_GLOO_STORE=\S+", "MEND_GLOO_STORE=$(mktemp -d)", text)

    def run(self, lib, coll, n, turn, cmd, env=None):
        """Runs one sweep; returns its rows, or None if it failed."""
        label = "%s-%s-%d-%d" % (lib, coll, n, turn)
        shown = self.shown(cmd)
        if shown not in self.commands:
            self.commands.append(shown)
        full = dict(os.environ)
        lib_dir = os.path.join(self.b, "lib")
        full["LD_LIBRARY_PATH"] = lib_dir + (":" + full["LD_LIBRARY_PATH"] if full.get("LD_LIBRARY_PATH") else "")
        full.update(env or {})
        sys.stderr.write("compare: %s\n" % shown)
        try:
            cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full,
                                timeout=self.a.timeout + 60, text=True)
            out, rc = cp.stdout, cp.returncode
        except (OSError, subprocess.TimeoutExpired) as e:
            out, rc = str(e), -1
        if self.logdir:
            with open(os.path.join(self.logdir, label + ".log"), "w") as f:
                f.write(out)
        m = re.search(r"^# (?:Peer benchmark \S+ \(nccl-tests format\): (.*), \w+|Mend perf tools (\S+).*)$",
                      out, re.M)
        if m:
            self.labels[lib] = m.group(1) or "Mend %s" % m.group(2)
        rows = parse_table(out)
        if rc != 0 or not rows:
            self.failures.setdefault((lib, coll, n), []).append(rc)
            last = out.strip().splitlines()[-1:] if out.strip() else ""
            sys.stderr.write("compare: %s failed (exit %s): %s\n" % (label, rc, last))
            return None
        return rows

    def build_peers(self):
        if self.peers_built:
            return
        self.peers_built = True
        subprocess.run(["make", "-C", os.path.join(HERE, "peers"), "BUILDDIR=" + self.b],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def peer_exe(self, name):
        exe = os.path.join(self.b, "bin", "peers", name)
        if not os.path.exists(exe):
            self.build_peers()
        return exe if os.path.exists(exe) else None

    def mend(self, coll, n, turn):
        tool = os.path.join(self.b, "bin", COLLS[coll])
        return self.run("mend", coll, n, turn, self.mend_run(n) + [tool] + self.sweep_flags())

    def mpi(self, coll, n, turn):
        exe = self.peer_exe("mpi_perf")
        if self.a.hosts or not shutil.which("mpirun") or not exe:
            return None
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), exe, coll] + self.sweep_flags()
        return self.run("mpi", coll, n, turn, cmd)

    def gloo(self, coll, n, turn):
        exe = self.peer_exe("gloo_perf")
        if not exe:
            return None
        store = tempfile.mkdtemp(prefix="mend-gloo-")
        env = {"MEND_GLOO_STORE": store}
        if self.a.hosts:
            env["GLOO_SOCKET_IFNAME"] = "rail0"
        try:
            return self.run("gloo", coll, n, turn, self.mend_run(n, env) + [exe, coll] + self.sweep_flags())
        finally:
            shutil.rmtree(store, ignore_errors=True)

    def measure(self, coll, n, peers):
        """Every library `repeats` times, in turns; the best time per size of each."""
        runs = {lib: [] for lib in ["mend"] + peers}
        for turn in range(self.a.repeats):
            for lib in runs:
                rows = getattr(self, lib)(coll, n, turn)
                if rows is not None:
                    runs[lib].append(rows)
        return {lib: (best_of(r) if r else None) for lib, r in runs.items()}


def ratio_value(m, p, size):
    """Mend busbw / peer busbw = peer time / Mend time (same bytes and factor; keeps the digits
    that a busbw column of 0.00 loses at small sizes)."""
    if not m or not p or size not in m or size not in p or m[size][0] <= 0:
        return None
    return p[size][0] / m[size][0]


def busbw(coll, n, size, rows):
    """GB/s from the time, with three significant digits (the tables print two decimals)."""
    if not rows or size not in rows or rows[size][0] <= 0:
        return "n/a"
    return "%.3g" % (size / 1e3 / rows[size][0] * FACTORS[coll](n))


def fmt(v, digits=2):
    if v is None:
        return "n/a"
    if 0 < abs(v) < 10 ** -digits:  # a ratio under 0.01 keeps two digits (0.0031), not "0.00"
        return "%.2g" % v
    return "%.*f" % (digits, v)


def geomean(vals):
    vals = [v for v in vals if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def table(coll, n, res, peers, failures):
    lines = ["#### %s, %d ranks" % (coll, n), ""]
    notes = [] if res.get("mend") else ["Mend: run failed (see the commands)"]
    notes += ["%s: not available" % PEER_NAMES[p] for p in peers if res.get(p) is None]
    for lib in ["mend"] + peers:
        codes = failures.get((lib, coll, n))
        if codes and res.get(lib) is not None:
            notes.append("%s: %d turn(s) failed (exit %s); the others count" % (
                PEER_NAMES.get(lib, "Mend"), len(codes), ", ".join(str(c) for c in codes)))
    wrong = [lib for lib, r in res.items() if r and any(v[2] for v in r.values())]
    notes += ["%s reported wrong results: its times do not count" % lib for lib in wrong]
    if notes:
        lines += ["; ".join(notes), ""]
    head = "| size (B) | Mend time (us) | Mend busbw | " + " | ".join("%s busbw" % PEER_NAMES[p] for p in peers) + \
           " | " + " | ".join("Mend/%s" % PEER_NAMES[p] for p in peers) + " |"
    lines += [head, "|" + "---:|" * (head.count("|") - 1)]
    mend = res.get("mend")
    sizes = sorted(set(mend or {}).union(*[set(res.get(p) or {}) for p in peers]))
    for s in sizes:
        t = "%.1f" % mend[s][0] if mend and s in mend else "n/a"
        bws = [busbw(coll, n, s, r) for r in [mend] + [res.get(p) for p in peers]]
        ratios = [fmt(ratio_value(mend, res.get(p), s)) for p in peers]
        lines.append("| %d | %s | %s |" % (s, t, " | ".join(bws + ratios)))
    return "\n".join(lines) + "\n"


def summary_row(coll, n, res, peers):
    mend = res.get("mend") or {}
    cells = []
    for p in peers:
        peer = res.get(p)
        small = geomean([ratio_value(mend, peer, s) for s in mend if 0 < s <= SMALL])
        large = geomean([ratio_value(mend, peer, s) for s in mend if s >= LARGE])
        top = ratio_value(mend, peer, max(mend)) if mend else None
        cells.append("%s / %s / %s" % (fmt(small), fmt(large), fmt(top)))
    big = max(mend) if mend else None
    return "| %s | %d | %s | %s |" % (coll, n, busbw(coll, n, big, mend), " | ".join(cells))


def section(a, r, peers, results, start, load0, placement):
    args, skip = [], False
    for x in sys.argv[1:]:   # the build directory is $BUILD in the commands
        if skip or x.startswith("--builddir"):
            skip = x == "--builddir"
            continue
        args.append(x)
    argv = " ".join(shlex.quote(x) for x in args)
    doc = ["Written by `python3 benchmarks/compare.py%s` on %s." % (" " + argv if argv else "",
                                                                   start.strftime("%Y-%m-%d %H:%M %Z")),
           "",
           "- Machine: %s" % machine(),
           "- Placement: %s" % placement,
           "- Load average (1 min) before / after: %s / %s (other programs shared the CPUs; the "
           "libraries took turns, %d each, best time per size kept)" % (load0, loadavg(), a.repeats),
           "- Sweep: %s B to %s B, factor %s, %s timed iterations, %s warm-up, %s check iteration(s); "
           "float, sum; out of place" % (a.min, a.max, a.factor, a.iters, a.warmup, a.check),
           "- Libraries: %s" % "; ".join(r.labels[k] for k in ["mend"] + peers if k in r.labels),
           "",
           "Summary: Mend busbw / peer busbw, as geometric means over sizes 1 B .. 64 KiB / sizes >= 1 MiB "
           "/ the largest size (above 1: Mend is faster).",
           "",
           "| collective | ranks | Mend busbw at the largest size (GB/s) | " +
           " | ".join("Mend/%s small / large / largest" % PEER_NAMES[p] for p in peers) + " |",
           "|---|---:|---:|" + "---:|" * len(peers)]
    doc += [summary_row(c, n, res, peers) for (c, n), res in results]
    doc += ["", "Per size (ratios from the times, so sizes whose busbw prints as 0.00 keep their digits; "
            "for 0-byte rows the ratio is one of latencies):", ""]
    doc += [table(c, n, res, peers, r.failures) for (c, n), res in results]
    doc += ["Commands (each run %d times, in turns; `$BUILD` is the build directory, `build` by default):"
            % a.repeats, "", "```"] + r.commands + ["```", ""]
    return "\n".join(doc)


def write_section(path, key, title, body):
    """Replaces the section marked `key` in `path` (appends it if absent); keeps the rest."""
    begin, end = "<!-- compare.py %s: begin -->" % key, "<!-- compare.py %s: end -->" % key
    block = "%s\n### %s\n\n%s\n%s" % (begin, title, body.rstrip() + "\n", end)
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        text = "# Mend benchmark results\n"
    if begin in text and end in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(text)


def main(argv=None):
    a = parse_args(argv)
    r = Runner(a)
    ranks = [int(x) for x in a.ranks.split(",") if x]
    colls = [c for c in a.colls.split(",") if c]
    bad = [c for c in colls if c not in COLLS]
    if bad:
        sys.exit("unknown collective(s) %s; choose from %s" % (",".join(bad), ",".join(COLLS)))
    peers = [p for p in a.peers.split(",") if p in PEER_NAMES]
    if not os.path.exists(os.path.join(a.builddir, "bin", "mend-run")):
        sys.exit("no %s/bin/mend-run: build Mend first (make -j2)" % a.builddir)
    start = datetime.datetime.now().astimezone()
    load0 = loadavg()
    results = [((c, n), r.measure(c, n, peers)) for n in ranks for c in colls]
    if a.hosts:
        key = "testbed-%dx%d" % (a.hosts, a.rails)
        placement = "testbed, %d hosts x %d rails, NIC rate %s; Mend over every rail, Gloo on rail0; " \
                    "Open MPI not run here (it runs on the testbed through tests/testbed/netns_rsh.sh: see the transports section)" % (a.hosts, a.rails, a.rate or "unshaped")
        title = "Testbed: %d hosts x %d rail(s), %s" % (a.hosts, a.rails, a.rate or "unshaped")
    else:
        key, placement, title = "one-host", "one host: every rank on this machine", "One host"
    body = section(a, r, peers, results, start, load0, placement)
    write_section(a.out, key, title, body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
