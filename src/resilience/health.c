/*
 * The health registry (see health.h).
 */
#include "resilience/health.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "checks.h"
#include "misc/utils.h"
#include "resilience/detect.h"

const char* mendNicStateName(int state) {
  switch (state) {
    case MEND_NIC_UP: return "up";
    case MEND_NIC_DOWN: return "down";
    case MEND_NIC_DEGRADED: return "degraded";
    case MEND_NIC_PROBING: return "probing";
    default: return "unknown";
  }
}

ncclResult_t mendHealthInit(struct mendHealth* h, int nRanks, int maxDevs, const int* lineMbps) {
  MENDARGCHECK(h && nRanks > 0 && maxDevs > 0, ncclInvalidArgument, "health: bad registry shape %d x %d", nRanks, maxDevs);
  MENDCHECK(MENDCALLOC(h->nics, (size_t)nRanks * (size_t)maxDevs));
  pthread_mutex_init(&h->lock, NULL);
  h->nRanks = nRanks;
  h->maxDevs = maxDevs;
  h->epoch = 0;
  for (int i = 0; i < nRanks * maxDevs; i++) {
    h->nics[i].state = MEND_NIC_UP;
    h->nics[i].lineGbps = lineMbps ? (float)lineMbps[i] / 1000.0f : 0.0f;
    h->nics[i].gbps = h->nics[i].lineGbps;
    h->nics[i].reporter = -1;
  }
  return ncclSuccess;
}

void mendHealthFree(struct mendHealth* h) {
  if (!h || !h->nics) return;
  pthread_mutex_destroy(&h->lock);
  free(h->nics);
  h->nics = NULL;
}

/* An update names a NIC of the registry, a known state and a bandwidth (updates come from other
 * ranks: nothing in one is believed before this). */
static int updateFits(const struct mendHealth* h, const struct mendHealthUpdate* u) {
  return u->rank >= 0 && u->rank < h->nRanks && u->dev >= 0 && u->dev < h->maxDevs && u->state >= MEND_NIC_UP &&
         u->state <= MEND_NIC_PROBING && isfinite(u->gbps) && u->gbps >= 0.0f;
}

static int applyLocked(struct mendHealth* h, const struct mendHealthUpdate* u) {
  if (!updateFits(h, u)) {
    WARN_SPARSE(1000, "health: ignored a malformed update (rank %d of %d, device %d of %d, state %d, %g Gbit/s)",
                u->rank, h->nRanks, u->dev, h->maxDevs, u->state, (double)u->gbps);
    return 0;
  }
  struct mendHealthNic* nic = h->nics + (size_t)u->rank * (size_t)h->maxDevs + (size_t)u->dev;
  /* Newer wins; equal epochs from two deciders: the higher reporter rank wins, so all views agree. */
  if (u->epoch < nic->epoch) return 0;
  if (u->epoch == nic->epoch && nic->epoch != 0 && u->reporter <= nic->reporter) return 0;
  nic->state = u->state;
  nic->gbps = u->state == MEND_NIC_DOWN ? 0.0f : (u->gbps > 0 ? u->gbps : nic->lineGbps);
  nic->epoch = u->epoch;
  nic->reporter = u->reporter;
  if (u->epoch > h->epoch) h->epoch = u->epoch;
  return 1;
}

void mendHealthDecide(struct mendHealth* h, struct mendHealthUpdate* u) {
  pthread_mutex_lock(&h->lock);
  u->epoch = h->epoch + 1;
  applyLocked(h, u);
  pthread_mutex_unlock(&h->lock);
}

int mendHealthApply(struct mendHealth* h, const struct mendHealthUpdate* u) {
  pthread_mutex_lock(&h->lock);
  int changed = applyLocked(h, u);
  pthread_mutex_unlock(&h->lock);
  return changed;
}

int mendHealthState(struct mendHealth* h, int rank, int dev) {
  if (!h->nics || rank < 0 || rank >= h->nRanks || dev < 0 || dev >= h->maxDevs) return MEND_NIC_UP;
  pthread_mutex_lock(&h->lock);
  int s = h->nics[rank * h->maxDevs + dev].state;
  pthread_mutex_unlock(&h->lock);
  return s;
}

uint32_t mendHealthEpoch(struct mendHealth* h) {
  pthread_mutex_lock(&h->lock);
  uint32_t e = h->epoch;
  pthread_mutex_unlock(&h->lock);
  return e;
}
