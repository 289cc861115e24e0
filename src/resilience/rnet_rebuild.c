/*
 * Bringing a dead path back, and fail-back.  The sender drives it: its resilience service watches
 * the NIC pair of every dead path and, once probes have succeeded for MEND_FAILBACK_DELAY, posts
 * REBUILD_START.  Then:
 *   sender:   listen for a new ctrl comm -> REBUILD(handle) ........................ state REBUILDING
 *   receiver: listen for a new data comm -> REBUILD_ACK(handle); connect ctrl, accept data
 *   sender:   connect data, accept ctrl; register the area and every user buffer -> IDLE, REBUILT
 *   receiver: both comms up and REBUILT received -> IDLE (a backup again)
 * If the rebuilt path comes earlier in the chain than the active one (the primary came back), the
 * receiver moves traffic back at once: it fences the backup (so nothing more lands through it) and
 * sends RESUME on the primary with its count of placed messages; the sender follows that RESUME,
 * so the last message of the backup is acknowledged before the first one goes out on the primary.
 * The fenced backup is rebuilt right after, the same way.  Either end abandons a rebuild that does
 * not finish in time, and the next attempt waits longer.
 */
#include "resilience/rnet_priv.h"

#include <stdio.h>
#include <string.h>

#include "checks.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "resilience/detect.h"
#include "resilience/resil.h"

#define RB_MIN_TIMEOUT_MS 5000  /* a rebuild has at least this long to finish */

int64_t mendRnetRebuildTimeoutMs(void) {
  int64_t t = 10 * mendParamProbeTimeout();
  return t < RB_MIN_TIMEOUT_MS ? RB_MIN_TIMEOUT_MS : t;
}

static void rbBegin(struct rnetComm* rc, int p) {
  struct rnetPath* path = rc->paths + p;
  atomic_store(&path->state, RNET_PATH_REBUILDING);
  path->rbDeadlineMs = mendTimeMs() + mendRnetRebuildTimeoutMs();
  path->confirmed = 0;
  atomic_fetch_add(&rc->rebuilding, 1);
}

void mendRnetRebuildAbort(struct rnetComm* rc, int p) {
  struct rnetPath* path = rc->paths + p;
  if (path->rbStage == RNET_RB_NONE && !path->rbListen) return;
  if (path->rbListen) rc->base->closeListen(path->rbListen);
  path->rbListen = NULL;
  if (path->rbStage != RNET_RB_NONE) atomic_fetch_sub(&rc->rebuilding, 1);
  path->rbStage = RNET_RB_NONE;
  mendRnetPathClose(rc, p);
  atomic_store(&path->state, RNET_PATH_DEAD);
  path->rbFailures++;
  int64_t backoff = mendParamFailbackDelay() * (path->rbFailures < 8 ? path->rbFailures : 8);
  atomic_store(&path->rbNotBeforeMs, mendTimeMs() + backoff);
  atomic_store(&path->rbPosted, 0);
  mendRnetCrossAbandoned(rc, p);
}

/* A rebuild could not go on: both ends drop it. */
static void rbFail(struct rnetComm* rc, int p, const char* why) {
  INFO(MEND_RESIL, "NET/Resilient: conn %llx: rebuild of path %d (device %d) abandoned: %s", (unsigned long long)rc->connId,
       p, rc->paths[p].localDev, why);
  mendRnetRebuildAbort(rc, p);
  mendRnetNotify(rc, RNET_NOTE_REBUILD_FAIL, p, 0, NULL);
}

/* Listen on path p's device for the comm the peer connects back; fills handle. */
static ncclResult_t rbListen(struct rnetComm* rc, int p, char* handle) {
  memset(handle, 0, MEND_NET_HANDLE_MAXSIZE);
  return rc->base->listen(rc->ctx->baseCtx, rc->paths[p].localDev, handle, &rc->paths[p].rbListen);
}

static int localLinkDown(struct rnetComm* rc, int p) {
  return rc->ctx->resil && mendResilLinkUp(rc->ctx->resil, rc->paths[p].localDev) == 0;
}

