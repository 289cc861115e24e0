#!/usr/bin/env bash
# Hot repair on a grown communicator (issue 13): 2 hosts x 2 rails, a rank grown in through
# ncclCommGrow, then a NIC link cut under a loop of AllReduces on the grown communicator; every
# result exact, the resilient net fails over, also for the grown-in rank's connections. The
# scenario lives in grow_repair.py (runnable by hand). About 4 s.
# Exit: 0 pass, 1 fail, 77 skip (not root / no network namespaces).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/testlib.sh"
tb_require

B="$(cd "${MEND_BUILDDIR:-${BUILDDIR:-$HERE/../../build}}" 2>/dev/null && pwd)"
if [ ! -x "$B/tests/test_grow" ]; then echo "not ok grow_repair: test_grow built (${B:-the build folder}/tests missing)"; exit 1; fi

NAME="mtj$$"
tb_track "$NAME"
timeout -k 10 150 python3 "$HERE/grow_repair.py" --builddir "$B" --name "$NAME"; rc=$?
[ "$rc" = 124 ] && echo "not ok grow_repair: finished within 150 s"
tb_assert_gone "$NAME" || rc=1
exit "$rc"
