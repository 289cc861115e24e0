#!/usr/bin/env python3
"""Runs Mend's perf tools and the peers (Open MPI, Gloo) back to back on the same placement and
writes the bus-bandwidth ratios (Mend / peer, per size) into benchmarks/RESULTS.md.

    python3 benchmarks/compare.py                       # 2 and 4 ranks, one host, 8 B .. 64 MiB
    python3 benchmarks/compare.py --ranks 4 --colls allreduce --max 16M
    python3 benchmarks/compare.py --hosts 2 --rails 2 --rate 1gbit --ranks 4   # testbed (root)

Every library runs the same sizes with the same flags and prints nccl-tests' table; the
out-of-place bus bandwidth is compared. A peer that is not installed, not built or fails shows
as "peer not available" (the build of the peers is attempted once: make -C benchmarks/peers).
Open MPI runs on one host only (mpirun cannot start ranks inside the testbed's namespaces);
Gloo runs on the testbed bound to rail0. Standard library only.
"""
import argparse
import datetime
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
COLLS = {  # name: (Mend tool, mpi_perf/gloo_perf argument)
    "allreduce": "all_reduce_perf", "allgather": "all_gather_perf", "broadcast": "broadcast_perf",
    "reduce_scatter": "reduce_scatter_perf", "alltoall": "alltoall_perf",
}
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--builddir", default=os.path.join(ROOT, "build"), help="Mend build directory (build)")
    p.add_argument("--ranks", default="2,4", help="rank counts, comma-separated (2,4)")
    p.add_argument("--colls", default=",".join(COLLS), help="collectives (%s)" % ",".join(COLLS))
    p.add_argument("--min", default="8", help="smallest size (8)")
    p.add_argument("--max", default="64M", help="largest size (64M)")
    p.add_argument("--factor", default="4", help="size factor (4)")
    p.add_argument("--iters", default="20", help="timed iterations per size (20)")
    p.add_argument("--warmup", default="5", help="warm-up iterations (5)")
    p.add_argument("--check", default="1", help="check iterations per size (1)")
    p.add_argument("--peers", default="mpi,gloo", help="peers to run (mpi,gloo)")
    p.add_argument("--hosts", type=int, help="run on the testbed with this many hosts (root)")
    p.add_argument("--rails", type=int, default=1, help="testbed rails per host (1)")
    p.add_argument("--rate", help="testbed NIC rate, e.g. 1gbit")
    p.add_argument("--timeout", type=int, default=900, help="seconds per run (900)")
    p.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="markdown file to write")
    p.add_argument("--keep-logs", help="directory to keep every run's full output in")
    return p.parse_args()


def machine():
    model = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return "%d CPUs (%s), %s %s, %.1f GiB" % (os.cpu_count() or 0, model, platform.system(), platform.release(),
                                              os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30)


def loadavg():
    try:
        return open("/proc/loadavg").read().split()[0]
    except OSError:
        return "?"


def parse_table(text):
    """{size: (time_us, busbw)} from the out-of-place columns of an nccl-tests table."""
    rows = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m and not line.startswith("#"):
            try:
                rows[int(m.group(1))] = (float(m.group(3)), float(m.group(5)))
            except ValueError:
                pass
    return rows


class Runner:
    def __init__(self, a):
        self.a = a
        self.b = os.path.abspath(a.builddir)
        self.commands = []
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
            cmd += ["--hosts", str(self.a.hosts), "--rails", str(self.a.rails)] + (["--rate", self.a.rate] if self.a.rate else [])
        for k, v in (extra_env or {}).items():
            cmd += ["--env", "%s=%s" % (k, v)]
        return cmd

    def run(self, label, cmd, env=None):
        shown = " ".join(shlex.quote(c) for c in cmd).replace(ROOT + os.sep, "")
        shown = re.sub(r"MEND_GLOO_STORE=\S+", "MEND_GLOO_STORE=$(mktemp -d)", shown)
        self.commands.append(shown)
        full = dict(os.environ)
        full["LD_LIBRARY_PATH"] = os.path.join(self.b, "lib") + (":" + full["LD_LIBRARY_PATH"] if full.get("LD_LIBRARY_PATH") else "")
        full.update(env or {})
        sys.stderr.write("compare: %s\n" % self.commands[-1])
        try:
            cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full,
                                timeout=self.a.timeout + 60, text=True)
            out, rc = cp.stdout, cp.returncode
        except (OSError, subprocess.TimeoutExpired) as e:
            out, rc = str(e), -1
        if self.logdir:
            with open(os.path.join(self.logdir, label + ".log"), "w") as f:
                f.write(out)
        rows = parse_table(out)
        if rc != 0 or not rows:
            sys.stderr.write("compare: %s failed (exit %s): %s\n" % (label, rc, out.strip().splitlines()[-1:] if out.strip() else ""))
            return None
        return rows

    def build_peers(self):
        if self.peers_built:
            return
        self.peers_built = True
        subprocess.run(["make", "-C", os.path.join(HERE, "peers"), "BUILDDIR=" + self.b],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def mend(self, coll, n):
        tool = os.path.join(self.b, "bin", COLLS[coll])
        return self.run("mend-%s-%d" % (coll, n), self.mend_run(n) + [tool] + self.sweep_flags())

    def mpi(self, coll, n):
        exe = os.path.join(self.b, "bin", "peers", "mpi_perf")
        if not os.path.exists(exe):
            self.build_peers()
        if self.a.hosts or not shutil.which("mpirun") or not os.path.exists(exe):
            return None
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), exe, coll] + self.sweep_flags()
        return self.run("mpi-%s-%d" % (coll, n), cmd)

    def gloo(self, coll, n):
        exe = os.path.join(self.b, "bin", "peers", "gloo_perf")
        if not os.path.exists(exe):
            self.build_peers()
        if not os.path.exists(exe):
            return None
        store = tempfile.mkdtemp(prefix="mend-gloo-")
        env = {"MEND_GLOO_STORE": store}
        if self.a.hosts:
            env["GLOO_SOCKET_IFNAME"] = "rail0"
        try:
            return self.run("gloo-%s-%d" % (coll, n), self.mend_run(n, env) + [exe, coll] + self.sweep_flags())
        finally:
            shutil.rmtree(store, ignore_errors=True)


