/*
 * ncclCommSuspend / ncclCommResume / ncclCommMemStats (NCCL 2.29).
 *
 * MemStats counts the memory the communicator holds for its connectors: the FIFO and slot memory of
 * every connected connector this rank owns (net: both ends hold their own; p2p and shm: the receiving
 * end holds it; the one-sided connectors too), the one-sided signal counters, plus what other layers
 * report through mendCommMemAccount.  Suspend (releasable) is the part ncclCommSuspend with
 * NCCL_SUSPEND_MEM frees in host mode: the p2p and shm connectors of the executors (see releasable()).
 *
 * Suspend marks the communicator suspended: collectives, point-to-point and one-sided calls are
 * refused with ncclInvalidUsage until Resume.  With NCCL_SUSPEND_MEM (host mode) it also frees the
 * releasable connectors; Resume has nothing to rebuild eagerly: the next operation connects what it
 * needs, as on a fresh communicator, and every rank must have suspended (a rank that did not keeps its
 * end, and the reconnect waits for it until MEND_CONNECT_TIMEOUT_MS).  Net connectors stay (the proxy
 * and the resilient net hold them until the communicator ends), as does device memory (device mode).
 * The release reaches into the transport's table (transport_priv.h): it belongs in the transport
 * layer once that has a call to release a connector.
 */
#include <stdint.h>
#include <stdlib.h>

#include "api.h"
#include "checks.h"
#include "comm.h"
#include "enqueue/plan.h"
#include "enqueue/plan_cache.h"
#include "onesided.h"
#include "transport/fifo.h"
#include "transport/transport.h"
#include "transport/transport_priv.h"

void mendCommMemAccount(struct ncclComm* comm, int64_t bytes) {
  if (comm != NULL) atomic_fetch_add_explicit(&comm->memExtraBytes, bytes, memory_order_relaxed);
}

/* Bytes one connector holds in this rank's memory. */
static uint64_t connBytes(const struct mendConnector* conn) {
  if (conn->kind != MEND_TRANSPORT_NET && conn->dir != MEND_RECV) return 0; /* the receiver holds it */
  return (uint64_t)conn->slotBytes * (uint64_t)conn->nSlots + sizeof(struct mendFifo);
}

/* Connectors suspend releases (host mode): the executors' p2p and shm ones.  Both ends of those are
 * plain memory that a later connect makes again; each end holds a reference (p2p) or a mapping (shm)
 * of the receiver's FIFO, so a peer still finishing its last operation keeps reading valid memory.
 * Net connectors stay: the proxy and the resilient net hold them until the communicator ends; so do
 * the one-sided ones, which the receiver thread drains. */
static int releasable(const struct ncclComm* comm, const struct mendConnector* conn) {
  return comm->hostMode && conn->kind != MEND_TRANSPORT_NET && conn->connIndex < MEND_NCONN_ENGINE;
}

/* Bytes of every connected connector of comm, walked through the transport's lookup (read-only):
 * those suspend can release, and the others. */
static void connectorBytes(struct ncclComm* comm, uint64_t* canRelease, uint64_t* persist) {
  *canRelease = *persist = 0;
  if (comm->transport == NULL) return;
  for (int c = 0; c < comm->nChannels; c++)
    for (int peer = 0; peer < comm->nRanks; peer++)
      for (int dir = MEND_SEND; dir <= MEND_RECV; dir++)
        for (int k = 0; k < MEND_NCONN_INDEX; k++) {
          const struct mendConnector* conn = mendTransportGetConn(comm, c, peer, dir, k);
          if (conn) *(releasable(comm, conn) ? canRelease : persist) += connBytes(conn);
        }
}

/* Free the releasable connectors (the communicator is idle and suspended): each is taken out of the
 * transport's table under its lock, then freed; the planner connects it again when an operation
 * needs it (mendPlanConnect asks for every connector the lookup does not find).  Bytes released. */
