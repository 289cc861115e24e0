/*
 * The host engine: runs programs on host memory, cooperatively, for every work it is given.
 * A step executes only when its input slot is full AND its output slot is free; it then does all
 * of its work at once (no partial state), so one thread can drive the works of every rank of a
 * process, and a work blocked on one connector never stops another.  When a full pass moves
 * nothing, the engine spins (yielding) for MEND_SPIN_US, then sleeps on a doorbell with a short
 * bound, checking abort flags and asynchronous errors every round: 8 ranks on 2 cores progress,
 * and nothing waits forever after an abort.  When the ranks of the host outnumber its CPUs, every
 * idle pass yields, for MEND_SPIN_OVERSUB_US, or MEND_SPIN_LOADED_US while other programs' threads
 * take the CPUs (mendLoadWatchYield).
 */
#include "device/engine.h"
#include "device/host_direct.h"
#include "device/opsig.h"
#include "device/walk.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "enqueue/plan.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "proxy.h"
#include "transport/transport.h"

#define MAX_BELLS 64 /* doorbells watched per run (one per communicator) */

/* ---- walking (device/walk.h, shared with the CUDA kernel) ---- */

static char* bufAt(const struct mendWork* w, int buf, int seg) {
  const struct mendProgram* p = w->prog;
  return mendWalkBufAt(&w->st.walk, p, p->nSegMap ? p->segMap : NULL, &w->args, buf, seg);
}

static void workBegin(struct mendWork* w) {
  memset(&w->st, 0, sizeof(w->st));
  for (int i = 0; i < MEND_PROG_MAX_PEERS; i++) w->st.deps[i] = -1;
  mendWalkBegin(&w->st.walk, w->prog, &w->args);
}

/* ---- posting ---- */

static void ring(mendBell_t* bell) {
  if (bell) mendBellRing(bell);
}

/* A slot was posted on c: a net connector sends it from this thread (proxy.h, MEND_NET_DIRECT); the
 * proxy is rung when that did not happen or left a request in flight. */
static void sendPosted(struct mendConnector* c) {
  if (!mendProxyKick(c)) ring(c->peerBell);
}

/* The data movement of step s once its slots are ready: `in` is the received slot (or NULL),
 * `out` the slot to post (or NULL). */
static void moveData(const struct mendWork* w, const struct mendProgStep* s, int seg, size_t n,
                     const void* in, void* out) {
  const struct mendRedOp* op = &w->args.redop;
  size_t bytes = n * w->args.typeSize;
  char* src = s->src != MEND_BUF_NONE ? bufAt(w, s->src, seg) : NULL;
  char* dst = (s->op & MEND_STEP_COPY) ? bufAt(w, s->dst, seg) : NULL;
  if (s->op & MEND_STEP_REDUCE) {
    mendReduce(op, dst ? dst : out, src, in, n, s->flags);
    if (dst && out) memcpy(out, dst, bytes);
    return;
  }
  const void* from = in ? in : src;
  if (dst && dst != from) {
    if (s->flags) mendReduceCopy(op, dst, from, n, s->flags);
    else memmove(dst, from, bytes); /* in place (AllGather's own block) src may equal dst */
  } else if (dst && s->flags) {
    mendReduceCopy(op, dst, from, n, s->flags); /* one rank: pre/post op in place */
  }
  if (out) {
    if (dst) memcpy(out, dst, bytes);
    else if (s->flags) mendReduceCopy(op, out, from, n, s->flags);
    else memcpy(out, from, bytes);
  }
}

/* A received slot whose byte count is not what this rank expects: the ranks disagree on the operation. */
static int badBytes(const struct mendWork* w, const struct mendConnector* rc, uint64_t got, uint64_t want,
                    ncclResult_t* res) {
  WARN("Rank %d channel %d: received %lu bytes from rank %d where %lu were expected: the ranks disagree "
       "on the operation (count, datatype, root or call order)",
       w->comm->rank, w->channel, (unsigned long)got, rc->peer, (unsigned long)want);
  mendCommSetAsyncError(w->comm, ncclInvalidUsage);
  *res = ncclInvalidUsage;
  return -1;
}

/* The first slot of the work from rc (opsig.h): its last MEND_OPSIG_BYTES must be our signature.
 * 0 when they are, -1 (WARN naming both calls) otherwise. */
static int sigCheck(const struct mendWork* w, const struct mendConnector* rc, const char* in, uint64_t got,
                    ncclResult_t* res) {
  int64_t off = mendOpSigOffset(got, rc->slotBytes);
  union mendOpSigWords theirs;
  if (off >= 0) memcpy(&theirs, in + off, sizeof theirs);
  if (off >= 0 && mendOpSigSame(&theirs.s, &w->args.sig)) return 0;
  *res = mendOpSigMismatch(w->comm, w->channel, rc->peer, &w->args.sig,
                           off >= 0 && theirs.s.magic == MEND_OPSIG_MAGIC ? &theirs.s : NULL, got);
  return -1;
}

/* 1: executed (or nothing to do), 2: moved a signature slot only (the step stays), 0: blocked,
 * -1: error in *res. */
