#!/usr/bin/python3
"""R2CCL's multi-failure study (its section 8.2, Figure 10) with Mend's schedules, on mend-sim.

k = 1..K random NIC failures over S servers x N NICs (fixed seeds: pattern p of k uses
random.Random(1000 * k + p)); for each pattern the AllReduce is simulated under MEND_REPLAN=backup,
balance and auto (the cost model's choice: Balance, R2 or recursive).  Servers are simulated with
one rank each (sim/README.md says why: Mend's ranks of a server share its NICs, and a ring crosses
each server boundary once per channel, so the inter-server traffic is the same within 2(n-1)/n), or
with --rank-per-gpu a rank per GPU (servers x gpus ranks, each using all its server's NICs, as
Mend's graph builds them; hops within a server over its shared-memory link), the same AllReduce.

Iteration model (stated, not R2CCL's code): 7B parameters, bf16 gradients, TP = 4 inside a server
(R2CCL: two TP groups per 8-GPU server), so each server's NICs carry the data-parallel AllReduce of
8 GPUs x 7e9 / 4 x 2 bytes = 28 GB, as one AllReduce of that size over the servers; compute per
iteration 6 x 7e9 x (512 x 2048 tokens) / (GPUs x 989 TFLOP/s x 40 % MFU), not overlapped with
communication.  The AllReduce is simulated at --bytes and scaled linearly to 28 GB (mend-sim's time
is bandwidth-bound and linear in size at these sizes: 256 MiB -> 1 GiB gave x 4.00).

The planner's cost-model constants describe the simulated network, as `mend-info --calibrate` would
on the cluster: <out>/calib.txt (net hop latency 2 x 2.5 us, a channel at one NIC's line rate, a
rank at all its NICs', a hop within a server 1 us as mend-sim has it) is passed as MEND_CALIB_FILE.  The built-in constants are this machine's
sockets (about 1 GB/s a channel): with them the planner picks rings at 1,024 servers, where the
simulated ring (2,046 steps of 32 KiB) takes twice the tree's time (--calib builtin keeps them).

Auto is simulated only where the cost model (mend-plan, the same constants) picks R2 or recursive:
where it picks backup or Balance it runs the same programs as that forced mode, so that run stands
for it (all 610 auto runs recorded before this rule equalled their chosen mode's to the last digit;
--simulate-auto simulates every one, the csv's "simulated" column says which were).

Writes <out>/r2ccl_study.csv, <out>/r2ccl_study.png and <out>/calib.txt; while it runs, every finished
simulation is appended to <out>/r2ccl_study.partial.csv (patterns in turn across k), which --resume
reads, so a sweep stopped half way loses nothing.
"""
import argparse
import csv
import os
import random
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

MODES = ("backup", "balance", "auto")
PARTIAL = "r2ccl_study.partial.csv"  # simulations finished by a sweep still running (or stopped)


def topology(args, faults):
    topo = "servers=%d;nics=%d;gbps=%g" % (args.servers, args.nics, args.gbps)
    if args.rank_per_gpu:
        topo += ";gpus=%d" % args.gpus
    return topo + "".join(";down=%d,%d" % f for f in faults)


def environment(args):
    env = dict(os.environ)
    if args.calib_file:
        env["MEND_CALIB_FILE"] = args.calib_file
    return env


def simulate(args, faults, mode):
    cmd = [args.sim, "-e", topology(args, faults), "--bytes", str(args.bytes), "--replan", mode, "--shm-gbps", "3600",
           "--latency-us", "2.5", "--goodput", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=environment(args))
    m = re.search(r"schedule (\S+) simulated ([0-9.]+) s", out.stdout)
    if out.returncode != 0 or not m:
        sys.exit("mend-sim failed: %s\n%s%s" % (" ".join(cmd), out.stdout, out.stderr))
    return m.group(1), float(m.group(2))


def choice(args, faults):
    """The cost model's choice for MEND_REPLAN=auto (mend-plan, the same planner and constants)."""
    cmd = [os.path.join(os.path.dirname(args.sim), "mend-plan"), "-e", topology(args, faults), "--bytes",
           str(args.bytes), "--sample", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=environment(args))
    m = re.search(r"allreduce \d+ bytes: (\w+),", out.stdout)
    if out.returncode == 0 and "every rank healthy" in out.stdout:
        return None
    if out.returncode != 0 or not m:
        sys.exit("mend-plan failed: %s\n%s%s" % (" ".join(cmd), out.stdout, out.stderr))
    return m.group(1)


