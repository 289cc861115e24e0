/*
 * The bridge's side of a relay path (relay.h).  A link of a running connection is built in one round
 * of messages:
 *   sender S -> bridge:  OPEN(S's ctrl listen)
 *   bridge:              listen on S's rail (for S's data) and on R's rail (for R's acknowledgements);
 *                        REBUILD(our listen on R's rail) -> R, as S's own rebuild would (rnet_rebuild.c);
 *                        connect our ctrl comm to S's listen
 *   receiver R -> bridge: ACCEPT(R's data listen, its largest receive): we connect our data comm to it and
 *                        send REBUILD_ACK(our listen on S's rail) -> S, as R's own rebuild would.  Only now:
 *                        S's REBUILT goes straight to R, which must have made its slot (it did, before ACCEPT)
 * A link for a connection being set up (SETUP) is simpler: S already has R's listen handle, so the
 * bridge connects to both ends at once and answers S with READY(its two listens); S connects its data
 * comm to the first and tells R the second in its hello (rnet_relay.c).
 * Then it forwards: every message S sends on its data comm goes out on ours to R, every control
 * message R sends goes out to S, each direction in order through MEND_RELAY_SLOTS buffers.  The ends
 * fence a relay path as any other, by closing their comms: the link sees an error and closes the rest.
 * A link not running within the rebuild's bound is closed too.
 */
#include "resilience/relay.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checks.h"
#include "misc/utils.h"
#include "resilience/rnet_priv.h"

#define RELAY_CTRL_BYTES sizeof(struct rnetHello) /* a control message, or the receiver's hello at set-up */
#define RELAY_MIN_BYTES (64u << 10) /* buffers are at least this large */
#define RELAY_IDLE_SPINS 64      /* idle passes before the thread naps */
#define RELAY_NAP_NS 20000       /* its nap while links are open and moved lately ... */
#define RELAY_NAP_MAX_NS 500000  /* ... growing to this after long idleness (a relay's CPU on the bridge) */
#define RELAY_WAIT_MS 100        /* its wait while none is */

enum relayStage {
  RELAY_CONNECTING = 0, /* listening and connecting (a direction whose two comms are up forwards already) */
  RELAY_RUNNING,        /* all four comms up */
};

/* One direction of a link: what comes in on `in` goes out on `out`, in order. */
struct relayDir {
  void* in;                              /* base recvComm */
  void* out;                             /* base sendComm */
  void* inMh;                            /* the buffers' registration on `in` */
  void* outMh;                           /* ... and on `out` */
  char* buf;                             /* nSlots x slotBytes */
  size_t slotBytes;                      /* largest message */
  void* rreq[MEND_RELAY_SLOTS];          /* receives in flight */
  void* sreq[MEND_RELAY_SLOTS];          /* sends in flight */
  int size[MEND_RELAY_SLOTS];            /* bytes received per slot */
  uint64_t recvPosted, recvDone, sendPosted, sendDone; /* ring counters */
};

struct relayLink {
  struct mendRelayMsg open;              /* the OPEN it was made from (ranks, ids, path, devices) */
  int stage;                             /* enum relayStage */
  int64_t deadlineMs;                    /* closed when not running by then */
  void* listenSrc;                       /* on srcDev: the sender connects its data comm here */
  void* listenDst;                       /* on dstDev: the receiver connects its ctrl comm here */
  char hsrc[MEND_NET_HANDLE_MAXSIZE];    /* the sender's ctrl listen (our ctrl out connects there) */
  char hdst[MEND_NET_HANDLE_MAXSIZE];    /* the receiver's data listen (our data out connects there) */
  char ours[MEND_NET_HANDLE_MAXSIZE];    /* our listen on the sender's rail (REBUILD_ACK, once R accepted) */
  int haveDst;                           /* ACCEPT received */
  uint32_t maxBytes;                     /* from ACCEPT */
  struct relayDir data;                  /* sender -> receiver */
  struct relayDir ctrl;                  /* receiver -> sender */
  struct relayLink* next;
};

