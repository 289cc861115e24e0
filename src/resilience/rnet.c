/*
 * The resilient net: ops table, contexts, registrations and the data path (see rnet.h, README.md).
 * Connection setup is in rnet_conn.c, failover in rnet_fail.c.
 */
#include "resilience/rnet_priv.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "resilience/detect.h"
#include "resilience/resil.h"

static _Atomic(const mendNet_t*) baseNet;  /* for init/devices/getProperties (no context there) */

void mendRnetSetBase(const mendNet_t* base) { atomic_store(&baseNet, base); }

static const mendNet_t* getBase(void) {
  const mendNet_t* b = atomic_load(&baseNet);
  return b ? b : &mendNetSocket;
}

int mendRnetEnabled(int nNicsMax) {
  int64_t v = mendParamResilience();
  if (v == 0 || v == 1) return (int)v;
  if (v != -2) WARN_ONCE("MEND_RESILIENCE=%lld: expected 0, 1 or -2 (auto); using auto", (long long)v);
  return nNicsMax >= 2;
}

ncclResult_t mendRnetSetOrder(void* vctx, const int* order, int n) {
  struct rnetCtx* ctx = vctx;
  MENDARGCHECK(ctx && (order || n == 0) && n >= 0, ncclInvalidArgument, "NET/Resilient: set order: bad argument");
  int k = 0;
  for (int i = 0; i < n && k < MEND_RNET_MAX_PATHS; i++) {
    if (order[i] < 0 || order[i] >= ctx->nDevs || order[i] >= MEND_RNET_MAX_PATHS) continue;
    ctx->order[k++] = (int8_t)order[i];
  }
  ctx->nOrder = k;
  return ncclSuccess;
}

ncclResult_t mendRnetCtxCreate(const mendNet_t* base, void* baseCtx, struct ncclComm* comm, void** out) {
  MENDARGCHECK(base != NULL && out != NULL, ncclInvalidArgument, "NET/Resilient: no base Net or no ctx pointer");
  *out = NULL;
  struct rnetCtx* ctx;
  MENDCHECK(MENDCALLOC(ctx, 1));
  ctx->base = base;
  ctx->baseCtx = baseCtx;
  ctx->comm = comm;
  ctx->rank = -1;
  ncclResult_t res = base->devices(&ctx->nDevs);
  if (res != ncclSuccess) {
    WARN("NET/Resilient: the base Net %s cannot list its devices (error %d)", base->name, res);
    free(ctx);
    return res;
  }
  pthread_mutex_init(&ctx->lock, NULL);
  ctx->nextConnId = mendHashCombine(mendPidHash(), mendTimeNs()) | 1;
  if (comm) {
    ctx->rank = comm->rank;
    ctx->resil = comm->resil;
  }
  atomic_store(&baseNet, base);
  mendRnetCtxRegister(ctx);
  *out = ctx;
  return ncclSuccess;
}

static ncclResult_t rnetInit(void** ctx, uint64_t commId, mendDebugLogger_t logger) {
  MENDARGCHECK(ctx != NULL, ncclInvalidArgument, "NET/Resilient: init: ctx is NULL");
  const mendNet_t* base = getBase();
  void* baseCtx = NULL;
  MENDCHECK(base->init(&baseCtx, commId, logger));
  ncclResult_t res = mendRnetCtxCreate(base, baseCtx, NULL, ctx);
  if (res != ncclSuccess) {
    base->finalize(baseCtx);
    return res;
  }
  ((struct rnetCtx*)*ctx)->ownBaseCtx = 1;
  return ncclSuccess;
}

static ncclResult_t rnetFinalize(void* vctx) {
  struct rnetCtx* ctx = vctx;
  if (!ctx) return ncclSuccess;
  if (ctx->comms) WARN("NET/Resilient: finalize with connections still open");
  mendRnetCtxUnregister(ctx);
  if (ctx->ownBaseCtx) ctx->base->finalize(ctx->baseCtx);
  pthread_mutex_destroy(&ctx->lock);
  free(ctx);
  return ncclSuccess;
}

void mendRnetCtxAdd(struct rnetCtx* ctx, struct rnetComm* rc) {
  pthread_mutex_lock(&ctx->lock);
  rc->next = ctx->comms;
  ctx->comms = rc;
  pthread_mutex_unlock(&ctx->lock);
}

void mendRnetCtxRemove(struct rnetCtx* ctx, struct rnetComm* rc) {
  pthread_mutex_lock(&ctx->lock);
  for (struct rnetComm** pp = &ctx->comms; *pp; pp = &(*pp)->next) {
    if (*pp == rc) {
      *pp = rc->next;
      break;
    }
  }
  pthread_mutex_unlock(&ctx->lock);
}

static ncclResult_t rnetDevices(int* ndev) { return getBase()->devices(ndev); }

