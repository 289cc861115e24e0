#!/usr/bin/env python3
"""mend-top: the NICs of the Mend processes on this host, live, in a plain terminal.

    mend-top [--once] [--interval S] [--lines N] [FILE_OR_GLOB ...]

Reads the snapshots the monitor writes (MEND_MONITOR_FILE: Prometheus text, or JSON lines for a
.jsonl file; docs/monitor.md) and shows, per process, communicator, rank and NIC: the state (health
registry, else the link), the throughput of the last window of W messages and the average over the
last seconds (from the byte counters of successive snapshots), anomalies, the longest send stall of
its connections (messages in flight, no completion: a link that moves nothing shows here, where no
window can), then per communicator the
op count, plan-view epoch, failovers and fail-backs.  Without arguments it reads the files that
MEND_MONITOR_FILE names (%p and %h as wildcards).  --once prints one frame and exits (the
"last seconds" column then needs two reads: it shows '-').  Standard library only.
"""
import argparse
import glob
import json
import os
import re
import socket
import sys
import time

STATES = {0: "up", 1: "down", 2: "degraded", 3: "probing"}
LINE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)\s*$')
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def unescape(v):
    return v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def parse_prom(text):
    """[(name, labels, value)] of a Prometheus text snapshot (the subset the monitor writes)."""
    rows = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = LINE_RE.match(line)
        try:
            value = float(m.group(3)) if m else None
        except ValueError:
            value = None
        if value is None:
            raise ValueError("not a sample line: %r" % line[:80])
        labels = {k: unescape(v) for k, v in LABEL_RE.findall(m.group(2) or "")}
        rows.append((m.group(1), labels, value))
    return rows


LABEL_KEYS = {"host", "pid", "window", "ras", "comm", "rank", "nic", "nic_name", "dir", "peer", "channel", "use"}


def parse_jsonl(text):
    """The same rows from JSON lines: each value field becomes mend_<field>."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        labels = {k: str(v) for k, v in obj.items() if k in LABEL_KEYS}
        for k, v in obj.items():
            if k not in LABEL_KEYS and k != "kind":
                rows.append(("mend_" + k, labels, float(v)))
    return rows


def read_snapshot(path):
    with open(path) as f:
        text = f.read()
    return parse_jsonl(text) if path.endswith(".jsonl") or text.lstrip().startswith("{") else parse_prom(text)


class Snapshot:
    """One file's rows, indexed."""

    def __init__(self, path, rows, read_at):
        self.path, self.read_at = path, read_at
        self.info = next((l for n, l, v in rows if n == "mend_monitor_info"), {})
        self.stamp = next((v for n, l, v in rows if n == "mend_monitor_snapshot_timestamp_seconds"), read_at)
        self.comms = {}  # (comm, rank) -> {metric: value}
        self.nics = {}   # (comm, rank, nic, dir) -> {metric: value, "name": nic_name}
        self.state = {}  # (comm, rank, nic) -> text
        self.stall = {}  # (comm, rank, nic) -> longest send stall of its connections, s
        for name, l, v in rows:
            if name.startswith("mend_comm_"):
                self.comms.setdefault((l["comm"], l["rank"]), {})[name] = v
            elif name.startswith("mend_nic_") and "dir" in l:
                d = self.nics.setdefault((l["comm"], l["rank"], l["nic"], l["dir"]), {"name": l.get("nic_name", "")})
                d[name] = v
            elif name == "mend_conn_stalled_seconds":
                key = (l["comm"], l["rank"], l["nic"])
                self.stall[key] = max(v, self.stall.get(key, 0.0))
            elif name == "mend_nic_state" and l.get("peer") == l.get("rank"):
                self.state[(l["comm"], l["rank"], l["nic"])] = STATES.get(int(v), "?")
            elif name == "mend_nic_link_up":
                key = (l["comm"], l["rank"], l["nic"])
                if key not in self.state:
                    self.state[key] = {1: "link-up", 0: "link-down"}.get(int(v), "-")


def rate(v):
    """Bytes/s as a short text."""
    if v is None:
        return "-"
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3)):
        if v >= scale:
            return "%.2f %s" % (v / scale, unit)
    return "%.0f B/s" % v


def default_paths():
    spec = os.environ.get("MEND_MONITOR_FILE")
    if not spec:
        return []
    return [spec.replace("%%", "\0").replace("%p", "*").replace("%h", "*").replace("\0", "%")]


def expand(args):
    paths = []
    for a in args:
        hits = sorted(glob.glob(a)) if any(c in a for c in "*?[") else [a]
        paths += [p for p in hits if ".tmp." not in p]
    return paths