def fmt_bw(r, size):
    return "%.3f" % r[size][1] if r and size in r else "n/a"


def ratio(m, p, size):
    """Mend busbw / peer busbw, from the times (same bytes and factor; more digits than busbw)."""
    if not m or not p or size not in m or size not in p or m[size][0] <= 0:
        return "n/a"
    return "%.2f" % (p[size][0] / m[size][0])


def table(coll, n, res, peers):
    head = "| size (B) | Mend busbw | " + " | ".join("%s busbw" % p for p in peers) + " | " + \
           " | ".join("Mend/%s" % p for p in peers) + " | Mend time (us) |"
    notes = [] if res.get("mend") else ["Mend: run failed (see the commands below)"]
    notes += ["%s: peer not available" % p for p in peers if res.get(p) is None]
    lines = ["### %s, %d ranks" % (coll, n), ""] + ([", ".join(notes), ""] if notes else [])
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    mend = res.get("mend")
    sizes = sorted(set(mend or {}).union(*[set(res.get(p) or {}) for p in peers]))
    for s in sizes:
        t = "%.1f" % mend[s][0] if mend and s in mend else "n/a"
        lines.append("| %d | %s | %s | %s | %s |" % (s, fmt_bw(mend, s), " | ".join(fmt_bw(res.get(p), s) for p in peers),
                                                     " | ".join(ratio(mend, res.get(p), s) for p in peers), t))
    return "\n".join(lines) + "\n"


def main():
    a = parse_args()
    r = Runner(a)
    ranks = [int(x) for x in a.ranks.split(",") if x]
    colls = [c for c in a.colls.split(",") if c]
    bad = [c for c in colls if c not in COLLS]
    if bad:
        sys.exit("unknown collective(s) %s; choose from %s" % (",".join(bad), ",".join(COLLS)))
    peers = [p for p in a.peers.split(",") if p in ("mpi", "gloo")]
    if not os.path.exists(os.path.join(a.builddir, "bin", "mend-run")):
        sys.exit("no %s/bin/mend-run: build Mend first (make -j2)" % a.builddir)
    start = datetime.datetime.now().astimezone()
    load0 = loadavg()
    sections, summary = [], []
    for n in ranks:
        for c in colls:
            res = {"mend": r.mend(c, n)}
            for p in peers:
                res[p] = getattr(r, p)(c, n)
            sections.append(table(c, n, res, peers))
            big = max(res["mend"]) if res["mend"] else None
            summary.append("| %s | %d | %s | %s |" % (c, n, fmt_bw(res["mend"], big) if big is not None else "n/a",
                                                     " | ".join(ratio(res["mend"], res.get(p), big) if big is not None else "n/a"
                                                                for p in peers)))
    placement = ("testbed: %d hosts x %d rails, NIC rate %s" % (a.hosts, a.rails, a.rate or "unshaped")
                 if a.hosts else "one host, all ranks on this machine")
    doc = ["# Mend vs. peers: bus bandwidth", "",
           "Written by `benchmarks/compare.py` on %s. Ratios are Mend busbw / peer busbw (out of place, "
           "nccl-tests' formulas; computed from the times, so small sizes keep their digits); above 1 "
           "means Mend is faster. " % start.strftime("%Y-%m-%d %H:%M %Z") +
           "Small sizes are latency-bound and noisy when ranks outnumber cores (up to 5-10x).", "",
           "- Machine: %s" % machine(),
           "- Placement: %s" % placement,
           "- Load average (1 min) before / after: %s / %s" % (load0, loadavg()),
           "- Sweep: %s B to %s B, factor %s, %s iterations, %s warm-up, check %s" % (a.min, a.max, a.factor, a.iters, a.warmup, a.check),
           "- Peers: Open MPI (MPI_Allreduce, MPI_Allgather, MPI_Bcast, MPI_Reduce_scatter_block, MPI_Alltoall; one host only), "
           "Gloo (TCP, TCP_NODELAY and quick ACKs; ring allreduce, halving-doubling reduce-scatter)", "",
           "## Largest size", "",
           "| collective | ranks | Mend busbw (GB/s) | " + " | ".join("Mend/%s" % p for p in peers) + " |",
           "|---|---|---|" + "---|" * len(peers)] + summary + ["", "## Per size", ""] + sections + \
          ["## Commands", "", "```"] + r.commands + ["```", ""]
    with open(a.out, "w") as f:
        f.write("\n".join(doc))
    print("\n".join(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
