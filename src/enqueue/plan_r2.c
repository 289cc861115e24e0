/*
 * Planning an AllReduce: the per-call choice (mendTuneAllReduce, tuning.c) and, when it picks R2
 * or recursive R2, the works.  Backup and Balance are the ring/tree plan of plan.c (its caller
 * passes it in): Balance is that plan under the view's channel weights, backup the same plan under
 * a view derived with MEND_REPLAN=backup (equal weights, hot repair's failover order).
 *
 * An R2 plan cuts the vector into one contiguous window per level (split.lv[l].share of it, 64-byte
 * aligned): level 0 is the ring AllReduce over every rank (gen_ring.c); level l > 0 is a partial
 * level of gen_r2.c over the ranks whose capacity is >= its minCap, the others joining through its
 * chain.  Each level gets its own channels (at least one, more in proportion to its share), so the
 * global ring and the partial rings run at once; its window is split evenly over them.  Partial
 * levels take the channels of the rails the slower ranks lost (channelOrder).  With fewer channels
 * than levels, levels share channels: their works then wait for the earlier level's works on the
 * connectors they share (plan order), which is still correct.
 *
 * Order and dependencies.  Works are added level by level, so on every rank a work can only wait
 * for works of lower levels (connectors shared when levels share a channel), which never wait for
 * it: no cycle.  Within a level, the partial result is read only after the partial ring made it
 * because ring and chain are two phases of one program (gen_r2.c says why the outer ranks' two
 * streams are separate works instead).
 *
 * Placement.  The choice charges an R2 plan what this layout puts on each NIC of a degraded rank
 * (mendR2PlacedUs): the channels of a rail it lost go to its next usable rail, which carries its
 * own channel too, so a rank that lost several rails can be slower under R2 than under Balance
 * even where the model's bandwidth slices say otherwise (64 servers x 8 NICs on mend-sim).
 *
 * Rank orders come from the view: a level's ring and chain follow channel c's ring with the slower
 * ranks left out (so a re-ranked ring of the view is kept), its member list rotated by c so the
 * rank that adds the outer ranks' sum differs between channels.
 */
#include "enqueue/plan.h"

#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "enqueue/planview.h"
#include "enqueue/tuning.h"
#include "graph/graph.h"
#include "misc/utils.h"

#define R2_ALIGN_BYTES 64 /* windows start on this boundary, as plan.c's */

/* Channel c's ring split into the level's members (rotated by c) and the others, in ring order. */
static void levelRanks(const struct mendPlanView* v, int c, int minCap, int* tmp, int* inner, int* k, int* outer,
                       int* d) {
  int n = v->nRanks;
  *k = *d = 0;
  for (int i = 0; i < n; i++) {
    int r = v->ch[c].ring[i], cap = v->rankCap[r] < 1 ? 1 : v->rankCap[r];
    if (cap >= minCap) tmp[(*k)++] = r;
    else outer[(*d)++] = r;
  }
  for (int i = 0; i < *k; i++) inner[i] = tmp[(i + c) % *k];
}

/* Channels in the order the levels take them: first those whose rail every slower rank still has,
 * then those of rails a slower rank lost.  The global ring takes channels from the front, the
 * partial levels from the back, so the faster ranks' partial rings run on the rails the slower
 * ranks lost and leave the rails those ranks still reach to the global ring (whose hops to a
 * slower rank must use a rail it has: sharing that rail with a partial ring would slow both).
 * A channel's rail is c mod the rail count (the graph's rule, graph/channels.c); the rail count and
 * the lost rails come from the view's shared per-rank NIC masks, so every rank orders alike. */
/* The rail count of a view: one past the highest NIC any rank can use (0: no NIC masks known). */
static int railsOf(int nRanks, const uint32_t* rankNics) {
  int rails = 0;
  for (int r = 0; r < nRanks; r++) {
    uint32_t m = rankNics[r];
    for (int d = 31; m != ~0u && d >= rails; d--) {
      if ((m >> d) & 1) rails = d + 1;
    }
  }
  return rails;
}

static void channelOrder(int nRanks, const int* rankCap, const uint32_t* rankNics, int nCh, int* order) {
  int rails = railsOf(nRanks, rankNics);
  uint32_t lost = 0;
  for (int r = 0; rails > 0 && r < nRanks; r++) {
    if (rankNics[r] != ~0u && rankCap[r] < 1000) lost |= ~rankNics[r] & (rails >= 32 ? ~0u : (1u << rails) - 1);
  }
  int n = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (int c = 0; c < nCh; c++) {
      int isLost = rails > 0 && ((lost >> (c % rails)) & 1);
      if (isLost == pass) order[n++] = c;
    }
  }
}

