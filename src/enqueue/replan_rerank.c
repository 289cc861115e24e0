/*
 * Bridge re-ranking (planview.h, mendReplanRerank).  Host A lost rail 0 and host B rail 1: a ring
 * hop A -> B has no path, not even a backup, since connections pair the same device index at both
 * ends (rails).  Collectives do not care about the order of ranks in a ring, so the ring is rebuilt
 * with linked neighbours only: a depth-first search that extends the ring with the next rank of the
 * base order that is linked to the last one, backtracking when stuck, so ranks that have both rails
 * land between mismatched ones (bridges) and most of the base order, hence most connections, stays.
 * Trees follow the rings.  Everything here depends on the picture and the base rings only, so every
 * rank derives the same rings and trees.
 */
#include "enqueue/planview.h"

#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "enqueue/gen.h"

#define RERANK_BUDGET (1 << 20) /* ranks tried by one search before it gives up */

struct search {
  const struct mendPlanView* v;
  const struct mendViewHealth* h;
  int n;
  const int* base;  /* the base ring */
  int* where;       /* rank -> position in base */
  char* used;       /* rank placed */
  int* ring;        /* the ring being built */
  int* tried;       /* per depth: candidates tried (offsets after the last rank's base position) */
};

/* Ring positions 0..n-1 filled with linked neighbours, ring[0] = base[0]; 0 when none was found
 * within the budget. */
static int findRing(struct search* s) {
  int n = s->n;
  memset(s->used, 0, (size_t)n);
  s->ring[0] = s->base[0];
  s->used[s->base[0]] = 1;
  int depth = 1;
  s->tried[1] = 0;
  long budget = RERANK_BUDGET;
  while (depth > 0 && budget-- > 0) {
    if (depth == n) {
      if (mendReplanLinked(s->v, s->h, s->ring[n - 1], s->ring[0])) return 1;
      depth--;
      s->used[s->ring[depth]] = 0;
      continue;
    }
    int last = s->ring[depth - 1], next = -1;
    while (s->tried[depth] < n - 1) {
      int cand = s->base[(s->where[last] + 1 + s->tried[depth]) % n];
      s->tried[depth]++;
      if (!s->used[cand] && mendReplanLinked(s->v, s->h, last, cand)) {
        next = cand;
        break;
      }
    }
    if (next < 0) { /* nothing fits here: take back the previous rank */
      depth--;
      if (depth > 0) s->used[s->ring[depth]] = 0;
      continue;
    }
    s->ring[depth] = next;
    s->used[next] = 1;
    depth++;
    if (depth < n) s->tried[depth] = 0;
  }
  return 0;
}

static int ringLinked(const struct mendPlanView* v, const struct mendViewHealth* h, const int* ring) {
  for (int i = 0; i < v->nRanks; i++)
    if (!mendReplanLinked(v, h, ring[i], ring[(i + 1) % v->nRanks])) return 0;
  return 1;
}

/* This rank's place in a tree over channel c's ring: the double binary tree the planner would build
 * when all its edges are linked (treeDepth 0 asks for it), else a chain along the ring. */
static void ringTree(struct mendPlanView* v, const struct mendViewHealth* h, int c) {
  struct mendViewChannel* ch = v->ch + c;
  int n = v->nRanks, dbt = 1;
  for (int p = 0; p < n && dbt; p++) {
    int up, down[2];
    mendTreeDoubleBinary(n, p, c % 2, &up, down);
    if (up >= 0 && !mendReplanLinked(v, h, ch->ring[p], ch->ring[up])) dbt = 0;
  }
  ch->treeUp = -1;
  for (int k = 0; k < MEND_VIEW_TREE_ARITY; k++) ch->treeDown[k] = -1;
  ch->treeDepth = 0;
  if (dbt) return;
  int i = ch->ringIndex;
  ch->treeUp = i > 0 ? ch->ring[i - 1] : -1;
  ch->treeDown[0] = i + 1 < n ? ch->ring[i + 1] : -1;
  ch->treeDepth = n;
}

