#!/usr/bin/env bash
# Single copy between rank processes of one host (src/device/host_direct.c, MEND_SHM_DIRECT): a
# receiver reads large send/recv chunks (and a ring AllGather's) from the sender's memory with
# process_vm_readv once it has checked that it can.  Rank processes started by mend-run: AlltoAll, a
# send/recv ring and a ring AllGather with their
# data checked (the perf tools' #wrong columns), where each receiver says which way it reads (INFO,
# NCCL_DEBUG_SUBSYS=SHM): with single copy on, every receiver reads its senders' memory; with the
# read refused by the kernel (the fault site shm.direct) or MEND_SHM_DIRECT=0, none does and the data
# is still right.
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=SHM MEND_SHM_DIRECT_MIN=4096

# name np tool want-readers want-refused [env...]: want-* are counts of receivers' INFO lines.
run() {
  local name=$1 np=$2 tool=$3 readers=$4 refused=$5
  shift 5
  env "$@" timeout 120 "$B/bin/mend-run" --all-output -np "$np" "$B/bin/$tool" -b 64K -e 4M -f 4 -n 3 -w 1 -c 1 \
    > "$T/$name.out" 2>&1
  local rc=$? got_r got_f rows bad
  got_r=$(grep -c "large sends from its memory (single copy, process_vm_readv)" "$T/$name.out")
  got_f=$(grep -c "its sends come through the FIFO" "$T/$name.out")
  # Data rows (rank 0's, "[0]" first): size, count, type, redop, root, then time/algbw/busbw/#wrong twice.
  sed -n 's/^\[0\] //p' "$T/$name.out" | grep -E '^ +[0-9]+ +[0-9]+ +float' > "$T/$name.rows"
  rows=$(wc -l < "$T/$name.rows")
  bad=$(awk '$9 != "0" || ($13 != "0" && $13 != "N/A")' "$T/$name.rows" | wc -l)
  if [ "$rc" -eq 0 ] && [ "$rows" -eq 4 ] && [ "$bad" -eq 0 ] && [ "$got_r" -ge "$readers" ] &&
     { [ "$readers" -gt 0 ] || [ "$got_r" -eq 0 ]; } && [ "$got_f" -ge "$refused" ] &&
     { [ "$refused" -gt 0 ] || [ "$got_f" -eq 0 ]; }; then
    echo "ok $name: $rows sizes right, $got_r receivers read in place, $got_f refused"
  else
    echo "not ok $name: rc $rc, $rows sizes ($bad wrong), $got_r receivers read in place (want $readers" \
      "$([ "$readers" -gt 0 ] && echo "or more" || echo exactly)), $got_f refused (want $refused" \
      "$([ "$refused" -gt 0 ] && echo "or more" || echo exactly)); $(grep -E 'WARN|rror' "$T/$name.out" | head -3 | tr '\n' ' ')"
  fi
}

# Each of the n ranks receives from n - 1 peers (AlltoAll) or from one (the ring), on one channel or
# more: one INFO line per receiving connector that probed, so at least one a peer.
run alltoall_2 2 alltoall_perf 2 0
run alltoall_3 3 alltoall_perf 6 0
run sendrecv_3 3 sendrecv_perf 3 0
run allgather_3 3 all_gather_perf 3 0 NCCL_ALGO=Ring
run refused_by_kernel 2 alltoall_perf 0 2 MEND_FAULT_INJECT=shm.direct:1+
run off 2 alltoall_perf 0 0 MEND_SHM_DIRECT=0
