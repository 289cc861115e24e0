/*
 * A crossing path.  Paths pair NICs of the same index (rails), so two hosts that lost different
 * rails (host A rail 0, host B rail 1) have no path left, although a fabric whose rails meet at a
 * spine still connects A's NIC 1 to B's NIC 0.  Where NCCL_CROSS_NIC allows crossing rails (1, or
 * 2, the default), a connection whose last path died does not fail at once: the sender picks one of
 * its working NICs and one of the receiver's, of different indices, and builds a path between them
 * in a new slot after the chain, with the rebuild protocol (rnet_rebuild.c).  The receiver waits
 * for it, activates it once built and sends RESUME there; the sender replays from that count, so the
 * operation in flight finishes.  Where the rails do not meet, the rebuild fails within its bound
 * and so does the connection.  The slot stays: a rail path rebuilt later comes first in the chain
 * (fail-back moves traffic there), and the crossing path is rebuilt behind it as the last backup.
 *
 * Wire: the sender's REBUILD for path nPaths (one past the chain) carries the pair in its cause,
 * CROSS_TAG | senderDev << 8 | receiverDev; its REBUILD_FAIL for path nPaths says it has none.
 */
#include "resilience/rnet_priv.h"

#include <stdio.h>

#include "checks.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "resilience/detect.h"
#include "resilience/resil.h"

#define CROSS_TAG 0x43520000u  /* "CR" in the top half of a REBUILD's cause */
#define CROSS_WAIT_MS 2000     /* beyond the rebuild's own bound: notices ride the bootstrap */

static int crossAllowed(void) { return mendParamCrossNic() != 0; }

/* Device d of the host that wrote hello h exists and has a listen handle. */
static int devValid(const struct rnetHello* h, int d) {
  return d >= 0 && d < h->nDevs && d < MEND_RNET_MAX_PATHS && ((h->validMask >> d) & 1);
}

/* ... and no one saw it die. */
static int devUsable(struct rnetComm* rc, int rank, int d, const struct rnetHello* h) {
  return devValid(h, d) && mendResilDevUsable(rc->ctx->resil, rank, d) != 0;
}

/* Sender: a pair of usable devices of different indices that no path of the chain already paired. */
static int pick(struct rnetComm* rc, int* mine, int* theirs) {
  const struct rnetHello* me = &rc->area->mine;
  const struct rnetHello* peer = &rc->area->peer;
  for (int a = 0; a < me->nDevs; a++) {
    if (!devUsable(rc, rc->ctx->rank, a, me)) continue;
    for (int b = 0; b < peer->nDevs; b++) {
      if (b == a || !devUsable(rc, rc->peerRank, b, peer)) continue;
      int paired = 0;
      for (int p = 0; p < rc->nPaths; p++) paired |= rc->paths[p].localDev == a && rc->paths[p].remoteDev == b;
      if (paired) continue;
      *mine = a;
      *theirs = b;
      return 1;
    }
  }
  return 0;
}

/* Lay out slot nPaths as a dead path between our device `local` and the peer's `remote`. */
static int addSlot(struct rnetComm* rc, int local, int remote) {
  int p = rc->nPaths;
  struct rnetPath* path = rc->paths + p;
  path->localDev = local;
  path->remoteDev = remote;
  path->deadSinceMs = mendTimeMs();
  path->deadCause = MEND_RNET_KILL_REBUILD;
  atomic_store(&path->state, RNET_PATH_DEAD);
  rc->crossPath = p;
  atomic_store(&rc->nPaths, p + 1);  /* published last: the service reads the slot once it counts */
  return p;
}

static int64_t waitBoundMs(void) { return mendRnetRebuildTimeoutMs() + CROSS_WAIT_MS; }

static int senderStart(struct rnetComm* rc) {
  if (rc->crossPath >= 0) { /* one crossing slot: wait for it only while it is being rebuilt */
    if (rc->paths[rc->crossPath].rbStage == RNET_RB_NONE) return 0;
    rc->crossUntilMs = mendTimeMs() + waitBoundMs();
    return 1;
  }
  int mine = -1, theirs = -1;
  if (rc->nPaths >= MEND_RNET_MAX_SLOTS || !pick(rc, &mine, &theirs)) {
    INFO(MEND_RESIL, "NET/Resilient: conn %llx to rank %d: no pair of working NICs to cross rails with",
         (unsigned long long)rc->connId, rc->peerRank);
    mendRnetNotify(rc, RNET_NOTE_REBUILD_FAIL, rc->nPaths, 0, NULL);  /* the receiver stops waiting */
    return 0;
  }
  int p = addSlot(rc, mine, theirs);
  WARN("NET/Resilient: rank %d -> rank %d: no rail left in common; crossing rails from device %d to the peer's "
       "device %d (path %d, NCCL_CROSS_NIC=%d)", rc->ctx->rank, rc->peerRank, mine, theirs, p,
       (int)mendParamCrossNic());
  char extra[32];
  snprintf(extra, sizeof(extra), "to_dev=%d", theirs);
  mendRnetEvent("cross", rc, p, "none", extra);
  struct rnetNotice n = { .magic = RNET_MAGIC, .type = RNET_NOTE_REBUILD_START, .path = (uint16_t)p,
                          .connId = rc->connId, .fromRank = rc->ctx->rank };
  mendRnetPost(rc, &n);
  rc->crossUntilMs = mendTimeMs() + waitBoundMs();
  return 1;
}