static ncclResult_t rnetGetProperties(int dev, struct mendNetProperties* props) {
  MENDCHECK(getBase()->getProperties(dev, props));
  props->maxRecvs = 1;  /* one numbered message per irecv */
  return ncclSuccess;
}

/* ---------------------------------------------------------------- registrations */

/* Register mr's range on path p's data comm (the only comm that moves user buffers). */
static ncclResult_t regOnPath(struct rnetComm* rc, struct rnetMr* mr, int p) {
  struct rnetPath* path = rc->paths + p;
  if (!path->data || mr->base[p]) return ncclSuccess;
  ncclResult_t res = rc->base->regMr(path->data, mr->data, mr->size, mr->type, &mr->base[p]);
  if (res != ncclSuccess) {
    WARN("NET/Resilient: cannot register %zu bytes on path %d (device %d): error %d", mr->size, p, path->localDev, res);
    mr->base[p] = NULL;
  }
  return res;
}

ncclResult_t mendRnetPathRegister(struct rnetComm* rc, int p) {
  struct rnetPath* path = rc->paths + p;
  if (path->data) MENDCHECK(mendRnetRegArea(rc, path->data, &path->dataArea));
  if (path->ctrl) MENDCHECK(mendRnetRegArea(rc, path->ctrl, &path->ctrlArea));
  for (struct rnetMr* mr = rc->mrs; mr; mr = mr->next) MENDCHECK(regOnPath(rc, mr, p));
  return ncclSuccess;
}

static ncclResult_t rnetRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  struct rnetComm* rc = comm;
  MENDARGCHECK(rc != NULL && mhandle != NULL, ncclInvalidArgument, "NET/Resilient: regMr: comm or mhandle is NULL");
  *mhandle = NULL;
  MENDARGCHECK(rc->stage == RNET_STAGE_READY, ncclInvalidUsage, "NET/Resilient: regMr on a connection not established");
  struct rnetMr* mr;
  MENDCHECK(MENDCALLOC(mr, 1));
  mr->magic = RNET_MR_MAGIC;
  mr->type = type;
  mr->data = data;
  mr->size = size;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&rc->lock);
  /* Every NIC at once, so a failover never has to register anything. */
  for (int p = 0; p < rc->nPaths && res == ncclSuccess; p++) {
    int st = atomic_load(&rc->paths[p].state);
    if (st == RNET_PATH_IDLE || st == RNET_PATH_ACTIVE) res = regOnPath(rc, mr, p);
  }
  if (res != ncclSuccess) {
    for (int q = 0; q < rc->nPaths; q++)
      if (mr->base[q]) rc->base->deregMr(rc->paths[q].data, mr->base[q]);
    free(mr);
  } else {
    mr->next = rc->mrs;
    rc->mrs = mr;
    *mhandle = mr;
  }
  pthread_mutex_unlock(&rc->lock);
  return res;
}

static ncclResult_t rnetDeregMr(void* comm, void* mhandle) {
  struct rnetComm* rc = comm;
  struct rnetMr* mr = mhandle;
  if (!mr) return ncclSuccess;
  MENDARGCHECK(rc != NULL && mr->magic == RNET_MR_MAGIC, ncclInvalidArgument,
               "NET/Resilient: deregMr: %p is not a live registration", mhandle);
  pthread_mutex_lock(&rc->lock);
  for (struct rnetMr** pp = &rc->mrs; *pp; pp = &(*pp)->next) {
    if (*pp == mr) {
      *pp = mr->next;
      break;
    }
  }
  for (int p = 0; p < rc->nPaths; p++)
    if (mr->base[p] && rc->paths[p].data) rc->base->deregMr(rc->paths[p].data, mr->base[p]);
  mr->magic = 0;
  free(mr);
  pthread_mutex_unlock(&rc->lock);
  return ncclSuccess;
}

/* ---------------------------------------------------------------- data path */

/* ---- acknowledgements riding with data (README, "Acknowledgements") ----
 * A word: bit 63 set, the peer's connId of the connection acknowledged (its low 23 bits) at bit 40,
 * and how many of its messages we placed (below 2^40). */
#define RNET_WORD_VALID (1ull << 63)
#define RNET_WORD_COUNT ((1ull << 40) - 1)
#define RNET_WORD_CONN 0x7fffffull

/* Sender: the word for a message to our peer, for our receive comm from that peer whose peer has
 * read least of what it placed (0: none owes anything).  Only atomics of the other comm are read:
 * its lock is never taken under ours; the context's lock keeps it alive while we look. */