/* Sender: start (REBUILD_START from the service, or the backup fenced by a fail-back). */
static ncclResult_t senderStart(struct rnetComm* rc, int p) {
  struct rnetPath* path = rc->paths + p;
  if (atomic_load(&path->state) != RNET_PATH_DEAD || path->rbStage != RNET_RB_NONE || rc->error != ncclSuccess) {
    atomic_store(&path->rbPosted, 0);
    return ncclSuccess;
  }
  if (localLinkDown(rc, p)) {
    atomic_store(&path->rbPosted, 0);
    mendRnetCrossAbandoned(rc, p);
    return ncclSuccess;
  }
  char handle[MEND_NET_HANDLE_MAXSIZE];
  if (rbListen(rc, p, handle) != ncclSuccess) {
    path->rbStage = RNET_RB_NONE;
    atomic_store(&path->rbPosted, 0);
    atomic_store(&path->rbNotBeforeMs, mendTimeMs() + mendParamFailbackDelay());
    mendRnetCrossAbandoned(rc, p);
    return ncclSuccess;
  }
  rbBegin(rc, p);
  path->rbStage = RNET_RB_ASKED;
  INFO(MEND_RESIL, "NET/Resilient: conn %llx rebuilds path %d (device %d) to rank %d", (unsigned long long)rc->connId, p,
       path->localDev, rc->peerRank);
  mendRnetNotify(rc, RNET_NOTE_REBUILD, p, mendRnetCrossCode(rc, p), handle);
  return ncclSuccess;
}

/* Receiver: the sender asks for a rebuild; handle = where to connect the new ctrl comm. */
static ncclResult_t receiverStart(struct rnetComm* rc, int p, const char* peerHandle) {
  struct rnetPath* path = rc->paths + p;
  if (mendRnetPathLive(rc, p)) MENDCHECK(mendRnetFailPath(rc, p, MEND_RNET_KILL_PEER, "the sender rebuilds it"));
  if (path->rbStage != RNET_RB_NONE) mendRnetRebuildAbort(rc, p);
  if (rc->error != ncclSuccess || localLinkDown(rc, p)) {
    mendRnetNotify(rc, RNET_NOTE_REBUILD_FAIL, p, 0, NULL);
    return ncclSuccess;
  }
  char handle[MEND_NET_HANDLE_MAXSIZE];
  if (rbListen(rc, p, handle) != ncclSuccess) {
    mendRnetNotify(rc, RNET_NOTE_REBUILD_FAIL, p, 0, NULL);
    return ncclSuccess;
  }
  memcpy(path->handle, peerHandle, MEND_NET_HANDLE_MAXSIZE);
  rbBegin(rc, p);
  path->rbStage = RNET_RB_CONNECT;
  mendRnetNotify(rc, RNET_NOTE_REBUILD_ACK, p, 0, handle);
  return ncclSuccess;
}

static ncclResult_t receiverReady(struct rnetComm* rc, int p);

/* Path p is a live backup again at our end. */
static void rbDone(struct rnetComm* rc, int p) {
  struct rnetPath* path = rc->paths + p;
  path->rbStage = RNET_RB_NONE;
  atomic_fetch_sub(&rc->rebuilding, 1);
  atomic_store(&path->state, RNET_PATH_IDLE);
  path->rbFailures = 0;
  atomic_store(&path->rbPosted, 0);
  rc->rebuilds++;
  mendRnetEvent("rebuilt", rc, p, "none", NULL);
}

/* Our side of path p is connected: register and stand by (or, receiver, wait for REBUILT). */
static ncclResult_t rbConnected(struct rnetComm* rc, int p) {
  struct rnetPath* path = rc->paths + p;
  rc->base->closeListen(path->rbListen);
  path->rbListen = NULL;
  if (mendRnetPathRegister(rc, p) != ncclSuccess) {
    rbFail(rc, p, "registration failed");
    return ncclSuccess;
  }
  if (!rc->isSend) {
    atomic_store(&path->state, RNET_PATH_CONFIRMING);
    path->rbStage = RNET_RB_CONFIRM;
    return path->confirmed ? receiverReady(rc, p) : ncclSuccess;
  }
  rbDone(rc, p);
  mendRnetNotify(rc, RNET_NOTE_REBUILT, p, 0, NULL);
  if (rc->ctx->resil) {
    mendResilNicUp(rc->ctx->resil, rc->ctx->rank, path->localDev);
    mendResilNicUp(rc->ctx->resil, rc->peerRank, path->remoteDev);
  }
  return ncclSuccess;
}

