/*
 * The R2 model: how an AllReduce splits over the global ring and partial levels when ranks have
 * different capacities (R2CCL sections 5.2 and 6, appendix A).  Pure functions of plain numbers
 * (tests call them directly); the per-call choice that uses them is mendTuneAllReduce (tuning.c).
 *
 * One degraded rank that lost a fraction X of its bandwidth, N ranks, k = N - 1 healthy ones, data S
 * at bandwidth B (the paper's, per rank instead of per server):
 *   T1 = a (1-Y) S / ((1-X) B)   global ring over N ranks at the degraded rank's rate, a = 2(N-1)/N
 *   T2 = b Y S / (X B)           partial ring over k ranks on the healthy ranks' spare X B, b = 2(k-1)/k
 *   T3 = Y S / (X B)             the degraded rank's share joins (the paper's stage 2)
 *   T(Y) = max(T1, T2) + T3
 * T1 falls and T2 rises with Y; they meet at Y* = aX / (aX + b(1-X)).  Below Y*, T' = -a/(1-X) + 1/X,
 * so the ring (Y = 0) is best when X <= 1/(1+a) = N/(3N-2), and Y* otherwise (appendix A).
 *
 * Several capacities (section 6): thresholds t0 = slowest < t1 < ... cut the ranks into nested
 * levels (level l: the ranks with capacity >= tl).  Level l's ring runs at rate dl = tl - t(l-1),
 * the bandwidth its members have beyond the slower levels, so the levels use disjoint slices of
 * every member's bandwidth: all rings run at once, then all chains at once, each in its own slice:
 *   T = max_l (a_l y_l / d_l) + max_{l>0} (y_l / d_l)        (S = B = 1, a_l = 2(k_l-1)/k_l)
 * which is the paper's T(Y) for one level.  Minimising M1 + M2 subject to the shares fitting under
 * the two maxima (y_0 <= M1 d_0/a_0, y_l <= d_l min(M1/a_l, M2)) is maximising the concave,
 * piecewise linear g(t) = t d_0/a_0 + sum_l d_l min(t/a_l, 1-t) over t = M1/T; its corners are
 * t = a_l/(1+a_l) and t = 1 (everything in the global ring: the plain ring, which the choice weighs
 * separately as Balance), and T = 1/g.  The split takes the best corner below 1.  One level gives
 * the paper's Y* and threshold exactly.  The search
 * tries every set of thresholds (the depth limit MEND_R2_MAX_LEVELS: each level costs a channel, a
 * chain through every slower rank and n hops of latency, for a slice that gets thinner each time).
 * Per-hop latency (alpha) enters the times compared, not the shares; so does a chain's pipeline fill:
 * the outer ranks' sum and the result pass every rank of the chain chunk by chunk (gen_r2.c), so the
 * last chunk leaves n - 1 chunk times after the first one would have alone.  At 8 MiB over 4 ranks
 * (chunks of 1/8 of a channel's window) that is 3/8 more chain time: the testbed and mend-sim put R2
 * at 0.97-1.08x Balance's time there, the model without it at 0.82x.
 */
#include "enqueue/tuning.h"

#include <stdlib.h>
#include <string.h>

#include "enqueue/gen.h"

double mendR2PaperThreshold(int n) { return n < 1 ? 1.0 : (double)n / (3.0 * n - 2.0); }

static double ringUs(const struct mendR2ModelIn* in, int k, double bytes, int rate) {
  if (bytes <= 0 || k <= 1) return 0;
  return 2.0 * (k - 1) * in->alphaUs + 2.0 * (k - 1) / k * bytes / (rate / 1000.0 * in->bytesPerUs);
}

double mendR2CostUs(const struct mendR2ModelIn* in, const struct mendR2Split* s) {
  double rings = 0, chains = 0; /* all rings at once, then all chains at once */
  for (int l = 0; l < s->nLevels; l++) {
    const struct mendR2Level* v = s->lv + l;
    double bytes = v->share * in->nBytes;
    int rate = v->rate > 0 ? v->rate : 1;
    double r = ringUs(in, v->nMembers, bytes, rate);
    if (r > rings) rings = r;
    double chunk = in->chunkBytes < bytes ? in->chunkBytes : bytes, fill = (in->nRanks - 1) * chunk;
    double c = l > 0 && bytes > 0 ? in->nRanks * in->alphaUs + (bytes + fill) / (rate / 1000.0 * in->bytesPerUs) : 0;
    if (c > chains) chains = c;
  }
  return rings + chains;
}

