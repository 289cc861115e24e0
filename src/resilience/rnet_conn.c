/*
 * Resilient net connection setup: every path is connected before connect/accept return.
 *
 *   receiver listen(d): a base listen on every local device; the handle carries device d's.
 *   sender:   listen on every local device (for ctrl comms), connect path 0's data comm, send our hello
 *             (our listen handles), accept path 0's ctrl comm and receive the receiver's hello, then
 *             connect the other paths' data comms and accept their ctrl comms.
 *   receiver: accept path 0's data comm, receive the sender's hello, connect every path's ctrl comm,
 *             send our hello on path 0's ctrl comm, accept the other paths' data comms.
 * Path 0 pairs the two primaries (the sender follows the receiver's choice, so they match).  The
 * failover chain after it is the receiver's order (its hello carries the connection's chain when the
 * listen named one, mendRnetListenOrdered, else the topology's order, nearest NIC first; without
 * either, a rotation from the primary), over the devices both ends have, each path pairing the same
 * device index at both ends (rails).  Both ends compute it from the same hellos.
 */
#include "resilience/rnet_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "resilience/detect.h"
#include "resilience/resil.h"

struct rnetListen {
  struct rnetCtx* ctx;                                         /* owner */
  int dev;                                                     /* primary device */
  int nDevs;                                                   /* devices listened on */
  void* listens[MEND_RNET_MAX_PATHS];                          /* base listen per device (NULL: unusable) */
  char handles[MEND_RNET_MAX_PATHS][MEND_NET_HANDLE_MAXSIZE];  /* their handles */
  struct rnetComm* rc;                                         /* the connection being accepted */
  int accepted;                                                /* accept returned a comm already */
  int nOrder;                                                  /* > 0: this connection's failover order */
  int8_t order[MEND_RNET_MAX_PATHS];                           /* (mendRnetListenOrdered), else the ctx's */
};

static int capDevs(int n) { return n > MEND_RNET_MAX_PATHS ? MEND_RNET_MAX_PATHS : n; }

/* Listen on every device; a device other than `dev` that cannot listen is left out of the chain. */
static ncclResult_t listenAll(struct rnetCtx* ctx, int dev, int nDevs, void** listens,
                              char (*handles)[MEND_NET_HANDLE_MAXSIZE], uint32_t* mask) {
  *mask = 0;
  for (int d = 0; d < nDevs; d++) {
    ncclResult_t res = ctx->base->listen(ctx->baseCtx, d, handles[d], &listens[d]);
    if (res == ncclSuccess && listens[d]) {
      *mask |= 1u << d;
      continue;
    }
    listens[d] = NULL;
    if (d == dev) {
      WARN("NET/Resilient: cannot listen on primary device %d (error %d)", d, res);
      return res != ncclSuccess ? res : ncclSystemError;
    }
    WARN("NET/Resilient: cannot listen on device %d (error %d): it is left out of the failover chain", d, res);
  }
  return ncclSuccess;
}

ncclResult_t mendRnetListen(void* vctx, int dev, void* handle, void** listenComm) {
  struct rnetCtx* ctx = vctx;
  MENDARGCHECK(ctx && handle && listenComm, ncclInvalidArgument, "NET/Resilient: listen: NULL argument");
  *listenComm = NULL;
  int nDevs = capDevs(ctx->nDevs);
  MENDARGCHECK(dev >= 0 && dev < nDevs, ncclInvalidArgument, "NET/Resilient: listen: device %d of %d", dev, nDevs);
  struct rnetListen* lc;
  MENDCHECK(MENDCALLOC(lc, 1));
  lc->ctx = ctx;
  lc->dev = dev;
  lc->nDevs = nDevs;
  uint32_t mask;
  ncclResult_t res = listenAll(ctx, dev, nDevs, lc->listens, lc->handles, &mask);
  if (res != ncclSuccess) goto fail_close;
  for (int i = RNET_BASE_HANDLE_BYTES; i < MEND_NET_HANDLE_MAXSIZE; i++) {
    if (lc->handles[dev][i]) {
      WARN("NET/Resilient: the %s Net's listen handle is larger than %d bytes", ctx->base->name, RNET_BASE_HANDLE_BYTES);
      res = ncclInternalError;
      goto fail_close;
    }
  }
  struct rnetHandle* h = handle;
  memset(h, 0, sizeof(*h));
  h->magic = RNET_MAGIC;
  h->dev = (uint16_t)dev;
  h->nDevs = (uint16_t)nDevs;
  h->rank = ctx->rank;
  memcpy(h->base, lc->handles[dev], RNET_BASE_HANDLE_BYTES);
  *listenComm = lc;
  return ncclSuccess;
fail_close:
  for (int d = 0; d < nDevs; d++)
    if (lc->listens[d]) ctx->base->closeListen(lc->listens[d]);
  free(lc);
  return res;
}