static uint64_t wordFor(struct rnetComm* rc, uint64_t* conn, uint64_t* count) {
  uint64_t word = 0, most = 0;
  *conn = 0;
  *count = 0;
  if (rc->peerRank < 0) return 0;
  struct rnetCtx* ctx = rc->ctx;
  pthread_mutex_lock(&ctx->lock);
  for (struct rnetComm* q = ctx->comms; q; q = q->next) {
    /* The stage first: a comm in its handshake is listed and writes its peer's rank then. */
    if (q->isSend || atomic_load(&q->stage) != RNET_STAGE_READY || !q->words || q->peerRank != rc->peerRank) continue;
    uint64_t placed = atomic_load_explicit(&q->placedPub, memory_order_acquire);
    uint64_t seen = atomic_load_explicit(&q->wordSeen, memory_order_relaxed);
    if (placed <= seen || placed > RNET_WORD_COUNT || placed - seen <= most) continue;
    most = placed - seen;
    *conn = q->connId;
    *count = placed;
    word = RNET_WORD_VALID | (q->peerConnId & RNET_WORD_CONN) << 40 | placed;
  }
  pthread_mutex_unlock(&ctx->lock);
  return word;
}

/* Receiver: a word on a message from our peer: how many messages of our send comm it names the
 * peer has placed.  Checked against that comm's posted count when the comm takes it (takeWords). */
static void wordArrived(struct rnetComm* rc, uint64_t word) {
  if (!(word & RNET_WORD_VALID) || rc->peerRank < 0) return;
  uint64_t id = (word >> 40) & RNET_WORD_CONN, count = word & RNET_WORD_COUNT;
  struct rnetCtx* ctx = rc->ctx;
  pthread_mutex_lock(&ctx->lock);
  for (struct rnetComm* s = ctx->comms; s; s = s->next) {
    if (!s->isSend || (s->connId & RNET_WORD_CONN) != id || atomic_load(&s->stage) != RNET_STAGE_READY ||
        s->peerRank != rc->peerRank)
      continue;
    uint64_t was = atomic_load_explicit(&s->wordAck, memory_order_relaxed);
    while (count > was && !atomic_compare_exchange_weak(&s->wordAck, &was, count)) {}
    break;
  }
  pthread_mutex_unlock(&ctx->lock);
}

/* Sender: the peer acknowledged messages up to `done` (by a control message or a word): the words
 * those messages carried have been read, which lets our receive comms hold their own
 * acknowledgements for what the words covered. */
static void ackedTo(struct rnetComm* rc, uint64_t done) {
  uint64_t conn[4] = {0}, count[4] = {0};
  int n = 0;
  for (uint64_t s = rc->nDone; s < done && s < rc->nPosted; s++) {
    const struct rnetReq* r = rc->reqs + s % RNET_WINDOW;
    if (r->wordConn == 0) continue;
    int k = 0;
    while (k < n && conn[k] != r->wordConn) k++;
    if (k == n && n < 4) conn[n++] = r->wordConn;
    if (k < n && r->wordCount > count[k]) count[k] = r->wordCount;
  }
  rc->nDone = done;
  if (n == 0) return;
  pthread_mutex_lock(&rc->ctx->lock);
  for (struct rnetComm* q = rc->ctx->comms; q; q = q->next) {
    for (int k = 0; k < n; k++) {
      if (q->isSend || q->connId != conn[k]) continue;
      uint64_t was = atomic_load_explicit(&q->wordSeen, memory_order_relaxed);
      while (count[k] > was && !atomic_compare_exchange_weak(&q->wordSeen, &was, count[k])) {}
    }
  }
  pthread_mutex_unlock(&rc->ctx->lock);
}

/* Sender: take what the peer's words acknowledged: progress, and a round-trip sample taken from the
 * newest message covered (a word waits for data going our way: never below the round trip).
 * Without samples the path's suspicion stays at MEND_PROGRESS_TIMEOUT, and a small-message exchange
 * whose words replace every control message would have none. */
static ncclResult_t takeWords(struct rnetComm* rc) {
  uint64_t w = atomic_load_explicit(&rc->wordAck, memory_order_acquire);
  if (w <= rc->nDone) return ncclSuccess;
  if (w > rc->nPosted) {
    WARN("NET/Resilient: conn %llx to rank %d: a word acknowledges %llu messages of %llu posted",
         (unsigned long long)rc->connId, rc->peerRank, (unsigned long long)w, (unsigned long long)rc->nPosted);
    return ncclRemoteError;
  }
  rc->wordAcks += w - rc->nDone;
  int64_t postUs = rc->reqs[(w - 1) % RNET_WINDOW].postUs;
  mendRnetDetectWord(rc, rc->active, (int64_t)(rc->passNs / 1000) - postUs);
  ackedTo(rc, w);
  rc->lastProgressMs = (int64_t)(rc->passNs / 1000000);
  return ncclSuccess;
}