/* The receiver no longer waits for peer's signature: the want words sigScan published go. */
static void sigWantClear(struct mendWork* w, struct mendConnector* rc, int peer) {
  if (!(w->st.sigDone >> (MEND_PROG_MAX_PEERS + peer) & 1)) return;
  for (int i = 0; i < MEND_OPSIG_BYTES / 8; i++) mendFifoStore(&rc->fifo->want[i], 0);
  w->st.sigDone &= ~(1u << (MEND_PROG_MAX_PEERS + peer));
}

/* ---- latency lines (fifo.h) ---- */

/* The latency line holding slot `head` of rc, or NULL: not written for it (yet), or not a line. */
static const struct mendFifoLine* lineIn(const struct mendConnector* rc, uint64_t head) {
  if (rc->kind == MEND_TRANSPORT_NET) return NULL; /* the proxy fills net FIFOs slot by slot */
  const struct mendFifoLine* l = &rc->fifo->line[head % (uint64_t)rc->nSlots];
  if (mendFifoLoad(&l->seq) != head + 1) return NULL;
  return l->bytes <= MEND_FIFO_LINE_BYTES ? l : NULL;
}

/* Where a slot of `posted` bytes is written first: sc's latency line for slot `tail` when it fits
 * (p2p and shm, MEND_SHM_LL), else the slot itself. */
static char* postBuf(struct mendConnector* sc, uint64_t tail, uint64_t posted, char* slot) {
  if (sc->kind == MEND_TRANSPORT_NET || posted > MEND_FIFO_LINE_BYTES || !mendParamShmLl()) return slot;
  return sc->fifo->line[tail % (uint64_t)sc->nSlots].data;
}

/* Post slot `tail` of sc with `posted` bytes written at `buf` (postBuf): a latency line is published
 * first and copied to the slot after, so every reader that does not look at lines sees a plain slot. */
static void post(struct mendConnector* sc, uint64_t tail, uint64_t posted, char* buf, char* slot) {
  if (buf != slot) {
    struct mendFifoLine* l = &sc->fifo->line[tail % (uint64_t)sc->nSlots];
    l->bytes = posted;
    mendFifoStore(&l->seq, tail + 1);
    memcpy(slot, buf, posted);
  }
  sc->fifo->bytes[tail % (uint64_t)sc->nSlots] = posted;
  mendFifoStore(&sc->fifo->tail, tail + 1);
  sendPosted(sc);
}

/* The slot at rc's head when it is full: *in and *got (its bytes); 0 when empty. */
static int slotIn(struct mendConnector* rc, uint64_t head, const char** in, uint64_t* got) {
  const struct mendFifoLine* l = lineIn(rc, head);
  if (l != NULL) {
    *in = l->data;
    *got = l->bytes;
    return 1;
  }
  if (mendFifoLoad(&rc->fifo->tail) <= head) mendProxyKick(rc); /* net: poll the Net from here */
  if (mendFifoLoad(&rc->fifo->tail) <= head) return 0;
  int slot = (int)(head % (uint64_t)rc->nSlots);
  *got = rc->fifo->bytes[slot];
  *in = rc->buff + (size_t)slot * rc->slotBytes;
  return 1;
}

/* ---- single copy (transport/fifo.h, MEND_FIFO_DIRECT; host_direct.c) ---- */

/* Step s of w sends a chunk that the consumer of sc may read from where it is once the step ran,
 * because nothing writes there before the operation ends: a plain send of a send/recv transfer (from
 * the user's buffer or the plan's copy of it), or a send of a ring AllGather, whose data is then in
 * its final place in the output, written once per operation; large enough, to a rank of this host
 * that has welcomed direct slots.  (Not a ring Broadcast: its chain would wait on each hop's read,
 * 1.8-2x slower at 1 MiB where measured.) */
static int directSend(const struct mendWork* w, const struct mendProgStep* s, struct mendConnector* sc, size_t bytes) {
  if (s->flags || (s->op & MEND_STEP_REDUCE) || sc->kind == MEND_TRANSPORT_NET) return 0;
  if (!(s->op == MEND_OP_SEND || (s->op & MEND_STEP_COPY))) return 0; /* a forwarded slot is in no buffer */
  int func = w->args.sig.magic == MEND_OPSIG_MAGIC ? w->args.sig.func : -1;
  int p2p = w->prog->algo == MEND_ALGO_P2P && s->op == MEND_OP_SEND;
  int final = w->prog->algo == MEND_ALGO_RING && func == MEND_FUNC_ALLGATHER;
  if (!(p2p || final) || (int64_t)bytes < mendParamShmDirectMin()) return 0;
  uint64_t ok = mendFifoPeek(&sc->fifo->directOk);
  if (ok == 0) mendDirectIntroduce(sc->fifo); /* the consumer probes with the next slot it takes */
  return ok == 1;
}

static void postDirect(struct mendWork* w, const struct mendProgStep* s, int seg, struct mendConnector* sc,
                       uint64_t tail, char* slot, size_t bytes) {
  char* at = bufAt(w, (s->op & MEND_STEP_COPY) ? s->dst : s->src, seg); /* where the step left the data */
  struct mendFifoDirect d = {.addr = (uint64_t)(uintptr_t)at, .bytes = bytes};
  memcpy(slot, &d, sizeof d);
  sc->fifo->bytes[tail % (uint64_t)sc->nSlots] = MEND_FIFO_DIRECT | bytes;
  mendFifoStore(&sc->fifo->tail, tail + 1);
  sendPosted(sc);
  w->st.directTail[s->sendPeer] = tail + 1;
  w->st.directWait = 1;
}

