#!/usr/bin/env python3
"""Mend multi-host testbed: a cluster of H hosts x R rails built from network namespaces.

Each host is a namespace `<prefix>h<i>` with data NICs rail0..rail{R-1} and a management NIC
mgmt0. Every NIC is one end of a veth pair whose other end is a port of a Linux bridge in the
switch namespace `<prefix>sw`: one bridge per rail (the rail switch) and one for management.
`tc tbf` gives each data NIC a line rate in both directions. Faults are real kernel events
(NIC down, carrier loss, a silent black hole, flapping, a lower rate).

Library use (see README.md in this folder):

    from testbed import Testbed
    with Testbed(hosts=2, rails=2, rate="1gbit") as tb:
        tb.schedule(2.0, tb.link_down, 1, 0)
        res = tb.launch(["./my_test"], ranks_per_host=2, timeout=60)
        print(res.worst_code, tb.nic_counters())

Standard library only; must run as root. Every wait is bounded in time.
"""
import argparse
import json
import os
import random
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from tbutil import (CMD_TIMEOUT, PREFIX_RE, STATE_DIR, TestbedError, _LIVE, _LIVE_LOCK,
                    _SignalsHeld, _belongs, _install_exit_hooks, _log, _netns_names, _proc_start,
                    _read_state, _run, _state_path, cleanup, destroy_namespaces, format_rate,
                    list_testbeds, logdir_prefix, netns_pids, parse_rate, remove_logdirs,
                    tbf_burst)
from tbjobs import Job, LaunchResult, RankResult, exit_code
from tbfaults import FAULT_KINDS, MAX_FAULT_SECONDS, FaultsMixin, parse_fault_spec

__all__ = ["Testbed", "TestbedError", "Job", "LaunchResult", "RankResult", "exit_code",
           "parse_rate", "format_rate", "parse_fault_spec", "FAULT_KINDS", "list_testbeds",
           "cleanup", "netns_pids", "destroy_namespaces"]

HERE = os.path.dirname(os.path.abspath(__file__))
NETTOOLS = os.path.join(HERE, "nettools.py")
BASE_OCTET = 200          # every address is 10.200.x.y, and only inside our namespaces
MAX_HOSTS = 254           # host i gets .i+1 in each /24
MAX_RAILS = 64
LINK_UP_TIMEOUT = 10.0    # bound on waiting for all NICs to come up after setup


# --------------------------------------------------------------------------- the testbed