/* Sender: may an acknowledgement have come?  Under held acknowledgements (ackDelayNs, the same
 * parameter as the receiver's) one of small messages is sent only once RNET_ACK_BATCH are placed,
 * RNET_ACK_BYTES are owed, or the oldest has waited ackDelayNs: before that, a look at the control
 * comm (a receive syscall) finds nothing, and at 8 bytes such looks were most of what the resilient
 * path added to the plain one.  A closed control comm is then seen at the next look that is due;
 * the data comm reports its own errors at once. */
static int ackMayBeDue(const struct rnetComm* rc) {
  uint64_t out = rc->nIssued - rc->nDone;
  if (rc->ackDelayNs == 0 || rc->waitResume || out >= RNET_ACK_BATCH) return 1;
  if (out == 0) return 0;
  size_t bytes = 0;
  for (uint64_t s = rc->nDone; s < rc->nIssued; s++) bytes += rc->reqs[s % RNET_WINDOW].size;
  if (bytes >= RNET_ACK_BYTES) return 1;
  int64_t oldestUs = rc->reqs[rc->nDone % RNET_WINDOW].postUs;
  return (uint64_t)((int64_t)(rc->passNs / 1000) - oldestUs) * 1000 >= rc->ackDelayNs;
}

/* Post and reap control messages on path p: the sender receives, the receiver sends. */
static ncclResult_t ctrlSenderSide(struct rnetComm* rc, int p) {
  struct rnetPath* path = rc->paths + p;
  while (rc->ctrlPosted - rc->ctrlDone < RNET_NCTRL) {
    int k = (int)(rc->ctrlPosted % RNET_NCTRL), tag = 0;
    void* data = rc->area->ctrl + k;
    size_t size = sizeof(struct rnetCtrl);
    void* req = NULL;
    MENDCHECK(rc->base->irecv(path->ctrl, 1, &data, &size, &tag, &path->ctrlArea, &req));
    if (!req) break;
    rc->ctrlReq[k] = req;
    rc->ctrlPosted++;
  }
  if (rc->words) MENDCHECK(takeWords(rc));
  if (!ackMayBeDue(rc)) return ncclSuccess;
  while (rc->ctrlDone < rc->ctrlPosted) {
    int k = (int)(rc->ctrlDone % RNET_NCTRL), done = 0, size = 0;
    rc->ctrlLooks++;
    MENDCHECK(rc->base->test(rc->ctrlReq[k], &done, &size));
    if (!done) break;
    rc->ctrlReq[k] = NULL;
    rc->ctrlDone++;
    struct rnetCtrl m = rc->area->ctrl[k];
    if (size != (int)sizeof(m) || m.magic != RNET_MAGIC || m.value > rc->nPosted) {
      WARN("NET/Resilient: bad control message on path %d (size %d, magic 0x%x, value %llu of %llu posted)", p, size,
           m.magic, (unsigned long long)m.value, (unsigned long long)rc->nPosted);
      return ncclRemoteError;
    }
    if (m.value > rc->nDone) mendRnetDetectAcked(rc, p, m.value, m.delayUs);
    if (m.value > rc->nDone) ackedTo(rc, m.value);
    rc->lastProgressMs = (int64_t)(rc->passNs / 1000000);
  }
  return ncclSuccess;
}

/* Sender: keep one receive posted on the ctrl comm of every idle path, where a RESUME would come
 * when the receiver moves there; take it when it does.  Returns with *moved set after a switch. */
#define RNET_WATCH_NS 2000000  /* idle paths are looked at this often while the active one works */

static ncclResult_t watchIdle(struct rnetComm* rc, int force, int* moved) {
  *moved = 0;
  /* A RESUME on an idle path only follows a fence: look every time while waiting for one, else
   * now and then (each look is a receive test, i.e. a syscall, on every idle path). */
  uint64_t now = rc->passNs;
  if (!force && rc->active >= 0 && now - rc->lastWatchNs < RNET_WATCH_NS) return ncclSuccess;
  rc->lastWatchNs = now;
  for (int p = 0; p < rc->nPaths; p++) {
    struct rnetPath* path = rc->paths + p;
    if (atomic_load(&path->state) != RNET_PATH_IDLE || !path->ctrl) continue;
    if (!path->watchReq) {
      void* data = rc->area->watch + p;
      size_t size = sizeof(struct rnetCtrl);
      int tag = 0;
      ncclResult_t res = rc->base->irecv(path->ctrl, 1, &data, &size, &tag, &path->ctrlArea, &path->watchReq);
      if (res != ncclSuccess) {
        MENDCHECK(mendRnetFailPath(rc, p, res == ncclRemoteError ? MEND_RNET_KILL_CLOSED : MEND_RNET_KILL_ERROR,
                                   "posting its control receive failed"));
        continue;
      }
      if (!path->watchReq) continue;
    }
    int done = 0, size = 0;
    ncclResult_t res = rc->base->test(path->watchReq, &done, &size);
    if (res != ncclSuccess) {
      MENDCHECK(mendRnetFailPath(rc, p, res == ncclRemoteError ? MEND_RNET_KILL_CLOSED : MEND_RNET_KILL_ERROR,
                                 "its control receive failed"));
      continue;
    }
    if (!done) continue;
    path->watchReq = NULL;
    struct rnetCtrl m = rc->area->watch[p];
    if (size != (int)sizeof(m) || m.magic != RNET_MAGIC || m.type != RNET_CTRL_RESUME) {
      WARN("NET/Resilient: conn %llx: unexpected control message on idle path %d (size %d, type %u)",
           (unsigned long long)rc->connId, p, size, m.type);
      MENDCHECK(mendRnetFailPath(rc, p, MEND_RNET_KILL_ERROR, "it carried a stray control message"));
      continue;
    }
    MENDCHECK(mendRnetTakeResume(rc, p, &m));
    *moved = 1;
    return ncclSuccess;  /* the active path changed: the caller starts over */
  }
  return ncclSuccess;
}