/* Every direct slot w posted has been read (the consumer moved head past it). */
static int directRead(struct mendWork* w) {
  for (int p = 0; p < w->prog->nPeers; p++)
    if (w->st.directTail[p] && mendFifoLoad(&w->conns[p]->fifo->head) < w->st.directTail[p]) return 0;
  w->st.directWait = 0;
  return 1;
}

static int badDirect(const struct mendWork* w, const struct mendConnector* rc, const char* why, ncclResult_t* res) {
  WARN("Rank %d channel %d: rank %d posted a slot for this rank to read from its memory, but %s", w->comm->rank,
       w->channel, rc->peer, why);
  mendCommSetAsyncError(w->comm, ncclInvalidUsage);
  *res = ncclInvalidUsage;
  return -1;
}

/* The slot at rc's head (`*in`, `*got` bytes) as received: a direct slot has its flag taken off and
 * `*in` pointed at the slot itself (1), after the checks that this rank welcomed it (-1 and *res
 * otherwise); any other slot over a latency line's size lets this rank probe its sender (0). */
static int directIn(const struct mendWork* w, struct mendConnector* rc, uint64_t head, int first, const char** in,
                    uint64_t* got, ncclResult_t* res) {
  if (!(*got & MEND_FIFO_DIRECT)) {
    if (*got > MEND_FIFO_LINE_BYTES && rc->kind != MEND_TRANSPORT_NET && mendFifoPeek(&rc->fifo->directOk) == 0)
      mendDirectProbe(rc->fifo, w->comm->rank, rc->peer);
    return 0;
  }
  *got &= ~MEND_FIFO_DIRECT;
  if (first || rc->kind == MEND_TRANSPORT_NET || mendFifoPeek(&rc->fifo->directOk) != 1)
    return badDirect(w, rc, first ? "it is the operation's first (it must carry the signature)"
                                  : "this rank never said it could", res);
  *in = rc->buff + (size_t)(head % (uint64_t)rc->nSlots) * rc->slotBytes; /* never a latency line */
  return 1;
}

/* Take the direct slot at rc's head (`in`, `got` bytes without the flag) into dst. */
static int takeDirect(const struct mendWork* w, const struct mendConnector* rc, const char* in, uint64_t got,
                      char* dst, ncclResult_t* res) {
  struct mendFifoDirect d;
  memcpy(&d, in, sizeof d);
  if (d.bytes != got) return badDirect(w, rc, "its length differs from the slot's", res);
  if (mendDirectRead(rc->fifo, dst, &d) == 0) return 0;
  WARN("Rank %d channel %d: cannot read %lu bytes at 0x%lx in rank %d's memory: %m", w->comm->rank, w->channel,
       (unsigned long)d.bytes, (unsigned long)d.addr, rc->peer);
  mendCommSetAsyncError(w->comm, ncclSystemError);
  *res = ncclSystemError;
  return -1;
}

/* moveData for a step whose input is the direct slot at rc's head: a receive that copies reads into
 * place (and copies on from there if it also sends a slot); any other step reads into the slot, then
 * runs as usual.  0, or -1 with *res. */
static int moveDirect(const struct mendWork* w, const struct mendProgStep* s, int seg, size_t n,
                      const struct mendConnector* rc, const char* in, uint64_t got, void* out, ncclResult_t* res) {
  int toDst = (s->op & MEND_STEP_COPY) && !(s->op & MEND_STEP_REDUCE) && !s->flags;
  if (!toDst && got > rc->slotBytes) return badDirect(w, rc, "it is larger than a slot", res);
  char* dst = toDst ? bufAt(w, s->dst, seg) : (char*)in;
  if (takeDirect(w, rc, in, got, dst, res) < 0) return -1;
  if (!toDst) moveData(w, s, seg, n, in, out);
  else if (out) memcpy(out, dst, n * w->args.typeSize);
  return 0;
}

/* ---- one step ---- */

