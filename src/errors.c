/* Version, error strings and the last-error text: the public calls that need no communicator. */
#include "api.h"
#include "misc/debug.h"

NCCL_API(ncclResult_t, ncclGetVersion, int* version);
ncclResult_t pncclGetVersion(int* version) {
  if (version == NULL) {
    WARN("ncclGetVersion: version argument is NULL");
    return ncclInvalidArgument;
  }
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

NCCL_API(const char*, ncclGetErrorString, ncclResult_t result);
const char* pncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "a CUDA call failed (unhandled cuda error)";
    case ncclSystemError: return "a system call failed or a resource ran out (system error)";
    case ncclInternalError: return "an internal check failed (internal error)";
    case ncclInvalidArgument: return "an argument was invalid (invalid argument)";
    case ncclInvalidUsage: return "the call was not valid at this point (invalid usage)";
    case ncclRemoteError: return "a peer failed or the connection to it broke (remote error)";
    case ncclInProgress: return "the operation has not completed yet (operation in progress)";
    case ncclTimeout: return "an operation or wait ran past its time limit (timeout)";
    default: return "unknown result code";
  }
}

NCCL_API(const char*, ncclGetLastError, ncclComm_t comm);
const char* pncclGetLastError(ncclComm_t comm) {
  (void)comm; /* one process-wide buffer, as in NCCL */
  return mendDebugLastError();
}

NCCL_API(void, ncclResetDebugInit, void);
void pncclResetDebugInit(void) { mendDebugReset(); }

/* NVIDIA's library exports this internal name too; Mend exports a superset of its symbols. */
__attribute__((visibility("default"))) void ncclResetDebugInitInternal(void);
void ncclResetDebugInitInternal(void) { mendDebugReset(); }