static ncclResult_t sendPath(struct rnetComm* rc, int p) {
  struct rnetPath* path = rc->paths + p;
  MENDCHECK(ctrlSenderSide(rc, p));
  while (!rc->waitResume && rc->nIssued < rc->nPosted) {
    struct rnetReq* r = rc->reqs + rc->nIssued % RNET_WINDOW;
    void* req = NULL;
    void* mh = r->mr ? r->mr->base[p] : NULL;
    if (rc->words) {
      uint64_t conn, count, word = wordFor(rc, &conn, &count);
      MENDCHECK(rc->base->isendWord(path->data, r->data, r->size, 0, mh, word, &req));
      r->wordConn = req ? conn : 0;
      r->wordCount = count;
    } else {
      MENDCHECK(rc->base->isend(path->data, r->data, r->size, 0, mh, &req));
    }
    if (!req) break;
    r->base = req;
    r->basePath = p;
    rc->nIssued++;
    path->msgs++;
  }
  while (rc->nBaseDone < rc->nIssued) {
    struct rnetReq* r = rc->reqs + rc->nBaseDone % RNET_WINDOW;
    if (r->base) {
      int done = 0, size = 0;
      MENDCHECK(rc->base->test(r->base, &done, &size));
      if (!done) break;
      r->base = NULL;
    }
    rc->nBaseDone++;
  }
  return ncclSuccess;
}

/* Receiver: complete control isends in order. */
static ncclResult_t reapCtrl(struct rnetComm* rc) {
  while (rc->ctrlDone < rc->ctrlPosted) {
    int k = (int)(rc->ctrlDone % RNET_NCTRL), done = 0, size = 0;
    MENDCHECK(rc->base->test(rc->ctrlReq[k], &done, &size));
    if (!done) break;
    rc->ctrlReq[k] = NULL;
    rc->ctrlDone++;
  }
  return ncclSuccess;
}

/* Receiver: the count the peer has read, in a control message or a word. */
static uint64_t ackedBy(const struct rnetComm* rc) {
  uint64_t seen = rc->words ? atomic_load_explicit(&rc->wordSeen, memory_order_relaxed) : 0;
  seen = seen < rc->nDone ? seen : rc->nDone;
  return seen > rc->ctrlSent ? seen : rc->ctrlSent;
}

/* Receiver: once words moved what the peer has read, the held clock runs from the oldest message
 * it has not read (placed then, if its slot still says so; else now). */
static void heldFrom(struct rnetComm* rc, uint64_t now) {
  if (!rc->words) return;
  uint64_t seen = atomic_load_explicit(&rc->wordSeen, memory_order_relaxed);
  if (seen <= rc->wordSeenUsed || seen <= rc->ctrlSent) return;
  rc->wordSeenUsed = seen;
  if (seen >= rc->nDone) return;
  const struct rnetReq* r = rc->reqs + seen % RNET_WINDOW;
  rc->ackHeldNs = r->seq == seen && r->placedNs ? r->placedNs : now;
}

/* Receiver: is a control message due on the active path?  A RESUME always is.  An acknowledgement of
 * small messages may wait (README, "Acknowledgements"): an 8-byte operation then costs one message
 * per hop instead of two; the sender's slots and clocks never need it sooner than this rule sends it. */
static int ctrlDue(const struct rnetComm* rc, uint64_t now, int placed, int force) {
  if (rc->sendResume) return 1;
  if (rc->nDone == rc->ctrlSent) return 0;
  if (force || rc->ackDelayNs == 0 || rc->owedBytes >= RNET_ACK_BYTES) return 1;
  /* Owed: what the peer has read of neither a control message nor a word (held clock: heldFrom). */
  uint64_t owed = rc->nDone - ackedBy(rc);
  if (owed == 0) return 0;
  if (now - rc->ackHeldNs >= rc->ackDelayNs) return 1;
  /* A batch goes out when we wait for the next message, not while the caller has data to act on. */
  return owed >= RNET_ACK_BATCH && (!placed || owed >= RNET_ACK_MAX);
}

