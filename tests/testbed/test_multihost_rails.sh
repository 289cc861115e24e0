#!/usr/bin/env bash
# Every rail carries its share of a large AllReduce, data goes over the rails and bootstrap over
# management. all_reduce_perf (64 MiB, -c 1: every element checked) runs on 2 hosts x 2 rails
# (2 ranks per host), 2 hosts x 4 rails and 3 hosts x 3 rails (1 rank per host), every NIC at
# 1gbit, over the resilient net (the default), and 2 x 2 again over the socket Net alone
# (MEND_RESILIENCE=0); the per-NIC byte counters of the job must show, on every host:
#  - each rail's tx and rx within 20% of the even split (the mean over that host's rails);
#  - the rails together sending at least the AllReduce lower bound, 2 S (H-1)/H bytes per call
#    (S bytes, H hosts; intra-host traffic is free), for the calls the tool makes;
#  - management traffic present (bootstrap) but under 1% of the rail traffic.
# Then nothing is left behind: no namespace, no testbed link in the root namespace, no rank.
# Exit: 0 pass, 1 fail, 77 skip (not root / no network namespaces).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/testlib.sh"
tb_require

B="$(cd "${MEND_BUILDDIR:-${BUILDDIR:-$HERE/../../build}}" 2>/dev/null && pwd)"
PROG="$B/bin/all_reduce_perf"
if [ ! -x "$PROG" ]; then echo "not ok all_reduce_perf built ($PROG missing)"; exit 1; fi
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

NAME="mtr$$"
LETTERS="a b c d"   # testbed k is $NAME plus letter k
for l in $LETTERS; do tb_track "$NAME$l"; done
cd "$HERE" || exit 1
timeout -k 5 150 python3 - "$NAME" "$PROG" <<'EOF'
import sys, time
from testbed import Testbed
from tbcheck import Checks, check_nothing_left, root_links

name, prog = sys.argv[1], sys.argv[2]
# hosts, rails, ranks per host, MEND_RESILIENCE (None: default, the resilient net with 2+ NICs)
CONFIGS = [(2, 2, 2, None), (2, 4, 1, None), (3, 3, 1, None), (2, 2, 2, "0")]
SIZE, ITERS, WARMUP = 64 << 20, 3, 1
SHARE_TOL, MGMT_MAX = 0.20, 0.01
check = Checks()
fails = check.fails

def spread(values):
    mean = sum(values) / len(values)
    return max(abs(v - mean) / mean for v in values) if mean > 0 else float("inf")

links_before = root_links()
for k, (hosts, rails, ppn, resil) in enumerate(CONFIGS):
    tag = "h%dx%d_r%d%s" % (hosts, ppn, rails, "_resilience" + resil if resil else "")
    t0 = time.monotonic()
    with Testbed(hosts, rails, rate="1gbit", prefix=name + chr(97 + k)) as tb:
        before = tb.nic_counters()
        res = tb.launch([prog, "-b", str(SIZE), "-e", str(SIZE), "-c", "1", "-n", str(ITERS),
                         "-w", str(WARMUP)], ranks_per_host=ppn, timeout=120,
                        env={"MEND_RESILIENCE": resil} if resil else None)
        after = tb.nic_counters()
    out0 = next((r.output or "" for r in res.ranks if r.rank == 0), "")
    check(res.ok and "# Out of bounds values : 0 OK" in out0,
          "rails_%s_allreduce_64MiB_correct (%.1f s)" % (tag, res.elapsed),
          "codes %s, reason %s; rank 0 said: %s" % (res.codes, res.reason, " | ".join(out0.splitlines()[-6:])))
    d = {key: (after[key][0] - before[key][0], after[key][1] - before[key][1]) for key in after}
    # Calls: warm-up + timed iterations, out of place and in place, plus at least one checked call.
    calls = 2 * (WARMUP + ITERS) + 1
    bound = calls * 2 * SIZE * (hosts - 1) / hosts
    for h in range(hosts):
        tx = [d[(h, "rail%d" % r)][0] for r in range(rails)]
        rx = [d[(h, "rail%d" % r)][1] for r in range(rails)]
        mg = d[(h, "mgmt0")]
        check(spread(tx) <= SHARE_TOL and spread(rx) <= SHARE_TOL,
              "rails_%s_h%d_even_split (worst %.1f%% off)" % (tag, h, 100 * max(spread(tx), spread(rx))),
              "tx %s rx %s" % (tx, rx))
        check(sum(tx) >= bound and sum(rx) >= bound,
              "rails_%s_h%d_data_on_rails (%.0f MB >= %.0f MB)" % (tag, h, min(sum(tx), sum(rx)) / 1e6, bound / 1e6),
              "tx %s rx %s" % (tx, rx))
        check(0 < mg[0] + mg[1] < MGMT_MAX * (sum(tx) + sum(rx)),
              "rails_%s_h%d_bootstrap_on_mgmt (%d B mgmt)" % (tag, h, mg[0] + mg[1]),
              "mgmt tx %d rx %d, rails %d" % (mg[0], mg[1], sum(tx) + sum(rx)))
    print("# %s: %.1f s with setup and teardown" % (tag, time.monotonic() - t0), flush=True)

check_nothing_left(check, "rails", name, links_before)
print("%d checks failed" % len(fails))
sys.exit(1 if fails else 0)
EOF
rc=$?
for l in $LETTERS; do tb_assert_gone "$NAME$l" > /dev/null || rc=1; done
tb_result "$rc"
