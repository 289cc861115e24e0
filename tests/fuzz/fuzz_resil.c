/*
 * Fuzz target: the out-of-band messages a rank's resilience service receives from other ranks
 * (resil.c oobMain: notices with their ACKs, localization requests and answers, health updates, relay
 * requests to a bridge) and the connection notices they carry (rnet_notice.c mendRnetDeliver).  What
 * the service does with a message that passed is played here: its strings printed as the service's
 * log lines print them, a health update applied to a registry, a relay request's fields in range.
 *
 * Input: a flags byte, then messages (sizeof(struct resilMsg) bytes each) until the input ends.
 * Flag 1 gives every message the right magic (the checks behind it get fuzzed).
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "resilience/resil_wire.h"

#define FUZZ_RANKS 4
#define FUZZ_DEVS 2

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {.p = data, .left = size};
  uint8_t flags = fuzzByte(&in);
  struct mendHealth health;
  memset(&health, 0, sizeof(health));
  if (mendHealthInit(&health, FUZZ_RANKS, FUZZ_DEVS, NULL) != ncclSuccess) abort();
  for (;;) {
    const uint8_t* raw = fuzzTake(&in, sizeof(struct resilMsg));
    if (raw == NULL) break;
    struct resilMsg m;
    memcpy(&m, raw, sizeof(m));
    if (flags & 1) m.magic = RESIL_MSG_MAGIC;
    if (!mendResilMsgParse(&m, sizeof(m), 0, 1, &m)) continue;
    char line[256];
    switch (m.type) {
      case RESIL_MSG_NOTICE: {
        struct rnetNotice n;
        if (mendRnetNoticeParse(&m.u.notice, sizeof(m.u.notice), &n) && (n.type < 1 || !n.remote)) abort();
        break;
      }
      case RESIL_MSG_LOC_REQ:
      case RESIL_MSG_LOC_RESP:
        if (m.u.loc.n < 1 || m.u.loc.n > 2) abort();
        break;
      case RESIL_MSG_HEALTH:
        /* What oobApply logs for an update it applied. */
        if (mendHealthApply(&health, &m.u.health))
          snprintf(line, sizeof(line), "health epoch %u: rank %d device %d is %s (%s, decided by rank %d)",
                   m.u.health.epoch, m.u.health.rank, m.u.health.dev, mendNicStateName(m.u.health.state),
                   m.u.health.verdict, m.u.health.reporter);
        break;
      case RESIL_MSG_RELAY: {
        /* Rank 0 takes it from rank 1: as a bridge (OPEN, ACCEPT, SETUP: two other ranks, the
         * sender the end the kind names, devices its own) or as a sender setting up (READY, REFUSED:
         * about rank 0, from a third rank); every field either side uses in range. */
        const char* why = NULL;
        const struct mendRelayMsg* r = &m.u.relay;
        if (!mendRelayMsgCheck(r, 1, 0, FUZZ_RANKS, FUZZ_DEVS, &why)) {
          if (why == NULL) abort();
          break;
        }
        int answer = r->kind == MEND_RELAY_READY || r->kind == MEND_RELAY_REFUSED;
        int ranksOk = answer ? r->srcRank == 0 && r->dstRank > 1 && r->dstRank < FUZZ_RANKS
                             : r->srcRank >= 1 && r->srcRank < FUZZ_RANKS && r->dstRank >= 1 &&
                                   r->dstRank < FUZZ_RANKS && r->srcRank != r->dstRank &&
                                   (r->kind == MEND_RELAY_ACCEPT ? r->dstRank : r->srcRank) == 1;
        int devsOk = r->srcDev >= 0 && r->srcDev < FUZZ_DEVS && r->dstDev >= 0 &&
                     r->dstDev < (answer ? MEND_RNET_MAX_PATHS : FUZZ_DEVS);
        int sizeOk = answer || r->kind == MEND_RELAY_OPEN || (r->maxBytes > 0 && r->maxBytes <= MEND_RELAY_MAX_BYTES);
        if (r->kind < MEND_RELAY_OPEN || r->kind > MEND_RELAY_REFUSED || !ranksOk || !devsOk || !sizeOk ||
            r->path >= MEND_RNET_MAX_SLOTS)
          abort();
        break;
      }
      default: break;
    }
  }
  mendHealthFree(&health);
  return 0;
}

void fuzzSeeds(struct fuzzSeeds* s) {
  struct fuzzBuf b = {.len = 0};
  fuzzPutByte(&b, 0);
  struct resilMsg m;
  memset(&m, 0, sizeof(m));
  m.magic = RESIL_MSG_MAGIC;
  m.type = RESIL_MSG_NOTICE;
  m.seq = 1;
  m.u.notice = (struct rnetNotice){.magic = RNET_MAGIC, .type = RNET_NOTE_KILL, .path = 1, .connId = 42,
                                   .fromRank = 1, .remote = 1};
  fuzzPut(&b, &m, sizeof(m));
  memset(&m.u, 0, sizeof(m.u));
  m.type = RESIL_MSG_ACK;
  m.u.notice.connId = 1;
  fuzzPut(&b, &m, sizeof(m));
  memset(&m.u, 0, sizeof(m.u));
  m.type = RESIL_MSG_LOC_REQ;
  m.u.loc = (struct resilLoc){.id = 3, .n = 2, .rank = {2, 3}, .dev = {0, 1}, .ok = {-1, -1}};
  fuzzPut(&b, &m, sizeof(m));
  m.type = RESIL_MSG_LOC_RESP;
  m.u.loc.ok[0] = 1;
  m.u.loc.ok[1] = 0;
  fuzzPut(&b, &m, sizeof(m));
  memset(&m.u, 0, sizeof(m.u));
  m.type = RESIL_MSG_HEALTH;
  m.u.health = (struct mendHealthUpdate){.rank = 1, .dev = 1, .state = MEND_NIC_DOWN, .epoch = 4, .reporter = 1};
  strcpy(m.u.health.verdict, "local NIC down");
  fuzzPut(&b, &m, sizeof(m));
  memset(&m.u, 0, sizeof(m.u));
  m.type = RESIL_MSG_RELAY;  /* rank 1 asks the bridge (0) to relay its path 2 to rank 3 */
  m.u.relay = (struct mendRelayMsg){.magic = RNET_MAGIC, .kind = MEND_RELAY_OPEN, .path = 2, .srcRank = 1,
                                    .dstRank = 3, .srcConn = 7, .dstConn = 9, .srcDev = 0, .dstDev = 1};
  fuzzPut(&b, &m, sizeof(m));
  m.u.relay = (struct mendRelayMsg){.magic = RNET_MAGIC, .kind = MEND_RELAY_READY, .path = 0, .srcRank = 0,
                                    .dstRank = 2, .srcConn = 5, .srcDev = 1, .dstDev = 0};  /* bridge 1 answers us */
  fuzzPut(&b, &m, sizeof(m));
  fuzzSeedWrite(s, b.data, b.len);
}

FUZZ_SEEDS
