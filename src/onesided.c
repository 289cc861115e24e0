/*
 * One-sided operations of NCCL 2.29 in host mode: ncclPutSignal, ncclSignal, ncclWaitSignal (the
 * design is in onesided.h; windows in window.c; the receiver in onesided_recv.c).
 *
 * Stream semantics are host mode's: the call runs on the calling thread, in program order with the
 * communicator's other operations, and returns once its message is in the connector's FIFO (for a
 * net peer the proxy sends it, as for every other operation); localbuff may be reused at once.
 * The peer's receiver drains its RMA connectors on its own, so puts never wait for the target to
 * call anything.  Inside a group they are refused (the group's collectives run at ncclGroupEnd,
 * a put cannot be ordered among them).  Device mode has no one-sided path yet.
 *
 * Every argument is checked (ncclInvalidArgument with a WARN): communicator, stream, peer, window
 * (a live window of this communicator), the range [peerWinOffset, + count elements) inside the
 * peer's registered size, sigIdx below MEND_RMA_SIGNALS, ctx below config.numRmaCtx (default 1),
 * flags 0.  Using one-sided calls before any window registration, inside a group, in device mode or
 * on a suspended communicator is ncclInvalidUsage.
 */
#include <sched.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "checks.h"
#include "comm.h"
#include "device/reduce.h"
#include "group.h"
#include "misc/bell.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "onesided.h"
#include "transport/transport.h"

/* The communicator can run a one-sided call now. */
static ncclResult_t checkUsable(struct ncclComm* comm, const char* api) {
  int state = atomic_load(&comm->state);
  MENDARGCHECK(comm->hostMode, ncclInvalidUsage, "%s: Mend has no one-sided path in device mode yet", api);
  MENDARGCHECK(state == MEND_COMM_READY && !mendCommAborted(comm), ncclInvalidUsage,
               "%s: communicator %p is not usable (state %d, aborted %d)", api, (void*)comm, state,
               mendCommAborted(comm));
  MENDARGCHECK(!atomic_load(&comm->suspended), ncclInvalidUsage,
               "%s: communicator %p is suspended (ncclCommResume first)", api, (void*)comm);
  MENDARGCHECK(mendGroupDepth() == 0, ncclInvalidUsage,
               "%s: not allowed inside ncclGroupStart/ncclGroupEnd in host mode (it runs at the call, the group's "
               "operations at ncclGroupEnd)", api);
  MENDARGCHECK(comm->rma != NULL && comm->rma->connected, ncclInvalidUsage,
               "%s: communicator %p has no window: register one (ncclCommWindowRegister) first", api, (void*)comm);
  return ncclSuccess;
}

/* What every one-sided call checks: the communicator, its stream, a peer, signal and context. */
static ncclResult_t checkCommon(struct ncclComm* comm, cudaStream_t stream, int peer, int sigIdx, int ctx,
                                unsigned int flags, const char* api) {
  MENDCHECK(mendCommCheck(comm, api));
  MENDARGCHECK(!comm->hostMode || stream == NULL, ncclInvalidArgument,
               "%s: stream %p must be NULL: communicator %p runs in host mode", api, (void*)stream, (void*)comm);
  MENDARGCHECK(peer >= 0 && peer < comm->nRanks, ncclInvalidArgument, "%s: invalid peer %d (nranks %d)", api, peer,
               comm->nRanks);
  MENDARGCHECK(sigIdx >= 0, ncclInvalidArgument, "%s: invalid sigIdx %d", api, sigIdx);
  MENDARGCHECK(ctx >= 0, ncclInvalidArgument, "%s: invalid ctx %d", api, ctx);
  MENDARGCHECK(flags == 0, ncclInvalidArgument, "%s: flags 0x%x are reserved and must be 0", api, flags);
  return ncclSuccess;
}

/* sigIdx and ctx within this communicator's bounds (after checkUsable: comm->rma exists). */
static ncclResult_t checkSignal(struct ncclComm* comm, int sigIdx, int ctx, const char* api) {
  MENDARGCHECK(sigIdx < comm->rma->nSig, ncclInvalidArgument, "%s: sigIdx %d out of range (MEND_RMA_SIGNALS %d)", api,
               sigIdx, comm->rma->nSig);
  MENDARGCHECK(ctx < comm->rma->nCtx, ncclInvalidArgument, "%s: ctx %d out of range (numRmaCtx %d)", api, ctx,
               comm->rma->nCtx);
  return ncclSuccess;
}

