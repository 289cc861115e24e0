/*
 * A relay path, the two ends' side (the bridge's is relay.c).  When a connection has no path left and
 * no crossing path works (rails that never meet), the sender picks a bridge: a rank on a third host
 * with working NICs on one of our rails (a) and one of the receiver's (b), chosen from the health
 * registry, spread over the candidates by connection.  The last-resort slot becomes a relay path
 * (a at our end, b at the receiver's) and is built with the rebuild protocol (rnet_rebuild.c), except
 * that the two messages carrying listen handles go through the bridge, which listens on both rails
 * and hands each end its own handle instead of the other end's:
 *   sender:   listen for ctrl -> OPEN(handle) to the bridge        (instead of REBUILD to the receiver)
 *   bridge:   REBUILD(its rail-b listen) -> receiver, REBUILD_ACK(its rail-a listen) -> sender
 *   receiver: listen for data -> ACCEPT(handle) to the bridge      (instead of REBUILD_ACK to the sender)
 * Everything else (REBUILT, KILL, REBUILD_FAIL, RESUME, acknowledgements) is as on any path: the
 * notices go between the two ends, the control messages through the bridge's forwarding.
 */
#include "resilience/rnet_priv.h"

#include <stdio.h>
#include <string.h>

#include "checks.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "resilience/detect.h"
#include "resilience/relay.h"
#include "resilience/resil.h"

#define RELAY_DEFAULT_BYTES (1u << 20)  /* a receiver that posted nothing yet: its bridge buffers this much */

static _Atomic(struct mendRelay*) testRelay;  /* a bridge in this process (tests without a service) */
static _Atomic int testRelayRank = -1;

void mendRnetSetTestRelay(struct mendRelay* rl, int rank) {
  atomic_store(&testRelayRank, rank);
  atomic_store(&testRelay, rl);
}

ncclResult_t mendRnetSetRankForTest(void* ctx, int rank) {
  MENDARGCHECK(ctx != NULL, ncclInvalidArgument, "NET/Resilient: set rank: NULL context");
  ((struct rnetCtx*)ctx)->rank = rank;
  return ncclSuccess;
}

static int relayAllowed(void) { return mendParamRelay() != 0; }

/* The bridge and the two rails: from the service's registry, or the test bridge (our first device,
 * the peer's second: rails that differ). */
static int pickBridge(struct rnetComm* rc, int* a, int* b) {
  uint64_t salt = rc->connId + (uint64_t)rc->lastTries;  /* connections spread over the bridges; retries move on */
  if (rc->ctx->resil) return mendResilRelayPick(rc->ctx->resil, rc->peerRank, salt, -1, a, b);
  if (!atomic_load(&testRelay) || rc->area->peer.nDevs < 1 || rc->area->mine.nDevs < 1) return -1;
  *a = 0;
  *b = rc->area->peer.nDevs > 1 ? 1 : 0;
  return atomic_load(&testRelayRank);
}

static void toBridge(struct rnetComm* rc, int bridge, const struct mendRelayMsg* m) {
  if (rc->ctx->resil) {
    mendResilSendRelay(rc->ctx->resil, bridge, m);
    return;
  }
  struct mendRelay* t = atomic_load(&testRelay);
  if (t && bridge == atomic_load(&testRelayRank)) {
    mendRelayPost(t, rc->ctx->rank, m);
    return;
  }
  INFO(MEND_RESIL, "NET/Resilient: conn %llx: no way to reach bridge rank %d", (unsigned long long)rc->connId, bridge);
}

int mendRnetRelayStart(struct rnetComm* rc) {
  if (!relayAllowed() || !rc->isSend || atomic_load(&rc->stage) != RNET_STAGE_READY) return 0;
  int a = -1, b = -1;
  int bridge = pickBridge(rc, &a, &b);
  if (bridge < 0) {
    INFO(MEND_RESIL, "NET/Resilient: conn %llx to rank %d: no rank on a third host has working NICs on both rails",
         (unsigned long long)rc->connId, rc->peerRank);
    return 0;
  }
  int p = mendRnetCrossSlot(rc, a, b);
  struct rnetPath* path = rc->paths + p;
  path->relayed = 1;
  path->relayRank = bridge;
  WARN("NET/Resilient: rank %d -> rank %d: no path left and no crossing; relaying through rank %d (rail %d to it, "
       "rail %d from it to the peer; path %d)", rc->ctx->rank, rc->peerRank, bridge, a, b, p);
  char extra[48];
  snprintf(extra, sizeof(extra), "bridge=%d to_dev=%d", bridge, b);
  mendRnetEvent("relay", rc, p, "none", extra);
  atomic_store(&path->rbPosted, 1);
  struct rnetNotice n = { .magic = RNET_MAGIC, .type = RNET_NOTE_REBUILD_START, .path = (uint16_t)p,
                          .connId = rc->connId, .fromRank = rc->ctx->rank };
  mendRnetPost(rc, &n);
  return 1;
}

