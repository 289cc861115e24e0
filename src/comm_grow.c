/*
 * ncclCommGetUniqueId and ncclCommGrow (NCCL 2.29): a communicator grows by new ranks.
 *  - One existing rank, the coordinator, calls ncclCommGetUniqueId(comm): a grow id (bootstrap_grow.h)
 *    whose root, in the coordinator's process, will serve the grow's rendezvous.  The application
 *    gives it to the new ranks; the existing ranks need not see it (the library hands it to them).
 *    One id at a time: the next call fails until a grow has used it.
 *  - ncclCommGrow is collective over the old ranks and the new ones.  Existing ranks (comm, rank -1)
 *    first allgather over comm's own network who holds the id, the new size and any id they were
 *    passed, so they all agree or all fail with the same WARN; then every rank of the new
 *    communicator, old ones keeping their numbers and new ones taking theirs (from the old size up),
 *    meets at the id's root as an init would, and the common init phases (init_peers.c) make a full
 *    communicator: transports, resilience, every operation, split, shrink, grow, abort.
 *  - A grow that passed its argument checks uses the id up, whether it succeeds or fails (a failure
 *    stops the root); a destroyed communicator's unused id is retired too.
 * A non-blocking parent reports ncclInProgress from ncclCommGetAsyncError while it grows, as for split.
 */
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "bootstrap.h"
#include "bootstrap_grow.h"
#include "bootstrap_priv.h"
#include "checks.h"
#include "comm.h"
#include "group.h"
#include "init.h"
#include "misc/cudrv.h"
#include "misc/debug.h"

#define GROW_RETIRE_MS 500 /* bound on stopping an unused grow root (it lives in this process) */

/* The coordinator's id (comm->grow, under comm->lock). */
struct mendGrowPending {
  ncclUniqueId id; /* what ncclCommGetUniqueId returned */
  int inUse;       /* a grow on this rank has taken it and runs */
};

struct growArgs {
  struct ncclComm* parent; /* existing ranks: the communicator grown; NULL on a new rank */
  struct ncclComm* child;  /* the communicator being built */
  int holdsId;             /* existing rank: this rank made the id (comm->grow is ours to clear) */
  int passedId;            /* existing rank: the caller passed an id too */
  ncclUniqueId id;         /* the id to meet at: the new rank's, or the coordinator's */
  ncclUniqueId passed;     /* existing rank: the id the caller passed */
};

/* What every existing rank tells the others before the rendezvous. */
struct growVote {
  int32_t nRanks;       /* the new size it was called with */
  int32_t holdsId;      /* 1: it is the coordinator; `id` is its id */
  int32_t passedId;     /* 1: its caller passed `passed` */
  int32_t pad;          /* zero */
  ncclUniqueId id;      /* the coordinator's id */
  ncclUniqueId passed;  /* what its caller passed */
};

/* ---------------------------------------------------------------- pending id */

void mendCommGrowRelease(struct ncclComm* comm) {
  pthread_mutex_lock(&comm->lock);
  struct mendGrowPending* p = comm->grow;
  comm->grow = NULL;
  pthread_mutex_unlock(&comm->lock);
  if (p == NULL) return;
  mendBsGrowIdRetire(&p->id, GROW_RETIRE_MS);
  free(p);
}

/* The grow on this rank is over: the id is used up (its root stopped when the grow failed). */
static void consumeId(struct growArgs* a, ncclResult_t res) {
  if (!a->holdsId) return;
  pthread_mutex_lock(&a->parent->lock);
  struct mendGrowPending* p = a->parent->grow;
  a->parent->grow = NULL;
  pthread_mutex_unlock(&a->parent->lock);
  if (res != ncclSuccess) mendBsGrowIdRetire(&a->id, GROW_RETIRE_MS);
  free(p);
}

NCCL_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId) {
  MENDCHECK(mendCommCheck(comm, "ncclCommGetUniqueId"));
  MENDARGCHECK(uniqueId != NULL, ncclInvalidArgument, "ncclCommGetUniqueId: uniqueId is NULL");
  int state = atomic_load(&comm->state);
  MENDARGCHECK(state == MEND_COMM_READY || state == MEND_COMM_REVOKED, ncclInvalidUsage,
               "ncclCommGetUniqueId: communicator %p is not ready (initializing, finalized or failed)", (void*)comm);
  struct mendGrowPending* p = calloc(1, sizeof(*p));
  if (p == NULL) {
    WARN("ncclCommGetUniqueId: out of memory");
    return ncclSystemError;
  }
  pthread_mutex_lock(&comm->lock);
  ncclResult_t res = ncclSuccess;
  if (comm->grow != NULL) {
    WARN("ncclCommGetUniqueId: rank %d already made a grow id that no ncclCommGrow has used yet (one id at a time: "
         "grow with it first)", comm->rank);
    res = ncclInvalidUsage;
  } else {
    res = mendBsGrowIdCreate(&comm->bootstrap->listenAddr, comm->nRanks, &p->id);
    if (res == ncclSuccess) comm->grow = p;
  }
  pthread_mutex_unlock(&comm->lock);
  if (res != ncclSuccess) {
    free(p);
    return res;
  }
  *uniqueId = p->id;
  INFO(NCCL_INIT, "comm %p rank %d: grow id made (the grown communicator's new ranks start at %d)", (void*)comm,
       comm->rank, comm->nRanks);
  return ncclSuccess;
}

