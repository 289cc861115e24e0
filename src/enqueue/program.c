/* Building, checking and printing programs (the format is described in program.h). */
#include "enqueue/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "transport/transport.h"

ncclResult_t mendProgAlloc(int algo, uint32_t nSegMap, struct mendProgram** prog) {
  size_t bytes = sizeof(struct mendProgram) + (size_t)nSegMap * sizeof(int32_t);
  struct mendProgram* p = calloc(1, bytes);
  if (p == NULL) {
    WARN("Failed to allocate a program of %zu bytes", bytes);
    return ncclSystemError;
  }
  p->bytes = (uint32_t)bytes;
  p->algo = (uint8_t)algo;
  p->nSegMap = nSegMap;
  *prog = p;
  return ncclSuccess;
}

int mendProgAddPeer(struct mendProgram* prog, int rank, int dir, int connIndex) {
  for (int i = 0; i < prog->nPeers; i++) {
    const struct mendProgPeer* p = prog->peers + i;
    if (p->rank == rank && p->dir == dir && p->connIndex == connIndex) return i;
  }
  if (prog->nPeers == MEND_PROG_MAX_PEERS) {
    prog->overflow++;
    return -1;
  }
  struct mendProgPeer* p = prog->peers + prog->nPeers;
  p->rank = rank;
  p->dir = (uint8_t)dir;
  p->connIndex = (uint8_t)connIndex;
  return prog->nPeers++;
}

void mendProgAddPhase(struct mendProgram* prog, int layout, uint32_t loopSegs) {
  if (prog->nPhases == MEND_PROG_MAX_PHASES) {
    prog->overflow++;
    return;
  }
  struct mendProgPhase* ph = prog->phases + prog->nPhases++;
  ph->layout = (uint8_t)layout;
  ph->firstStep = prog->nSteps;
  ph->nSteps = 0;
  ph->loopSegs = loopSegs ? loopSegs : 1;
}

static uint8_t peerIndex(struct mendProgram* prog, int rank, int dir, int connIndex) {
  if (rank < 0) return MEND_PROG_NO_PEER;
  int i = mendProgAddPeer(prog, rank, dir, connIndex);
  return i < 0 ? MEND_PROG_NO_PEER : (uint8_t)i;
}

void mendProgAddStep(struct mendProgram* prog, int op, int flags, int recvRank, int sendRank, int connIndex,
                  int src, int dst, int seg, int repeat, int segDelta) {
  if (repeat <= 0) return; /* e.g. the n-2 middle hops of a 2-rank ring */
  if (prog->nPhases == 0 || prog->nSteps == MEND_PROG_MAX_STEPS) {
    prog->overflow++;
    return;
  }
  struct mendProgPhase* ph = prog->phases + prog->nPhases - 1;
  struct mendProgStep* s = prog->steps + prog->nSteps++;
  ph->nSteps++;
  s->op = (uint8_t)op;
  s->flags = (uint8_t)flags;
  s->recvPeer = (op & MEND_STEP_RECV) ? peerIndex(prog, recvRank, MEND_RECV, connIndex) : MEND_PROG_NO_PEER;
  s->sendPeer = (op & MEND_STEP_SEND) ? peerIndex(prog, sendRank, MEND_SEND, connIndex) : MEND_PROG_NO_PEER;
  s->src = (uint8_t)src;
  s->dst = (uint8_t)dst;
  s->repeat = (uint16_t)repeat;
  uint32_t segs = ph->loopSegs;
  s->seg = (int32_t)(((seg % (int)segs) + (int)segs) % (int)segs);
  s->segDelta = (int32_t)(((segDelta % (int)segs) + (int)segs) % (int)segs);
}

/* The op's bits must agree with the peers and buffers it names. */
static int stepOk(const struct mendProgram* p, const struct mendProgStep* s) {
  int recv = !!(s->op & MEND_STEP_RECV), send = !!(s->op & MEND_STEP_SEND);
  int copy = !!(s->op & MEND_STEP_COPY), reduce = !!(s->op & MEND_STEP_REDUCE);
  if (s->op == 0 || s->op > 0xf || s->repeat == 0) return 0;
  if (recv != (s->recvPeer != MEND_PROG_NO_PEER) || send != (s->sendPeer != MEND_PROG_NO_PEER)) return 0;
  if (recv && (s->recvPeer >= p->nPeers || p->peers[s->recvPeer].dir != MEND_RECV)) return 0;
  if (send && (s->sendPeer >= p->nPeers || p->peers[s->sendPeer].dir != MEND_SEND)) return 0;
  if (!recv && !send && !copy) return 0;
  if (reduce && !recv) return 0;
  int needSrc = reduce || !recv;
  if (needSrc != (s->src != MEND_BUF_NONE) || s->src >= MEND_NBUFS) return 0;
  if (copy != (s->dst != MEND_BUF_NONE) || s->dst >= MEND_NBUFS) return 0;
  return 1;
}

