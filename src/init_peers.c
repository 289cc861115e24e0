/*
 * Init phases after the bootstrap, shared by init, split and shrink: exchange peer info, derive the
 * host layout (hosts ordered by their first rank), agree on a communicator hash, bring up the
 * transports, and mark the communicator READY.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "checks.h"
#include "comm.h"
#include "init.h"
#include "misc/debug.h"
#include "misc/utils.h"
#include "transport/transport.h"

/* What each rank contributes to the init allgather. */
struct initExchange {
  struct mendPeerInfo info; /* the rank's identity */
  uint64_t nonce;           /* rank 0's value becomes the communicator hash */
};

ncclResult_t mendInitDetectDevice(struct ncclComm* comm) {
  /* Host mode is the only mode without a GPU: buffers are host memory, streams must be NULL. */
  comm->cudaDev = -1;
  comm->hostMode = 1;
  return ncclSuccess;
}

static void fillInfo(struct ncclComm* comm, struct mendPeerInfo* info) {
  memset(info, 0, sizeof(*info));
  info->rank = comm->rank;
  info->cudaDev = comm->cudaDev;
  info->busId = -1;
  info->hostHash = mendHostHash();
  info->pidHash = mendPidHash();
  info->pid = (int)getpid();
  info->hostMode = comm->hostMode;
  snprintf(info->hostId, sizeof(info->hostId), "%s", mendHostId());
}

/* node = index of the host in order of its first rank; localRank = order among the host's ranks. */
static ncclResult_t hostLayout(struct ncclComm* comm) {
  int n = comm->nRanks;
  MENDCHECK(MENDCALLOC(comm->rankToNode, n));
  MENDCHECK(MENDCALLOC(comm->rankToLocalRank, n));
  comm->nNodes = 0;
  for (int r = 0; r < n; r++) {
    int node = -1, local = 0;
    for (int q = 0; q < r; q++) {
      if (comm->peerInfo[q].hostHash != comm->peerInfo[r].hostHash) continue;
      node = comm->rankToNode[q];
      local++;
    }
    comm->rankToNode[r] = node >= 0 ? node : comm->nNodes++;
    comm->rankToLocalRank[r] = local;
  }
  comm->node = comm->rankToNode[comm->rank];
  comm->localRank = comm->rankToLocalRank[comm->rank];
  comm->nLocalRanks = 0;
  for (int r = 0; r < n; r++) comm->nLocalRanks += comm->rankToNode[r] == comm->node;
  return ncclSuccess;
}

static ncclResult_t exchangePeerInfo(struct ncclComm* comm) {
  int n = comm->nRanks;
  struct initExchange* all = NULL;
  ncclResult_t res;
  MENDCHECK(MENDCALLOC(all, n));
  fillInfo(comm, &all[comm->rank].info);
  all[comm->rank].nonce = mendHashCombine(mendTimeNs(), mendPidHash() ^ (uint64_t)(uintptr_t)comm);
  MENDCHECKGOTO(mendBootstrapAllGather(comm->bootstrap, all, sizeof(*all)), res, fail_free);
  MENDCHECKGOTO(MENDCALLOC(comm->peerInfo, n), res, fail_free);
  for (int r = 0; r < n; r++) {
    comm->peerInfo[r] = all[r].info;
    if (comm->peerInfo[r].rank != r) {
      WARN("Init: peer info of rank %d claims rank %d", r, comm->peerInfo[r].rank);
      res = ncclInternalError;
      goto fail_free;
    }
  }
  comm->commHash = mendHashCombine(all[0].nonce, (uint64_t)n);
  free(all);
  return ncclSuccess;
fail_free:
  free(all);
  return res;
}

void mendInitSetOutcome(struct ncclComm* comm, ncclResult_t res) {
  if (res == ncclSuccess) {
    atomic_store(&comm->state, MEND_COMM_READY);
    atomic_store(&comm->asyncResult, ncclSuccess);
  } else {
    atomic_store(&comm->state, MEND_COMM_FAILED);
    atomic_store(&comm->asyncResult, res == ncclInProgress ? ncclInternalError : res);
  }
}

ncclResult_t mendInitFinish(struct ncclComm* comm) {
  MENDCHECK(exchangePeerInfo(comm));
  MENDCHECK(hostLayout(comm));
  MENDCHECK(mendTransportInit(comm));
  INFO(NCCL_INIT, "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d commHash 0x%llx - Init COMPLETE",
       (void*)comm, comm->rank, comm->nRanks, comm->nNodes, comm->nLocalRanks, comm->localRank,
       (unsigned long long)comm->commHash);
  return ncclSuccess;
}