ncclResult_t mendRnetListenOrdered(void* vctx, int dev, const int* order, int n, void* handle, void** listenComm) {
  struct rnetCtx* ctx = vctx;
  MENDARGCHECK(ctx && (order || n == 0) && n >= 0, ncclInvalidArgument, "NET/Resilient: listen: bad failover order");
  MENDCHECK(mendRnetListen(vctx, dev, handle, listenComm));
  struct rnetListen* lc = *listenComm;
  for (int i = 0; i < n && lc->nOrder < MEND_RNET_MAX_PATHS; i++) {
    if (order[i] < 0 || order[i] >= lc->nDevs) continue;
    lc->order[lc->nOrder++] = (int8_t)order[i];
  }
  return ncclSuccess;
}

static _Atomic int holdAcksForTest;
void mendRnetHoldAcksForTest(int on) { atomic_store(&holdAcksForTest, on != 0); }

static ncclResult_t newComm(struct rnetCtx* ctx, int isSend, int primary, struct rnetComm** out) {
  struct rnetComm* rc;
  MENDCHECK(MENDCALLOC(rc, 1));
  if (MENDCALLOC(rc->area, 1) != ncclSuccess) {
    free(rc);
    return ncclSystemError;
  }
  rc->isSend = isSend;
  rc->ctx = ctx;
  rc->base = ctx->base;
  rc->peerRank = -1;
  rc->active = 0;
  rc->placeTo = UINT64_MAX;
  rc->lastKilled = -1;
  rc->crossPath = -1;
  rc->via.how = RNET_VIA_RAILS;
  /* Held acknowledgements need the service, which sends one its receiver stopped calling for. */
  int hold = ctx->resil || atomic_load(&holdAcksForTest);
  rc->ackDelayNs = hold && mendParamAckDelay() > 0 ? (uint64_t)mendParamAckDelay() * 1000 : 0;
  /* Words need held acknowledgements (a word replaces a batch) and a base that carries them. */
  rc->words = rc->ackDelayNs > 0 && mendParamAckWords() && ctx->base->isendWord && ctx->base->testWord;
  pthread_mutex_init(&rc->lock, NULL);
  pthread_mutex_init(&rc->inboxLock, NULL);
  pthread_mutex_lock(&ctx->lock);
  rc->connId = ctx->nextConnId++;
  pthread_mutex_unlock(&ctx->lock);
  /* Listed from the start: a notice the peer sends during our set-up waits in the inbox. */
  mendRnetCtxAdd(ctx, rc);
  struct rnetHello* me = &rc->area->mine;
  me->magic = RNET_MAGIC;
  me->nDevs = capDevs(ctx->nDevs);
  me->primary = primary;
  me->rank = ctx->rank;
  me->connId = rc->connId;
  me->nOrder = ctx->nOrder;
  memcpy(me->order, ctx->order, sizeof(me->order));
  *out = rc;
  return ncclSuccess;
}

/* How long backups get to connect once the hellos are exchanged. */
static int64_t backupBoundMs(void) {
  int64_t b = 4 * mendParamProbeTimeout();
  return b < 3000 ? 3000 : b;
}

/* Devices of the failover chain after path 0, in the receiver's order, each below n (both ends have
 * it) and not a primary; returns how many. */
static int chainAfterPrimary(const struct rnetHello* recv, int n, int p0a, int p0b, int* devs) {
  int k = 0, nOrder = recv->nOrder > 0 && recv->nOrder <= MEND_RNET_MAX_PATHS ? recv->nOrder : 0;
  int m = nOrder ? nOrder : n;
  for (int i = 0; i < m && k < MEND_RNET_MAX_PATHS - 1; i++) {
    int d = nOrder ? recv->order[i] : (recv->primary + 1 + i) % n;
    if (d < 0 || d >= n || d == p0a || d == p0b) continue;
    int dup = 0;
    for (int j = 0; j < k; j++) dup |= devs[j] == d;
    if (!dup) devs[k++] = d;
  }
  return k;
}