static uint64_t releaseConnectors(struct ncclComm* comm) {
  struct mendTransport* t = comm->transport;
  uint64_t bytes = 0;
  if (t == NULL) return 0;
  for (int c = 0; c < comm->nChannels; c++)
    for (int k = 0; k < MEND_NCONN_ENGINE; k++)
      for (int dir = MEND_SEND; dir <= MEND_RECV; dir++) {
        struct mendConnector** slice = t->slices[(c * MEND_NCONN_INDEX + k) * 2 + dir];
        for (int peer = 0; slice && peer < comm->nRanks; peer++) {
          struct mendConnector* conn = slice[peer];
          if (conn == NULL || !releasable(comm, conn)) continue;
          pthread_mutex_lock(&t->lock); /* peerGone walks the table on the bootstrap's thread */
          slice[peer] = NULL;
          pthread_mutex_unlock(&t->lock);
          if (conn->connected) bytes += connBytes(conn);
          mendTransportOpsOf(conn->kind)->free(comm, conn);
          free(conn);
        }
      }
  return bytes;
}

/* Kept plans (plan_cache.h) list only the connectors that were missing when they were built, and
 * their works point at connectors: after a release they must be planned again.  The communicator is
 * idle (no plan is lent), so the cache goes and the planner makes a new one at the next call. */
static void dropKeptPlans(struct ncclComm* comm) {
  if (comm->planner == NULL || comm->planner->cache == NULL) return;
  mendPlanCacheFree(comm->planner->cache);
  comm->planner->cache = NULL;
}

/* Suspend and resume need a communicator that finished init and is still usable. */
static ncclResult_t checkUsable(struct ncclComm* comm, const char* api) {
  MENDCHECK(mendCommCheck(comm, api));
  int state = atomic_load(&comm->state);
  MENDARGCHECK(state == MEND_COMM_READY, ncclInvalidUsage,
               "%s: communicator %p is not ready (initializing, finalized, revoked or failed: state %d)", api,
               (void*)comm, state);
  MENDARGCHECK(!mendCommAborted(comm), ncclInvalidUsage, "%s: communicator %p was aborted", api, (void*)comm);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags) {
  MENDCHECK(checkUsable(comm, "ncclCommSuspend"));
  MENDARGCHECK((flags & ~NCCL_SUSPEND_MEM) == 0, ncclInvalidArgument,
               "ncclCommSuspend: invalid flags 0x%x (valid: NCCL_SUSPEND_MEM 0x%x)", flags, NCCL_SUSPEND_MEM);
  MENDARGCHECK(atomic_load(&comm->inflight) == 0, ncclInvalidUsage,
               "ncclCommSuspend: communicator %p has operations in flight; suspend it while idle", (void*)comm);
  if (atomic_exchange(&comm->suspended, 1)) {
    INFO(NCCL_INIT, "ncclCommSuspend: communicator %p is already suspended", (void*)comm);
    return ncclSuccess;
  }
  uint64_t released = 0;
  if (flags & NCCL_SUSPEND_MEM) {
    dropKeptPlans(comm);
    released = releaseConnectors(comm);
  }
  INFO(NCCL_INIT, "comm %p rank %d suspended (flags 0x%x): %llu bytes of connector memory released", (void*)comm,
       comm->rank, flags, (unsigned long long)released);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommResume, ncclComm_t comm);
ncclResult_t pncclCommResume(ncclComm_t comm) {
  MENDCHECK(checkUsable(comm, "ncclCommResume"));
  if (!atomic_exchange(&comm->suspended, 0)) {
    INFO(NCCL_INIT, "ncclCommResume: communicator %p was not suspended", (void*)comm);
    return ncclSuccess;
  }
  INFO(NCCL_INIT, "comm %p rank %d resumed", (void*)comm, comm->rank);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  MENDCHECK(mendCommCheck(comm, "ncclCommMemStats"));
  MENDARGCHECK(value != NULL, ncclInvalidArgument, "ncclCommMemStats: value is NULL");
  int64_t extra = atomic_load_explicit(&comm->memExtraBytes, memory_order_relaxed);
  uint64_t canRelease, persist;
  connectorBytes(comm, &canRelease, &persist);
  persist += mendRmaBytes(comm) + (extra > 0 ? (uint64_t)extra : 0);
  switch (stat) {
    case ncclStatGpuMemSuspend: *value = canRelease; break;
    case ncclStatGpuMemSuspended: *value = (uint64_t)atomic_load(&comm->suspended); break;
    case ncclStatGpuMemPersist: *value = persist; break;
    case ncclStatGpuMemTotal: *value = canRelease + persist; break;
    default:
      WARN("ncclCommMemStats: invalid stat %d (valid: 0..%d)", (int)stat, (int)ncclStatGpuMemTotal);
      return ncclInvalidArgument;
  }
  return ncclSuccess;
}