static int tryStep(struct mendWork* w, ncclResult_t* res) {
  const struct mendProgStep* s = w->prog->steps + w->st.walk.step;
  int seg = mendWalkSeg(&w->st.walk, w->prog);
  size_t n = mendWalkSegLen(&w->st.walk, w->prog, &w->args, seg);
  if (n == 0) return 1; /* every rank computes the same empty segment and skips it */
  struct mendConnector* rc = (s->op & MEND_STEP_RECV) ? w->conns[s->recvPeer] : NULL;
  struct mendConnector* sc = (s->op & MEND_STEP_SEND) ? w->conns[s->sendPeer] : NULL;
  int sig = w->args.sig.magic != 0;
  int rFirst = rc && sig && !(w->st.sigDone >> s->recvPeer & 1);
  int sFirst = sc && sig && !(w->st.sigDone >> s->sendPeer & 1);
  uint64_t rHead = 0, sTail = 0, got = 0;
  const char* in = NULL;
  char *out = NULL, *slot = NULL;
  size_t bytes = n * w->args.typeSize;
  int direct = 0;
  if (rc) {
    rHead = mendFifoPeek(&rc->fifo->head);
    if (!slotIn(rc, rHead, &in, &got)) {
      if (rFirst && !(w->st.sigDone >> (MEND_PROG_MAX_PEERS + s->recvPeer) & 1)) { /* see sigScan */
        union mendOpSigWords want = {.s = w->args.sig};
        for (int i = 0; i < MEND_OPSIG_BYTES / 8; i++) mendFifoStore(&rc->fifo->want[i], want.w[i]);
        w->st.sigDone |= 1u << (MEND_PROG_MAX_PEERS + s->recvPeer);
      }
      return 0;
    }
    if ((direct = directIn(w, rc, rHead, rFirst, &in, &got, res)) < 0) return -1;
    uint64_t want = bytes;
    if (rFirst) {
      if (sigCheck(w, rc, in, got, res) < 0) return -1;
      want = mendOpSigFramed(bytes, rc->slotBytes);
      /* The signature came alone, the data follows: it did not fit beside it, or the data is for this
       * rank to read from the sender's memory (a framed slot of data is never the signature's size). */
      if (want == 0 || got == MEND_OPSIG_BYTES) {
        if (got != MEND_OPSIG_BYTES) return badBytes(w, rc, got, MEND_OPSIG_BYTES, res);
        w->st.sigDone |= 1u << s->recvPeer;
        sigWantClear(w, rc, s->recvPeer);
        mendFifoStore(&rc->fifo->head, rHead + 1);
        ring(rc->peerBell);
        return 2;
      }
    }
    if (got != want) return badBytes(w, rc, got, want, res);
  }
  int sendDirect = sc && directSend(w, s, sc, bytes);
  uint64_t posted = sFirst && !sendDirect ? mendOpSigFramed(bytes, sc->slotBytes) : bytes;
  if (sc) {
    sTail = mendFifoPeek(&sc->fifo->tail);
    if (sTail - mendFifoLoad(&sc->fifo->head) >= (uint64_t)sc->nSlots) mendProxyKick(sc); /* net: reap sends */
    if (sTail - mendFifoLoad(&sc->fifo->head) >= (uint64_t)sc->nSlots) return 0;
    slot = sc->buff + (size_t)(sTail % (uint64_t)sc->nSlots) * sc->slotBytes;
    if (sFirst && (posted == 0 || sendDirect)) { /* a full first slot, or a direct one: the signature goes alone */
      char* buf = postBuf(sc, sTail, MEND_OPSIG_BYTES, slot);
      memcpy(buf, &w->args.sig, MEND_OPSIG_BYTES);
      post(sc, sTail, MEND_OPSIG_BYTES, buf, slot);
      w->st.sigDone |= 1u << s->sendPeer;
      return 2;
    }
    if (!sendDirect) out = postBuf(sc, sTail, posted, slot);
  }
  if (!direct) moveData(w, s, seg, n, in, out); /* with a direct send, out is NULL: only the copy to dst, if any */
  else if (moveDirect(w, s, seg, n, rc, in, got, out, res) < 0) return -1;
  if (sendDirect) {
    postDirect(w, s, seg, sc, sTail, slot, bytes);
  } else if (sc) {
    if (sFirst) { /* the signature behind the data */
      memcpy(out + posted - MEND_OPSIG_BYTES, &w->args.sig, MEND_OPSIG_BYTES);
      w->st.sigDone |= 1u << s->sendPeer;
    }
    post(sc, sTail, posted, out, slot);
  }
  if (rc) {
    if (rFirst) w->st.sigDone |= 1u << s->recvPeer;
    sigWantClear(w, rc, s->recvPeer); /* no longer waiting */
    mendFifoStore(&rc->fifo->head, rHead + 1);
    ring(rc->peerBell);
  }
  return 1;
}

/* ---- scheduling ---- */

/* deps[i]: the last earlier work using the same connector, so works sharing one run in order. */
static void computeDeps(struct mendWork** works, int nWorks) {
  for (int i = 0; i < nWorks; i++) {
    struct mendWork* w = works[i];
    for (int p = 0; p < w->prog->nPeers; p++) {
      for (int j = i - 1; j >= 0 && w->st.deps[p] < 0; j--) {
        for (int q = 0; q < works[j]->prog->nPeers; q++) {
          if (works[j]->conns[q] == w->conns[p]) w->st.deps[p] = j;
        }
      }
    }
  }
}

static int depsDone(struct mendWork** works, const struct mendWork* w) {
  for (int p = 0; p < w->prog->nPeers; p++) {
    if (w->st.deps[p] >= 0 && !works[w->st.deps[p]]->st.walk.done) return 0;
  }
  return 1;
}

/* Abort or asynchronous error on any communicator of the run. */
static ncclResult_t checkComms(struct ncclComm** comms, int nComms) {
  for (int i = 0; i < nComms; i++) {
    ncclResult_t async = (ncclResult_t)atomic_load_explicit(&comms[i]->asyncResult, memory_order_acquire);
    if (async != ncclSuccess && async != ncclInProgress) {
      WARN("Rank %d: operation stopped by an asynchronous error: %s", comms[i]->rank, ncclGetErrorString(async));
      return async;
    }
    if (mendCommAborted(comms[i])) {
      WARN("Rank %d: operation stopped: the communicator was aborted", comms[i]->rank);
      return ncclInternalError;
    }
  }
  return ncclSuccess;
}

