#!/usr/bin/env bash
# SPARe (sim/spare): the CLI mend-spare, the Python binding, and a small fast configuration of the
# SimGrid time-to-train simulator mend-spare-sim and of table2.py (the full study takes minutes:
# sim/spare/README.md).  The simulator's checks skip where it was not built (no SimGrid).
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-build}
CLI="$B/bin/mend-spare" SIM="$B/bin/mend-spare-sim"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
ok() { echo "ok $1"; }
nok() { echo "not ok $1: $2"; }
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }

# The CLI: the cyclic layout, one controller call, bad input refused with a message.
out=$("$CLI" layout -n 7 -r 3 2>&1)
[ "$(sed -n 1p <<<"$out")" = "0: 0 1 3" ] && [ "$(wc -l <<<"$out")" -eq 7 ] && ok cli_layout || nok cli_layout "$out"
out=$("$CLI" control -n 7 -r 3 --fail 1,2 2>&1)
grep -qx "outcome reorder" <<<"$out" && grep -qx "allreduce_stack 2" <<<"$out" && grep -qx "moves 1" <<<"$out" \
  && ok cli_control || nok cli_control "$out"
bad=0
for args in "control -n 7 -r 3 --fail 9" "control -n 0 -r 1" "layout -n 6 -r 3" "control -n 7 -r 3 -s 4" "frob -n 7 -r 3"; do
  # shellcheck disable=SC2086
  if "$CLI" $args > "$T/o" 2>&1; then bad=1; echo "accepted: $args"; fi
  grep -qE "WARN|must|usage" "$T/o" || { bad=1; echo "no message for: $args"; cat "$T/o"; }
done
[ $bad -eq 0 ] && ok cli_bad_input || nok cli_bad_input "see the log"
out=$("$CLI" bench -n 200 -r 8 --trials 2 2>&1)
grep -qE "bench N=200 r=8 trials=2: [1-9][0-9.]* failures endured" <<<"$out" && ok cli_bench || nok cli_bench "$out"

# The Python binding agrees with the phases: for every failed set of N = 7, r = 3, the least
# all-reduce stack is the least s that free() accepts, and control() keeps, reorders or restarts
# accordingly; bad input raises ValueError.
if MEND_BUILDDIR="$B" python3 - > "$T/py" 2>&1 <<'PY'
import sys
sys.path.insert(0, "sim/spare")
import spare
stk = spare.layout_cyclic(7, 3)
for mask in range(1 << 7):
    failed = {w for w in range(7) if mask >> w & 1}
    least = next((s for s in (1, 2, 3) if spare.free(stk, failed, s)), 0)
    assert spare.min_stack(stk, failed) == least, (failed, least)
    out = spare.control(stk, failed, 1)
    want = "keep" if spare.fixed(stk, failed, 1) else ("wipeout" if least == 0 else "reorder")
    assert out["outcome"] == want, (failed, out)
    if want == "reorder":
        assert out["s"] == least and spare.fixed(out["stacks"], failed, least), (failed, out)
for bad in (lambda: spare.control(stk, {7}), lambda: spare.fixed(stk, set(), 0),
            lambda: spare.layout_cyclic(6, 3), lambda: spare.fixed([[0, 0, 1]] * 7, set(), 1)):
    try:
        bad()
        sys.exit("bad input accepted")
    except ValueError as e:
        assert str(e), "empty message"
print("python ok")
PY
then ok python_binding; else nok python_binding "$(tail -3 "$T/py")"; fi

if [ ! -x "$SIM" ]; then
  echo "# skip: no $SIM (SimGrid not installed): the simulator's checks did not run"
  exit 0
fi
# No failures, no jitter: the time is exactly the steps and the checkpoints.
exact=1
for spec in "spare 3 1" "rep 3 3" "ckpt 1 1"; do
  read -r scheme r stacks <<<"$spec"
  o=$("$SIM" --scheme "$scheme" -n 50 -r "$r" --steps 200 --mtbf 1e12 --jitter 0 2>&1)
  want=$(python3 -c "print('%.1f' % (200 * ($stacks * 64 + 2) + $(field "$o" checkpoints) * 60))")
  if [ "$(field "$o" ttt)" != "$want" ] || [ "$(field "$o" failures)" != 0 ] || [ "$(field "$o" finished)" != 1 ]; then
    exact=0; echo "$scheme: want ttt=$want: $o"
  fi
