/*
 * Failover of a resilient net connection.  A failed path is fenced at once (its base comms closed,
 * so it can never write into a buffer again) and the other end is told.  The receiver then picks
 * the first live path of the chain and sends RESUME there with its count of placed messages (the
 * rollback point); the sender, which keeps a receive posted on every live path, follows the newest
 * RESUME and replays from that count.  Each message's completion still reaches the user once, in
 * order: completions are counts, and counts only grow.
 */
#include "resilience/rnet_priv.h"

#include <stdio.h>

#include "checks.h"
#include "misc/utils.h"
#include "resilience/detect.h"
#include "resilience/resil.h"

static const char* killCause(int why) {
  switch (why) {
    case MEND_RNET_KILL_TEST: return "killed by request";
    case MEND_RNET_KILL_LINK: return "its interface lost its link";
    case MEND_RNET_KILL_PEER: return "the peer reported it failed";
    case MEND_RNET_KILL_PROBE: return "no progress and the path probe failed";
    case MEND_RNET_KILL_ERROR: return "a request on it failed";
    case MEND_RNET_KILL_SWITCH: return "traffic moved to a preferred path";
    case MEND_RNET_KILL_REBUILD: return "its rebuild failed";
    case MEND_RNET_KILL_CLOSED: return "the peer closed it";
    default: return "unknown cause";
  }
}

/* The first live path of the chain, or -1.  The receiver only counts paths the sender confirmed. */
static int firstLive(struct rnetComm* rc) {
  for (int q = 0; q < rc->nPaths; q++)
    if (mendRnetPathLive(rc, q) && (rc->isSend || rc->paths[q].confirmed)) return q;
  return -1;
}

/* Forget every base request of path p (its comms are closed: they are gone). */
static void abandon(struct rnetComm* rc, int p) {
  for (int i = 0; i < RNET_WINDOW; i++)
    if (rc->reqs[i].base && rc->reqs[i].basePath == p) rc->reqs[i].base = NULL;
  if (p == rc->active) {
    for (int k = 0; k < RNET_NCTRL; k++) rc->ctrlReq[k] = NULL;
    rc->ctrlPosted = rc->ctrlDone = 0;
  }
  rc->paths[p].watchReq = NULL;
}

ncclResult_t mendRnetLost(struct rnetComm* rc, const char* detail) {
  rc->active = -1;
  rc->error = ncclRemoteError;
  atomic_store_explicit(&rc->lost, 1, memory_order_release);
  if (!rc->sawFailure) {
    /* Every path was closed by the peer: it closed the connection (destroy, exit).  An operation
     * that still needs it fails; no fault to report. */
    INFO(MEND_RESIL | NCCL_NET, "NET/Resilient: rank %d %s rank %d: the peer closed the connection", rc->ctx->rank,
         rc->isSend ? "->" : "<-", rc->peerRank);
    mendRnetEvent("closed", rc, -1, "closed", NULL);
    return rc->error;
  }
  WARN("NET/Resilient: rank %d %s rank %d: no path left (%d tried)%s%s; the connection fails", rc->ctx->rank,
       rc->isSend ? "->" : "<-", rc->peerRank, rc->nPaths, detail ? ": " : "", detail ? detail : "");
  mendRnetEvent("lost", rc, -1, "none", NULL);
  return rc->error;
}

/* The last path died: a crossing path may still carry the connection (rnet_cross.c). */
static ncclResult_t noPathLeft(struct rnetComm* rc) {
  rc->active = -1;
  if (rc->sawFailure && mendRnetCrossStart(rc)) return ncclSuccess;
  return mendRnetLost(rc, NULL);
}

void mendRnetActivate(struct rnetComm* rc, int p) {
  rc->active = p;
  rc->crossUntilMs = 0;
  atomic_store(&rc->paths[p].state, RNET_PATH_ACTIVE);
  rc->epoch++;
  rc->nIssued = rc->nDone;
  rc->sendResume = 1;
}