def frame(snaps, history, span_s, max_lines):
    """The text of one frame."""
    host = socket.gethostname().split(".")[0]
    out = ["mend-top  %s  %d process(es)  %s" % (host, len(snaps), time.strftime("%H:%M:%S"))]
    out.append("%-8s %-16s %4s %-4s %-10s %-9s %12s %12s %12s %12s %5s %7s" % (
        "PID", "COMM", "RANK", "NIC", "NAME", "STATE", "TX WINDOW", "TX %gs" % span_s, "RX WINDOW",
        "RX %gs" % span_s, "ANOM", "STALL"))
    comm_lines = []
    for s in snaps:
        pid = s.info.get("pid", "?")
        for key in sorted({k[:3] for k in s.nics}, key=lambda k: (k[0], int(k[1]), int(k[2]))):
            comm, rank, nic = key
            tx, rx = s.nics.get(key + ("tx",), {}), s.nics.get(key + ("rx",), {})
            avg = {}
            for d, vals in (("tx", tx), ("rx", rx)):
                old = history.get((s.path,) + key + (d,))
                now = vals.get("mend_nic_bytes_total")
                if old and now is not None and s.stamp > old[0]:
                    avg[d] = (now - old[1]) / (s.stamp - old[0])
            anom = int(tx.get("mend_nic_anomalies_total", 0))
            flag = "*" if tx.get("mend_nic_anomaly", 0) else ""
            stall = s.stall.get(key, 0.0)
            out.append("%-8s %-16s %4s %-4s %-10s %-9s %12s %12s %12s %12s %5s %7s" % (
                pid, comm, rank, nic, (tx or rx).get("name", "")[:10], s.state.get(key, "-"),
                rate(tx.get("mend_nic_throughput_bytes_per_second")), rate(avg.get("tx")),
                rate(rx.get("mend_nic_throughput_bytes_per_second")), rate(avg.get("rx")), "%d%s" % (anom, flag),
                "%.3fs" % stall if stall > 0 else "-"))
        for (comm, rank), c in sorted(s.comms.items()):
            comm_lines.append("%-8s %-16s %4s %8d %6d %10d %10d %6d" % (
                pid, comm, rank, c.get("mend_comm_ops_total", 0), c.get("mend_comm_plan_epoch", -1),
                c.get("mend_comm_failovers_total", 0), c.get("mend_comm_failbacks_total", 0),
                c.get("mend_comm_net_connections", 0)))
    out.append("")
    out.append("%-8s %-16s %4s %8s %6s %10s %10s %6s" % ("PID", "COMM", "RANK", "OPS", "EPOCH", "FAILOVERS",
                                                         "FAILBACKS", "CONNS"))
    out += comm_lines
    if max_lines and len(out) > max_lines:
        out = out[:max_lines - 1] + ["... %d more line(s)" % (len(out) - max_lines + 1)]
    return "\n".join(out)


def read_all(paths, errors):
    snaps = []
    now = time.time()
    for p in paths:
        try:
            snaps.append(Snapshot(p, read_snapshot(p), now))
        except FileNotFoundError:
            continue  # the process ended and its file went, or not written yet
        except (OSError, ValueError, KeyError) as e:
            errors.append("%s: %s" % (p, e))
    return snaps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", help="snapshot files or globs (default: MEND_MONITOR_FILE with %%p, %%h as *)")
    ap.add_argument("--once", action="store_true", help="print one frame and exit")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between frames (default 1)")
    ap.add_argument("--span", type=float, default=5.0, help="average throughput over about this many seconds (5)")
    ap.add_argument("--lines", type=int, default=0, help="at most this many lines per frame (0: all)")
    a = ap.parse_args()
    if a.interval <= 0 or a.span <= 0 or a.lines < 0:
        ap.error("--interval and --span must be positive, --lines not negative")
    specs = a.paths or default_paths()
    if not specs:
        ap.error("no snapshot files: give paths or set MEND_MONITOR_FILE")
    history = {}  # (path, comm, rank, nic, dir) -> (stamp, bytes) about --span seconds ago
    samples = {}  # the same key -> [(stamp, bytes)] of the last --span seconds
    try:
        while True:
            errors = []
            paths = expand(specs)
            snaps = read_all(paths, errors)
            if a.once and not snaps:
                print("mend-top: no readable snapshot in %s%s" % (" ".join(specs), ": " + "; ".join(errors) if errors else ""),
                      file=sys.stderr)
                return 1
            text = frame(snaps, history, a.span, a.lines)
            if errors:
                text += "\n" + "\n".join("unreadable: " + e for e in errors)
            if a.once:
                print(text)
                return 0
            sys.stdout.write("\x1b[H\x1b[2J" + text + "\n")  # home, clear: any ANSI terminal
            sys.stdout.flush()
            for s in snaps:
                for (comm, rank, nic, d), v in s.nics.items():
                    key = (s.path, comm, rank, nic, d)
                    lst = samples.setdefault(key, [])
                    if not lst or lst[-1][0] != s.stamp:
                        lst.append((s.stamp, v.get("mend_nic_bytes_total", 0)))
                    while len(lst) > 1 and lst[-1][0] - lst[1][0] >= a.span:
                        lst.pop(0)
                    history[key] = lst[0]
            time.sleep(a.interval)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
