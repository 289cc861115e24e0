/*
 * The last resort: a connection whose every path of the chain died.  Paths pair NICs of the same
 * index (rails), so two hosts that lost different rails (host A rail 0, host B rail 1) have no path
 * left.  The sender then tries, in one slot after the chain (the last-resort slot):
 *   1. a crossing path, where NCCL_CROSS_NIC allows crossing rails (1, or 2, the default): one of
 *      its working NICs to one of the receiver's of another index, which works where the rails meet
 *      at a spine.  With a resilience service the pair is probed first (one TCP connect): on a
 *      fabric whose rails never meet the probe fails at once, and no rebuild waits for its bound;
 *   2. a relay path (MEND_RELAY): through a bridge rank on a third host that has working NICs on
 *      both rails (rnet_relay.c, relay.h).
 * Either is built with the rebuild protocol (rnet_rebuild.c).  The receiver waits for it (bounded,
 * the bound renewed by each attempt), activates it once built and sends RESUME there; the sender
 * replays from that count, so the operation in flight finishes.  An attempt that fails moves on to
 * the next (at most LAST_TRIES since the last RESUME); when none is left the sender says so and
 * both ends fail.  The slot stays: a rail path rebuilt later comes first in the chain (fail-back
 * moves traffic there); a crossing path is rebuilt behind it as the last backup, a relay path is not
 * (it holds a bridge's buffers) and is made again when needed.
 *
 * Wire: a REBUILD for the slot carries the pair in its cause, CROSS_TAG | senderDev << 8 |
 * receiverDev (a bridge's carries MEND_RELAY_TAG); the sender's REBUILD_FAIL with cause CROSS_NONE
 * says it has nothing left to try.
 */
#include "resilience/rnet_priv.h"

#include <stdio.h>

#include "checks.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "resilience/detect.h"
#include "resilience/relay.h"
#include "resilience/resil.h"

#define CROSS_TAG 0x43520000u  /* "CR" in the top half of a REBUILD's cause */
#define CROSS_NONE 0x434e4f4e  /* "CNON": a REBUILD_FAIL's cause when the sender has nothing left */
#define CROSS_WAIT_MS 2000     /* beyond the rebuild's own bound: notices ride the bootstrap */
#define LAST_TRIES 4           /* attempts (probe, crossing, relays) since the last RESUME */

static int crossAllowed(void) { return mendParamCrossNic() != 0; }

/* ... and no one saw it die. */
static int devUsable(struct rnetComm* rc, int rank, int d, const struct rnetHello* h) {
  return mendRnetDevValid(h, d) && mendResilDevUsable(rc->ctx->resil, rank, d) != 0;
}

/* Sender: a pair of usable devices of different indices that no path of the chain pairs. */
static int pick(struct rnetComm* rc, int* mine, int* theirs) {
  const struct rnetHello* me = &rc->area->mine;
  const struct rnetHello* peer = &rc->area->peer;
  int chain = rc->crossPath >= 0 ? rc->crossPath : rc->nPaths;
  for (int a = 0; a < me->nDevs; a++) {
    if (!devUsable(rc, rc->ctx->rank, a, me)) continue;
    for (int b = 0; b < peer->nDevs; b++) {
      if (b == a || !devUsable(rc, rc->peerRank, b, peer)) continue;
      int paired = 0;
      for (int p = 0; p < chain; p++) paired |= rc->paths[p].localDev == a && rc->paths[p].remoteDev == b;
      if (paired) continue;
      *mine = a;
      *theirs = b;
      return 1;
    }
  }
  return 0;
}

int mendRnetCrossSlot(struct rnetComm* rc, int local, int remote) {
  int fresh = rc->crossPath < 0;
  int p = fresh ? rc->nPaths : rc->crossPath;
  struct rnetPath* path = rc->paths + p;
  path->localDev = local;
  path->remoteDev = remote;
  path->relayed = 0;
  path->relayRank = -1;
  path->deadSinceMs = mendTimeMs();
  path->deadCause = MEND_RNET_KILL_REBUILD;
  atomic_store(&path->state, RNET_PATH_DEAD);
  rc->crossPath = p;
  if (fresh) atomic_store(&rc->nPaths, p + 1);  /* published last: the service reads the slot once it counts */
  return p;
}

int64_t mendRnetCrossWaitMs(void) { return mendRnetRebuildTimeoutMs() + CROSS_WAIT_MS; }

