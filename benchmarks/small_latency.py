#!/usr/bin/env python3
"""small_latency: AllReduce latency across testbed hosts, Mend configurations and Open MPI in turns.

    benchmarks/small_latency.py --name mtab1 [--build build] [--rounds 3] [--sizes "-b 8 -e 8"]
        [--config LABEL=K=V,K=V ...] [--no-mpi] [--ranks-per-host 1]

One testbed (2 hosts x 2 rails at 1 gbit/s, named --name) serves every run, so Mend and Open MPI
use the same namespaces. Each round runs every --config (default: Mend as built, then with the
short path off: MEND_NET_DIRECT=0 and MEND_PLAN_CACHE=0), then Open MPI's mpi_perf (TCP on rail0,
`mpi_yield_when_idle 1`), each with the 1-minute load average before it. The end prints, per
size, the median time of every configuration and its ratio to the first one. Needs root, the
perf tools in BUILD/bin and, unless --no-mpi, BUILD/bin/peers/mpi_perf and mpirun.
"""
import argparse
import os
import statistics
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "testbed"))
import testbed  # noqa: E402

DEFAULT_CONFIGS = ["mend=", "mend-noshort=MEND_NET_DIRECT=0,MEND_PLAN_CACHE=0"]


def parse_table(out):
    """{size: out-of-place time in us} from a perf tool's table."""
    res = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) > 6 and f[0].isdigit():
            try:
                res[int(f[0])] = float(f[5])
            except ValueError:
                pass
    return res


def load1():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def run_mend(tb, a, env):
    env = dict(env, LD_LIBRARY_PATH=os.path.join(a.build, "lib"))
    argv = [os.path.join(a.build, "bin", "all_reduce_perf")] + a.sizes.split() + a.iters.split() + ["-c", "0"]
    if a.bind:
        # Host h's ranks on CPU h (mod the CPUs): the two hosts' ranks never share one.
        argv = ["sh", "-c", 'exec taskset -c $((MEND_TESTBED_HOST %% %d)) "$@"' % os.cpu_count(), "sh"] + argv
    res = tb.launch(argv, ranks_per_host=a.ranks_per_host, env=env, timeout=a.timeout)
    return parse_table(res.ranks[0].output or ""), res


def run_mpi(tb, a, hostfile):
    mpi = ("mpirun --allow-run-as-root --hostfile %s --mca plm_rsh_agent %s --mca oob_tcp_if_include mgmt0 "
           "--mca mpi_yield_when_idle 1 --mca btl tcp,self,vader -np %d --map-by ppr:%d:node "
           "--mca btl_tcp_if_include rail0 %s allreduce %s %s -c 0"
           % (hostfile, os.path.join(ROOT, "tests", "testbed", "netns_rsh.sh"), 2 * a.ranks_per_host,
              a.ranks_per_host, os.path.join(a.build, "bin", "peers", "mpi_perf"), a.sizes, a.iters))
    p = subprocess.run([os.path.join(ROOT, "tests", "testbed", "netns_rsh.sh"), tb.host_ns(0), mpi],
                       capture_output=True, text=True, timeout=a.timeout)
    return parse_table(p.stdout), p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", required=True, help="testbed name (mt[a-z0-9]{1,10})")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder (default build)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="-b 8 -e 8", help="perf tool size flags")
    ap.add_argument("--iters", default="-n 500 -w 50", help="perf tool iteration flags")
    ap.add_argument("--config", action="append", help="LABEL=K=V,K=V (repeatable; default: %s)" % DEFAULT_CONFIGS)
    ap.add_argument("--no-mpi", action="store_true")
    ap.add_argument("--ranks-per-host", type=int, default=1)
    ap.add_argument("--bind", action="store_true", help="pin host h's Mend ranks to CPU h (Open MPI binds its own)")
    ap.add_argument("--timeout", type=float, default=300.0, help="per run, seconds")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    configs = []
    for c in a.config or DEFAULT_CONFIGS:
        label, _, kvs = c.partition("=")
        configs.append((label, dict(kv.split("=", 1) for kv in kvs.split(",") if kv)))
    results = {}
    tmp = tempfile.mkdtemp(prefix="small_latency.")
    try:
        return measure(a, configs, results, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(a, configs, results, tmp):
    with testbed.Testbed(hosts=2, rails=2, rate="1gbit", prefix=a.name) as tb:
        hostfile = os.path.join(tmp, "hosts")
        with open(hostfile, "w") as f:
            for h in range(2):
                f.write("%s slots=%d\n" % (tb.host_ns(h), a.ranks_per_host))
        for r in range(a.rounds):
            runs = [(label, lambda env=env: run_mend(tb, a, env)) for label, env in configs]
            if not a.no_mpi:
                runs.append(("openmpi", lambda: run_mpi(tb, a, hostfile)))
            for label, fn in runs:
                la = load1()
                t, raw = fn()
                if not t:
                    sys.stderr.write("small_latency: %s failed in round %d\n%s\n" % (label, r, str(raw)[-3000:]))
                    return 1
                results.setdefault(label, []).append(t)
                print("round %d %-14s load %s  %s" % (r, label, la, " ".join("%d:%.1f" % kv for kv in sorted(t.items()))),
                      flush=True)
    labels = list(results)
    print("# median us per size; ratio = configuration / %s" % labels[0])
    for s in sorted(results[labels[0]][0]):
        med = {l: statistics.median(x[s] for x in results[l] if s in x) for l in labels}
        print("%9d  " % s + "  ".join("%s %.1f (%.2f)" % (l, med[l], med[l] / med[labels[0]]) for l in labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