ncclResult_t mendRnetFailPath(struct rnetComm* rc, int p, int why, const char* detail) {
  if (p < 0 || p >= rc->nPaths) return rc->error;
  struct rnetPath* path = rc->paths + p;
  int state = atomic_load(&path->state);
  if (state == RNET_PATH_DEAD) return rc->error;
  int wasActive = p == rc->active;
  if (why != MEND_RNET_KILL_SWITCH && why != MEND_RNET_KILL_CLOSED) rc->sawFailure = 1;
  if (state == RNET_PATH_REBUILDING || state == RNET_PATH_CONFIRMING) {
    mendRnetRebuildAbort(rc, p);
  } else if (why == MEND_RNET_KILL_CLOSED) {
    INFO(MEND_RESIL | NCCL_NET, "NET/Resilient: rank %d %s rank %d: the peer closed path %d (device %d)", rc->ctx->rank,
         rc->isSend ? "->" : "<-", rc->peerRank, p, path->localDev);
  } else if (why != MEND_RNET_KILL_SWITCH) {
    WARN_SPARSE(1000, "NET/Resilient: rank %d %s rank %d: path %d (device %d) failed: %s%s%s; fencing it",
                rc->ctx->rank, rc->isSend ? "->" : "<-", rc->peerRank, p, path->localDev, killCause(why),
                detail ? ": " : "", detail ? detail : "");
    mendRnetEvent("detect", rc, p, mendRnetKillName(why), NULL);
    rc->failovers++;
    if (rc->ctx->resil && !path->relayed && (why == MEND_RNET_KILL_PROBE || why == MEND_RNET_KILL_ERROR))
      mendResilLocalize(rc->ctx->resil, path->localDev, rc->peerRank, path->remoteDev, why);
  }
  abandon(rc, p);
  mendRnetPathClose(rc, p);
  atomic_store(&path->state, RNET_PATH_DEAD);
  path->deadSinceMs = mendTimeMs();
  path->deadCause = why;
  path->confirmed = 0;
  /* The other end must fence it too; it knows already when it told us or chose to move. */
  if (why != MEND_RNET_KILL_PEER && why != MEND_RNET_KILL_SWITCH && why != MEND_RNET_KILL_CLOSED)
    mendRnetNotify(rc, RNET_NOTE_KILL, p, why, NULL);
  if (!wasActive) return rc->isSend && rc->active < 0 && firstLive(rc) < 0 ? noPathLeft(rc) : ncclSuccess;
  if (rc->isSend) {
    /* The receiver picks the next path; hold traffic until its RESUME arrives on one of ours. */
    rc->active = -1;
    rc->waitResume = 1;
    rc->waitSinceMs = mendTimeMs();
    rc->lastKilled = p;
    rc->nIssued = rc->nBaseDone = rc->nDone;
    rc->lastProgressMs = mendTimeMs();
    if (firstLive(rc) < 0) return noPathLeft(rc);
    return ncclSuccess;
  }
  int next = firstLive(rc);
  if (next < 0) return noPathLeft(rc);
  mendRnetActivate(rc, next);
  INFO(MEND_RESIL, "NET/Resilient: conn %llx moves from path %d (device %d) to path %d (device %d) at message %llu",
       (unsigned long long)rc->connId, p, path->localDev, next, rc->paths[next].localDev, (unsigned long long)rc->nDone);
  return ncclSuccess;
}

