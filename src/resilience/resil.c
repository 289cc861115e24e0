/*
 * The resilience service of a communicator (see resil.h): set-up, the service loop, the
 * out-of-band receiver, and the out queue.
 */
#include "resilience/resil_priv.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "bootstrap.h"
#include "checks.h"
#include "comm.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "resilience/detect.h"
#include "resilience/resil_wire.h"

#define SVC_BUSY_MS 5     /* service loop tick while something is in flight */
#define SVC_IDLE_MS 50    /* tick when idle (link events and wake-ups interrupt it) */
#define SVC_ACK_MS 1      /* tick while a connection holds an acknowledgement */
#define OOB_SLICE_MS 100  /* out-of-band receive slice (bounds how long stop takes) */
#define HK_MAX 64         /* connections progressed per housekeeping round */

int mendResilRank(const struct mendResil* r) { return r ? r->rank : -1; }

int mendResilRanks(const struct mendResil* r) { return r ? r->nRanks : 0; }

int mendResilLinkUp(struct mendResil* r, int dev) {
  if (!r || dev < 0 || dev >= r->nDevs) return -1;
  return atomic_load(&r->devs[dev].linkUp);
}

void mendResilWake(struct mendResil* r) {
  if (!r || r->evFd < 0) return;
  uint64_t one = 1;
  ssize_t n = write(r->evFd, &one, sizeof(one));
  (void)n;
}

void mendResilAckHeld(struct mendResil* r, int delta) {
  if (!r) return;
  /* Paired with serviceMain's napping then acksHeld: one of the two sees the other. */
  if (atomic_fetch_add(&r->acksHeld, delta) == 0 && delta > 0 && atomic_load(&r->napping)) mendResilWake(r);
}

/* ---------------------------------------------------------------- out queue */

void mendResilQueue(struct mendResil* r, int peer, const struct resilMsg* m) {
  if (!r->comm || peer < 0 || peer >= r->nRanks || peer == r->rank) return;
  struct resilOut* o = malloc(sizeof(*o));
  if (!o) {
    WARN("NET/Resilient: out of memory for an out-of-band message to rank %d", peer);
    return;
  }
  o->peer = peer;
  o->msg = *m;
  o->next = NULL;
  pthread_mutex_lock(&r->outLock);
  o->msg.seq = ++r->nextSeq;
  if (r->outTail) r->outTail->next = o;
  else r->outHead = o;
  r->outTail = o;
  pthread_mutex_unlock(&r->outLock);
  mendResilWake(r);
}

void mendResilSendNotice(struct mendResil* r, int peer, const struct rnetNotice* n) {
  struct resilMsg m = { .magic = RESIL_MSG_MAGIC, .type = RESIL_MSG_NOTICE, .u.notice = *n };
  mendResilQueue(r, peer, &m);
}

void mendResilSendRelay(struct mendResil* r, int bridge, const struct mendRelayMsg* rm) {
  struct resilMsg m = { .magic = RESIL_MSG_MAGIC, .type = RESIL_MSG_RELAY, .u.relay = *rm };
  mendResilQueue(r, bridge, &m);
}

/* The bridge's notices and answers to the two ends: directly when the end lives in this process. */
static void relayNotify(void* ctx, int rank, const struct rnetNotice* n) {
  if (!mendRnetDeliver(NULL, n)) mendResilSendNotice(ctx, rank, n);
}

static void relayReply(void* ctx, int rank, const struct mendRelayMsg* m) {
  struct mendResil* r = ctx;
  if (!mendRnetViaReady(NULL, r->rank, m)) mendResilSendRelay(r, rank, m);
}

/* A relay message: a bridge's answer to our set-up, or a request for us as the bridge (the engine is
 * made on the first one). */