void mendRnetRelayOpen(struct rnetComm* rc, int p, const void* handle) {
  const struct rnetPath* path = rc->paths + p;
  struct mendRelayMsg m = { .magic = RNET_MAGIC, .kind = MEND_RELAY_OPEN, .path = (uint16_t)p,
                            .srcRank = rc->ctx->rank, .dstRank = rc->peerRank, .srcConn = rc->connId,
                            .dstConn = rc->peerConnId, .srcDev = path->localDev, .dstDev = path->remoteDev };
  if (handle) memcpy(m.handle, handle, sizeof(m.handle));
  toBridge(rc, path->relayRank, &m);
}

void mendRnetRelayAccept(struct rnetComm* rc, int p, const void* handle) {
  const struct rnetPath* path = rc->paths + p;
  uint32_t most = rc->maxRecvBytes ? rc->maxRecvBytes : RELAY_DEFAULT_BYTES;
  if (most > MEND_RELAY_MAX_BYTES)
    WARN_ONCE("NET/Resilient: receives of %u bytes are posted, a bridge buffers at most %u per message: a relay "
              "path fails on a larger one (NCCL_BUFFSIZE above 64 MiB)", most, MEND_RELAY_MAX_BYTES);
  struct mendRelayMsg m = { .magic = RNET_MAGIC, .kind = MEND_RELAY_ACCEPT, .path = (uint16_t)p,
                            .srcRank = rc->peerRank, .dstRank = rc->ctx->rank, .srcConn = rc->peerConnId,
                            .dstConn = rc->connId, .srcDev = path->remoteDev, .dstDev = path->localDev,
                            .maxBytes = most > MEND_RELAY_MAX_BYTES ? MEND_RELAY_MAX_BYTES : most };
  if (handle) memcpy(m.handle, handle, sizeof(m.handle));
  toBridge(rc, path->relayRank, &m);
}

/* Receiver: is `bridge` a rank that may carry our connection? */
static int bridgeValid(struct rnetComm* rc, int bridge) {
  if (bridge < 0 || bridge == rc->ctx->rank || bridge == rc->peerRank) return 0;
  return !rc->ctx->resil || bridge < mendResilRanks(rc->ctx->resil);
}

ncclResult_t mendRnetRelayNotice(struct rnetComm* rc, const struct rnetNotice* n) {
  uint32_t code = (uint32_t)n->cause;
  int sdev = (int)(code >> 8 & 0xff), rdev = (int)(code & 0xff), bridge = n->fromRank;
  int slot = rc->crossPath >= 0 ? rc->crossPath : rc->nPaths;
  const char* why = NULL;
  if (n->type != RNET_NOTE_REBUILD) why = "not a relay request";
  else if (!relayAllowed()) why = "MEND_RELAY=0 here";
  else if (atomic_load(&rc->stage) != RNET_STAGE_READY) why = "the connection is not set up";
  else if (!bridgeValid(rc, bridge)) why = "the bridge must be a third rank";
  else if (n->path != slot || n->path >= MEND_RNET_MAX_SLOTS) why = "not the last-resort slot";
  else if (!mendRnetDevValid(&rc->area->peer, sdev)) why = "no such sender device";
  else if (!mendRnetDevValid(&rc->area->mine, rdev)) why = "no such device here";
  if (why) {
    WARN("NET/Resilient: conn %llx: relay path %u (cause 0x%x) offered by rank %d refused: %s",
         (unsigned long long)rc->connId, n->path, code, bridge, why);
    mendRnetNotify(rc, RNET_NOTE_REBUILD_FAIL, n->path, 0, NULL);  /* to the sender, which tries another way */
    return ncclSuccess;
  }
  MENDCHECK(mendRnetCrossReset(rc, n->path));
  int p = mendRnetCrossSlot(rc, rdev, sdev);
  rc->paths[p].relayed = 1;
  rc->paths[p].relayRank = bridge;
  INFO(MEND_RESIL, "NET/Resilient: conn %llx from rank %d: relay path %d through rank %d (its device %d, ours %d)",
       (unsigned long long)rc->connId, rc->peerRank, p, bridge, sdev, rdev);
  if (rc->crossUntilMs) rc->crossUntilMs = mendTimeMs() + mendRnetCrossWaitMs();
  return mendRnetRebuildNotice(rc, n);
}