/* Every device below n in the receiver's order (a set-up via the last-resort slot: the rails are its
 * chain, each dead or alive as the NICs are); returns how many. */
static int chainAll(const struct rnetHello* recv, int n, int* devs) {
  int k = 0, nOrder = recv->nOrder > 0 && recv->nOrder <= MEND_RNET_MAX_PATHS ? recv->nOrder : 0;
  for (int i = 0; i < (nOrder ? nOrder : n) && k < MEND_RNET_MAX_PATHS; i++) {
    int d = nOrder ? recv->order[i] : (recv->primary + i) % n;
    int dup = d < 0 || d >= n;
    for (int j = 0; j < k && !dup; j++) dup = devs[j] == d;
    if (!dup) devs[k++] = d;
  }
  return k;
}

/* Lay out the devices of every path: normally the primaries' pair first, then the chain; a set-up via
 * a crossing or a bridge puts the rails first and its own path in the last-resort slot after them. */
static int layout(struct rnetComm* rc, int via, int myPrimary, int n, int* loc, int* rem) {
  const struct rnetHello* peer = &rc->area->peer;
  const struct rnetHello* recv = rc->isSend ? peer : &rc->area->mine;
  int chain[MEND_RNET_MAX_PATHS], nP = 0;
  int k = via == RNET_VIA_RAILS ? chainAfterPrimary(recv, n, myPrimary, peer->primary, chain) : chainAll(recv, n, chain);
  if (via == RNET_VIA_RAILS) loc[nP] = myPrimary, rem[nP++] = peer->primary;
  for (int i = 0; i < k; i++) loc[nP] = rem[nP] = chain[i], nP++;
  rc->hsPath = via == RNET_VIA_RAILS ? 0 : nP;
  if (via != RNET_VIA_RAILS) {
    loc[nP] = myPrimary, rem[nP++] = peer->primary;
    rc->crossPath = rc->hsPath;
  }
  return nP;
}

/* Check the peer's hello and lay out the paths (both ends compute the same chain). */
static ncclResult_t planPaths(struct rnetComm* rc, int myPrimary, int myDevs, uint32_t myMask) {
  struct rnetHello* peer = &rc->area->peer;
  if (peer->magic != RNET_MAGIC || peer->nDevs < 1 || peer->nDevs > MEND_RNET_MAX_PATHS || peer->primary < 0 ||
      peer->primary >= peer->nDevs) {
    WARN("NET/Resilient: bad hello from the peer (magic 0x%x, %d devices, primary %d)", peer->magic, peer->nDevs,
         peer->primary);
    return ncclRemoteError;
  }
  rc->peerRank = peer->rank;
  rc->peerConnId = peer->connId;
  int via = rc->isSend ? rc->area->mine.via : peer->via;
  if (!rc->isSend) MENDCHECK(mendRnetViaCheck(rc, via));
  int n = myDevs < peer->nDevs ? myDevs : peer->nDevs, loc[MEND_RNET_MAX_SLOTS], rem[MEND_RNET_MAX_SLOTS];
  rc->nPaths = layout(rc, via, myPrimary, n, loc, rem);
  struct mendResil* r = rc->ctx->resil;
  for (int i = 0; i < rc->nPaths; i++) {
    struct rnetPath* path = rc->paths + i;
    int hs = i == rc->hsPath;
    path->localDev = loc[i];
    path->remoteDev = rem[i];
    path->relayed = hs && via >= 0;
    path->relayRank = path->relayed ? via : -1;
    const char* h = path->relayed && !rc->isSend ? peer->viaHandle : peer->handles[path->remoteDev];
    memcpy(path->handle, h, MEND_NET_HANDLE_MAXSIZE);
    int usable = ((peer->validMask >> path->remoteDev) & 1) && ((myMask >> path->localDev) & 1);
    /* A NIC known down at either end would only stall the set-up (the first path is chosen usable). */
    if (!hs && r && (!mendResilDevUsable(r, rc->ctx->rank, path->localDev) ||
                     !mendResilDevUsable(r, rc->peerRank, path->remoteDev)))
      usable = 0;
    /* Via a crossing or a bridge, the first path's listens are taken: a rail on either of its NICs
     * starts dead, and fail-back builds it later with listens of its own. */
    if (!hs && via != RNET_VIA_RAILS && (loc[i] == loc[rc->hsPath] || loc[i] == rem[rc->hsPath])) usable = 0;
    atomic_store(&path->state, usable || hs ? RNET_PATH_CONNECTING : RNET_PATH_DEAD);
    if (!usable && !hs) path->deadSinceMs = mendTimeMs();
  }
  rc->deadlineMs = mendTimeMs() + backupBoundMs();
  return ncclSuccess;
}

