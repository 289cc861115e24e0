/*
 * Plan reuse: a communicator keeps the plans of its last few single-operation groups, keyed by
 * everything a plan depends on (function, count, datatype, reduction, root, send and receive
 * buffers, plan view epoch and hash).  A later call with the same key runs the kept plan instead of
 * planning again: the small-message short path, where planning costs as much as the transfer.
 * Host mode only (a device launch may still read its plan after the call returns).
 */
#ifndef MEND_ENQUEUE_PLAN_CACHE_H_
#define MEND_ENQUEUE_PLAN_CACHE_H_

#include <stdint.h>

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ncclComm;
struct mendOp;
struct mendPlan;
struct mendPlanCache;

/* Counters of a communicator's cache (tests, logs). */
struct mendPlanCacheStats {
  uint64_t hits;          /* calls that ran a kept plan */
  uint64_t misses;        /* calls that planned (eligible or not) */
  uint64_t invalidations; /* kept plans dropped because the plan view changed */
  int entries;            /* plans kept now */
};

/* The plan of the single operation `op` of comm: a kept one (signature refreshed, connectors looked
 * up again) or a new one from mendPlanBuild, kept for next time when eligible.  Release it with
 * mendPlanCacheRelease, never mendPlanFree. */
ncclResult_t mendPlanCacheBuild(struct ncclComm* comm, const struct mendOp* op, struct mendPlan** plan);
/* Done with a plan from mendPlanCacheBuild (or any plan): a kept plan goes back to the cache (dropped
 * when ok is 0: a failed run may have left its connectors unusable), any other is freed. */
void mendPlanCacheRelease(struct ncclComm* comm, struct mendPlan* plan, int ok);
/* Drop every kept plan (communicator destroy; mendPlannerFree calls it). */
void mendPlanCacheFree(struct mendPlanCache* cache);
/* Counters of comm's cache (zeros when it has none). */
void mendPlanCacheGetStats(struct ncclComm* comm, struct mendPlanCacheStats* st);

#ifdef __cplusplus
}
#endif

#endif