struct relayItem {
  int from;                              /* the rank that sent it */
  struct mendRelayMsg m;
  struct relayItem* next;
};

struct mendRelay {
  const mendNet_t* base;                 /* the Net under the resilient one */
  void* baseCtx;                         /* its context (the caller's) */
  int rank, nRanks, nDevs;               /* ours: requests are checked against these */
  struct mendRelayOps ops;               /* notices to the ends */
  pthread_t thread;                      /* the engine's thread */
  int running;                           /* started (must be joined) */
  _Atomic int stop;                      /* the thread leaves */
  pthread_mutex_t lock;                  /* the inbox */
  pthread_cond_t cond;                   /* inbox not empty, or stop */
  struct relayItem* inHead;              /* requests not yet acted on (arrival order) */
  struct relayItem* inTail;
  struct relayLink* links;               /* the thread's own */
  _Atomic int nLinks, nRunning;          /* statistics */
  _Atomic uint64_t opened, closed, msgs, bytes, ctrlMsgs;
};

/* ---------------------------------------------------------------- notices to the ends */

static void notify(struct mendRelay* rl, int rank, int type, uint64_t connId, int path, int cause, const void* handle) {
  struct rnetNotice n = { .magic = RNET_MAGIC, .type = (uint16_t)type, .path = (uint16_t)path, .connId = connId,
                          .cause = cause, .fromRank = rl->rank, .remote = 1 };
  if (handle) memcpy(n.handle, handle, sizeof(n.handle));
  if (rl->ops.notify) rl->ops.notify(rl->ops.ctx, rank, &n);
  else if (!mendRnetDeliver(NULL, &n))
    INFO(MEND_RESIL, "NET/Relay: rank %d: no connection %llx in this process for notice %d", rl->rank,
         (unsigned long long)connId, type);
}

/* ---------------------------------------------------------------- links */

static void dirClose(const mendNet_t* b, struct relayDir* d) {
  if (d->in) {
    if (d->inMh) b->deregMr(d->in, d->inMh);
    b->closeRecv(d->in);
  }
  if (d->out) {
    if (d->outMh) b->deregMr(d->out, d->outMh);
    b->closeSend(d->out);
  }
  free(d->buf);
  memset(d, 0, sizeof(*d));
}

static void linkClose(struct mendRelay* rl, struct relayLink* l, const char* why) {
  const mendNet_t* b = rl->base;
  INFO(MEND_RESIL, "NET/Relay: rank %d: relay of rank %d -> rank %d (conn %llx path %d, devices %d -> %d) closed: %s",
       rl->rank, l->open.srcRank, l->open.dstRank, (unsigned long long)l->open.srcConn, l->open.path, l->open.srcDev,
       l->open.dstDev, why);
  if (l->listenSrc) b->closeListen(l->listenSrc);
  if (l->listenDst) b->closeListen(l->listenDst);
  dirClose(b, &l->data);
  dirClose(b, &l->ctrl);
  if (l->stage == RELAY_RUNNING) atomic_fetch_sub(&rl->nRunning, 1);
  atomic_fetch_sub(&rl->nLinks, 1);
  atomic_fetch_add(&rl->closed, 1);
  free(l);
}

static struct relayLink** findLink(struct mendRelay* rl, const struct mendRelayMsg* m) {
  for (struct relayLink** pp = &rl->links; *pp; pp = &(*pp)->next) {
    const struct mendRelayMsg* o = &(*pp)->open;
    if (o->srcRank == m->srcRank && o->srcConn == m->srcConn && o->path == m->path) return pp;
  }
  return NULL;
}

static void unlinkClose(struct mendRelay* rl, struct relayLink** pp, const char* why) {
  struct relayLink* l = *pp;
  *pp = l->next;
  linkClose(rl, l, why);
}