static void relayMsg(struct mendResil* r, int from, const struct mendRelayMsg* m) {
  if (m->kind == MEND_RELAY_READY || m->kind == MEND_RELAY_REFUSED) {
    const char* why = NULL;
    if (!mendRelayMsgCheck(m, from, r->rank, r->nRanks, r->nDevs, &why))
      WARN_SPARSE(1000, "NET/Relay: rank %d: answer %u from rank %d dropped: %s", r->rank, m->kind, from, why);
    else if (!r->ctx || !mendRnetViaReady(r->ctx, from, m))
      INFO(MEND_RESIL, "NET/Relay: rank %d: answer from rank %d for an unknown set-up", r->rank, from);
    return;
  }
  if (!r->relay && r->ctx) {
    struct mendRelayOps ops = { .notify = relayNotify, .reply = relayReply, .ctx = r };
    if (mendRelayCreate(r->base, r->ctx->baseCtx, r->rank, r->nRanks, r->nDevs, &ops, &r->relay) != ncclSuccess)
      r->relay = NULL;
  }
  if (r->relay) {
    mendRelayPost(r->relay, from, m);
    return;
  }
  WARN_SPARSE(1000, "NET/Relay: rank %d cannot relay for rank %d: no resilient net here", r->rank, from);
  if (m->kind == MEND_RELAY_OPEN && m->path < MEND_RNET_MAX_SLOTS) {
    struct rnetNotice n = { .magic = RNET_MAGIC, .type = RNET_NOTE_REBUILD_FAIL, .path = m->path, .connId = m->srcConn,
                            .fromRank = r->rank, .remote = 1 };
    mendResilSendNotice(r, from, &n);
  }
}

/* Is rank y a bridge for a relay path between us and `peer` over our device a and its device b? */
static int bridgeFits(struct mendResil* r, int y, int peer, int a, int b) {
  return y != r->rank && y != peer && r->peerHost[y] != r->peerHost[r->rank] && r->peerHost[y] != r->peerHost[peer] &&
         a < r->peerNDevs[y] && b < r->peerNDevs[y] && mendResilDevUsable(r, y, a) && mendResilDevUsable(r, y, b) &&
         mendResilPeerProbe(r, y, a) && mendResilPeerProbe(r, y, b);
}

int mendResilRelayPick(struct mendResil* r, int peer, uint64_t salt, int peerDevOnly, int* myDev, int* peerDev) {
  if (!r || peer < 0 || peer >= r->nRanks) return -1;
  /* Rails that differ first: a bridge is needed because the two ends share no working rail. */
  for (int same = 0; same < 2; same++) {
    for (int a = 0; a < r->nDevs; a++) {
      if (!mendResilDevUsable(r, r->rank, a)) continue;
      for (int b = 0; b < r->peerNDevs[peer] && b < RESIL_MAX_DEVS; b++) {
        if ((a == b) != same || (peerDevOnly >= 0 && b != peerDevOnly) || !mendResilDevUsable(r, peer, b)) continue;
        int n = 0;
        for (int y = 0; y < r->nRanks; y++) n += bridgeFits(r, y, peer, a, b);
        if (n == 0) continue;
        int k = (int)(salt % (uint64_t)n);
        for (int y = 0; y < r->nRanks; y++) {
          if (!bridgeFits(r, y, peer, a, b) || k-- > 0) continue;
          *myDev = a;
          *peerDev = b;
          return y;
        }
      }
    }
  }
  return -1;
}

/* The agreement's way out: the out queue (agree.h). */
static void agreeSend(void* ctx, int peer, const struct mendAgreeMsg* am) {
  struct resilMsg m = { .magic = RESIL_MSG_MAGIC, .type = RESIL_MSG_AGREE, .u.agree = *am };
  mendResilQueue(ctx, peer, &m);
}

/* Remember a sent notice until its ACK (outLock held). */
static void trackUnacked(struct mendResil* r, const struct resilOut* o) {
  struct resilUnacked* u = malloc(sizeof(*u));
  if (!u) return;
  *u = (struct resilUnacked){ .peer = o->peer, .sentMs = mendTimeMs(), .msg = o->msg, .next = r->unacked };
  r->unacked = u;
}