ncclResult_t mendProgValidate(const struct mendProgram* p) {
  const char* why = NULL;
  int at = -1;
  if (p->overflow) why = "a table overflowed while building";
  else if (p->nPhases == 0 || p->nPhases > MEND_PROG_MAX_PHASES) why = "bad phase count";
  else if (p->nSteps > MEND_PROG_MAX_STEPS || p->nPeers > MEND_PROG_MAX_PEERS) why = "bad table size";
  int next = 0;
  for (int h = 0; why == NULL && h < p->nPhases; h++) {
    const struct mendProgPhase* ph = p->phases + h;
    if (ph->firstStep != next || ph->loopSegs == 0 || ph->layout > MEND_LAYOUT_BLOCKED) why = "bad phase";
    if (ph->layout == MEND_LAYOUT_BLOCKED && p->nSegMap && p->nSegMap < ph->loopSegs) why = "short segMap";
    next += ph->nSteps;
    for (int i = ph->firstStep; why == NULL && i < next && i < p->nSteps; i++) {
      const struct mendProgStep* s = p->steps + i;
      at = i;
      if (!stepOk(p, s)) why = "step op, peers and buffers disagree";
      else if (s->seg < 0 || (uint32_t)s->seg >= ph->loopSegs) why = "segment out of range";
      else if (s->segDelta < 0 || (uint32_t)s->segDelta >= ph->loopSegs) why = "segment delta out of range";
    }
  }
  if (why == NULL && next != p->nSteps) why = "phases do not cover the steps";
  if (why) {
    WARN("Invalid %s program (step %d): %s", mendAlgoName(p->algo), at, why);
    return ncclInternalError;
  }
  return ncclSuccess;
}

static const char* opName(int op) {
  switch (op) {
  case MEND_OP_SEND: return "send";
  case MEND_OP_RECV: return "recv";
  case MEND_OP_COPY: return "copy";
  case MEND_OP_COPY_SEND: return "copySend";
  case MEND_OP_RECV_SEND: return "recvSend";
  case MEND_OP_RECV_COPY_SEND: return "recvCopySend";
  case MEND_OP_RECV_REDUCE_SEND: return "recvReduceSend";
  case MEND_OP_RECV_REDUCE_COPY: return "recvReduceCopy";
  case MEND_OP_RECV_REDUCE_COPY_SEND: return "recvReduceCopySend";
  default: return "?";
  }
}

void mendProgDump(const struct mendProgram* p, char* buf, size_t len) {
  static const char* bufNames[MEND_NBUFS] = {"-", "send", "recv", "scratch"};
  size_t off = 0;
  if (len == 0) return;
  buf[0] = '\0';
#define APPEND(...) do { if (off < len) off += (size_t)snprintf(buf + off, len - off, __VA_ARGS__); } while (0)
  APPEND("%s program: %d phases, %d steps, %d peers\n", mendAlgoName(p->algo), p->nPhases, p->nSteps, p->nPeers);
  for (int h = 0; h < p->nPhases; h++) {
    const struct mendProgPhase* ph = p->phases + h;
    APPEND(" phase %d: %s, %u segs/loop\n", h, ph->layout ? "blocked" : "chunked", ph->loopSegs);
    for (int i = ph->firstStep; i < ph->firstStep + ph->nSteps && i < p->nSteps; i++) {
      const struct mendProgStep* s = p->steps + i;
      int rp = s->recvPeer == MEND_PROG_NO_PEER ? -1 : p->peers[s->recvPeer].rank;
      int sp = s->sendPeer == MEND_PROG_NO_PEER ? -1 : p->peers[s->sendPeer].rank;
      APPEND("  %-18s from %2d to %2d %s->%s seg %d x%d (+%d)%s%s\n", opName(s->op), rp, sp,
             bufNames[s->src & 3], bufNames[s->dst & 3], s->seg, s->repeat, s->segDelta,
             (s->flags & MEND_STEP_PREOP) ? " pre" : "", (s->flags & MEND_STEP_POSTOP) ? " post" : "");
    }
  }
#undef APPEND
}

const char* mendAlgoName(int algo) {
  switch (algo) {
  case MEND_ALGO_TREE: return "Tree";
  case MEND_ALGO_RING: return "Ring";
  case MEND_ALGO_RD: return "RD";
  case MEND_ALGO_P2P: return "P2P";
  case MEND_ALGO_LOCAL: return "Local";
  default: return "Unknown";
  }
}