static void reply(struct mendRelay* rl, const struct mendRelayMsg* m, int kind, const void* h, const void* h2) {
  struct mendRelayMsg r = *m;
  r.kind = (uint16_t)kind;
  memset(r.handle, 0, sizeof(r.handle));
  memset(r.handle2, 0, sizeof(r.handle2));
  if (h) memcpy(r.handle, h, sizeof(r.handle));
  if (h2) memcpy(r.handle2, h2, sizeof(r.handle2));
  if (rl->ops.reply) rl->ops.reply(rl->ops.ctx, m->srcRank, &r);
  else if (!mendRnetViaReady(NULL, rl->rank, &r))
    INFO(MEND_RESIL, "NET/Relay: rank %d: no connection %llx in this process to answer", rl->rank,
         (unsigned long long)m->srcConn);
}

/* OPEN or SETUP: listen on both rails, then hand each end the handle it connects to (OPEN: as the
 * ends' rebuild protocol expects from each other; SETUP: both to the sender, in READY). */
static void linkOpen(struct mendRelay* rl, const struct mendRelayMsg* m) {
  struct relayLink** old = findLink(rl, m);
  if (old) unlinkClose(rl, old, "the sender opened it again");
  struct relayLink* l = calloc(1, sizeof(*l));
  char hsrc[MEND_NET_HANDLE_MAXSIZE] = { 0 }, hdst[MEND_NET_HANDLE_MAXSIZE] = { 0 };
  if (!l || rl->base->listen(rl->baseCtx, m->srcDev, hsrc, &l->listenSrc) != ncclSuccess ||
      rl->base->listen(rl->baseCtx, m->dstDev, hdst, &l->listenDst) != ncclSuccess) {
    WARN("NET/Relay: rank %d cannot relay rank %d -> rank %d over devices %d -> %d: listen failed", rl->rank,
         m->srcRank, m->dstRank, m->srcDev, m->dstDev);
    if (l && l->listenSrc) rl->base->closeListen(l->listenSrc);
    free(l);
    if (m->kind == MEND_RELAY_SETUP) reply(rl, m, MEND_RELAY_REFUSED, NULL, NULL);
    else notify(rl, m->srcRank, RNET_NOTE_REBUILD_FAIL, m->srcConn, m->path, 0, NULL);
    return;
  }
  l->open = *m;
  memcpy(l->hsrc, m->handle, sizeof(l->hsrc));
  memcpy(l->ours, hsrc, sizeof(l->ours));
  if (m->kind == MEND_RELAY_SETUP) {  /* the receiver's listen is known already */
    memcpy(l->hdst, m->handle2, sizeof(l->hdst));
    l->maxBytes = m->maxBytes;
    l->haveDst = 1;
  }
  l->stage = RELAY_CONNECTING;
  l->deadlineMs = mendTimeMs() + mendRnetRebuildTimeoutMs();
  l->next = rl->links;
  rl->links = l;
  atomic_fetch_add(&rl->nLinks, 1);
  atomic_fetch_add(&rl->opened, 1);
  INFO(MEND_RESIL, "NET/Relay: rank %d relays rank %d -> rank %d (conn %llx path %d%s) over devices %d -> %d",
       rl->rank, m->srcRank, m->dstRank, (unsigned long long)m->srcConn, m->path,
       m->kind == MEND_RELAY_SETUP ? ", set-up" : "", m->srcDev, m->dstDev);
  if (m->kind == MEND_RELAY_SETUP) {
    reply(rl, m, MEND_RELAY_READY, hsrc, hdst);
    return;
  }
  int code = (int)(MEND_RELAY_TAG | (uint32_t)m->srcDev << 8 | (uint32_t)m->dstDev);
  notify(rl, m->dstRank, RNET_NOTE_REBUILD, m->dstConn, m->path, code, hdst);
}