static int cmpInt(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  return x < y ? -1 : x > y;
}

void mendR2CapsFree(struct mendR2Caps* c) {
  if (c == NULL) return;
  free(c->cap);
  free(c->atLeast);
  memset(c, 0, sizeof(*c));
}

ncclResult_t mendR2CapsOf(const int* rankCap, int nRanks, struct mendR2Caps* out) {
  memset(out, 0, sizeof(*out));
  if (nRanks < 1) return ncclSuccess;
  int* caps = malloc(sizeof(int) * (size_t)nRanks);
  if (caps == NULL) return ncclSystemError;
  for (int r = 0; r < nRanks; r++) caps[r] = rankCap[r] < 1 ? 1 : rankCap[r];
  qsort(caps, (size_t)nRanks, sizeof(int), cmpInt);
  int nd = 1;
  for (int r = 1; r < nRanks; r++) nd += caps[r] != caps[r - 1];
  out->cap = malloc(sizeof(int) * (size_t)nd);
  out->atLeast = malloc(sizeof(int) * (size_t)nd);
  if (out->cap == NULL || out->atLeast == NULL) {
    free(caps);
    mendR2CapsFree(out);
    return ncclSystemError;
  }
  /* Sorted: the ranks at or above the i-th distinct value are those from its first place on. */
  for (int r = 0, i = 0; r < nRanks; r++) {
    if (r > 0 && caps[r] == caps[r - 1]) continue;
    out->cap[i] = caps[r];
    out->atLeast[i++] = nRanks - r;
  }
  free(caps);
  out->nRanks = nRanks;
  out->nDistinct = nd;
  return ncclSuccess;
}

/* The distinct capacities above the slowest (ascending), at most MEND_R2_MAX_CANDIDATES: when there
 * are more, those with the largest step above the next lower capacity (ties: the lower one).
 * nMembers[i]: the ranks with capacity >= cand[i]. */
static int candidates(const struct mendR2Caps* caps, int cand[MEND_R2_MAX_CANDIDATES],
                      int nMembers[MEND_R2_MAX_CANDIDATES]) {
  const int* above = caps->cap + 1; /* distinct values above the minimum */
  int nd = caps->nDistinct - 1, n = 0, minCap = caps->cap[0];
  if (nd <= MEND_R2_MAX_CANDIDATES) {
    for (int i = 0; i < nd; i++) cand[n] = above[i], nMembers[n++] = caps->atLeast[i + 1];
    return n;
  }
  /* Pick the largest steps one by one (the first of equal steps: the lower capacity), then list
   * them in ascending order. */
  int pick[MEND_R2_MAX_CANDIDATES];
  for (; n < MEND_R2_MAX_CANDIDATES; n++) {
    int best = -1, bestStep = -1;
    for (int i = 0; i < nd; i++) {
      int step = above[i] - (i ? above[i - 1] : minCap), used = 0;
      for (int j = 0; j < n && !used; j++) used = pick[j] == i;
      if (!used && step > bestStep) best = i, bestStep = step;
    }
    pick[n] = best;
  }
  qsort(pick, (size_t)n, sizeof(int), cmpInt);
  for (int j = 0; j < n; j++) cand[j] = above[pick[j]], nMembers[j] = caps->atLeast[pick[j] + 1];
  return n;
}

/* g(t) of the file comment, for levels with rates d (fractions) and ring factors a. */
static double gOf(const struct mendR2Split* s, const double* a, double t) {
  double g = 0;
  for (int l = 0; l < s->nLevels; l++) {
    double d = s->lv[l].rate / 1000.0, ring = a[l] > 0 ? t / a[l] : 1e300;
    g += l == 0 ? (a[0] > 0 ? d * ring : 0) : d * (ring < 1 - t ? ring : 1 - t);
  }
  return g;
}

