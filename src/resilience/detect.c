/*
 * Failure detection per connection (see detect.h): suspicion after a time derived from the measured
 * round trip, confirmation by probes of the path and of another path to the same peer, the fixed
 * MEND_PROGRESS_TIMEOUT rule where nothing can be compared, and the events every detector reports.
 *
 * Only the sender times out: it is the end that waits for something (acknowledgements, or a RESUME
 * after a fence), and it waits only while it has messages outstanding, so a peer that is merely idle
 * or waiting for its own upstream is never suspected.  A suspicion is not a verdict: a probe that
 * connects means the peer is slow, not the path dead; and a path fails over quickly only when it
 * stays silent while another path to the same peer answers.
 */
#include "resilience/detect.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "checks.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "resilience/resil.h"
#include "resilience/rnet_priv.h"

const char* mendRnetKillName(int why) {
  switch (why) {
    case MEND_RNET_KILL_TEST: return "test";
    case MEND_RNET_KILL_LINK: return "link";
    case MEND_RNET_KILL_PEER: return "peer";
    case MEND_RNET_KILL_PROBE: return "probe";
    case MEND_RNET_KILL_ERROR: return "error";
    case MEND_RNET_KILL_SWITCH: return "switch";
    case MEND_RNET_KILL_REBUILD: return "rebuild";
    case MEND_RNET_KILL_CLOSED: return "closed";
    default: return "none";
  }
}

void mendResilEvent(const char* kind, int rank, int peer, int dev, int path, const char* cause, const char* extra) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  INFO(MEND_RESIL, "MEND_EVENT t=%lld.%06ld rank=%d kind=%s peer=%d dev=%d path=%d cause=%s%s%s", (long long)ts.tv_sec,
       ts.tv_nsec / 1000, rank, kind, peer, dev, path, cause, extra ? " " : "", extra ? extra : "");
}

void mendRnetEvent(const char* kind, const struct rnetComm* rc, int p, const char* cause, const char* extra) {
  int dev = p >= 0 && p < rc->nPaths ? rc->paths[p].localDev : -1;
  char buf[160];
  snprintf(buf, sizeof(buf), "dir=%s conn=%llx%s%s", rc->isSend ? "send" : "recv", (unsigned long long)rc->connId,
           extra ? " " : "", extra ? extra : "");
  mendResilEvent(kind, rc->ctx->rank, rc->peerRank, dev, p, cause, buf);
}

/* ---------------------------------------------------------------- estimator (pure) */

void mendRttSample(struct mendRtt* e, int64_t waitUs, uint64_t bytes) {
  if (waitUs < 0) return;
  if (bytes >= MEND_RTT_RATE_BYTES && waitUs > 0) {
    double rate = (double)bytes / (double)waitUs;
    e->bytesPerUs = e->bytesPerUs > 0 ? e->bytesPerUs + (rate - e->bytesPerUs) / 8 : rate;
  }
  int64_t lat = waitUs;
  if (e->bytesPerUs > 0) lat -= (int64_t)((double)bytes / e->bytesPerUs);
  if (lat < 0) lat = 0;
  if (e->nSamples == 0) {
    e->srttUs = lat;
    e->rttvarUs = lat / 2;
  } else {
    int64_t dev = llabs(e->srttUs - lat);
    e->rttvarUs = (3 * e->rttvarUs + dev) / 4;
    e->srttUs = (7 * e->srttUs + lat) / 8;
  }
  e->nSamples++;
}

int64_t mendRttSuspectUs(const struct mendRtt* e, uint64_t inFlight, int64_t floorUs, int64_t capUs, int backoff) {
  if (e->nSamples < MEND_RTT_MIN_SAMPLES || (inFlight >= MEND_RTT_RATE_BYTES && e->bytesPerUs <= 0)) return capUs;
  int64_t t = e->srttUs + MEND_RTT_VAR_MULT * e->rttvarUs;
  if (e->bytesPerUs > 0) t += (int64_t)((double)inFlight / e->bytesPerUs);
  if (t < floorUs) t = floorUs;
  for (int i = 0; i < backoff && t < capUs; i++) t *= 2;
  return t < capUs ? t : capUs;
}

/* ---------------------------------------------------------------- confirmation (pure) */

