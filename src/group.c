/*
 * Groups.  Per thread: a nesting depth, the operations queued since the outermost
 * ncclGroupStart, the creation jobs (ncclCommInitRank... inside a group), and the first error a
 * call of the group returned.  The outermost ncclGroupEnd:
 *   1. runs the creation jobs, one thread each (so several inits issued by one thread meet);
 *      blocking communicators are joined, non-blocking ones keep running (ncclInProgress);
 *   2. plans each communicator's operations, connects the connectors still missing (one thread
 *      per communicator when there are several, since a connect waits for the peer), and hands
 *      the works to each communicator's executor (device/engine.h): host executors run all
 *      works of all communicators in this thread (host-mode operations have completed when
 *      ncclGroupEnd returns); the CUDA executor enqueues one kernel per communicator on the
 *      stream of its first operation in the group and returns.
 * ncclGroupSimulateEnd stops after planning and reports the cost model's estimate.
 */
#include "group.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "checks.h"
#include "comm.h"
#include "device/engine.h"
#include "enqueue/plan.h"
#include "enqueue/plan_cache.h"
#include "misc/utils.h"

#define SIM_INFO_MAGIC 0x74685283u
#define SMALL_OPS 4 /* a call's arrays for up to this many operations live on the stack */

struct groupJob {
  struct ncclComm* comm;         /* communicator being created */
  ncclResult_t (*fn)(void* arg); /* the job */
  void* arg;                     /* its argument */
  void (*freeArg)(void* arg);    /* releases arg */
  pthread_t thread;              /* thread running it */
  int selfFree;                  /* non-blocking: the thread frees this struct when done */
  ncclResult_t res;              /* fn's result (blocking jobs) */
};

struct groupState {
  int depth;                /* nesting of ncclGroupStart */
  struct mendOp* ops;       /* queued operations, in call order */
  int nOps, capOps;         /* used / allocated */
  struct groupJob** jobs;   /* queued creation jobs */
  int nJobs, capJobs;       /* used / allocated */
  ncclResult_t error;       /* first error returned by a call inside the group */
  ncclResult_t dropped;     /* ncclInvalidUsage when an abort dropped operations (the others still run) */
};
static _Thread_local struct groupState group;

int mendGroupDepth(void) { return group.depth; }

void mendGroupSetError(ncclResult_t res) {
  if (group.depth > 0 && group.error == ncclSuccess) group.error = res;
}

int mendGroupDropComm(struct ncclComm* comm) {
  int kept = 0, dropped = 0;
  for (int i = 0; i < group.nOps; i++) {
    if (group.ops[i].comm == comm) dropped++;
    else group.ops[kept++] = group.ops[i];
  }
  group.nOps = kept;
  if (dropped == 0) return 0;
  mendCommInflight(comm, -dropped);
  WARN("ncclCommAbort: comm %p had %d operation(s) queued in the open group: they were dropped, and ncclGroupEnd "
       "will report it after running the other communicators' operations", (void*)comm, dropped);
  group.dropped = ncclInvalidUsage;
  return dropped;
}

static ncclResult_t growArray(void** arr, int* cap, int need, size_t elem) {
  if (need <= *cap) return ncclSuccess;
  int ncap = *cap ? *cap * 2 : 8;
  void* p = realloc(*arr, (size_t)ncap * elem);
  if (p == NULL) {
    WARN("Group: out of memory queueing an operation");
    return ncclSystemError;
  }
  *arr = p;
  *cap = ncap;
  return ncclSuccess;
}

ncclResult_t mendGroupAddJob(struct ncclComm* comm, ncclResult_t (*fn)(void* arg), void* arg,
                             void (*freeArg)(void* arg)) {
  if (group.depth == 0) {
    ncclResult_t res = fn(arg);
    if (freeArg) freeArg(arg);
    return res;
  }
  struct groupJob* job = calloc(1, sizeof(*job));
  ncclResult_t res = job ? growArray((void**)&group.jobs, &group.capJobs, group.nJobs + 1, sizeof(job)) : ncclSystemError;
  if (res != ncclSuccess) {
    if (job == NULL) WARN("Group: out of memory queueing a communicator job");
    free(job);
    if (freeArg) freeArg(arg);
    return res;
  }
  *job = (struct groupJob){.comm = comm, .fn = fn, .arg = arg, .freeArg = freeArg};
  group.jobs[group.nJobs++] = job;
  return ncclSuccess;
}

