/*
 * A bootstrap link between every pair of ranks, opened at init.  A process that dies (SIGKILL, a
 * crash, an abort) then breaks a TCP connection at every other rank, so every rank's bootstrap sees
 * the loss at once and tells the transport (peer-gone), which fails the communicator's operations.
 * Without it only the ranks the bootstrap happened to connect (ring neighbours of the allgather)
 * see the loss; the others wait forever on survivors that already left the operation, and a
 * shrink that needs them waits too.
 * Rank r sends one small message to every higher rank (one connection per pair) and receives one
 * from every lower rank.  Above LINKS_MAX_RANKS ranks (one descriptor per peer per rank) only the
 * links the bootstrap opens anyway exist.
 */
#include "bootstrap.h"
#include "checks.h"
#include "comm.h"
#include "init.h"
#include "misc/debug.h"

#define LINKS_TAG 0x4c4e4b00    /* bootstrap tag of the link messages ("LNK") */
#define LINKS_MAX_RANKS 512     /* above this, no full mesh (descriptors) */

ncclResult_t mendInitLinkAll(struct ncclComm* comm) {
  if (comm->nRanks > LINKS_MAX_RANKS) {
    INFO(NCCL_INIT, "Rank %d: %d ranks, no bootstrap link to every peer (above %d): a lost rank is seen first by the "
         "ranks linked to it", comm->rank, comm->nRanks, LINKS_MAX_RANKS);
    return ncclSuccess;
  }
  int32_t me = comm->rank;
  for (int p = comm->rank + 1; p < comm->nRanks; p++)
    MENDCHECK(mendBootstrapSend(comm->bootstrap, p, LINKS_TAG, &me, sizeof(me)));
  for (int p = 0; p < comm->rank; p++) {
    int32_t from = -1;
    MENDCHECK(mendBootstrapRecv(comm->bootstrap, p, LINKS_TAG, &from, sizeof(from)));
    if (from != p) {
      WARN("Init: rank %d's link message names rank %d", p, from);
      return ncclInternalError;
    }
  }
  return ncclSuccess;
}