/* ---------------------------------------------------------------- set-up via a bridge or a crossing */

ncclResult_t mendRnetSetDownForTest(void* ctx, uint32_t mask) {
  MENDARGCHECK(ctx != NULL, ncclInvalidArgument, "NET/Resilient: set down: NULL context");
  ((struct rnetCtx*)ctx)->testDown = mask;
  return ncclSuccess;
}

/* Can our device d carry a new path (the service's link state and registry; tests: their mask)? */
static int localUsable(struct rnetComm* rc, int d) {
  if (rc->ctx->resil) return mendResilDevUsable(rc->ctx->resil, rc->ctx->rank, d) != 0;
  return !((rc->ctx->testDown >> d) & 1);
}

/* A bridge to rank peer's device b, and our device *a to it; -1 when none. */
static int pickBridgeTo(struct rnetComm* rc, int peer, int b, int* a) {
  int bb = b;
  if (rc->ctx->resil) return mendResilRelayPick(rc->ctx->resil, peer, rc->connId, b, a, &bb);
  if (!atomic_load(&testRelay)) return -1;
  for (int d = 0; d < rc->area->mine.nDevs; d++) {
    if (!localUsable(rc, d) || !((rc->area->mine.validMask >> d) & 1)) continue;
    *a = d;
    return atomic_load(&testRelayRank);
  }
  return -1;
}

/* The largest message a set-up's bridge buffers: a FIFO slot (NCCL_BUFFSIZE over 8 slots). */
static uint32_t setupSlotBytes(void) {
  int64_t b = mendParamBuffsize() / 8;
  return b < 1 ? RELAY_DEFAULT_BYTES : b > MEND_RELAY_MAX_BYTES ? MEND_RELAY_MAX_BYTES : (uint32_t)b;
}

int mendRnetViaStart(struct rnetComm* rc, const struct rnetHandle* h) {
  int b = h->dev, a = -1;
  if (localUsable(rc, b) || h->rank < 0 || h->rank == rc->ctx->rank) return 0;
  int bridge = relayAllowed() && mendParamCrossNic() != 1 ? pickBridgeTo(rc, h->rank, b, &a) : -1;
  if (bridge >= 0) {
    rc->via.how = bridge;
    atomic_store(&rc->via.ready, 0);
    rc->via.deadlineMs = mendTimeMs() + mendRnetRebuildTimeoutMs();
    struct mendRelayMsg m = { .magic = RNET_MAGIC, .kind = MEND_RELAY_SETUP, .path = 0, .srcRank = rc->ctx->rank,
                              .dstRank = h->rank, .srcConn = rc->connId, .srcDev = a, .dstDev = b,
                              .maxBytes = setupSlotBytes() };
    memcpy(m.handle, rc->area->mine.handles[a], sizeof(m.handle));
    memcpy(m.handle2, h->base, RNET_BASE_HANDLE_BYTES);
    WARN("NET/Resilient: rank %d -> rank %d: our NIC %d is down and we share no working rail; setting up through "
         "rank %d (rail %d to it, rail %d from it)", rc->ctx->rank, h->rank, b, bridge, a, b);
    char extra[48];
    snprintf(extra, sizeof(extra), "bridge=%d to_dev=%d", bridge, b);
    mendResilEvent("relay", rc->ctx->rank, h->rank, a, -1, "setup", extra);
    toBridge(rc, bridge, &m);
  } else {
    for (int d = 0; d < rc->area->mine.nDevs && a < 0 && mendParamCrossNic() != 0; d++)
      if (d != b && localUsable(rc, d) && ((rc->area->mine.validMask >> d) & 1)) a = d;
    if (a < 0) return 0;  /* no way around: the primary's rail, as it is */
    rc->via.how = RNET_VIA_CROSS;
    rc->via.deadlineMs = mendTimeMs() + mendRnetRebuildTimeoutMs();
    INFO(MEND_RESIL, "NET/Resilient: rank %d -> rank %d: our NIC %d is down; setting up from NIC %d, crossing rails",
         rc->ctx->rank, h->rank, b, a);
  }
  rc->area->mine.primary = a;
  rc->area->mine.via = rc->via.how;
  return 1;
}

