/*
 * Communicator creation: ncclGetUniqueId, ncclCommInitRank, ncclCommInitRankConfig,
 * ncclCommInitRankScalable and ncclCommInitAll.  Phases: validate arguments -> allocate the comm
 * (INITIALIZING) -> job [detect device -> bootstrap -> peers/layout/transports (init_peers.c) -> READY].
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "bootstrap.h"
#include "bootstrap_priv.h"
#include "checks.h"
#include "comm.h"
#include "group.h"
#include "init.h"
#include "misc/debug.h"
#include "misc/param.h"
#include "misc/cudrv.h"
#include "misc/version.h"

static pthread_once_t initOnce = PTHREAD_ONCE_INIT;
static void initOnceFn(void) {
  /* The banner names the CUDA driver's version when the first caller has a device current (device
   * mode), as NCCL's names its CUDA; "+host" otherwise. */
  int driver = 0;
  if (mendCuCurrentDevice() >= 0 && mendCu.cuDriverGetVersion(&driver) == MEND_CU_SUCCESS) mendVersionSetCuda(driver);
  mendPrintVersionBanner();
  mendParamCheckEnv();
}
void mendInitOnce(void) { pthread_once(&initOnce, initOnceFn); }

struct initArgs {
  struct ncclComm* comm; /* communicator being created */
  int nIds;              /* unique ids (roots) */
  ncclUniqueId ids[];    /* copies of the caller's ids */
};

static ncclResult_t initJob(void* p) {
  struct initArgs* a = p;
  struct ncclComm* comm = a->comm;
  ncclResult_t res = mendInitDetectDevice(comm);
  if (res == ncclSuccess) res = mendBootstrapInit(comm, a->nIds, a->ids);
  if (res == ncclSuccess) res = mendInitFinish(comm);
  if (res != ncclSuccess && mendCommAborted(comm)) INFO(NCCL_INIT, "Init of rank %d stopped by abort", comm->rank);
  mendInitSetOutcome(comm, res);
  return res;
}

/* Shared by every init entry point once the arguments are known to be sane. */
static ncclResult_t initCommon(ncclComm_t* newcomm, int nRanks, int rank, int nIds, const ncclUniqueId* ids,
                               const ncclConfig_t* config, const char* api) {
  struct mendConfig cfg;
  struct ncclComm* comm = NULL;
  pthread_once(&initOnce, initOnceFn);
  MENDCHECK(mendConfigParse(config, NULL, &cfg));
  MENDCHECK(mendCommAlloc(&comm, nRanks, rank, &cfg));
  comm->cudaDev = mendCuCurrentDevice(); /* device mode when the caller has a CUDA device current */
  struct initArgs* args = malloc(sizeof(*args) + (size_t)nIds * sizeof(ncclUniqueId));
  if (args == NULL) {
    WARN("%s: out of memory", api);
    mendCommFree(comm);
    return ncclSystemError;
  }
  args->comm = comm;
  args->nIds = nIds;
  memcpy(args->ids, ids, (size_t)nIds * sizeof(ncclUniqueId));
  int inGroup = mendGroupDepth() > 0;
  ncclResult_t res = mendCommLaunchJob(comm, initJob, args, free);
  if (res == ncclSuccess || res == ncclInProgress) {
    *newcomm = comm;
    return res;
  }
  /* A blocking init that failed leaves nothing behind; the caller gets NULL and the error. */
  if (!inGroup || atomic_load(&comm->state) != MEND_COMM_INITIALIZING) mendCommTeardown(comm, 1);
  return res;
}

