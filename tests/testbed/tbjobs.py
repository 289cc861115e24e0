"""Jobs: N ranks per host started in the host namespaces, watched, stopped and collected.

A Job is made by Testbed.start(). Each rank is `ip netns exec <host ns> [setpriv --pdeathsig
KILL --] argv...` in its own session (process group), with stdout (and stderr, merged by
default) written to a file in the testbed's log folder. Stopping a job sends SIGTERM to every
rank's process group, SIGKILL after KILL_GRACE, and then SIGKILL to any process in the host
namespaces whose environment carries this job's MEND_TESTBED_JOB tag (children that left the
process group). Every wait is bounded by the job's timeout.
"""
import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time

from tbutil import _kill_pids, netns_pids

KILL_GRACE = 1.0         # SIGTERM -> SIGKILL delay
FAIL_FAST_GRACE = 2.0    # with fail_fast: time the other ranks get after a rank fails
REAP_TIMEOUT = 5.0       # bound on reaping one killed rank


def exit_code(returncode, status):
    """Shell-style code of one rank: 124 for a timeout, 128+N for death by signal N."""
    if status == "timeout":
        return 124
    if returncode is None:
        return 125
    if returncode < 0:
        return 128 - returncode
    return returncode


class RankResult:
    """What one rank did."""

    def __init__(self, rank, host, local_rank, pid, returncode, status, output, stderr,
                 output_path):
        self.rank = rank                  # global rank, host-major
        self.host = host                  # host index
        self.local_rank = local_rank      # rank within its host
        self.pid = pid                    # process id (in the root pid namespace)
        self.returncode = returncode      # Popen code: <0 means killed by that signal
        self.status = status              # 'ok', 'failed', 'timeout', or 'killed' (fail-fast/teardown)
        self.output = output              # stdout (+ stderr when merged) as text
        self.stderr = stderr              # stderr as text when not merged, else ''
        self.output_path = output_path    # file the output was written to (kept with keep_logs)

    @property
    def code(self):
        return exit_code(self.returncode, self.status)

    def __repr__(self):
        return "RankResult(rank=%d, host=%d, status=%s, code=%d)" % (
            self.rank, self.host, self.status, self.code)


class LaunchResult:
    """What a job did: per-rank results plus why it ended."""

    def __init__(self, ranks, elapsed, reason, port, tag):
        self.ranks = ranks                # [RankResult] ordered by rank
        self.elapsed = elapsed            # seconds from start to end
        self.reason = reason              # None (all exited), 'timeout', 'failure', 'teardown'
        self.port = port                  # NCCL_COMM_ID port used
        self.tag = tag                    # MEND_TESTBED_JOB value

    @property
    def timed_out(self):
        return self.reason == "timeout"

    @property
    def codes(self):
        return [r.code for r in self.ranks]

    @property
    def worst_code(self):
        return max(self.codes) if self.ranks else 125

    @property
    def ok(self):
        return self.worst_code == 0


class _Rank:
    """Bookkeeping for one running rank."""

    def __init__(self, rank, host, local_rank, proc, out_path, err_path):
        self.rank = rank
        self.host = host
        self.local_rank = local_rank
        self.proc = proc              # Popen of `ip netns exec ...` (it execs the program)
        self.out_path = out_path
        self.err_path = err_path      # None when stderr is merged into out_path
        self.killed = None            # reason this rank was stopped by us, if it was