/* Wait until slot `tail` of c is free; abort, a failed connector or a lost peer end the wait. */
static ncclResult_t waitSlot(struct ncclComm* comm, struct mendConnector* c, uint64_t tail, const char* api) {
  int64_t start = mendTimeMs(), warnMs = mendParamStallWarnMs();
  int warned = 0;
  for (;;) {
    uint32_t seen = mendBellRead(comm->bell);
    if (tail - mendFifoLoad(&c->fifo->head) < (uint64_t)c->nSlots) return ncclSuccess;
    MENDARGCHECK(!mendCommAborted(comm), ncclInternalError, "%s: communicator %p was aborted while rank %d sent to %d",
                 api, (void*)comm, comm->rank, c->peer);
    int err = atomic_load(&c->error);
    if (err != ncclSuccess) {
      WARN("%s: the one-sided connection from rank %d to rank %d failed (%s)", api, comm->rank, c->peer,
           ncclGetErrorString((ncclResult_t)err));
      return (ncclResult_t)err;
    }
    if (!warned && warnMs > 0 && mendTimeMs() - start > warnMs) {
      WARN("%s: rank %d has waited %lld ms for rank %d to drain its one-sided messages", api, comm->rank,
           (long long)(mendTimeMs() - start), c->peer);
      warned = 1;
    }
    mendBellWait(comm->bell, seen, 1000);
  }
}

/* Send one message to peer: the header, then `bytes` of data, slot after slot. */
static ncclResult_t sendMsg(struct ncclComm* comm, int peer, const struct mendRmaHdr* hdr, const char* data,
                            const char* api) {
  struct mendConnector* c = mendTransportGetConn(comm, 0, peer, MEND_SEND, MEND_CONN_RMA);
  MENDARGCHECK(c != NULL && c->slotBytes > sizeof(*hdr), ncclInternalError,
               "%s: rank %d has no one-sided connection to rank %d", api, comm->rank, peer);
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&comm->rma->sendLock);
  uint64_t tail = mendFifoPeek(&c->fifo->tail), off = 0;
  for (int first = 1; first || off < hdr->bytes; first = 0) {
    MENDCHECKGOTO(waitSlot(comm, c, tail, api), res, unlock);
    int s = (int)(tail % (uint64_t)c->nSlots);
    char* slot = c->buff + (size_t)s * c->slotBytes;
    size_t n = 0;
    if (first) {
      memcpy(slot, hdr, sizeof(*hdr));
      n = sizeof(*hdr);
    }
    size_t take = c->slotBytes - n;
    if (take > hdr->bytes - off) take = (size_t)(hdr->bytes - off);
    if (take) memcpy(slot + n, data + off, take);
    off += take;
    c->fifo->bytes[s] = n + take;
    mendFifoStore(&c->fifo->tail, ++tail);
    if (c->peerBell) mendBellRing(c->peerBell);
  }
unlock:
  pthread_mutex_unlock(&comm->rma->sendLock);
  return res;
}

/* A put or signal to oneself: a copy into the window, and the signal. */
static void selfMsg(struct ncclComm* comm, struct mendWindow* w, const struct mendRmaHdr* hdr, const void* data) {
  struct mendRma* rma = comm->rma;
  pthread_mutex_lock(&rma->lock);
  if (hdr->bytes) memmove((char*)w->userPtr + hdr->offset, data, (size_t)hdr->bytes);
  rma->arrived[mendRmaSigIndex(rma, comm->rank, hdr->ctx, hdr->sigIdx)]++;
  pthread_cond_broadcast(&rma->cond);
  pthread_mutex_unlock(&rma->lock);
}

/* Route a checked message (w: the window, for a put). */
static ncclResult_t postMsg(struct ncclComm* comm, int peer, struct mendWindow* w, const struct mendRmaHdr* hdr,
                            const void* data, const char* api) {
  mendCommInflight(comm, 1);
  ncclResult_t res = ncclSuccess;
  if (peer == comm->rank) selfMsg(comm, w, hdr, data);
  else res = sendMsg(comm, peer, hdr, data, api);
  mendCommInflight(comm, -1);
  return res;
}

