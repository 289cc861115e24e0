/*
 * Communicator teardown: ncclCommFinalize, ncclCommDestroy, ncclCommAbort, ncclCommRevoke.
 *  - Destroy is orderly: transports first, then the bootstrap's BYE handshake (bounded by
 *    MEND_BOOTSTRAP_CLOSE_TIMEOUT) so peers see a clean close, not a broken connection.
 *  - Abort sets the abort flag first, so every wait in every layer returns, then frees without
 *    waiting for any peer; threads that do not stop within MEND_ABORT_TIMEOUT are left (and the
 *    memory they use is not freed) rather than waited for.
 *  - Revoke stops in-flight work for good (abort flag, waiting until operations on other threads
 *    have returned) but keeps the bootstrap, so split and shrink still work; only destroy, split,
 *    shrink or abort may follow (finalize is invalid).
 */
#include "api.h"
#include "bootstrap.h"
#include "bootstrap_priv.h"
#include "checks.h"
#include "comm.h"
#include "init.h"
#include "misc/cudrv.h"
#include "misc/debug.h"
#include "device/engine.h"
#include "group.h"
#include "misc/param.h"
#include "onesided.h"
#include "transport/transport.h"

int mendCommQuiesce(struct ncclComm* comm, int abort) {
  if (comm->executor == NULL) return 1;
  int64_t bound = abort ? mendParamAbortTimeout() : mendParamDrainTimeout();
  if (comm->executor->quiesce(comm, bound)) return 1;
  WARN("comm %p rank %d: its kernels did not finish within %lld ms; leaving the communicator allocated", (void*)comm,
       comm->rank, (long long)bound);
  return 0;
}

ncclResult_t mendCommTeardown(struct ncclComm* comm, int abort) {
  if (!abort && atomic_load(&comm->inflight) > 0) {
    WARN("comm %p: destroyed while another thread still runs operations on it; stopping them as an abort would",
         (void*)comm);
    abort = 1;
  }
  if (abort) {
    mendCommSetAbortFlag(comm, 1);
    if (comm->bell) mendBellRing(comm->bell); /* a host engine asleep on it sees the flag at once */
  }
  if (!mendCommJoinInitThread(comm, abort ? mendParamAbortTimeout() : -1)) {
    WARN("comm %p: the init thread did not stop within %lld ms; leaving the communicator allocated", (void*)comm,
         (long long)mendParamAbortTimeout());
    comm->magic = 0;
    return ncclSuccess;
  }
  /* Another thread may be inside a collective on this communicator (an abort from a watchdog thread):
   * it returns once it sees the flag; free nothing under it. */
  if (!mendCommWaitIdle(comm, mendParamAbortTimeout())) {
    WARN("comm %p: operations on another thread did not stop within %lld ms; leaving the communicator allocated",
         (void*)comm, (long long)mendParamAbortTimeout());
    comm->magic = 0;
    return ncclSuccess;
  }
  /* Kernels still running on the connectors (device mode): an abort stops them at once; a destroy
   * lets them finish.  Connectors are never freed under a kernel that did not stop. */
  if (!mendCommQuiesce(comm, abort)) {
    comm->magic = 0;
    return ncclSuccess;
  }
  mendRmaStop(comm); /* the one-sided receiver reads connectors: stop it before they go */
  /* A revoked communicator's bootstrap is healthy: close it in order unless this is an abort. */
  int hard = abort || (mendCommAborted(comm) && atomic_load(&comm->state) != MEND_COMM_REVOKED);
  /* Operations complete before their last sends leave: deliver them before the connections close. */
  if (!hard && atomic_load(&comm->state) != MEND_COMM_FINALIZED) (void)mendTransportDrain(comm, mendParamDrainTimeout());
  ncclResult_t res = mendTransportFree(comm);
  if (comm->executor) comm->executor->release(comm);
  mendCuReleaseContext(comm->cudaDev, comm->cuCtx);
  comm->cuCtx = NULL;
  if (comm->bootstrap) {
    ncclResult_t r = hard ? mendBootstrapAbort(comm->bootstrap) : mendBootstrapClose(comm->bootstrap);
    if (res == ncclSuccess) res = r;
    comm->bootstrap = NULL;
  }
  mendCommGrowRelease(comm);
  mendMemReleaseComm(comm);
  mendCommFree(comm);
  return abort ? ncclSuccess : res;
}