done
[ $exact -eq 1 ] && ok sim_no_failures_exact || nok sim_no_failures_exact "see the log"
# Same trail, same result; another trail, another result.
a=$("$SIM" --scheme spare -n 100 -r 6 --steps 500 --seed 3) b=$("$SIM" --scheme spare -n 100 -r 6 --steps 500 --seed 3)
c=$("$SIM" --scheme spare -n 100 -r 6 --steps 500 --seed 4)
[ "$a" = "$b" ] && [ "$a" != "$c" ] && ok sim_deterministic || nok sim_deterministic "$a / $b / $c"
# SPARe masks most failures and computes about two stacks a step; replication computes r; with
# checkpoints alone every failure is a restart, and when failures go on during restarts (the
# default) the run keeps almost nothing.
s=$("$SIM" --scheme spare -n 100 -r 6 --steps 500 --seed 3) rep=$("$SIM" --scheme rep -n 100 -r 6 --steps 500 --seed 3)
ck=$("$SIM" --scheme ckpt -n 100 -r 1 --steps 500 --seed 3 --cap 5)
cks=$("$SIM" --scheme ckpt -n 100 -r 1 --steps 500 --seed 3 --cap 5 --restart-failures skip)
python3 - "$s" "$rep" "$ck" "$cks" > "$T/cmp" 2>&1 <<'PY'
import sys
s, rep, ck, cks = ({k: float(v) for k, v in (x.split("=") for x in line.split() if x.split("=")[0] != "scheme")}
                   for line in sys.argv[1:])
assert s["finished"] == 1 and rep["finished"] == 1, "unfinished"
assert s["failures"] > 20 and s["restarts"] < s["failures"] / 5, s
assert 1.5 < s["stacks_per_step"] < 3.0 and rep["stacks_per_step"] == 6, (s, rep)
assert s["ratio"] < rep["ratio"], (s["ratio"], rep["ratio"])
assert ck["finished"] == 0 and ck["steps_done"] < 50 and ck["restarts"] > 10, ck
assert cks["failures"] > 10 and cks["failures"] >= cks["restarts"] >= 0.5 * cks["failures"], cks
assert cks["steps_done"] > ck["steps_done"], (cks, ck)
PY
[ $? -eq 0 ] && ok sim_schemes_compare || nok sim_schemes_compare "$(tail -2 "$T/cmp")"
bad=0
for args in "--scheme frob -n 10" "--scheme spare -n 10 -r 1" "--scheme ckpt -n 10 -r 3" "--scheme rep -n 10 -r 11" \
            "--scheme spare -n 6 -r 3" "--scheme spare -n 10 -r 2 --jitter 2"; do
  # shellcheck disable=SC2086
  if "$SIM" $args > "$T/o" 2>&1; then bad=1; echo "accepted: $args"; fi
  grep -qE "WARN|must|usage|bad value" "$T/o" || { bad=1; echo "no message for: $args"; cat "$T/o"; }
done
[ $bad -eq 0 ] && ok sim_bad_args || nok sim_bad_args "see the log"
# table2.py end to end on a tiny configuration (plots with Debian's matplotlib where present).
PY3=/usr/bin/python3; [ -x $PY3 ] || PY3=python3
if $PY3 sim/spare/table2.py --builddir "$B" --quick --jobs 1 --out "$T/t2" > "$T/t2.log" 2>&1 \
   && grep -qE '^\| 40 \| 2 s \| [0-9.]+ \([23]\) \|' "$T/t2/table2.md" && [ -s "$T/t2/runs.csv" ] \
   && { ! $PY3 -c 'import matplotlib' 2>/dev/null || [ -s "$T/t2/ttt_vs_r.png" ]; }; then
  ok table2_quick
else
  nok table2_quick "$(tail -3 "$T/t2.log")"
fi