/* Receiver: tell the service whether we hold an acknowledgement (it sends one held too long). */
static void noteHeld(struct rnetComm* rc) {
  uint64_t since = rc->nDone > ackedBy(rc) ? rc->ackHeldNs : 0;
  uint64_t was = atomic_load_explicit(&rc->ackHeldSince, memory_order_relaxed);
  if (since == was) return;
  atomic_store(&rc->ackHeldSince, since);
  if (!since != !was) mendResilAckHeld(rc->ctx->resil, since ? 1 : -1);
}

static ncclResult_t sendCtrl(struct rnetComm* rc, int p, int placed, int force) {
  struct rnetPath* path = rc->paths + p;
  MENDCHECK(reapCtrl(rc));
  uint64_t now = rc->passNs;
  heldFrom(rc, now);
  if (ctrlDue(rc, now, placed, force) && rc->ctrlPosted - rc->ctrlDone < RNET_NCTRL) {
    int k = (int)(rc->ctrlPosted % RNET_NCTRL);
    struct rnetCtrl* m = rc->area->ctrl + k;
    uint64_t heldUs = rc->nDone > rc->ctrlSent && now > rc->lastPlacedNs ? (now - rc->lastPlacedNs) / 1000 : 0;
    *m = (struct rnetCtrl){ .magic = RNET_MAGIC, .type = rc->sendResume ? RNET_CTRL_RESUME : RNET_CTRL_ACK,
                            .epoch = rc->epoch, .value = rc->nDone,
                            .delayUs = heldUs > UINT32_MAX ? UINT32_MAX : (uint32_t)heldUs };
    int wasResume = rc->sendResume;
    void* req = NULL;
    MENDCHECK(rc->base->isend(path->ctrl, m, sizeof(*m), 0, path->ctrlArea, &req));
    if (req) {
      rc->ctrlReq[k] = req;
      rc->ctrlPosted++;
      rc->ctrlSent = rc->nDone;
      rc->owedBytes = 0;
      rc->sendResume = 0;
      if (wasResume) {
        char extra[48];
        snprintf(extra, sizeof(extra), "msg=%llu", (unsigned long long)rc->nDone);
        mendRnetEvent("resume", rc, rc->active, "none", extra);
      }
      /* Push it out now: the user may not call us again until the sender has what it waits for. */
      MENDCHECK(reapCtrl(rc));
    }
  }
  noteHeld(rc);
  return ncclSuccess;
}

/* Receiver: hand the posted receives to the base on path p. */
static ncclResult_t issueRecvs(struct rnetComm* rc, int p) {
  struct rnetPath* path = rc->paths + p;
  while (rc->nIssued < rc->nPosted) {
    struct rnetReq* r = rc->reqs + rc->nIssued % RNET_WINDOW;
    void* data = r->data;
    size_t size = r->size;
    int tag = 0;
    void* mh = r->mr ? r->mr->base[p] : NULL;
    void* req = NULL;
    MENDCHECK(rc->base->irecv(path->data, 1, &data, &size, &tag, &mh, &req));
    if (!req) break;
    r->base = req;
    r->basePath = p;
    rc->nIssued++;
  }
  return ncclSuccess;
}

/* Receiver: place the oldest issued message if it arrived (*placed: 1 when it did). */
static ncclResult_t placeOldest(struct rnetComm* rc, int p, int* placed) {
  struct rnetReq* r = rc->reqs + rc->nDone % RNET_WINDOW;
  int done = 0, size = 0;
  uint64_t word = 0;
  *placed = 0;
  if (rc->words)
    MENDCHECK(rc->base->testWord(r->base, &done, &size, &word));
  else
    MENDCHECK(rc->base->test(r->base, &done, &size));
  if (!done) return ncclSuccess;
  r->base = NULL;
  r->got = size;
  uint64_t now = rc->passNs;
  if (rc->nDone == ackedBy(rc)) rc->ackHeldNs = now;
  r->placedNs = now;
  rc->lastPlacedNs = now;
  rc->owedBytes += (uint64_t)size;
  rc->nDone++;
  rc->paths[p].msgs++;
  if (word) wordArrived(rc, word);
  *placed = 1;
  return ncclSuccess;
}

/* Receiver: issue, then place what arrived, in order, up to the request the caller tests
 * (placeTo).  Each base test of a message not yet here is a look at the socket (a system call),
 * and callers test oldest first: looking past the tested request, for a message the caller's next
 * test looks for anyway, made every small message cost a look more than the plain path, on the
 * critical path (from its arrival to the next send; benchmarks/RESULTS.md, "Where the rest goes"). */