/* The handshake ran on path 0's comms; after the layout they belong to the handshake's path. */
static void takeHandshake(struct rnetComm* rc, void* data, void* ctrl, void* dataArea, void* ctrlArea) {
  struct rnetPath* p0 = rc->paths;
  p0->data = p0->ctrl = p0->dataArea = p0->ctrlArea = NULL;
  struct rnetPath* hs = rc->paths + rc->hsPath;
  hs->data = data, hs->ctrl = ctrl, hs->dataArea = dataArea, hs->ctrlArea = ctrlArea;
}

ncclResult_t mendRnetRegArea(struct rnetComm* rc, void* comm, void** mh) {
  if (*mh) return ncclSuccess;
  ncclResult_t res = rc->base->regMr(comm, rc->area, sizeof(*rc->area), MEND_PTR_HOST, mh);
  if (res != ncclSuccess) WARN("NET/Resilient: cannot register control buffers (error %d)", res);
  return res;
}

/* Test a handshake request; *done = 1 once complete (the slot is cleared). */
static ncclResult_t hsTest(struct rnetComm* rc, int i, int* done) {
  *done = rc->hsReq[i] == NULL;
  if (*done) return ncclSuccess;
  int size = 0;
  MENDCHECK(rc->base->test(rc->hsReq[i], done, &size));
  if (*done) rc->hsReq[i] = NULL;
  return ncclSuccess;
}

/* A backup that cannot be set up does not hold the connection back: it starts dead (the peer is told,
 * so both ends agree) and fail-back rebuilds it once its NICs answer probes. */
static void backupDead(struct rnetComm* rc, int i, const char* why) {
  INFO(MEND_RESIL | NCCL_NET, "NET/Resilient: conn %llx with rank %d: backup path %d (device %d) %s; it starts dead",
       (unsigned long long)rc->connId, rc->peerRank, i, rc->paths[i].localDev, why);
  mendRnetPathClose(rc, i);
  atomic_store(&rc->paths[i].state, RNET_PATH_DEAD);
  rc->paths[i].deadSinceMs = mendTimeMs();
  rc->paths[i].deadCause = MEND_RNET_KILL_ERROR;
  mendRnetNotify(rc, RNET_NOTE_KILL, i, MEND_RNET_KILL_ERROR, NULL);
}

/* One path of the set-up: the sender connects data and accepts ctrl; the receiver the reverse.
 * Returns 1 when the path is finished (connected or, for a backup, given up). */
static int connectPath(struct rnetComm* rc, int i, void** listens, ncclResult_t* res) {
  struct rnetCtx* ctx = rc->ctx;
  struct rnetPath* path = rc->paths + i;
  void** out = rc->isSend ? &path->data : &path->ctrl;   /* what we connect */
  void** in = rc->isSend ? &path->ctrl : &path->data;    /* what we accept */
  ncclResult_t r = ncclSuccess;
  int hs = i == rc->hsPath;
  if (!*out && (!hs || !rc->isSend)) r = ctx->base->connect(ctx->baseCtx, path->localDev, path->handle, out);
  if (r == ncclSuccess && !*in && !hs) r = ctx->base->accept(listens[path->localDev], in);
  if (r == ncclSuccess && path->data) r = mendRnetRegArea(rc, path->data, &path->dataArea);
  if (r == ncclSuccess && path->ctrl) r = mendRnetRegArea(rc, path->ctrl, &path->ctrlArea);
  if (r != ncclSuccess) {
    if (hs) {
      *res = r;
      return 1;
    }
    backupDead(rc, i, "could not be connected");
    return 1;
  }
  if (path->data && path->ctrl) {
    atomic_store(&path->state, hs ? RNET_PATH_ACTIVE : RNET_PATH_IDLE);
    path->confirmed = 1;  /* set-up finishes every path on both ends before either end uses it */
    return 1;
  }
  if (!hs && mendTimeMs() > rc->deadlineMs) {
    backupDead(rc, i, "did not connect in time");
    return 1;
  }
  return 0;
}

