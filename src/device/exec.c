/*
 * Executors (engine.h): the choice per communicator, the host engine's table, the kernel-cpu
 * executor (the CUDA kernel's own source built for the CPU, run on host memory: how the test suite
 * exercises the device code on machines with no GPU), and the device-state error path.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "checks.h"
#include "comm.h"
#include "misc/cudrv.h"
#include "device/engine.h"
#include "device/kernel.h"
#include "device/launch.h"
#include "device/opsig.h"
#include "misc/param.h"
#include "misc/utils.h"

/* ---- the host engine ---- */

static ncclResult_t hostRun(struct mendExecBatch* batches, int nBatches) {
  int nWorks = 0, k = 0;
  for (int i = 0; i < nBatches; i++) nWorks += batches[i].nWorks;
  if (nWorks == 0) return ncclSuccess;
  struct mendWork **works, *worksLocal[32];
  struct ncclComm **comms, *commsLocal[4];
  MENDCHECK(MENDLOCALCALLOC(works, nWorks, worksLocal));
  if (MENDLOCALCALLOC(comms, nBatches, commsLocal) != ncclSuccess) {
    MENDLOCALFREE(works, worksLocal);
    return ncclSystemError;
  }
  for (int i = 0; i < nBatches; i++) {
    comms[i] = batches[i].comm;
    for (int w = 0; w < batches[i].nWorks; w++) works[k++] = batches[i].works + w;
  }
  ncclResult_t res = mendEngineRunHost(works, nWorks, comms, nBatches);
  MENDLOCALFREE(comms, commsLocal);
  MENDLOCALFREE(works, worksLocal);
  return res;
}

static int hostQuiesce(struct ncclComm* comm, int64_t timeoutMs) { return 1; } /* nothing outlives a call */
static void hostRelease(struct ncclComm* comm) {}

const struct mendExecutor mendExecHost = {
  .name = "host",
  .run = hostRun,
  .quiesce = hostQuiesce,
  .release = hostRelease,
};

/* ---- the kernel's source on the CPU ---- */

static ncclResult_t kcpuRun(struct mendExecBatch* batches, int nBatches) {
  ncclResult_t res = ncclSuccess;
  struct mendDevLaunch* launches = NULL;
  char** bufs = NULL;
  int n = 0;
  MENDCHECKGOTO(MENDCALLOC(launches, (size_t)nBatches + 1), res, exit);
  MENDCHECKGOTO(MENDCALLOC(bufs, (size_t)nBatches + 1), res, exit);
  for (int i = 0; i < nBatches; i++) {
    struct mendExecBatch* b = batches + i;
    if (b->nWorks == 0) continue;
    MENDCHECKGOTO(mendCalloc((void**)&bufs[n], 1, mendLaunchBytes(b->works, b->nWorks)), res, exit);
    MENDCHECKGOTO(mendLaunchBuild(b->works, b->nWorks, 0, bufs[n], (uintptr_t)bufs[n], launches + n), res, exit);
    launches[n].state = b->comm->devState;
    launches[n].abortSpins = (uint32_t)mendParamKernelAbortPollSpins();
    launches[n].rank = b->comm->rank;
    n++;
  }
  mendKernelCpuRun(launches, n, (int)mendParamKernelCpuThreads(), (int)mendParamKernelCpuWorkers());
  for (int i = 0; i < nBatches && res == ncclSuccess; i++) {
    if (mendCommAborted(batches[i].comm)) {
      WARN("Rank %d: operation stopped: the communicator was aborted", batches[i].comm->rank);
      res = ncclInternalError;
    } else {
      res = mendExecPollError(batches[i].comm);
    }
  }
exit:
  for (int i = 0; bufs && i < nBatches; i++) free(bufs[i]);
  free(bufs);
  free(launches);
  return res;
}

static void kcpuRelease(struct ncclComm* comm) {
  free(comm->devState);
  comm->devState = NULL;
}

const struct mendExecutor mendExecKernelCpu = {
  .name = "kernel-cpu",
  .run = kcpuRun,
  .quiesce = hostQuiesce,
  .release = kcpuRelease,
};

/* ---- choice and errors ---- */

ncclResult_t mendExecChoose(struct ncclComm* comm) {
  const char* want = mendParamExecutor();
  if (!comm->hostMode) {
    if (want && want[0] && strcasecmp(want, "cuda") != 0)
      INFO(NCCL_INIT, "MEND_EXECUTOR=%s ignored: rank %d runs in device mode (cuda)", want, comm->rank);
    comm->executor = &mendExecCuda;
    return mendCudaCommInit(comm);
  }
  comm->executor = &mendExecHost;
  if (want && want[0] && strcasecmp(want, "host") != 0) {
    if (strcasecmp(want, "kernel-cpu") != 0) {
      WARN("MEND_EXECUTOR=%s: expected host, cuda or kernel-cpu", want);
      return ncclInvalidUsage;
    }
    MENDCHECK(MENDCALLOC(comm->devState, 1));
    comm->devState->abortFlag = mendCommAborted(comm);
    comm->executor = &mendExecKernelCpu;
  }
  INFO(NCCL_INIT, "Rank %d: %s executor", comm->rank, comm->executor->name);
  return ncclSuccess;
}

ncclResult_t mendExecPollError(struct ncclComm* comm) {
  struct mendDevState* st = comm->devState;
  int32_t err = st ? __atomic_load_n(&st->error, __ATOMIC_ACQUIRE) : 0;
  if (err != 0 && __atomic_exchange_n(&st->reported, 1, __ATOMIC_ACQ_REL) == 0) {
    if (err == ncclInvalidUsage && st->errSig) {
      union mendOpSigWords mine, peer;
      for (int i = 0; i < MEND_OPSIG_BYTES / 8; i++) {
        mine.w[i] = st->errSigMine[i];
        peer.w[i] = st->errSigPeer[i];
      }
      (void)mendOpSigMismatch(comm, st->errChannel, st->errPeer, &mine.s,
                              peer.s.magic == MEND_OPSIG_MAGIC ? &peer.s : NULL, st->errGot);
    } else if (err == ncclInvalidUsage)
      WARN("Rank %d: received %llu bytes from rank %d where %llu were expected (lane %d, work %d): the ranks "
           "disagree on the operation (count, datatype, root or call order)", comm->rank,
           (unsigned long long)st->errGot, st->errPeer, (unsigned long long)st->errWant, st->errLane, st->errWork);
    else
      WARN("Rank %d: a kernel stopped with %s", comm->rank, ncclGetErrorString((ncclResult_t)err));
    mendCommSetAsyncError(comm, (ncclResult_t)err);
  }
  int async = atomic_load(&comm->asyncResult);
  return async == ncclInProgress ? ncclSuccess : (ncclResult_t)async;
}