def pattern(args, k, p):
    rng = random.Random(1000 * k + p)
    picks = rng.sample(range(args.servers * args.nics), k)
    return sorted((x // args.nics, x % args.nics) for x in picks)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sim", default="build/bin/mend-sim")
    ap.add_argument("--servers", type=int, default=64)
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per server (iteration model; ranks with --rank-per-gpu)")
    ap.add_argument("--rank-per-gpu", action="store_true",
                    help="simulate a rank per GPU (servers x gpus ranks, sharing their server's NICs) instead of one "
                         "rank per server; the AllReduce is the same size")
    ap.add_argument("--nics", type=int, default=8)
    ap.add_argument("--gbps", type=float, default=200)
    ap.add_argument("--kmax", type=int, default=10)
    ap.add_argument("--patterns", type=int, default=50)
    ap.add_argument("--bytes", type=int, default=256 << 20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="sim/results")
    ap.add_argument("--simulate-auto", action="store_true",
                    help="simulate auto even where the cost model picks backup or Balance (by default their run "
                         "stands for it: the same programs)")
    ap.add_argument("--calib", choices=("network", "builtin"), default="network",
                    help="cost-model constants: the simulated network's (default) or the built-in ones")
    ap.add_argument("--resume", action="store_true",
                    help="keep the simulations of <out>/r2ccl_study.csv and of a stopped sweep's "
                         "<out>/r2ccl_study.partial.csv (same build, same sizes) and run only the missing ones: a "
                         "sweep grows by patterns across runs, and one stopped half way loses nothing")
    ap.add_argument("--plot-only", action="store_true",
                    help="simulate nothing: print the table and draw the plot from <out>/r2ccl_study.csv")
    args = ap.parse_args()
    if args.plot_only:
        with open(os.path.join(args.out, "r2ccl_study.csv")) as f:
            summarize(args, list(csv.DictReader(f)))
        return
    os.makedirs(args.out, exist_ok=True)
    args.calib_file = None
    if args.calib == "network":
        args.calib_file = os.path.abspath(os.path.join(args.out, "calib.txt"))
        with open(args.calib_file, "w") as f:
            f.write("# the simulated network (sim/r2ccl_study.py): hop latency, one NIC, all NICs; a hop\n"
                    "# within a server (mend-sim's 1 us there)\n")
            f.write("net.alpha_us %g\nnet.bw_channel_gbs %g\nnet.bw_max_gbs %g\nshm.alpha_us 1\n"
                    % (2 * 2.5, args.gbps / 8, args.nics * args.gbps / 8))
    gpus = args.servers * args.gpus
    grad = args.gpus * 7e9 / 4 * 2                                   # bytes per server per iteration
    compute = 6 * 7e9 * 512 * 2048 / (gpus * 989e12 * 0.40)          # seconds
    scale = grad / args.bytes
    t0 = time.time()
    kept, healthy = resumed(args) if args.resume else ({}, None)
    if healthy is None:
        _, healthy = simulate(args, [], "auto")
    runs = [(k, p, m) for k in range(1, args.kmax + 1) for p in range(args.patterns) for m in MODES]
    picks = {}
    if not args.simulate_auto:
        picks = {(k, p): choice(args, pattern(args, k, p)) for k, p, m in runs if m == "auto"}
    jobs = [j for j in runs if (j[2] != "auto" or picks.get(j[:2]) not in ("backup", "balance")) and j not in kept]
    # Pattern by pattern across k, so that a sweep stopped half way holds as many patterns of every k;
    # each finished simulation is appended to the partial file at once, which --resume reads too.
    jobs.sort(key=lambda j: (j[1], j[0], MODES.index(j[2])))
    partial = os.path.join(args.out, PARTIAL)
    with open(partial, "a" if args.resume else "w", newline="") as f:
        w = csv.writer(f)
        if f.tell() == 0:
            w.writerow(["k", "pattern", "mode", "chosen", "allreduce_s"])
            w.writerow([0, 0, "healthy", "auto", repr(healthy)])
            f.flush()
        with ThreadPoolExecutor(args.jobs) as ex:
            res = {}
            for j, r in zip(jobs, ex.map(lambda j: simulate(args, pattern(args, j[0], j[1]), j[2]), jobs)):
                res[j] = r
                w.writerow([j[0], j[1], j[2], r[0], repr(r[1])])
                f.flush()
    res.update(kept)
    rows = []
    for k, p, m in runs:
        simulated = (k, p, m) in res
        chosen, t = res[(k, p, m)] if simulated else (picks[(k, p)], res[(k, p, picks[(k, p)])][1])
        over = (compute + t * scale) / (compute + healthy * scale) - 1
        rows.append({"k": k, "pattern": p, "mode": m, "chosen": chosen, "allreduce_s": t,
                     "vs_healthy": t / healthy, "iteration_overhead": over, "simulated": int(simulated)})
    with open(os.path.join(args.out, "r2ccl_study.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    os.remove(partial)  # every row of it is in the csv now
    print("%d simulations in %.0f s" % (len(jobs) + (0 if args.resume else 1), time.time() - t0))
    print("healthy AllReduce %.6f s at %d bytes; iteration: compute %.3f s + AllReduce %.3f s (%.0f MB/server)"
          % (healthy, args.bytes, compute, healthy * scale, grad / 1e6))
    summarize(args, rows)


def resumed(args):
    """{(k, pattern, mode): (chosen, seconds)} of the simulated rows of an earlier run, and its healthy
    time (None when there is no earlier run)."""
    path = os.path.join(args.out, "r2ccl_study.csv")
    kept, healthy = {}, None
    if os.path.exists(path):
        with open(path) as f:
            for r in csv.DictReader(f):
                if int(r["simulated"]):
                    kept[(int(r["k"]), int(r["pattern"]), r["mode"])] = (r["chosen"], float(r["allreduce_s"]))
                    healthy = float(r["allreduce_s"]) / float(r["vs_healthy"])
        print("resuming: %d simulations kept from %s" % (len(kept), path))
    partial = os.path.join(args.out, PARTIAL)
    if os.path.exists(partial):  # a sweep that was stopped: what it finished
        n = len(kept)
        with open(partial) as f:
            for r in csv.DictReader(f):
                if r["mode"] == "healthy":
                    healthy = float(r["allreduce_s"]) if healthy is None else healthy
                else:
                    kept[(int(r["k"]), int(r["pattern"]), r["mode"])] = (r["chosen"], float(r["allreduce_s"]))
        print("resuming: %d simulations kept from %s" % (len(kept) - n, partial))
    return kept, healthy


def summarize(args, rows):
    """Per k and mode the mean AllReduce ratio and iteration overhead: printed, then plotted."""
    print("k  " + "  ".join("%-26s" % m for m in MODES))
    mean = {}
    for k in range(1, args.kmax + 1):
        cells = []
        for m in MODES:
            sel = [r for r in rows if int(r["k"]) == k and r["mode"] == m]
            t = sum(float(r["vs_healthy"]) for r in sel) / len(sel)
            o = sum(float(r["iteration_overhead"]) for r in sel) / len(sel)
            mean[(k, m)] = (t, o)
            cells.append("x%.3f AllReduce, +%.2f %% iter" % (t, 100 * o))
        print("%-2d %s" % (k, "  ".join("%-26s" % c for c in cells)))
    plot(args, mean)


def plot(args, mean):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ks = list(range(1, args.kmax + 1))
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for m in MODES:
        ax[0].plot(ks, [mean[(k, m)][0] for k in ks], marker="o", label="Mend " + m)
        ax[1].plot(ks, [100 * mean[(k, m)][1] for k in ks], marker="o", label="Mend " + m)
    ax[1].plot([1, 10], [1.5, 4.3], "k--", marker="s", label="R2CCL Fig. 10 (1.5 % .. 4.3 %)")
    ranks = "%d ranks per server" % args.gpus if args.rank_per_gpu else "a rank per server"
    ax[0].set(xlabel="NIC failures k", ylabel="AllReduce time / healthy",
              title="%d servers x %d NICs x %g Gbit/s, %s" % (args.servers, args.nics, args.gbps, ranks))
    ax[1].set(xlabel="NIC failures k", ylabel="iteration overhead (%)",
              title="7B model, %d GPUs (iteration model)" % (args.servers * args.gpus))
    for a in ax:
        a.grid(True, alpha=0.3)
        a.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "r2ccl_study.png"), dpi=110)


if __name__ == "__main__":
    main()
