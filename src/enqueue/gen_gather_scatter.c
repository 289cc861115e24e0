/*
 * Gather and Scatter as direct transfers with the root.
 *  Gather:  every rank sends its `count` elements to the root, which receives rank r's block
 *           into recvbuff + r * count (its own block is a local copy, skipped in place).
 *  Scatter: the root sends block r of its send buffer to rank r (its own block: a local copy).
 * The root's n-1 transfers are independent works, so they progress together.
 */
#include "enqueue/plan.h"

#include "checks.h"
#include "comm.h"
#include "transport/transport.h"

ncclResult_t mendPlanGather(struct mendPlan* plan, const struct mendOp* op, int opIndex) {
  struct ncclComm* comm = plan->comm;
  int n = comm->nRanks, me = comm->rank, root = op->root;
  size_t block = op->count * mendTypeSize(op->type);
  if (block == 0) return ncclSuccess;
  if (me != root) return mendPlanAddXfer(plan, opIndex, root, MEND_SEND, (void*)op->sendbuff, block);
  char* recv = op->recvbuff;
  MENDCHECK(mendPlanAddCopy(plan, opIndex, op->sendbuff, recv + (size_t)me * block, block));
  for (int k = 1; k < n; k++) {
    int from = (me + k) % n;
    MENDCHECK(mendPlanAddXfer(plan, opIndex, from, MEND_RECV, recv + (size_t)from * block, block));
  }
  return ncclSuccess;
}

ncclResult_t mendPlanScatter(struct mendPlan* plan, const struct mendOp* op, int opIndex) {
  struct ncclComm* comm = plan->comm;
  int n = comm->nRanks, me = comm->rank, root = op->root;
  size_t block = op->count * mendTypeSize(op->type);
  if (block == 0) return ncclSuccess;
  if (me != root) return mendPlanAddXfer(plan, opIndex, root, MEND_RECV, op->recvbuff, block);
  const char* send = op->sendbuff;
  MENDCHECK(mendPlanAddCopy(plan, opIndex, send + (size_t)me * block, op->recvbuff, block));
  for (int k = 1; k < n; k++) {
    int to = (me + k) % n;
    MENDCHECK(mendPlanAddXfer(plan, opIndex, to, MEND_SEND, (void*)(send + (size_t)to * block), block));
  }
  return ncclSuccess;
}
