/*
 * Probes: a probe of a NIC pair is a non-blocking TCP connect from our NIC's address to the peer's
 * probe listener on its NIC.  The peer's kernel completes the handshake by itself, so a stopped or
 * busy peer still answers; a dead NIC, cable, switch port or black hole does not.  Listeners are
 * drained (accept + close) by the service loop.
 *
 * Fail-back: every NIC pair under a dead path of one of our sending connections is probed every
 * MEND_PROBE_INTERVAL; once it has answered for MEND_FAILBACK_DELAY without a failure (and our link
 * is up), the connection is told to rebuild the path (rnet_rebuild.c).
 */
#include "resilience/resil_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checks.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "resilience/detect.h"

ncclResult_t mendResilProbeListen(struct mendResil* r) {
  for (int d = 0; d < r->nDevs; d++) {
    struct resilDev* dev = r->devs + d;
    dev->probeFd = -1;
    if (!dev->hasAddr) continue;
    union mendSocketAddr a = dev->addr;
    if (a.sa.sa_family == AF_INET) a.sin.sin_port = 0;
    else a.sin6.sin6_port = 0;
    int fd = -1;
    if (mendSocketListen(&a, &fd, &dev->probeAddr) != ncclSuccess) {
      WARN("NET/Resilient: rank %d: no probe listener on %s: its paths cannot be probed", r->rank, dev->name);
      continue;
    }
    dev->probeFd = fd;
  }
  return ncclSuccess;
}

void mendResilProbeCloseAll(struct mendResil* r) {
  for (int d = 0; d < r->nDevs; d++) {
    if (r->devs[d].probeFd >= 0) close(r->devs[d].probeFd);
    r->devs[d].probeFd = -1;
  }
  while (r->probes) {
    struct resilProbe* p = r->probes;
    r->probes = p->next;
    if (p->fd >= 0) close(p->fd);
    free(p);
  }
}

const union mendSocketAddr* mendResilPeerProbe(struct mendResil* r, int rank, int dev) {
  if (rank < 0 || rank >= r->nRanks || dev < 0 || dev >= RESIL_MAX_DEVS) return NULL;
  const union mendSocketAddr* a = r->peerProbe + rank * RESIL_MAX_DEVS + dev;
  return a->sa.sa_family ? a : NULL;
}

int mendResilProbeAdd(struct mendResil* r, const struct resilProbe* p) {
  struct resilProbe* q = malloc(sizeof(*q));
  if (!q) {
    WARN("NET/Resilient: out of memory for a probe");
    return 0;
  }
  *q = *p;
  q->fd = -1;
  q->deadlineMs = mendTimeMs() + mendParamProbeTimeout();
  q->next = r->probes;
  r->probes = q;
  return 1;
}

void mendResilProbeRequest(struct mendResil* r, struct rnetComm* rc, uint32_t mask) {
  int added = 0;
  pthread_mutex_lock(&r->lock);
  for (int p = 0; p < rc->nPaths; p++) {
    if (!((mask >> p) & 1)) continue;
    int rank, dev;
    mendRnetProbeTarget(rc->paths + p, rc->peerRank, &rank, &dev);
    const union mendSocketAddr* dst = mendResilPeerProbe(r, rank, dev);
    int ld = rc->paths[p].localDev;
    if (!dst || ld < 0 || ld >= r->nDevs || !r->devs[ld].hasAddr) continue;  /* cannot tell: counts as alive */
    struct resilProbe pr = { .purpose = RESIL_PROBE_PROGRESS, .localDev = ld, .dst = *dst, .rc = rc, .path = p };
    mendResilProbeAdd(r, &pr);
    added++;
  }
  if (!added) atomic_store(&rc->probeState, MEND_RNET_PROBE_DONE);
  pthread_mutex_unlock(&r->lock);
  mendResilWake(r);
}

int mendResilCanProbe(struct mendResil* r, const struct rnetComm* rc, int p) {
  if (!r || p < 0 || p >= rc->nPaths) return 0;
  int ld = rc->paths[p].localDev, rank, dev;
  mendRnetProbeTarget(rc->paths + p, rc->peerRank, &rank, &dev);
  return mendResilPeerProbe(r, rank, dev) && ld >= 0 && ld < r->nDevs && r->devs[ld].hasAddr;
}