/* The window and range of a put: a live window of comm and [offset, offset + bytes) in peer's size. */
static ncclResult_t checkWindow(struct ncclComm* comm, ncclWindow_t peerWin, int peer, size_t offset, size_t bytes,
                                struct mendWindow** out, const char* api) {
  struct mendRma* rma = comm->rma;
  pthread_mutex_lock(&rma->lock);
  struct mendWindow* w = mendRmaFindWindow(rma, peerWin);
  uint64_t size = w ? w->peerSize[peer] : 0;
  pthread_mutex_unlock(&rma->lock);
  MENDARGCHECK(w != NULL, ncclInvalidArgument, "%s: window %p is not a live window of communicator %p", api,
               (void*)peerWin, (void*)comm);
  MENDARGCHECK(offset <= size && bytes <= size - offset, ncclInvalidArgument,
               "%s: %zu bytes at offset %zu do not fit rank %d's window of %llu bytes", api, bytes, offset, peer,
               (unsigned long long)size);
  *out = w;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclPutSignal, const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
         cudaStream_t stream);
ncclResult_t pncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                            ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
                            ncclComm_t comm, cudaStream_t stream) {
  const char* api = "ncclPutSignal";
  MENDCHECK(checkCommon(comm, stream, peer, sigIdx, ctx, flags, api));
  MENDARGCHECK((int)datatype >= 0 && (int)datatype < ncclNumTypes, ncclInvalidArgument,
               "%s: invalid datatype %d (valid: 0..%d)", api, (int)datatype, ncclNumTypes - 1);
  MENDARGCHECK(count == 0 || localbuff != NULL, ncclInvalidArgument, "%s: localbuff is NULL with count %zu", api,
               count);
  size_t ts = mendTypeSize(datatype);
  MENDARGCHECK(count <= SIZE_MAX / ts, ncclInvalidArgument, "%s: count %zu overflows", api, count);
  MENDCHECK(checkUsable(comm, api));
  MENDCHECK(checkSignal(comm, sigIdx, ctx, api));
  struct mendWindow* w = NULL;
  MENDCHECK(checkWindow(comm, peerWin, peer, peerWinOffset, count * ts, &w, api));
  struct mendRmaHdr hdr = {.magic = MEND_RMA_MAGIC, .kind = MEND_RMA_PUT, .seq = w->seq, .offset = peerWinOffset,
                           .bytes = count * ts, .sigIdx = sigIdx, .ctx = ctx};
  return postMsg(comm, peer, w, &hdr, localbuff, api);
}

NCCL_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
         cudaStream_t stream);
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream) {
  const char* api = "ncclSignal";
  MENDCHECK(checkCommon(comm, stream, peer, sigIdx, ctx, flags, api));
  MENDCHECK(checkUsable(comm, api));
  MENDCHECK(checkSignal(comm, sigIdx, ctx, api));
  struct mendRmaHdr hdr = {.magic = MEND_RMA_MAGIC, .kind = MEND_RMA_SIGNAL, .sigIdx = sigIdx, .ctx = ctx};
  return postMsg(comm, peer, NULL, &hdr, NULL, api);
}

/* The descriptors are all met: for each, the signals not consumed yet cover every descriptor on the
 * same signal together. */
static int signalsMet(const struct mendRma* rma, int nDesc, const ncclWaitSignalDesc_t* d) {
  for (int i = 0; i < nDesc; i++) {
    size_t k = mendRmaSigIndex(rma, d[i].peer, d[i].ctx, d[i].sigIdx);
    uint64_t need = 0;
    for (int j = 0; j < nDesc; j++)
      if (mendRmaSigIndex(rma, d[j].peer, d[j].ctx, d[j].sigIdx) == k) need += (uint64_t)d[j].opCnt;
    if (rma->arrived[k] - rma->consumed[k] < need) return 0;
  }
  return 1;
}

/* Why a wait cannot go on (rma->lock held), or ncclSuccess. */
static ncclResult_t waitBroken(struct ncclComm* comm, int nDesc, const ncclWaitSignalDesc_t* d) {
  struct mendRma* rma = comm->rma;
  MENDARGCHECK(!mendCommAborted(comm) && !atomic_load(&rma->stop), ncclInternalError,
               "ncclWaitSignal: communicator %p was aborted while rank %d waited", (void*)comm, comm->rank);
  MENDARGCHECK(rma->error == ncclSuccess, (ncclResult_t)rma->error,
               "ncclWaitSignal: rank %d refused a one-sided message earlier (%s; see the WARN then)", comm->rank,
               ncclGetErrorString((ncclResult_t)rma->error));
  for (int i = 0; i < nDesc; i++) {
    if (d[i].peer == comm->rank) continue;
    struct mendConnector* c = mendTransportGetConn(comm, 0, d[i].peer, MEND_RECV, MEND_CONN_RMA);
    int err = c ? atomic_load(&c->error) : ncclInternalError;
    MENDARGCHECK(err == ncclSuccess, (ncclResult_t)err,
                 "ncclWaitSignal: rank %d waits for signal %d (ctx %d) from rank %d, whose connection failed (%s)",
                 comm->rank, d[i].sigIdx, d[i].ctx, d[i].peer, ncclGetErrorString((ncclResult_t)err));
  }
  return ncclSuccess;
}

