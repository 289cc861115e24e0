#!/usr/bin/env bash
# Every collective of the engine across testbed hosts, results checked exactly: the test program
# build/tests/mh_colls (tests/integration/mh_colls.c) runs AllReduce, Broadcast, Reduce, AllGather,
# ReduceScatter, Send/Recv, AlltoAll, Gather and Scatter at 0 .. 65537 elements and a large count
# (2M elements, 8 MiB for AllReduce), several types, ops, roots and placements, and compares every
# element with a reference it computes from all ranks' inputs.
# Matrix: {2, 3} hosts x {1, 2} ranks per host x {2, 3, 4} rails, every NIC at 1gbit, over the
# resilient net (the default with several NICs), and 4 of them over the socket Net alone
# (MEND_RESILIENCE=0). For each configuration: one "ok" line per collective (all ranks passed
# it), every rank exited 0 in time, every rail of every host carried data both ways. Then a run with planted wrong results must
# fail for every collective. At the end: no namespace, root-namespace link or rank process is
# left behind.
# Exit: 0 pass, 1 fail, 77 skip (not root / no network namespaces).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/testlib.sh"
tb_require

B="${MEND_BUILDDIR:-${BUILDDIR:-$HERE/../../build}}"
PROG="$(cd "$B" 2>/dev/null && pwd)/tests/mh_colls"
if [ ! -x "$PROG" ]; then echo "not ok mh_colls built ($PROG missing)"; exit 1; fi
export LD_LIBRARY_PATH="$(dirname "$(dirname "$PROG")")/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MEND_BUILDDIR="$(dirname "$(dirname "$PROG")")"

NAME="mtc$$"
# hosts:ranks per host:rails:MEND_RESILIENCE (auto: the resilient net, on with 2+ NICs; 0: the
# socket Net alone)
CONFIGS="2:1:2:auto 2:2:2:auto 2:1:3:auto 2:2:3:auto 2:1:4:auto 2:2:4:auto
         3:1:2:auto 3:2:2:auto 3:1:3:auto 3:2:3:auto 3:1:4:auto 3:2:4:auto
         2:1:2:0 2:2:3:0 3:1:4:0 3:2:2:0"
LETTERS="a b c d e f g h i j k l m n o p z"   # testbed k of the matrix is $NAME plus letter k; z: planted
for l in $LETTERS; do tb_track "$NAME$l"; done
cd "$HERE" || exit 1
timeout -k 5 240 python3 - "$NAME" "$PROG" $CONFIGS <<'EOF'
import sys, time
from testbed import Testbed
from tbcheck import Checks, check_nothing_left, root_links

name, prog, configs = sys.argv[1], sys.argv[2], sys.argv[3:]
COLLS = ["AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "SendRecv", "AlltoAll",
         "Gather", "Scatter"]
LARGE = 2 << 20            # elements of the large count
MIN_RAIL_BYTES = 1 << 20   # every rail must carry at least this much each way
check = Checks()
fails = check.fails

links_before = root_links()
t_all = time.monotonic()
for k, spec in enumerate(configs):
    hosts, ppn, rails, resil = spec.split(":")
    hosts, ppn, rails = int(hosts), int(ppn), int(rails)
    tag = "h%dx%d_r%d%s" % (hosts, ppn, rails, "" if resil == "auto" else "_resilience" + resil)
    env = {"NCCL_DEBUG": "WARN"}
    if resil != "auto":
        env["MEND_RESILIENCE"] = resil
    t0 = time.monotonic()
    with Testbed(hosts, rails, rate="1gbit", prefix=name + chr(97 + k)) as tb:
        before = tb.nic_counters()
        res = tb.launch([prog, "--large", str(LARGE)], ranks_per_host=ppn, timeout=90, env=env)
        after = tb.nic_counters()
    n = hosts * ppn
    lines = {r.rank: (r.output or "").splitlines() for r in res.ranks}
    for coll in COLLS:
        bad = []
        for r in range(n):
            mine = [l for l in lines.get(r, []) if l.startswith("mh %s " % coll)]
            if len(mine) != 1 or not mine[0].startswith("mh %s ok " % coll):
                bad.append("rank %d: %s" % (r, mine[0] if mine else "no result line"))
        check(not bad, "mh_%s_%s" % (tag, coll), "; ".join(bad[:3]))
    codes = ["%d:%s/%d" % (r.rank, r.status, r.code) for r in res.ranks if r.code != 0]
    check(res.ok and not res.timed_out, "mh_%s_all_ranks_exit_0 (%.1f s)" % (tag, res.elapsed),
          "ranks %s, reason %s" % (codes, res.reason))
    if not res.ok:
        for r in res.ranks:
            for l in [l for l in lines.get(r.rank, []) if "FAIL" in l or "WARN" in l or "not ok" in l][:8]:
                print("    [%d] %s" % (r.rank, l))
    idle = ["h%d %s tx %d rx %d" % (h, nic, after[(h, nic)][0] - before[(h, nic)][0],
                                    after[(h, nic)][1] - before[(h, nic)][1])
            for h in range(hosts) for nic in ["rail%d" % x for x in range(rails)]
            if min(after[(h, nic)][0] - before[(h, nic)][0], after[(h, nic)][1] - before[(h, nic)][1]) < MIN_RAIL_BYTES]
    check(not idle, "mh_%s_every_rail_carried_data" % tag, ", ".join(idle))
    print("# %s: %.1f s with setup and teardown" % (tag, time.monotonic() - t0), flush=True)

# The same checks must fail when results are wrong: MH_PLANT=1 makes every rank corrupt one
# element of each collective's first non-empty result before comparing it.
with Testbed(2, 2, rate="1gbit", prefix=name + "z") as tb:
    res = tb.launch([prog, "--large", "4096"], ranks_per_host=1, timeout=60,
                    env={"MH_PLANT": "1", "NCCL_DEBUG": "WARN"})
seen = {c for r in res.ranks for l in (r.output or "").splitlines()
        for c in COLLS if l.startswith("mh %s FAIL " % c)}
check(not res.ok and seen == set(COLLS), "mh_planted_errors_caught_on_the_testbed",
      "exit codes %s, caught %s" % (res.codes, sorted(seen)))

check_nothing_left(check, "mh", name, links_before)
print("# %d configurations in %.1f s, %d checks failed" % (len(configs), time.monotonic() - t_all, len(fails)))
sys.exit(1 if fails else 0)
EOF
rc=$?
for l in $LETTERS; do tb_assert_gone "$NAME$l" > /dev/null || rc=1; done
tb_result "$rc"