/* A connector that the transport lost, and that a running work's current step waits on: the
 * operation cannot finish.  Only the current step's connectors count: a peer that an earlier step
 * was done with may finish its operation and leave (recursive doubling changes partner every round).
 * Checked only when nothing moved, so data that did arrive is always used first; `report` 0 looks
 * without a WARN (the caller then runs one more pass: see mendEngineRunHost). */
static ncclResult_t checkConns(struct mendWork** works, const int* active, int nActive, int report) {
  for (int a = 0; a < nActive; a++) {
    struct mendWork* w = works[active[a]];
    if (!w->st.started) continue;
    const struct mendProgStep* s = w->prog->steps + w->st.walk.step;
    /* A finished work that waits for its direct slots to be read waits on those connectors. */
    int nLook = w->st.walk.done ? w->prog->nPeers : 2;
    for (int k = 0; k < nLook; k++) {
      int used = w->st.walk.done ? w->st.directTail[k] != 0
                 : k == 0        ? (s->op & MEND_STEP_RECV) != 0
                                 : (s->op & MEND_STEP_SEND) != 0;
      struct mendConnector* c = !used              ? NULL
                                : w->st.walk.done ? w->conns[k]
                                                  : w->conns[k == 0 ? s->recvPeer : s->sendPeer];
      int err = c ? atomic_load_explicit(&c->error, memory_order_acquire) : ncclSuccess;
      if (err == ncclSuccess) continue;
      if (!report) return (ncclResult_t)err;
      WARN("Rank %d: operation stopped: its connection %s rank %d (channel %d) failed: %s", w->comm->rank,
           c->dir == MEND_SEND ? "to" : "from", c->peer, c->channel, ncclGetErrorString((ncclResult_t)err));
      mendCommSetAsyncError(w->comm, (ncclResult_t)err);
      return (ncclResult_t)err;
    }
  }
  return ncclSuccess;
}

/* ---- operations that share no connector ----
 * Ranks that disagree on the operation may never exchange a slot on the connectors they wait on
 * (an AllReduce against an AlltoAll: collective against P2P connectors; Reduce with two different
 * roots: both only receive).  A stalled run therefore looks, every SCAN_NS, at the connectors of its
 * communicators that none of its works uses:
 *   - a received slot waiting there is a peer's first slot of some work: if it is for the collective
 *     count of one of ours, the peer runs that count as another operation;
 *   - the signature a consumer waits with (fifo->want, seen by both ends on p2p and shm): if the
 *     peer waits there for the collective count of one of ours, likewise.
 * Send/receive signatures carry no collective count and are never judged this way. */
#define SCAN_NS (50 * 1000000ull)  /* stalled this long before a scan, then between scans */
#define LATE_NS (1000 * 1000000ull) /* stalled this long before our receives judge a peer's collective */

static int usedBy(struct mendWork** works, int nWorks, const struct mendConnector* c) {
  for (int i = 0; i < nWorks; i++)
    for (int p = 0; p < works[i]->prog->nPeers; p++)
      if (works[i]->conns[p] == c) return 1;
  return 0;
}

/* Our collective that `theirs` contradicts (NULL: none).  A peer's slot, or the receive it waits in,
 * for a collective count at or before one of our collectives now running is a mismatch: we passed that
 * count without it.  A pending send's count says nothing (it may wait for a receive after our
 * collective); a peer *waiting* in a receive called at or before our count cannot reach our collective
 * before we send to it. */
static const struct mendOpSig* ourOp(struct mendWork** works, int nWorks, const struct ncclComm* comm,
                                     const struct mendOpSig* theirs, int waiting, int late) {
  if (theirs->magic != MEND_OPSIG_MAGIC || (theirs->func == MEND_FUNC_SENDRECV && !waiting)) return NULL;
  const struct mendOpSig *found = NULL, *recv = NULL;
  for (int i = 0; i < nWorks; i++) {
    const struct mendOpSig* s = &works[i]->args.sig;
    if (works[i]->comm != comm || s->magic != MEND_OPSIG_MAGIC) continue;
    if (mendOpSigSame(s, theirs)) return NULL; /* ours: one of our works will take it */
    if (s->func != MEND_FUNC_SENDRECV && s->opCount >= theirs->opCount && (!found || s->opCount < found->opCount))
      found = s;
    if (s->func == MEND_FUNC_SENDRECV && s->opCount <= theirs->opCount) recv = s;
  }
  /* Only sends and receives of ours, called before the collective the peer is in: it cannot send to us
   * before that collective ends, which needs us.  Judged late (LATE_NS): data of a send it made before
   * that collective may still be on its way on another connection. */
  return found ? found : (late && theirs->func != MEND_FUNC_SENDRECV ? recv : NULL);
}