/* Under rma->lock: consume the signals when every descriptor is met (1), else 0. */
static int takeSignals(struct mendRma* rma, int nDesc, const ncclWaitSignalDesc_t* d) {
  if (!signalsMet(rma, nDesc, d)) return 0;
  for (int i = 0; i < nDesc; i++) rma->consumed[mendRmaSigIndex(rma, d[i].peer, d[i].ctx, d[i].sigIdx)] += d[i].opCnt;
  return 1;
}

/* Block until every descriptor is met, then consume its signals.  The waiter drains the connectors
 * itself while it spins (MEND_SPIN_US after the last progress), then sleeps on the receiver's
 * condition with a 1 ms bound. */
static ncclResult_t waitSignals(struct ncclComm* comm, int nDesc, const ncclWaitSignalDesc_t* d) {
  struct mendRma* rma = comm->rma;
  ncclResult_t res = ncclSuccess;
  int64_t start = mendTimeMs(), warnMs = mendParamStallWarnMs(), spinNs = mendParamSpinUs() * 1000;
  uint64_t lastMove = mendTimeNs();
  int warned = 0, done = 0;
  while (!done && res == ncclSuccess) {
    if (mendRmaDrainAll(comm)) lastMove = mendTimeNs();
    pthread_mutex_lock(&rma->lock);
    done = takeSignals(rma, nDesc, d);
    if (!done) res = waitBroken(comm, nDesc, d);
    if (!done && res == ncclSuccess && mendTimeNs() - lastMove > (uint64_t)spinNs) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 1000 * 1000;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&rma->cond, &rma->lock, &ts);
    }
    pthread_mutex_unlock(&rma->lock);
    if (!done && res == ncclSuccess && mendTimeNs() - lastMove <= (uint64_t)spinNs) sched_yield();
    if (!warned && warnMs > 0 && mendTimeMs() - start > warnMs) {
      WARN("ncclWaitSignal: rank %d has waited %lld ms for %d signal descriptor(s) (first: %d from rank %d, "
           "sigIdx %d, ctx %d)", comm->rank, (long long)(mendTimeMs() - start), nDesc, d[0].opCnt, d[0].peer,
           d[0].sigIdx, d[0].ctx);
      warned = 1;
    }
  }
  return res;
}

NCCL_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
         cudaStream_t stream);
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm, cudaStream_t stream) {
  const char* api = "ncclWaitSignal";
  MENDCHECK(mendCommCheck(comm, api));
  MENDARGCHECK(nDesc >= 0, ncclInvalidArgument, "%s: invalid nDesc %d", api, nDesc);
  MENDARGCHECK(nDesc == 0 || signalDescs != NULL, ncclInvalidArgument, "%s: signalDescs is NULL with nDesc %d", api,
               nDesc);
  for (int i = 0; i < nDesc; i++) {
    const ncclWaitSignalDesc_t* d = &signalDescs[i];
    MENDARGCHECK(d->opCnt >= 0, ncclInvalidArgument, "%s: descriptor %d: invalid opCnt %d", api, i, d->opCnt);
    MENDCHECK(checkCommon(comm, stream, d->peer, d->sigIdx, d->ctx, 0, api));
  }
  MENDCHECK(checkCommon(comm, stream, comm->rank, 0, 0, 0, api)); /* the stream, even with no descriptor */
  MENDCHECK(checkUsable(comm, api));
  for (int i = 0; i < nDesc; i++) MENDCHECK(checkSignal(comm, signalDescs[i].sigIdx, signalDescs[i].ctx, api));
  if (nDesc == 0) return ncclSuccess;
  mendCommInflight(comm, 1);
  ncclResult_t res = waitSignals(comm, nDesc, signalDescs);
  mendCommInflight(comm, -1);
  return res;
}
