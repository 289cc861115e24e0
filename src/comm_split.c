/*
 * Child communicators: ncclCommSplit and ncclCommShrink.  Both build the child's bootstrap over the
 * parent's (bootstrap_split.c), then run the common init phases (init_peers.c).
 *  - Split: every parent rank allgathers (color, key); ranks of one color are ordered by key, then by
 *    parent rank.  NCCL_SPLIT_NOCOLOR ranks take part in the allgather and get NULL.
 *  - Shrink: the survivors are the parent's ranks minus the excluded ones, in order; only survivors
 *    talk to each other, so excluded ranks may be dead.  NCCL_SHRINK_ABORT first stops the parent's
 *    in-flight work (as revoke does).
 * A non-blocking parent reports ncclInProgress from ncclCommGetAsyncError while its child is built.
 */
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "bootstrap.h"
#include "bootstrap_priv.h"
#include "checks.h"
#include "comm.h"
#include "init.h"
#include "misc/debug.h"

struct splitArgs {
  struct ncclComm* parent; /* communicator split from */
  struct ncclComm* child;  /* NULL for a NOCOLOR rank (split) */
  int color, key;          /* split arguments */
  int* members;            /* shrink: parent rank of each child rank */
};

struct colorKey {
  int color;  /* split color or NCCL_SPLIT_NOCOLOR */
  int key;    /* order inside the color */
  int rank;   /* parent rank */
};

static int byKeyThenRank(const void* a, const void* b) {
  const struct colorKey *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->rank - y->rank;
}

static void freeSplitArgs(void* p) {
  struct splitArgs* a = p;
  free(a->members);
  free(a);
}

/* The parent is busy while a non-blocking child is built; give it back its previous status. */
static void parentDone(struct splitArgs* a, ncclResult_t res) {
  int cur = ncclInProgress;
  ncclResult_t next = (res != ncclSuccess && a->child == NULL) ? res : ncclSuccess;
  atomic_compare_exchange_strong(&a->parent->asyncResult, &cur, (int)next);
}

/* Bring the child up on the member list (parent rank of each child rank). */
static ncclResult_t buildChild(struct splitArgs* a) {
  ncclResult_t res = mendInitDetectDevice(a->child);
  if (res == ncclSuccess) res = mendBootstrapSplit(a->parent, a->child, a->members);
  if (res == ncclSuccess) res = mendInitFinish(a->child);
  mendInitSetOutcome(a->child, res);
  return res;
}

static ncclResult_t splitJob(void* p) {
  struct splitArgs* a = p;
  struct ncclComm* parent = a->parent;
  int n = parent->nRanks, count = 0;
  struct colorKey* all = calloc((size_t)n, sizeof(*all));
  ncclResult_t res = all ? ncclSuccess : ncclSystemError;
  if (all) {
    all[parent->rank] = (struct colorKey){.color = a->color, .key = a->key, .rank = parent->rank};
    res = mendBootstrapAllGather(parent->bootstrap, all, sizeof(*all));
  }
  if (res == ncclSuccess && a->child) {
    for (int r = 0; r < n; r++)
      if (all[r].color == a->color) all[count++] = all[r];
    qsort(all, (size_t)count, sizeof(*all), byKeyThenRank);
    a->members = malloc((size_t)count * sizeof(int));
    if (a->members == NULL) res = ncclSystemError;
    for (int i = 0; a->members && i < count; i++) {
      a->members[i] = all[i].rank;
      if (all[i].rank == parent->rank) a->child->rank = i;
    }
    a->child->nRanks = count;
  }
  free(all);
  if (a->child) {
    if (res == ncclSuccess) res = buildChild(a);
    else mendInitSetOutcome(a->child, res);
  }
  parentDone(a, res);
  return res;
}

static ncclResult_t shrinkJob(void* p) {
  struct splitArgs* a = p;
  ncclResult_t res = buildChild(a);
  parentDone(a, res);
  return res;
}

/* Shared tail: allocate args, mark the parent busy, launch, hand out the child. */
static ncclResult_t launchChild(struct ncclComm* parent, struct ncclComm* child, struct splitArgs* a,
                                ncclResult_t (*job)(void*), ncclComm_t* newcomm) {
  struct ncclComm* owner = child ? child : parent;
  int cur = ncclSuccess;
  if (!owner->config.blocking) atomic_compare_exchange_strong(&parent->asyncResult, &cur, ncclInProgress);
  if (owner->initThreadRunning) mendCommJoinInitThread(owner, -1);  /* its own init finished long ago */
  ncclResult_t res = mendCommLaunchJob(owner, job, a, freeSplitArgs);
  if (res == ncclSuccess || res == ncclInProgress) {
    *newcomm = child;
    return res;
  }
  if (child && atomic_load(&child->state) != MEND_COMM_INITIALIZING) mendCommTeardown(child, 1);
  return res;
}

