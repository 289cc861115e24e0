/*
 * Direct P2P: a send is one step looped over the chunks of the transfer, a receive the mirror
 * step, both on the P2P connectors (connIndex MEND_CONN_P2P, never shared with collectives).
 * Each send or receive is its own work, so transfers to different peers progress independently
 * and a send/recv exchange larger than the FIFO cannot deadlock.  A local copy (send to self, one
 * rank) needs no connector.
 */
#include "enqueue/gen.h"

#include <stdlib.h>

#include "checks.h"
#include "transport/transport.h"

static ncclResult_t oneStep(int algo, int op, int flags, int recvPeer, int sendPeer, int src, int dst,
                            struct mendProgram** prog) {
  struct mendProgram* p;
  MENDCHECK(mendProgAlloc(algo, 0, &p));
  mendProgAddPhase(p, MEND_LAYOUT_CHUNKED, 1);
  mendProgAddStep(p, op, flags, recvPeer, sendPeer, MEND_CONN_P2P, src, dst, 0, 1, 0);
  ncclResult_t res = mendProgValidate(p);
  if (res != ncclSuccess) {
    free(p);
    return res;
  }
  *prog = p;
  return ncclSuccess;
}

ncclResult_t mendGenP2pSend(int peer, struct mendProgram** prog) {
  return oneStep(MEND_ALGO_P2P, MEND_OP_SEND, 0, -1, peer, MEND_BUF_SEND, MEND_BUF_NONE, prog);
}

ncclResult_t mendGenP2pRecv(int peer, struct mendProgram** prog) {
  return oneStep(MEND_ALGO_P2P, MEND_OP_RECV, 0, peer, -1, MEND_BUF_NONE, MEND_BUF_RECV, prog);
}

ncclResult_t mendGenCopy(int flags, struct mendProgram** prog) {
  return oneStep(MEND_ALGO_LOCAL, MEND_OP_COPY, flags, -1, -1, MEND_BUF_SEND, MEND_BUF_RECV, prog);
}
