/*
 * One-sided operations of NCCL 2.29: ncclPutSignal, ncclSignal, ncclWaitSignal, and
 * ncclWinGetUserPtr.  Mend does not support them yet: ncclCommWindowRegister hands out NULL windows
 * (as NCCL does where windows are unsupported), and there is no signal path through the proxy.
 * Each call checks its arguments (ncclInvalidArgument with a WARN naming the problem), then returns
 * ncclInvalidUsage with a WARN saying Mend does not support it yet.
 */
#include "api.h"
#include "checks.h"
#include "comm.h"

/* What every one-sided call checks: the communicator, its stream, a peer, signal and context. */
static ncclResult_t checkCommon(struct ncclComm* comm, cudaStream_t stream, int peer, int sigIdx, int ctx,
                                unsigned int flags, const char* api) {
  MENDCHECK(mendCommCheck(comm, api));
  MENDARGCHECK(!comm->hostMode || stream == NULL, ncclInvalidArgument,
               "%s: stream %p must be NULL: communicator %p runs in host mode", api, (void*)stream, (void*)comm);
  MENDARGCHECK(peer >= 0 && peer < comm->nRanks, ncclInvalidArgument, "%s: invalid peer %d (nranks %d)", api, peer,
               comm->nRanks);
  MENDARGCHECK(sigIdx >= 0, ncclInvalidArgument, "%s: invalid sigIdx %d", api, sigIdx);
  MENDARGCHECK(ctx >= 0, ncclInvalidArgument, "%s: invalid ctx %d", api, ctx);
  MENDARGCHECK(flags == 0, ncclInvalidArgument, "%s: flags 0x%x are reserved and must be 0", api, flags);
  return ncclSuccess;
}

static ncclResult_t unsupported(const char* api) {
  WARN("%s: Mend does not support one-sided operations yet (windows are NULL, no signals)", api);
  return ncclInvalidUsage;
}

NCCL_API(ncclResult_t, ncclPutSignal, const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
         cudaStream_t stream);
ncclResult_t pncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                            ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
                            ncclComm_t comm, cudaStream_t stream) {
  const char* api = "ncclPutSignal";
  MENDCHECK(checkCommon(comm, stream, peer, sigIdx, ctx, flags, api));
  MENDARGCHECK((int)datatype >= 0 && (int)datatype < ncclNumTypes, ncclInvalidArgument,
               "%s: invalid datatype %d (valid: 0..%d)", api, (int)datatype, ncclNumTypes - 1);
  MENDARGCHECK(count == 0 || localbuff != NULL, ncclInvalidArgument, "%s: localbuff is NULL with count %zu", api,
               count);
  (void)peerWin; /* NULL is what Mend's registration returns: no window can be valid yet */
  (void)peerWinOffset;
  return unsupported(api);
}

NCCL_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
         cudaStream_t stream);
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream) {
  MENDCHECK(checkCommon(comm, stream, peer, sigIdx, ctx, flags, "ncclSignal"));
  return unsupported("ncclSignal");
}

NCCL_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
         cudaStream_t stream);
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm, cudaStream_t stream) {
  const char* api = "ncclWaitSignal";
  MENDCHECK(mendCommCheck(comm, api));
  MENDARGCHECK(nDesc >= 0, ncclInvalidArgument, "%s: invalid nDesc %d", api, nDesc);
  MENDARGCHECK(nDesc == 0 || signalDescs != NULL, ncclInvalidArgument, "%s: signalDescs is NULL with nDesc %d", api,
               nDesc);
  for (int i = 0; i < nDesc; i++) {
    const ncclWaitSignalDesc_t* d = &signalDescs[i];
    MENDARGCHECK(d->opCnt >= 0, ncclInvalidArgument, "%s: descriptor %d: invalid opCnt %d", api, i, d->opCnt);
    MENDCHECK(checkCommon(comm, stream, d->peer, d->sigIdx, d->ctx, 0, api));
  }
  MENDCHECK(checkCommon(comm, stream, comm->rank, 0, 0, 0, api)); /* the stream, even with no descriptor */
  return unsupported(api);
}

NCCL_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  MENDCHECK(mendCommCheck(comm, "ncclWinGetUserPtr"));
  MENDARGCHECK(outUserPtr != NULL, ncclInvalidArgument, "ncclWinGetUserPtr: outUserPtr is NULL");
  *outUserPtr = NULL;
  MENDARGCHECK(win != NULL, ncclInvalidArgument,
               "ncclWinGetUserPtr: window is NULL (Mend's ncclCommWindowRegister returns NULL windows: none has a "
               "user pointer)");
  WARN("ncclWinGetUserPtr: window %p was not registered by Mend (Mend hands out NULL windows only)", (void*)win);
  return ncclInvalidArgument;
}
