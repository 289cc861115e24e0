/*
 * The one-sided receiver: a thread per communicator (started by the first window registration)
 * that drains every RMA receive connector, writes puts into this rank's windows and counts
 * signals.  Nothing a peer sent is trusted: every slot's byte count is checked against the slot,
 * every header's magic, kind and framing, and every put's window, offset and length against this
 * rank's own registration (not the sender's view of it), sigIdx and ctx against this rank's bounds.
 *   - A header that cannot be parsed breaks that peer's stream: its later slots are drained and
 *     dropped (nothing else can be trusted in it).
 *   - A well-formed message that does not fit (unknown or deregistered window, out of range, bad
 *     signal) is refused: its data is dropped, its signal not counted.
 * Either way the receiver WARNs once per message and ncclWaitSignal on this rank then fails with
 * ncclRemoteError.  It spins (yielding) for MEND_SPIN_US after the last slot, then sleeps on the
 * communicator's bell (1 ms bound).  A thread in ncclWaitSignal drains too (one drainer at a time),
 * so the signal it waits for costs no thread hand-off.
 */
#include <sched.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "misc/bell.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "onesided.h"
#include "transport/transport.h"

/* Record a refused or unparseable message and wake the waiters (they report it). */
static void refuse(struct ncclComm* comm, struct mendRmaRecv* st) {
  struct mendRma* rma = comm->rma;
  st->refused = 1;
  pthread_mutex_lock(&rma->lock);
  mendRmaSetError(rma, ncclRemoteError);
  pthread_cond_broadcast(&rma->cond);
  pthread_mutex_unlock(&rma->lock);
}

static void breakStream(struct ncclComm* comm, int peer, struct mendRmaRecv* st, const char* why, uint64_t n) {
  WARN("One-sided: rank %d drops every later message from rank %d: %s (slot of %llu bytes)", comm->rank, peer, why,
       (unsigned long long)n);
  st->broken = 1;
  st->left = 0;
  refuse(comm, st);
}

/* A well-formed header: take the message or refuse it.  Returns 0 when the header is malformed. */
static int startMsg(struct ncclComm* comm, int peer, struct mendRmaRecv* st, const struct mendRmaHdr* h,
                    uint64_t dataInSlot) {
  struct mendRma* rma = comm->rma;
  if (h->magic != MEND_RMA_MAGIC || (h->kind != MEND_RMA_PUT && h->kind != MEND_RMA_SIGNAL)) return 0;
  if (h->kind == MEND_RMA_SIGNAL && (h->bytes != 0 || dataInSlot != 0)) return 0;
  if (dataInSlot > h->bytes) return 0;
  *st = (struct mendRmaRecv){.left = h->bytes, .seq = h->seq, .pos = h->offset, .sigIdx = h->sigIdx, .ctx = h->ctx};
  if (h->sigIdx < 0 || h->sigIdx >= rma->nSig || h->ctx < 0 || h->ctx >= rma->nCtx) {
    WARN("One-sided: rank %d refuses a message from rank %d: sigIdx %d / ctx %d out of range (%d signals, %d "
         "contexts)", comm->rank, peer, h->sigIdx, h->ctx, rma->nSig, rma->nCtx);
    refuse(comm, st);
    return 1;
  }
  if (h->kind != MEND_RMA_PUT) return 1;
  pthread_mutex_lock(&rma->lock);
  struct mendWindow* w = mendRmaFindSeq(rma, h->seq);
  uint64_t size = w ? w->size : 0;
  pthread_mutex_unlock(&rma->lock);
  if (w == NULL || h->offset > size || h->bytes > size - h->offset) {
    WARN("One-sided: rank %d refuses a put from rank %d: %llu bytes at offset %llu of window %llu (%s, %llu bytes)",
         comm->rank, peer, (unsigned long long)h->bytes, (unsigned long long)h->offset, (unsigned long long)h->seq,
         w ? "registered" : "not registered here", (unsigned long long)size);
    refuse(comm, st);
  }
  return 1;
}

