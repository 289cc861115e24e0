#!/usr/bin/env python3
"""SPARe's Table 2 with Mend's numbers: runs mend-spare-sim over schemes, N, r and event trails,
writes results/runs.csv, results/table2.md and the plots (sim/spare/README.md).

    /usr/bin/python3 sim/spare/table2.py [--builddir build] [--out sim/spare/results] [--jobs 2]
    /usr/bin/python3 sim/spare/table2.py --quick --out DIR    (a seconds-long check of the pipeline)
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# The paper's Table 2 (minimum time-to-train / T0 over r, mean of 3 trials).
PAPER = {200: {"rep": 6.07, "rep_avail": 61.74, "spare": 2.92, "r": 9, "spare_avail": 87.00, "gain": 51.9},
         600: {"rep": 4.27, "rep_avail": 79.89, "spare": 2.49, "r": 8, "spare_avail": 93.90, "gain": 41.7},
         1000: {"rep": 3.88, "rep_avail": 84.41, "spare": 2.34, "r": 9, "spare_avail": 96.54, "gain": 39.6}}
TA = {200: 2, 600: 6, 1000: 10}
SPARE_R = {200: list(range(2, 13)), 600: list(range(2, 13)) + [14, 16, 18],
           1000: list(range(2, 13)) + [14, 16, 18, 20, 22]}
REP_R = list(range(2, 9))


def jobs_for(args):
    if args.quick:  # tiny: 40 groups, 300 steps, failures 10x rarer per group-second
        base = ["--steps", "300", "--mtbf", "600"]
        sizes, spare_r, rep_r = {40: 2}, {40: [2, 3, 4]}, [2, 3]
    else:
        base, sizes, spare_r, rep_r = [], TA, SPARE_R, REP_R
    jobs = []
    for n, ta in sizes.items():
        for seed in range(1, args.trials + 1):
            common = ["-n", str(n), "--ta", str(ta), "--seed", str(seed),
                      "--restart-failures", args.restart_failures] + base
            jobs.append(("ckpt", n, 1, seed, ["--scheme", "ckpt", "-r", "1"] + common))
            jobs += [("rep", n, r, seed, ["--scheme", "rep", "-r", str(r)] + common) for r in rep_r]
            jobs += [("spare", n, r, seed, ["--scheme", "spare", "-r", str(r)] + common) for r in spare_r[n]]
    return jobs


def run_one(binary, job):
    label, n, r, seed, argv = job
    out = subprocess.run([binary] + argv, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit(f"table2: {' '.join(argv)} failed: {out.stderr.strip()}")
    row = dict(kv.split("=", 1) for kv in out.stdout.split())
    row["label"] = label
    return row


def run_all(binary, jobs, nproc):
    with ThreadPoolExecutor(max_workers=nproc) as pool:
        return list(pool.map(lambda j: run_one(binary, j), jobs))


def aggregate(rows):
    """(label, n, r) -> mean ratio, availability, stacks per step, restarts; all trials finished?"""
    groups = {}
    for row in rows:
        groups.setdefault((row["label"], int(row["n"]), int(row["r"])), []).append(row)
    agg = {}
    for key, rs in groups.items():
        mean = lambda f: statistics.mean(float(x[f]) for x in rs)
        agg[key] = {"ratio": mean("ratio"), "avail": mean("availability"), "stacks": mean("stacks_per_step"),
                    "restarts": mean("restarts"), "failures": mean("failures"), "mu": mean("mu"),
                    "min": min(float(x["ratio"]) for x in rs), "max": max(float(x["ratio"]) for x in rs),
                    "finished": all(x["finished"] == "1" for x in rs), "done": mean("steps_done"),
                    "trials": len(rs)}
    return agg


def best(agg, label, n):
    cand = [(v["ratio"], r, v) for (l, m, r), v in agg.items() if l == label and m == n and v["finished"]]
    return min(cand, key=lambda c: c[0]) if cand else None


def write_table(agg, sizes, path, note):
    lines = ["| N | Ta | Rep+CKPT ttt/T0 (r) | Rep avail. | SPARe+CKPT ttt/T0 | r* | SPARe avail. | gain |"
             " CKPT-only | paper: Rep, avail. | paper: SPARe, r*, avail. | paper gain |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in sizes:
        rep, spare, ck = best(agg, "rep", n), best(agg, "spare", n), agg.get(("ckpt", n, 1))
        p = PAPER.get(n, {})
        ckpt = "n/a" if ck is None else (f"{ck['ratio']:.2f}" if ck["finished"] else
                                         f"unfinished at {ck['ratio']:.0f} T0 ({ck['done']:.0f} steps kept)")
        gain = f"{100 * (1 - spare[0] / rep[0]):.1f}%" if rep and spare else "n/a"
        lines.append(
            f"| {n} | {sizes[n]} s | " + (f"{rep[0]:.2f} ({rep[1]})" if rep else "n/a") + " | " +
            (f"{100 * rep[2]['avail']:.2f}%" if rep else "n/a") + " | " + (f"{spare[0]:.2f}" if spare else "n/a") +
            " | " + (f"{spare[1]}" if spare else "n/a") + " | " +
            (f"{100 * spare[2]['avail']:.2f}%" if spare else "n/a") + f" | {gain} | {ckpt} | " +
            (f"{p['rep']:.2f}, {p['rep_avail']:.2f}% | {p['spare']:.2f}, {p['r']}, {p['spare_avail']:.2f}% | "
             f"{p['gain']:.1f}% |" if p else "| | |"))
    with open(path, "w") as f:
        f.write(note + "\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


def shrink_sensitivity(binary, agg, sizes, args, path):
    """The best r of each scheme again with the paper's 0.1 s shrink instead of Mend's measured one."""
    jobs = []
    for n in sizes:
        for label in ("rep", "spare"):
            b = best(agg, label, n)
            if b:
                base = ["--steps", "300", "--mtbf", "600"] if args.quick else []
                jobs += [(label + "-shrink0.1", n, b[1], seed,
                          ["--scheme", label, "-r", str(b[1]), "-n", str(n), "--ta", str(sizes[n]), "--seed",
                           str(seed), "--shrink", "0.1", "--restart-failures", args.restart_failures] + base) for seed in range(1, args.trials + 1)]
    sens = aggregate(run_all(binary, jobs, args.jobs))
    lines = ["| N | scheme | r | ttt/T0, Mend's shrink (0.002 s x ranks) | ttt/T0, paper's 0.1 s shrink |",
             "|---|---|---|---|---|"]
    for (label, n, r), v in sorted(sens.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        lines.append(f"| {n} | {label.split('-')[0]} | {r} | {agg[(label.split('-')[0], n, r)]['ratio']:.3f} | "
                     f"{v['ratio']:.3f} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def plot(agg, sizes, outdir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("table2: no matplotlib (run with /usr/bin/python3): no plots", file=sys.stderr)
        return
    for field, ylabel, name in (("ratio", "time-to-train / T0", "ttt_vs_r.png"),
                                ("avail", "availability", "availability_vs_r.png"),
                                ("stacks", "stacks computed per step", "stacks_vs_r.png")):
        fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4), squeeze=False)
        for ax, n in zip(axes[0], sizes):
            for label, style in (("spare", "o-"), ("rep", "s--")):
                pts = sorted((r, v) for (l, m, r), v in agg.items() if l == label and m == n and v["finished"])
                if pts:
                    ax.plot([r for r, _ in pts], [v[field] for _, v in pts], style,
                            label={"spare": "SPARe+CKPT (Mend)", "rep": "Rep+CKPT (Mend)"}[label])
            p = PAPER.get(n)
            if p and field in ("ratio", "avail"):
                k = 1 if field == "ratio" else 0.01
                ax.plot([p["r"]], [k * p["spare" if field == "ratio" else "spare_avail"]], "r*", markersize=12,
                        label="paper: SPARe+CKPT best")
                ax.axhline(k * p["rep" if field == "ratio" else "rep_avail"], color="gray", linestyle=":",
                           label="paper: Rep+CKPT best")
            ax.set_title(f"N = {n}, Ta = {sizes[n]} s")
            ax.set_xlabel("redundancy r")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, name), dpi=90)
        plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builddir", default=os.environ.get("MEND_BUILDDIR", "build"))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a tiny configuration (tests)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--restart-failures", choices=("hit", "skip"), default="hit",
                    help="failures during a global restart hit the new allocation (default) or are dropped")
    args = ap.parse_args()
    binary = os.path.join(args.builddir, "bin", "mend-spare-sim")
    if not os.access(binary, os.X_OK):
        sys.exit(f"table2: no {binary} (build with SimGrid installed: make BUILDDIR={args.builddir})")
    os.makedirs(args.out, exist_ok=True)
    rows = run_all(binary, jobs_for(args), args.jobs)
    keys = sorted({k for row in rows for k in row})
    with open(os.path.join(args.out, "runs.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    sizes = {40: 2} if args.quick else TA
    agg = aggregate(rows)
    write_table(agg, sizes, os.path.join(args.out, "table2.md"),
                f"Minimum time-to-train / T0 over r, mean of {args.trials} trials (mend-spare-sim "
                f"--restart-failures {args.restart_failures}; the paper's Table 2 beside it). "
                "Availability: kept step time / time-to-train.")
    shrink_sensitivity(binary, agg, sizes, args, os.path.join(args.out, "shrink_sensitivity.md"))
    if not args.no_plot:
        plot(agg, sizes, args.out)


if __name__ == "__main__":
    main()