/* NICs of a rank in the picture: 1 + its highest device with a line rate (replan.c's nicsOf). */
static int pictureNics(const struct mendViewHealth* h, int rank) {
  int n = 0;
  for (int d = 0; d < h->maxDevs && d < 32; d++)
    if (h->lineGbps[(size_t)rank * (size_t)h->maxDevs + (size_t)d] > 0) n = d + 1;
  return n;
}

int mendReplanMismatch(const struct mendPlanView* v, const struct mendViewHealth* h) {
  /* Whether two ranks are linked depends only on their (NIC count, usable NICs): compare one rank
   * of each such kind with one of every other kind (and with a second rank of its own kind), so a
   * healthy cluster of 10^5 ranks is a few kinds, not 5 x 10^9 pairs. */
  int n = v->nRanks, nKinds = 0, mismatch = 0;
  int* rep = malloc(sizeof(int) * (size_t)n);  /* a rank of each kind */
  int* twin = malloc(sizeof(int) * (size_t)n); /* a second rank of that kind, -1 when none */
  int* nics = malloc(sizeof(int) * (size_t)n); /* NIC count of each kind */
  if (rep == NULL || twin == NULL || nics == NULL) {
    /* No memory for the kinds: every pair. */
    for (int x = 0; x < n && !mismatch; x++)
      for (int y = x + 1; y < n && !mismatch; y++) mismatch = !mendReplanLinked(v, h, x, y);
    goto free_kinds;
  }
  for (int r = 0; r < n; r++) {
    int nr = pictureNics(h, r), k = 0;
    while (k < nKinds && !(nics[k] == nr && v->rankNics[rep[k]] == v->rankNics[r])) k++;
    if (k == nKinds) {
      rep[k] = r;
      twin[k] = -1;
      nics[k] = nr;
      nKinds++;
    } else if (twin[k] < 0) {
      twin[k] = r;
    }
  }
  for (int a = 0; a < nKinds && !mismatch; a++) {
    if (twin[a] >= 0) mismatch = !mendReplanLinked(v, h, rep[a], twin[a]);
    for (int b = a + 1; b < nKinds && !mismatch; b++) mismatch = !mendReplanLinked(v, h, rep[a], rep[b]);
  }
free_kinds:
  free(rep);
  free(twin);
  free(nics);
  return mismatch;
}

ncclResult_t mendReplanRerank(struct mendPlanView* v, const struct mendViewHealth* h) {
  int n = v->nRanks;
  if (!mendReplanMismatch(v, h)) return ncclSuccess;
  struct search s = {.v = v, .h = h, .n = n};
  s.where = malloc(sizeof(int) * (size_t)n);
  s.used = malloc((size_t)n);
  s.ring = malloc(sizeof(int) * (size_t)n);
  s.tried = malloc(sizeof(int) * ((size_t)n + 1));
  ncclResult_t res = ncclSuccess;
  if (!s.where || !s.used || !s.ring || !s.tried) {
    WARN("re-plan: out of memory re-ranking %d ranks", n);
    res = ncclSystemError;
    goto free_search;
  }
  for (int c = 0; c < v->nChannels; c++) {
    struct mendViewChannel* ch = v->ch + c;
    if (!ringLinked(v, h, ch->ring)) {
      s.base = ch->ring;
      for (int i = 0; i < n; i++) s.where[ch->ring[i]] = i;
      if (findRing(&s)) {
        memcpy(ch->ring, s.ring, sizeof(int) * (size_t)n);
        for (int i = 0; i < n; i++)
          if (ch->ring[i] == v->rank) ch->ringIndex = i;
        INFO(NCCL_TUNING | MEND_RESIL, "re-plan epoch %u: channel %d re-ranked (neighbours without a common rail)",
             v->epoch, c);
      } else {
        WARN("re-plan epoch %u: channel %d: no ring of %d ranks whose neighbours share a usable rail; the base ring "
             "stays (its mismatched hops ride crossing paths where the rails meet at a spine, else relay paths "
             "through a rank of a third host with both rails)", v->epoch, c, n);
      }
    }
    ringTree(v, h, c);
  }
free_search:
  free(s.where);
  free(s.used);
  free(s.ring);
  free(s.tried);
  return res;
}
