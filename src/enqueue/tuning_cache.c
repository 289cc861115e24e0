/*
 * The per-call AllReduce choice kept per planner, and the per-view summary it reads
 * (tuning_cache.h explains both).
 */
#include "enqueue/tuning_cache.h"

#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "enqueue/plan.h"
#include "enqueue/planview.h"
#include "misc/param.h"
#include "misc/utils.h"

struct mendTuneEntry {
  struct mendTuneKey key;        /* every input besides the view */
  struct mendReplanChoice choice; /* what they gave */
};

struct mendTuneCache {
  int haveView;                  /* view holds a summary */
  struct mendTuneViewSum view;   /* the view the entries were chosen under */
  int nEntries;                  /* entries in use */
  int next;                      /* the entry the next insertion replaces once full (oldest first) */
  struct mendTuneEntry e[MEND_TUNE_CACHE_MAX]; /* kept choices */
  struct mendTuneCacheStats st;  /* counters (entries, capacity filled on request) */
};

static int capacity(void) {
  int64_t n = mendParamTuneCache();
  if (n < 0 || n > MEND_TUNE_CACHE_MAX) {
    WARN_ONCE("MEND_TUNE_CACHE=%lld is not 0..%d; using %d", (long long)n, MEND_TUNE_CACHE_MAX,
              n < 0 ? 0 : MEND_TUNE_CACHE_MAX);
    return n < 0 ? 0 : MEND_TUNE_CACHE_MAX;
  }
  return (int)n;
}

static int capOf(const struct mendPlanView* v, int r) {
  int c = v->rankCap[r];
  return c < 1 ? 1 : (c > 1000 ? 1000 : c);
}

/* Share of its line rate the busiest NIC of rank r gives a plan that ignores capacities: the
 * channels of its lost NICs ride the nearest usable NIC, which then carries 1 + lost shares. */
static double backupRate(const struct mendPlanView* v, int r) {
  double cap = capOf(v, r) / 1000.0;
  uint32_t m = v->rankNics[r];
  int u = 0;
  for (uint32_t x = m; x; x &= x - 1) u++;
  if (cap >= 1.0 || m == ~0u || u == 0) return cap;
  int all = (int)(u / cap + 0.5);
  double f = 1.0 / (all > u ? all - u + 1 : 1);
  return f < cap ? f : cap;
}

void mendTuneViewSumFree(struct mendTuneViewSum* s) {
  if (s != NULL) mendR2CapsFree(&s->caps);
}

/* One pass over the ranks (and a sort of their capacities for R2). */
static ncclResult_t summarise(const struct mendPlanView* v, struct mendTuneViewSum* s) {
  memset(s, 0, sizeof(*s));
  s->hash = v->hash;
  s->epoch = v->epoch;
  s->fromOp = v->fromOp;
  s->nRanks = v->nRanks;
  s->rankCap = v->rankCap;
  s->rankNics = v->rankNics;
  s->cmin = 1.0;
  s->bmin = 1.0;
  for (int r = 0; r < v->nRanks; r++) {
    s->degraded |= v->rankCap[r] != 1000;
    if (capOf(v, r) / 1000.0 < s->cmin) s->cmin = capOf(v, r) / 1000.0;
    if (backupRate(v, r) < s->bmin) s->bmin = backupRate(v, r);
  }
  /* A healthy view needs no split search (unless MEND_REPLAN forces one: the summary is then
   * made anyway, it is once per view). */
  return mendR2CapsOf(v->rankCap, v->nRanks, &s->caps);
}

static int sameView(const struct mendTuneViewSum* s, const struct mendPlanView* v) {
  return s->hash == v->hash && s->epoch == v->epoch && s->fromOp == v->fromOp && s->nRanks == v->nRanks &&
         s->rankCap == v->rankCap && s->rankNics == v->rankNics;
}

ncclResult_t mendTuneCacheView(struct mendPlanner* pl, const struct mendPlanView* view, struct mendTuneViewSum* fresh,
                               const struct mendTuneViewSum** sum) {
  if (capacity() == 0) {
    MENDCHECK(summarise(view, fresh));
    *sum = fresh;
    return ncclSuccess;
  }
  if (pl->tuneCache == NULL) MENDCHECK(MENDCALLOC(pl->tuneCache, 1));
  struct mendTuneCache* tc = pl->tuneCache;
  if (!tc->haveView || !sameView(&tc->view, view)) {
    if (tc->haveView) tc->st.invalidations++;
    mendTuneViewSumFree(&tc->view);
    tc->haveView = 0;
    tc->nEntries = tc->next = 0;
    MENDCHECK(summarise(view, &tc->view));
    tc->haveView = 1;
    tc->st.summaries++;
  }
  *sum = &tc->view;
  return ncclSuccess;
}

static int sameKey(const struct mendTuneKey* a, const struct mendTuneKey* b) {
  return a->nBytes == b->nBytes && a->forced == b->forced && a->nRanks == b->nRanks && a->kind == b->kind &&
         a->nChannels == b->nChannels && a->commChannels == b->commChannels && a->algos == b->algos &&
         a->maxChannels == b->maxChannels && a->chunkParam == b->chunkParam && a->slotBytes == b->slotBytes;
}

int mendTuneCacheFind(struct mendPlanner* pl, const struct mendTuneKey* key, struct mendReplanChoice* choice) {
  struct mendTuneCache* tc = pl->tuneCache;
  int cap = capacity();
  if (tc != NULL && cap > 0 && tc->haveView) {
    for (int i = 0; i < tc->nEntries && i < cap; i++) {
      if (sameKey(&tc->e[i].key, key)) {
        *choice = tc->e[i].choice;
        tc->st.hits++;
        return 1;
      }
    }
  }
  if (tc != NULL && cap > 0) tc->st.misses++;
  return 0;
}

void mendTuneCacheAdd(struct mendPlanner* pl, const struct mendTuneKey* key, const struct mendReplanChoice* choice) {
  struct mendTuneCache* tc = pl->tuneCache;
  int cap = capacity();
  if (tc == NULL || cap == 0 || !tc->haveView) return;
  if (tc->nEntries > cap) tc->nEntries = cap; /* MEND_TUNE_CACHE lowered since */
  int at;
  if (tc->nEntries < cap) {
    at = tc->nEntries++;
  } else {
    at = tc->next % cap;
    tc->next = (at + 1) % cap;
  }
  tc->e[at].key = *key;
  tc->e[at].choice = *choice;
}

void mendTuneCacheFree(struct mendTuneCache* tc) {
  if (tc == NULL) return;
  mendTuneViewSumFree(&tc->view);
  free(tc);
}

void mendTuneCacheGetStats(const struct mendPlanner* pl, struct mendTuneCacheStats* st) {
  memset(st, 0, sizeof(*st));
  st->capacity = capacity();
  if (pl == NULL || pl->tuneCache == NULL) return;
  *st = pl->tuneCache->st;
  st->entries = pl->tuneCache->nEntries;
  st->capacity = capacity();
}
