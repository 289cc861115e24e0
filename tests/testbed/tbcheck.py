"""Checks shared by the testbed's multi-host tests (test_multihost_*.sh).

Result lines "ok NAME" / "not ok NAME: detail" as tests/run.sh counts them, and the end-of-run
check that a test's testbeds (named <prefix><letter>) left no namespace, no rank process and no
testbed link in the root namespace.  Standard library only; every command is bounded in time.
"""
import os
import re
import subprocess
import time

CMD_TIMEOUT = 15.0  # bound on one ip command

# Links named like testbed links; all are made inside namespaces, never in the root namespace.
TB_LINK = re.compile(r"^(rail\d+|mgmt\d+|h\d+r\d+|h\d+m|br-rail\d+|br-mgmt)$")


class Checks:
    """Prints one result line per check and keeps the names of the failed ones in `fails`."""

    def __init__(self):
        self.fails = []

    def __call__(self, ok, what, detail=""):
        print(("ok " if ok else "not ok ") + what + ("" if ok or not detail else ": " + detail), flush=True)
        if not ok:
            self.fails.append(what)


def _ip(*args):
    return subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=CMD_TIMEOUT).stdout


def root_links():
    """Links in the root namespace named like testbed links."""
    names = {l.split(":")[1].strip().split("@")[0] for l in _ip("-o", "link", "show").splitlines() if ":" in l}
    return {n for n in names if TB_LINK.match(n)}


def our_namespaces(prefix):
    """Namespaces whose name starts with `prefix`."""
    return [l.split()[0] for l in _ip("netns", "list").splitlines() if l.startswith(prefix)]


def our_processes(prefix):
    """Processes whose environment says they belong to one of our testbeds (MEND_TESTBED=<prefix><letter>)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read()
        except OSError:
            continue
        if re.search(rb"(^|\0)MEND_TESTBED=" + re.escape(prefix.encode()) + rb"[a-z]\0", env):
            found.append(int(pid))
    return found


def check_nothing_left(check, test, prefix, links_before):
    """<test>_nothing_left_behind and <test>_no_link_left_in_root_namespace for testbeds named
    <prefix><letter>; `links_before` is root_links() from before the first testbed."""
    time.sleep(0.2)
    left_ns, left_procs = our_namespaces(prefix), our_processes(prefix)
    new_links = sorted(root_links() - links_before)
    check(not left_ns and not left_procs, test + "_nothing_left_behind",
          "namespaces %s, processes %s" % (left_ns, left_procs))
    check(not new_links, test + "_no_link_left_in_root_namespace", "new links %s" % new_links)