/* ---- creation jobs ---- */

static void* jobMain(void* p) {
  struct groupJob* job = p;
  int selfFree = job->selfFree; /* decided before the thread started */
  job->res = job->fn(job->arg);
  if (job->freeArg) job->freeArg(job->arg);
  if (job->res != ncclSuccess) mendCommSetAsyncError(job->comm, job->res);
  if (selfFree) free(job);
  return NULL;
}

/* Start every job in its own thread; join those of blocking communicators.  A non-blocking
 * communicator keeps its thread as its init thread (joined by destroy or finalize), and its
 * outcome goes to ncclCommGetAsyncError. */
static ncclResult_t runJobs(struct groupJob** jobs, int nJobs) {
  ncclResult_t res = ncclSuccess;
  int inProgress = 0;
  for (int i = 0; i < nJobs; i++) {
    struct groupJob* job = jobs[i];
    struct ncclComm* comm = job->comm;
    int blocking = comm->config.blocking;
    job->selfFree = !blocking;
    pthread_t tid;
    int err = pthread_create(&tid, NULL, jobMain, job); /* job may be gone once this returns */
    if (err != 0) {
      errno = err;
      WARN("Group: cannot start a communicator job thread: %m");
      if (job->freeArg) job->freeArg(job->arg);
      mendCommSetAsyncError(comm, ncclSystemError);
      if (res == ncclSuccess) res = ncclSystemError;
      free(job);
      jobs[i] = NULL;
      continue;
    }
    if (blocking) {
      job->thread = tid;
    } else {
      comm->initThread = tid;
      comm->initThreadRunning = 1;
      jobs[i] = NULL; /* owned by its thread now */
      inProgress = 1;
    }
  }
  for (int i = 0; i < nJobs; i++) {
    if (jobs[i] == NULL) continue;
    pthread_join(jobs[i]->thread, NULL);
    if (jobs[i]->res != ncclSuccess && res == ncclSuccess) res = jobs[i]->res;
    free(jobs[i]);
  }
  return res != ncclSuccess ? res : (inProgress ? ncclInProgress : ncclSuccess);
}

/* ---- operations ---- */

struct connectTask {
  struct mendPlan* plan; /* plan whose connectors to establish */
  ncclResult_t res;      /* outcome */
  pthread_t thread;      /* thread doing it */
  int started;           /* thread must be joined */
};

static void* connectMain(void* p) {
  struct connectTask* t = p;
  t->res = mendPlanConnect(t->plan);
  return NULL;
}

/* Connect every plan's missing connectors; one thread per communicator when several need it. */
static ncclResult_t connectPlans(struct mendPlan** plans, int nPlans) {
  int pending = 0, last = -1;
  for (int i = 0; i < nPlans; i++) {
    if (mendPlanPendingConns(plans[i]) > 0) { pending++; last = i; }
  }
  if (pending == 0) return ncclSuccess;
  if (pending == 1) {
    ncclResult_t r = mendPlanConnect(plans[last]);
    if (r != ncclSuccess) mendCommSetAsyncError(plans[last]->comm, r); /* a peer it cannot reach: broken */
    return r;
  }
  struct connectTask* tasks;
  MENDCHECK(MENDCALLOC(tasks, nPlans));
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < nPlans; i++) {
    tasks[i].plan = plans[i];
    if (plans[i]->nReqs == 0) continue;
    int err = pthread_create(&tasks[i].thread, NULL, connectMain, tasks + i);
    if (err != 0) {
      errno = err;
      WARN("Group: cannot start a connection thread: %m");
      res = ncclSystemError;
      break;
    }
    tasks[i].started = 1;
  }
  for (int i = 0; i < nPlans; i++) {
    if (!tasks[i].started) continue;
    pthread_join(tasks[i].thread, NULL);
    if (tasks[i].res != ncclSuccess) mendCommSetAsyncError(plans[i]->comm, tasks[i].res);
    if (tasks[i].res != ncclSuccess && res == ncclSuccess) res = tasks[i].res;
  }
  free(tasks);
  return res;
}

/* The other streams a communicator's operations of the group name (device mode): the launch goes on
 * the first one and is joined with these, as NCCL joins a group's streams. */
