/*
 * Communicator handles: allocation, validation at the API boundary, asynchronous errors, the
 * simple queries (count, rank, device), and how creation jobs are run (inline, thread, group).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "checks.h"
#include "comm.h"
#include "device/engine.h"
#include "device/kernel.h"
#include "enqueue/plan.h"
#include "group.h"
#include "init.h"
#include "misc/debug.h"
#include "misc/utils.h"

ncclResult_t mendCommCheck(struct ncclComm* comm, const char* api) {
  if (comm == NULL) {
    WARN("%s: invalid communicator (NULL)", api);
    return ncclInvalidArgument;
  }
  if (comm->magic != MEND_COMM_MAGIC) {
    WARN("%s: invalid communicator %p (bad magic: destroyed, or not a communicator)", api, (void*)comm);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

void mendCommSetAsyncError(struct ncclComm* comm, ncclResult_t res) {
  if (comm == NULL || res == ncclSuccess || res == ncclInProgress) return;
  int cur = atomic_load(&comm->asyncResult);
  while ((cur == ncclSuccess || cur == ncclInProgress) &&
         !atomic_compare_exchange_weak(&comm->asyncResult, &cur, (int)res)) {
  }
}

int mendCommWaitIdle(struct ncclComm* comm, int64_t ms) {
  int64_t until = mendTimeMs() + ms;
  while (atomic_load_explicit(&comm->inflight, memory_order_acquire) > 0) {
    if (mendTimeMs() > until) return 0;
    if (comm->bell) mendBellRing(comm->bell); /* an engine asleep on it re-checks the abort flag */
    usleep(1000);
  }
  return 1;
}

ncclResult_t mendCommAlloc(struct ncclComm** out, int nRanks, int rank, const struct mendConfig* config) {
  struct ncclComm* comm = NULL;
  MENDCHECK(MENDCALLOC(comm, 1));
  comm->magic = MEND_COMM_MAGIC;
  comm->nRanks = nRanks;
  comm->rank = rank;
  comm->cudaDev = -1;
  comm->hostMode = 1;
  comm->config = *config;
  comm->config.netName = comm->config.netNameBuf[0] ? comm->config.netNameBuf : NULL;
  atomic_store(&comm->abortFlag, 0);
  atomic_store(&comm->state, MEND_COMM_INITIALIZING);
  atomic_store(&comm->asyncResult, ncclInProgress);
  pthread_mutex_init(&comm->lock, NULL);
  *out = comm;
  return ncclSuccess;
}

void mendCommFree(struct ncclComm* comm) {
  if (comm == NULL) return;
  comm->magic = 0;  /* a stale handle is recognised as dead while the memory is still mapped */
  mendPlannerFree(comm); /* created by the first operation; holds the tuner plugin */
  free(comm->rankToNode);
  free(comm->rankToLocalRank);
  free(comm->peerInfo);
  free(comm->calib);
  pthread_mutex_destroy(&comm->lock);
  free(comm);
}

/* ---------------------------------------------------------------- creation jobs */

struct commJob {
  struct ncclComm* comm;             /* communicator being created */
  ncclResult_t (*fn)(void* arg);     /* the job */
  void* arg;                         /* its argument */
  void (*freeArg)(void* arg);        /* releases arg */
};

static void* jobThread(void* p) {
  struct commJob* job = p;
  ncclResult_t res = job->fn(job->arg);
  if (job->freeArg) job->freeArg(job->arg);
  (void)res;  /* the job recorded its outcome in comm->asyncResult */
  free(job);
  return NULL;
}

ncclResult_t mendCommLaunchJob(struct ncclComm* comm, ncclResult_t (*fn)(void* arg), void* arg,
                               void (*freeArg)(void* arg)) {
  if (mendGroupDepth() > 0) return mendGroupAddJob(comm, fn, arg, freeArg);
  if (comm->config.blocking) {
    ncclResult_t res = fn(arg);
    if (freeArg) freeArg(arg);
    return res;
  }
  struct commJob* job = malloc(sizeof(*job));
  if (job == NULL) {
    WARN("Out of memory starting a non-blocking communicator job");
    if (freeArg) freeArg(arg);
    return ncclSystemError;
  }
  *job = (struct commJob){.comm = comm, .fn = fn, .arg = arg, .freeArg = freeArg};
  int err = pthread_create(&comm->initThread, NULL, jobThread, job);
  if (err != 0) {
    errno = err;
    WARN("Cannot start the non-blocking init thread: %m");
    free(job);
    if (freeArg) freeArg(arg);
    return ncclSystemError;
  }
  comm->initThreadRunning = 1;
  return ncclInProgress;
}

int mendCommJoinInitThread(struct ncclComm* comm, int64_t ms) {
  if (!comm->initThreadRunning) return 1;
  if (ms < 0) {
    pthread_join(comm->initThread, NULL);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
    if (pthread_timedjoin_np(comm->initThread, NULL, &ts) != 0) return 0;
  }
  comm->initThreadRunning = 0;
  return 1;
}

/* ---------------------------------------------------------------- test hooks */

struct mendBootstrap* mendCommBootstrap(struct ncclComm* comm) { return comm ? comm->bootstrap : NULL; }
void mendCommSetAbortFlag(struct ncclComm* comm, int value) {
  atomic_store(&comm->abortFlag, value);
  /* Kernels watch the copy in the device state (mapped memory they can read). */
  if (comm->devState) __atomic_store_n(&comm->devState->abortFlag, value, __ATOMIC_RELEASE);
}
int mendCommState(struct ncclComm* comm) { return atomic_load(&comm->state); }

/* ---------------------------------------------------------------- queries */

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  MENDCHECK(mendCommCheck(comm, "ncclCommGetAsyncError"));
  MENDARGCHECK(asyncError != NULL, ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  (void)mendExecPollError(comm); /* a kernel's error becomes the communicator's asynchronous error */
  *asyncError = (ncclResult_t)atomic_load(&comm->asyncResult);
  return ncclSuccess;
}

/* Static facts of the communicator are valid once its creation finished. */
static ncclResult_t queryCheck(struct ncclComm* comm, const void* out, const char* api) {
  MENDCHECK(mendCommCheck(comm, api));
  MENDARGCHECK(out != NULL, ncclInvalidArgument, "%s: output pointer is NULL", api);
  MENDARGCHECK(atomic_load(&comm->state) != MEND_COMM_INITIALIZING, ncclInvalidArgument,
               "%s: communicator %p is still initializing (poll ncclCommGetAsyncError first)", api, (void*)comm);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  MENDCHECK(queryCheck(comm, count, "ncclCommCount"));
  *count = comm->nRanks;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  MENDCHECK(queryCheck(comm, rank, "ncclCommUserRank"));
  *rank = comm->rank;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  MENDCHECK(queryCheck(comm, device, "ncclCommCuDevice"));
  *device = comm->cudaDev;  /* -1 in host mode */
  return ncclSuccess;
}