/* ACCEPT: the receiver's data listen; the link connects to it. */
static void linkAccept(struct mendRelay* rl, int from, const struct mendRelayMsg* m) {
  struct relayLink** pp = findLink(rl, m);
  if (!pp || (*pp)->open.dstRank != from || (*pp)->haveDst) {
    INFO(MEND_RESIL, "NET/Relay: rank %d: ACCEPT from rank %d for no link being built (conn %llx path %d): ignored",
         rl->rank, from, (unsigned long long)m->srcConn, m->path);
    return;
  }
  struct relayLink* l = *pp;
  memcpy(l->hdst, m->handle, sizeof(l->hdst));
  l->maxBytes = m->maxBytes;
  l->haveDst = 1;
  notify(rl, l->open.srcRank, RNET_NOTE_REBUILD_ACK, l->open.srcConn, l->open.path, 0, l->ours);
}

/* A direction's buffers, once its two comms are up. */
static ncclResult_t dirBuffers(const mendNet_t* b, struct relayDir* d, size_t slotBytes) {
  if (d->buf || !d->in || !d->out) return ncclSuccess;
  d->slotBytes = slotBytes;
  MENDCHECK(MENDCALLOC(d->buf, slotBytes * MEND_RELAY_SLOTS));
  size_t all = slotBytes * MEND_RELAY_SLOTS;
  MENDCHECK(b->regMr(d->in, d->buf, all, MEND_PTR_HOST, &d->inMh));
  MENDCHECK(b->regMr(d->out, d->buf, all, MEND_PTR_HOST, &d->outMh));
  return ncclSuccess;
}

/* One step of a link being built: connect, accept; a direction's buffers once its two comms are up
 * (at set-up the sender's hello must pass before the receiver connects its ctrl comm). */
static ncclResult_t linkConnect(struct mendRelay* rl, struct relayLink* l, int* moved) {
  const mendNet_t* b = rl->base;
  const struct mendRelayMsg* o = &l->open;
  if (!l->ctrl.out) MENDCHECK(b->connect(rl->baseCtx, o->srcDev, l->hsrc, &l->ctrl.out));
  if (!l->data.in) MENDCHECK(b->accept(l->listenSrc, &l->data.in));
  if (!l->ctrl.in) MENDCHECK(b->accept(l->listenDst, &l->ctrl.in));
  if (l->haveDst && !l->data.out) MENDCHECK(b->connect(rl->baseCtx, o->dstDev, l->hdst, &l->data.out));
  MENDCHECK(dirBuffers(b, &l->data, l->maxBytes < RELAY_MIN_BYTES ? RELAY_MIN_BYTES : l->maxBytes));
  MENDCHECK(dirBuffers(b, &l->ctrl, RELAY_CTRL_BYTES));
  if (!l->ctrl.out || !l->data.in || !l->ctrl.in || !l->data.out) return ncclSuccess;
  b->closeListen(l->listenSrc);
  b->closeListen(l->listenDst);
  l->listenSrc = l->listenDst = NULL;
  l->stage = RELAY_RUNNING;
  atomic_fetch_add(&rl->nRunning, 1);
  *moved = 1;
  return ncclSuccess;
}

/* Forward what one direction can move now: receives into free slots, sends of received slots, in
 * order.  Returns the messages sent (completed) in *sent. */
static ncclResult_t dirStep(const mendNet_t* b, struct relayDir* d, uint64_t* sent, uint64_t* bytes) {
  while (d->recvPosted - d->sendDone < MEND_RELAY_SLOTS) {
    int k = (int)(d->recvPosted % MEND_RELAY_SLOTS), tag = 0;
    void* data = d->buf + (size_t)k * d->slotBytes;
    size_t size = d->slotBytes;
    void* req = NULL;
    MENDCHECK(b->irecv(d->in, 1, &data, &size, &tag, &d->inMh, &req));
    if (!req) break;
    d->rreq[k] = req;
    d->recvPosted++;
  }
  while (d->recvDone < d->recvPosted) {
    int k = (int)(d->recvDone % MEND_RELAY_SLOTS), done = 0, size = 0;
    MENDCHECK(b->test(d->rreq[k], &done, &size));
    if (!done) break;
    d->rreq[k] = NULL;
    d->size[k] = size;
    d->recvDone++;
  }
  while (d->sendPosted < d->recvDone) {
    int k = (int)(d->sendPosted % MEND_RELAY_SLOTS);
    void* req = NULL;
    MENDCHECK(b->isend(d->out, d->buf + (size_t)k * d->slotBytes, (size_t)d->size[k], 0, d->outMh, &req));
    if (!req) break;
    d->sreq[k] = req;
    d->sendPosted++;
  }
  while (d->sendDone < d->sendPosted) {
    int k = (int)(d->sendDone % MEND_RELAY_SLOTS), done = 0, size = 0;
    MENDCHECK(b->test(d->sreq[k], &done, &size));
    if (!done) break;
    d->sreq[k] = NULL;
    d->sendDone++;
    (*sent)++;
    *bytes += (uint64_t)d->size[k];
  }
  return ncclSuccess;
}

