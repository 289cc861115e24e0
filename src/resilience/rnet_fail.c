/*
 * Failover of a resilient net connection.  A failed path is fenced at once (its base comms closed,
 * so it can never write into a buffer again), the peer is told over the bootstrap, and the lowest
 * healthy path of the chain takes over: both ends apply the same rule, so they meet on the same path.
 * The receiver's first control message there (RESUME) carries its count of placed messages: the
 * rollback point, from which the sender replays.
 */
#include "resilience/rnet_priv.h"

#include "checks.h"
#include "misc/utils.h"
#include "resilience/detect.h"

static const char* killCause(int why) {
  switch (why) {
    case MEND_RNET_KILL_TEST: return "killed by request";
    case MEND_RNET_KILL_LINK: return "its interface lost its link";
    case MEND_RNET_KILL_PEER: return "the peer reported it failed";
    case MEND_RNET_KILL_PROBE: return "no progress and the path probe failed";
    default: return "unknown cause";
  }
}

/* The first path of the chain still alive, or -1. */
static int nextHealthy(struct rnetComm* rc) {
  for (int q = 0; q < rc->nPaths; q++)
    if (rc->paths[q].state == RNET_PATH_IDLE || rc->paths[q].state == RNET_PATH_ACTIVE) return q;
  return -1;
}

/* Forget every base request of path p (its comms are closed: they are gone). */
static void abandon(struct rnetComm* rc, int p) {
  for (int i = 0; i < RNET_WINDOW; i++)
    if (rc->reqs[i].base && rc->reqs[i].basePath == p) rc->reqs[i].base = NULL;
  for (int k = 0; k < RNET_NCTRL; k++) rc->ctrlReq[k] = NULL;
  rc->ctrlPosted = rc->ctrlDone = 0;
}

ncclResult_t mendRnetFailPath(struct rnetComm* rc, int p, ncclResult_t res, const char* cause) {
  struct rnetPath* path = rc->paths + p;
  if (p < 0 || p >= rc->nPaths || path->state == RNET_PATH_DEAD) return rc->error;
  int wasActive = p == rc->active;
  WARN_SPARSE(1000, "NET/Resilient: rank %d %s rank %d: path %d (device %d) failed: %s (error %d); fencing it",
              rc->ctx->rank, rc->isSend ? "->" : "<-", rc->peerRank, p, path->localDev, cause, res);
  mendRnetPathClose(rc, p);
  path->state = RNET_PATH_DEAD;
  path->deadSinceMs = mendTimeMs();
  rc->failovers++;
  mendRnetDetectPathDown(rc, p);
  if (!wasActive) return ncclSuccess;
  abandon(rc, p);
  int next = nextHealthy(rc);
  if (next < 0) {
    rc->active = -1;
    rc->error = ncclRemoteError;
    WARN("NET/Resilient: rank %d %s rank %d: no path left (%d tried); the connection fails", rc->ctx->rank,
         rc->isSend ? "->" : "<-", rc->peerRank, rc->nPaths);
    return rc->error;
  }
  rc->active = next;
  rc->paths[next].state = RNET_PATH_ACTIVE;
  rc->probing = 0;
  if (rc->isSend) {
    rc->waitResume = 1;
    rc->nIssued = rc->nBaseDone = rc->nDone;
  } else {
    rc->nIssued = rc->nDone;
    rc->sendResume = 1;
  }
  rc->lastProgressMs = mendTimeMs();
  INFO(MEND_RESIL, "NET/Resilient: conn %llx fails over from path %d (device %d) to path %d (device %d) at message %llu",
       (unsigned long long)rc->connId, p, path->localDev, next, rc->paths[next].localDev, (unsigned long long)rc->nDone);
  return ncclSuccess;
}

ncclResult_t mendRnetApplyKills(struct rnetComm* rc) {
  for (int p = 0; p < rc->nPaths; p++) {
    int why = atomic_exchange_explicit(&rc->paths[p].killed, 0, memory_order_acq_rel);
    if (why) MENDCHECK(mendRnetFailPath(rc, p, ncclSystemError, killCause(why)));
  }
  return mendRnetDetectCheck(rc);
}

ncclResult_t mendRnetKillPath(void* netComm, int p) {
  struct rnetComm* rc = netComm;
  MENDARGCHECK(rc != NULL && p >= 0 && p < rc->nPaths, ncclInvalidArgument, "NET/Resilient: kill: no path %d", p);
  atomic_store_explicit(&rc->paths[p].killed, MEND_RNET_KILL_TEST, memory_order_release);
  return ncclSuccess;
}
