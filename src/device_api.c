/*
 * Host functions of NCCL 2.28's device API (declared by NCCL in nccl_device.h, not nccl.h, but
 * exported by libnccl.so.2).  Mend has no device-side communication API: the calls that would build
 * device resources fail with ncclInvalidUsage and a clear warning; the team queries answer from the
 * communicator's layout so host code that only inspects teams works.
 * The handle types are opaque here: only pointers to them cross the ABI.
 */
#include "api.h"
#include "checks.h"
#include "comm.h"
#include "misc/debug.h"

/* NCCL's ncclTeam_t: three ints returned by value. */
typedef struct {
  int nRanks;  /* ranks in the team */
  int rank;    /* my rank in the team */
  int stride;  /* world-rank distance between consecutive team ranks */
} mendTeam_t;

struct mendDevOpaque;  /* ncclDevComm_t, ncclDevCommRequirements_t, barrier/LLA2A handles, requirements */

#define UNSUPPORTED(api)                                                         \
  do {                                                                           \
    WARN("%s: Mend does not support the NCCL device API", api);                  \
    return ncclInvalidUsage;                                                     \
  } while (0)

static int commOk(struct ncclComm* comm, const char* api) { return mendCommCheck(comm, api) == ncclSuccess; }

NCCL_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, const struct mendDevOpaque* reqs,
         struct mendDevOpaque* outDevComm);
ncclResult_t pncclDevCommCreate(ncclComm_t comm, const struct mendDevOpaque* reqs, struct mendDevOpaque* outDevComm) {
  UNSUPPORTED("ncclDevCommCreate");
}

NCCL_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, const struct mendDevOpaque* devComm);
ncclResult_t pncclDevCommDestroy(ncclComm_t comm, const struct mendDevOpaque* devComm) {
  UNSUPPORTED("ncclDevCommDestroy");
}

NCCL_API(mendTeam_t, ncclTeamWorld, ncclComm_t comm);
mendTeam_t pncclTeamWorld(ncclComm_t comm) {
  if (!commOk(comm, "ncclTeamWorld")) return (mendTeam_t){0, -1, 0};
  return (mendTeam_t){comm->nRanks, comm->rank, 1};
}

/* Load-store accessible ranks: the ranks of my host (contiguous in the usual rank layout). */
NCCL_API(mendTeam_t, ncclTeamLsa, ncclComm_t comm);
mendTeam_t pncclTeamLsa(ncclComm_t comm) {
  if (!commOk(comm, "ncclTeamLsa")) return (mendTeam_t){0, -1, 0};
  return (mendTeam_t){comm->nLocalRanks, comm->localRank, 1};
}

/* One rank per host, at my local position: hosts are nLocalRanks apart. */
NCCL_API(mendTeam_t, ncclTeamRail, ncclComm_t comm);
mendTeam_t pncclTeamRail(ncclComm_t comm) {
  if (!commOk(comm, "ncclTeamRail")) return (mendTeam_t){0, -1, 0};
  return (mendTeam_t){comm->nNodes, comm->node, comm->nLocalRanks};
}

NCCL_API(int, ncclTeamRankToWorld, ncclComm_t comm, mendTeam_t team, int rank);
int pncclTeamRankToWorld(ncclComm_t comm, mendTeam_t team, int rank) {
  if (!commOk(comm, "ncclTeamRankToWorld")) return -1;
  if (rank < 0 || rank >= team.nRanks) {
    WARN("ncclTeamRankToWorld: rank %d outside the team of %d", rank, team.nRanks);
    return -1;
  }
  int world = comm->rank + (rank - team.rank) * team.stride;
  return world >= 0 && world < comm->nRanks ? world : -1;
}

NCCL_API(int, ncclTeamRankToLsa, ncclComm_t comm, mendTeam_t team, int rank);
int pncclTeamRankToLsa(ncclComm_t comm, mendTeam_t team, int rank) {
  int world = pncclTeamRankToWorld(comm, team, rank);
  if (world < 0 || comm->rankToNode == NULL) return -1;
  return comm->rankToNode[world] == comm->node ? comm->rankToLocalRank[world] : -1;
}

NCCL_API(ncclResult_t, ncclLsaBarrierCreateRequirement, mendTeam_t team, int nBarriers, struct mendDevOpaque* outHandle,
         struct mendDevOpaque* outReq);
ncclResult_t pncclLsaBarrierCreateRequirement(mendTeam_t team, int nBarriers, struct mendDevOpaque* outHandle,
                                              struct mendDevOpaque* outReq) {
  UNSUPPORTED("ncclLsaBarrierCreateRequirement");
}

NCCL_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, mendTeam_t team, int nBarriers,
         struct mendDevOpaque* outHandle, struct mendDevOpaque* outReq);
ncclResult_t pncclGinBarrierCreateRequirement(ncclComm_t comm, mendTeam_t team, int nBarriers,
                                              struct mendDevOpaque* outHandle, struct mendDevOpaque* outReq) {
  UNSUPPORTED("ncclGinBarrierCreateRequirement");
}

NCCL_API(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize);
int pncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  WARN("ncclLLA2ACalcSlots: Mend does not support the NCCL device API");
  return 0;
}

NCCL_API(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots, struct mendDevOpaque* outHandle,
         struct mendDevOpaque* outReq);
ncclResult_t pncclLLA2ACreateRequirement(int nBlocks, int nSlots, struct mendDevOpaque* outHandle,
                                         struct mendDevOpaque* outReq) {
  UNSUPPORTED("ncclLLA2ACreateRequirement");
}