void mendCommStopInflight(struct ncclComm* comm, const char* api) {
  mendCommSetAbortFlag(comm, 1);
  if (comm->bell) mendBellRing(comm->bell);
  /* The bootstrap still watches the flag here, so a connect of an operation on another thread that
   * waits for a lost peer stops too; only then may the bootstrap ignore the flag for good. */
  if (!mendCommWaitIdle(comm, mendParamAbortTimeout()))
    WARN("%s: comm %p: operations on another thread did not stop within %lld ms", api, (void*)comm,
         (long long)mendParamAbortTimeout());
  mendBootstrapDetachAbort(comm->bootstrap);
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  MENDCHECK(mendCommCheck(comm, "ncclCommFinalize"));
  int state = atomic_load(&comm->state);
  MENDARGCHECK(state != MEND_COMM_INITIALIZING, ncclInvalidUsage,
               "ncclCommFinalize: communicator %p is still initializing", (void*)comm);
  MENDARGCHECK(state != MEND_COMM_REVOKED, ncclInvalidUsage,
               "ncclCommFinalize: communicator %p was revoked; only destroy, split or shrink may follow", (void*)comm);
  MENDARGCHECK(state != MEND_COMM_FINALIZED, ncclInvalidUsage, "ncclCommFinalize: communicator %p is already finalized",
               (void*)comm);
  MENDARGCHECK(state == MEND_COMM_READY, ncclInvalidUsage, "ncclCommFinalize: communicator %p failed to initialize",
               (void*)comm);
  /* Device mode: operations complete on their streams; wait for the kernels first.  Then what may
   * still be in flight is the last slots of their sends, which the transport delivers now. */
  if (comm->executor && !comm->executor->quiesce(comm, mendParamDrainTimeout())) {
    WARN("ncclCommFinalize: comm %p rank %d: kernels still running after %lld ms (MEND_DRAIN_TIMEOUT_MS)",
         (void*)comm, comm->rank, (long long)mendParamDrainTimeout());
    mendCommSetAsyncError(comm, ncclInternalError);
    return ncclInternalError;
  }
  ncclResult_t res = mendTransportDrain(comm, mendParamDrainTimeout());
  if (res != ncclSuccess) {
    mendCommSetAsyncError(comm, res);
    return res;
  }
  atomic_store(&comm->state, MEND_COMM_FINALIZED);
  INFO(NCCL_INIT, "comm %p rank %d - Finalize COMPLETE", (void*)comm, comm->rank);
  return ncclSuccess;
}

/* Inside a group, the group may still hold the communicator: operations queued on it (they run at
 * ncclGroupEnd) or its creation job (queued by an init in this group).  Freeing it now would leave
 * them a dangling pointer, and waiting for them would wait for this very thread.  Such a destroy is
 * refused (nothing is destroyed) and ncclGroupEnd reports it; a grouped destroy of a communicator
 * the group does not hold goes ahead, as NCCL's grouped destroys do. */
static ncclResult_t destroyInGroupCheck(struct ncclComm* comm) {
  if (mendGroupDepth() == 0) return ncclSuccess;
  int pending = atomic_load(&comm->inflight);
  int queuedInit = atomic_load(&comm->state) == MEND_COMM_INITIALIZING && !comm->initThreadRunning;
  if (pending == 0 && !queuedInit) return ncclSuccess;
  if (queuedInit)
    WARN("ncclCommDestroy: comm %p is created by the open group (its init runs at ncclGroupEnd); nothing was "
         "destroyed: call ncclGroupEnd first, then destroy it", (void*)comm);
  else
    WARN("ncclCommDestroy: comm %p has %d operation(s) not run yet (queued in the open group, which runs them at "
         "ncclGroupEnd); nothing was destroyed: call ncclGroupEnd first, then destroy it", (void*)comm, pending);
  mendGroupSetError(ncclInvalidUsage);
  return ncclInvalidUsage;
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess;  /* as NCCL: destroying NULL is a no-op */
  MENDCHECK(mendCommCheck(comm, "ncclCommDestroy"));
  MENDCHECK(destroyInGroupCheck(comm));
  int rank = comm->rank, nRanks = comm->nRanks;
  int failed = atomic_load(&comm->state) == MEND_COMM_FAILED;
  ncclResult_t res = mendCommTeardown(comm, failed);
  INFO(NCCL_INIT, "comm %p rank %d nRanks %d - Destroy COMPLETE", (void*)comm, rank, nRanks);
  return res;
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess;  /* as NCCL */
  MENDCHECK(mendCommCheck(comm, "ncclCommAbort"));
  int rank = comm->rank;
  if (mendGroupDepth() > 0) (void)mendGroupDropComm(comm); /* queued here: they would wait for this thread */
  mendCommTeardown(comm, 1);
  INFO(NCCL_INIT, "comm %p rank %d - Abort COMPLETE", (void*)comm, rank);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  MENDCHECK(mendCommCheck(comm, "ncclCommRevoke"));
  MENDARGCHECK(revokeFlags == NCCL_REVOKE_DEFAULT, ncclInvalidArgument,
               "ncclCommRevoke: revokeFlags must be NCCL_REVOKE_DEFAULT (0), got %d", revokeFlags);
  int state = atomic_load(&comm->state);
  if (state == MEND_COMM_REVOKED) return ncclSuccess;
  MENDARGCHECK(state == MEND_COMM_READY, ncclInvalidUsage,
               "ncclCommRevoke: communicator %p is not ready (initializing, finalized or failed)", (void*)comm);
  mendCommStopInflight(comm, "ncclCommRevoke");
  atomic_store(&comm->state, MEND_COMM_REVOKED);
  INFO(NCCL_INIT, "comm %p rank %d - Revoke COMPLETE", (void*)comm, comm->rank);
  return ncclSuccess;
}
