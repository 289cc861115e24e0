/*
 * Plan reuse (plan_cache.h).  The cache belongs to the communicator's planner; a kept plan is lent to
 * one run at a time (inUse) and goes back when the run ends.  A new plan view (epoch or hash) drops
 * every kept plan at the first lookup that sees it, so a plan never outlives the rings, trees and
 * NICs it was built from.
 */
#include "enqueue/plan_cache.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "device/opsig.h"
#include "enqueue/plan.h"
#include "enqueue/planview.h"
#include "misc/param.h"
#include "misc/utils.h"

#define PLAN_CACHE_MAX 256 /* MEND_PLAN_CACHE is clamped to this */

/* What a plan depends on besides the communicator. */
struct planKey {
  int func;               /* enum mendFunc */
  size_t count;           /* NCCL's count */
  int type;               /* ncclDataType_t */
  struct mendRedOp redop; /* compared field by field (padding is not part of the key) */
  int root;               /* root or peer; -1 */
  const void* sendbuff;   /* works embed buffer addresses */
  const void* recvbuff;
};

struct planEntry {
  struct planKey key;     /* signature of the kept plan */
  struct mendPlan* plan;  /* NULL: free entry */
  int inUse;              /* lent to a run */
  uint64_t lastUse;       /* LRU stamp */
};

struct mendPlanCache {
  atomic_flag lock;         /* a communicator's calls come from one thread at a time; the lock is cheap insurance
                             * (statistics read from another thread): a flag, not a mutex, since a small call
                             * takes it twice and a mutex pair cost 8-14 % of a one-rank 8-byte AllReduce */
  int cap;                  /* entries (MEND_PLAN_CACHE) */
  struct planEntry* e;      /* [cap] */
  int last;                 /* the entry found or kept last: a loop of the same call hits it first */
  uint32_t epoch;           /* view the kept plans were built under */
  uint64_t hash;
  int haveView;             /* epoch/hash are set */
  uint64_t clock;           /* LRU clock */
  struct mendPlanCacheStats st;
};

static void lockCache(struct mendPlanCache* c) {
  for (int spins = 0; atomic_flag_test_and_set_explicit(&c->lock, memory_order_acquire); spins++) {
    if (spins >= 64) sched_yield(); /* the holder may be off its CPU */
  }
}

static void unlockCache(struct mendPlanCache* c) { atomic_flag_clear_explicit(&c->lock, memory_order_release); }

static void keyOf(const struct mendOp* op, struct planKey* k) {
  memset(k, 0, sizeof(*k));
  k->func = op->func;
  k->count = op->count;
  k->type = (int)op->type;
  k->redop.kind = op->redop.kind;
  k->redop.type = op->redop.type;
  k->redop.scalar = op->redop.scalar;
  k->redop.scalarPtr = op->redop.scalarPtr;
  k->redop.nRanks = op->redop.nRanks;
  k->root = op->root;
  k->sendbuff = op->sendbuff;
  k->recvbuff = op->recvbuff;
}

static int keyEq(const struct planKey* a, const struct planKey* b) {
  return a->func == b->func && a->count == b->count && a->type == b->type && a->redop.kind == b->redop.kind &&
         a->redop.type == b->redop.type && a->redop.scalar == b->redop.scalar &&
         a->redop.scalarPtr == b->redop.scalarPtr && a->redop.nRanks == b->redop.nRanks && a->root == b->root &&
         a->sendbuff == b->sendbuff && a->recvbuff == b->recvbuff;
}

/* The communicator's cache, made on first use; NULL (and success) when reuse is off here. */
static ncclResult_t cacheGet(struct ncclComm* comm, struct mendPlanCache** out) {
  *out = NULL;
  if (!comm->hostMode) return ncclSuccess;
  struct mendPlanner* pl;
  MENDCHECK(mendPlannerGet(comm, &pl));
  if (pl->cache == NULL) {
    int64_t cap = mendParamPlanCache();
    if (cap <= 0) return ncclSuccess;
    if (cap > PLAN_CACHE_MAX) cap = PLAN_CACHE_MAX;
    struct mendPlanCache* c;
    MENDCHECK(MENDCALLOC(c, 1));
    if (mendCalloc((void**)&c->e, (size_t)cap, sizeof(*c->e)) != ncclSuccess) {
      free(c);
      return ncclSystemError;
    }
    c->cap = (int)cap;
    atomic_flag_clear(&c->lock);
    pl->cache = c;
  }
  *out = pl->cache;
  return ncclSuccess;
}

