/*
 * R2 AllReduce, one partial level (R2CCL section 5.2).  The planner (plan_r2.c) cuts the vector
 * into a global part, reduced by the plain ring AllReduce over every rank (gen_ring.c), and one or
 * more partial parts; this file generates a partial part.  Its `inner` ranks (k, the faster ones,
 * in sub-ring order) reduce it among themselves while the `outer` ranks (d, the slower ones, in
 * chain order) spend their bandwidth on the global ring; then the outer ranks' inputs join:
 *
 *  inner rank at sub-ring position j
 *    phase 1 (chunked, k segments)  the ring AllReduce over the inner ranks, own input pre-op'd,
 *             no post-op: RECV ends up holding P, the reduction over the inner ranks.
 *             (k = 1: copy SEND -> RECV with the pre-op.)
 *    phase 2 (chunked, 1 segment)   a pipelined chain
 *             h0:  recvReduceCopySend  from outer[d-1] (the outer ranks' sum), src RECV = P,
 *                  post-op: the final value, into RECV and on to h1 (k = 1: recvReduceCopy)
 *             hj:  recvCopySend from h(j-1) to h(j+1);  h(k-1): recv from h(k-2)
 *             then each hj sends the final value (src RECV) to the outer ranks it serves:
 *             outer[i] is served by h(k-1-(i mod k)), so h(k-1) serves outer[0] as in the paper.
 *  outer rank i: two programs (two works), each one chunked phase of 1 segment:
 *    in:  i = 0: send its input (pre-op) to outer[1] (or h0);  i > 0: recvReduceSend from
 *         outer[i-1], own input pre-op'd, to outer[i+1] (or h0).  The outer ranks' sum reaches h0.
 *    out: recv the final value from its inner server into RECV.
 *
 * Why phases and works: a rank must not read the partial result P before its partial ring
 * finished, so the inner rank's ring and chain are two phases of ONE program (a phase covers the
 * whole window before the next begins).  An outer rank's input and result travel on different
 * connectors and must not wait for each other (a chunk's result comes back only after the whole
 * chain saw it), so they are two works: works that share no connector progress together.  If the
 * two streams were steps of one loop, each chunk would cross the whole chain before the next one
 * left; if they were two phases, the result stream would fill the FIFO while the input stream is
 * still sending: a deadlock on large messages.
 *
 * Pre/post: every input enters exactly once with the pre-op (inner ranks in phase 1, outer ranks
 * in their `in` program); the value becomes final only at h0, which applies the post-op once
 * (integer avg divides there, nowhere else); everything after it is a copy.
 * Bytes per rank: inner 2(k-1)/k x Y (ring) + Y in + Y out (chain and the outer ranks it serves,
 * up to MEND_R2_MAX_FANOUT); outer: Y out, Y in (middle outer ranks also forward: 2Y in).
 */
#include "enqueue/gen.h"

#include <stdlib.h>

#include "checks.h"
#include "transport/transport.h"

#define COLL MEND_CONN_COLL
#define PRE MEND_STEP_PREOP
#define POST MEND_STEP_POSTOP

/* Phase 1 of an inner rank: the ring AllReduce of gen_ring.c without the post-op (not final yet). */
static void innerRing(struct mendProgram* p, int k, int j, int prev, int next) {
  if (k == 1) {
    mendProgAddPhase(p, MEND_LAYOUT_CHUNKED, 1);
    mendProgAddStep(p, MEND_OP_COPY, PRE, -1, -1, COLL, MEND_BUF_SEND, MEND_BUF_RECV, 0, 1, 0);
    return;
  }
  mendProgAddPhase(p, MEND_LAYOUT_CHUNKED, (uint32_t)k);
  mendProgAddStep(p, MEND_OP_SEND, PRE, -1, next, COLL, MEND_BUF_SEND, MEND_BUF_NONE, j - 1, 1, 0);
  mendProgAddStep(p, MEND_OP_RECV_REDUCE_SEND, PRE, prev, next, COLL, MEND_BUF_SEND, MEND_BUF_NONE, j - 2, k - 2, -1);
  mendProgAddStep(p, MEND_OP_RECV_REDUCE_COPY_SEND, PRE, prev, next, COLL, MEND_BUF_SEND, MEND_BUF_RECV, j, 1, 0);
  mendProgAddStep(p, MEND_OP_RECV_COPY_SEND, 0, prev, next, COLL, MEND_BUF_NONE, MEND_BUF_RECV, j - 1, k - 2, -1);
  mendProgAddStep(p, MEND_OP_RECV, 0, prev, -1, COLL, MEND_BUF_NONE, MEND_BUF_RECV, j + 1, 1, 0);
}