/* Windows [start[l], start[l+1]) per level and the channels of each level: chans[l][0..nch[l]). */
static void layout(int nRanks, const int* rankCap, const uint32_t* rankNics, const struct mendReplanChoice* rc,
                   size_t count, size_t align, size_t* start, int chans[][MEND_VIEW_MAX_CHANNELS], int* nch) {
  int L = rc->split.nLevels, withData = 0;
  double cum = 0;
  start[0] = 0;
  for (int l = 0; l < L; l++) {
    cum += rc->split.lv[l].share;
    size_t e = l == L - 1 ? count : mendAlignUp((size_t)(cum * (double)count + 0.5), align);
    if (e > count) e = count;
    start[l + 1] = e > start[l] ? e : start[l];
    withData += start[l + 1] > start[l];
  }
  int nCh = rc->nChannels, extra = nCh - withData, order[MEND_VIEW_MAX_CHANNELS];
  channelOrder(nRanks, rankCap, rankNics, nCh, order);
  for (int l = 0; l < L; l++) nch[l] = start[l + 1] > start[l];
  /* Channels beyond one per level go, one by one, to the level with the most data per channel. */
  for (; extra > 0; extra--) {
    int best = -1;
    double most = -1;
    for (int l = 0; l < L; l++) {
      double per = nch[l] ? rc->split.lv[l].share / nch[l] : -1;
      if (per > most) most = per, best = l;
    }
    nch[best]++;
  }
  /* The global ring from the front of the order, partial levels from the back; with fewer channels
   * than levels, the j-th level with data shares position j mod nCh counted the same way. */
  int front = 0, back = nCh - 1, j = 0;
  for (int l = 0; l < L; l++) {
    if (nch[l] == 0) continue;
    for (int i = 0; i < nch[l]; i++) {
      if (withData > nCh) chans[l][i] = order[j == 0 ? 0 : (nCh - 1) - (j - 1) % nCh];
      else chans[l][i] = l == 0 ? order[front++] : order[back--];
    }
    j++;
  }
}

static ncclResult_t addLevelWorks(struct mendPlan* plan, int opIndex, int level,
                                  const struct mendR2Level* lv, int c, const struct mendWorkArgs* args, int* tmp) {
  struct ncclComm* comm = plan->comm;
  const struct mendPlanView* v = plan->view;
  struct mendProgram* progs[2];
  int np = 1;
  if (level == 0) {
    MENDCHECK(mendGenRing(MEND_FUNC_ALLREDUCE, comm->nRanks, v->ch[c].ring, v->ch[c].ringIndex, -1, &progs[0]));
  } else {
    int *inner = tmp + comm->nRanks, *outer = tmp + 2 * comm->nRanks, k, d;
    levelRanks(v, c, lv->minCap, tmp, inner, &k, outer, &d);
    MENDCHECK(mendGenR2Level(k, inner, d, outer, comm->rank, progs, &np));
  }
  for (int i = 0; i < np; i++) {
    ncclResult_t res = mendPlanAddWork(plan, opIndex, c, progs[i], args);
    if (res != ncclSuccess) {
      for (int j = i + 1; j < np; j++) free(progs[j]);
      return res;
    }
  }
  return ncclSuccess;
}

static ncclResult_t planR2(struct mendPlan* plan, const struct mendOp* op, int opIndex,
                           const struct mendReplanChoice* rc) {
  struct ncclComm* comm = plan->comm;
  size_t ts = mendTypeSize(op->type), align = ts < R2_ALIGN_BYTES ? R2_ALIGN_BYTES / ts : 1;
  size_t start[MEND_R2_MAX_LEVELS + 1];
  int chans[MEND_R2_MAX_LEVELS][MEND_VIEW_MAX_CHANNELS], nch[MEND_R2_MAX_LEVELS];
  MENDARGCHECK(rc->split.nLevels >= 1 && rc->split.nLevels <= MEND_R2_MAX_LEVELS && rc->nChannels >= 1 &&
                   rc->nChannels <= comm->nChannels && rc->nChannels <= plan->view->nChannels &&
                   plan->view->nRanks == comm->nRanks,
               ncclInternalError, "R2 AllReduce: %d levels over %d channels do not fit the plan view (%d channels)",
               rc->split.nLevels, rc->nChannels, plan->view->nChannels);
  layout(plan->view->nRanks, plan->view->rankCap, plan->view->rankNics, rc, op->count, align, start, chans, nch);
  int* tmp;
  MENDCHECK(MENDCALLOC(tmp, 3 * (size_t)comm->nRanks));
  size_t chunk = rc->chunkBytes / ts;
  struct mendWorkArgs args = {
    .buf = {NULL, (void*)op->sendbuff, op->recvbuff, NULL},
    .chunkElems = chunk ? chunk : 1,
    .alignElems = (uint32_t)align,
    .typeSize = (uint32_t)ts,
    .redop = op->redop,
  };
  ncclResult_t res = ncclSuccess;
  for (int l = 0; l < rc->split.nLevels && res == ncclSuccess; l++) {
    size_t cnt = start[l + 1] - start[l];
    if (cnt == 0) continue;
    size_t part = mendAlignUp(mendDivUp(cnt, (size_t)nch[l]), align);
    for (int i = 0; i < nch[l] && (size_t)i * part < cnt && res == ncclSuccess; i++) {
      args.offset = start[l] + (size_t)i * part;
      args.count = cnt - (size_t)i * part < part ? cnt - (size_t)i * part : part;
      res = addLevelWorks(plan, opIndex, l, rc->split.lv + l, chans[l][i], &args, tmp);
    }
  }
  free(tmp);
  return res;
}

