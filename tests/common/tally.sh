# Shared by tests/run.sh and tests/gpu/run.sh (sourced): the library check and the counting of a
# test program's outcome.  The caller declares pass, fail, skip, note and failed_names.
#   check_mend_lib LIB    exit with "tests: 0 passed, 1 failed" unless LIB is Mend's library
#   count_output NAME LOG RC
#     lines "ok <name>" / "not ok <name>" count one test each; without such lines, exit 0 passes,
#     77 skips (the first "# skip" line of the log becomes the note), anything else fails.

check_mend_lib() {
  if ! grep -a -q 'MEND_LIBRARY_BANNER' "$1" 2>/dev/null; then
    echo "FATAL: $1 is not Mend's library"; echo "tests: 0 passed, 1 failed"; exit 1
  fi
}

count_output() {
  local name=$1 log=$2 rc=$3 p f
  p=$(grep -cE '^ok ' "$log"); f=$(grep -cE '^not ok ' "$log")
  if [ "$p" -gt 0 ] || [ "$f" -gt 0 ]; then
    pass=$((pass + p)); fail=$((fail + f))
    [ "$f" -gt 0 ] && failed_names+=("$name: $(grep -E '^not ok ' "$log" | head -5 | tr '\n' ' ')")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then fail=$((fail + 1)); failed_names+=("$name (exit $rc)"); fi
  elif [ "$rc" -eq 0 ]; then pass=$((pass + 1))
  elif [ "$rc" -eq 77 ]; then skip=$((skip + 1)); note=" skipped: $(grep -m1 '^# skip' "$log" | cut -c3-)"
  else fail=$((fail + 1)); failed_names+=("$name (exit $rc)"); fi
}