/* Send what is queued; a notice not acknowledged in time is sent once more (the bootstrap is TCP, so
 * this only matters when its connection was rebuilt) and logged. */
static void flushOut(struct mendResil* r) {
  for (;;) {
    pthread_mutex_lock(&r->outLock);
    struct resilOut* o = r->outHead;
    if (o) {
      r->outHead = o->next;
      if (!r->outHead) r->outTail = NULL;
      if (o->msg.type == RESIL_MSG_NOTICE) trackUnacked(r, o);
    }
    pthread_mutex_unlock(&r->outLock);
    if (!o) break;
    ncclResult_t res = mendBootstrapSend(r->comm->bootstrap, o->peer, RESIL_TAG, &o->msg, sizeof(o->msg));
    if (res != ncclSuccess && !mendCommAborted(r->comm))
      WARN_SPARSE(1000, "NET/Resilient: rank %d: out-of-band message %u to rank %d not sent (error %d)", r->rank,
                  o->msg.type, o->peer, res);
    free(o);
  }
  int64_t now = mendTimeMs(), late = 2 * mendParamProgressTimeout() + 500;
  pthread_mutex_lock(&r->outLock);
  for (struct resilUnacked** pp = &r->unacked; *pp;) {
    struct resilUnacked* u = *pp;
    if (now - u->sentMs < late) {
      pp = &u->next;
      continue;
    }
    if (!u->resent && u->msg.u.notice.type == RNET_NOTE_KILL) {
      WARN_SPARSE(1000, "NET/Resilient: rank %d: notice to rank %d not acknowledged after %lld ms; sending it again",
                  r->rank, u->peer, (long long)(now - u->sentMs));
      u->resent = 1;
      u->sentMs = now;
      struct resilOut* o = malloc(sizeof(*o));
      if (o) {
        *o = (struct resilOut){ .peer = u->peer, .msg = u->msg, .next = NULL };
        if (r->outTail) r->outTail->next = o;
        else r->outHead = o;
        r->outTail = o;
      }
      pp = &u->next;
      continue;
    }
    *pp = u->next;  /* given up on (or not worth a second try): forget it */
    free(u);
  }
  pthread_mutex_unlock(&r->outLock);
}

static void takeAck(struct mendResil* r, int from, uint64_t seq) {
  pthread_mutex_lock(&r->outLock);
  for (struct resilUnacked** pp = &r->unacked; *pp; pp = &(*pp)->next) {
    struct resilUnacked* u = *pp;
    if (u->peer == from && u->msg.seq == seq) {
      *pp = u->next;
      free(u);
      break;
    }
  }
  pthread_mutex_unlock(&r->outLock);
}

int mendResilDevUsable(struct mendResil* r, int rank, int dev) {
  if (!r) return 1;
  if (rank == r->rank && dev >= 0 && dev < r->nDevs && atomic_load(&r->devs[dev].linkUp) == 0) return 0;
  return mendHealthState(&r->health, rank, dev) != MEND_NIC_DOWN;
}

uint32_t mendResilUsableMask(struct mendResil* r, int rank) {
  if (!r) return UINT32_MAX;
  uint32_t mask = 0;
  for (int d = 0; d < 32; d++) mask |= (uint32_t)(mendResilDevUsable(r, rank, d) != 0) << d;
  return mask;
}

void mendResilNicUp(struct mendResil* r, int rank, int dev) {
  if (!r || mendHealthState(&r->health, rank, dev) == MEND_NIC_UP) return;
  struct mendHealthUpdate u = { .rank = rank, .dev = dev, .state = MEND_NIC_UP, .reporter = r->rank };
  snprintf(u.verdict, sizeof(u.verdict), "a path over it works again");
  mendHealthDecide(&r->health, &u);
  char extra[40];
  snprintf(extra, sizeof(extra), "epoch=%u", u.epoch);
  mendResilEvent("health", r->rank, rank, dev, -1, "up", extra);
  struct resilMsg m = { .magic = RESIL_MSG_MAGIC, .type = RESIL_MSG_HEALTH, .u.health = u };
  for (int p = 0; p < r->nRanks; p++)
    if (p != r->rank) mendResilQueue(r, p, &m);
}