/* Sender: build the crossing path between our `mine` and the peer's `theirs` (rebuild protocol). */
static void buildCross(struct rnetComm* rc, int mine, int theirs) {
  int p = mendRnetCrossSlot(rc, mine, theirs);
  WARN("NET/Resilient: rank %d -> rank %d: no rail left in common; crossing rails from device %d to the peer's "
       "device %d (path %d, NCCL_CROSS_NIC=%d)", rc->ctx->rank, rc->peerRank, mine, theirs, p,
       (int)mendParamCrossNic());
  char extra[32];
  snprintf(extra, sizeof(extra), "to_dev=%d", theirs);
  mendRnetEvent("cross", rc, p, "none", extra);
  atomic_store(&rc->paths[p].rbPosted, 1);
  struct rnetNotice n = { .magic = RNET_MAGIC, .type = RNET_NOTE_REBUILD_START, .path = (uint16_t)p,
                          .connId = rc->connId, .fromRank = rc->ctx->rank };
  mendRnetPost(rc, &n);
}

void mendRnetCrossGiveUp(struct rnetComm* rc) {
  INFO(MEND_RESIL, "NET/Resilient: conn %llx to rank %d: no crossing path and no relay can carry it",
       (unsigned long long)rc->connId, rc->peerRank);
  int p = rc->crossPath >= 0 ? rc->crossPath : rc->nPaths;
  mendRnetNotify(rc, RNET_NOTE_REBUILD_FAIL, p, CROSS_NONE, NULL);  /* the receiver stops waiting */
  rc->crossUntilMs = mendTimeMs();
}

/* Sender: the next attempt of this episode; 0 when none is left (the receiver is told). */
static int nextAttempt(struct rnetComm* rc) {
  rc->crossUntilMs = mendTimeMs() + mendRnetCrossWaitMs();
  if (rc->lastTries >= LAST_TRIES || rc->error != ncclSuccess) {
    mendRnetCrossGiveUp(rc);
    return 0;
  }
  rc->lastTries++;
  int mine = -1, theirs = -1;
  if (crossAllowed() && !rc->crossFailed && pick(rc, &mine, &theirs)) {
    if (rc->ctx->resil && mendResilCrossProbe(rc->ctx->resil, rc, mine, theirs)) {
      rc->crossProbing = 1;
      rc->crossMine = mine;
      rc->crossTheirs = theirs;
      return 1;
    }
    buildCross(rc, mine, theirs);
    return 1;
  }
  if (mendRnetRelayStart(rc)) return 1;
  mendRnetCrossGiveUp(rc);
  return 0;
}

/* An attempt of the slot is pending: probing, a rebuild asked for or under way. */
static int attemptPending(struct rnetComm* rc) {
  if (rc->crossProbing) return 1;
  if (rc->crossPath < 0) return 0;
  struct rnetPath* path = rc->paths + rc->crossPath;
  return path->rbStage != RNET_RB_NONE || atomic_load(&path->rbPosted);
}

int mendRnetCrossStart(struct rnetComm* rc) {
  if (atomic_load(&rc->stage) != RNET_STAGE_READY) return 0;
  if (rc->isSend) {
    if (attemptPending(rc)) {
      rc->crossUntilMs = mendTimeMs() + mendRnetCrossWaitMs();
      return 1;
    }
    return nextAttempt(rc);
  }
  if (rc->crossNone) return 0;
  INFO(MEND_RESIL, "NET/Resilient: conn %llx from rank %d: no path left; waiting up to %lld ms for a crossing or "
       "relay path", (unsigned long long)rc->connId, rc->peerRank, (long long)mendRnetCrossWaitMs());
  rc->crossUntilMs = mendTimeMs() + mendRnetCrossWaitMs();
  return 1;
}

void mendRnetCrossProbed(struct rnetComm* rc, int ok) {
  if (!rc->isSend || !rc->crossProbing) return;
  rc->crossProbing = 0;
  if (rc->active >= 0 || rc->error != ncclSuccess) return;  /* a rail came back meanwhile */
  if (ok) {
    buildCross(rc, rc->crossMine, rc->crossTheirs);
    return;
  }
  INFO(MEND_RESIL, "NET/Resilient: conn %llx: the crossing pair (device %d to the peer's %d) does not answer: the "
       "rails do not meet", (unsigned long long)rc->connId, rc->crossMine, rc->crossTheirs);
  rc->crossFailed = 1;
  nextAttempt(rc);
}

int mendRnetCrossCode(const struct rnetComm* rc, int p) {
  if (p != rc->crossPath || !rc->isSend) return 0;
  return (int)(CROSS_TAG | (uint32_t)rc->paths[p].localDev << 8 | (uint32_t)rc->paths[p].remoteDev);
}

