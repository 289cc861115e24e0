/*
 * AlltoAll: block p of every rank's send buffer goes to rank p, landing in block `rank` of its
 * receive buffer.  n-1 direct sends and n-1 direct receives (each its own work, so all peers
 * progress at once) plus a local copy of the own block.  In place (overlapping buffers) the send
 * data is first copied to a plan-owned temporary, so no block is overwritten before it is sent.
 */
#include "enqueue/plan.h"

#include <string.h>

#include "checks.h"
#include "comm.h"
#include "transport/transport.h"

ncclResult_t mendPlanAlltoAll(struct mendPlan* plan, const struct mendOp* op, int opIndex) {
  struct ncclComm* comm = plan->comm;
  int n = comm->nRanks, me = comm->rank;
  size_t block = op->count * mendTypeSize(op->type), total = block * (size_t)n;
  if (block == 0) return ncclSuccess;
  const char* send = op->sendbuff;
  char* recv = op->recvbuff;
  if (send < recv + total && recv < send + total) {
    void* tmp;
    MENDCHECK(mendPlanScratch(plan, total, op->stream, &tmp));
    MENDCHECK(mendPlanStage(plan, tmp, send, total));
    send = tmp;
  }
  MENDCHECK(mendPlanAddCopy(plan, opIndex, send + (size_t)me * block, recv + (size_t)me * block, block));
  /* Peers in the order me+1, me+2, ...: each pair of ranks meets early in both lists. */
  for (int k = 1; k < n; k++) {
    int to = (me + k) % n, from = (me - k + n) % n;
    MENDCHECK(mendPlanAddXfer(plan, opIndex, to, MEND_SEND, (void*)(send + (size_t)to * block), block));
    MENDCHECK(mendPlanAddXfer(plan, opIndex, from, MEND_RECV, recv + (size_t)from * block, block));
  }
  return ncclSuccess;
}
