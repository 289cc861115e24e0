/*
 * Failure detection per connection (see detect.h): progress timeouts confirmed by probes, and the
 * events every detector reports.
 *
 * Only the sender times out: it is the end that waits for something (acknowledgements, or a RESUME
 * after a fence), and it waits only while it has messages outstanding, so a peer that is merely idle
 * or waiting for its own upstream is never suspected.  A timeout is not a verdict: the path is
 * probed first, and a probe that connects means the peer is slow, not dead.
 */
#include "resilience/detect.h"

#include <stdio.h>
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

/* Results of a finished progress probe: fence what failed; a slow peer gets more time. */
static ncclResult_t takeProbe(struct rnetComm* rc) {
  uint32_t failed = atomic_exchange(&rc->probeFailed, 0);
  uint32_t mask = rc->probeMask;
  atomic_store(&rc->probeState, MEND_RNET_PROBE_IDLE);
  for (int p = 0; p < rc->nPaths; p++) {
    if (!((failed >> p) & 1) || !mendRnetPathLive(rc, p)) continue;
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
  int64_t timeout = mendParamProgressTimeout(), now = mendTimeMs();
  if (timeout <= 0 || rc->nPosted == rc->nDone || now - rc->lastProgressMs < timeout) return ncclSuccess;
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