int mendResilCrossProbe(struct mendResil* r, struct rnetComm* rc, int localDev, int peerDev) {
  const union mendSocketAddr* dst = mendResilPeerProbe(r, rc->peerRank, peerDev);
  if (!dst || localDev < 0 || localDev >= r->nDevs || !r->devs[localDev].hasAddr) return 0;
  struct resilProbe pr = { .purpose = RESIL_PROBE_CROSS, .localDev = localDev, .dst = *dst, .rc = rc };
  pthread_mutex_lock(&r->lock);
  int listed = mendResilProbeAdd(r, &pr);
  pthread_mutex_unlock(&r->lock);
  mendResilWake(r);
  return listed;
}

static int64_t nowUs(void) { return (int64_t)(mendTimeNs() / 1000); }

/* One probe of a confirmation (lock held); 0 when it could not be listed. */
static int confirmAdd(struct mendResil* r, struct rnetComm* rc, int path, int which) {
  int rank, dev;
  mendRnetProbeTarget(rc->paths + path, rc->peerRank, &rank, &dev);
  const union mendSocketAddr* dst = mendResilPeerProbe(r, rank, dev);
  if (!dst) return 0;
  struct resilProbe pr = { .purpose = RESIL_PROBE_CONFIRM, .localDev = rc->paths[path].localDev, .dst = *dst,
                           .rc = rc, .path = path, .which = which };
  return mendResilProbeAdd(r, &pr);
}

void mendResilConfirmRequest(struct mendResil* r, struct rnetComm* rc, int suspect, int ref) {
  pthread_mutex_lock(&r->lock);
  mendConfirmStart(&rc->det.cf, nowUs());
  int listed = confirmAdd(r, rc, suspect, 0);
  listed += confirmAdd(r, rc, ref, 1);
  if (!listed) {
    rc->det.cf.verdict = MEND_CONFIRM_PEER;  /* nothing to compare: the fixed rule decides */
    atomic_store(&rc->probeState, MEND_RNET_PROBE_DONE);
  }
  pthread_mutex_unlock(&r->lock);
  mendResilWake(r);
}

void mendResilForget(struct mendResil* r, struct rnetComm* rc) {
  pthread_mutex_lock(&r->lock);
  for (struct resilProbe** pp = &r->probes; *pp;) {
    struct resilProbe* p = *pp;
    if (mendResilProbeHolds(p, rc)) {
      *pp = p->next;
      if (p->fd >= 0) close(p->fd);
      free(p);
    } else {
      pp = &p->next;
    }
  }
  pthread_mutex_unlock(&r->lock);
}

int mendResilProbeFds(struct mendResil* r, struct pollfd* fds, int max) {
  int n = 0;
  for (int d = 0; d < r->nDevs && n < max; d++)
    if (r->devs[d].probeFd >= 0) fds[n++] = (struct pollfd){ .fd = r->devs[d].probeFd, .events = POLLIN };
  pthread_mutex_lock(&r->lock);
  for (struct resilProbe* p = r->probes; p && n < max; p = p->next)
    if (p->fd >= 0) fds[n++] = (struct pollfd){ .fd = p->fd, .events = POLLOUT };
  pthread_mutex_unlock(&r->lock);
  return n;
}

/* Start a probe's connect; returns 1 when it already finished (*ok set). */
static int probeStart(struct mendResil* r, struct resilProbe* p, int* ok) {
  struct resilDev* dev = r->devs + p->localDev;
  int fd = socket(p->dst.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *ok = 1;  /* a local resource problem says nothing about the path */
    return 1;
  }
  union mendSocketAddr src = dev->addr;
  if (src.sa.sa_family == AF_INET) src.sin.sin_port = 0;
  else src.sin6.sin6_port = 0;
  if (src.sa.sa_family != p->dst.sa.sa_family || bind(fd, &src.sa, mendSocketAddrLen(&src)) != 0 ||
      (connect(fd, &p->dst.sa, mendSocketAddrLen(&p->dst)) != 0 && errno != EINPROGRESS)) {
    /* ENETUNREACH / EADDRNOTAVAIL: our NIC or its route is gone. */
    close(fd);
    *ok = 0;
    return 1;
  }
  p->fd = fd;
  return 0;
}

/* Is a started probe finished?  1 when it is (*ok set). */
static int probeTest(struct resilProbe* p, int64_t now, int* ok) {
  struct pollfd pfd = { .fd = p->fd, .events = POLLOUT };
  if (poll(&pfd, 1, 0) == 1) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    *ok = err == 0;
    return 1;
  }
  if (now >= p->deadlineMs) {
    *ok = 0;
    return 1;
  }
  return 0;
}

