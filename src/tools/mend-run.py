#!/usr/bin/env python3
"""mend-run: start N ranks of a program the way torchrun does, on this machine or on the testbed.

    mend-run -np N [options] prog [args...]

Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NCCL_COMM_ID, MASTER_ADDR and
MASTER_PORT (plus MEND_PERF_CTRL, the perf tools' control plane, and MEND_JOB_SECRET, a random
value per run unless set, so only this run's ranks can join its bootstrap). Rank 0's output is shown as
it comes, unprefixed; the other ranks' output is kept and shown, prefixed with [rank], only for a
rank that fails (or always with --all-output). The exit status is the worst rank's (124 on
--timeout, 130 on Ctrl-C); when one rank fails, the others get --grace seconds, then are killed.

With --hosts H the ranks run on the multi-host testbed (network namespaces: H hosts x R rails,
each data NIC shaped to --rate), N/H ranks per host; --fault KIND:host:rail:at_s[:arg...]
injects a fault during the run and --counters prints per-NIC byte counters at the end. The
testbed needs root. Standard library only.
"""
import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

POLL_S = 0.05          # how often the launcher looks at its ranks
KILL_GRACE_S = 2.0     # SIGTERM -> SIGKILL


def die(msg, code=2):
    sys.stderr.write("mend-run: %s\n" % msg)
    sys.exit(code)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="mend-run", usage="mend-run -np N [options] PROG [ARGS...]",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example: mend-run -np 4 build/bin/all_reduce_perf -b 8 -e 64M -f 2 -c 1")
    p.add_argument("-np", "-n", dest="np", type=int, required=True, help="number of ranks")
    p.add_argument("--hosts", type=int, help="run on the testbed with this many hosts")
    p.add_argument("--rails", type=int, default=1, help="data NICs per testbed host (1)")
    p.add_argument("--rate", help="testbed NIC line rate, e.g. 1gbit (unshaped if omitted)")
    p.add_argument("--fault", action="append", default=[],
                   help="testbed fault KIND:host:rail:at_seconds[:arg...] (repeatable)")
    p.add_argument("--counters", action="store_true", help="print per-NIC byte counters (testbed)")
    p.add_argument("--timeout", type=float, default=600.0, help="kill all ranks after S seconds (600)")
    p.add_argument("--grace", type=float, default=5.0,
                   help="seconds the other ranks get after one fails (5)")
    p.add_argument("--env", action="append", default=[], metavar="K=V",
                   help="set an environment variable in every rank (repeatable)")
    p.add_argument("-q", "--quiet", action="store_true", help="do not show other ranks' output on failure")
    p.add_argument("--all-output", action="store_true", help="show every rank's output, prefixed")
    p.add_argument("--bind", action="store_true",
                   help="pin rank r to the r-th CPU this process may use, modulo their number (as Open MPI "
                        "binds ranks to cores); on this machine only")
    p.add_argument("prog", nargs="?", help="program to run")
    # (argparse counts a REMAINDER positional as required in its error messages: it is not.)
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments").required = False
    if not argv:
        p.print_help(sys.stderr)
        sys.exit(2)
    a = p.parse_args(argv)
    if a.prog is None:
        p.error("no program to run")
    if a.np < 1:
        die("-np must be at least 1")
    if not 0 < a.timeout <= 7 * 24 * 3600:
        die("--timeout must be in (0, 604800] seconds")
    env = {}
    for kv in a.env:
        if "=" not in kv or kv.startswith("="):
            die("--env wants K=V, got %r" % kv)
        k, v = kv.split("=", 1)
        env[k] = v
    if "MEND_JOB_SECRET" not in env and "MEND_JOB_SECRET" not in os.environ:
        env["MEND_JOB_SECRET"] = secrets.token_hex(16)  # this run's ranks only (docs/bootstrap.md)
    a.env = env
    if a.hosts is not None:
        if a.hosts < 1 or a.np % a.hosts:
            die("-np %d must be a multiple of --hosts %d" % (a.np, a.hosts))
        if a.rails < 1:
            die("--rails must be at least 1")
        if a.bind:
            die("--bind is for ranks on this machine, not the testbed")
    elif a.fault or a.counters or a.rate:
        die("--fault, --counters and --rate need --hosts (the testbed)")
    return a


