# Shared functions for tests/testbed/test_*.sh (sourced, not run).
# Tests name their testbeds mt<letter><pid> so parallel runs never collide, and register the
# names with tb_track so an EXIT trap removes anything a crashed test left behind.

TB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TB="$TB_DIR/testbed.py"
TB_TRACKED=()

# Exit 77 (skip) unless this machine can build testbeds: root, iproute2, python3, netns.
tb_require() {
    if [ "$(id -u)" != 0 ]; then echo "SKIP: needs root"; exit 77; fi
    for c in ip tc bridge python3 timeout; do
        command -v "$c" >/dev/null 2>&1 || { echo "SKIP: $c not installed"; exit 77; }
    done
    ip netns list >/dev/null 2>&1 || { echo "SKIP: no ip netns"; exit 77; }
    local out rc
    out="$(timeout -k 5 30 python3 "$TB" check 2>&1)"; rc=$?
    if [ "$rc" = 77 ]; then echo "SKIP: $out"; exit 77; fi
    if [ "$rc" != 0 ]; then echo "not ok testbed check: $out"; exit 1; fi
    trap tb_cleanup_tracked EXIT
}

# B = the build folder (MEND_BUILDDIR, BUILDDIR, else ../../build), absolute; fails the test (named
# $1) when program $2 is not built there.
tb_builddir() {
    B="${MEND_BUILDDIR:-${BUILDDIR:-$TB_DIR/../../build}}"
    B="$(cd "$B" 2>/dev/null && pwd)"
    if [ ! -x "$B/bin/$2" ]; then echo "not ok $1: $2 built (${B:-the build folder}/bin missing)"; exit 1; fi
}

tb_track() { TB_TRACKED+=("$1"); }

tb_cleanup_tracked() {
    local n
    for n in "${TB_TRACKED[@]}"; do
        if tb_exists "$n"; then
            echo "cleanup: removing leftover testbed $n"
            timeout -k 5 30 python3 "$TB" down --name "$n" >/dev/null 2>&1
        fi
    done
}

# True if any namespace or state file of testbed $1 exists.
tb_exists() {
    ip netns list 2>/dev/null | awk '{print $1}' | grep -Eq "^$1(sw|h[0-9]+)$" && return 0
    [ -e "/run/mend-testbed/$1.json" ]
}

# Fail (return 1) if testbed $1 left a namespace, a state file or a log folder behind.
tb_assert_gone() {
    if tb_exists "$1"; then
        echo "not ok testbed $1 left behind: $(ip netns list | grep "^$1" | tr '\n' ' ')"
        return 1
    fi
    local logs
    logs="$(ls -d "${TMPDIR:-/tmp}/mend-testbed-$1-"* 2>/dev/null)"
    if [ -n "$logs" ]; then
        echo "not ok testbed $1 left its log folder: $logs"
        return 1
    fi
    echo "ok testbed $1 left nothing behind"
}

# Print the verdict and exit 0 (pass) or 1 (fail) from a step status.
tb_result() {
    if [ "$1" = 0 ]; then echo "PASS"; exit 0; fi
    [ "$1" = 124 ] && echo "not ok a step timed out"
    echo "FAIL"
    exit 1
}
