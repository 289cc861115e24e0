#!/usr/bin/env bash
# The socket Net between two "hosts": network namespaces joined by two veth pairs (rails mrail0 and
# mrail1, one subnet each).  One unit_tests process per namespace runs NetSocketNs.* as sender or
# receiver: both rails carry checked data, then the receiver's rail 1 goes down mid-stream and the
# sender must see that connection fail in bounded time while rail 0 keeps working.
# Needs root and iproute2; exits 77 (skipped) otherwise.  Everything it creates is removed on exit.
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-build}
BIN=${MEND_NETSOCK_NS_BIN:-$B/tests/unit_tests}
[ -x "$BIN" ] || { echo "skip: $BIN not built"; exit 77; }
[ "$(id -u)" -eq 0 ] || { echo "skip: needs root for network namespaces"; exit 77; }
command -v ip > /dev/null || { echo "skip: no iproute2"; exit 77; }

A="mendnsa$$"; Z="mendnsb$$"
T=$(mktemp -d)
cleanup() {
  [ -n "${PA:-}" ] && kill "$PA" 2> /dev/null
  [ -n "${PB:-}" ] && kill "$PB" 2> /dev/null
  ip netns del "$A" 2> /dev/null
  ip netns del "$Z" 2> /dev/null
  rm -rf "$T"
}
trap cleanup EXIT

setup() {
  ip netns add "$A" && ip netns add "$Z" || return 1
  for r in 0 1; do
    ip link add "mna$$r$r" type veth peer name "mnb$$r$r" || return 1
    ip link set "mna$$r$r" netns "$A" && ip link set "mnb$$r$r" netns "$Z" || return 1
    ip -n "$A" link set "mna$$r$r" name "mrail$r" && ip -n "$Z" link set "mnb$$r$r" name "mrail$r" || return 1
    ip -n "$A" addr add "10.213.$r.1/24" dev "mrail$r" && ip -n "$Z" addr add "10.213.$r.2/24" dev "mrail$r" || return 1
    ip -n "$A" link set "mrail$r" up && ip -n "$Z" link set "mrail$r" up || return 1
  done
  ip -n "$A" link set lo up && ip -n "$Z" link set lo up
}
if ! setup 2> "$T/setup.err"; then
  echo "skip: cannot create namespaces: $(head -2 "$T/setup.err")"; exit 77
fi

export MEND_NETSOCK_NS_DIR="$T" MEND_NETSOCK_NS_IFNAME=mrail MEND_SOCKET_USER_TIMEOUT_MS=2000
run_role() { # namespace role
  MEND_NETSOCK_NS_ROLE=$2 timeout -k 5 120 ip netns exec "$1" "$BIN" --gtest_filter='NetSocketNs.*' \
    > "$T/$2.log" 2>&1
}
run_role "$Z" recv & PB=$!
run_role "$A" send & PA=$!

# Take the receiver's rail 1 down once the sender streams on it.
for _ in $(seq 1 600); do
  [ -e "$T/rail1.streaming" ] && break
  kill -0 "$PA" 2> /dev/null || break
  sleep 0.05
done
if [ -e "$T/rail1.streaming" ]; then
  ip -n "$Z" link set mrail1 down
  : > "$T/rail1.down"
fi

wait "$PA"; ra=$?
wait "$PB"; rb=$?
PA=; PB=
grep -h '^\[ NetSocket \]' "$T/send.log" "$T/recv.log"
failed=0
check() { # name rc log
  if [ "$2" -eq 0 ] && grep -q '^\[  PASSED  \] 1 test' "$3"; then echo "ok $1"; return; fi
  failed=1
  echo "not ok $1: exit $2"
  grep -hE 'Failure|Expected|Which is|error|WARN|SKIPPED|0 tests' "$3" | head -12 | sed 's/^/    /'
}
check net_socket_ns_sender "$ra" "$T/send.log"
check net_socket_ns_receiver "$rb" "$T/recv.log"
exit $failed