/* ---------------------------------------------------------------- the grow */

/* Existing ranks agree on the id and the size, all of them the same way. */
static ncclResult_t agree(struct growArgs* a) {
  struct ncclComm* parent = a->parent;
  int n = parent->nRanks;
  struct growVote* all = calloc((size_t)n, sizeof(*all));
  if (all == NULL) {
    WARN("ncclCommGrow: out of memory");
    return ncclSystemError;
  }
  all[parent->rank] = (struct growVote){.nRanks = a->child->nRanks, .holdsId = a->holdsId, .passedId = a->passedId,
                                        .id = a->id, .passed = a->passed};
  ncclResult_t res = mendBootstrapAllGather(parent->bootstrap, all, sizeof(*all));
  int coord = -1;
  for (int r = 0; res == ncclSuccess && r < n; r++) {
    if (all[r].nRanks != all[0].nRanks) {
      WARN("ncclCommGrow: the existing ranks disagree on the new size: rank 0 asked for %d ranks, rank %d for %d",
           all[0].nRanks, r, all[r].nRanks);
      res = ncclInvalidArgument;
    } else if (all[r].holdsId && coord >= 0) {
      WARN("ncclCommGrow: ranks %d and %d both called ncclCommGetUniqueId on this communicator (one coordinator "
           "makes the id)", coord, r);
      res = ncclInvalidUsage;
    } else if (all[r].holdsId) {
      coord = r;
    }
  }
  if (res == ncclSuccess && coord < 0) {
    WARN("ncclCommGrow: no rank of the %d-rank communicator called ncclCommGetUniqueId before growing it", n);
    res = ncclInvalidUsage;
  }
  for (int r = 0; res == ncclSuccess && r < n; r++) {
    if (!all[r].passedId || memcmp(&all[r].passed, &all[coord].id, sizeof(ncclUniqueId)) == 0) continue;
    WARN("ncclCommGrow: existing rank %d passed a uniqueId that is not the one rank %d made for this communicator "
         "(existing ranks pass NULL or that id)", r, coord);
    res = ncclInvalidArgument;
  }
  if (res == ncclSuccess) a->id = all[coord].id;
  free(all);
  return res;
}

/* A non-blocking parent is busy while it grows; give it back its previous status. */
static void parentDone(struct growArgs* a) {
  int cur = ncclInProgress;
  atomic_compare_exchange_strong(&a->parent->asyncResult, &cur, (int)ncclSuccess);
}

static ncclResult_t growJob(void* p) {
  struct growArgs* a = p;
  struct ncclComm* comm = a->child;
  ncclResult_t res = a->parent ? agree(a) : ncclSuccess;
  if (res == ncclSuccess) res = mendInitDetectDevice(comm);
  if (res == ncclSuccess) res = mendBootstrapInit(comm, 1, &a->id);
  if (res == ncclSuccess) res = mendInitFinish(comm);
  if (res != ncclSuccess && mendCommAborted(comm)) INFO(NCCL_INIT, "Grow of rank %d stopped by abort", comm->rank);
  mendInitSetOutcome(comm, res);
  if (a->parent) {
    consumeId(a, res);
    parentDone(a);
  }
  if (res == ncclSuccess)
    INFO(NCCL_INIT, "comm %p rank %d: grown to %d ranks (%s rank)", (void*)comm, comm->rank, comm->nRanks,
         a->parent ? "existing" : "new");
  return res;
}

/* Run the job as the child's config and the group say; hand out the child. */
static ncclResult_t launch(struct growArgs* a, ncclComm_t* newcomm) {
  struct ncclComm* child = a->child;
  struct ncclComm* parent = a->parent;
  int cur = ncclSuccess;
  if (parent && !child->config.blocking) atomic_compare_exchange_strong(&parent->asyncResult, &cur, ncclInProgress);
  int inGroup = mendGroupDepth() > 0;
  ncclResult_t res = mendCommLaunchJob(child, growJob, a, free);
  if (res == ncclSuccess || res == ncclInProgress) {
    *newcomm = child;
    return res;
  }
  /* A blocking grow that failed leaves nothing behind; the caller gets NULL and the error.  A job that
   * could not even start left the coordinator's id in place: it is used up all the same. */
  if (parent) mendCommGrowRelease(parent);
  if (!inGroup || atomic_load(&child->state) != MEND_COMM_INITIALIZING) mendCommTeardown(child, 1);
  return res;
}

