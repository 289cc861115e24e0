/*
 * Re-planning (planview.h): the view that follows an agreed health picture.
 *
 *   capacities  each rank's usable share of its line rate and its usable NICs (rankHealth);
 *   re-ranking  rings whose neighbours share no usable rail are re-ranked (replan_rerank.c);
 *   NICs        this rank's channels on a failed NIC move along the channel's failover chain
 *               (mendGraphNicChain: equally near NICs rotate by channel), which is what the
 *               connections made before the failure do through their resilient-net chains;
 *   Balance     channel weights chosen so that no NIC carries more than its bandwidth's share
 *               (balanceWeights).
 *
 * Every shared output (rings, weights) is a function of the picture and the base view's rings
 * only: hops are modelled with the canonical chain (every NIC equally near, device order), since a
 * rank's PCIe/NUMA order is its own.  Where a host's NICs are equally near (rail-optimised hosts,
 * the testbed's veths) the model is what the connections do; elsewhere the weights are still the
 * same on every rank (results stay exact) and balance only approximately.
 */
#include "enqueue/planview.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "checks.h"
#include "graph/graph.h"
#include "misc/param.h"
#include "resilience/health.h"

#define BALANCE_ROUNDS 48    /* fixed-point rounds of balanceWeights */
#define BALANCE_SCALE 1000   /* the heaviest channel's weight before reduction by the gcd */

/* A NIC named by the picture, or NULL when it is up at its line rate. */
static const struct mendViewNic* pictured(const struct mendViewHealth* h, int rank, int dev) {
  for (int i = 0; i < h->nNics; i++) {
    if (h->nics[i].rank == rank && h->nics[i].dev == dev) return h->nics + i;
  }
  return NULL;
}

static float lineRate(const struct mendViewHealth* h, int rank, int dev) {
  if (dev < 0 || dev >= h->maxDevs) return 0;
  return h->lineGbps[(size_t)rank * (size_t)h->maxDevs + (size_t)dev];
}

/* NICs of a rank: devices 0..n-1 (1 + its highest device with a line rate). */
static int nicsOf(const struct mendViewHealth* h, int rank) {
  int n = 0;
  for (int d = 0; d < h->maxDevs && d < 32; d++)
    if (lineRate(h, rank, d) > 0) n = d + 1;
  return n;
}

/* Usable bandwidth of a NIC (0: down or absent). */
static double nicGbps(const struct mendViewHealth* h, int rank, int dev) {
  float rate = lineRate(h, rank, dev);
  if (rate <= 0) return 0;
  const struct mendViewNic* n = pictured(h, rank, dev);
  if (n == NULL) return rate;
  if (n->state != MEND_NIC_UP && n->state != MEND_NIC_DEGRADED) return 0;
  return n->gbps > 0 && n->gbps < rate ? n->gbps : rate;
}

/* Capacity (permille) and usable NICs of every rank. */
static void rankHealth(struct mendPlanView* v, const struct mendViewHealth* h) {
  for (int r = 0; r < v->nRanks; r++) {
    double line = 0, usable = 0;
    uint32_t mask = 0;
    for (int d = 0; d < h->maxDevs && d < 32; d++) {
      float rate = lineRate(h, r, d);
      if (rate <= 0) continue;
      line += rate;
      double g = nicGbps(h, r, d);
      usable += g;
      if (g > 0) mask |= 1u << d;
    }
    v->rankCap[r] = line > 0 ? (int)(1000.0 * usable / line + 0.5) : 1000;
    v->rankNics[r] = line > 0 ? mask : ~0u;
  }
}

/* Does the picture name a NIC that is not up at its line rate? */
static int degraded(const struct mendViewHealth* h) {
  for (int i = 0; i < h->nNics; i++) {
    const struct mendViewNic* n = h->nics + i;
    if (n->rank < 0 || n->rank >= h->nRanks) continue;
    float rate = lineRate(h, n->rank, n->dev);
    if (rate > 0 && nicGbps(h, n->rank, n->dev) < rate) return 1;
  }
  return 0;
}

int mendReplanHopNic(const struct mendPlanView* v, const struct mendViewHealth* h, int channel, int from, int to) {
  int nf = nicsOf(h, from), nt = nicsOf(h, to);
  if (nf == 0 || nt == 0) return -1;
  /* The receiver's chain (the sender follows the receiver), each path on one device index at both
   * ends (rails): the first device both have and both can use. */
  int chain[MEND_VIEW_MAX_NICS];
  int k = mendGraphNicChain(channel, channel % nt, nt, NULL, NULL, chain);
  uint32_t both = v->rankNics[from] & v->rankNics[to];
  for (int i = 0; i < k; i++) {
    int d = chain[i];
    if (d < nf && ((both >> d) & 1)) return d;
  }
  return -2;
}

int mendReplanLinked(const struct mendPlanView* v, const struct mendViewHealth* h, int x, int y) {
  return mendReplanHopNic(v, h, 0, x, y) != -2;
}