/* ---------------------------------------------------------------- connections */

void mendResilKillDev(struct mendResil* r, int dev, int why) {
  if (!r->ctx) return;
  pthread_mutex_lock(&r->ctx->lock);
  for (struct rnetComm* rc = r->ctx->comms; rc; rc = rc->next) {
    for (int p = 0; p < rc->nPaths; p++) {
      if (rc->paths[p].localDev != dev || atomic_load(&rc->paths[p].state) == RNET_PATH_DEAD) continue;
      struct rnetNotice n = { .magic = RNET_MAGIC, .type = RNET_NOTE_KILL, .path = (uint16_t)p, .connId = rc->connId,
                              .cause = why, .fromRank = r->rank };
      mendRnetPost(rc, &n);
    }
  }
  pthread_mutex_unlock(&r->ctx->lock);
  mendResilWake(r);
  if (r->wake) mendBellRing(r->wake);
}

/* An acknowledgement held past its delay: its receiver has not called since (the service sends it). */
static int ackOverdue(struct rnetComm* rc, uint64_t now) {
  uint64_t since = atomic_load_explicit(&rc->ackHeldSince, memory_order_relaxed);
  return since && now - since >= rc->ackDelayNs;
}

static int needsService(struct rnetComm* rc, uint64_t now) {
  return atomic_load_explicit(&rc->inboxCount, memory_order_acquire) > 0 || ackOverdue(rc, now) ||
         atomic_load(&rc->probeState) == MEND_RNET_PROBE_DONE || atomic_load(&rc->rebuilding) > 0;
}

/* Progress connections that have notices, probe results, rebuilds or acknowledgements held too long
 * but no traffic to carry them (the proxy calls a connection only while it has requests).  A
 * connection the proxy is in right now is skipped: the proxy applies the same things itself. */
static int housekeep(struct mendResil* r) {
  if (!r->ctx) return 0;
  struct rnetComm* todo[HK_MAX];
  int n = 0;
  pthread_mutex_lock(&r->ctx->lock);
  uint64_t now = mendTimeNs();
  for (struct rnetComm* rc = r->ctx->comms; rc && n < HK_MAX; rc = rc->next) {
    if (atomic_load(&rc->stage) != RNET_STAGE_READY || !needsService(rc, now) || pthread_mutex_trylock(&rc->lock))
      continue;
    todo[n++] = rc;
  }
  pthread_mutex_unlock(&r->ctx->lock);
  /* Each rc stays locked, so it cannot be closed (close takes its lock) until we are done. */
  for (int i = 0; i < n; i++) {
    mendRnetProgress(todo[i]);
    pthread_mutex_unlock(&todo[i]->lock);
  }
  if (n && r->wake) mendBellRing(r->wake);
  return n;
}

/* ---------------------------------------------------------------- threads */

static void drainEvent(struct mendResil* r) {
  uint64_t v;
  while (read(r->evFd, &v, sizeof(v)) > 0) {
  }
}

static int busy(struct mendResil* r) {
  pthread_mutex_lock(&r->lock);
  int b = r->probes != NULL;
  pthread_mutex_unlock(&r->lock);
  pthread_mutex_lock(&r->outLock);
  b |= r->outHead != NULL;
  pthread_mutex_unlock(&r->outLock);
  return b;
}

/* The service's wake-ups are housekeeping: a tick every millisecond while a connection holds an
 * acknowledgement (SVC_ACK_MS), which its own looks send in time while it is used.  On a CPU the
 * rank's threads keep busy, a normal thread woken by its timer preempts them at once, wherever they
 * are: 8-byte AllReduce across two testbed hosts, ranks bound, 13.1-13.5 us against 12.0-12.8 as
 * SCHED_BATCH, which runs it when they yield or block (`benchmarks/RESULTS.md`, "Where the rest
 * goes"); it keeps its fair share, so a busy host still runs it within a scheduler slice. */