void mendConfirmStart(struct mendConfirm* c, int64_t nowUs) {
  *c = (struct mendConfirm){ .beganUs = nowUs, .attemptUs = nowUs, .attempt = 1 };
}

void mendConfirmResult(struct mendConfirm* c, int isRef, int ok, int64_t nowUs) {
  if (isRef) {
    if (c->ref != 0) return;
    c->ref = ok ? 1 : -1;
    if (ok) c->refUs = nowUs - c->beganUs;
  } else if (ok) {
    c->suspectOk = 1;
  } else {
    c->suspectFailed++;
  }
}

void mendConfirmRetry(struct mendConfirm* c, int64_t nowUs) {
  c->attempt++;
  c->attemptUs = nowUs;
}

int mendConfirmDecide(const struct mendConfirm* c, int64_t nowUs, const struct mendConfirmCfg* cfg) {
  if (c->suspectOk) return MEND_CONFIRM_REFUTED;
  int silent = c->suspectFailed >= c->attempt;  /* every suspect probe failed outright */
  if (c->ref == 1) {
    int64_t window = cfg->windowMult * c->refUs;
    if (window < cfg->windowMinUs) window = cfg->windowMinUs;
    if (window > cfg->timeoutUs) window = cfg->timeoutUs;
    if (!silent && nowUs - c->attemptUs < window) return MEND_CONFIRM_WAIT;
    return c->attempt < cfg->attempts ? MEND_CONFIRM_RETRY : MEND_CONFIRM_PATH;
  }
  if ((c->ref == -1 && silent) || nowUs - c->beganUs >= cfg->timeoutUs) return MEND_CONFIRM_PEER;
  return MEND_CONFIRM_WAIT;
}

const char* mendConfirmName(int verdict) {
  switch (verdict) {
    case MEND_CONFIRM_RETRY: return "retry";
    case MEND_CONFIRM_REFUTED: return "refuted";
    case MEND_CONFIRM_PATH: return "path";
    case MEND_CONFIRM_PEER: return "peer";
    default: return "wait";
  }
}

#define CONFIRM_WINDOW_MULT 4  /* the suspect gets 4x the reference's connect time (at least MEND_PROBE_WINDOW) */

struct mendConfirmCfg mendConfirmConfig(void) {
  int64_t attempts = mendParamProbeAttempts();
  return (struct mendConfirmCfg){ .windowMinUs = mendParamProbeWindow() * 1000, .windowMult = CONFIRM_WINDOW_MULT,
                                  .attempts = attempts < 1 ? 1 : attempts > 8 ? 8 : (int)attempts,
                                  .timeoutUs = mendParamProbeTimeout() * 1000 };
}

/* ---------------------------------------------------------------- connections */

static int64_t nowUs(void) { return (int64_t)(mendTimeNs() / 1000); }

int64_t mendRttAckWaitUs(int64_t nowUs, int64_t sinceUs, uint32_t heldUs) {
  if (sinceUs <= 0 || nowUs < sinceUs || nowUs - sinceUs < (int64_t)heldUs) return -1;
  return nowUs - sinceUs - (int64_t)heldUs;
}

void mendRnetDetectAcked(struct rnetComm* rc, int p, uint64_t done, uint32_t delayUs) {
  struct mendDetect* d = &rc->det;
  if (!rc->isSend || done <= rc->nDone || p < 0 || p >= MEND_RNET_MAX_SLOTS) return;
  int64_t now = nowUs();
  uint64_t bytes = 0;
  for (uint64_t s = rc->nDone; s < done && s < rc->nPosted; s++) bytes += rc->reqs[s % RNET_WINDOW].size;
  int64_t since = rc->reqs[rc->nDone % RNET_WINDOW].postUs;
  if (d->lastAckUs > since) since = d->lastAckUs;
  /* The first acknowledgement on a path after a switch waited through the switch: no sample. */
  int64_t wait = mendRttAckWaitUs(now, since, delayUs);
  if (p == d->ackPath && wait >= 0) mendRttSample(&d->rtt[p], wait, bytes);
  d->ackPath = p;
  d->lastAckUs = now;
  d->backoff = 0;
  d->peerSilent = 0;
  d->lastMissMs = 0;
}