static uint64_t gcd64(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Channel weights that equalise each channel's bottleneck: a channel's share shrinks with the load,
 * relative to bandwidth, of the busiest NIC (per direction) any of its ring hops uses, until every
 * channel's busiest NIC is equally busy; then no NIC carries more than its bandwidth's share where
 * channels can be shifted.  Shared: rings, picture and arithmetic are the same on every rank. */
static ncclResult_t balanceWeights(struct mendPlanView* v, const struct mendViewHealth* h) {
  int nR = v->nRanks, nC = v->nChannels;
  size_t nHops = (size_t)nR * (size_t)nC, nLoads = (size_t)nR * 32;
  int* rail = malloc(sizeof(int) * nHops);
  double* load = malloc(sizeof(double) * 2 * nLoads); /* [tx|rx][rank][dev] */
  double* gbps = malloc(sizeof(double) * nLoads);
  if (!rail || !load || !gbps) {
    free(rail);
    free(load);
    free(gbps);
    WARN("re-plan: out of memory balancing %d channels of %d ranks", nC, nR);
    return ncclSystemError;
  }
  for (int r = 0; r < nR; r++)
    for (int d = 0; d < 32; d++) gbps[(size_t)r * 32 + (size_t)d] = nicGbps(h, r, d);
  for (int c = 0; c < nC; c++)
    for (int i = 0; i < nR; i++)
      rail[(size_t)c * nR + i] = mendReplanHopNic(v, h, c, v->ch[c].ring[i], v->ch[c].ring[(i + 1) % nR]);
  double w[MEND_VIEW_MAX_CHANNELS];
  for (int c = 0; c < nC; c++) w[c] = 1.0;
  for (int round = 0; round < BALANCE_ROUNDS; round++) {
    memset(load, 0, sizeof(double) * 2 * nLoads);
    for (int c = 0; c < nC; c++) {
      for (int i = 0; i < nR; i++) {
        int d = rail[(size_t)c * nR + i];
        if (d < 0) continue;
        load[(size_t)v->ch[c].ring[i] * 32 + (size_t)d] += w[c];
        load[nLoads + (size_t)v->ch[c].ring[(i + 1) % nR] * 32 + (size_t)d] += w[c];
      }
    }
    double sum = 0;
    for (int c = 0; c < nC; c++) {
      double u = 0;
      for (int i = 0; i < nR; i++) {
        int d = rail[(size_t)c * nR + i];
        if (d < 0) continue;
        size_t tx = (size_t)v->ch[c].ring[i] * 32 + (size_t)d, rx = (size_t)v->ch[c].ring[(i + 1) % nR] * 32 + (size_t)d;
        double ut = load[tx] / gbps[tx], ur = load[nLoads + rx] / gbps[rx];
        if (ut > u) u = ut;
        if (ur > u) u = ur;
      }
      if (u > 0) w[c] /= u;
      sum += w[c];
    }
    for (int c = 0; c < nC; c++) w[c] *= (double)nC / sum;
  }
  double top = 0;
  for (int c = 0; c < nC; c++)
    if (w[c] > top) top = w[c];
  uint64_t g = 0;
  int q[MEND_VIEW_MAX_CHANNELS];
  for (int c = 0; c < nC; c++) {
    q[c] = (int)(w[c] / top * BALANCE_SCALE + 0.5);
    if (q[c] < 1) q[c] = 1;
    g = gcd64((uint64_t)q[c], g);
  }
  for (int c = 0; c < nC; c++) v->ch[c].weight = (int)((uint64_t)q[c] / g);
  free(rail);
  free(load);
  free(gbps);
  return ncclSuccess;
}

/* This rank's NIC per channel: a channel whose NIC is down moves along its failover chain (Balance:
 * the rotated chain the connections follow) or, backup-only, to the nearest usable NIC. */
static void moveChannels(struct mendPlanView* v, int backupOnly) {
  uint32_t mine = v->rankNics[v->rank];
  for (int c = 0; c < v->nChannels; c++) {
    int d = v->ch[c].netDev;
    if (d < 0 || d >= 32 || ((mine >> d) & 1)) continue;
    int chain[MEND_VIEW_MAX_NICS], k = 0;
    if (backupOnly) {
      for (int i = 0; i < v->nNics && i < MEND_VIEW_MAX_NICS; i++) chain[k++] = v->nicOrder[i];
    } else {
      k = mendGraphNicChain(c, d, v->nNics, v->nicOrder, v->nicDist, chain);
    }
    for (int i = 0; i < k; i++) {
      int b = chain[i];
      if (b >= 0 && b < 32 && ((mine >> b) & 1)) {
        v->ch[c].netDev = b;
        break;
      }
    }
  }
}

int mendReplanReranked(const struct mendPlanView* v, const struct mendViewHealth* h) {
  return !mendReplanBackupOnly() && degraded(h) && mendReplanMismatch(v, h);
}

int mendReplanBackupOnly(void) {
  const char* mode = mendParamReplan();
  return mode != NULL && strcasecmp(mode, "backup") == 0;
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
  int backupOnly = mendReplanBackupOnly();
  ncclResult_t res = ncclSuccess;
  if (!backupOnly && degraded(h)) {
    MENDCHECKGOTO(mendReplanRerank(v, h), res, fail_free);
    MENDCHECKGOTO(balanceWeights(v, h), res, fail_free);
  }
  moveChannels(v, backupOnly);
  MENDCHECKGOTO(mendPlanViewSeal(v), res, fail_free);
  *out = v;
  return ncclSuccess;
fail_free:
  mendPlanViewFree(v);
  return res;
}
