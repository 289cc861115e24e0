"""Fault injection for the testbed: real kernel events on one NIC, link or switch port.

| kind        | done where                          | what the host sees                        |
|-------------|-------------------------------------|-------------------------------------------|
| nic_down    | host ns: ip link set <nic> down     | NIC admin down, operstate DOWN            |
| link_down   | switch ns: ip link set <port> down  | NIC up but NO-CARRIER, operstate DOWN     |
| blackhole   | switch ns: bridge port state 0      | nothing: NIC UP, carrier on, frames lost  |
| flap        | repeated link_down/up (or nic, bh)  | carrier going away and back               |
| rate        | tc tbf rate on both ends of a link  | lower throughput, no event                |

Mixed into Testbed; FAULT_KINDS and parse_fault_spec serve the CLI and launchers.
"""
import threading
import time

from tbutil import _run, parse_rate

MIN_FLAP_MS = 20          # each toggle forks one `ip`; faster is not meaningful
MAX_FAULT_SECONDS = 3600  # bound on any background fault thread

FAULT_KINDS = {
    "nic_down": "host-side NIC admin down; optional arg: seconds until nic_up",
    "nic_up": "undo nic_down",
    "link_down": "switch-side port down (carrier loss at the host); optional arg: seconds until link_up",
    "link_up": "undo link_down",
    "blackhole": "bridge port state 0: frames silently dropped; optional arg: seconds until unblackhole",
    "unblackhole": "bridge port state 3 (forwarding)",
    "flap": "args: period_ms seconds [link|nic|blackhole]: toggle every period_ms for seconds",
    "rate": "args: rate [seconds]: set tbf rate on both ends (e.g. 100mbit), restore after seconds",
}
_RESTORE = {"nic_down": "nic_up", "link_down": "link_up", "blackhole": "unblackhole"}


def parse_fault_spec(text):
    """'KIND:host:rail:at_seconds[:arg...]' -> (kind, host, rail, at, [args]); rail may be 'mgmt'."""
    parts = str(text).split(":")
    if len(parts) < 4 or parts[0] not in FAULT_KINDS:
        raise ValueError("bad fault %r: want KIND:host:rail:at_seconds[:arg...], KIND one of %s"
                         % (text, ", ".join(FAULT_KINDS)))
    kind, host, rail, at, args = parts[0], parts[1], parts[2], parts[3], parts[4:]
    try:
        host = int(host)
        rail = rail if rail == "mgmt" else int(rail)
        at = float(at)
    except ValueError:
        raise ValueError("bad fault %r: host and rail must be integers (rail may be 'mgmt'), "
                         "at_seconds a number" % (text,))
    if not 0 <= at <= MAX_FAULT_SECONDS:
        raise ValueError("bad fault %r: at_seconds must be in 0..%d" % (text, MAX_FAULT_SECONDS))
    return kind, host, rail, at, args


def _seconds(text, kind):
    try:
        s = float(text)
    except (TypeError, ValueError):
        s = -1.0
    if not 0 <= s <= MAX_FAULT_SECONDS:
        raise ValueError("%s: duration must be seconds in 0..%d, got %r" % (kind, MAX_FAULT_SECONDS, text))
    return s


def _check_flap(period_ms, seconds, how):
    if how not in ("link", "nic", "blackhole"):
        raise ValueError("flap how must be link, nic or blackhole, got %r" % (how,))
    if not MIN_FLAP_MS <= period_ms <= 60000:
        raise ValueError("flap period must be in %d..60000 ms, got %r" % (MIN_FLAP_MS, period_ms))
    if not 0 < seconds <= MAX_FAULT_SECONDS:
        raise ValueError("flap seconds must be in (0, %d], got %r" % (MAX_FAULT_SECONDS, seconds))


class Flap:
    """A bounded background thread toggling one link down/up every period."""

    def __init__(self, down, up, period_ms, seconds, label, log):
        self.down, self.up, self.log = down, up, log
        self.period = period_ms / 1000.0      # seconds between toggles
        self.seconds = seconds                # total duration
        self.label = label                    # for the event log
        self.toggles = 0                      # state changes made
        self.errors = []                      # exceptions raised by a toggle
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._body, name="flap " + label, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _body(self):
        is_up = True
        start = time.monotonic()
        end = start + self.seconds
        nxt = start
        try:
            while not self._stop.is_set() and time.monotonic() < end:
                (self.down if is_up else self.up)()
                is_up = not is_up
                self.toggles += 1
                nxt += self.period
                self._stop.wait(max(0.0, nxt - time.monotonic()))
        except Exception as e:
            self.errors.append(str(e))
        finally:
            if not is_up:          # always leave the link up
                try:
                    self.up()
                    self.toggles += 1
                except Exception as e:
                    self.errors.append(str(e))
            self.log("flap %s done: %d toggles%s" % (
                self.label, self.toggles, (", errors: %s" % self.errors) if self.errors else ""))

    def stop(self):
        self._stop.set()

    def join(self, timeout=None):
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def is_alive(self):
        return self._thread.is_alive()