class Testbed(FaultsMixin):
    """H hosts x R rails. Use as a context manager, or call setup() and teardown()."""

    def __init__(self, hosts, rails, rate=None, prefix=None, latency="50ms",
                 mgmt_rate=None, persistent=False, keep_logs=False, spine=False):
        if not isinstance(hosts, int) or not 1 <= hosts <= MAX_HOSTS:
            raise ValueError("hosts must be an integer in 1..%d, got %r" % (MAX_HOSTS, hosts))
        if not isinstance(rails, int) or not 1 <= rails <= MAX_RAILS:
            raise ValueError("rails must be an integer in 1..%d, got %r" % (MAX_RAILS, rails))
        if prefix is not None and not PREFIX_RE.match(prefix):
            raise ValueError("name %r must match %s (the 'mt' start lets cleanup find it)"
                             % (prefix, PREFIX_RE.pattern))
        if not re.fullmatch(r"[0-9]+(\.[0-9]+)?(us|ms|s)", str(latency)):
            raise ValueError("latency %r must look like 50ms" % (latency,))
        self.hosts = hosts                      # number of host namespaces
        self.rails = rails                      # data NICs per host
        self.rate = parse_rate(rate) if rate is not None else None          # bits/s or None
        self.mgmt_rate = parse_rate(mgmt_rate) if mgmt_rate is not None else None
        self.latency = str(latency)             # tbf queue bound, as tc time
        self.spine = bool(spine)                # True: the rails meet at a router (cross-rail traffic)
        self.prefix = prefix                    # chosen at setup when None
        self.persistent = persistent            # True: no teardown at exit (CLI `up`)
        self.keep_logs = keep_logs              # keep rank output files after teardown
        self.logdir = None                      # rank output files
        self.events = []                        # (seconds since setup, text) fault log
        self.t0 = None                          # monotonic time of setup
        self._lock = threading.RLock()
        self._events_lock = threading.Lock()
        self._timers = []                       # pending schedule() timers
        self._flaps = []                        # running flap threads
        self._jobs = []                         # jobs started by start()
        self._job_seq = 0
        self._up = False
        self._created = False                   # something may exist to tear down

    # ---- names and addresses (stable, documented in README.md)
    def host_ns(self, host):
        return "%sh%d" % (self.prefix, self._host(host))

    @property
    def switch_ns(self):
        return self.prefix + "sw"

    def namespaces(self):
        return [self.host_ns(i) for i in range(self.hosts)] + [self.switch_ns]

    def nic(self, rail):
        """Host-side NIC name: rail<r>, or mgmt0 for rail 'mgmt'."""
        return "mgmt0" if self._rail(rail) == "mgmt" else "rail%d" % rail

    def switch_port(self, host, rail):
        """Switch-side veth end (a bridge port): h<i>r<r>, or h<i>m for management."""
        r = self._rail(rail)
        return "h%dm" % self._host(host) if r == "mgmt" else "h%dr%d" % (self._host(host), r)

    def bridge(self, rail):
        r = self._rail(rail)
        return "br-mgmt" if r == "mgmt" else "br-rail%d" % r

    def addr(self, host, rail):
        """IPv4 address of a NIC: 10.200.<r+1>.<host+1> on rail r, 10.200.0.<host+1> on mgmt."""
        r = self._rail(rail)
        return "10.%d.%d.%d" % (BASE_OCTET, 0 if r == "mgmt" else r + 1, self._host(host) + 1)

    def mgmt_addr(self, host):
        return self.addr(host, "mgmt")

    def _host(self, host):
        if not isinstance(host, int) or not 0 <= host < self.hosts:
            raise ValueError("host must be in 0..%d, got %r" % (self.hosts - 1, host))
        return host

    def _rail(self, rail):
        if rail == "mgmt":
            return rail
        if not isinstance(rail, int) or not 0 <= rail < self.rails:
            raise ValueError("rail must be in 0..%d or 'mgmt', got %r" % (self.rails - 1, rail))
        return rail

    # ---- lifecycle
    def __enter__(self):
        return self.setup()

    def __exit__(self, *exc):
        errs = self.teardown()
        for e in errs:
            sys.stderr.write("testbed %s: teardown: %s\n" % (self.prefix, e))
        return False

    def setup(self):
        """Create namespaces, bridges, veths, addresses and shaping; wait until links are up."""
        with self._lock:
            if self._up:
                return self
            if os.geteuid() != 0:
                raise TestbedError("the testbed needs root (network namespaces)")
            if self.prefix is None:
                self.prefix = self._claim_free_prefix()
            elif any(_belongs(n, self.prefix) for n in _netns_names()) or not self._claim(self.prefix):
                raise TestbedError("testbed %s already exists; run `testbed.py down --name %s`"
                                   % (self.prefix, self.prefix))
            self._created = True
            if not self.persistent:
                _install_exit_hooks()
                with _LIVE_LOCK:
                    _LIVE.add(self)
            try:
                self._build()
            except BaseException:
                self.teardown()
                raise
            self.t0 = time.monotonic()
            self._up = True
            return self

    def _claim_free_prefix(self):
        base = "mt%d" % (os.getpid() % 10000)
        names = _netns_names()
        for suffix in [""] + list("abcdefgijklmnopqrstuvwxyz"):   # no 'h': keeps names readable
            p = base + suffix
            if not any(_belongs(n, p) for n in names) and self._claim(p):
                return p
        raise TestbedError("no free testbed name for pid %d; run `testbed.py cleanup`" % os.getpid())

    def _claim(self, prefix):
        """Create the state file of `prefix` exclusively: False if another run owns the name.
        The file also tells `cleanup` whether the owner process is still alive."""
        os.makedirs(STATE_DIR, exist_ok=True)
        pid = None if self.persistent else os.getpid()
        st = dict(prefix=prefix, hosts=self.hosts, rails=self.rails, rate=self.rate,
                  mgmt_rate=self.mgmt_rate, latency=self.latency, spine=self.spine, owner_pid=pid,
                  owner_start=_proc_start(pid) if pid else None, created=time.time())
        try:
            with open(_state_path(prefix), "x") as f:
                json.dump(st, f)
        except FileExistsError:
            return False
        return True

    def _build(self):
        sw = self.switch_ns
        for ns in [sw] + [self.host_ns(i) for i in range(self.hosts)]:
            _run(["ip", "netns", "add", ns])
            self._sysctls(ns, is_switch=(ns == sw))
        lines = []
        for r in list(range(self.rails)) + ["mgmt"]:
            lines += ["link add name %s type bridge stp_state 0 mcast_snooping 0" % self.bridge(r),
                      "link set dev %s up" % self.bridge(r)]
        self._ip_batch(sw, lines)
        for i in range(self.hosts):
            lines = ["link set dev lo up"]
            for r in list(range(self.rails)) + ["mgmt"]:
                lines += ["link add name %s type veth peer name %s netns %s"
                          % (self.nic(r), self.switch_port(i, r), sw),
                          "addr add %s/24 dev %s" % (self.addr(i, r), self.nic(r)),
                          "link set dev %s up" % self.nic(r)]
            self._ip_batch(self.host_ns(i), lines)
            self._ip_batch(sw, ["link set dev %s master %s" % (self.switch_port(i, r), self.bridge(r))
                                for r in list(range(self.rails)) + ["mgmt"]]
                           + ["link set dev %s up" % self.switch_port(i, r)
                              for r in list(range(self.rails)) + ["mgmt"]])
        for i in range(self.hosts):
            for r in range(self.rails):
                if self.rate:
                    self._shape(i, r, self.rate)
            if self.mgmt_rate:
                self._shape(i, "mgmt", self.mgmt_rate)
        if self.spine:
            self._build_spine()
        self._wait_links_up()

    def spine_addr(self, rail):
        """The spine's address on a rail (its gateway for the other rails): 10.200.<r+1>.254."""
        return "10.%d.%d.254" % (BASE_OCTET, self._rail(rail) + 1)

    def _build_spine(self):
        """The rails meet at a router: the switch namespace routes between the rail bridges, and every
        host reaches the other rails' subnets through each of its rail NICs (lowest rail first). A
        host that lost rail r reaches a peer's rail-r address over another rail and the spine, as on a
        rail-optimized fabric with a spine layer; the management network stays apart."""
        sw = self.switch_ns
        self._ip_batch(sw, ["addr add %s/24 dev %s" % (self.spine_addr(r), self.bridge(r))
                            for r in range(self.rails)])
        _run(["ip", "netns", "exec", sw, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"])
        for i in range(self.hosts):
            # Routes through a NIC without carrier are not used (a cable pulled at the switch side).
            _run(["ip", "netns", "exec", self.host_ns(i), "sh", "-c",
                  "for k in all default; do echo 1 > /proc/sys/net/ipv4/conf/$k/ignore_routes_with_linkdown; done"])
            self._ip_batch(self.host_ns(i), [
                "route add 10.%d.0.0/16 via %s dev %s metric %d" % (BASE_OCTET, self.spine_addr(r), self.nic(r), 100 + r)
                for r in range(self.rails)])

    def _sysctls(self, ns, is_switch):
        # arp_ignore=1/arp_announce=2: a NIC answers ARP only for its own address, so a rail
        # never carries another rail's traffic (what multi-rail clusters configure too).
        # IPv6 off: no router/neighbour chatter in the byte counters.
        vals = {"net/ipv6/conf/all/disable_ipv6": 1, "net/ipv6/conf/default/disable_ipv6": 1}
        if is_switch:
            for k in ("iptables", "ip6tables", "arptables"):
                vals["net/bridge/bridge-nf-call-" + k] = 0
        else:
            for k in ("all", "default"):
                vals["net/ipv4/conf/%s/arp_ignore" % k] = 1
                vals["net/ipv4/conf/%s/arp_announce" % k] = 2
        script = "; ".join("[ -w /proc/sys/{0} ] && echo {1} > /proc/sys/{0}".format(k, v)
                           for k, v in vals.items()) + "; true"
        _run(["ip", "netns", "exec", ns, "sh", "-c", script])

    def _ip_batch(self, ns, lines):
        _run(["ip", "-n", ns, "-batch", "-"], input="\n".join(lines) + "\n")

    def _tbf_cmd(self, ns, dev, bits):
        if bits is None:
            return ["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"]
        return ["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf",
                "rate", "%dbit" % bits, "burst", str(tbf_burst(bits)), "latency", self.latency]

    def _shape(self, host, rail, bits):
        """Line rate on both directions of one link: host egress and switch-port egress."""
        for ns, dev in ((self.host_ns(host), self.nic(rail)),
                        (self.switch_ns, self.switch_port(host, rail))):
            if bits is None:
                if self.tbf_rate(host, rail, side="switch" if ns == self.switch_ns else "host"):
                    _run(self._tbf_cmd(ns, dev, None))
            else:
                _run(self._tbf_cmd(ns, dev, bits))

    def _wait_links_up(self):
        deadline = time.monotonic() + LINK_UP_TIMEOUT
        for i in range(self.hosts):
            while True:
                down = [l["ifname"] for l in self._links(self.host_ns(i))
                        if l["ifname"] != "lo" and l.get("operstate") != "UP"]
                if not down:
                    break
                if time.monotonic() > deadline:
                    raise TestbedError("%s: NICs not up after %.0fs: %s"
                                       % (self.host_ns(i), LINK_UP_TIMEOUT, down))
                time.sleep(0.02)

    def _links(self, ns, dev=None, stats=False):
        argv = ["ip", "-j", "-n", ns] + (["-s"] if stats else []) + ["link", "show"]
        return json.loads(_run(argv + (["dev", dev] if dev else [])).stdout or "[]")

    def teardown(self):
        """Stop faults and jobs, kill every process in the namespaces, delete them.

        Safe to call twice and after a failed setup; returns a list of problems (empty = clean)."""
        with self._lock, _SignalsHeld():
            if not self._created:
                return []
            errors = []
            for fl in list(self._flaps):
                fl.stop()
            for t in list(self._timers):
                t.cancel()
            for fl in list(self._flaps):
                fl.join(2.0)
            for job in list(self._jobs):
                job.kill("teardown")
            names = set(self.namespaces()) | {n for n in _netns_names() if _belongs(n, self.prefix)}
            errors += destroy_namespaces(sorted(names))
            if self.logdir and not self.keep_logs:
                shutil.rmtree(self.logdir, ignore_errors=True)
            try:
                os.unlink(_state_path(self.prefix))
            except FileNotFoundError:
                pass
            with _LIVE_LOCK:
                _LIVE.discard(self)
            self._up = False
            self._created = False
            return errors

    @classmethod
    def attach(cls, prefix):
        """A handle on a testbed made by `testbed.py up --name prefix` (not torn down at exit)."""
        st = _read_state(prefix)
        if st is None:
            raise TestbedError("no testbed named %s (see `testbed.py list`)" % prefix)
        tb = cls(st["hosts"], st["rails"], st.get("rate"), prefix=prefix,
                 latency=st.get("latency", "50ms"), mgmt_rate=st.get("mgmt_rate"), persistent=True,
                 spine=st.get("spine", False))
        tb._up = tb._created = True
        tb.t0 = time.monotonic()
        return tb

    # ---- inspection
    def exec(self, host, argv, timeout=CMD_TIMEOUT, check=False, input=None):
        """Run a command inside host's namespace (bounded); returns CompletedProcess."""
        return _run(["ip", "netns", "exec", self.host_ns(host)] + list(argv),
                    timeout=timeout, check=check, input=input)

    def ping(self, host, addr, iface=None, count=1, timeout=1.0):
        """ICMP echo from host to addr (optionally bound to one NIC); True on a reply."""
        argv = [sys.executable, NETTOOLS, "ping", addr, "--count", str(count),
                "--timeout", str(timeout)] + (["--iface", iface] if iface else [])
        return self.exec(host, argv, timeout=count * timeout + 10).returncode == 0

    def rtt_ms(self, host, addr, iface=None, timeout=1.0):
        """Round-trip time of one ICMP echo in ms, or None without a reply."""
        cp = self.exec(host, [sys.executable, NETTOOLS, "ping", addr, "--timeout", str(timeout)]
                       + (["--iface", iface] if iface else []), timeout=timeout + 10)
        m = re.search(r"in ([0-9.]+) ms", cp.stdout)
        return float(m.group(1)) if cp.returncode == 0 and m else None

    def broadcast(self, host, rail, count=3):
        """Send UDP broadcasts out of one NIC (they stay inside that NIC's switch)."""
        self.exec(host, [sys.executable, NETTOOLS, "bcast", "--iface", self.nic(rail),
                         "--count", str(count)], check=True)

    def nic_counters(self):
        """{(host, nic): (tx_bytes, rx_bytes)} for every rail<r> and mgmt0 of every host."""
        out = {}
        for i in range(self.hosts):
            for l in self._links(self.host_ns(i), stats=True):
                if l["ifname"] == "lo":
                    continue
                s = l.get("stats64", l.get("stats", {}))
                out[(i, l["ifname"])] = (s["tx"]["bytes"], s["rx"]["bytes"])
        return out

    def link_state(self, host, rail):
        """Host-side view of a NIC: {'operstate', 'admin_up', 'carrier', 'flags'}."""
        l = self._links(self.host_ns(host), self.nic(rail))[0]
        flags = l.get("flags", [])
        return dict(operstate=l.get("operstate"), admin_up="UP" in flags,
                    carrier="NO-CARRIER" not in flags and "LOWER_UP" in flags, flags=flags)

    def port_state(self, host, rail):
        """Bridge port state of the switch side: 'forwarding', 'disabled', ..."""
        cp = _run(["bridge", "-j", "-n", self.switch_ns, "link", "show",
                   "dev", self.switch_port(host, rail)])
        info = json.loads(cp.stdout or "[]")
        return info[0].get("state") if info else None

    def tbf_rate(self, host, rail, side="host"):
        """Configured tbf rate in bits/s on one side ('host' or 'switch'), or None."""
        ns, dev = ((self.host_ns(host), self.nic(rail)) if side == "host"
                   else (self.switch_ns, self.switch_port(host, rail)))
        for q in json.loads(_run(["tc", "-j", "-n", ns, "qdisc", "show", "dev", dev]).stdout or "[]"):
            if q.get("kind") == "tbf" and q.get("root"):
                return int(q["options"]["rate"]) * 8
        return None

    def tcp_throughput(self, src, dst, rail, seconds=2.0, port=5201):
        """One TCP stream src -> dst over a rail for `seconds`; returns dict(bps, bytes, seconds)."""
        recv = subprocess.Popen(
            ["ip", "netns", "exec", self.host_ns(dst), sys.executable, NETTOOLS, "tcprecv",
             "--bind", self.addr(dst, rail), "--port", str(port), "--timeout", str(seconds + 10)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            if not _read_line(recv.stdout, 10.0).startswith("ready"):
                raise TestbedError("tcp receiver did not start: %s" % recv.stderr.read())
            self.exec(src, [sys.executable, NETTOOLS, "tcpsend", "--to", self.addr(dst, rail),
                            "--port", str(port), "--seconds", str(seconds),
                            "--bind", self.addr(src, rail)], timeout=seconds + 15, check=True)
            out, err = recv.communicate(timeout=15)
            res = json.loads(out.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError) as e:
            raise TestbedError("tcp throughput run failed: %s" % e)
        finally:
            if recv.poll() is None:
                recv.kill()
                recv.wait(5)
        secs = res["seconds"]
        return dict(bps=(res["bytes"] * 8 / secs) if secs > 0 else 0.0,
                    bytes=res["bytes"], seconds=secs)

    # ---- events and scheduling
    def log_event(self, text):
        t = time.monotonic() - (self.t0 or time.monotonic())
        with self._events_lock:
            self.events.append((t, text))
        _log("t=%.3fs %s" % (t, text))

    def schedule(self, delay_s, fn, *args, **kwargs):
        """Call fn(*args) after delay_s seconds in a background thread (cancelled at teardown).
        An exception in fn is recorded in `events`, not raised."""
        if not 0 <= delay_s <= MAX_FAULT_SECONDS:
            raise ValueError("delay must be in 0..%d s, got %r" % (MAX_FAULT_SECONDS, delay_s))

        def fire():
            try:
                fn(*args, **kwargs)
            except Exception as e:          # a failed fault must not kill the controller
                self.log_event("error in %s: %s" % (getattr(fn, "__name__", fn), e))
        t = threading.Timer(delay_s, fire)
        t.daemon = True
        self._timers.append(t)
        t.start()
        return t

    # ---- launching ranks
    def rank_env(self, host, local_rank, ranks_per_host, port, job_tag=""):
        """The environment a cluster gives rank (host, local_rank); see README.md."""
        rank = host * ranks_per_host + local_rank
        return {
            "NCCL_COMM_ID": "%s:%d" % (self.mgmt_addr(0), port),
            "NCCL_HOSTID": self.host_ns(host),
            "NCCL_SOCKET_IFNAME": "rail",
            "MEND_OOB_IFNAME": "mgmt0",
            "RANK": str(rank), "WORLD_SIZE": str(self.hosts * ranks_per_host),
            "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(ranks_per_host),
            "MASTER_ADDR": self.mgmt_addr(0), "MASTER_PORT": str(port + 1),
            "MEND_TESTBED": self.prefix, "MEND_TESTBED_HOST": str(host),
            "MEND_TESTBED_JOB": job_tag,
        }

    def start(self, argv, ranks_per_host, env=None, timeout=60.0, port=None, cwd=None,
              merge_stderr=True, fail_fast=False, die_with_parent=True):
        """Start ranks_per_host processes in every host; returns a Job (see jobs.py)."""
        if not self._up:
            raise TestbedError("testbed is not set up")
        if isinstance(argv, str) or not argv:
            raise ValueError("argv must be a non-empty list of strings")
        if not isinstance(ranks_per_host, int) or not 1 <= ranks_per_host <= 256:
            raise ValueError("ranks_per_host must be in 1..256, got %r" % (ranks_per_host,))
        if not 0 < timeout <= 24 * 3600:
            raise ValueError("timeout must be in (0, 86400] s, got %r" % (timeout,))
        # Below the kernel's ephemeral range (32768 and up by default): a port from that range may
        # already be held by a socket some rank opened itself (bootstrap, Net listeners).
        port = port or random.randrange(20000, 32000, 2)
        if self.logdir is None:
            self.logdir = tempfile.mkdtemp(prefix=os.path.basename(logdir_prefix(self.prefix)))
        self._job_seq += 1
        job = Job(self, argv, ranks_per_host, env or {}, timeout, port, cwd, merge_stderr,
                  fail_fast, die_with_parent, "%s.%d" % (self.prefix, self._job_seq))
        self._jobs.append(job)
        job.start()
        return job

    def launch(self, argv, ranks_per_host, env=None, timeout=60.0, **kw):
        """start() + wait(): run a job to completion (or its timeout); returns LaunchResult."""
        return self.start(argv, ranks_per_host, env, timeout, **kw).wait()


def _read_line(stream, timeout):
    """Read one line from a pipe within timeout seconds ('' on timeout/EOF)."""
    ready, _, _ = select.select([stream], [], [], timeout)
    return stream.readline() if ready else ""


# --------------------------------------------------------------------------- CLI

def format_counters(before, after=None):
    """Per-NIC byte table; with `after`, the bytes moved between the two snapshots."""
    rows = ["%-6s %-7s %15s %15s" % ("host", "nic", "tx_bytes", "rx_bytes")]
    for (h, nic) in sorted(before, key=lambda k: (k[0], k[1] != "mgmt0", k[1])):
        tx, rx = (after or before)[(h, nic)]
        if after is not None:
            tx, rx = tx - before[(h, nic)][0], rx - before[(h, nic)][1]
        rows.append("%-6s %-7s %15d %15d" % ("h%d" % h, nic, tx, rx))
    return "\n".join(rows)


def _describe(tb):
    lines = ["testbed %s: %d hosts x %d rails, rate %s, switch namespace %s"
             % (tb.prefix, tb.hosts, tb.rails, format_rate(tb.rate) if tb.rate else "unlimited",
                tb.switch_ns)]
    for i in range(tb.hosts):
        nics = ["mgmt0=%s" % tb.mgmt_addr(i)] + ["rail%d=%s" % (r, tb.addr(i, r))
                                                 for r in range(tb.rails)]
        lines.append("  %s: %s" % (tb.host_ns(i), " ".join(nics)))
    return "\n".join(lines)


def _topology_args(p, name_required=False):
    p.add_argument("--hosts", type=int, required=True, help="number of hosts (namespaces)")
    p.add_argument("--rails", type=int, required=True, help="data NICs per host")
    p.add_argument("--rate", help="tbf line rate per data NIC, tc syntax (e.g. 1gbit)")
    p.add_argument("--mgmt-rate", help="tbf line rate of mgmt0 (default unlimited)")
    p.add_argument("--latency", default="50ms", help="tbf latency (queue bound), default 50ms")
    p.add_argument("--spine", action="store_true", help="the rails meet at a router (cross-rail routes)")
    p.add_argument("--name", required=name_required,
                   help="testbed name, mt[a-z0-9]{1,10} (default mt<pid%%10000>)")


def _parser():
    ap = argparse.ArgumentParser(
        prog="testbed.py", description="Multi-host, multi-rail testbed in network namespaces.",
        epilog="Fault kinds for --fault KIND:host:rail:at_seconds[:arg...]: " + "; ".join(
            "%s (%s)" % kv for kv in FAULT_KINDS.items()))
    sub = ap.add_subparsers(dest="cmd", required=True)
    _topology_args(sub.add_parser("up", help="build a testbed and leave it up"))
    p = sub.add_parser("down", help="tear down a testbed made by up")
    p.add_argument("--name", required=True)
    p = sub.add_parser("run", help="build, run ranks (after --), report, tear down")
    _topology_args(p)
    p.add_argument("--np-per-host", type=int, required=True, help="ranks per host")
    p.add_argument("--timeout", type=float, default=60.0, help="job time limit, s (default 60)")
    p.add_argument("--fault", action="append", default=[], metavar="KIND:host:rail:at[:arg...]")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="extra rank env")
    p.add_argument("--fail-fast", action="store_true", help="stop all ranks soon after one fails")
    p.add_argument("--keep-logs", action="store_true", help="keep per-rank output files")
    p = sub.add_parser("fault", help="inject faults into a testbed made by up")
    p.add_argument("--name", required=True)
    p.add_argument("spec", nargs="+", metavar="KIND:host:rail:at[:arg...]")
    p = sub.add_parser("counters", help="print per-NIC byte counters of a testbed made by up")
    p.add_argument("--name", required=True)
    p = sub.add_parser("cleanup", help="remove leftover testbeds (owner gone, or made by up)")
    p.add_argument("--all", action="store_true", help="also testbeds whose owner still runs")
    p.add_argument("--name", action="append", help="only this testbed (repeatable)")
    sub.add_parser("list", help="list testbeds on this machine")
    sub.add_parser("check", help="exit 0 if testbeds work here, 77 if this machine cannot")
    return ap


def _cmd_run(args, prog):
    if not prog:
        raise ValueError("run needs a program after --")
    faults = [parse_fault_spec(f) for f in args.fault]
    env = {}
    for kv in args.env:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            raise ValueError("--env wants K=V, got %r" % kv)
        env[k] = v
    tb = Testbed(args.hosts, args.rails, args.rate, prefix=args.name, latency=args.latency,
                 mgmt_rate=args.mgmt_rate, keep_logs=args.keep_logs, spine=args.spine)
    for kind, host, rail, _, fargs in faults:     # refuse bad faults before building anything
        tb.check_fault(kind, host, rail, *fargs)
    with tb:
        print(_describe(tb), flush=True)
        before = tb.nic_counters()
        job = tb.start(prog, args.np_per_host, env, args.timeout, fail_fast=args.fail_fast)
        for kind, host, rail, at, fargs in faults:
            tb.schedule(at, tb.fault, kind, host, rail, *fargs)
        res = job.wait()
        after = tb.nic_counters()
        for r in res.ranks:
            for line in (r.output + r.stderr).splitlines():
                print("[%d] %s" % (r.rank, line))
        for r in res.ranks:
            print("testbed: rank %d (h%d local %d) %s, exit code %d"
                  % (r.rank, r.host, r.local_rank, r.status, r.code))
        for t, text in tb.events:
            print("testbed: t=%7.3fs %s" % (t, text))
        print("testbed: bytes per NIC during the job:\n" + format_counters(before, after))
        if args.keep_logs:
            print("testbed: rank output kept in %s" % tb.logdir)
        code = res.worst_code
    return code


def _cmd_check():
    if os.geteuid() != 0:
        print("testbed: needs root")
        return 77
    if not shutil.which("ip") or not shutil.which("tc") or not shutil.which("bridge"):
        print("testbed: needs iproute2 (ip, tc, bridge)")
        return 77
    try:
        with Testbed(1, 1, rate="1gbit"):
            pass
    except TestbedError as e:
        env_markers = ("not supported", "Unknown device type", "qdisc kind is unknown",
                       "Operation not permitted", "Permission denied", "Read-only file system")
        print("testbed: cannot build a testbed here: %s" % e)
        return 77 if any(m in str(e) for m in env_markers) else 1
    print("testbed: ok")
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = []
    if "--" in argv:
        i = argv.index("--")
        argv, prog = argv[:i], argv[i + 1:]
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "up":
            tb = Testbed(args.hosts, args.rails, args.rate, prefix=args.name, latency=args.latency,
                         mgmt_rate=args.mgmt_rate, persistent=True, spine=args.spine).setup()
            print(_describe(tb))
            return 0
        if args.cmd == "down":
            if _read_state(args.name) is None and not any(
                    _belongs(n, args.name) for n in _netns_names()):
                raise TestbedError("no testbed named %s" % args.name)
            errs = destroy_namespaces([n for n in _netns_names() if _belongs(n, args.name)])
            remove_logdirs(args.name)
            if os.path.exists(_state_path(args.name)):
                os.unlink(_state_path(args.name))
            for e in errs:
                print("testbed: %s" % e, file=sys.stderr)
            return 1 if errs else 0
        if args.cmd == "run":
            return _cmd_run(args, prog)
        if args.cmd == "fault":
            tb = Testbed.attach(args.name)
            faults = [parse_fault_spec(s) for s in args.spec]
            for kind, host, rail, at, fargs in faults:
                tb.check_fault(kind, host, rail, *fargs)
            for kind, host, rail, at, fargs in faults:
                tb.schedule(at, tb.fault, kind, host, rail, *fargs)
            tb.wait_faults(MAX_FAULT_SECONDS)
            for t, text in tb.events:
                print("testbed: t=%7.3fs %s" % (t, text))
            return 1 if any(text.startswith("error") for _, text in tb.events) else 0
        if args.cmd == "counters":
            print(format_counters(Testbed.attach(args.name).nic_counters()))
            return 0
        if args.cmd == "cleanup":
            removed, kept, errs = cleanup(include_live=args.all, only=args.name)
            print("testbed: removed %s; kept (owner running) %s"
                  % (" ".join(removed) or "none", " ".join(kept) or "none"))
            for e in errs:
                print("testbed: %s" % e, file=sys.stderr)
            return 1 if errs else 0
        if args.cmd == "list":
            for b in list_testbeds():
                print("%-12s hosts=%s rails=%s owner=%s %s" % (
                    b["prefix"], b["hosts"], b["rails"],
                    ("pid %d" % b["owner_pid"]) if b["owner_alive"] else "none",
                    " ".join(b["namespaces"])))
            return 0
        if args.cmd == "check":
            return _cmd_check()
    except (TestbedError, ValueError) as e:
        print("testbed: error: %s" % e, file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