static ncclResult_t recvPath(struct rnetComm* rc, int p) {
  uint64_t doneBefore = rc->nDone;
  MENDCHECK(issueRecvs(rc, p));
  int placed = 1;
  while (placed && rc->nDone < rc->nIssued && rc->nDone < rc->placeTo) MENDCHECK(placeOldest(rc, p, &placed));
  if (rc->words) atomic_store_explicit(&rc->placedPub, rc->nDone, memory_order_release);
  return sendCtrl(rc, p, rc->nDone != doneBefore, 0);
}

void mendRnetAckClose(struct rnetComm* rc) {
  rc->passNs = mendTimeNs();
  if (!rc->isSend && rc->error == ncclSuccess && rc->active >= 0 && mendRnetPathLive(rc, rc->active) &&
      rc->nDone > rc->ctrlSent && sendCtrl(rc, rc->active, 0, 1) == ncclSuccess) {
    /* Bounded: a peer that stopped reading must not hold our close. */
    int64_t until = mendTimeMs() + 100;
    while (rc->ctrlDone < rc->ctrlPosted && mendTimeMs() < until && reapCtrl(rc) == ncclSuccess) sched_yield();
  }
  if (atomic_exchange(&rc->ackHeldSince, 0)) mendResilAckHeld(rc->ctx->resil, -1);
}

/* One clock read a pass (rc->passNs): a pass over a receive connection that finds nothing read it
 * twice or three times (the held acknowledgement's deadline, the watch of idle paths, the detector),
 * at about 20 ns each, and a rank polls in such passes while its next message is on the way. */
ncclResult_t mendRnetProgress(struct rnetComm* rc) {
  if (rc->error != ncclSuccess) return rc->error;
  rc->passNs = mendTimeNs();
  MENDCHECK(mendRnetApplyNotices(rc));
  MENDCHECK(mendRnetRebuildProgress(rc));
  /* A failure moves us to the next path, which may fail at once too: walk the chain here. */
  for (int tries = 0; tries <= rc->nPaths + 1 && rc->error == ncclSuccess; tries++) {
    if (rc->isSend) {
      int moved = 0;
      MENDCHECK(watchIdle(rc, 0, &moved));
      if (moved) continue;
    }
    int p = rc->active;
    if (p < 0) break;  /* sender waiting for a RESUME */
    ncclResult_t res = rc->isSend ? sendPath(rc, p) : recvPath(rc, p);
    if (res == ncclSuccess) break;
    if (res == ncclRemoteError && rc->isSend) {
      /* The receiver closed our path: it moved, and its RESUME may be waiting on another one. */
      int moved = 0;
      MENDCHECK(watchIdle(rc, 1, &moved));
      if (moved) continue;
    }
    /* The base says "remote" when the peer closed or reset the path: it fenced it, or it is gone. */
    MENDCHECK(mendRnetFailPath(rc, p, res == ncclRemoteError ? MEND_RNET_KILL_CLOSED : MEND_RNET_KILL_ERROR, NULL));
  }
  return rc->error;
}

/* Take the next message number for a user request when the window has room (*request NULL when
 * it has not: call again), then move what can move. */
static ncclResult_t postMessage(struct rnetComm* rc, void* data, size_t size, struct rnetMr* mr, void** request) {
  *request = NULL;
  pthread_mutex_lock(&rc->lock);
  struct rnetReq* r = rc->reqs + rc->nPosted % RNET_WINDOW;
  /* Move things first only when the window has no room (each pass tests the base's requests). */
  int room = rc->nPosted - rc->nDone < RNET_WINDOW && !r->used && !r->base;
  ncclResult_t res = room ? rc->error : mendRnetProgress(rc);
  if (res == ncclSuccess && rc->nPosted - rc->nDone < RNET_WINDOW && !r->used && !r->base) {
    if (!rc->isSend && size > rc->maxRecvBytes) rc->maxRecvBytes = size > UINT32_MAX ? UINT32_MAX : (uint32_t)size;
    *r = (struct rnetReq){ .comm = rc, .used = 1, .seq = rc->nPosted, .data = data, .size = size, .mr = mr,
                           .postUs = (int64_t)(mendTimeNs() / 1000) };
    rc->nPosted++;
    /* A sender's clock starts with its first unacknowledged message. */
    if (rc->isSend && rc->nPosted - rc->nDone == 1) rc->lastProgressMs = mendTimeMs();
    *request = r;
    /* A receive on a quiet connection is only handed to the base (which looks at its socket once):
     * a whole pass would look again for the oldest message, which the caller's next test does. */
    int quiet = !rc->isSend && rc->active >= 0 && mendRnetPathLive(rc, rc->active) &&
                atomic_load_explicit(&rc->inboxCount, memory_order_acquire) == 0 && atomic_load(&rc->rebuilding) == 0;
    res = quiet && issueRecvs(rc, rc->active) == ncclSuccess ? ncclSuccess : mendRnetProgress(rc);
  }
  pthread_mutex_unlock(&rc->lock);
  return res;
}