static ncclResult_t checkRankArgs(ncclComm_t* newcomm, int nranks, int rank, const char* api) {
  MENDARGCHECK(newcomm != NULL, ncclInvalidArgument, "%s: comm pointer is NULL", api);
  *newcomm = NULL;
  MENDARGCHECK(nranks >= 1, ncclInvalidArgument, "%s: invalid nranks %d (must be >= 1)", api, nranks);
  MENDARGCHECK(rank >= 0 && rank < nranks, ncclInvalidArgument, "%s: invalid rank %d (nranks %d)", api, rank, nranks);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  MENDARGCHECK(uniqueId != NULL, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  pthread_once(&initOnce, initOnceFn);
  return mendBootstrapGetUniqueId(uniqueId);
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
         ncclConfig_t* config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config) {
  MENDCHECK(checkRankArgs(comm, nranks, rank, "ncclCommInitRankConfig"));
  return initCommon(comm, nranks, rank, 1, &commId, config, "ncclCommInitRankConfig");
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  MENDCHECK(checkRankArgs(comm, nranks, rank, "ncclCommInitRank"));
  return initCommon(comm, nranks, rank, 1, &commId, NULL, "ncclCommInitRank");
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
         ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                       ncclConfig_t* config) {
  const char* api = "ncclCommInitRankScalable";
  MENDCHECK(checkRankArgs(newcomm, nranks, myrank, api));
  MENDARGCHECK(commIds != NULL, ncclInvalidArgument, "%s: commIds is NULL", api);
  MENDARGCHECK(nId >= 1 && nId <= nranks, ncclInvalidArgument, "%s: invalid nId %d (must be in [1, nranks=%d])", api,
               nId, nranks);
  return initCommon(newcomm, nranks, myrank, nId, commIds, config, api);
}

/* ---------------------------------------------------------------- ncclCommInitAll */

struct initAllRank {
  ncclComm_t comm;     /* this rank's communicator */
  ncclResult_t res;    /* its init result */
  pthread_t thread;    /* thread running the init */
  int started;         /* thread must be joined */
};

struct initAllCtx {
  struct initAllRank* rank; /* the rank's slot */
  struct initArgs* args;    /* its job argument */
};

static void* initAllRun(void* p) {
  struct initAllCtx* c = p;
  c->rank->res = initJob(c->args);
  return NULL;
}

/* Host mode: entries need only be non-negative and distinct.  Device mode (a CUDA driver with
 * devices): entries are device ordinals, and one device may appear several times (ranks sharing a
 * GPU, which Mend allows). */
static ncclResult_t checkDevlist(int ndev, const int* devlist) {
  int count = 0;
  if (mendCuAvailable()) mendCu.cuDeviceGetCount(&count);
  if (!devlist && count > 0)
    MENDARGCHECK(ndev <= count, ncclInvalidArgument, "ncclCommInitAll: %d devices asked, %d present (pass a devlist "
                 "to place several ranks on one device)", ndev, count);
  for (int i = 0; devlist && i < ndev; i++) {
    MENDARGCHECK(devlist[i] >= 0, ncclInvalidArgument, "ncclCommInitAll: invalid device %d at devlist[%d]", devlist[i], i);
    if (count > 0) {
      MENDARGCHECK(devlist[i] < count, ncclInvalidArgument, "ncclCommInitAll: device %d at devlist[%d] does not exist "
                   "(%d devices)", devlist[i], i, count);
      continue;
    }
    for (int j = 0; j < i; j++)
      MENDARGCHECK(devlist[j] != devlist[i], ncclInvalidArgument, "ncclCommInitAll: duplicate device %d in devlist",
                   devlist[i]);
  }
  return ncclSuccess;
}

/* ndev ranks in this process, one init thread each.  inner: the library's own (host mode always, and
 * they measure no constants themselves: comm->calibInner). */
static ncclResult_t initAll(ncclComm_t* comms, int ndev, const int* devlist, int inner) {
  ncclUniqueId id;
  MENDCHECK(mendBsGetLoopbackId(&id));
  struct mendConfig cfg;
  MENDCHECK(mendConfigParse(NULL, NULL, &cfg));
  cfg.blocking = 1;  /* InitAll returns with every communicator ready */
  struct initAllRank* ranks = calloc((size_t)ndev, sizeof(*ranks));
  struct initAllCtx* ctx = calloc((size_t)ndev, sizeof(*ctx));
  ncclResult_t res = ranks && ctx ? ncclSuccess : ncclSystemError;
  for (int i = 0; i < ndev && res == ncclSuccess; i++) {
    res = mendCommAlloc(&ranks[i].comm, ndev, i, &cfg);
    if (res == ncclSuccess && !inner && mendCuAvailable()) ranks[i].comm->cudaDev = devlist ? devlist[i] : i;
    if (res == ncclSuccess) ranks[i].comm->calibInner = inner;
    ctx[i].rank = &ranks[i];
    ctx[i].args = res == ncclSuccess ? malloc(sizeof(struct initArgs) + sizeof(ncclUniqueId)) : NULL;
    if (res == ncclSuccess && ctx[i].args == NULL) res = ncclSystemError;
    if (res != ncclSuccess) break;
    ctx[i].args->comm = ranks[i].comm;
    ctx[i].args->nIds = 1;
    ctx[i].args->ids[0] = id;
  }
  for (int i = 0; i < ndev && res == ncclSuccess; i++) {
    int err = pthread_create(&ranks[i].thread, NULL, initAllRun, &ctx[i]);
    if (err != 0) {
      errno = err;
      WARN("ncclCommInitAll: cannot start an init thread: %m");
      res = ncclSystemError;
      for (int j = 0; j < i; j++) mendCommSetAbortFlag(ranks[j].comm, 1);  /* the others stop waiting */
      break;
    }
    ranks[i].started = 1;
  }
  for (int i = 0; ranks && i < ndev; i++)
    if (ranks[i].started) {
      pthread_join(ranks[i].thread, NULL);
      if (res == ncclSuccess) res = ranks[i].res;
    }
  for (int i = 0; ranks && i < ndev; i++) {
    if (res == ncclSuccess) comms[i] = ranks[i].comm;
    else if (ranks[i].comm) mendCommTeardown(ranks[i].comm, 1);
    if (ctx) free(ctx[i].args);
  }
  if (res == ncclSystemError && (!ranks || !ctx)) WARN("ncclCommInitAll: out of memory");
  free(ranks);
  free(ctx);
  return res;
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist);
ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  MENDARGCHECK(comms != NULL, ncclInvalidArgument, "ncclCommInitAll: comms is NULL");
  MENDARGCHECK(ndev >= 0, ncclInvalidArgument, "ncclCommInitAll: invalid device count %d", ndev);
  MENDCHECK(checkDevlist(ndev, devlist));
  if (ndev == 0) return ncclSuccess;
  pthread_once(&initOnce, initOnceFn);
  return initAll(comms, ndev, devlist, 0);
}

ncclResult_t mendCommInitInner(ncclComm_t* comms, int n) {
  pthread_once(&initOnce, initOnceFn);
  return initAll(comms, n, NULL, 1);
}