def resolve_prog(prog):
    if os.sep in prog:
        if not os.path.isfile(prog) or not os.access(prog, os.X_OK):
            die("%s: not an executable file" % prog)
        return os.path.abspath(prog)
    found = shutil.which(prog)
    if not found:
        die("%s: not found in PATH" % prog)
    return found


def free_ports(n):
    """n distinct TCP ports free on loopback right now."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def rank_code(rc):
    return 128 - rc if rc is not None and rc < 0 else (rc if rc is not None else 125)


def pump(stream, prefix, out):
    """Copy lines from a rank's pipe to our stdout with a [rank] prefix."""
    for line in iter(stream.readline, b""):
        out.write(prefix + line.decode(errors="replace"))
        out.flush()
    stream.close()


class LocalRun:
    """N processes on this machine."""

    def __init__(self, a, prog):
        self.a, self.prog = a, prog
        self.procs, self.logs, self.threads = [], [], []
        self.killed_by_us = set()
        self.tmp = tempfile.mkdtemp(prefix="mend-run-")

    def env_for(self, rank, comm_port, ctrl_port):
        env = dict(os.environ)
        env.update({
            "RANK": str(rank), "WORLD_SIZE": str(self.a.np),
            "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(self.a.np),
            "GROUP_RANK": "0", "NODE_RANK": "0",
            "NCCL_COMM_ID": "127.0.0.1:%d" % comm_port,
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(ctrl_port),
            "MEND_PERF_CTRL": "127.0.0.1:%d" % ctrl_port,
        })
        env.update(self.a.env)
        return env

    def pin(self, rank):
        """Keyword arguments for Popen that pin `rank` to one CPU (--bind), else none."""
        if not self.a.bind:
            return {}
        cpus = sorted(os.sched_getaffinity(0))
        cpu = cpus[rank % len(cpus)]
        return {"preexec_fn": lambda: os.sched_setaffinity(0, {cpu})}

    def start(self):
        comm_port, ctrl_port = free_ports(2)
        for r in range(self.a.np):
            env = self.env_for(r, comm_port, ctrl_port)
            argv = [self.prog] + self.a.args
            if self.a.all_output:
                p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True, **self.pin(r))
                t = threading.Thread(target=pump, args=(p.stdout, "[%d] " % r, sys.stdout), daemon=True)
                t.start()
                self.threads.append(t)
                self.logs.append(None)
            elif r == 0:
                p = subprocess.Popen(argv, env=env, start_new_session=True, **self.pin(r))
                self.logs.append(None)
            else:
                log = open(os.path.join(self.tmp, "rank%d.log" % r), "w+b")
                p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, **self.pin(r))
                self.logs.append(log)
            self.procs.append(p)

    def kill(self, ranks, reason):
        for r in ranks:
            p = self.procs[r]
            if p.poll() is None:
                self.killed_by_us.add(r)
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + KILL_GRACE_S
        for r in ranks:
            p = self.procs[r]
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(5)
        if reason:
            sys.stderr.write("mend-run: %s\n" % reason)

    def wait(self):
        """Returns the exit status of the whole run."""
        deadline = time.monotonic() + self.a.timeout
        fail_at = None
        while True:
            codes = [p.poll() for p in self.procs]
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            if fail_at is None and any(c not in (None, 0) for c in codes):
                fail_at = now + self.a.grace
            if fail_at is not None and now >= fail_at:
                self.kill(range(len(self.procs)), "a rank failed; stopped the others after %gs" % self.a.grace)
                break
            if now >= deadline:
                self.kill(range(len(self.procs)), "timed out after %gs; killed all ranks" % self.a.timeout)
                self.report()
                return 124
            time.sleep(POLL_S)
        for t in self.threads:
            t.join(5)
        self.report()
        own = [rank_code(p.returncode) for r, p in enumerate(self.procs) if r not in self.killed_by_us]
        worst = max(own) if own else 0
        if worst == 0 and self.killed_by_us:
            worst = max(rank_code(p.returncode) for p in self.procs)
        return worst

    def report(self):
        for r, p in enumerate(self.procs):
            code = rank_code(p.returncode)
            if code == 0:
                continue
            why = "killed by mend-run" if r in self.killed_by_us else "exited with %d" % code
            sys.stderr.write("mend-run: rank %d %s\n" % (r, why))
            log = self.logs[r]
            if log is None or self.a.quiet:
                continue
            log.seek(0)
            for line in log.read().decode(errors="replace").splitlines()[-40:]:
                sys.stderr.write("[%d] %s\n" % (r, line))

    def cleanup(self):
        """Closes the ranks' logs and removes their folder (after report(), or when interrupted)."""
        for log in self.logs:
            if log:
                log.close()
        self.logs = []
        shutil.rmtree(self.tmp, ignore_errors=True)

    def interrupt(self):
        self.kill(range(len(self.procs)), "interrupted; killed all ranks")


