#!/usr/bin/env python3
"""Checks one perf-tool output (nccl-tests format) and prints what is wrong; exit 0 if all is right.

    check_output.py --coll all_reduce --nranks 4 [--wrong zero|some] [--sizes 8,16,..] FILE

Checked (the -I per-iteration columns are recognised): the header lines (version, "Collective test starting", nThread line, "# Using devices"
with one line per rank), the table header (banner, column names, units), every row (13 columns,
size = count x element size x (n for the gathered/scattered collectives), algbw = size/time,
busbw = algbw x nccl-tests' factor for the collective), #wrong (all 0, or some > 0), and the
footer (out-of-bounds count and OK/FAILED, average bus bandwidth = mean of the busbw columns,
"Collective test concluded").
"""
import argparse
import re
import sys

TYPE_SIZE = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2,
             "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}
# collective: (algbw bytes are count x size x n?, busbw factor as a function of n)
COLLS = {
    "all_reduce": (False, lambda n: 2.0 * (n - 1) / n),
    "reduce_scatter": (True, lambda n: (n - 1) / n),
    "all_gather": (True, lambda n: (n - 1) / n),
    "broadcast": (False, lambda n: 1.0),
    "reduce": (False, lambda n: 1.0),
    "alltoall": (True, lambda n: (n - 1) / n),
    "gather": (True, lambda n: (n - 1) / n),
    "scatter": (True, lambda n: (n - 1) / n),
    "sendrecv": (False, lambda n: 1.0),
}
PER_ITER = ["i_min", "i_max", "i_p99", "i_cv%"]   # -I 1 adds these to both groups
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)\s+(.*)$")


def close(a, b, rel=0.02, abs_=0.011):
    return abs(a - b) <= abs_ + rel * abs(b)


def check(text, coll, nranks, wrong, sizes):
    errs = []
    lines = text.splitlines()
    per_iter = any("i_min" in l and l.startswith("#") for l in lines)
    times_n, factor = COLLS[coll]
    need = ["# Collective test starting: %s_perf" % coll, "# Using devices"]
    for n in need:
        if not any(l.startswith(n) for l in lines):
            errs.append("missing line %r" % n)
    if not any(re.match(r"# nThread \d+ nGpus \d+ minBytes \d+ maxBytes \d+ step: \d+\((factor|bytes)\) "
                        r"warmup iters: \d+ iters: \d+ agg iters: \d+ validation: \d+ graph: \d+", l)
               for l in lines):
        errs.append("missing or malformed nThread line")
    dev = [l for l in lines if re.match(r"#  Rank +\d+ Group +\d+ Pid +\d+ on +\S+ device +-?\d+ \[", l)]
    if len(dev) != nranks:
        errs.append("%d device lines, want %d" % (len(dev), nranks))
    hdr = [i for i, l in enumerate(lines) if "out-of-place" in l and "in-place" in l]
    if not hdr:
        errs.append("no out-of-place/in-place banner")
    else:
        names = lines[hdr[0] + 1].split()
        group = ["time", "algbw", "busbw", "#wrong"] + (PER_ITER if per_iter else [])
        want = ["#", "size", "count", "type", "redop", "root"] + group + group
        if names[:len(want)] != want and names[:len(want)] != [w.replace("time", "cputime") for w in want]:
            errs.append("column names %r" % names)
        units = lines[hdr[0] + 2].split()
        if units[:3] != ["#", "(B)", "(elements)"] or units.count("(GB/s)") != 4 or units.count("(us)") < 2:
            errs.append("units line %r" % lines[hdr[0] + 2])
    busbws, rows, nwrong = [], [], 0
    width = 8 if per_iter else 4
    for l in lines:
        m = ROW.match(l)
        if not m or l.startswith("#"):
            continue
        size, count, typ, op, root = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4), int(m.group(5))
        rest = m.group(6).split()
        if len(rest) < 2 * width:
            errs.append("short row %r" % l)
            continue
        rows.append(size)
        esz = TYPE_SIZE.get(typ)
        if esz is None:
            errs.append("unknown type %r" % typ)
            continue
        if size != count * esz * (nranks if times_n else 1):
            errs.append("size %d != count %d x %d%s" % (size, count, esz, " x n" if times_n else ""))
        for half in (rest[0:width], rest[width:2 * width]):
            t, alg, bus, w = float(half[0]), float(half[1]), float(half[2]), half[3]
            if per_iter and not float(half[4]) <= float(half[6]) <= float(half[5]):
                errs.append("size %d: i_min %s <= i_p99 %s <= i_max %s does not hold" % (size, half[4], half[6], half[5]))
            busbws.append(bus)
            if t <= 0:
                errs.append("time %s not positive" % half[0])
                continue
            want_alg = size / 1e3 / t
            if not close(alg, want_alg):
                errs.append("size %d: algbw %.2f, want size/time = %.3f" % (size, alg, want_alg))
            if not close(bus, alg * factor(nranks)):
                errs.append("size %d: busbw %.2f, want algbw x %.3f = %.3f" % (size, bus, factor(nranks), alg * factor(nranks)))
            if w != "N/A":
                nwrong += int(float(w))
    if not rows:
        errs.append("no result rows")
    if sizes is not None and rows != sizes:
        errs.append("sizes %r, want %r" % (rows, sizes))
    if wrong == "zero" and nwrong:
        errs.append("%d wrong elements" % nwrong)
    if wrong == "some" and not nwrong:
        errs.append("no wrong elements reported")
    oob = [l for l in lines if l.startswith("# Out of bounds values : ")]
    avg = [l for l in lines if l.startswith("# Avg bus bandwidth    : ")]
    if not oob or not avg:
        errs.append("footer missing")
    else:
        m = re.match(r"# Out of bounds values : (\d+) (OK|FAILED)$", oob[0])
        if not m or (wrong == "zero" and (m.group(1) != "0" or m.group(2) != "OK")) or \
                (wrong == "some" and m.group(2) != "FAILED"):
            errs.append("footer %r" % oob[0])
        val = float(avg[0].split(":")[1].split()[0])
        if busbws and not close(val, sum(busbws) / len(busbws), rel=0.02, abs_=0.006):
            errs.append("avg bus bandwidth %g, mean of busbw columns %.4f" % (val, sum(busbws) / len(busbws)))
    if not any(l == "# Collective test concluded: %s_perf" % coll for l in lines):
        errs.append("missing 'Collective test concluded' line")
    return errs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--coll", required=True, choices=sorted(COLLS))
    p.add_argument("--nranks", type=int, required=True)
    p.add_argument("--wrong", choices=["zero", "some", "any"], default="zero")
    p.add_argument("--sizes", help="comma-separated list of the size column")
    p.add_argument("file")
    a = p.parse_args()
    text = open(a.file, errors="replace").read()
    sizes = [int(s) for s in a.sizes.split(",")] if a.sizes else None
    errs = check(text, a.coll, a.nranks, a.wrong, sizes)
    for e in errs[:20]:
        print("  " + e)
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