/* Write n bytes of the current put at st->pos (the window looked up again: it may be gone). */
static void writeData(struct ncclComm* comm, int peer, struct mendRmaRecv* st, const char* data, uint64_t n) {
  struct mendRma* rma = comm->rma;
  if (n == 0) return;
  if (!st->refused) {
    pthread_mutex_lock(&rma->lock);
    struct mendWindow* w = mendRmaFindSeq(rma, st->seq);
    if (w && st->pos <= w->size && n <= w->size - st->pos) memcpy((char*)w->userPtr + st->pos, data, (size_t)n);
    pthread_mutex_unlock(&rma->lock);
    if (w == NULL) {
      WARN("One-sided: rank %d deregistered window %llu while rank %d's put into it arrived", comm->rank,
           (unsigned long long)st->seq, peer);
      refuse(comm, st);
    }
  }
  st->pos += n;
  st->left -= n;
}

/* One received slot of n bytes from peer. */
static void consume(struct ncclComm* comm, int peer, const char* slot, uint64_t n, size_t slotBytes) {
  struct mendRma* rma = comm->rma;
  struct mendRmaRecv* st = &rma->recv[peer];
  if (st->broken) return;
  if (n > slotBytes) {
    breakStream(comm, peer, st, "byte count larger than the slot", n);
    return;
  }
  const char* data = slot;
  if (st->left == 0) {
    struct mendRmaHdr h;
    if (n < sizeof(h)) {
      breakStream(comm, peer, st, "short message header", n);
      return;
    }
    memcpy(&h, slot, sizeof(h));
    if (!startMsg(comm, peer, st, &h, n - sizeof(h))) {
      breakStream(comm, peer, st, "malformed header", n);
      return;
    }
    data += sizeof(h);
    n -= sizeof(h);
  } else if (n == 0 || n > st->left) {
    breakStream(comm, peer, st, "continuation longer than the message", n);
    return;
  }
  writeData(comm, peer, st, data, n);
  if (st->left != 0 || st->refused) return;
  pthread_mutex_lock(&rma->lock);
  rma->arrived[mendRmaSigIndex(rma, peer, st->ctx, st->sigIdx)]++;
  pthread_cond_broadcast(&rma->cond);
  pthread_mutex_unlock(&rma->lock);
}

/* Every full slot of c; 1 when one was consumed. */
static int drain(struct ncclComm* comm, struct mendConnector* c) {
  uint64_t head = mendFifoPeek(&c->fifo->head);
  int moved = 0;
  while (mendFifoLoad(&c->fifo->tail) > head) {
    int s = (int)(head % (uint64_t)c->nSlots);
    consume(comm, c->peer, c->buff + (size_t)s * c->slotBytes, mendFifoPeek(&c->fifo->bytes[s]), c->slotBytes);
    mendFifoStore(&c->fifo->head, ++head);
    if (c->peerBell) mendBellRing(c->peerBell);
    moved = 1;
  }
  return moved;
}

int mendRmaDrainAll(struct ncclComm* comm) {
  struct mendRma* rma = comm->rma;
  int moved = 0;
  if (pthread_mutex_trylock(&rma->drainLock) != 0) return 0;
  for (int p = 0; p < comm->nRanks; p++) {
    struct mendConnector* c = p == comm->rank ? NULL : mendTransportGetConn(comm, 0, p, MEND_RECV, MEND_CONN_RMA);
    if (c && atomic_load(&c->error) == ncclSuccess) moved |= drain(comm, c);
  }
  pthread_mutex_unlock(&rma->drainLock);
  return moved;
}

void* mendRmaRecvThread(void* arg) {
  struct ncclComm* comm = arg;
  struct mendRma* rma = comm->rma;
  int64_t spinUs = mendParamSpinUs(), idleSince = (int64_t)(mendTimeNs() / 1000);
  while (!atomic_load(&rma->stop) && !mendCommAborted(comm)) {
    uint32_t seen = mendBellRead(comm->bell);
    if (mendRmaDrainAll(comm)) {
      idleSince = (int64_t)(mendTimeNs() / 1000);
    } else if ((int64_t)(mendTimeNs() / 1000) - idleSince < spinUs) {
      sched_yield(); /* as the host engine: a message right behind the last one is taken without a sleep */
    } else {
      mendBellWait(comm->bell, seen, 1000);
    }
  }
  pthread_mutex_lock(&rma->lock);
  pthread_cond_broadcast(&rma->cond); /* waiters see the stop or the abort */
  pthread_mutex_unlock(&rma->lock);
  return NULL;
}