class FaultsMixin:
    """Fault methods of Testbed. host: index; rail: index or 'mgmt'."""

    def _where(self, host, rail):
        return "h%d %s" % (self._host(host), self.nic(rail))

    def nic_down(self, host, rail):
        """Host side `ip link set <nic> down`: the host sees its own NIC go down."""
        _run(["ip", "-n", self.host_ns(host), "link", "set", "dev", self.nic(rail), "down"])
        self.log_event("nic_down %s" % self._where(host, rail))

    def nic_up(self, host, rail):
        _run(["ip", "-n", self.host_ns(host), "link", "set", "dev", self.nic(rail), "up"])
        self.log_event("nic_up %s" % self._where(host, rail))

    def link_down(self, host, rail):
        """Switch-side port down: the host NIC stays admin up but loses carrier."""
        _run(["ip", "-n", self.switch_ns, "link", "set", "dev", self.switch_port(host, rail), "down"])
        self.log_event("link_down %s" % self._where(host, rail))

    def link_up(self, host, rail):
        _run(["ip", "-n", self.switch_ns, "link", "set", "dev", self.switch_port(host, rail), "up"])
        self.log_event("link_up %s" % self._where(host, rail))

    def blackhole(self, host, rail):
        """Bridge port disabled: frames to and from the host vanish, no event at either host."""
        _run(["bridge", "-n", self.switch_ns, "link", "set", "dev", self.switch_port(host, rail),
              "state", "0"])
        self.log_event("blackhole %s" % self._where(host, rail))

    def unblackhole(self, host, rail):
        _run(["bridge", "-n", self.switch_ns, "link", "set", "dev", self.switch_port(host, rail),
              "state", "3"])
        self.log_event("unblackhole %s" % self._where(host, rail))

    def set_rate(self, host, rail, rate):
        """tbf rate on both directions of the link (None removes shaping)."""
        bits = parse_rate(rate) if rate is not None else None
        self._shape(host, rail, bits)
        self.log_event("rate %s %s" % (self._where(host, rail),
                                       "%dbit" % bits if bits else "unlimited"))

    def flap(self, host, rail, period_ms, seconds, how="link"):
        """Toggle down/up every period_ms for `seconds` in a background thread; ends up.
        how: 'link' (carrier, default), 'nic' (host admin state) or 'blackhole'. Returns a Flap."""
        _check_flap(period_ms, seconds, how)
        where = self._where(host, rail)
        down, up = {"link": (self.link_down, self.link_up), "nic": (self.nic_down, self.nic_up),
                    "blackhole": (self.blackhole, self.unblackhole)}[how]
        fl = Flap(lambda: down(host, rail), lambda: up(host, rail), period_ms, seconds,
                  "%s %s every %dms for %gs" % (how, where, period_ms, seconds), self.log_event)
        self._flaps.append(fl)
        self.log_event("flap start %s" % fl.label)
        return fl.start()

    def fault(self, kind, host, rail, *args):
        """Apply a fault by name (see FAULT_KINDS); args are strings or numbers.
        Returns the Flap for 'flap', else None."""
        return self._prepare_fault(kind, host, rail, args)()

    def check_fault(self, kind, host, rail, *args):
        """Raise ValueError if fault(kind, host, rail, *args) would be refused; applies nothing."""
        self._prepare_fault(kind, host, rail, args)

    def _prepare_fault(self, kind, host, rail, args):
        """Validate everything up front; return a callable that applies the fault."""
        if kind not in FAULT_KINDS:
            raise ValueError("unknown fault %r (one of %s)" % (kind, ", ".join(FAULT_KINDS)))
        self._where(host, rail)
        if kind in _RESTORE:
            if len(args) > 1:
                raise ValueError("%s takes at most one arg (seconds until restore)" % kind)
            after = _seconds(args[0], kind) if args else None

            def apply():
                getattr(self, kind)(host, rail)
                if after is not None:
                    self.schedule(after, getattr(self, _RESTORE[kind]), host, rail)
            return apply
        if kind in ("nic_up", "link_up", "unblackhole"):
            if args:
                raise ValueError("%s takes no args" % kind)
            return lambda: getattr(self, kind)(host, rail)
        if kind == "flap":
            if not 2 <= len(args) <= 3:
                raise ValueError("flap needs args period_ms:seconds[:link|nic|blackhole]")
            try:
                period_ms, seconds = int(args[0]), float(args[1])
            except ValueError:
                raise ValueError("flap args must be period_ms (integer) and seconds, got %s"
                                 % (list(args),))
            how = str(args[2]) if len(args) > 2 else "link"
            _check_flap(period_ms, seconds, how)
            return lambda: self.flap(host, rail, period_ms, seconds, how)
        if not 1 <= len(args) <= 2:
            raise ValueError("rate needs args rate[:seconds]")
        parse_rate(args[0])
        after = _seconds(args[1], kind) if len(args) > 1 else None
        orig = self.mgmt_rate if rail == "mgmt" else self.rate

        def apply_rate():
            self.set_rate(host, rail, args[0])
            if after is not None:
                self.schedule(after, self.set_rate, host, rail, orig)
        return apply_rate

    def wait_faults(self, timeout):
        """Wait (bounded) until every scheduled fault fired and every flap ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            busy = [t for t in self._timers if t.is_alive()] + [f for f in self._flaps if f.is_alive()]
            if not busy:
                return True
            time.sleep(0.02)
        return False