/* One step of link l; 0 when it must close (why set). */
static int linkStep(struct mendRelay* rl, struct relayLink* l, int* moved, const char** why) {
  if (l->stage == RELAY_CONNECTING) {
    if (linkConnect(rl, l, moved) != ncclSuccess) {
      *why = "connecting failed";
      return 0;
    }
    if (l->stage == RELAY_CONNECTING && mendTimeMs() > l->deadlineMs) {
      *why = l->haveDst ? "not connected in time" : "the receiver never accepted";
      return 0;
    }
  }
  uint64_t msgs = 0, bytes = 0, ctrl = 0, ctrlBytes = 0;
  if (l->data.buf && dirStep(rl->base, &l->data, &msgs, &bytes) != ncclSuccess) {
    *why = "the data direction failed (an end fenced the path, or a link died)";
    return 0;
  }
  if (l->ctrl.buf && dirStep(rl->base, &l->ctrl, &ctrl, &ctrlBytes) != ncclSuccess) {
    *why = "the control direction failed (an end fenced the path, or a link died)";
    return 0;
  }
  if (msgs | ctrl) {
    *moved = 1;
    atomic_fetch_add(&rl->msgs, msgs);
    atomic_fetch_add(&rl->bytes, bytes);
    atomic_fetch_add(&rl->ctrlMsgs, ctrl);
  }
  return 1;
}

/* ---------------------------------------------------------------- the thread */

static void applyInbox(struct mendRelay* rl) {
  pthread_mutex_lock(&rl->lock);
  struct relayItem* it = rl->inHead;
  rl->inHead = rl->inTail = NULL;
  pthread_mutex_unlock(&rl->lock);
  while (it) {
    struct relayItem* next = it->next;
    if (it->m.kind == MEND_RELAY_ACCEPT) linkAccept(rl, it->from, &it->m);
    else linkOpen(rl, &it->m);
    free(it);
    it = next;
  }
}

/* Idle passes in a row -> nap: 20 us while traffic is recent (a message waits at most that long
 * at the bridge), doubling every 1024 naps to 500 us after about half a second of nothing. */
static long napNs(int idle) {
  long ns = RELAY_NAP_NS;
  for (int k = idle / 1024; k > 0 && ns < RELAY_NAP_MAX_NS; k--) ns *= 2;
  return ns < RELAY_NAP_MAX_NS ? ns : RELAY_NAP_MAX_NS;
}

static void nap(struct mendRelay* rl, int idle) {
  pthread_mutex_lock(&rl->lock);
  if (!rl->inHead && !atomic_load(&rl->stop)) {
    if (rl->links) {
      pthread_mutex_unlock(&rl->lock);
      struct timespec ts = { 0, napNs(idle) };
      nanosleep(&ts, NULL);
      return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += RELAY_WAIT_MS * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&rl->cond, &rl->lock, &ts);
  }
  pthread_mutex_unlock(&rl->lock);
}

static void* relayMain(void* arg) {
  struct mendRelay* rl = arg;
  int idle = 0;
  while (!atomic_load(&rl->stop)) {
    applyInbox(rl);
    int moved = 0;
    for (struct relayLink** pp = &rl->links; *pp;) {
      const char* why = NULL;
      if (!linkStep(rl, *pp, &moved, &why)) {
        unlinkClose(rl, pp, why);
        continue;
      }
      pp = &(*pp)->next;
    }
    idle = moved ? 0 : idle < (1 << 20) ? idle + 1 : idle;
    if (idle > RELAY_IDLE_SPINS) nap(rl, idle - RELAY_IDLE_SPINS);
  }
  while (rl->links) unlinkClose(rl, &rl->links, "the communicator is closing");
  return NULL;
}