static ncclResult_t collectJoins(struct mendPlan* plan, const struct mendOp* ops, int n) {
  for (int j = 1; j < n; j++) {
    int seen = ops[j].stream == ops[0].stream;
    for (int k = 0; k < plan->nJoins && !seen; k++) seen = plan->joins[k] == ops[j].stream;
    if (seen) continue;
    MENDARGCHECK(plan->nJoins < MEND_MAX_JOIN_STREAMS, ncclInvalidUsage,
                 "Group: rank %d's operations name more than %d streams in one group", ops[0].comm->rank,
                 MEND_MAX_JOIN_STREAMS + 1);
    plan->joins[plan->nJoins++] = ops[j].stream;
  }
  return ncclSuccess;
}

/* Build one plan per communicator, in the order communicators first appear. */
static ncclResult_t buildPlans(const struct mendOp* ops, int nOps, struct mendPlan** plans, struct ncclComm** comms,
                               void** streams, int* nPlans) {
  struct mendOp *mine = NULL, mineLocal[SMALL_OPS];
  ncclResult_t res = ncclSuccess;
  *nPlans = 0;
  MENDCHECK(MENDLOCALCALLOC(mine, nOps, mineLocal));
  for (int i = 0; i < nOps; i++) {
    struct ncclComm* comm = ops[i].comm;
    int seen = 0;
    for (int p = 0; p < *nPlans; p++) seen |= comms[p] == comm;
    if (seen) continue;
    int n = 0;
    for (int j = i; j < nOps; j++) {
      if (ops[j].comm == comm) mine[n++] = ops[j];
    }
    comms[*nPlans] = comm;
    streams[*nPlans] = ops[i].stream; /* the communicator's first operation names the stream */
    if (n == 1) MENDCHECKGOTO(mendPlanCacheBuild(comm, mine, plans + *nPlans), res, exit); /* plan_cache.h */
    else MENDCHECKGOTO(mendPlanBuild(comm, mine, n, plans + *nPlans), res, exit);
    MENDCHECKGOTO(collectJoins(plans[*nPlans], mine, n), res, exit);
    (*nPlans)++;
  }
exit:
  MENDLOCALFREE(mine, mineLocal);
  return res;
}

/* Run every plan with its communicator's executor; plans whose executors are the same run
 * together (one host thread drives all ranks of a process; device launches are enqueued). */
static ncclResult_t runPlans(struct mendPlan** plans, struct ncclComm** comms, void* const* streams, int nPlans) {
  MENDCHECK(connectPlans(plans, nPlans));
  for (int i = 0; i < nPlans; i++) MENDCHECK(mendPlanResolve(plans[i]));
  struct mendExecBatch *batches, batchesLocal[SMALL_OPS];
  MENDCHECK(MENDLOCALCALLOC(batches, nPlans, batchesLocal));
  int *done, doneLocal[SMALL_OPS];
  if (MENDLOCALCALLOC(done, nPlans, doneLocal) != ncclSuccess) {
    MENDLOCALFREE(batches, batchesLocal);
    return ncclSystemError;
  }
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < nPlans && res == ncclSuccess; i++) {
    if (done[i]) continue;
    const struct mendExecutor* ex = comms[i]->executor;
    int n = 0;
    for (int j = i; j < nPlans; j++) {
      if (done[j] || comms[j]->executor != ex) continue;
      done[j] = 1;
      batches[n++] = (struct mendExecBatch){.stages = plans[j]->stages, .nStages = plans[j]->nStages, .comm = comms[j],
                                            .works = plans[j]->works, .nWorks = plans[j]->nWorks, .stream = streams[j],
                                            .joins = plans[j]->joins, .nJoins = plans[j]->nJoins};
    }
    res = ex->run(batches, n);
  }
  MENDLOCALFREE(done, doneLocal);
  MENDLOCALFREE(batches, batchesLocal);
  return res;
}

