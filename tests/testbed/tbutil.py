"""Functions shared by the testbed modules: commands, rates, namespaces, state files, cleanup.

Standard library only. Every wait is bounded in time.
"""
import atexit
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

PREFIX_RE = re.compile(r"^mt[a-z0-9]{1,10}$")
# Namespaces this tool creates: <prefix>h<i> for hosts, <prefix>sw for the switch.
NS_RE = re.compile(r"^(mt[a-z0-9]*?)(h[0-9]+|sw)$")
NETNS_DIR = "/run/netns"
STATE_DIR = "/run/mend-testbed"
CMD_TIMEOUT = 15.0        # bound on any single ip/tc/bridge command
VERBOSE = os.environ.get("MEND_TESTBED_VERBOSE", "") not in ("", "0")


class TestbedError(Exception):
    """A testbed operation failed; the message says which command and why."""


# --------------------------------------------------------------------------- commands and processes

def _log(msg):
    if VERBOSE:
        sys.stderr.write("testbed: %s\n" % msg)


def _run(argv, timeout=CMD_TIMEOUT, check=True, input=None):
    """Run a command with a time bound; raise TestbedError with its stderr on failure."""
    _log(" ".join(argv) + ("  <<%r" % input if input else ""))
    try:
        cp = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TestbedError("'%s' did not finish within %.0fs" % (" ".join(argv), timeout))
    except FileNotFoundError:
        raise TestbedError("%s not found (install iproute2)" % argv[0])
    if check and cp.returncode != 0:
        raise TestbedError("'%s' failed (exit %d): %s"
                           % (" ".join(argv), cp.returncode, (cp.stderr or cp.stdout).strip()))
    return cp


_RATE_UNITS = {
    "": 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
    "kibit": 2**10, "mibit": 2**20, "gibit": 2**30, "tibit": 2**40,
    "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12,
    "kibps": 8 * 2**10, "mibps": 8 * 2**20, "gibps": 8 * 2**30, "tibps": 8 * 2**40,
}


def parse_rate(text):
    """Rate in tc syntax ('1gbit', '200mbit', '125mbps', or bits/s as a number) -> bits/s."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        bits = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
        if not m or m.group(2).lower() not in _RATE_UNITS:
            raise ValueError("bad rate %r: use tc syntax such as 1gbit, 200mbit, 125mbps" % (text,))
        bits = float(m.group(1)) * _RATE_UNITS[m.group(2).lower()]
    if bits < 8000:
        raise ValueError("rate %r is below 8kbit" % (text,))
    return int(bits)


def tbf_burst(bits):
    """Bucket size for a rate: 2 ms of line rate, and at least 64 KiB so that a full GSO
    super-packet passes in one piece (measured in README.md)."""
    return max(int(bits / 8 * 0.002), 64 * 1024)


def format_rate(bits):
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale:
            return "%.3g%s" % (bits / scale, unit)
    return "%dbit" % bits


def _netns_names():
    """Names of all named network namespaces."""
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def _proc_start(pid):
    """Kernel start time of a process (to tell a live owner from a reused pid), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid):
    """True if pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def netns_pids(names):
    """{namespace name: [pids]} for processes living in each named namespace."""
    keys = {}
    for name in names:
        try:
            st = os.stat(os.path.join(NETNS_DIR, name))
            keys[(st.st_dev, st.st_ino)] = name
        except OSError:
            pass
    out = {name: [] for name in names}
    if not keys:
        return out
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat("/proc/%s/ns/net" % entry)
        except OSError:
            continue
        name = keys.get((st.st_dev, st.st_ino))
        if name is not None:
            out[name].append(int(entry))
    return out


def _kill_pids(pids, sig=signal.SIGKILL, wait=5.0):
    """Signal pids and wait (bounded) until none is alive; return the ones still alive."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + wait
    left = [p for p in pids if _alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if _alive(p)]
    return left


def destroy_namespaces(names, timeout=10.0):
    """Kill every process in the namespaces, then delete them; return a list of errors."""
    errors = []
    existing = [n for n in names if os.path.exists(os.path.join(NETNS_DIR, n))]
    pids = [p for plist in netns_pids(existing).values() for p in plist if p != os.getpid()]
    stuck = _kill_pids(pids, signal.SIGKILL, wait=min(5.0, timeout))
    if stuck:
        errors.append("processes still alive after SIGKILL: %s" % stuck)
    for name in existing:
        try:
            _run(["ip", "netns", "del", name], timeout=timeout)
        except TestbedError as e:
            errors.append(str(e))
    errors += ["namespace %s still exists" % n
               for n in existing if os.path.exists(os.path.join(NETNS_DIR, n))]
    return errors