/* Every path still connecting; *left gets the count in progress. */
static ncclResult_t connectBackups(struct rnetComm* rc, void** listens, int* left) {
  *left = 0;
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < rc->nPaths && res == ncclSuccess; i++) {
    if (atomic_load(&rc->paths[i].state) != RNET_PATH_CONNECTING) continue;
    if (!connectPath(rc, i, listens, &res)) (*left)++;
  }
  return res;
}


static void logReady(struct rnetComm* rc) {
  char chain[64] = "";
  size_t off = 0;
  for (int i = 0; i < rc->nPaths && off + 8 < sizeof(chain); i++)
    off += (size_t)snprintf(chain + off, sizeof(chain) - off, "%s%d%s", i ? "," : "", rc->paths[i].localDev,
                            mendRnetPathLive(rc, i) ? "" : "(dead)");
  INFO(MEND_RESIL | NCCL_NET, "NET/Resilient: %s conn %llx with rank %d ready, devices %s", rc->isSend ? "send" : "recv",
       (unsigned long long)rc->connId, rc->peerRank, chain);
}

static ncclResult_t finishSetup(struct rnetComm* rc) {
  if (atomic_load(&rc->paths[rc->hsPath].state) != RNET_PATH_ACTIVE) {
    WARN("NET/Resilient: the first path of conn %llx is not usable", (unsigned long long)rc->connId);
    return ncclSystemError;
  }
  atomic_store(&rc->stage, RNET_STAGE_READY);
  rc->active = rc->hsPath;
  rc->lastProgressMs = mendTimeMs();
  logReady(rc);
  return ncclSuccess;
}

/* The sender's handshake; returns with rc->stage READY when done. */
static ncclResult_t sendSetup(struct rnetComm* rc, struct rnetHandle* h) {
  struct rnetCtx* ctx = rc->ctx;
  struct rnetPath* p0 = rc->paths;
  int done;
  if (rc->stage == RNET_STAGE_START) {
    rc->nPaths = 1;
    memcpy(p0->handle, h->base, RNET_BASE_HANDLE_BYTES);
    rc->area->mine.via = RNET_VIA_RAILS;
    mendRnetViaStart(rc, h);  /* our NIC of its primary is down: a bridge or a crossing instead */
    p0->localDev = rc->area->mine.primary;
    rc->stage = RNET_STAGE_HELLO;
  }
  if (rc->stage == RNET_STAGE_HELLO) {
    if (!p0->data) {
      int ready = 1;
      MENDCHECK(mendRnetViaWait(rc, &ready));
      if (!ready) return ncclSuccess;
      MENDCHECK(ctx->base->connect(ctx->baseCtx, p0->localDev, p0->handle, &p0->data));
      if (!p0->data) return ncclSuccess;
      MENDCHECK(mendRnetRegArea(rc, p0->data, &p0->dataArea));
      MENDCHECK(rc->base->isend(p0->data, &rc->area->mine, sizeof(rc->area->mine), 0, p0->dataArea, &rc->hsReq[0]));
      if (!rc->hsReq[0]) return ncclInternalError;
    }
    if (!p0->ctrl) {
      MENDCHECK(ctx->base->accept(rc->listens[p0->localDev], &p0->ctrl));
      if (!p0->ctrl) return ncclSuccess;
      MENDCHECK(mendRnetRegArea(rc, p0->ctrl, &p0->ctrlArea));
      void* data = &rc->area->peer;
      size_t size = sizeof(rc->area->peer);
      int tag = 0;
      MENDCHECK(rc->base->irecv(p0->ctrl, 1, &data, &size, &tag, &p0->ctrlArea, &rc->hsReq[1]));
      if (!rc->hsReq[1]) return ncclInternalError;
    }
    MENDCHECK(hsTest(rc, 1, &done));
    if (!done) return ncclSuccess;
    void* data0 = p0->data, *ctrl0 = p0->ctrl, *dA = p0->dataArea, *cA = p0->ctrlArea;
    MENDCHECK(planPaths(rc, rc->area->mine.primary, rc->area->mine.nDevs, rc->area->mine.validMask));
    takeHandshake(rc, data0, ctrl0, dA, cA);
    rc->stage = RNET_STAGE_PATHS;
  }
  int left;
  MENDCHECK(connectBackups(rc, rc->listens, &left));
  MENDCHECK(hsTest(rc, 0, &done));
  if (left || !done) return ncclSuccess;
  for (int d = 0; d < MEND_RNET_MAX_PATHS; d++) {
    if (rc->listens[d]) ctx->base->closeListen(rc->listens[d]);
    rc->listens[d] = NULL;
  }
  return finishSetup(rc);
}

