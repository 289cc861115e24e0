/*
 * The per-call AllReduce choice under a degraded plan view, kept (tuning_cache.c).
 *
 * mendTuneAllReduce (tuning.c) depends on the view only through the ranks' capacities and usable
 * NICs: once per view they are summarised (whether any rank is degraded, the slowest capacity, the
 * slowest backup rate, the distinct capacities for R2's split search), which turns the O(ranks)
 * walk and sort of every call into O(distinct capacities).  The choices themselves are kept per
 * planner in a small table keyed by every other input of the choice (byte count, MEND_REPLAN,
 * channels, transport kind, allowed algorithms, channel and chunk parameters), for the view they
 * were made under; a new view (another hash, epoch, op or capacity array) empties the table.
 * A kept choice is the one the same inputs computed, so every rank still picks alike.  Planning
 * thread only (as the planner).  MEND_TUNE_CACHE sets the table's size; 0 turns both the table and
 * the per-view summary off (every call walks the ranks, as before: tests and A/B timings).
 */
#ifndef MEND_ENQUEUE_TUNING_CACHE_H_
#define MEND_ENQUEUE_TUNING_CACHE_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "enqueue/tuning.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MEND_TUNE_CACHE_MAX 64  /* largest MEND_TUNE_CACHE */

struct mendPlanner;
struct mendPlanView;
struct mendTuneCache;

/* What the choice reads from a view, computed once per view. */
struct mendTuneViewSum {
  uint64_t hash;          /* the view's identity: hash, epoch, fromOp, rank count, capacity arrays */
  uint32_t epoch;         /* (see hash) */
  uint64_t fromOp;        /* (see hash) */
  int nRanks;             /* (see hash) */
  const int* rankCap;     /* (see hash) */
  const uint32_t* rankNics; /* (see hash) */
  int degraded;           /* some rank's capacity is not 1000 permille */
  double cmin;            /* slowest capacity (clamped to 1..1000) / 1000: Balance's rate */
  double bmin;            /* slowest busiest-NIC share under backup paths: backup's rate */
  struct mendR2Caps caps; /* distinct capacities for the R2 split search */
};

/* Every input of a choice besides the view. */
struct mendTuneKey {
  size_t nBytes;      /* the AllReduce's bytes */
  int forced;         /* MEND_REPLAN (enum mendReplan) */
  int nRanks;         /* ranks */
  int kind;           /* comm-wide slowest transport */
  int nChannels;      /* channels the cost model gives nBytes (after NCCL_MIN/MAX_NCHANNELS) */
  int commChannels;   /* channels the communicator has */
  uint32_t algos;     /* allowed AllReduce algorithms (Ring/Tree bits) */
  int64_t maxChannels; /* NCCL_MAX_NCHANNELS */
  int64_t chunkParam; /* MEND_CHUNKSIZE */
  size_t slotBytes;   /* FIFO slot (NCCL_BUFFSIZE / slots) */
};

/* Counters of a planner's choice table (tests, logs). */
struct mendTuneCacheStats {
  uint64_t hits;          /* choices found in the table */
  uint64_t misses;        /* choices computed while the table was on */
  uint64_t invalidations; /* tables emptied because the view changed */
  uint64_t summaries;     /* view summaries computed */
  int entries;            /* choices kept now */
  int capacity;           /* MEND_TUNE_CACHE in force */
};

/* The summary of `view` (view->nRanks ranks, rankCap set): the planner's, recomputed (and the
 * table emptied) when the view is not the one summarised last; or, when MEND_TUNE_CACHE is 0,
 * computed into *fresh (release with mendTuneViewSumFree).  *sum points to one or the other. */
ncclResult_t mendTuneCacheView(struct mendPlanner* pl, const struct mendPlanView* view, struct mendTuneViewSum* fresh,
                               const struct mendTuneViewSum** sum);
void mendTuneViewSumFree(struct mendTuneViewSum* sum);
/* The kept choice for key under the view last summarised: 1 and *choice set, or 0. */
int mendTuneCacheFind(struct mendPlanner* pl, const struct mendTuneKey* key, struct mendReplanChoice* choice);
/* Keep a computed choice (the oldest entry goes when the table is full; nothing when it is off). */
void mendTuneCacheAdd(struct mendPlanner* pl, const struct mendTuneKey* key, const struct mendReplanChoice* choice);
/* Release a planner's table (mendPlannerFree). */
void mendTuneCacheFree(struct mendTuneCache* cache);
/* Counters of pl's table (zeros when it has none). */
void mendTuneCacheGetStats(const struct mendPlanner* pl, struct mendTuneCacheStats* st);

#ifdef __cplusplus
}
#endif

#endif
