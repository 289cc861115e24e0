/*
 * Re-planning (planview.h): the view that follows an agreed health picture.  This file derives
 * what every schedule needs to know about the picture: each rank's capacity (the share of its line
 * rate its usable NICs still carry) and usable NICs, and this rank's NIC per channel (a channel on
 * a failed NIC moves to the nearest usable one, as hot repair's backup path does).
 */
#include "enqueue/planview.h"

#include "checks.h"
#include "resilience/health.h"

/* A NIC named by the picture, or NULL when it is up at its line rate. */
static const struct mendViewNic* pictured(const struct mendViewHealth* h, int rank, int dev) {
  for (int i = 0; i < h->nNics; i++) {
    if (h->nics[i].rank == rank && h->nics[i].dev == dev) return h->nics + i;
  }
  return NULL;
}

/* Capacity (permille) and usable NICs of every rank. */
static void rankHealth(struct mendPlanView* v, const struct mendViewHealth* h) {
  for (int r = 0; r < v->nRanks; r++) {
    double line = 0, usable = 0;
    uint32_t mask = 0;
    for (int d = 0; d < h->maxDevs && d < 32; d++) {
      float rate = h->lineGbps[(size_t)r * (size_t)h->maxDevs + (size_t)d];
      if (rate <= 0) continue;
      const struct mendViewNic* n = pictured(h, r, d);
      line += rate;
      if (n == NULL) {
        usable += rate;
        mask |= 1u << d;
      } else if (n->state == MEND_NIC_UP || n->state == MEND_NIC_DEGRADED) {
        usable += n->gbps < rate ? n->gbps : rate;
        mask |= 1u << d;
      }
    }
    v->rankCap[r] = line > 0 ? (int)(1000.0 * usable / line + 0.5) : 1000;
    v->rankNics[r] = line > 0 ? mask : ~0u;
  }
}

ncclResult_t mendReplanDerive(const struct mendPlanView* base, const struct mendViewHealth* h, uint32_t epoch,
                              uint64_t fromOp, struct mendPlanView** out) {
  MENDARGCHECK(h != NULL && h->nRanks == base->nRanks && h->maxDevs >= 0 && h->nNics >= 0 &&
                   h->nNics <= MEND_VIEW_MAX_HEALTH && (h->maxDevs == 0 || h->lineGbps != NULL),
               ncclInvalidArgument, "re-plan: health picture of %d ranks, %d devices, %d NICs does not fit a view of %d ranks",
               h ? h->nRanks : -1, h ? h->maxDevs : -1, h ? h->nNics : -1, base->nRanks);
  struct mendPlanView* v;
  MENDCHECK(mendPlanViewCopy(base, epoch, fromOp, &v));
  rankHealth(v, h);
  uint32_t mine = v->rankNics[v->rank];
  for (int c = 0; c < v->nChannels; c++) {
    int d = v->ch[c].netDev;
    if (d < 0 || d >= 32 || ((mine >> d) & 1)) continue;
    for (int i = 0; i < v->nNics; i++) {
      int b = v->nicOrder[i];
      if (b >= 0 && b < 32 && ((mine >> b) & 1)) {
        v->ch[c].netDev = b;
        break;
      }
    }
  }
  ncclResult_t res = mendPlanViewSeal(v);
  if (res != ncclSuccess) {
    mendPlanViewFree(v);
    return res;
  }
  *out = v;
  return ncclSuccess;
}