ncclResult_t mendRelayCreate(const mendNet_t* base, void* baseCtx, int rank, int nRanks, int nDevs,
                             const struct mendRelayOps* ops, struct mendRelay** out) {
  MENDARGCHECK(base && out, ncclInvalidArgument, "NET/Relay: create: NULL argument");
  struct mendRelay* rl;
  MENDCHECK(MENDCALLOC(rl, 1));
  *rl = (struct mendRelay){ .base = base, .baseCtx = baseCtx, .rank = rank, .nRanks = nRanks, .nDevs = nDevs,
                            .ops = ops ? *ops : (struct mendRelayOps){ 0 } };
  pthread_mutex_init(&rl->lock, NULL);
  pthread_cond_init(&rl->cond, NULL);
  int err = pthread_create(&rl->thread, NULL, relayMain, rl);
  if (err) {
    WARN("NET/Relay: cannot start the relay thread: %s", strerror(err));
    pthread_cond_destroy(&rl->cond);
    pthread_mutex_destroy(&rl->lock);
    free(rl);
    return ncclSystemError;
  }
  rl->running = 1;
  *out = rl;
  return ncclSuccess;
}

void mendRelayPost(struct mendRelay* rl, int from, const struct mendRelayMsg* m) {
  const char* why = NULL;
  if (m->kind > MEND_RELAY_SETUP || !mendRelayMsgCheck(m, from, rl->rank, rl->nRanks, rl->nDevs, &why)) {
    WARN_SPARSE(1000, "NET/Relay: rank %d: relay request %u from rank %d refused: %s", rl->rank, m->kind, from,
                why ? why : "not a request for a bridge");
    if (m->kind == MEND_RELAY_OPEN && from >= 0 && from < rl->nRanks && from != rl->rank)
      notify(rl, from, RNET_NOTE_REBUILD_FAIL, m->srcConn, m->path < MEND_RNET_MAX_SLOTS ? m->path : 0, 0, NULL);
    return;
  }
  struct relayItem* it = malloc(sizeof(*it));
  if (!it) {
    WARN("NET/Relay: out of memory for a relay request");
    return;
  }
  *it = (struct relayItem){ .from = from, .m = *m };
  pthread_mutex_lock(&rl->lock);
  if (rl->inTail) rl->inTail->next = it;
  else rl->inHead = it;
  rl->inTail = it;
  pthread_cond_signal(&rl->cond);
  pthread_mutex_unlock(&rl->lock);
}

void mendRelayFree(struct mendRelay* rl) {
  if (!rl) return;
  atomic_store(&rl->stop, 1);
  pthread_mutex_lock(&rl->lock);
  pthread_cond_signal(&rl->cond);
  pthread_mutex_unlock(&rl->lock);
  if (rl->running) pthread_join(rl->thread, NULL);
  while (rl->inHead) {
    struct relayItem* it = rl->inHead;
    rl->inHead = it->next;
    free(it);
  }
  pthread_cond_destroy(&rl->cond);
  pthread_mutex_destroy(&rl->lock);
  free(rl);
}

void mendRelayGetStats(struct mendRelay* rl, struct mendRelayStats* st) {
  memset(st, 0, sizeof(*st));
  if (!rl) return;
  st->links = atomic_load(&rl->nLinks);
  st->running = atomic_load(&rl->nRunning);
  st->opened = atomic_load(&rl->opened);
  st->closed = atomic_load(&rl->closed);
  st->msgs = atomic_load(&rl->msgs);
  st->bytes = atomic_load(&rl->bytes);
  st->ctrlMsgs = atomic_load(&rl->ctrlMsgs);
}