void mendRnetDetectWord(struct rnetComm* rc, int p, int64_t waitUs) {
  struct mendDetect* d = &rc->det;
  if (p < 0 || p >= MEND_RNET_MAX_SLOTS) return;
  if (p == d->ackPath) mendRttSample(&d->rtt[p], waitUs, 0);
  d->ackPath = p;
  d->lastAckUs = nowUs();
  d->backoff = 0;
  d->peerSilent = 0;
  d->lastMissMs = 0;
}

static uint64_t inFlightBytes(const struct rnetComm* rc) {
  uint64_t bytes = 0;
  for (uint64_t s = rc->nDone; s < rc->nPosted; s++) bytes += rc->reqs[s % RNET_WINDOW].size;
  return bytes;
}

/* Suspicion on the active path: probe it and another live path to the same peer.  0 when there is
 * no other path to compare with (the fixed rule applies). */
static int startConfirm(struct rnetComm* rc, int64_t suspectMs) {
  struct mendResil* r = rc->ctx->resil;
  int a = rc->active, ref = -1;
  if (!r || !mendResilCanProbe(r, rc, a)) return 0;
  for (int p = 0; p < rc->nPaths && ref < 0; p++)
    if (p != a && mendRnetPathLive(rc, p) && mendResilCanProbe(r, rc, p)) ref = p;
  if (ref < 0) return 0;
  rc->det.confirming = 1;
  rc->det.suspectPath = a;
  rc->det.refPath = ref;
  rc->det.suspectMs = suspectMs;
  atomic_store(&rc->probeState, MEND_RNET_PROBE_RUNNING);
  mendResilConfirmRequest(r, rc, a, ref);
  return 1;
}

/* A confirmation finished: fail over only on its PATH verdict. */
static ncclResult_t takeConfirm(struct rnetComm* rc) {
  struct mendDetect* d = &rc->det;
  int p = d->suspectPath, v = d->cf.verdict;
  int64_t now = mendTimeMs();
  d->confirming = 0;
  atomic_store(&rc->probeState, MEND_RNET_PROBE_IDLE);
  char extra[160];
  snprintf(extra, sizeof(extra), "silent_ms=%lld suspect_ms=%lld confirm_ms=%.1f ref_path=%d ref_us=%lld probes=%d",
           (long long)(now - rc->lastProgressMs), (long long)d->suspectMs, (nowUs() - d->cf.beganUs) / 1e3,
           d->refPath, (long long)d->cf.refUs, d->cf.attempt);
  mendRnetEvent("suspect", rc, p, mendConfirmName(v), extra);
  if (v == MEND_CONFIRM_PATH) {
    d->backoff = 0;
    if (!mendRnetPathLive(rc, p)) return ncclSuccess;  /* fenced meanwhile (a link event, a notice) */
    return mendRnetFailPath(rc, p, MEND_RNET_KILL_PROBE, "silent while another path to the peer answers");
  }
  d->backoff++;
  if (v == MEND_CONFIRM_PEER) {
    /* Silent on every path: a stopped or overloaded peer (or its host gone), not this path. */
    INFO(MEND_RESIL, "NET/Resilient: conn %llx to rank %d: no path to the peer answers; no failover before "
         "MEND_PROGRESS_TIMEOUT", (unsigned long long)rc->connId, rc->peerRank);
    d->peerSilent = 1;
    return ncclSuccess;
  }
  INFO_SPARSE(MEND_RESIL, 1000, "NET/Resilient: conn %llx to rank %d: silent for %lld ms but the path answers its "
              "probe: the peer is slow, not gone", (unsigned long long)rc->connId, rc->peerRank,
              (long long)(now - rc->lastProgressMs));
  rc->lastProgressMs = now;
  return ncclSuccess;
}

/* A failed probe of the connection's only live path: keep it until its probes have failed for
 * MEND_LAST_PATH_TIMEOUT.  One connect lost on a saturated or stalled path (a SYN dropped by a full
 * queue, a peer stopped for a second) must not end the only way to the peer; a dead last path still
 * fails, later.  1 when the path must be kept for now. */