class Job:
    """A running set of ranks. Use wait(), poll() or kill(); see Testbed.start()."""

    def __init__(self, tb, argv, ranks_per_host, env, timeout, port, cwd, merge_stderr,
                 fail_fast, die_with_parent, tag):
        self.tb = tb
        self.argv = [str(a) for a in argv]
        self.ranks_per_host = ranks_per_host
        self.user_env = env
        self.timeout = float(timeout)
        self.port = port
        self.cwd = cwd
        self.merge_stderr = merge_stderr
        self.fail_fast = fail_fast
        self.die_with_parent = die_with_parent
        self.tag = tag
        self.result = None            # LaunchResult once the job ended
        self._ranks = []
        self._lock = threading.RLock()
        self._fail_at = None          # fail-fast kill time once a rank failed
        self.t_start = None
        self.deadline = None

    def _env(self, host, local_rank):
        env = dict(os.environ)
        env.update(self.tb.rank_env(host, local_rank, self.ranks_per_host, self.port, self.tag))
        for k, v in self.user_env.items():
            if v is None:
                env.pop(k, None)
            else:
                env[str(k)] = str(v)
        return env

    def start(self):
        self.t_start = time.monotonic()
        self.deadline = self.t_start + self.timeout
        pre = []
        if self.die_with_parent and shutil.which("setpriv"):
            pre = ["setpriv", "--pdeathsig", "KILL", "--"]
        try:
            for h in range(self.tb.hosts):
                for l in range(self.ranks_per_host):
                    self._start_rank(h, l, pre)
        except BaseException:
            self.kill("teardown")
            raise
        self.tb.log_event("job %s: %d ranks started: %s"
                          % (self.tag, len(self._ranks), " ".join(self.argv)))
        return self

    def _start_rank(self, host, local_rank, pre):
        rank = host * self.ranks_per_host + local_rank
        base = os.path.join(self.tb.logdir, "%s.rank%d" % (self.tag, rank))
        out_path, err_path = base + ".out", (None if self.merge_stderr else base + ".err")
        with open(out_path, "wb") as out, \
                (open(err_path, "wb") if err_path else contextlib.nullcontext()) as err:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", self.tb.host_ns(host)] + pre + self.argv,
                stdin=subprocess.DEVNULL, stdout=out,
                stderr=err if err_path else subprocess.STDOUT,
                env=self._env(host, local_rank), cwd=self.cwd, start_new_session=True)
        self._ranks.append(_Rank(rank, host, local_rank, proc, out_path, err_path))

    # ---- watching
    def _check(self):
        """One pass: reap, apply timeout and fail-fast; True once the job has ended."""
        with self._lock:
            if self.result is not None:
                return True
            now = time.monotonic()
            running = [r for r in self._ranks if r.proc.poll() is None]
            if not running:
                self._finish(None)
                return True
            if self.fail_fast and self._fail_at is None and any(
                    r.proc.returncode not in (None, 0) for r in self._ranks):
                self._fail_at = now + FAIL_FAST_GRACE
            if now >= self.deadline:
                self.kill("timeout")
                return True
            if self._fail_at is not None and now >= self._fail_at:
                self.kill("failure")
                return True
            return False

    def poll(self):
        """LaunchResult if the job has ended (stopping it if past its timeout), else None."""
        return self.result if self._check() else None

    def wait(self, timeout=None):
        """Wait for the end of the job (at most its own timeout, then it is killed).
        With `timeout`, give up after that many seconds and return None if still running."""
        limit = None if timeout is None else time.monotonic() + timeout
        while not self._check():
            if limit is not None and time.monotonic() >= limit:
                return None
            time.sleep(0.02)
        return self.result

    @property
    def pids(self):
        return [r.proc.pid for r in self._ranks]

    # ---- stopping
    def kill(self, reason="killed"):
        """Stop every rank (TERM, then KILL), and tagged stragglers; returns the LaunchResult."""
        with self._lock:
            if self.result is not None:
                return self.result
            running = [r for r in self._ranks if r.proc.poll() is None]
            for r in running:
                r.killed = reason
                _killpg(r.proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + KILL_GRACE
            while time.monotonic() < deadline and any(r.proc.poll() is None for r in running):
                time.sleep(0.02)
            for r in running:
                _killpg(r.proc.pid, signal.SIGKILL)
            self._kill_tagged()
            for r in self._ranks:
                try:
                    r.proc.wait(REAP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    pass
            self._finish(reason)
            return self.result

    def _kill_tagged(self):
        """SIGKILL processes of this job that left its process groups (found by env tag)."""
        needle = b"\0MEND_TESTBED_JOB=" + self.tag.encode() + b"\0"
        hosts = [self.tb.host_ns(h) for h in range(self.tb.hosts)]
        victims = []
        for pids in netns_pids(hosts).values():
            for pid in pids:
                try:
                    with open("/proc/%d/environ" % pid, "rb") as f:
                        if needle in b"\0" + f.read():
                            victims.append(pid)
                except OSError:
                    pass
        if victims:
            _kill_pids(victims, signal.SIGKILL, wait=REAP_TIMEOUT)

    def _finish(self, reason):
        results = []
        for r in sorted(self._ranks, key=lambda x: x.rank):
            rc = r.proc.returncode
            if r.killed == "timeout":
                status = "timeout"
            elif r.killed:
                status = "killed"
            else:
                status = "ok" if rc == 0 else "failed"
            results.append(RankResult(r.rank, r.host, r.local_rank, r.proc.pid, rc, status,
                                      _read_text(r.out_path),
                                      _read_text(r.err_path) if r.err_path else "", r.out_path))
        elapsed = time.monotonic() - self.t_start if self.t_start else 0.0
        self.result = LaunchResult(results, elapsed, reason, self.port, self.tag)
        self.tb.log_event("job %s ended after %.2fs (%s), worst exit code %d"
                          % (self.tag, elapsed, reason or "all exited", self.result.worst_code))


def _killpg(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