/* One connector nobody of this run uses: mismatch when it shows a peer's operation of our count. */
static ncclResult_t scanConn(struct mendWork** works, int nWorks, struct ncclComm* comm, struct mendConnector* c,
                             int late) {
  union mendOpSigWords theirs = {.w = {0}};
  if (c->dir == MEND_RECV) {
    uint64_t head = mendFifoPeek(&c->fifo->head);
    if (mendFifoLoad(&c->fifo->tail) <= head) return ncclSuccess;
    int slot = (int)(head % (uint64_t)c->nSlots);
    int64_t off = mendOpSigOffset(c->fifo->bytes[slot], c->slotBytes);
    if (off < 0) return ncclSuccess;
    memcpy(&theirs, c->buff + (size_t)slot * c->slotBytes + off, sizeof theirs);
  } else {
    for (int i = 0; i < MEND_OPSIG_BYTES / 8; i++) theirs.w[i] = mendFifoLoad(&c->fifo->want[i]);
  }
  const struct mendOpSig* mine = ourOp(works, nWorks, comm, &theirs.s, c->dir == MEND_SEND, late);
  if (mine == NULL || mendOpSigSame(mine, &theirs.s)) return ncclSuccess;
  return mendOpSigMismatch(comm, c->channel, c->peer, mine, &theirs.s, 0);
}

static ncclResult_t sigScan(struct mendWork** works, int nWorks, struct ncclComm** comms, int nComms, int late) {
  for (int i = 0; i < nComms; i++) {
    struct ncclComm* comm = comms[i];
    if (comm->planner == NULL) continue;
    const struct mendConnOps* ops = comm->planner->connOps;
    for (int ch = 0; ch < comm->nChannels; ch++)
      for (int peer = 0; peer < comm->nRanks; peer++)
        for (int k = 0; k < MEND_NCONN_ENGINE * 2 && peer != comm->rank; k++) {
          struct mendConnector* c = ops->get(comm, ch, peer, k % 2 ? MEND_RECV : MEND_SEND, k / 2);
          if (c == NULL || usedBy(works, nWorks, c)) continue;
          MENDCHECK(scanConn(works, nWorks, comm, c, late));
        }
  }
  return ncclSuccess;
}

static void reportStall(struct mendWork** works, int nWorks, int64_t ms) {
  int shown = 0;
  WARN("Host engine: no progress for %ld ms; stuck steps follow", (long)ms);
  for (int i = 0; i < nWorks && shown < 8; i++) {
    const struct mendWork* w = works[i];
    if (w->st.walk.done && w->st.directWait) {
      for (int p = 0; p < w->prog->nPeers; p++)
        if (w->st.directTail[p])
          WARN("  rank %d ch %d op %d: done, waiting for rank %d to read its data (head %lu, its last slot %lu)",
               w->comm->rank, w->channel, w->opIndex, w->conns[p]->peer,
               (unsigned long)mendFifoLoad(&w->conns[p]->fifo->head), (unsigned long)w->st.directTail[p]);
      shown++;
    }
    if (w->st.walk.done) continue;
    const struct mendProgStep* s = w->prog->steps + w->st.walk.step;
    struct mendConnector* rc = (s->op & MEND_STEP_RECV) && w->st.started ? w->conns[s->recvPeer] : NULL;
    struct mendConnector* sc = (s->op & MEND_STEP_SEND) && w->st.started ? w->conns[s->sendPeer] : NULL;
    WARN("  rank %d ch %d op %d %s%s: phase %d step %d rep %d at %zu/%zu; recv from %d head %lu tail %lu; "
         "send to %d head %lu tail %lu", w->comm->rank, w->channel, w->opIndex, mendAlgoName(w->prog->algo),
         w->st.started ? "" : " (waiting for earlier works)", w->st.walk.phase, w->st.walk.step, w->st.walk.rep,
         (size_t)w->st.walk.loopBase, w->args.count, rc ? rc->peer : -1,
         rc ? (unsigned long)mendFifoLoad(&rc->fifo->head) : 0, rc ? (unsigned long)mendFifoLoad(&rc->fifo->tail) : 0,
         sc ? sc->peer : -1, sc ? (unsigned long)mendFifoLoad(&sc->fifo->head) : 0,
         sc ? (unsigned long)mendFifoLoad(&sc->fifo->tail) : 0);
    shown++;
  }
}

/* A send of a send/recv transfer: pass() runs these first.  Where the peer reads the data from this
 * rank's memory (MEND_FIFO_DIRECT) a send only posts addresses, and a receive run before it would keep
 * the peer waiting for them while this rank copies (AlltoAll at 2 ranks, 4 MiB: each rank read its
 * peer's half, then posted its own, one after the other). */
static int sendFirst(const struct mendWork* w) {
  return w->prog->algo == MEND_ALGO_P2P && w->prog->steps[0].op == MEND_OP_SEND;
}

/* One pass over the active works; returns how many steps ran, or -1 with *res on error.  With
 * `sends` (some work is a sendFirst one), two sweeps: those works, then the others. */
static int64_t pass(struct mendWork** works, int* active, int* nActive, int sends, ncclResult_t* res) {
  int64_t moved = 0;
  for (int sweep = sends ? 0 : 1; sweep < 2; sweep++) {
    for (int a = 0; a < *nActive; a++) {
      struct mendWork* w = works[active[a]];
      if (sends && sendFirst(w) != (sweep == 0)) continue;
      if (!w->st.started) {
        if (!depsDone(works, w)) continue;
        w->st.started = 1;
      }
      int r;
      while (!w->st.walk.done && (r = tryStep(w, res)) != 0) {
        if (r < 0) return -1;
        moved++;
        if (r == 2) continue; /* a signature slot moved; the step itself is still to run */
        w->st.steps++;
        mendWalkAdvance(&w->st.walk, w->prog, &w->args);
      }
      if (w->st.walk.done) {
        if (w->st.directWait && !directRead(w)) continue; /* its data is still to be read */
        active[a--] = active[--*nActive];
        moved++;
      }
    }
  }
  return moved;
}