static int keepLastPath(struct rnetComm* rc, int p, int64_t now) {
  int live = 0;
  for (int q = 0; q < rc->nPaths; q++) live += mendRnetPathLive(rc, q);
  if (live != 1) return 0;
  if (rc->det.lastMissMs == 0) rc->det.lastMissMs = now;
  int64_t missed = now - rc->det.lastMissMs, bound = mendParamLastPathTimeout();
  if (missed >= bound) return 0;
  INFO_SPARSE(MEND_RESIL, 1000, "NET/Resilient: conn %llx to rank %d: the probe of its only live path %d failed; "
              "kept for now (probes failing for %lld of %lld ms, MEND_LAST_PATH_TIMEOUT)",
              (unsigned long long)rc->connId, rc->peerRank, p, (long long)missed, (long long)bound);
  return 1;
}

/* Results of a finished progress probe (the fixed rule): fence what failed; a slow peer gets more time. */
static ncclResult_t takeProbe(struct rnetComm* rc) {
  if (rc->det.confirming) return takeConfirm(rc);
  uint32_t failed = atomic_exchange(&rc->probeFailed, 0);
  uint32_t mask = rc->probeMask;
  int64_t now = mendTimeMs();
  atomic_store(&rc->probeState, MEND_RNET_PROBE_IDLE);
  if ((mask & ~failed) != 0) rc->det.lastMissMs = 0; /* a path answered */
  for (int p = 0; p < rc->nPaths; p++) {
    if (!((failed >> p) & 1) || !mendRnetPathLive(rc, p) || keepLastPath(rc, p, now)) continue;
    MENDCHECK(mendRnetFailPath(rc, p, MEND_RNET_KILL_PROBE, NULL));
  }
  if ((mask & ~failed) != 0) {
    INFO_SPARSE(MEND_RESIL, 1000, "NET/Resilient: conn %llx to rank %d: no progress for %lld ms but the path answers "
                "its probe: the peer is slow, not gone", (unsigned long long)rc->connId, rc->peerRank,
                (long long)mendParamProgressTimeout());
  }
  rc->lastProgressMs = mendTimeMs();
  return ncclSuccess;
}

ncclResult_t mendRnetDetectCheck(struct rnetComm* rc) {
  if (!rc->isSend || rc->error != ncclSuccess) return ncclSuccess;
  int state = atomic_load(&rc->probeState);
  if (state == MEND_RNET_PROBE_DONE) return takeProbe(rc);
  if (state == MEND_RNET_PROBE_RUNNING) return ncclSuccess;
  int64_t timeout = mendParamProgressTimeout(), now = (int64_t)(rc->passNs / 1000000);  /* mendRnetProgress's */
  if (timeout <= 0 || rc->nPosted == rc->nDone) return ncclSuccess;
  int64_t silent = now - rc->lastProgressMs, floor = mendParamDetectMin();
  if (rc->active >= 0 && rc->active < MEND_RNET_MAX_SLOTS && mendParamDetectAdaptive() && !rc->det.peerSilent &&
      silent >= floor && silent < timeout) {
    int64_t us = mendRttSuspectUs(&rc->det.rtt[rc->active], inFlightBytes(rc), floor * 1000, timeout * 1000,
                                  rc->det.backoff);
    if (silent * 1000 >= us && startConfirm(rc, us / 1000)) return ncclSuccess;
  }
  if (silent < timeout) return ncclSuccess;
  uint32_t mask = 0;
  if (rc->active >= 0) {
    mask = 1u << rc->active;
  } else {
    /* Waiting for a RESUME: tell the receiver again (a notice may have been lost with a link) and
     * check every path it could choose. */
    if (rc->lastKilled >= 0 && now - rc->lastKillNoticeMs >= timeout) {
      mendRnetNotify(rc, RNET_NOTE_KILL, rc->lastKilled, MEND_RNET_KILL_PEER, NULL);
      rc->lastKillNoticeMs = now;
    }
    for (int p = 0; p < rc->nPaths; p++)
      if (mendRnetPathLive(rc, p)) mask |= 1u << p;
  }
  if (!rc->ctx->resil || !mask) {
    rc->lastProgressMs = now;  /* nobody to probe with: keep waiting */
    return ncclSuccess;
  }
  rc->probeMask = mask;
  atomic_store(&rc->probeFailed, 0);
  atomic_store(&rc->probeState, MEND_RNET_PROBE_RUNNING);
  mendResilProbeRequest(rc->ctx->resil, rc, mask);
  return ncclSuccess;
}
