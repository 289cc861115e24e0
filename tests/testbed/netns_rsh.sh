#!/usr/bin/env bash
# Launch agent that lets Open MPI's mpirun start its daemons inside testbed hosts (network
# namespaces) instead of over ssh:  mpirun --mca plm_rsh_agent tests/testbed/netns_rsh.sh ...
# Open MPI calls it as `agent [options] HOST COMMAND...`; HOST is a testbed host namespace name
# (e.g. mt123h1, as written in the hostfile) and COMMAND is a shell command line.
# Only namespaces whose names look like testbed hosts are accepted, so a typo never runs a
# command in the wrong place. Start mpirun itself through this agent too (HOST = host 0), so
# that it runs in host 0's namespace under host 0's name and starts its local ranks itself.
set -u
# ssh-style options that Open MPI may pass (e.g. -x): skip them.
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
if [ $# -lt 2 ]; then
    echo "netns_rsh.sh: usage: netns_rsh.sh HOST COMMAND..." >&2
    exit 2
fi
host=$1; shift
if ! [[ "$host" =~ ^mt[a-z0-9]{1,11}h[0-9]+$ ]]; then
    echo "netns_rsh.sh: '$host' is not a testbed host namespace (mt...h<i>)" >&2
    exit 2
fi
if ! ip netns list | awk '{print $1}' | grep -qx "$host"; then
    echo "netns_rsh.sh: no namespace '$host'" >&2
    exit 2
fi
# Each host also gets its own UTS namespace named after it: Open MPI tells nodes apart (session
# directories, node names, shared-memory peers) by hostname, which namespaces otherwise share.
exec ip netns exec "$host" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$host" "$*"