static void serviceSched(struct mendResil* r) {
  if (!mendParamResilBatch()) return;
  struct sched_param sp = {0};
  int err = pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
  if (err)
    INFO(MEND_RESIL, "NET/Resilient: rank %d: the service thread stays on normal scheduling (SCHED_BATCH: %s)",
         r->rank, strerror(err));
}

static void* serviceMain(void* arg) {
  struct mendResil* r = arg;
  struct pollfd fds[RESIL_MAX_DEVS + 66];
  serviceSched(r);
  while (!atomic_load(&r->stop)) {
    int n = 0;
    fds[n++] = (struct pollfd){ .fd = r->evFd, .events = POLLIN };
    if (r->nlFd >= 0) fds[n++] = (struct pollfd){ .fd = r->nlFd, .events = POLLIN };
    n += mendResilProbeFds(r, fds + n, (int)(sizeof(fds) / sizeof(fds[0])) - n);
    int worked = 0, tick = busy(r) ? SVC_BUSY_MS : SVC_IDLE_MS;
    atomic_store(&r->napping, 1);
    if (atomic_load(&r->acksHeld) > 0) tick = SVC_ACK_MS;
    if (tick != SVC_IDLE_MS) atomic_store(&r->napping, 0);
    poll(fds, (nfds_t)n, tick);
    atomic_store(&r->napping, 0);
    if (atomic_load(&r->stop)) break;
    drainEvent(r);
    mendResilLinkRead(r);
    mendResilProbeStep(r);
    mendResilTrackScan(r);
    mendAgreeTick(r->agree, mendTimeMs());
    if (r->comm) flushOut(r);
    worked = housekeep(r);
    if (worked) {
      /* Rebuild handshakes move in steps: come back soon rather than after a full idle tick. */
      poll(NULL, 0, 1);
    }
  }
  return NULL;
}

static void oobApply(struct mendResil* r, int from, struct resilMsg* m) {
  switch (m->type) {
    case RESIL_MSG_NOTICE: {
      m->u.notice.fromRank = from;  /* the bootstrap says who sent it; a notice cannot claim another rank */
      if (!r->ctx || !mendRnetDeliver(r->ctx, &m->u.notice))
        INFO(MEND_RESIL, "NET/Resilient: rank %d: notice %u from rank %d for an unknown connection %llx (closed?)",
             r->rank, m->u.notice.type, from, (unsigned long long)m->u.notice.connId);
      struct resilMsg ack = { .magic = RESIL_MSG_MAGIC, .type = RESIL_MSG_ACK };
      ack.u.notice.connId = m->seq;  /* the seq acknowledged */
      mendResilQueue(r, from, &ack);
      if (r->wake) mendBellRing(r->wake);
      break;
    }
    case RESIL_MSG_ACK: takeAck(r, from, m->u.notice.connId); break;
    case RESIL_MSG_LOC_REQ:
    case RESIL_MSG_LOC_RESP: mendResilLocMsg(r, from, m); break;
    case RESIL_MSG_HEALTH:
      if (mendHealthApply(&r->health, &m->u.health)) {
        INFO(MEND_RESIL, "NET/Resilient: rank %d: health epoch %u: rank %d device %d is %s (%s, decided by rank %d)",
             r->rank, m->u.health.epoch, m->u.health.rank, m->u.health.dev, mendNicStateName(m->u.health.state),
             m->u.health.verdict, m->u.health.reporter);
        char extra[40];
        snprintf(extra, sizeof(extra), "epoch=%u", m->u.health.epoch);
        mendResilEvent("health", r->rank, m->u.health.rank, m->u.health.dev, -1, mendNicStateName(m->u.health.state), extra);
        mendResilWake(r); /* the coordinator's agreement looks at the registry */
      }
      break;
    case RESIL_MSG_AGREE: mendAgreeOnMsg(r->agree, from, &m->u.agree, mendTimeMs()); break;
    case RESIL_MSG_RELAY: relayMsg(r, from, &m->u.relay); break;
    default:
      WARN_SPARSE(1000, "NET/Resilient: rank %d: unknown out-of-band message %u from rank %d", r->rank, m->type, from);
  }
}

