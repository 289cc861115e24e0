#!/usr/bin/env python3
"""crowd_choice: how good the cost model's choice is on one host, against every algorithm forced.

    benchmarks/crowd_choice.py [--build build] [--lib DIR] [--ranks 4,6,8] [--colls allreduce,allgather]
        [--rounds 5] [--sizes "-b 16K -e 1M -f 2"] [--iters "-n 60 -w 5"]

Each round runs, per rank count and collective, the perf tool with the ring forced (NCCL_ALGO=Ring
MEND_RD=0), the tree (NCCL_ALGO=Tree MEND_RD=0, AllReduce only), recursive doubling (MEND_RD=1)
and the model's own choice ("choice"), in turns, through mend-run (no binding: on a host with fewer
CPUs than ranks the cost model charges the crowd). --lib DIR adds the choice of the library in DIR
("lib": DIR first on LD_LIBRARY_PATH), so a library built before a change is judged in the same turns.
The end prints, per size, the median time of each algorithm and choice, and each choice's time over
the best algorithm's ("regret"); then, per choice, the geometric mean and the worst regret over
every cell.
"""
import argparse
import math
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from small_latency import parse_table  # noqa: E402  (the perf tools' table, out-of-place time)

TOOLS = {"allreduce": "all_reduce_perf", "allgather": "all_gather_perf", "reducescatter": "reduce_scatter_perf",
         "broadcast": "broadcast_perf"}


def run(build, n, tool, sizes, iters, env_extra, timeout=300):
    env = dict(os.environ)
    env.update(env_extra)
    cmd = [os.path.join(build, "bin", "mend-run"), "-np", str(n), os.path.join(build, "bin", tool)]
    cmd += sizes.split() + iters.split()
    try:
        out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=timeout).stdout
    except subprocess.TimeoutExpired:
        return {}
    return parse_table(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--lib", help="a second library folder whose choice is judged too")
    ap.add_argument("--ranks", default="4,6,8")
    ap.add_argument("--colls", default="allreduce,allgather")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="-b 16K -e 1M -f 2")
    ap.add_argument("--iters", default="-n 60 -w 5")
    args = ap.parse_args()
    ranks = [int(x) for x in args.ranks.split(",")]
    colls = args.colls.split(",")
    for c in colls:
        if c not in TOOLS:
            sys.exit("crowd_choice: unknown collective %r (one of %s)" % (c, ", ".join(TOOLS)))
    configs = {"ring": {"NCCL_ALGO": "Ring", "MEND_RD": "0"}, "tree": {"NCCL_ALGO": "Tree", "MEND_RD": "0"},
               "rd": {"MEND_RD": "1"}, "choice": {}}
    if args.lib:
        configs["lib"] = {"LD_LIBRARY_PATH": os.path.abspath(args.lib) + ":" + os.environ.get("LD_LIBRARY_PATH", "")}
    choices = [x for x in ("choice", "lib") if x in configs]
    times = {}  # (coll, n, config) -> {size: [us per round]}
    for r in range(args.rounds):
        print("round %d, load %.2f" % (r + 1, os.getloadavg()[0]), flush=True)
        for n in ranks:
            for c in colls:
                for name, env in configs.items():
                    if name == "tree" and c != "allreduce":
                        continue
                    for size, us in run(args.build, n, TOOLS[c], args.sizes, args.iters, env).items():
                        times.setdefault((c, n, name), {}).setdefault(size, []).append(us)
    regrets = {x: [] for x in choices}
    for n in ranks:
        for c in colls:
            names = [x for x in configs if (c, n, x) in times]
            algos = [x for x in names if x not in choices]
            print("\n%s, %d ranks (median us of %d rounds)" % (c, n, args.rounds))
            print("%10s " % "bytes" + " ".join("%9s" % x for x in names) + "".join("  %s/best" % x for x in choices))
            sizes = sorted(set().union(*(times[(c, n, x)].keys() for x in names)))
            for s in sizes:
                med = {x: statistics.median(times[(c, n, x)][s]) for x in names if s in times[(c, n, x)]}
                line = "%10d " % s + " ".join("%9.1f" % med[x] if x in med else "%9s" % "-" for x in names)
                best = min((med[x] for x in algos if x in med), default=None)
                for x in choices:
                    if best and x in med:
                        regrets[x].append(med[x] / best)
                        line += "  %*.2f" % (len(x) + 5, regrets[x][-1])
                print(line)
    print()
    for x in choices:
        if regrets[x]:
            gm = math.exp(sum(math.log(v) for v in regrets[x]) / len(regrets[x]))
            print("%s / best algorithm over %d cells: geometric mean %.3f, worst %.2f" % (x, len(regrets[x]), gm,
                                                                                        max(regrets[x])))
    print("load %.2f" % os.getloadavg()[0])


if __name__ == "__main__":
    main()
