#!/usr/bin/env bash
# One-sided operations ride hot repair: 2 hosts x 2 rails at 1gbit, one rank per host, each rank puts
# 256 KiB with a signal into the next rank's window round after round (build/tests/test_onesided in
# its testbed rank mode: every round checked exactly, an AllReduce between rounds), and the link of
# host 1's first NIC goes down 1.5 s in.  Pass: every rank exits 0 with every round exact, the job
# ran on for at least 1 s after the fault, and the resilient net reported the failure and the
# resumption.  At the end
# no namespace of ours is left.  Exit: 0 pass, 1 fail, 77 skip (not root / no network namespaces).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/testlib.sh"
tb_require

B="${MEND_BUILDDIR:-${BUILDDIR:-$HERE/../../build}}"
B="$(cd "$B" 2>/dev/null && pwd)"
PROG="$B/tests/test_onesided"
if [ ! -x "$PROG" ]; then echo "not ok onesided_repair: test_onesided built ($PROG missing)"; exit 1; fi
NAME="${MEND_TB_PREFIX:-mto$(($$ % 100000))}"
tb_track "$NAME"
cd "$HERE" || exit 1
timeout -k 5 150 python3 - "$NAME" "$PROG" "$B" <<'PYEOF'
import glob, os, re, shutil, sys, tempfile, time
from testbed import Testbed

name, prog, builddir = sys.argv[1:4]
logdir = tempfile.mkdtemp(prefix="mend-onesided-")
env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "RESIL", "NCCL_DEBUG_FILE": os.path.join(logdir, "mend.%p"),
       "LD_LIBRARY_PATH": os.path.join(builddir, "lib"), "OS_ROUNDS": os.environ.get("OS_ROUNDS", "1600")}
fails = 0
def check(ok, what, detail=""):
    global fails
    print(("ok " if ok else "not ok ") + "onesided_repair: " + what + ("" if ok or not detail else " (" + detail + ")"))
    fails += 0 if ok else 1
try:
    with Testbed(2, 2, rate="1gbit", prefix=name) as tb:
        job = tb.start([prog], ranks_per_host=1, env=env, timeout=100)
        t0 = time.monotonic()
        tb.schedule(1.5, tb.fault, "link_down", 1, 0)
        res = job.wait()
        t_end = time.monotonic()
    outs = [r.output or "" for r in res.ranks]
    exact = [re.search(r"onesided rank \d+: \d+ rounds exact", o) for o in outs]
    check(res.ok and all(exact), "every rank exact, exit 0",
          "; ".join("rank %d exit %s: %s" % (r.rank, r.code, (r.output or "")[-300:].replace("\n", " | "))
                    for r in res.ranks))
    check(t_end - t0 - 1.5 >= 1.0, "the job ran on after the fault (%.1f s after it)" % (t_end - t0 - 1.5),
          "raise OS_ROUNDS so the fault lands inside running puts")
    log = "".join(open(f, errors="replace").read() for f in glob.glob(os.path.join(logdir, "mend.*")))
    check(re.search(r"MEND_EVENT .*kind=detect", log) is not None, "the resilient net detected the failure",
          "no MEND_EVENT kind=detect line in the ranks' logs")
    check(re.search(r"MEND_EVENT .*kind=resume", log) is not None, "traffic resumed on the other NIC",
          "no MEND_EVENT kind=resume line in the ranks' logs")
finally:
    shutil.rmtree(logdir, ignore_errors=True)
sys.exit(1 if fails else 0)
PYEOF
rc=$?
[ "$rc" = 124 ] && echo "not ok onesided_repair: finished within 150 s"
if tb_exists "$NAME"; then echo "not ok onesided_repair: no namespace left behind"; exit 1; fi
echo "ok onesided_repair: no namespace left behind"
exit "$rc"