/* Idle handling after a pass that moved nothing: spin, then sleep on a doorbell.  While every rank of
 * the host has a CPU, the spin polls with a pause instruction and yields (and reads the clock, checks
 * the communicators) only every POLLS_PER_YIELD idle passes: an 8-byte hop takes a few hundred
 * nanoseconds, about what one sched_yield costs here (365 ns).  Oversubscribed, every idle pass yields
 * (the rank waited for needs this core). */
#define POLLS_PER_YIELD 64
#define SHARED_YIELD_NS 2000 /* a bare yield costs a few hundred ns here; one that let another thread run, more */

/* Oversubscribed, the crowd's ranks hand the CPUs to each other by yielding (MEND_SPIN_OVERSUB_US):
 * a sleep and its wake-up cost 30 us and more, a yield a few.  But a thread of another program that
 * gets a CPU keeps it for a scheduler slice (1-4 ms) when no rank wakes up to preempt it, as a
 * sleeping rank would: 8 ranks on 2 CPUs, 8-byte AllReduce, 17-28 us yielding against 68-93
 * sleeping, but with two simulations at nice 19 on the CPUs, 1.4 ms against 0.2.  Such slices show as
 * yields over 1 ms, about 40 a second a rank then, about 3 without them (our own helper threads, the
 * kernel's), scattered.  So LOADED_COUNT long yields within LOADED_WINDOW_NS make a thread loaded
 * (MEND_SPIN_LOADED_US) for LOADED_HOLD_NS, and it starts loaded for LOADED_CLEAR_NS: a short job
 * on a busy host never yields its CPUs away. */
#define LOADED_YIELD_NS 1000000ull
#define LOADED_COUNT 4
#define LOADED_WINDOW_NS 100000000ull
#define LOADED_CLEAR_NS 250000000ull
#define LOADED_HOLD_NS 5000000000ull

struct loadWatch {
  uint64_t longAt[LOADED_COUNT]; /* the last long yields, a ring */
  int next;
  uint64_t until; /* loaded until then (0: not looked yet) */
};
static __thread struct loadWatch loadWatch;

void mendLoadWatchReset(void) { memset(&loadWatch, 0, sizeof(loadWatch)); }

int mendLoadWatchLoaded(uint64_t now) {
  if (loadWatch.until == 0) loadWatch.until = now + LOADED_CLEAR_NS;
  return now < loadWatch.until;
}

void mendLoadWatchYield(uint64_t start, uint64_t took) {
  struct loadWatch* w = &loadWatch;
  if (took < LOADED_YIELD_NS) return;
  uint64_t at = start + took;
  w->longAt[w->next] = at;
  w->next = (w->next + 1) % LOADED_COUNT;
  uint64_t oldest = w->longAt[w->next]; /* the first of the last LOADED_COUNT (0: fewer yet) */
  if (oldest == 0 || at - oldest > LOADED_WINDOW_NS) return;
  int was = mendLoadWatchLoaded(at);
  w->until = at + LOADED_HOLD_NS;
  if (!was)
    INFO(NCCL_INIT, "Host engine: other programs' threads take this CPU (%d yields over %llu ms within %llu ms): "
       "spin %lld us before sleeping (MEND_SPIN_LOADED_US) for %llu s", LOADED_COUNT, LOADED_YIELD_NS / 1000000,
       LOADED_WINDOW_NS / 1000000, (long long)mendParamSpinLoadedUs(), LOADED_HOLD_NS / 1000000000);
}

struct idle {
  uint64_t since, warnAt; /* start of the idle period; next stall report */
  uint64_t scanAt;        /* next sigScan */
  int64_t spinNs, stallMs; /* MEND_SPIN_US or MEND_SPIN_OVERSUB_US, MEND_STALL_WARN_MS */
  int64_t loadedNs;        /* MEND_SPIN_LOADED_US: oversubscribed, while other programs take the CPUs */
  int oversub;            /* more ranks on this host than CPUs */
  int spread;             /* MEND_SPREAD and not oversubscribed: look for ranks sharing this CPU */
  int armed;              /* the spin is over: the bells are read before each pass (a ring after the read
                           * is never lost); while spinning they are not (a peer's ring then costs it no
                           * wait for this core's copy of the bell's cache line) */
  uint32_t polls;         /* idle passes of this idle period */
  int next;               /* bell to sleep on next */
};

static inline void cpuRelax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield" ::: "memory");
#endif
}

/* 1: a short poll (a pause, then the next pass); 0: time for idleWait. */
static int idlePoll(struct idle* id) {
  if (id->since == 0 || id->oversub || id->spinNs <= 0 || (++id->polls % POLLS_PER_YIELD) == 0) return 0;
  cpuRelax();
  return 1;
}

