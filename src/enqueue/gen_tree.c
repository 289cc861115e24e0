/*
 * Tree AllReduce: a reduce up the tree, then a broadcast down it, each a phase pipelined chunk by
 * chunk (one segment per loop), so a small message takes 2 x depth hops instead of the ring's
 * 2 x (n-1), and a large one streams through every level at once.
 *
 *  up phase    leaf: send its input (pre-op) to the parent.
 *              inner: recvReduceCopy child 0 (+ own input) into recv, recvReduceCopy the middle
 *              children, recvReduceSend the last child to the parent; the root instead writes
 *              the final value (post-op) with recvReduceCopy.
 *  down phase  root: send the result to each child.  inner: recvCopySend from the parent to
 *              child 0, then send to the other children.  leaf: recv from the parent.
 * Trees come from the channel (graph layer) or mendTreeDoubleBinary over the ring order; the two
 * trees of a double binary tree go on alternate channels, so each carries half the data.
 */
#include "enqueue/gen.h"

#include <stdlib.h>

#include "checks.h"
#include "transport/transport.h"

#define COLL MEND_CONN_COLL

static void upPhase(struct mendProgram* p, int up, const int* down, int k) {
  mendProgAddPhase(p, MEND_LAYOUT_CHUNKED, 1);
  if (k == 0) {
    mendProgAddStep(p, MEND_OP_SEND, MEND_STEP_PREOP, -1, up, COLL, MEND_BUF_SEND, MEND_BUF_NONE, 0, 1, 0);
    return;
  }
  for (int i = 0; i < k; i++) {
    int src = i == 0 ? MEND_BUF_SEND : MEND_BUF_RECV;
    int flags = i == 0 ? MEND_STEP_PREOP : 0;
    if (i < k - 1)
      mendProgAddStep(p, MEND_OP_RECV_REDUCE_COPY, flags, down[i], -1, COLL, src, MEND_BUF_RECV, 0, 1, 0);
    else if (up >= 0)
      mendProgAddStep(p, MEND_OP_RECV_REDUCE_SEND, flags, down[i], up, COLL, src, MEND_BUF_NONE, 0, 1, 0);
    else
      mendProgAddStep(p, MEND_OP_RECV_REDUCE_COPY, flags | MEND_STEP_POSTOP, down[i], -1, COLL, src, MEND_BUF_RECV, 0, 1, 0);
  }
}

static void downPhase(struct mendProgram* p, int up, const int* down, int k) {
  mendProgAddPhase(p, MEND_LAYOUT_CHUNKED, 1);
  int first = 0;
  if (up >= 0) {
    if (k == 0) {
      mendProgAddStep(p, MEND_OP_RECV, 0, up, -1, COLL, MEND_BUF_NONE, MEND_BUF_RECV, 0, 1, 0);
      return;
    }
    mendProgAddStep(p, MEND_OP_RECV_COPY_SEND, 0, up, down[0], COLL, MEND_BUF_NONE, MEND_BUF_RECV, 0, 1, 0);
    first = 1;
  }
  for (int i = first; i < k; i++)
    mendProgAddStep(p, MEND_OP_SEND, 0, -1, down[i], COLL, MEND_BUF_RECV, MEND_BUF_NONE, 0, 1, 0);
}

ncclResult_t mendGenTreeAllReduce(int up, const int* downIn, int nDown, struct mendProgram** prog) {
  int down[MEND_PROG_MAX_PEERS];
  int k = 0;
  for (int i = 0; i < nDown && k < MEND_PROG_MAX_PEERS; i++) {
    if (downIn[i] >= 0) down[k++] = downIn[i];
  }
  if (up < 0 && k == 0) return mendGenCopy(MEND_STEP_PREOP | MEND_STEP_POSTOP, prog);
  struct mendProgram* p;
  MENDCHECK(mendProgAlloc(MEND_ALGO_TREE, 0, &p));
  upPhase(p, up, down, k);
  downPhase(p, up, down, k);
  ncclResult_t res = mendProgValidate(p);
  if (res != ncclSuccess) {
    free(p);
    return res;
  }
  *prog = p;
  return ncclSuccess;
}

/* Balanced in-order binary tree over positions [0, n): the root of [lo, hi] is its midpoint. */
static void inorderTree(int n, int pos, int* up, int down[2]) {
  int lo = 0, hi = n - 1, parent = -1;
  for (;;) {
    int mid = (lo + hi) / 2;
    if (pos == mid) {
      *up = parent;
      down[0] = lo <= mid - 1 ? (lo + mid - 1) / 2 : -1;
      down[1] = mid + 1 <= hi ? (mid + 1 + hi) / 2 : -1;
      return;
    }
    parent = mid;
    if (pos < mid) hi = mid - 1;
    else lo = mid + 1;
  }
}

void mendTreeDoubleBinary(int n, int pos, int which, int* up, int down[2]) {
  *up = -1;
  down[0] = down[1] = -1;
  if (n <= 1 || pos < 0 || pos >= n) return;
  /* Tree 1 is tree 0 shifted by one position: in-order leaves sit on every other position, so
   * the shift turns most leaves of one tree into inner nodes of the other. */
  int shift = which ? 1 : 0;
  int role = (pos + n - shift) % n;
  int u, d[2];
  inorderTree(n, role, &u, d);
  *up = u < 0 ? -1 : (u + shift) % n;
  for (int i = 0; i < 2; i++) down[i] = d[i] < 0 ? -1 : (d[i] + shift) % n;
}