int mendRnetCrossStart(struct rnetComm* rc) {
  if (!crossAllowed() || atomic_load(&rc->stage) != RNET_STAGE_READY) return 0;
  if (rc->isSend) return senderStart(rc);
  if (rc->crossNone) return 0;
  if (rc->crossPath >= 0 && rc->paths[rc->crossPath].rbStage == RNET_RB_NONE) return 0;  /* it died too */
  INFO(MEND_RESIL, "NET/Resilient: conn %llx from rank %d: no path left; waiting up to %lld ms for a crossing path",
       (unsigned long long)rc->connId, rc->peerRank, (long long)waitBoundMs());
  rc->crossUntilMs = mendTimeMs() + waitBoundMs();
  return 1;
}

int mendRnetCrossCode(const struct rnetComm* rc, int p) {
  if (p != rc->crossPath || !rc->isSend) return 0;
  return (int)(CROSS_TAG | (uint32_t)rc->paths[p].localDev << 8 | (uint32_t)rc->paths[p].remoteDev);
}

ncclResult_t mendRnetCrossNotice(struct rnetComm* rc, const struct rnetNotice* n) {
  if (rc->isSend) return ncclSuccess;
  if (n->type == RNET_NOTE_REBUILD_FAIL) {
    rc->crossNone = 1;
    if (rc->crossUntilMs) rc->crossUntilMs = mendTimeMs();
    return ncclSuccess;
  }
  uint32_t code = (uint32_t)n->cause;
  int sdev = (int)(code >> 8 & 0xff), rdev = (int)(code & 0xff);
  const struct rnetHello* me = &rc->area->mine;
  const struct rnetHello* peer = &rc->area->peer;
  const char* why = NULL;
  if (n->type != RNET_NOTE_REBUILD || (code & 0xffff0000u) != CROSS_TAG) why = "not a crossing path";
  else if (!crossAllowed()) why = "NCCL_CROSS_NIC=0 here";
  else if (atomic_load(&rc->stage) != RNET_STAGE_READY) why = "the connection is not set up";
  else if (rc->crossPath >= 0 || rc->nPaths >= MEND_RNET_MAX_SLOTS) why = "no free slot";
  else if (!devValid(peer, sdev)) why = "no such sender device";
  else if (!devValid(me, rdev)) why = "no such device here";
  if (why) {
    WARN("NET/Resilient: conn %llx: request %u for path %u (cause 0x%x) from rank %d refused: %s",
         (unsigned long long)rc->connId, n->type, n->path, code, n->fromRank, why);
    if (n->type == RNET_NOTE_REBUILD) mendRnetNotify(rc, RNET_NOTE_REBUILD_FAIL, n->path, 0, NULL);
    return ncclSuccess;
  }
  int p = addSlot(rc, rdev, sdev);
  INFO(MEND_RESIL, "NET/Resilient: conn %llx from rank %d: crossing path %d from its device %d to our device %d",
       (unsigned long long)rc->connId, rc->peerRank, p, sdev, rdev);
  if (rc->crossUntilMs) rc->crossUntilMs = mendTimeMs() + waitBoundMs();
  return mendRnetRebuildNotice(rc, n);
}

void mendRnetCrossAbandoned(struct rnetComm* rc, int p) {
  if (p != rc->crossPath || !rc->crossUntilMs) return;
  rc->crossUntilMs = mendTimeMs();
  /* The receiver may not have heard of it yet (its slot not made): it must not wait on. */
  if (rc->isSend) mendRnetNotify(rc, RNET_NOTE_REBUILD_FAIL, p, 0, NULL);
}

ncclResult_t mendRnetCrossCheck(struct rnetComm* rc) {
  if (!rc->crossUntilMs || rc->error != ncclSuccess) return rc->error;
  if (rc->active >= 0) {
    rc->crossUntilMs = 0;
    return ncclSuccess;
  }
  if (mendTimeMs() < rc->crossUntilMs) return ncclSuccess;
  for (int p = 0; p < rc->nPaths; p++)
    if (rc->paths[p].rbStage != RNET_RB_NONE) return ncclSuccess;  /* its own deadline ends it */
  rc->crossUntilMs = 0;
  return mendRnetLost(rc, "no crossing path came up");
}