static ncclResult_t checkParent(struct ncclComm* comm, ncclComm_t* newcomm, const char* api) {
  MENDCHECK(mendCommCheck(comm, api));
  MENDARGCHECK(newcomm != NULL, ncclInvalidArgument, "%s: newcomm is NULL", api);
  *newcomm = NULL;
  int state = atomic_load(&comm->state);
  MENDARGCHECK(state == MEND_COMM_READY || state == MEND_COMM_REVOKED, ncclInvalidUsage,
               "%s: parent communicator %p is not ready (initializing, finalized or failed)", api, (void*)comm);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  MENDCHECK(checkParent(comm, newcomm, "ncclCommSplit"));
  MENDARGCHECK(color >= 0 || color == NCCL_SPLIT_NOCOLOR, ncclInvalidArgument,
               "ncclCommSplit: invalid color %d (must be >= 0 or NCCL_SPLIT_NOCOLOR)", color);
  struct mendConfig cfg;
  MENDCHECK(mendConfigParse(config, &comm->config, &cfg));
  struct ncclComm* child = NULL;
  if (color != NCCL_SPLIT_NOCOLOR) MENDCHECK(mendCommAlloc(&child, 0, -1, &cfg));  /* size known after the allgather */
  if (child) child->cudaDev = comm->cudaDev; /* a child runs where its parent does */
  struct splitArgs* a = calloc(1, sizeof(*a));
  if (a == NULL) {
    WARN("ncclCommSplit: out of memory");
    if (child) mendCommFree(child);
    return ncclSystemError;
  }
  *a = (struct splitArgs){.parent = comm, .child = child, .color = color, .key = key};
  if (child) child->parent = comm;
  return launchChild(comm, child, a, splitJob, newcomm);
}

static int cmpInt(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  return (x > y) - (x < y);
}

/* Survivors in parent order; the caller's list is sorted in place first, as NCCL does. */
static ncclResult_t survivors(struct ncclComm* comm, int* excl, int nExcl, int** members, int* count, int* myRank) {
  qsort(excl, (size_t)nExcl, sizeof(int), cmpInt);
  for (int i = 0; i < nExcl; i++) {
    MENDARGCHECK(excl[i] >= 0 && excl[i] < comm->nRanks, ncclInvalidArgument,
                 "ncclCommShrink: excluded rank %d out of range (nranks %d)", excl[i], comm->nRanks);
    MENDARGCHECK(excl[i] != comm->rank, ncclInvalidArgument,
                 "ncclCommShrink: rank %d is in the exclude list and must not call ncclCommShrink", comm->rank);
  }
  int* m = malloc((size_t)comm->nRanks * sizeof(int));
  if (m == NULL) {
    WARN("ncclCommShrink: out of memory");
    return ncclSystemError;
  }
  int n = 0, j = 0;
  for (int r = 0; r < comm->nRanks; r++) {
    while (j < nExcl && excl[j] < r) j++;
    if (j < nExcl && excl[j] == r) continue;
    if (r == comm->rank) *myRank = n;
    m[n++] = r;
  }
  *members = m;
  *count = n;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
         ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                             ncclConfig_t* config, int shrinkFlags) {
  MENDCHECK(checkParent(comm, newcomm, "ncclCommShrink"));
  MENDARGCHECK(excludeRanksList != NULL && excludeRanksCount > 0, ncclInvalidArgument,
               "ncclCommShrink: excludeRanksList must be non-NULL and excludeRanksCount > 0 (got %p, %d)",
               (void*)excludeRanksList, excludeRanksCount);
  MENDARGCHECK(shrinkFlags == NCCL_SHRINK_DEFAULT || shrinkFlags == NCCL_SHRINK_ABORT, ncclInvalidArgument,
               "ncclCommShrink: invalid shrinkFlags 0x%x", shrinkFlags);
  struct mendConfig cfg;
  MENDCHECK(mendConfigParse(config, &comm->config, &cfg));
  int *members = NULL, count = 0, myRank = -1;
  MENDCHECK(survivors(comm, excludeRanksList, excludeRanksCount, &members, &count, &myRank));
  if (shrinkFlags & NCCL_SHRINK_ABORT) {
    /* Stop the parent's in-flight work for good; its bootstrap stays up to build the child. */
    mendCommStopInflight(comm, "ncclCommShrink");
    atomic_store(&comm->state, MEND_COMM_REVOKED);
  }
  struct ncclComm* child = NULL;
  struct splitArgs* a = calloc(1, sizeof(*a));
  if (a == NULL || mendCommAlloc(&child, count, myRank, &cfg) != ncclSuccess) {
    WARN("ncclCommShrink: out of memory");
    free(a);
    free(members);
    return ncclSystemError;
  }
  child->cudaDev = comm->cudaDev;
  *a = (struct splitArgs){.parent = comm, .child = child, .members = members};
  child->parent = comm;
  return launchChild(comm, child, a, shrinkJob, newcomm);
}