ncclResult_t mendRnetConnect(void* vctx, int dev, void* handle, void** sendComm) {
  struct rnetCtx* ctx = vctx;
  struct rnetHandle* h = handle;
  MENDARGCHECK(ctx && h && sendComm, ncclInvalidArgument, "NET/Resilient: connect: NULL argument");
  *sendComm = NULL;
  MENDARGCHECK(h->magic == RNET_MAGIC, ncclInvalidArgument, "NET/Resilient: connect: not a handle of this Net (magic 0x%x)", h->magic);
  int nDevs = capDevs(ctx->nDevs);
  MENDARGCHECK(dev >= 0 && dev < nDevs, ncclInvalidArgument, "NET/Resilient: connect: device %d of %d", dev, nDevs);
  struct rnetComm* rc = h->stage;
  if (!rc) {
    /* The receiver chose the primary (rails: the same device index at both ends). */
    int primary = h->dev < nDevs ? h->dev : dev;
    MENDCHECK(newComm(ctx, 1, primary, &rc));
    ncclResult_t res = listenAll(ctx, primary, nDevs, rc->listens, rc->area->mine.handles, &rc->area->mine.validMask);
    if (res != ncclSuccess) {
      h->stage = rc;
      mendRnetCloseSend(rc);
      h->stage = NULL;
      return res;
    }
    h->stage = rc;
  }
  pthread_mutex_lock(&rc->lock);
  ncclResult_t res = sendSetup(rc, h);
  pthread_mutex_unlock(&rc->lock);
  if (res != ncclSuccess) {
    WARN("NET/Resilient: connect on device %d failed (error %d)", dev, res);
    h->stage = NULL;
    mendRnetCloseSend(rc);
    return res;
  }
  if (rc->stage == RNET_STAGE_READY) {
    h->stage = NULL;
    *sendComm = rc;
  }
  return ncclSuccess;
}

/* The receiver's handshake. */
static ncclResult_t recvSetup(struct rnetComm* rc, struct rnetListen* lc) {
  struct rnetCtx* ctx = rc->ctx;
  struct rnetPath* p0 = rc->paths;
  int done;
  if (rc->stage == RNET_STAGE_START) {
    rc->nPaths = 1;
    p0->localDev = lc->dev;
    rc->stage = RNET_STAGE_HELLO;
  }
  if (rc->stage == RNET_STAGE_HELLO) {
    if (!p0->data) {
      MENDCHECK(ctx->base->accept(lc->listens[lc->dev], &p0->data));
      if (!p0->data) return ncclSuccess;
      MENDCHECK(mendRnetRegArea(rc, p0->data, &p0->dataArea));
      void* data = &rc->area->peer;
      size_t size = sizeof(rc->area->peer);
      int tag = 0;
      MENDCHECK(rc->base->irecv(p0->data, 1, &data, &size, &tag, &p0->dataArea, &rc->hsReq[1]));
      if (!rc->hsReq[1]) return ncclInternalError;
    }
    MENDCHECK(hsTest(rc, 1, &done));
    if (!done) return ncclSuccess;
    void* data0 = p0->data, *dA = p0->dataArea;
    MENDCHECK(planPaths(rc, lc->dev, lc->nDevs, rc->area->mine.validMask));
    takeHandshake(rc, data0, NULL, dA, NULL);
    rc->stage = RNET_STAGE_PATHS;
  }
  int left;
  MENDCHECK(connectBackups(rc, lc->listens, &left));
  struct rnetPath* hs = rc->paths + rc->hsPath;
  if (hs->ctrl && !hs->ctrlArea) return ncclInternalError;
  if (hs->ctrl && rc->hsStep == 0) {
    MENDCHECK(rc->base->isend(hs->ctrl, &rc->area->mine, sizeof(rc->area->mine), 0, hs->ctrlArea, &rc->hsReq[0]));
    if (!rc->hsReq[0]) return ncclSuccess;
    rc->hsStep = 1;
  }
  MENDCHECK(hsTest(rc, 0, &done));
  if (left || !done || rc->hsStep == 0) return ncclSuccess;
  return finishSetup(rc);
}