/* A progress probe finished: record it; the last one of its connection hands the results over. */
static void progressDone(struct mendResil* r, struct resilProbe* p, int ok) {
  if (!ok) atomic_fetch_or(&p->rc->probeFailed, 1u << p->path);
  for (struct resilProbe* q = r->probes; q; q = q->next)
    if (q != p && q->purpose == RESIL_PROBE_PROGRESS && q->rc == p->rc) return;
  atomic_store(&p->rc->probeState, MEND_RNET_PROBE_DONE);
}

static void trackDone(struct mendResil* r, struct resilProbe* p, int ok, int64_t now) {
  struct resilTrack* t = NULL;
  for (int i = 0; i < r->nTracks && !t; i++)
    if (r->tracks[i].localDev == p->localDev && r->tracks[i].peer == p->peer && r->tracks[i].remoteDev == p->remoteDev)
      t = r->tracks + i;
  if (!t) return;
  t->inFlight = 0;
  if (!ok) t->okSinceMs = 0;
  else if (!t->okSinceMs) t->okSinceMs = now;
}

/* A crossing pair's probe finished: its connection builds the crossing path or tries a relay. */
static void crossDone(struct mendResil* r, struct resilProbe* p, int ok) {
  struct rnetNotice n = { .magic = RNET_MAGIC, .type = RNET_NOTE_CROSS_PROBED, .connId = p->rc->connId, .cause = ok,
                          .fromRank = r->rank };
  mendRnetPost(p->rc, &n);
}

static void finish(struct mendResil* r, struct resilProbe* p, int ok, int64_t now) {
  switch (p->purpose) {
    case RESIL_PROBE_PROGRESS: progressDone(r, p, ok); break;
    case RESIL_PROBE_TRACK: trackDone(r, p, ok, now); break;
    case RESIL_PROBE_CROSS: crossDone(r, p, ok); break;
    default: mendResilLocProbeDone(r, p->loc, p->which, ok); break;
  }
}

static void drainListeners(struct mendResil* r) {
  for (int d = 0; d < r->nDevs; d++) {
    if (r->devs[d].probeFd < 0) continue;
    for (int i = 0; i < 256; i++) {
      int fd = accept4(r->devs[d].probeFd, NULL, NULL, SOCK_CLOEXEC);
      if (fd < 0) break;
      close(fd);
    }
  }
}

/* Unlink and free every confirmation probe of rc (lock held). */
static void confirmDrop(struct mendResil* r, struct rnetComm* rc) {
  for (struct resilProbe** pp = &r->probes; *pp;) {
    struct resilProbe* p = *pp;
    if (p->purpose != RESIL_PROBE_CONFIRM || p->rc != rc) {
      pp = &p->next;
      continue;
    }
    *pp = p->next;
    if (p->fd >= 0) close(p->fd);
    free(p);
  }
}

/* Decide the confirmations that have probes listed (lock held): one more probe of a suspect that
 * missed its window, or the verdict handed to the connection.  Returns 1 when a verdict was given. */
static int confirmStep(struct mendResil* r, int64_t us) {
  struct mendConfirmCfg cfg = mendConfirmConfig();
  int given = 0;
again:
  for (struct resilProbe* p = r->probes; p; p = p->next) {
    if (p->purpose != RESIL_PROBE_CONFIRM) continue;
    struct rnetComm* rc = p->rc;
    int v = mendConfirmDecide(&rc->det.cf, us, &cfg);
    if (v == MEND_CONFIRM_WAIT) continue;
    if (v == MEND_CONFIRM_RETRY) {
      mendConfirmRetry(&rc->det.cf, us);
      confirmAdd(r, rc, rc->det.suspectPath, 0);  /* listed first: the walk starts again */
      goto again;
    }
    rc->det.cf.verdict = v;
    confirmDrop(r, rc);
    atomic_store(&rc->probeState, MEND_RNET_PROBE_DONE);
    given = 1;
    goto again;
  }
  return given;
}

void mendResilProbeStep(struct mendResil* r) {
  drainListeners(r);
  int finishedProgress = 0;
  int64_t now = mendTimeMs(), us = nowUs();
  pthread_mutex_lock(&r->lock);
  for (struct resilProbe** pp = &r->probes; *pp;) {
    struct resilProbe* p = *pp;
    int ok = 0, done = p->done ? 0 : p->fd < 0 ? probeStart(r, p, &ok) : probeTest(p, now, &ok);
    if (!done) {
      pp = &p->next;
      continue;
    }
    if (p->purpose == RESIL_PROBE_CONFIRM) {
      /* Kept listed (done) until its connection's verdict: the decision needs both answers. */
      mendConfirmResult(&p->rc->det.cf, p->which, ok, us);
      if (p->fd >= 0) close(p->fd);
      p->fd = -1;
      p->done = 1;
      pp = &p->next;
      continue;
    }
    *pp = p->next;  /* unlink first: progressDone looks for siblings still listed */
    finishedProgress |= p->purpose == RESIL_PROBE_PROGRESS || p->purpose == RESIL_PROBE_CROSS;
    finish(r, p, ok, now);
    if (p->fd >= 0) close(p->fd);
    free(p);
  }
  finishedProgress |= confirmStep(r, us);
  mendResilLocExpire(r);
  pthread_mutex_unlock(&r->lock);
  if (finishedProgress && r->wake) mendBellRing(r->wake);
}

