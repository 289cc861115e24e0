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
  if (rc->ctx->resil) return mendResilRelayPick(rc->ctx->resil, rc->peerRank, salt, a, b);
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