/* The shares of least time for the split's levels (see the file comment). */
static void shares(struct mendR2Split* s) {
  double a[MEND_R2_MAX_LEVELS], bestT = 0, bestG = -1;
  for (int l = 0; l < s->nLevels; l++) a[l] = 2.0 * (s->lv[l].nMembers - 1) / s->lv[l].nMembers;
  for (int l = 1; l < s->nLevels; l++) {
    double t = a[l] / (1 + a[l]), g = gOf(s, a, t);
    if (g > bestG) bestG = g, bestT = t;
  }
  double T = 1 / bestG, m1 = bestT * T, m2 = (1 - bestT) * T, sum = 0;
  for (int l = 0; l < s->nLevels; l++) {
    double d = s->lv[l].rate / 1000.0, ring = a[l] > 0 ? m1 / a[l] : 1e300;
    s->lv[l].share = l == 0 ? (a[0] > 0 ? d * ring : 0) : d * (ring < m2 ? ring : m2);
    sum += s->lv[l].share;
  }
  for (int l = 0; l < s->nLevels; l++) s->lv[l].share /= sum;
}

/* The levels of one threshold set and their shares; 0 when the set cannot run. */
static int levelsOf(const struct mendR2ModelIn* in, int minCap, const int* cand, const int* nMembers, unsigned set,
                    struct mendR2Split* s) {
  memset(s, 0, sizeof(*s));
  s->nLevels = 1;
  s->lv[0] = (struct mendR2Level){.minCap = 0, .nMembers = in->nRanks, .rate = minCap, .share = 1};
  int prev = minCap;
  for (int i = 0; set >> i; i++) {
    if (!((set >> i) & 1)) continue;
    int k = nMembers[i], d = in->nRanks - k;
    if (k < 1 || d < 1 || d > k * MEND_R2_MAX_FANOUT) return 0;
    s->lv[s->nLevels++] = (struct mendR2Level){.minCap = cand[i], .nMembers = k, .rate = cand[i] - prev};
    prev = cand[i];
  }
  shares(s);
  return 1;
}

static int popcount(unsigned x) {
  int c = 0;
  for (; x; x &= x - 1) c++;
  return c;
}

int mendR2BestSplitCaps(const struct mendR2ModelIn* in, const struct mendR2Caps* caps, int minPartial,
                        int maxPartial, struct mendR2Split* out) {
  int minCap = 1000, cand[MEND_R2_MAX_CANDIDATES], nMembers[MEND_R2_MAX_CANDIDATES];
  int nc = in->nRanks > 0 && caps->nDistinct > 0 ? candidates(caps, cand, nMembers) : 0;
  if (in->nRanks > 0 && caps->nDistinct > 0) minCap = caps->cap[0];
  memset(out, 0, sizeof(*out));
  out->nLevels = 1;
  out->lv[0] = (struct mendR2Level){.minCap = 0, .nMembers = in->nRanks, .rate = minCap, .share = 1};
  out->estUs = mendR2CostUs(in, out);
  if (maxPartial > MEND_R2_MAX_LEVELS - 1) maxPartial = MEND_R2_MAX_LEVELS - 1;
  int found = 0;
  for (unsigned set = 1; nc > 0 && set < (1u << nc); set++) {
    int p = popcount(set);
    if (p < minPartial || p > maxPartial) continue;
    struct mendR2Split s;
    if (!levelsOf(in, minCap, cand, nMembers, set, &s)) continue;
    s.estUs = mendR2CostUs(in, &s);
    if (!found || s.estUs < out->estUs) {
      *out = s;
      found = 1;
    }
  }
  return found;
}

int mendR2BestSplit(const struct mendR2ModelIn* in, int minPartial, int maxPartial, struct mendR2Split* out) {
  struct mendR2Caps caps;
  if (in->nRanks < 1 || mendR2CapsOf(in->rankCap, in->nRanks, &caps) != ncclSuccess)
    memset(&caps, 0, sizeof(caps)); /* no ranks, or no memory: no candidates, the plain ring */
  int found = mendR2BestSplitCaps(in, &caps, minPartial, maxPartial, out);
  mendR2CapsFree(&caps);
  return found;
}