/* Phase 2 of an inner rank: the chain that adds the outer ranks' sum and hands the result out. */
static void innerChain(struct mendProgram* p, int k, const int* inner, int d, const int* outer, int j) {
  mendProgAddPhase(p, MEND_LAYOUT_CHUNKED, 1);
  int next = j + 1 < k ? inner[j + 1] : -1;
  if (j == 0) {
    int op = next >= 0 ? MEND_OP_RECV_REDUCE_COPY_SEND : MEND_OP_RECV_REDUCE_COPY;
    mendProgAddStep(p, op, POST, outer[d - 1], next, COLL, MEND_BUF_RECV, MEND_BUF_RECV, 0, 1, 0);
  } else {
    int op = next >= 0 ? MEND_OP_RECV_COPY_SEND : MEND_OP_RECV;
    mendProgAddStep(p, op, 0, inner[j - 1], next, COLL, MEND_BUF_NONE, MEND_BUF_RECV, 0, 1, 0);
  }
  for (int i = k - 1 - j; i < d; i += k)
    mendProgAddStep(p, MEND_OP_SEND, 0, -1, outer[i], COLL, MEND_BUF_RECV, MEND_BUF_NONE, 0, 1, 0);
}

static void outerIn(struct mendProgram* p, const int* inner, int d, const int* outer, int i) {
  mendProgAddPhase(p, MEND_LAYOUT_CHUNKED, 1);
  int next = i + 1 < d ? outer[i + 1] : inner[0];
  if (i == 0) mendProgAddStep(p, MEND_OP_SEND, PRE, -1, next, COLL, MEND_BUF_SEND, MEND_BUF_NONE, 0, 1, 0);
  else mendProgAddStep(p, MEND_OP_RECV_REDUCE_SEND, PRE, outer[i - 1], next, COLL, MEND_BUF_SEND, MEND_BUF_NONE, 0, 1, 0);
}

static void outerOut(struct mendProgram* p, int k, const int* inner, int i) {
  mendProgAddPhase(p, MEND_LAYOUT_CHUNKED, 1);
  int server = inner[k - 1 - i % k];
  mendProgAddStep(p, MEND_OP_RECV, 0, server, -1, COLL, MEND_BUF_NONE, MEND_BUF_RECV, 0, 1, 0);
}

static int indexOf(const int* a, int n, int x) {
  for (int i = 0; i < n; i++) {
    if (a[i] == x) return i;
  }
  return -1;
}

static ncclResult_t finish(struct mendProgram* p, struct mendProgram** out) {
  ncclResult_t res = mendProgValidate(p);
  if (res != ncclSuccess) {
    free(p);
    return res;
  }
  *out = p;
  return ncclSuccess;
}

ncclResult_t mendGenR2Level(int k, const int* inner, int d, const int* outer, int me, struct mendProgram* progs[2],
                            int* nProgs) {
  *nProgs = 0;
  if (k < 1 || d < 1 || d > k * MEND_R2_MAX_FANOUT) {
    WARN("R2 AllReduce: a partial level of %d inner and %d outer ranks cannot be scheduled (needs 1 <= outer <= %d x inner)",
         k, d, MEND_R2_MAX_FANOUT);
    return ncclInternalError;
  }
  int j = indexOf(inner, k, me), i = indexOf(outer, d, me);
  if ((j < 0) == (i < 0)) {
    WARN("R2 AllReduce: rank %d is %s of the level's inner and outer ranks", me, j < 0 ? "in neither" : "in both");
    return ncclInternalError;
  }
  struct mendProgram* p;
  if (j >= 0) {
    MENDCHECK(mendProgAlloc(MEND_ALGO_RING, 0, &p));
    innerRing(p, k, j, inner[(j + k - 1) % k], inner[(j + 1) % k]);
    innerChain(p, k, inner, d, outer, j);
    MENDCHECK(finish(p, &progs[0]));
    *nProgs = 1;
    return ncclSuccess;
  }
  MENDCHECK(mendProgAlloc(MEND_ALGO_RING, 0, &p));
  outerIn(p, inner, d, outer, i);
  MENDCHECK(finish(p, &progs[0]));
  ncclResult_t res = mendProgAlloc(MEND_ALGO_RING, 0, &p);
  if (res == ncclSuccess) {
    outerOut(p, k, inner, i);
    res = finish(p, &progs[1]);
  }
  if (res != ncclSuccess) {
    free(progs[0]);
    return res;
  }
  *nProgs = 2;
  return ncclSuccess;
}
