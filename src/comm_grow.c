/*
 * ncclCommGetUniqueId and ncclCommGrow (NCCL 2.29): growing a communicator with new ranks.
 * Mend does not support growing yet.  Both calls check their arguments as NCCL documents them
 * (ncclInvalidArgument with a WARN) and then return ncclInvalidUsage with a WARN that says so, so a
 * program learns at once, and *newcomm is NULL.  Shrinking (ncclCommShrink) is supported.
 */
#include "api.h"
#include "checks.h"
#include "comm.h"
#include "init.h"

NCCL_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId) {
  MENDCHECK(mendCommCheck(comm, "ncclCommGetUniqueId"));
  MENDARGCHECK(uniqueId != NULL, ncclInvalidArgument, "ncclCommGetUniqueId: uniqueId is NULL");
  WARN("ncclCommGetUniqueId: Mend does not support growing communicators (ncclCommGrow) yet");
  return ncclInvalidUsage;
}

/* An existing rank: its communicator, rank -1, more ranks than it has. */
static ncclResult_t checkExistingRank(struct ncclComm* comm, int nRanks, int rank) {
  MENDCHECK(mendCommCheck(comm, "ncclCommGrow"));
  MENDARGCHECK(rank == -1, ncclInvalidArgument, "ncclCommGrow: an existing rank must pass rank -1 (got %d)", rank);
  MENDARGCHECK(nRanks > comm->nRanks, ncclInvalidArgument,
               "ncclCommGrow: nRanks %d must exceed the communicator's size %d", nRanks, comm->nRanks);
  return ncclSuccess;
}

/* A new rank: no communicator, the coordinator's id, a rank below nRanks (its lower bound, the old
 * size, is known only to the existing ranks). */
static ncclResult_t checkNewRank(int nRanks, const ncclUniqueId* uniqueId, int rank) {
  MENDARGCHECK(uniqueId != NULL, ncclInvalidArgument, "ncclCommGrow: a new rank (comm NULL) needs the uniqueId");
  MENDARGCHECK(nRanks > 1, ncclInvalidArgument, "ncclCommGrow: invalid nRanks %d", nRanks);
  MENDARGCHECK(rank >= 0 && rank < nRanks, ncclInvalidArgument, "ncclCommGrow: new rank %d outside [0, %d)", rank,
               nRanks);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
         ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  MENDARGCHECK(newcomm != NULL, ncclInvalidArgument, "ncclCommGrow: newcomm is NULL");
  *newcomm = NULL;
  if (comm != NULL) MENDCHECK(checkExistingRank(comm, nRanks, rank));
  else MENDCHECK(checkNewRank(nRanks, uniqueId, rank));
  if (config != NULL) {
    struct mendConfig parsed;
    MENDCHECK(mendConfigParse(config, NULL, &parsed)); /* a bad config is reported as such */
  }
  WARN("ncclCommGrow: Mend does not support growing communicators yet (ncclCommShrink is supported)");
  return ncclInvalidUsage;
}