ncclResult_t mendRnetAccept(void* listenComm, void** recvComm) {
  struct rnetListen* lc = listenComm;
  MENDARGCHECK(lc && recvComm, ncclInvalidArgument, "NET/Resilient: accept: NULL argument");
  *recvComm = NULL;
  MENDARGCHECK(!lc->accepted, ncclInvalidUsage, "NET/Resilient: accept: one connection per listen comm");
  if (!lc->rc) {
    MENDCHECK(newComm(lc->ctx, 0, lc->dev, &lc->rc));
    struct rnetHello* me = &lc->rc->area->mine;
    if (lc->nOrder > 0) { /* the receiver's order is the chain: this connection's own */
      me->nOrder = lc->nOrder;
      memcpy(me->order, lc->order, sizeof(me->order));
    }
    for (int d = 0; d < lc->nDevs; d++) {
      memcpy(me->handles[d], lc->handles[d], MEND_NET_HANDLE_MAXSIZE);
      if (lc->listens[d]) me->validMask |= 1u << d;
    }
  }
  struct rnetComm* rc = lc->rc;
  pthread_mutex_lock(&rc->lock);
  ncclResult_t res = recvSetup(rc, lc);
  pthread_mutex_unlock(&rc->lock);
  if (res != ncclSuccess) {
    WARN("NET/Resilient: accept on device %d failed (error %d)", lc->dev, res);
    lc->rc = NULL;
    mendRnetCloseRecv(rc);
    return res;
  }
  if (rc->stage == RNET_STAGE_READY) {
    lc->rc = NULL;
    lc->accepted = 1;
    *recvComm = rc;
  }
  return ncclSuccess;
}

ncclResult_t mendRnetCloseListen(void* listenComm) {
  struct rnetListen* lc = listenComm;
  if (!lc) return ncclSuccess;
  if (lc->rc) mendRnetCloseRecv(lc->rc);
  for (int d = 0; d < lc->nDevs; d++)
    if (lc->listens[d]) lc->ctx->base->closeListen(lc->listens[d]);
  free(lc);
  return ncclSuccess;
}

void mendRnetPathClose(struct rnetComm* rc, int p) {
  struct rnetPath* path = rc->paths + p;
  const mendNet_t* b = rc->base;
  if (path->data) {
    for (struct rnetMr* mr = rc->mrs; mr; mr = mr->next) {
      if (mr->base[p]) b->deregMr(path->data, mr->base[p]);
      mr->base[p] = NULL;
    }
    if (path->dataArea) b->deregMr(path->data, path->dataArea);
    if (rc->isSend) b->closeSend(path->data);
    else b->closeRecv(path->data);
  }
  if (path->ctrl) {
    if (path->ctrlArea) b->deregMr(path->ctrl, path->ctrlArea);
    if (rc->isSend) b->closeRecv(path->ctrl);
    else b->closeSend(path->ctrl);
  }
  path->data = path->ctrl = path->dataArea = path->ctrlArea = NULL;
}

static ncclResult_t closeComm(struct rnetComm* rc) {
  if (!rc) return ncclSuccess;
  mendRnetCtxRemove(rc->ctx, rc);
  /* The service may be progressing us (it holds our lock): wait for it; it cannot find us again. */
  pthread_mutex_lock(&rc->lock);
  mendRnetAckClose(rc);
  pthread_mutex_unlock(&rc->lock);
  if (rc->ctx->resil) mendResilForget(rc->ctx->resil, rc);
  for (int p = 0; p < rc->nPaths; p++) {
    mendRnetRebuildAbort(rc, p);
    mendRnetPathClose(rc, p);
  }
  for (int d = 0; d < MEND_RNET_MAX_PATHS; d++)
    if (rc->isSend && rc->listens[d]) rc->base->closeListen(rc->listens[d]);
  while (rc->mrs) {
    struct rnetMr* mr = rc->mrs;
    rc->mrs = mr->next;
    mr->magic = 0;
    free(mr);
  }
  mendRnetDropNotices(rc);
  pthread_mutex_destroy(&rc->lock);
  pthread_mutex_destroy(&rc->inboxLock);
  free(rc->area);
  free(rc);
  return ncclSuccess;
}

ncclResult_t mendRnetCloseSend(void* sendComm) { return closeComm(sendComm); }
ncclResult_t mendRnetCloseRecv(void* recvComm) { return closeComm(recvComm); }
