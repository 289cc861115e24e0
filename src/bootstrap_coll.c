/*
 * Bootstrap collectives, built on the peer network's ordered send and receive (bootstrap.c): a ring
 * allgather for init's exchanges and a dissemination barrier.
 */
#include "bootstrap_priv.h"

#include "checks.h"
#include "misc/debug.h"

/* Ring: at step s, pass on the block that arrived at step s-1 (our own first). */
ncclResult_t mendBootstrapAllGather(struct mendBootstrap* bs, void* allData, size_t size) {
  if (bs == NULL || (allData == NULL && size > 0)) {
    WARN("mendBootstrapAllGather: invalid argument");
    return ncclInvalidArgument;
  }
  int n = bs->nRanks, me = bs->rank;
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  char* buf = allData;
  for (int s = 0; s < n - 1; s++) {
    int sendBlock = (me - s + n) % n, recvBlock = (me - s - 1 + 2 * n) % n;
    MENDCHECK(mendBootstrapSend(bs, next, MEND_BS_TAG_ALLGATHER, buf + (size_t)sendBlock * size, size));
    MENDCHECK(mendBootstrapRecv(bs, prev, MEND_BS_TAG_ALLGATHER, buf + (size_t)recvBlock * size, size));
  }
  return ncclSuccess;
}

/* Dissemination barrier: log2(n) rounds, round k talks to the ranks 2^k away. */
ncclResult_t mendBootstrapBarrier(struct mendBootstrap* bs, int tag) {
  if (bs == NULL) {
    WARN("mendBootstrapBarrier: NULL bootstrap");
    return ncclInvalidArgument;
  }
  int n = bs->nRanks, me = bs->rank;
  for (int k = 0, dist = 1; dist < n; k++, dist <<= 1) {
    int32_t round = k, got = -1;
    MENDCHECK(mendBootstrapSend(bs, (me + dist) % n, tag, &round, sizeof(round)));
    MENDCHECK(mendBootstrapRecv(bs, (me - dist + n) % n, tag, &got, sizeof(got)));
    if (got != round) {
      WARN("Bootstrap rank %d: barrier (tag %d) out of step: round %d got round %d from rank %d", me, tag, round, got,
           (me - dist + n) % n);
      return ncclInternalError;
    }
  }
  return ncclSuccess;
}