/* An existing rank: its communicator, rank -1, more ranks than it has, and the id if any. */
static ncclResult_t checkExistingRank(struct ncclComm* comm, int nRanks, const ncclUniqueId* uniqueId, int rank) {
  MENDCHECK(mendCommCheck(comm, "ncclCommGrow"));
  MENDARGCHECK(rank == -1, ncclInvalidArgument, "ncclCommGrow: an existing rank must pass rank -1 (got %d)", rank);
  MENDARGCHECK(nRanks > comm->nRanks, ncclInvalidArgument,
               "ncclCommGrow: nRanks %d must exceed the communicator's size %d", nRanks, comm->nRanks);
  int state = atomic_load(&comm->state);
  MENDARGCHECK(state == MEND_COMM_READY || state == MEND_COMM_REVOKED, ncclInvalidUsage,
               "ncclCommGrow: communicator %p is not ready (initializing, finalized or failed)", (void*)comm);
  int oldN = 0;
  const char* why = NULL;
  MENDARGCHECK(uniqueId == NULL || mendBsGrowIdParse(uniqueId, &oldN, &why), ncclInvalidArgument,
               "ncclCommGrow: the uniqueId an existing rank passed is refused: %s", why);
  MENDARGCHECK(uniqueId == NULL || oldN == comm->nRanks, ncclInvalidArgument,
               "ncclCommGrow: the uniqueId was made for a communicator of %d ranks, this one has %d", oldN,
               comm->nRanks);
  return ncclSuccess;
}

/* A new rank: no communicator, a grow id, a rank from the old size (the id tells it) up to nRanks. */
static ncclResult_t checkNewRank(int nRanks, const ncclUniqueId* uniqueId, int rank, int* oldN) {
  MENDARGCHECK(uniqueId != NULL, ncclInvalidArgument, "ncclCommGrow: a new rank (comm NULL) needs the uniqueId");
  MENDARGCHECK(nRanks > 1, ncclInvalidArgument, "ncclCommGrow: invalid nRanks %d", nRanks);
  MENDARGCHECK(rank >= 0 && rank < nRanks, ncclInvalidArgument, "ncclCommGrow: new rank %d outside [0, %d)", rank,
               nRanks);
  const char* why = NULL;
  MENDARGCHECK(mendBsGrowIdParse(uniqueId, oldN, &why), ncclInvalidArgument,
               "ncclCommGrow: new rank %d: the uniqueId is refused: %s", rank, why);
  MENDARGCHECK(nRanks > *oldN, ncclInvalidArgument,
               "ncclCommGrow: nRanks %d must exceed the size %d of the communicator being grown", nRanks, *oldN);
  MENDARGCHECK(rank >= *oldN, ncclInvalidArgument,
               "ncclCommGrow: new rank %d collides with an existing rank (the communicator has %d ranks; new ranks "
               "are %d to %d)", rank, *oldN, *oldN, nRanks - 1);
  return ncclSuccess;
}

/* The coordinator's id for this grow (marked in use), or none. */
static ncclResult_t takeId(struct ncclComm* comm, struct growArgs* a) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&comm->lock);
  if (comm->grow && comm->grow->inUse) {
    WARN("ncclCommGrow: a grow of communicator %p is already running on this rank", (void*)comm);
    res = ncclInvalidUsage;
  } else if (comm->grow) {
    comm->grow->inUse = 1;
    a->holdsId = 1;
    a->id = comm->grow->id;
  }
  pthread_mutex_unlock(&comm->lock);
  return res;
}

NCCL_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
         ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  MENDARGCHECK(newcomm != NULL, ncclInvalidArgument, "ncclCommGrow: newcomm is NULL");
  *newcomm = NULL;
  int oldN = 0;
  if (comm != NULL) MENDCHECK(checkExistingRank(comm, nRanks, uniqueId, rank));
  else MENDCHECK(checkNewRank(nRanks, uniqueId, rank, &oldN));
  mendInitOnce();
  struct mendConfig cfg;
  MENDCHECK(mendConfigParse(config, comm ? &comm->config : NULL, &cfg)); /* NULL: the parent's, or defaults */
  struct growArgs* a = calloc(1, sizeof(*a));
  struct ncclComm* child = NULL;
  if (a == NULL || mendCommAlloc(&child, nRanks, comm ? comm->rank : rank, &cfg) != ncclSuccess) {
    WARN("ncclCommGrow: out of memory");
    free(a);
    return ncclSystemError;
  }
  a->child = child;
  if (comm) {
    ncclResult_t res = takeId(comm, a);
    if (res != ncclSuccess) {
      mendCommFree(child);
      free(a);
      return res;
    }
    a->parent = comm;
    a->passedId = uniqueId != NULL;
    if (uniqueId) a->passed = *uniqueId;
    child->parent = comm;
    child->cudaDev = comm->cudaDev; /* an existing rank stays where it runs */
  } else {
    a->id = *uniqueId;
    child->cudaDev = mendCuCurrentDevice(); /* device mode when the caller has a CUDA device current */
  }
  INFO(NCCL_INIT, "ncclCommGrow: %s rank %d joins a communicator of %d ranks", comm ? "existing" : "new", child->rank,
       nRanks);
  return launch(a, newcomm);
}