/* Receiver: p is a live backup again; if it comes before the active path, move back to it. */
static ncclResult_t receiverReady(struct rnetComm* rc, int p) {
  struct rnetPath* path = rc->paths + p;
  rbDone(rc, p);
  int old = rc->active;
  if (old < 0) {
    /* No path was left (a crossing path, or a rail back while we waited for one): resume here. */
    mendRnetActivate(rc, p);
    INFO(MEND_RESIL, "NET/Resilient: conn %llx resumes on rebuilt path %d (device %d) at message %llu",
         (unsigned long long)rc->connId, p, path->localDev, (unsigned long long)rc->nDone);
    return ncclSuccess;
  }
  if (p >= old) return ncclSuccess;
  INFO(MEND_RESIL, "NET/Resilient: conn %llx fails back from path %d (device %d) to path %d (device %d) at message %llu",
       (unsigned long long)rc->connId, old, rc->paths[old].localDev, p, path->localDev, (unsigned long long)rc->nDone);
  rc->failbacks++;
  MENDCHECK(mendRnetFailPath(rc, old, MEND_RNET_KILL_SWITCH, NULL));
  char extra[48];
  snprintf(extra, sizeof(extra), "msg=%llu from=%d", (unsigned long long)rc->nDone, old);
  mendRnetEvent("failback", rc, rc->active, "none", extra);
  return ncclSuccess;
}

ncclResult_t mendRnetRebuildNotice(struct rnetComm* rc, const struct rnetNotice* n) {
  int p = n->path;
  struct rnetPath* path = rc->paths + p;
  switch (n->type) {
    case RNET_NOTE_REBUILD_START:
      return rc->isSend ? senderStart(rc, p) : ncclSuccess;
    case RNET_NOTE_REBUILD:
      return rc->isSend ? ncclSuccess : receiverStart(rc, p, n->handle);
    case RNET_NOTE_REBUILD_ACK:
      if (rc->isSend && path->rbStage == RNET_RB_ASKED) {
        memcpy(path->handle, n->handle, MEND_NET_HANDLE_MAXSIZE);
        path->rbStage = RNET_RB_CONNECT;
      }
      return ncclSuccess;
    case RNET_NOTE_REBUILT:
      if (rc->isSend || path->rbStage == RNET_RB_NONE) return ncclSuccess;
      path->confirmed = 1;
      if (path->rbStage == RNET_RB_CONFIRM) return receiverReady(rc, p);
      return ncclSuccess;  /* still connecting: rbConnected finishes it */
    case RNET_NOTE_REBUILD_FAIL:
      if (path->rbStage != RNET_RB_NONE) {
        INFO(MEND_RESIL, "NET/Resilient: conn %llx: the peer abandoned the rebuild of path %d", (unsigned long long)rc->connId, p);
        mendRnetRebuildAbort(rc, p);
      } else if (rc->isSend && atomic_load(&path->state) == RNET_PATH_IDLE && p != rc->active) {
        /* Our side finished but theirs did not: it is no backup. */
        MENDCHECK(mendRnetFailPath(rc, p, MEND_RNET_KILL_REBUILD, NULL));
      }
      return ncclSuccess;
    default:
      WARN("NET/Resilient: conn %llx: unknown notice type %u", (unsigned long long)rc->connId, n->type);
      return ncclSuccess;
  }
}

/* One step of a rebuild in the CONNECT stage. */
static ncclResult_t rbStep(struct rnetComm* rc, int p) {
  struct rnetPath* path = rc->paths + p;
  void** out = rc->isSend ? &path->data : &path->ctrl;  /* what we connect */
  void** in = rc->isSend ? &path->ctrl : &path->data;   /* what we accept */
  ncclResult_t res = ncclSuccess;
  if (!*out) res = rc->base->connect(rc->ctx->baseCtx, path->localDev, path->handle, out);
  if (res == ncclSuccess && !*in) res = rc->base->accept(path->rbListen, in);
  if (res != ncclSuccess) {
    rbFail(rc, p, "connect or accept failed");
    return ncclSuccess;
  }
  if (*out && *in) return rbConnected(rc, p);
  return ncclSuccess;
}

ncclResult_t mendRnetRebuildProgress(struct rnetComm* rc) {
  if (atomic_load(&rc->rebuilding) == 0) return ncclSuccess;
  int64_t now = mendTimeMs();
  for (int p = 0; p < rc->nPaths; p++) {
    struct rnetPath* path = rc->paths + p;
    if (path->rbStage == RNET_RB_NONE) continue;
    if (now > path->rbDeadlineMs) {
      rbFail(rc, p, "it did not finish in time");
      continue;
    }
    if (path->rbStage == RNET_RB_CONNECT) MENDCHECK(rbStep(rc, p));
  }
  return ncclSuccess;
}