static ncclResult_t rnetIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  struct rnetComm* rc = sendComm;
  MENDARGCHECK(rc != NULL && request != NULL && rc->isSend, ncclInvalidArgument, "NET/Resilient: isend: bad comm or request");
  MENDARGCHECK(mhandle == NULL || ((struct rnetMr*)mhandle)->magic == RNET_MR_MAGIC, ncclInvalidArgument,
               "NET/Resilient: isend: %p is not a registration of this Net", mhandle);
  (void)tag;
  return postMessage(rc, data, size, mhandle, request);
}

static ncclResult_t rnetIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                              void** request) {
  struct rnetComm* rc = recvComm;
  MENDARGCHECK(rc != NULL && request != NULL && !rc->isSend, ncclInvalidArgument, "NET/Resilient: irecv: bad comm or request");
  MENDARGCHECK(n == 1 && data && sizes, ncclInvalidArgument, "NET/Resilient: irecv: %d receives at once (maxRecvs is 1)", n);
  void* mh = mhandles ? mhandles[0] : NULL;
  MENDARGCHECK(mh == NULL || ((struct rnetMr*)mh)->magic == RNET_MR_MAGIC, ncclInvalidArgument,
               "NET/Resilient: irecv: %p is not a registration of this Net", mh);
  (void)tags;
  return postMessage(rc, data[0], sizes[0], mh, request);
}

static ncclResult_t rnetTest(void* request, int* done, int* sizes) {
  struct rnetReq* r = request;
  MENDARGCHECK(r != NULL && done != NULL && r->used && r->comm, ncclInvalidArgument, "NET/Resilient: test: bad request %p", request);
  struct rnetComm* rc = r->comm;
  *done = 0;
  pthread_mutex_lock(&rc->lock);
  if (!rc->isSend) rc->placeTo = r->seq + 1;
  ncclResult_t res = mendRnetProgress(rc);
  rc->placeTo = UINT64_MAX;
  if (res == ncclSuccess && r->seq < rc->nDone) {
    *done = 1;
    if (sizes) sizes[0] = rc->isSend ? (int)r->size : r->got;
    r->used = 0;
  }
  pthread_mutex_unlock(&rc->lock);
  return res;
}

/* Host memory only (what the socket Net carries): receives are visible once placed. */
static ncclResult_t rnetIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  (void)recvComm, (void)n, (void)data, (void)sizes, (void)mhandles;
  MENDARGCHECK(request != NULL, ncclInvalidArgument, "NET/Resilient: iflush: request is NULL");
  *request = NULL;
  return ncclSuccess;
}

ncclResult_t mendRnetGetStats(void* netComm, struct mendRnetStats* st) {
  struct rnetComm* rc = netComm;
  MENDARGCHECK(rc != NULL && st != NULL, ncclInvalidArgument, "NET/Resilient: stats: NULL argument");
  memset(st, 0, sizeof(*st));
  pthread_mutex_lock(&rc->lock);
  st->nPaths = rc->nPaths;
  st->active = rc->active;
  st->failovers = rc->failovers;
  st->failbacks = rc->failbacks;
  st->rebuilds = rc->rebuilds;
  st->ctrlLooks = rc->ctrlLooks;
  st->wordAcks = rc->wordAcks;
  st->ctrlSent = rc->isSend ? 0 : rc->ctrlPosted;
  st->cross = rc->crossPath;
  st->relay = rc->crossPath >= 0 && rc->paths[rc->crossPath].relayed ? rc->paths[rc->crossPath].relayRank : -1;
  for (int p = 0; p < rc->nPaths; p++) {
    st->dead += !mendRnetPathLive(rc, p);
    st->msgs[p] = rc->paths[p].msgs;
    st->localDev[p] = rc->paths[p].localDev;
    st->remoteDev[p] = rc->paths[p].remoteDev;
  }
  pthread_mutex_unlock(&rc->lock);
  return ncclSuccess;
}

const mendNet_t mendNetResilient = {
  .name = "Resilient",
  .init = rnetInit,
  .devices = rnetDevices,
  .getProperties = rnetGetProperties,
  .listen = mendRnetListen,
  .connect = mendRnetConnect,
  .accept = mendRnetAccept,
  .regMr = rnetRegMr,
  .deregMr = rnetDeregMr,
  .isend = rnetIsend,
  .irecv = rnetIrecv,
  .iflush = rnetIflush,
  .test = rnetTest,
  .closeSend = mendRnetCloseSend,
  .closeRecv = mendRnetCloseRecv,
  .closeListen = mendRnetCloseListen,
  .finalize = rnetFinalize,
};