ncclResult_t mendRnetTakeResume(struct rnetComm* rc, int p, const struct rnetCtrl* m) {
  if ((int16_t)(m->epoch - rc->epoch) <= 0 && rc->active >= 0) {
    INFO(MEND_RESIL, "NET/Resilient: conn %llx ignores a stale RESUME on path %d (epoch %u, have %u)",
         (unsigned long long)rc->connId, p, m->epoch, rc->epoch);
    return ncclSuccess;
  }
  if (m->value > rc->nPosted || m->value < rc->nDone) {
    WARN("NET/Resilient: RESUME on path %d names message %llu, outside [%llu, %llu]", p, (unsigned long long)m->value,
         (unsigned long long)rc->nDone, (unsigned long long)rc->nPosted);
    return ncclRemoteError;
  }
  int old = rc->active;
  if (old < 0 && rc->lastKilled >= 0 && rc->paths[rc->lastKilled].deadCause == MEND_RNET_KILL_CLOSED &&
      p < rc->lastKilled) {
    old = rc->lastKilled;  /* we saw the receiver close it before its RESUME here: the same switch */
  }
  int failback = old >= 0 && old != p && p < old;
  if (old >= 0 && old != p) {
    /* The receiver fenced `old` before it chose p: fence our end too (a no-op when it is dead). */
    MENDCHECK(mendRnetFailPath(rc, old, MEND_RNET_KILL_SWITCH, NULL));
    if (failback) rc->failbacks++;
    if (failback && !rc->paths[old].relayed) {
      /* `old` is healthy: rebuild it as a backup at once (not a relay path: it holds a bridge's
       * buffers, and is made again if ever needed). */
      struct rnetNotice n = { .magic = RNET_MAGIC, .type = RNET_NOTE_REBUILD_START, .path = (uint16_t)old,
                              .connId = rc->connId, .fromRank = rc->ctx->rank };
      mendRnetPost(rc, &n);
    }
  }
  rc->active = p;
  rc->crossUntilMs = 0;
  atomic_store(&rc->paths[p].state, RNET_PATH_ACTIVE);
  rc->epoch = m->epoch;
  rc->waitResume = 0;
  rc->lastKilled = -1;
  rc->lastTries = 0;     /* a new episode may try everything again */
  rc->crossFailed = 0;
  rc->nDone = m->value;
  rc->nIssued = rc->nBaseDone = rc->nDone;
  rc->lastProgressMs = mendTimeMs();
  char extra[48];
  snprintf(extra, sizeof(extra), "msg=%llu", (unsigned long long)rc->nDone);
  mendRnetEvent(failback ? "failback" : "resume", rc, p, "none", extra);
  INFO(MEND_RESIL, "NET/Resilient: conn %llx resumes on path %d (device %d) at message %llu",
       (unsigned long long)rc->connId, p, rc->paths[p].localDev, (unsigned long long)rc->nDone);
  return ncclSuccess;
}

ncclResult_t mendRnetApplyNotices(struct rnetComm* rc) {
  struct rnetNotice n;
  while (atomic_load_explicit(&rc->inboxCount, memory_order_acquire) > 0 && mendRnetTakeNotice(rc, &n)) {
    if (!rc->isSend && (n.path == rc->nPaths || n.path == rc->crossPath) &&
        (n.type == RNET_NOTE_REBUILD || n.type == RNET_NOTE_REBUILD_FAIL)) {
      MENDCHECK(mendRnetCrossNotice(rc, &n));  /* a crossing or relay path, or the sender's word that it has none */
      continue;
    }
    if (n.type == RNET_NOTE_CROSS_PROBED) {
      mendRnetCrossProbed(rc, n.cause);
      continue;
    }
    if (n.path >= rc->nPaths) {
      WARN("NET/Resilient: conn %llx: notice %u for path %u of %d ignored", (unsigned long long)rc->connId, n.type,
           n.path, rc->nPaths);
      continue;
    }
    if (n.type == RNET_NOTE_KILL) {
      int why = n.remote ? MEND_RNET_KILL_PEER : n.cause;
      MENDCHECK(mendRnetFailPath(rc, n.path, why, NULL));
    } else {
      MENDCHECK(mendRnetRebuildNotice(rc, &n));
    }
  }
  MENDCHECK(mendRnetCrossCheck(rc));
  return mendRnetDetectCheck(rc);
}

ncclResult_t mendRnetKillPath(void* netComm, int p) {
  struct rnetComm* rc = netComm;
  MENDARGCHECK(rc != NULL && p >= 0 && p < rc->nPaths, ncclInvalidArgument, "NET/Resilient: kill: no path %d", p);
  struct rnetNotice n = { .magic = RNET_MAGIC, .type = RNET_NOTE_KILL, .path = (uint16_t)p, .connId = rc->connId,
                          .cause = MEND_RNET_KILL_TEST, .fromRank = rc->ctx->rank };
  mendRnetPost(rc, &n);
  return ncclSuccess;
}

ncclResult_t mendRnetRebuildPath(void* sendComm, int p) {
  struct rnetComm* rc = sendComm;
  MENDARGCHECK(rc != NULL && rc->isSend && p >= 0 && p < rc->nPaths, ncclInvalidArgument,
               "NET/Resilient: rebuild: not a sending connection or no path %d", p);
  struct rnetNotice n = { .magic = RNET_MAGIC, .type = RNET_NOTE_REBUILD_START, .path = (uint16_t)p,
                          .connId = rc->connId, .fromRank = rc->ctx->rank };
  mendRnetPost(rc, &n);
  return ncclSuccess;
}