/* (tuning.h) */
int mendReplanPlacedNic(int c, int rails, uint32_t m) {
  int chain[MEND_VIEW_MAX_NICS], k = mendGraphNicChain(c, c % rails, rails, NULL, NULL, chain);
  for (int i = 0; i < k; i++) {
    if ((m >> chain[i]) & 1) return chain[i];
  }
  return c % rails;
}

/* Bytes each direction on each NIC of degraded rank r under the R2 layout (see tuning.h). */
static double busiestNic(int r, int nRanks, const int* rankCap, const uint32_t* rankNics, int rails,
                         const struct mendReplanChoice* rc, const size_t* start,
                         int chans[][MEND_VIEW_MAX_CHANNELS], const int* nch) {
  double load[32] = {0}, most = 0;
  int cap = rankCap[r] < 1 ? 1 : rankCap[r];
  for (int l = 0; l < rc->split.nLevels; l++) {
    const struct mendR2Level* lv = rc->split.lv + l;
    if (nch[l] == 0) continue;
    double b = (double)(start[l + 1] - start[l]) / nch[l], k = lv->nMembers;
    /* A member: its ring's share (and, on a partial level, the chain: each member receives and
     * forwards the final value); an outer rank: its input out and the result in, and where several
     * outer ranks chain their inputs (gen_r2.c), every one but the first receives the previous
     * one's sum too: 2 shares in. */
    double outer = nRanks - k >= 2 ? 2.0 * b : b;
    double bytes = l == 0 ? 2.0 * (nRanks - 1) / nRanks * b : (cap >= lv->minCap ? 2.0 * (k - 1) / k * b + b : outer);
    for (int i = 0; i < nch[l]; i++) load[mendReplanPlacedNic(chans[l][i], rails, rankNics[r])] += bytes;
  }
  for (int d = 0; d < rails; d++) most = load[d] > most ? load[d] : most;
  return most;
}

double mendR2PlacedUs(int nRanks, const int* rankCap, const uint32_t* rankNics, const struct mendReplanChoice* rc,
                      double nBytes, double bytesPerUs) {
  int rails = railsOf(nRanks, rankNics);
  if (rails < 2 || rails > 32 || nBytes < 1 || bytesPerUs <= 0 || rc->nChannels < 1 ||
      rc->nChannels > MEND_VIEW_MAX_CHANNELS)
    return 0;
  size_t start[MEND_R2_MAX_LEVELS + 1];
  int chans[MEND_R2_MAX_LEVELS][MEND_VIEW_MAX_CHANNELS], nch[MEND_R2_MAX_LEVELS];
  layout(nRanks, rankCap, rankNics, rc, (size_t)nBytes, 1, start, chans, nch);
  double most = 0;
  for (int r = 0; r < nRanks; r++) {
    if (rankCap[r] >= 1000 || rankNics[r] == ~0u) continue;
    double b = busiestNic(r, nRanks, rankCap, rankNics, rails, rc, start, chans, nch);
    most = b > most ? b : most;
  }
  return most / (bytesPerUs / rails);
}

ncclResult_t mendPlanAllReduce(struct mendPlan* plan, struct mendPlanner* pl, const struct mendOp* op, int opIndex,
                               mendPlanCollFn coll) {
  struct mendReplanChoice rc;
  MENDCHECK(mendTuneAllReduce(plan->comm, pl, plan->view, op->count * mendTypeSize(op->type), &rc));
  if (rc.replan < MEND_REPLAN_R2) {
    plan->collAlgo = rc.algo;
    plan->collEven = rc.replan == MEND_REPLAN_BACKUP;
    ncclResult_t res = coll(plan, pl, op, opIndex);
    plan->collAlgo = -1;
    plan->collEven = 0;
    return res;
  }
  plan->estUs += rc.estUs;
  return planR2(plan, op, opIndex, &rc);
}