static void* oobMain(void* arg) {
  struct mendResil* r = arg;
  while (!atomic_load(&r->stop) && !mendCommAborted(r->comm)) {
    struct resilMsg m;
    int from = -1;
    ncclResult_t res = mendBootstrapRecvAny(r->comm->bootstrap, RESIL_TAG, &from, &m, sizeof(m), OOB_SLICE_MS);
    if (res == ncclInProgress) continue;
    if (res != ncclSuccess) {
      poll(NULL, 0, 10);  /* a bad message was dropped, or the bootstrap is closing */
      continue;
    }
    if (!mendResilMsgParse(&m, sizeof(m), r->rank, from, &m)) continue;  /* WARNed */
    oobApply(r, from, &m);
  }
  return NULL;
}

/* ---------------------------------------------------------------- set-up */

/* What every rank tells the others. */
struct resilInfo {
  union mendSocketAddr probe[RESIL_MAX_DEVS];  /* probe listener per device (family 0: none) */
  int nDevs;                                   /* devices */
  int lineMbps[RESIL_MAX_DEVS];                /* line rate per device */
  uint64_t host;                               /* host hash */
};

static void findDevs(struct mendResil* r, int* lineMbps) {
  int n = 0;
  if (r->base->devices(&n) != ncclSuccess) n = 0;
  r->nDevs = n > RESIL_MAX_DEVS ? RESIL_MAX_DEVS : n;
  for (int d = 0; d < r->nDevs; d++) {
    struct resilDev* dev = r->devs + d;
    struct mendNetProperties props;
    memset(&props, 0, sizeof(props));
    dev->probeFd = -1;
    atomic_store(&dev->linkUp, -1);
    if (r->base->getProperties(d, &props) != ncclSuccess || !props.name) continue;
    snprintf(dev->name, sizeof(dev->name), "%s", props.name);
    lineMbps[d] = props.speed;
    char spec[72];
    snprintf(spec, sizeof(spec), "=%s", props.name);
    struct mendIface iface;
    if (mendFindInterfaces(spec, &iface, 1) == 1) {
      dev->ifindex = iface.ifIndex;
      dev->addr = iface.addr;
      dev->hasAddr = 1;
    }
  }
}

static ncclResult_t exchange(struct mendResil* r, const int* myLine) {
  struct resilInfo* all;
  MENDCHECK(MENDCALLOC(all, r->nRanks));
  ncclResult_t res = ncclSuccess;
  struct resilInfo* me = all + r->rank;
  me->nDevs = r->nDevs;
  me->host = r->comm->peerInfo ? r->comm->peerInfo[r->rank].hostHash : mendHostHash();
  for (int d = 0; d < r->nDevs; d++) {
    if (r->devs[d].probeFd >= 0) me->probe[d] = r->devs[d].probeAddr;
    me->lineMbps[d] = myLine[d];
  }
  int* line = NULL;
  MENDCHECKGOTO(mendBootstrapAllGather(r->comm->bootstrap, all, sizeof(*all)), res, out);
  MENDCHECKGOTO(MENDCALLOC(line, (size_t)r->nRanks * RESIL_MAX_DEVS), res, out);
  for (int p = 0; p < r->nRanks; p++) {
    r->peerNDevs[p] = all[p].nDevs;
    r->peerHost[p] = all[p].host;
    for (int d = 0; d < RESIL_MAX_DEVS; d++) {
      r->peerProbe[p * RESIL_MAX_DEVS + d] = all[p].probe[d];
      line[p * RESIL_MAX_DEVS + d] = all[p].lineMbps[d];
    }
  }
  MENDCHECKGOTO(mendHealthInit(&r->health, r->nRanks, RESIL_MAX_DEVS, line), res, out);
out:
  free(line);
  free(all);
  return res;
}