/* Under the lock: drop the idle kept plans when the view changed (a lent one is dropped on release). */
static void checkView(struct mendPlanCache* c, const struct mendPlanView* v) {
  if (c->haveView && c->epoch == v->epoch && c->hash == v->hash) return;
  for (int i = 0; i < c->cap; i++) {
    if (c->e[i].plan == NULL) continue;
    c->st.invalidations++;
    if (c->e[i].inUse) {
      c->e[i].inUse = -1; /* stale: freed when its run ends */
      continue;
    }
    mendPlanFree(c->e[i].plan);
    c->e[i].plan = NULL;
    c->st.entries--;
  }
  c->epoch = v->epoch;
  c->hash = v->hash;
  c->haveView = 1;
}

/* Under the lock: keep `plan` under `key`, replacing the least recently used idle entry. */
static int keep(struct mendPlanCache* c, const struct planKey* key, struct mendPlan* plan) {
  int victim = -1;
  for (int i = 0; i < c->cap; i++) {
    if (c->e[i].plan == NULL) { victim = i; break; }
    if (!c->e[i].inUse && (victim < 0 || c->e[i].lastUse < c->e[victim].lastUse)) victim = i;
  }
  if (victim < 0) return 0; /* every entry is lent */
  if (c->e[victim].plan) mendPlanFree(c->e[victim].plan);
  else c->st.entries++;
  c->e[victim] = (struct planEntry){.key = *key, .plan = plan, .inUse = 1, .lastUse = ++c->clock};
  c->last = victim;
  return 1;
}

static int reusable(const struct mendPlan* plan) {
  /* Host-mode stages and scratch are filled while planning: such a plan holds one call's data. */
  return plan->nStages == 0 && plan->nScratch == 0 && plan->nJoins == 0;
}

ncclResult_t mendPlanCacheBuild(struct ncclComm* comm, const struct mendOp* op, struct mendPlan** plan) {
  struct mendPlanCache* c;
  MENDCHECK(cacheGet(comm, &c));
  if (c == NULL) return mendPlanBuild(comm, op, 1, plan);
  const struct mendPlanView* view;
  MENDCHECK(mendPlannerViewAt(comm, op->opCount, &view));
  struct planKey key;
  keyOf(op, &key);
  lockCache(c);
  checkView(c, view);
  for (int k = -1; k < c->cap; k++) {
    int i = k < 0 ? c->last : k; /* the last entry first */
    struct planEntry* e = c->e + i;
    if (e->plan == NULL || e->inUse || !keyEq(&e->key, &key)) continue;
    e->inUse = 1;
    e->lastUse = ++c->clock;
    c->last = i;
    c->st.hits++;
    *plan = e->plan;
    unlockCache(c);
    /* As mendPlanBuildView logs it: every rank names the view each op ran under. */
    TRACE(NCCL_TUNING, "%s: opCount %llu rank %d plan view epoch %u hash %016llx (plan reused)", mendFuncName(op->func),
          (unsigned long long)op->opCount, comm->rank, view->epoch,
          (unsigned long long)mendPlanViewOpHash(view, op->opCount));
    mendOpSigFill((*plan)->works, (*plan)->nWorks, op); /* this call's collective count */
    return ncclSuccess;
  }
  c->st.misses++;
  unlockCache(c);
  MENDCHECK(mendPlanBuild(comm, op, 1, plan));
  /* A tuner plugin is asked for every call, as NCCL asks it: its answer may change between calls. */
  if (!reusable(*plan) || comm->planner->tuner) return ncclSuccess;
  lockCache(c);
  keep(c, &key, *plan);
  unlockCache(c);
  return ncclSuccess;
}

void mendPlanCacheRelease(struct ncclComm* comm, struct mendPlan* plan, int ok) {
  if (plan == NULL) return;
  struct mendPlanCache* c = comm && comm->planner ? comm->planner->cache : NULL;
  if (c) {
    lockCache(c);
    for (int k = -1; k < c->cap; k++) {
      struct planEntry* e = c->e + (k < 0 ? c->last : k); /* the last entry first */
      if (e->plan != plan) continue;
      if (ok && e->inUse == 1) {
        e->inUse = 0;
      } else {
        e->plan = NULL;
        e->inUse = 0;
        c->st.entries--;
        mendPlanFree(plan);
      }
      unlockCache(c);
      return;
    }
    unlockCache(c);
  }
  mendPlanFree(plan);
}

void mendPlanCacheFree(struct mendPlanCache* c) {
  if (c == NULL) return;
  for (int i = 0; i < c->cap; i++) mendPlanFree(c->e[i].plan);
  free(c->e);
  free(c);
}

void mendPlanCacheGetStats(struct ncclComm* comm, struct mendPlanCacheStats* st) {
  memset(st, 0, sizeof(*st));
  struct mendPlanCache* c = comm && comm->planner ? comm->planner->cache : NULL;
  if (c == NULL) return;
  lockCache(c);
  *st = c->st;
  unlockCache(c);
}