def find_testbed():
    here = os.path.dirname(os.path.realpath(sys.argv[0]))
    src = os.path.dirname(os.path.realpath(__file__))
    for d in (os.path.join(here, "..", "..", "tests", "testbed"), os.path.join(src, "..", "..", "tests", "testbed"),
              os.path.join(here, "..", "share", "mend")):
        if os.path.isfile(os.path.join(d, "testbed.py")):
            sys.path.insert(0, os.path.abspath(d))
            try:
                import testbed
                return testbed
            except ImportError as e:
                sys.path.pop(0)
                last = e
    die("cannot load the testbed (testbed.py next to mend-run in share/mend or tests/testbed)%s"
        % (": %s" % last if "last" in locals() else ""))


def run_testbed(a, prog):
    if os.geteuid() != 0:
        die("--hosts needs root (the testbed builds network namespaces)", 77)
    tbmod = find_testbed()
    faults = []
    for spec in a.fault:
        try:
            faults.append(tbmod.parse_fault_spec(spec))
        except ValueError as e:
            die(str(e))
    with tbmod.Testbed(hosts=a.hosts, rails=a.rails, rate=a.rate) as tb:
        for kind, host, rail, at, args in faults:
            tb.schedule(at, tb.fault, kind, host, rail, *args)
        before = tb.nic_counters()
        res = tb.launch([prog] + a.args, ranks_per_host=a.np // a.hosts, env=a.env, timeout=a.timeout,
                        fail_fast=True)
        after = tb.nic_counters()
        for rr in res.ranks:
            if rr.rank == 0 or a.all_output:
                prefix = "" if rr.rank == 0 and not a.all_output else "[%d] " % rr.rank
                for line in (rr.output or "").splitlines():
                    sys.stdout.write(prefix + line + "\n")
        for rr in res.ranks:
            if rr.code != 0:
                sys.stderr.write("mend-run: rank %d (host %d) %s, code %d\n" % (rr.rank, rr.host, rr.status, rr.code))
                if rr.rank != 0 and not a.quiet and not a.all_output:
                    for line in (rr.output or "").splitlines()[-40:]:
                        sys.stderr.write("[%d] %s\n" % (rr.rank, line))
        for t, text in tb.events:
            sys.stdout.write("# testbed t=%.3fs %s\n" % (t, text))
        if a.counters:
            sys.stdout.write("# per-NIC bytes during the run\n")
            for line in tbmod.format_counters(before, after).splitlines():
                sys.stdout.write("# " + line + "\n")
        sys.stdout.flush()
        return 124 if res.timed_out else res.worst_code


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    prog = resolve_prog(a.prog)
    if a.hosts is not None:
        return run_testbed(a, prog)
    run = LocalRun(a, prog)

    def on_signal(signum, frame):
        run.interrupt()
        sys.exit(130 if signum == signal.SIGINT else 143)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        run.start()
        return run.wait()
    finally:
        run.cleanup()


if __name__ == "__main__":
    sys.exit(main())