static void idleWait(struct idle* id, struct mendWork** works, int nWorks, struct ncclComm** comms, int nBells,
                     const uint32_t* seen) {
  uint64_t now = mendTimeNs();
  if (id->since == 0) {
    id->since = now;
    id->warnAt = id->stallMs > 0 ? now + (uint64_t)id->stallMs * 1000000ull : UINT64_MAX;
    id->scanAt = now + SCAN_NS;
  }
  int64_t spinNs = id->oversub && mendLoadWatchLoaded(now) ? id->loadedNs : id->spinNs;
  if ((int64_t)(now - id->since) < spinNs) {
    if (id->oversub || id->polls > 0) {
      sched_yield(); /* not on the first idle pass of a period (idlePoll) */
      /* A yield that took long ran another thread on this CPU: maybe a rank of this host that need
       * not be here (transport/spread.c).  Oversubscribed, sharing is expected, but not a slice of
       * another program's (mendLoadWatchYield). */
      if (id->oversub) mendLoadWatchYield(now, mendTimeNs() - now);
      else if (id->spread && mendTimeNs() - now > SHARED_YIELD_NS)
        for (int i = 0; i < nBells; i++)
          if (mendSpreadCheck(comms[i])) break; /* moved: one communicator's peers were enough */
    } else {
      cpuRelax();
    }
    return;
  }
  if (now >= id->warnAt) {
    reportStall(works, nWorks, (int64_t)((now - id->since) / 1000000));
    id->warnAt = now + (uint64_t)id->stallMs * 1000000ull;
  }
  if (!id->armed) { /* read the bells before one more pass, then sleep if it moves nothing */
    id->armed = 1;
    return;
  }
  if (nBells > 0 && comms[id->next]->bell != NULL) {
    mendBellWait(comms[id->next]->bell, seen[id->next], nBells == 1 ? 1000 : 100);
    id->next = (id->next + 1) % nBells;
  } else {
    sched_yield();
  }
}

/* Some communicator of the run has more ranks on a host than the host's CPUs: comm->cpuCrowd, from
 * every rank's report at init (ranks bound one per CPU are not crowded, though each may run on one
 * CPU only); a communicator made without that exchange (the loopback world) compares its local
 * ranks with this process's CPUs. */
static int oversubscribed(struct ncclComm** comms, int nComms) {
  for (int i = 0; i < nComms; i++) {
    double crowd = comms[i]->cpuCrowd;
    if (crowd > 1.0 || (crowd <= 0 && comms[i]->nLocalRanks > mendCpusAvailable())) return 1;
  }
  return 0;
}

ncclResult_t mendEngineRunHost(struct mendWork** works, int nWorks, struct ncclComm** comms, int nComms) {
  ncclResult_t res = ncclSuccess;
  int *active = NULL, activeLocal[64];
  MENDCHECK(MENDLOCALCALLOC(active, (size_t)nWorks + 1, activeLocal));
  int nActive = 0;
  for (int i = 0; i < nWorks; i++) workBegin(works[i]);
  computeDeps(works, nWorks);
  int sends = 0;
  for (int i = 0; i < nWorks; i++) {
    if (!works[i]->st.walk.done) active[nActive++] = i;
    sends |= sendFirst(works[i]);
  }
  int nBells = nComms < MAX_BELLS ? nComms : MAX_BELLS;
  uint32_t seen[MAX_BELLS];
  struct idle id = {.oversub = oversubscribed(comms, nComms), .stallMs = mendParamStallWarnMs()};
  id.spinNs = (id.oversub ? mendParamSpinOversubUs() : mendParamSpinUs()) * 1000;
  id.loadedNs = mendParamSpinLoadedUs() * 1000;
  id.spread = !id.oversub && mendParamSpread();
  for (int i = 0; id.spread && i < nBells; i++) mendSpreadPublish(comms[i]);
  /* An operation is complete once every step ran: its sends sit in FIFO slots the transport
   * delivers on its own (finalize and destroy wait for them, mendTransportDrain). */
  while (nActive > 0) {
    for (int b = 0; b < nBells && id.armed; b++) seen[b] = comms[b]->bell ? mendBellRead(comms[b]->bell) : 0;
    int64_t moved = pass(works, active, &nActive, sends, &res);
    if (moved < 0) goto exit;
    if (moved > 0) {
      id.since = 0;
      id.polls = 0;
      id.armed = 0;
      continue;
    }
    if (nActive == 0) break;
    if (checkConns(works, active, nActive, 0) != ncclSuccess) {
      /* A peer left after the pass looked at its connector: what it posted before it left (its last
       * tail store precedes its bye, which precedes the error flag read here) is used first. */
      moved = pass(works, active, &nActive, sends, &res);
      if (moved < 0) goto exit;
      if (moved > 0 || nActive == 0) {
        id.since = 0;
        continue;
      }
      MENDCHECKGOTO(checkConns(works, active, nActive, 1), res, exit);
    }
    if (idlePoll(&id)) continue;
    MENDCHECKGOTO(checkComms(comms, nComms), res, exit);
    if (id.since != 0 && mendTimeNs() >= id.scanAt) {
      MENDCHECKGOTO(sigScan(works, nWorks, comms, nComms, mendTimeNs() - id.since >= LATE_NS), res, exit);
      id.scanAt = mendTimeNs() + SCAN_NS;
    }
    idleWait(&id, works, nWorks, comms, nBells, seen);
  }
exit:
  MENDLOCALFREE(active, activeLocal);
  return res;
}