# --------------------------------------------------------------------------- state files

def _state_path(prefix):
    return os.path.join(STATE_DIR, prefix + ".json")


def _read_state(prefix):
    try:
        with open(_state_path(prefix)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _all_states():
    try:
        files = os.listdir(STATE_DIR)
    except FileNotFoundError:
        return []
    states = []
    for fn in sorted(files):
        if fn.endswith(".json"):
            st = _read_state(fn[:-5])
            if st and PREFIX_RE.match(st.get("prefix", "")):
                states.append(st)
    return states


def _owner_alive(state):
    pid = state.get("owner_pid")
    return bool(pid) and _proc_start(pid) == state.get("owner_start")


def _belongs(ns, prefix):
    return ns == prefix + "sw" or re.fullmatch(re.escape(prefix) + r"h[0-9]+", ns) is not None


def list_testbeds():
    """Every testbed on this machine: [{prefix, hosts, rails, owner_alive, namespaces}]."""
    names = [n for n in _netns_names() if NS_RE.match(n)]
    found = {}
    for st in _all_states():
        p = st["prefix"]
        found[p] = dict(prefix=p, hosts=st.get("hosts"), rails=st.get("rails"),
                        rate=st.get("rate"), owner_pid=st.get("owner_pid"),
                        owner_alive=_owner_alive(st), namespaces=[])
    for n in names:
        owners = [p for p in found if _belongs(n, p)]
        if not owners:
            p = NS_RE.match(n).group(1)
            owners = [p]
            found.setdefault(p, dict(prefix=p, hosts=None, rails=None, rate=None,
                                     owner_pid=None, owner_alive=False, namespaces=[]))
        for p in owners:
            found[p]["namespaces"].append(n)
    return [found[p] for p in sorted(found)]


def logdir_prefix(prefix):
    """Start of the path of a testbed's rank-output folder (made with tempfile.mkdtemp)."""
    return os.path.join(tempfile.gettempdir(), "mend-testbed-%s-" % prefix)


def remove_logdirs(prefix):
    """Remove rank-output folders left by testbed `prefix` (its owner died before teardown)."""
    for path in glob.glob(glob.escape(logdir_prefix(prefix)) + "*"):
        shutil.rmtree(path, ignore_errors=True)


def cleanup(include_live=False, only=None):
    """Remove leftover testbeds (owner process gone, or made by `up`); `only`: these names.

    Testbeds whose owner is still running are kept unless include_live; a namespace name that
    could belong to a live testbed is never touched. Returns (removed prefixes, kept, errors)."""
    beds = list_testbeds()
    live_ns = set()
    if not include_live:
        for b in beds:
            if b["owner_alive"]:
                live_ns.update(b["namespaces"])
    removed, kept, errors = [], [], []
    for b in beds:
        if only is not None and b["prefix"] not in only:
            continue
        if b["owner_alive"] and not include_live:
            kept.append(b["prefix"])
            continue
        errors += destroy_namespaces([n for n in b["namespaces"] if n not in live_ns])
        remove_logdirs(b["prefix"])
        try:
            os.unlink(_state_path(b["prefix"]))
        except FileNotFoundError:
            pass
        removed.append(b["prefix"])
    return removed, kept, errors


# --------------------------------------------------------------------------- exit hooks

_LIVE = set()                 # testbeds set up in this process and not yet torn down
_LIVE_LOCK = threading.Lock()
_HOOKS = [False]              # exit hooks installed once per process


def _teardown_all():
    with _LIVE_LOCK:
        beds = list(_LIVE)
    for tb in beds:
        errs = tb.teardown()
        for e in errs:
            sys.stderr.write("testbed %s: teardown: %s\n" % (tb.prefix, e))


def _on_signal(signum, frame):
    # Turn SIGTERM/SIGHUP into SystemExit so `with` blocks and atexit tear everything down.
    raise SystemExit(128 + signum)


def _install_exit_hooks():
    if _HOOKS[0]:
        return
    _HOOKS[0] = True
    atexit.register(_teardown_all)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _on_signal)


class _SignalsHeld:
    """Defer SIGINT/SIGTERM/SIGHUP while a teardown runs, so it is not cut half-way."""
    SIGS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}

    def __enter__(self):
        self.main = threading.current_thread() is threading.main_thread()
        if self.main:
            self.old = signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGS)
        return self

    def __exit__(self, *exc):
        if self.main:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.old)
        return False