/* ---------------------------------------------------------------- fail-back */

static int trackFind(struct mendResil* r, int localDev, int peer, int remoteDev, int64_t now) {
  for (int i = 0; i < r->nTracks; i++) {
    struct resilTrack* t = r->tracks + i;
    if (t->localDev == localDev && t->peer == peer && t->remoteDev == remoteDev) return i;
  }
  if (r->nTracks == RESIL_MAX_TRACKS) return -1;
  r->tracks[r->nTracks] = (struct resilTrack){ .localDev = localDev, .peer = peer, .remoteDev = remoteDev, .lastUsedMs = now };
  return r->nTracks++;
}

/* Ask the paths of sending connections that are dead to rebuild once their pair is healthy. */
static void scanConns(struct mendResil* r, int64_t now, int64_t delay) {
  if (!r->ctx) return;
  pthread_mutex_lock(&r->ctx->lock);
  for (struct rnetComm* rc = r->ctx->comms; rc; rc = rc->next) {
    if (!rc->isSend || atomic_load(&rc->stage) != RNET_STAGE_READY || atomic_load(&rc->lost)) continue;
    for (int p = 0; p < rc->nPaths; p++) {
      struct rnetPath* path = rc->paths + p;
      /* A relay path is made again only when needed (rnet_cross.c): no fail-back watch. */
      if (atomic_load(&path->state) != RNET_PATH_DEAD || path->localDev >= r->nDevs || path->relayed) continue;
      int i = trackFind(r, path->localDev, rc->peerRank, path->remoteDev, now);
      if (i < 0) continue;
      struct resilTrack* t = r->tracks + i;
      t->lastUsedMs = now;
      int linkUp = atomic_load(&r->devs[path->localDev].linkUp) != 0;
      if (!linkUp || !t->okSinceMs || now - t->okSinceMs < delay || now < atomic_load(&path->rbNotBeforeMs)) continue;
      if (atomic_exchange(&path->rbPosted, 1)) continue;  /* asked already; the owner clears it */
      struct rnetNotice n = { .magic = RNET_MAGIC, .type = RNET_NOTE_REBUILD_START, .path = (uint16_t)p,
                              .connId = rc->connId, .fromRank = r->rank };
      mendRnetPost(rc, &n);
    }
  }
  pthread_mutex_unlock(&r->ctx->lock);
}

void mendResilTrackScan(struct mendResil* r) {
  int64_t delay = mendParamFailbackDelay(), interval = mendParamProbeInterval(), now = mendTimeMs();
  if (delay <= 0) return;  /* fail-back off */
  if (interval < 10) interval = 10;
  if (now - r->lastScanMs < interval) return;
  r->lastScanMs = now;
  pthread_mutex_lock(&r->lock);
  scanConns(r, now, delay);
  for (int i = 0; i < r->nTracks;) {
    struct resilTrack* t = r->tracks + i;
    if (!t->inFlight && now - t->lastUsedMs > 10 * interval + delay) {
      r->tracks[i] = r->tracks[--r->nTracks];  /* no dead path needs it any more (probes find tracks by key) */
      continue;
    }
    const union mendSocketAddr* dst = mendResilPeerProbe(r, t->peer, t->remoteDev);
    if (!t->inFlight && dst && now - t->lastProbeMs >= interval && r->devs[t->localDev].hasAddr) {
      if (atomic_load(&r->devs[t->localDev].linkUp) == 0) {
        t->okSinceMs = 0;
      } else {
        struct resilProbe pr = { .purpose = RESIL_PROBE_TRACK, .localDev = t->localDev, .dst = *dst, .peer = t->peer,
                                 .remoteDev = t->remoteDev };
        mendResilProbeAdd(r, &pr);
        t->inFlight = 1;
        t->lastProbeMs = now;
      }
    }
    i++;
  }
  pthread_mutex_unlock(&r->lock);
  mendResilWake(r);
}
