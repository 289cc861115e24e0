/*
 * Ring schedules.  Positions run 0..n-1 along the ring (ringRanks maps them to ranks); the rank at
 * position j receives from j-1 and sends to j+1.  Segment arithmetic is mod n, so every "k hops"
 * stretch is one step with a repeat count.
 *
 *  AllReduce      (chunked, n segments a loop): reduce-scatter then all-gather around the ring.
 *      send seg j-1 | recvReduceSend seg j-2.. (n-2 times) | recvReduceCopySend seg j (final)
 *      | recvCopySend seg j-1.. (n-2 times) | recv seg j+1
 *  ReduceScatter  (blocked, segment = position, block = ringRanks[position]): the first half.
 *  AllGather      (blocked): copySend own block, recvCopySend n-2 blocks, recv the last one.
 *  Broadcast      (chunked, 1 segment): a chain root -> root+1 -> ... -> root-1.
 *  Reduce         (chunked, 1 segment): a chain root+1 -> ... -> root-1 -> root.
 */
#include "enqueue/gen.h"

#include <stdlib.h>

#include "checks.h"
#include "transport/transport.h"

#define COLL MEND_CONN_COLL
#define PRE MEND_STEP_PREOP
#define POST MEND_STEP_POSTOP

static void allReduce(struct mendProgram* p, int n, int j, int prev, int next) {
  mendProgAddPhase(p, MEND_LAYOUT_CHUNKED, (uint32_t)n);
  mendProgAddStep(p, MEND_OP_SEND, PRE, -1, next, COLL, MEND_BUF_SEND, MEND_BUF_NONE, j - 1, 1, 0);
  mendProgAddStep(p, MEND_OP_RECV_REDUCE_SEND, PRE, prev, next, COLL, MEND_BUF_SEND, MEND_BUF_NONE, j - 2, n - 2, -1);
  mendProgAddStep(p, MEND_OP_RECV_REDUCE_COPY_SEND, PRE | POST, prev, next, COLL, MEND_BUF_SEND, MEND_BUF_RECV, j, 1, 0);
  mendProgAddStep(p, MEND_OP_RECV_COPY_SEND, 0, prev, next, COLL, MEND_BUF_NONE, MEND_BUF_RECV, j - 1, n - 2, -1);
  mendProgAddStep(p, MEND_OP_RECV, 0, prev, -1, COLL, MEND_BUF_NONE, MEND_BUF_RECV, j + 1, 1, 0);
}

static void reduceScatter(struct mendProgram* p, int n, int j, int prev, int next) {
  mendProgAddPhase(p, MEND_LAYOUT_BLOCKED, (uint32_t)n);
  mendProgAddStep(p, MEND_OP_SEND, PRE, -1, next, COLL, MEND_BUF_SEND, MEND_BUF_NONE, j - 1, 1, 0);
  mendProgAddStep(p, MEND_OP_RECV_REDUCE_SEND, PRE, prev, next, COLL, MEND_BUF_SEND, MEND_BUF_NONE, j - 2, n - 2, -1);
  mendProgAddStep(p, MEND_OP_RECV_REDUCE_COPY, PRE | POST, prev, -1, COLL, MEND_BUF_SEND, MEND_BUF_RECV, j, 1, 0);
}

static void allGather(struct mendProgram* p, int n, int j, int prev, int next) {
  mendProgAddPhase(p, MEND_LAYOUT_BLOCKED, (uint32_t)n);
  mendProgAddStep(p, MEND_OP_COPY_SEND, 0, -1, next, COLL, MEND_BUF_SEND, MEND_BUF_RECV, j, 1, 0);
  mendProgAddStep(p, MEND_OP_RECV_COPY_SEND, 0, prev, next, COLL, MEND_BUF_NONE, MEND_BUF_RECV, j - 1, n - 2, -1);
  mendProgAddStep(p, MEND_OP_RECV, 0, prev, -1, COLL, MEND_BUF_NONE, MEND_BUF_RECV, j + 1, 1, 0);
}

/* d: distance from the root along the ring (0 = root). */
static void broadcast(struct mendProgram* p, int n, int d, int prev, int next) {
  mendProgAddPhase(p, MEND_LAYOUT_CHUNKED, 1);
  if (d == 0) mendProgAddStep(p, MEND_OP_COPY_SEND, 0, -1, next, COLL, MEND_BUF_SEND, MEND_BUF_RECV, 0, 1, 0);
  else if (d < n - 1) mendProgAddStep(p, MEND_OP_RECV_COPY_SEND, 0, prev, next, COLL, MEND_BUF_NONE, MEND_BUF_RECV, 0, 1, 0);
  else mendProgAddStep(p, MEND_OP_RECV, 0, prev, -1, COLL, MEND_BUF_NONE, MEND_BUF_RECV, 0, 1, 0);
}

static void reduce(struct mendProgram* p, int d, int prev, int next) {
  mendProgAddPhase(p, MEND_LAYOUT_CHUNKED, 1);
  if (d == 1) mendProgAddStep(p, MEND_OP_SEND, PRE, -1, next, COLL, MEND_BUF_SEND, MEND_BUF_NONE, 0, 1, 0);
  else if (d != 0) mendProgAddStep(p, MEND_OP_RECV_REDUCE_SEND, PRE, prev, next, COLL, MEND_BUF_SEND, MEND_BUF_NONE, 0, 1, 0);
  else mendProgAddStep(p, MEND_OP_RECV_REDUCE_COPY, PRE | POST, prev, -1, COLL, MEND_BUF_SEND, MEND_BUF_RECV, 0, 1, 0);
}

static int reduces(int func) {
  return func == MEND_FUNC_ALLREDUCE || func == MEND_FUNC_REDUCE || func == MEND_FUNC_REDUCESCATTER;
}

ncclResult_t mendGenRing(int func, int n, const int* ringRanks, int j, int root, struct mendProgram** prog) {
  if (n == 1) return mendGenCopy(reduces(func) ? PRE | POST : 0, prog);
  int blocked = func == MEND_FUNC_ALLGATHER || func == MEND_FUNC_REDUCESCATTER;
  struct mendProgram* p;
  MENDCHECK(mendProgAlloc(MEND_ALGO_RING, blocked ? (uint32_t)n : 0, &p));
  if (blocked) {
    for (int i = 0; i < n; i++) p->segMap[i] = ringRanks[i];
  }
  int prev = ringRanks[(j + n - 1) % n], next = ringRanks[(j + 1) % n];
  int rootPos = 0;
  for (int i = 0; i < n; i++) {
    if (ringRanks[i] == root) rootPos = i;
  }
  int d = (j - rootPos + n) % n;
  switch (func) {
  case MEND_FUNC_ALLREDUCE: allReduce(p, n, j, prev, next); break;
  case MEND_FUNC_REDUCESCATTER: reduceScatter(p, n, j, prev, next); break;
  case MEND_FUNC_ALLGATHER: allGather(p, n, j, prev, next); break;
  case MEND_FUNC_BROADCAST: broadcast(p, n, d, prev, next); break;
  case MEND_FUNC_REDUCE: reduce(p, d, prev, next); break;
  default:
    WARN("No ring schedule for %s", mendFuncName(func));
    free(p);
    return ncclInternalError;
  }
  ncclResult_t res = mendProgValidate(p);
  if (res != ncclSuccess) {
    free(p);
    return res;
  }
  *prog = p;
  return ncclSuccess;
}
