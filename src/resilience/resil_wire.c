/*
 * The resilience service's wire checks (see resil_wire.h).
 */
#include "resilience/resil_wire.h"

#include <string.h>

#include "misc/debug.h"

/* A localization request or answer: one or two targets, answers -1 (not probed), 0 or 1. */
static int locFits(const struct resilLoc* l, int isResp) {
  if (l->n < 1 || l->n > 2) return 0;
  for (int i = 0; isResp && i < 2; i++)
    if (l->ok[i] < -1 || l->ok[i] > 1) return 0;
  return 1;
}

int mendResilMsgParse(const void* buf, size_t len, int rank, int from, struct resilMsg* out) {
  if (buf == NULL || len != sizeof(*out)) {
    WARN_SPARSE(1000, "NET/Resilient: rank %d: a %zu-byte out-of-band message from rank %d (expected %zu)", rank, len,
                from, sizeof(*out));
    return 0;
  }
  memmove(out, buf, sizeof(*out));  /* the caller may parse its receive buffer in place */
  if (out->magic != RESIL_MSG_MAGIC) {
    WARN_SPARSE(1000, "NET/Resilient: rank %d: out-of-band message from rank %d with a bad magic", rank, from);
    return 0;
  }
  int ok;
  switch (out->type) {
    case RESIL_MSG_NOTICE:
    case RESIL_MSG_ACK: ok = 1; break;  /* a notice's own fields: mendRnetNoticeParse on delivery */
    case RESIL_MSG_LOC_REQ:
    case RESIL_MSG_LOC_RESP: ok = locFits(&out->u.loc, out->type == RESIL_MSG_LOC_RESP); break;
    case RESIL_MSG_HEALTH:
      out->u.health.verdict[sizeof(out->u.health.verdict) - 1] = '\0';  /* printed with %s */
      ok = 1;  /* its state and bandwidth: mendHealthApply */
      break;
    default: ok = 1; break;  /* a type this file does not check: its handler does (oobApply WARNs unknown ones) */
  }
  if (!ok) WARN_SPARSE(1000, "NET/Resilient: rank %d: malformed out-of-band message %u from rank %d", rank, out->type,
                       from);
  return ok;
}

int mendRnetNoticeParse(const void* buf, size_t len, struct rnetNotice* out) {
  if (buf == NULL || len != sizeof(*out)) return 0;
  memmove(out, buf, sizeof(*out));
  if (out->magic != RNET_MAGIC || out->type < RNET_NOTE_KILL || out->type > RNET_NOTE_REBUILD_FAIL) return 0;
  out->remote = 1;
  return 1;
}

/* A message for a bridge (OPEN, ACCEPT, SETUP): from the end it names, about two other ranks. */
static const char* bridgeSide(const struct mendRelayMsg* m, int from, int self, int nDevs) {
  if (m->srcRank == self || m->dstRank == self) return "the bridge must be a third rank";
  if (from != (m->kind == MEND_RELAY_ACCEPT ? m->dstRank : m->srcRank)) return "not sent by that end";
  if (m->srcDev < 0 || m->srcDev >= nDevs || m->dstDev < 0 || m->dstDev >= nDevs) return "no such device here";
  if (m->kind != MEND_RELAY_OPEN && (m->maxBytes == 0 || m->maxBytes > MEND_RELAY_MAX_BYTES))
    return "message size out of range";
  return NULL;
}

/* A bridge's answer to our set-up (READY, REFUSED): about us, from a third rank. */
static const char* senderSide(const struct mendRelayMsg* m, int from, int self, int nDevs) {
  if (m->srcRank != self) return "not about us";
  if (from == m->srcRank || from == m->dstRank) return "the bridge must be a third rank";
  if (m->srcDev < 0 || m->srcDev >= nDevs || m->dstDev < 0 || m->dstDev >= MEND_RNET_MAX_PATHS)
    return "no such device here";
  return NULL;
}

int mendRelayMsgCheck(const struct mendRelayMsg* m, int from, int self, int nRanks, int nDevs, const char** why) {
  *why = NULL;
  if (m->magic != RNET_MAGIC) *why = "bad magic";
  else if (m->kind < MEND_RELAY_OPEN || m->kind > MEND_RELAY_REFUSED) *why = "unknown kind";
  else if (m->path >= MEND_RNET_MAX_SLOTS) *why = "path out of range";
  else if (m->srcRank < 0 || m->srcRank >= nRanks || m->dstRank < 0 || m->dstRank >= nRanks) *why = "rank out of range";
  else if (m->srcRank == m->dstRank) *why = "the bridge must be a third rank";
  else if (m->kind == MEND_RELAY_READY || m->kind == MEND_RELAY_REFUSED) *why = senderSide(m, from, self, nDevs);
  else *why = bridgeSide(m, from, self, nDevs);
  return *why == NULL;
}