/* Plan and run (or, with simInfo, only estimate) a batch of operations. */
static ncclResult_t runOps(const struct mendOp* ops, int nOps, ncclSimInfo_t* simInfo) {
  if (nOps == 0) {
    if (simInfo) simInfo->estimatedTime = 0.0f;
    return ncclSuccess;
  }
  struct mendPlan **plans = NULL, *plansLocal[SMALL_OPS];
  struct ncclComm **comms = NULL, *commsLocal[SMALL_OPS];
  void **streams = NULL, *streamsLocal[SMALL_OPS];
  int nPlans = 0;
  ncclResult_t res;
  MENDCHECKGOTO(MENDLOCALCALLOC(plans, nOps, plansLocal), res, exit);
  MENDCHECKGOTO(MENDLOCALCALLOC(comms, nOps, commsLocal), res, exit);
  MENDCHECKGOTO(MENDLOCALCALLOC(streams, nOps, streamsLocal), res, exit);
  MENDCHECKGOTO(buildPlans(ops, nOps, plans, comms, streams, &nPlans), res, exit);
  if (simInfo) {
    double worst = 0; /* communicators run side by side; one communicator's ops one after another */
    for (int i = 0; i < nPlans; i++) worst = plans[i]->estUs > worst ? plans[i]->estUs : worst;
    simInfo->estimatedTime = (float)worst;
  } else {
    res = runPlans(plans, comms, streams, nPlans);
  }
exit:
  for (int i = 0; i < nPlans; i++) mendPlanCacheRelease(comms[i], plans[i], res == ncclSuccess);
  MENDLOCALFREE(plans, plansLocal);
  MENDLOCALFREE(comms, commsLocal);
  MENDLOCALFREE(streams, streamsLocal);
  return res;
}

/* Queued operations hold their communicator (comm->inflight) until they ran or were dropped, so a
 * concurrent ncclCommAbort stops them instead of freeing the communicator under them. */
static void releaseOps(const struct mendOp* ops, int nOps) {
  for (int i = 0; i < nOps; i++) mendCommInflight(ops[i].comm, -1);
}

ncclResult_t mendGroupEnqueue(const struct mendOp* op) {
  if (group.depth == 0) {
    mendCommInflight(op->comm, 1);
    ncclResult_t res = runOps(op, 1, NULL);
    releaseOps(op, 1);
    return res;
  }
  MENDCHECK(growArray((void**)&group.ops, &group.capOps, group.nOps + 1, sizeof(*op)));
  mendCommInflight(op->comm, 1);
  group.ops[group.nOps++] = *op;
  return ncclSuccess;
}

/* The outermost end of a group: jobs, then operations. */
static ncclResult_t groupFinish(ncclSimInfo_t* simInfo) {
  struct groupState g = group;
  memset(&group, 0, sizeof(group)); /* jobs and ops may start groups of their own */
  ncclResult_t jobRes = runJobs(g.jobs, g.nJobs);
  ncclResult_t res = g.error;
  if (res == ncclSuccess && jobRes != ncclSuccess && jobRes != ncclInProgress) res = jobRes;
  if (res == ncclSuccess) res = runOps(g.ops, g.nOps, simInfo);
  releaseOps(g.ops, g.nOps);
  free(g.jobs);
  free(g.ops);
  if (res == ncclSuccess && g.dropped != ncclSuccess) {
    WARN("ncclGroupEnd: operations of an aborted communicator were dropped from this group");
    res = g.dropped;
  }
  if (res == ncclSuccess && jobRes == ncclInProgress) res = ncclInProgress;
  return res;
}

NCCL_API(ncclResult_t, ncclGroupStart, void);
ncclResult_t pncclGroupStart(void) {
  group.depth++;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGroupEnd, void);
ncclResult_t pncclGroupEnd(void) {
  MENDARGCHECK(group.depth > 0, ncclInvalidUsage, "ncclGroupEnd: not in a group call");
  if (--group.depth > 0) return ncclSuccess;
  return groupFinish(NULL);
}

NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  const char* api = "ncclGroupSimulateEnd";
  MENDARGCHECK(simInfo != NULL, ncclInvalidArgument, "%s: simInfo is NULL", api);
  MENDARGCHECK(simInfo->magic == SIM_INFO_MAGIC, ncclInvalidArgument,
               "%s: simInfo has magic 0x%x, expected 0x%x (initialize it with NCCL_SIM_INFO_INITIALIZER)", api,
               simInfo->magic, SIM_INFO_MAGIC);
  MENDARGCHECK(simInfo->size >= sizeof(ncclSimInfo_t), ncclInvalidArgument,
               "%s: simInfo size %zu is smaller than %zu", api, simInfo->size, sizeof(ncclSimInfo_t));
  MENDARGCHECK(group.depth > 0, ncclInvalidUsage, "%s: not in a group call", api);
  if (--group.depth > 0) return ncclSuccess;
  return groupFinish(simInfo);
}
