#!/usr/bin/env bash
# Runs every fuzz target of $BUILDDIR/fuzz (make fuzz) for a bounded time and prints one line per
# target, "ok fuzz_<name>: ..." or "not ok fuzz_<name>: ...", as tests/run.sh counts them.
#   tests/fuzz/run.sh SECONDS [TARGET...]      (default: every target, SECONDS each)
# A target fails on a crash, a sanitizer report (ASan, UBSan, LeakSanitizer), an input that runs past
# MEND_FUZZ_INPUT_TIMEOUT seconds (default 10), or memory past MEND_FUZZ_RSS_MB (default 2048).
# Each target starts from the seeds it writes itself and the inputs in tests/fuzz/regress/<target>/
# (earlier findings, replayed every run); its corpus grows in $BUILDDIR/fuzz/corpus/<target>/ (kept
# between runs) and a failing input is saved in $BUILDDIR/fuzz/artifacts/<target>/ and named in the line.
set -u
cd "$(dirname "$0")/../.."
secs=${1:-}
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
  echo "usage: $0 SECONDS [TARGET...]" >&2
  exit 2
fi
shift
BUILDDIR=${BUILDDIR:-build}
FUZZDIR="$BUILDDIR/fuzz"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for t in tests/fuzz/fuzz_*.c; do targets+=("$(basename "$t" .c)"); done
fi
# Log lines (WARN and INFO, every subsystem) are formatted as in a real run, and thrown away.
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALL NCCL_DEBUG_FILE=/dev/null
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# Built without clang (make fuzz says why): nothing to run, the targets count as skipped.
if ! ls "$FUZZDIR"/fuzz_* >/dev/null 2>&1 && ! command -v "${FUZZ_CC:-clang}" >/dev/null 2>&1; then
  echo "# skip: no fuzz targets in $FUZZDIR and no clang to build them (bash .ci/install-deps)"
  exit 77
fi
failed=0
for t in "${targets[@]}"; do
  bin="$FUZZDIR/$t"
  if [ ! -x "$bin" ]; then
    echo "not ok $t: $bin is not built (make fuzz)"
    failed=1
    continue
  fi
  corpus="$FUZZDIR/corpus/$t" art="$FUZZDIR/artifacts/$t" seeds="$FUZZDIR/seeds/$t" log="$FUZZDIR/$t.log"
  rm -rf "$seeds" "$art"
  mkdir -p "$corpus" "$art" "$seeds"
  dirs=("$corpus" "$seeds")
  [ -d "tests/fuzz/regress/$t" ] && dirs+=("tests/fuzz/regress/$t")
  start=$SECONDS
  # The wall-clock bound covers a target that hangs outside libFuzzer's own timers.
  MEND_FUZZ_SEED_DIR="$seeds" timeout -k 5 $((secs + 60)) "$bin" -max_total_time="$secs" \
    -timeout="${MEND_FUZZ_INPUT_TIMEOUT:-10}" -rss_limit_mb="${MEND_FUZZ_RSS_MB:-2048}" -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$art/" "${dirs[@]}" > "$log" 2>&1
  rc=$?
  runs=$(grep -m1 -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
  found=$(ls "$art" 2>/dev/null | head -1)
  if [ $rc -eq 0 ] && [ -z "$found" ]; then
    echo "ok $t: ${runs:-?} inputs in $((SECONDS - start)) s, corpus $(ls "$corpus" | wc -l)"
  else
    why=$(grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|SUMMARY' "$log")
    echo "not ok $t: exit $rc${found:+, input $art/$found}: ${why:-see $log}"
    failed=1
  fi
done
exit $failed