/* Receiver: a notice for the slot.  Returns 1 when it is the sender's word that nothing is left. */
static int takeNone(struct rnetComm* rc, const struct rnetNotice* n) {
  if (n->type != RNET_NOTE_REBUILD_FAIL || n->cause != CROSS_NONE) return 0;
  rc->crossNone = 1;
  if (rc->crossUntilMs) rc->crossUntilMs = mendTimeMs();
  if (rc->crossPath >= 0 && rc->paths[rc->crossPath].rbStage != RNET_RB_NONE) mendRnetRebuildAbort(rc, rc->crossPath);
  return 1;
}

/* Receiver: make the slot ready for a new attempt (a live or half-built path there ends first). */
ncclResult_t mendRnetCrossReset(struct rnetComm* rc, int p) {
  if (p != rc->crossPath) return ncclSuccess;
  if (mendRnetPathLive(rc, p)) MENDCHECK(mendRnetFailPath(rc, p, MEND_RNET_KILL_PEER, "the sender replaces it"));
  if (rc->paths[p].rbStage != RNET_RB_NONE) mendRnetRebuildAbort(rc, p);
  return ncclSuccess;
}

ncclResult_t mendRnetCrossNotice(struct rnetComm* rc, const struct rnetNotice* n) {
  if (rc->isSend || takeNone(rc, n)) return ncclSuccess;
  if (n->type == RNET_NOTE_REBUILD_FAIL)  /* one attempt ended: wait for the next */
    return n->path < rc->nPaths ? mendRnetRebuildNotice(rc, n) : ncclSuccess;
  uint32_t code = (uint32_t)n->cause;
  if ((code & 0xffff0000u) == MEND_RELAY_TAG) return mendRnetRelayNotice(rc, n);
  int sdev = (int)(code >> 8 & 0xff), rdev = (int)(code & 0xff);
  const struct rnetHello* me = &rc->area->mine;
  const struct rnetHello* peer = &rc->area->peer;
  const char* why = NULL;
  if (n->type != RNET_NOTE_REBUILD || (code & 0xffff0000u) != CROSS_TAG) why = "not a crossing path";
  else if (!crossAllowed()) why = "NCCL_CROSS_NIC=0 here";
  else if (atomic_load(&rc->stage) != RNET_STAGE_READY) why = "the connection is not set up";
  else if (n->fromRank != rc->peerRank) why = "not sent by the peer";
  else if (n->path != (rc->crossPath >= 0 ? rc->crossPath : rc->nPaths) || n->path >= MEND_RNET_MAX_SLOTS)
    why = "not the last-resort slot";
  else if (!mendRnetDevValid(peer, sdev)) why = "no such sender device";
  else if (!mendRnetDevValid(me, rdev)) why = "no such device here";
  if (why) {
    WARN("NET/Resilient: conn %llx: request %u for path %u (cause 0x%x) from rank %d refused: %s",
         (unsigned long long)rc->connId, n->type, n->path, code, n->fromRank, why);
    if (n->type == RNET_NOTE_REBUILD) mendRnetNotify(rc, RNET_NOTE_REBUILD_FAIL, n->path, 0, NULL);
    return ncclSuccess;
  }
  MENDCHECK(mendRnetCrossReset(rc, n->path));
  int p = mendRnetCrossSlot(rc, rdev, sdev);
  INFO(MEND_RESIL, "NET/Resilient: conn %llx from rank %d: crossing path %d from its device %d to our device %d",
       (unsigned long long)rc->connId, rc->peerRank, p, sdev, rdev);
  if (rc->crossUntilMs) rc->crossUntilMs = mendTimeMs() + mendRnetCrossWaitMs();
  return mendRnetRebuildNotice(rc, n);
}

void mendRnetCrossAbandoned(struct rnetComm* rc, int p) {
  if (!rc->isSend || p != rc->crossPath || !rc->crossUntilMs || rc->active >= 0) return;
  /* In an episode (no path left): this attempt failed; the receiver keeps waiting for the next. */
  if (!rc->paths[p].relayed) rc->crossFailed = 1;
  nextAttempt(rc);
}

ncclResult_t mendRnetCrossCheck(struct rnetComm* rc) {
  if (!rc->crossUntilMs || rc->error != ncclSuccess) return rc->error;
  if (rc->active >= 0) {
    rc->crossUntilMs = 0;
    rc->lastTries = 0;
    rc->crossFailed = 0;
    return ncclSuccess;
  }
  if (mendTimeMs() < rc->crossUntilMs) return ncclSuccess;
  for (int p = 0; p < rc->nPaths; p++)
    if (rc->paths[p].rbStage != RNET_RB_NONE) return ncclSuccess;  /* its own deadline ends it */
  if (rc->crossProbing) return ncclSuccess;  /* bounded by the probe timeout */
  rc->crossUntilMs = 0;
  return mendRnetLost(rc, rc->isSend ? "no crossing or relay path came up" : "no crossing or relay path came in time");
}
