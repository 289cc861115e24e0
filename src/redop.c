/*
 * User reduction ops: ncclRedOpCreatePreMulSum / ncclRedOpDestroy.  An op lives in a slot of
 * comm->userRedOps; its value is ncclNumOps + slot (see comm.h), which NCCL's rules allow (any value
 * in [ncclNumOps, ncclMaxRedOp]).  A host-immediate scalar is copied at once (sizeof(datatype)
 * bytes: a bf16 op copies 2 bytes whatever pointer type the caller used); a device scalar is kept
 * as a pointer and read when a collective runs.
 */
#include <string.h>

#include "api.h"
#include "checks.h"
#include "comm.h"
#include "device/reduce.h"
#include "misc/debug.h"

NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
         ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm) {
  MENDCHECK(mendCommCheck(comm, "ncclRedOpCreatePreMulSum"));
  MENDARGCHECK(op != NULL, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op is NULL");
  MENDARGCHECK(scalar != NULL, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: scalar is NULL");
  MENDARGCHECK((int)datatype >= 0 && (int)datatype < ncclNumTypes, ncclInvalidArgument,
               "ncclRedOpCreatePreMulSum: invalid datatype %d", (int)datatype);
  MENDARGCHECK(residence == ncclScalarDevice || residence == ncclScalarHostImmediate, ncclInvalidArgument,
               "ncclRedOpCreatePreMulSum: invalid residence %d", (int)residence);
  pthread_mutex_lock(&comm->lock);
  int slot = -1;
  for (int i = 0; i < MEND_MAX_USER_REDOPS && slot < 0; i++)
    if (!comm->userRedOps[i].used) slot = i;
  if (slot >= 0) {
    struct mendUserRedOp* u = &comm->userRedOps[slot];
    memset(u, 0, sizeof(*u));
    u->datatype = datatype;
    u->residence = (int)residence;
    if (residence == ncclScalarHostImmediate) memcpy(&u->scalar, scalar, mendTypeSize(datatype));
    else u->devScalar = scalar;
    u->used = 1;
  }
  pthread_mutex_unlock(&comm->lock);
  MENDARGCHECK(slot >= 0, ncclInvalidUsage,
               "ncclRedOpCreatePreMulSum: %d user ops are alive on communicator %p; destroy some first",
               MEND_MAX_USER_REDOPS, (void*)comm);
  *op = (ncclRedOp_t)(ncclNumOps + slot);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  MENDCHECK(mendCommCheck(comm, "ncclRedOpDestroy"));
  MENDARGCHECK((int)op >= ncclNumOps, ncclInvalidArgument,
               "ncclRedOpDestroy: op %d is a builtin operation and cannot be destroyed", (int)op);
  int slot = (int)op - ncclNumOps;
  MENDARGCHECK(slot < MEND_MAX_USER_REDOPS, ncclInvalidArgument,
               "ncclRedOpDestroy: op %d was not created on communicator %p", (int)op, (void*)comm);
  pthread_mutex_lock(&comm->lock);
  int alive = comm->userRedOps[slot].used;
  comm->userRedOps[slot].used = 0;
  pthread_mutex_unlock(&comm->lock);
  MENDARGCHECK(alive, ncclInvalidArgument,
               "ncclRedOpDestroy: op %d is not alive on communicator %p (never created or already destroyed)",
               (int)op, (void*)comm);
  return ncclSuccess;
}