ncclResult_t mendRnetViaWait(struct rnetComm* rc, int* ready) {
  *ready = 1;
  if (rc->via.how == RNET_VIA_CROSS && mendTimeMs() > rc->via.deadlineMs) {
    /* Where the rails never meet, nothing connects: fail in the rebuild's bound, not the set-up's. */
    WARN("NET/Resilient: rank %d: the crossing set-up did not connect in %lld ms: no bridge and no route between "
         "the rails", rc->ctx->rank, (long long)mendRnetRebuildTimeoutMs());
    return ncclSystemError;
  }
  if (rc->via.how < 0) return ncclSuccess;
  int r = atomic_load(&rc->via.ready);
  if (r == 2) return ncclSuccess;  /* taken already */
  if (r < 0) {
    WARN("NET/Resilient: rank %d: bridge rank %d refused to relay our set-up", rc->ctx->rank, rc->via.how);
    return ncclSystemError;
  }
  if (r == 0) {
    *ready = 0;
    if (mendTimeMs() <= rc->via.deadlineMs) return ncclSuccess;
    WARN("NET/Resilient: rank %d: bridge rank %d did not answer our set-up in %lld ms", rc->ctx->rank, rc->via.how,
         (long long)mendRnetRebuildTimeoutMs());
    return ncclSystemError;
  }
  memcpy(rc->paths[0].handle, rc->via.dataHandle, MEND_NET_HANDLE_MAXSIZE);
  memcpy(rc->area->mine.viaHandle, rc->via.ctrlHandle, MEND_NET_HANDLE_MAXSIZE);
  atomic_store(&rc->via.ready, 2);
  return ncclSuccess;
}

struct viaAnswer {
  int from;
  const struct mendRelayMsg* m;
};

static void takeAnswer(struct rnetComm* rc, const void* arg) {
  const struct viaAnswer* a = arg;
  if (!rc->isSend || atomic_load(&rc->stage) == RNET_STAGE_READY || rc->via.how != a->from ||
      atomic_load(&rc->via.ready) != 0) {
    INFO(MEND_RESIL, "NET/Resilient: conn %llx: an answer from rank %d to a set-up it is not bridging: ignored",
         (unsigned long long)rc->connId, a->from);
    return;
  }
  if (a->m->kind == MEND_RELAY_READY) {
    memcpy(rc->via.dataHandle, a->m->handle, MEND_NET_HANDLE_MAXSIZE);
    memcpy(rc->via.ctrlHandle, a->m->handle2, MEND_NET_HANDLE_MAXSIZE);
  }
  atomic_store(&rc->via.ready, a->m->kind == MEND_RELAY_READY ? 1 : -1);
}

int mendRnetViaReady(struct rnetCtx* ctx, int from, const struct mendRelayMsg* m) {
  struct viaAnswer a = { .from = from, .m = m };
  return mendRnetWithConn(ctx, m->srcConn, takeAnswer, &a);
}

ncclResult_t mendRnetViaCheck(struct rnetComm* rc, int via) {
  const char* why = NULL;
  if (via == RNET_VIA_RAILS) return ncclSuccess;
  if (via == RNET_VIA_CROSS) why = mendParamCrossNic() == 0 ? "NCCL_CROSS_NIC=0 here" : NULL;
  else if (via >= 0) why = !relayAllowed() ? "MEND_RELAY=0 here" : !bridgeValid(rc, via) ? "not a bridge rank" : NULL;
  else why = "unknown way";
  if (!why) {
    INFO(MEND_RESIL, "NET/Resilient: conn %llx from rank %d set up %s%d", (unsigned long long)rc->connId, rc->peerRank,
         via >= 0 ? "through rank " : "crossing rails from its NIC ", via >= 0 ? via : rc->area->peer.primary);
    return ncclSuccess;
  }
  WARN("NET/Resilient: conn %llx: the hello of rank %d (via %d) refused: %s", (unsigned long long)rc->connId,
       rc->peerRank, via, why);
  return ncclRemoteError;
}