ncclResult_t mendResilCreate(struct ncclComm* comm, const mendNet_t* base, mendBell_t* wake, struct mendResil** out) {
  MENDARGCHECK(comm && base && out, ncclInvalidArgument, "NET/Resilient: service: NULL argument");
  struct mendResil* r;
  MENDCHECK(MENDCALLOC(r, 1));
  ncclResult_t res = ncclSuccess;
  r->comm = comm, r->rank = comm->rank, r->nRanks = comm->nRanks, r->base = base, r->wake = wake;
  r->nlFd = r->evFd = -1;
  pthread_mutex_init(&r->lock, NULL);
  pthread_mutex_init(&r->outLock, NULL);
  int line[RESIL_MAX_DEVS] = { 0 };
  findDevs(r, line);
  /* Nothing before the allgather may return early: every rank must reach it. */
  mendResilProbeListen(r);
  MENDCHECKGOTO(MENDCALLOC(r->peerProbe, (size_t)r->nRanks * RESIL_MAX_DEVS), res, fail);
  MENDCHECKGOTO(MENDCALLOC(r->peerNDevs, r->nRanks), res, fail);
  MENDCHECKGOTO(MENDCALLOC(r->peerHost, r->nRanks), res, fail);
  MENDCHECKGOTO(exchange(r, line), res, fail);
  MENDCHECKGOTO(mendResilLinkOpen(r), res, fail);
  struct mendAgreeNet agreeNet = { .send = agreeSend, .ctx = r };
  MENDCHECKGOTO(mendAgreeCreate(comm, r->rank, r->nRanks, &r->health, &agreeNet, mendParamAgreeResend(), &r->agree),
                res, fail);
  r->evFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (r->evFd < 0) {
    WARN("NET/Resilient: eventfd failed: %m");
    res = ncclSystemError;
    goto fail;
  }
  int err = pthread_create(&r->svc, NULL, serviceMain, r);
  if (!err) r->svcRunning = 1;
  if (!err) err = pthread_create(&r->oob, NULL, oobMain, r);
  if (!err) r->oobRunning = 1;
  if (err) {
    WARN("NET/Resilient: cannot start the resilience threads: %s", strerror(err));
    res = ncclSystemError;
    goto fail;
  }
  INFO(MEND_RESIL | NCCL_INIT, "NET/Resilient: rank %d: resilience service up over %d NIC(s), link monitor %s",
       r->rank, r->nDevs, r->nlFd >= 0 ? "on" : "off");
  *out = r;
  return ncclSuccess;
fail:
  mendResilStop(r);
  mendResilFree(r);
  return res;
}

void mendResilAttach(struct mendResil* r, struct rnetCtx* ctx) {
  if (r) r->ctx = ctx;
}

void mendResilStop(struct mendResil* r) {
  if (!r) return;
  atomic_store(&r->stop, 1);
  mendResilWake(r);
  if (r->svcRunning) pthread_join(r->svc, NULL);
  if (r->oobRunning) pthread_join(r->oob, NULL);
  r->svcRunning = r->oobRunning = 0;
  mendRelayFree(r->relay);  /* after the OOB thread: no request comes any more */
  r->relay = NULL;
}

void mendResilFree(struct mendResil* r) {
  if (!r) return;
  mendResilProbeCloseAll(r);
  if (r->nlFd >= 0) close(r->nlFd);
  if (r->evFd >= 0) close(r->evFd);
  while (r->outHead) {
    struct resilOut* o = r->outHead;
    r->outHead = o->next;
    free(o);
  }
  while (r->unacked) {
    struct resilUnacked* u = r->unacked;
    r->unacked = u->next;
    free(u);
  }
  mendAgreeFree(r->agree);
  mendHealthFree(&r->health);
  pthread_mutex_destroy(&r->lock);
  pthread_mutex_destroy(&r->outLock);
  free(r->peerProbe);
  free(r->peerNDevs);
  free(r->peerHost);
  free(r);
}
