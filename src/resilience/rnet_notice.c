/*
 * Notices between the two ends of a resilient connection (and from local detectors to it).
 * A notice is queued in the connection's inbox and applied, in arrival order, by whichever thread
 * progresses the connection next.  To the other end it goes directly when that end lives in this
 * process (threads, tests), else over the bootstrap through the communicator's resilience service:
 * TCP on the management network, reliable and ordered per peer.
 */
#include "resilience/rnet_priv.h"

#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "resilience/resil.h"
#include "resilience/resil_wire.h"

static pthread_mutex_t ctxListLock = PTHREAD_MUTEX_INITIALIZER;
static struct rnetCtx* ctxList;  /* every live context of the process */

void mendRnetCtxRegister(struct rnetCtx* ctx) {
  pthread_mutex_lock(&ctxListLock);
  ctx->nextCtx = ctxList;
  ctxList = ctx;
  pthread_mutex_unlock(&ctxListLock);
}

void mendRnetCtxUnregister(struct rnetCtx* ctx) {
  pthread_mutex_lock(&ctxListLock);
  for (struct rnetCtx** pp = &ctxList; *pp; pp = &(*pp)->nextCtx) {
    if (*pp == ctx) {
      *pp = ctx->nextCtx;
      break;
    }
  }
  pthread_mutex_unlock(&ctxListLock);
}

void mendRnetPost(struct rnetComm* rc, const struct rnetNotice* n) {
  struct rnetNoticeItem* it = malloc(sizeof(*it));
  if (!it) {
    WARN("NET/Resilient: out of memory for a notice (type %u, path %u): dropped", n->type, n->path);
    return;
  }
  it->n = *n;
  it->next = NULL;
  pthread_mutex_lock(&rc->inboxLock);
  if (rc->inTail) rc->inTail->next = it;
  else rc->inHead = it;
  rc->inTail = it;
  atomic_fetch_add_explicit(&rc->inboxCount, 1, memory_order_release);
  pthread_mutex_unlock(&rc->inboxLock);
}

int mendRnetTakeNotice(struct rnetComm* rc, struct rnetNotice* out) {
  pthread_mutex_lock(&rc->inboxLock);
  struct rnetNoticeItem* it = rc->inHead;
  if (it) {
    rc->inHead = it->next;
    if (!rc->inHead) rc->inTail = NULL;
    atomic_fetch_sub_explicit(&rc->inboxCount, 1, memory_order_release);
  }
  pthread_mutex_unlock(&rc->inboxLock);
  if (!it) return 0;
  *out = it->n;
  free(it);
  return 1;
}

void mendRnetDropNotices(struct rnetComm* rc) {
  struct rnetNotice n;
  while (mendRnetTakeNotice(rc, &n)) {
  }
}

static int withConnIn(struct rnetCtx* ctx, uint64_t connId, void (*fn)(struct rnetComm*, const void*), const void* arg) {
  int found = 0;
  pthread_mutex_lock(&ctx->lock);
  for (struct rnetComm* rc = ctx->comms; rc && !found; rc = rc->next) {
    if (rc->connId != connId) continue;
    fn(rc, arg);
    found = 1;
  }
  pthread_mutex_unlock(&ctx->lock);
  if (found && ctx->resil) mendResilWake(ctx->resil);
  return found;
}

int mendRnetWithConn(struct rnetCtx* ctx, uint64_t connId, void (*fn)(struct rnetComm*, const void*), const void* arg) {
  if (ctx) return withConnIn(ctx, connId, fn, arg);
  int found = 0;
  pthread_mutex_lock(&ctxListLock);
  for (struct rnetCtx* c = ctxList; c && !found; c = c->nextCtx) found = withConnIn(c, connId, fn, arg);
  pthread_mutex_unlock(&ctxListLock);
  return found;
}

static void postIt(struct rnetComm* rc, const void* n) { mendRnetPost(rc, n); }

int mendRnetDeliver(struct rnetCtx* ctx, const struct rnetNotice* wire) {
  struct rnetNotice n;
  if (!mendRnetNoticeParse(wire, sizeof(*wire), &n)) {
    WARN("NET/Resilient: a notice with a bad magic (0x%x) or type (%u) was dropped", wire->magic, wire->type);
    return 0;
  }
  return mendRnetWithConn(ctx, n.connId, postIt, &n);
}

void mendRnetNotify(struct rnetComm* rc, int type, int p, int cause, const void* handle) {
  /* A relay path's handles go through its bridge, which connects both ends (relay.h). */
  if (p >= 0 && p < rc->nPaths && rc->paths[p].relayed) {
    if (type == RNET_NOTE_REBUILD && rc->isSend) {
      mendRnetRelayOpen(rc, p, handle);
      return;
    }
    if (type == RNET_NOTE_REBUILD_ACK && !rc->isSend) {
      mendRnetRelayAccept(rc, p, handle);
      return;
    }
  }
  struct rnetNotice n = { .magic = RNET_MAGIC, .type = (uint16_t)type, .path = (uint16_t)p, .connId = rc->peerConnId,
                          .cause = cause, .fromRank = rc->ctx->rank, .remote = 1 };
  if (handle) memcpy(n.handle, handle, sizeof(n.handle));
  if (mendRnetDeliver(NULL, &n)) return;
  if (rc->ctx->resil && rc->peerRank >= 0) {
    mendResilSendNotice(rc->ctx->resil, rc->peerRank, &n);
    return;
  }
  INFO(MEND_RESIL, "NET/Resilient: conn %llx: no way to reach the peer (rank %d) with notice %d for path %d",
       (unsigned long long)rc->connId, rc->peerRank, type, p);
}
