/*
 * ncclCommSuspend / ncclCommResume / ncclCommMemStats (NCCL 2.29).
 *
 * What Mend does today (host mode and device mode alike):
 *   - MemStats counts the memory the communicator holds for its connectors: the FIFO and slot memory
 *     of every connected connector this rank owns (net: both ends hold their own; p2p and shm: the
 *     receiving end holds it; the one-sided connectors too), the one-sided signal counters, plus
 *     what other layers report through mendCommMemAccount.
 *   - Suspend marks the communicator suspended: collectives and point-to-point calls are refused with
 *     ncclInvalidUsage until Resume (one-sided calls too).  It does NOT release memory yet: releasing
 *     and rebuilding connectors needs the transport's help (tear connectors down while idle, reconnect
 *     at resume), and today the proxy, the resilient net and the planner's kept plans hold pointers to
 *     connectors that nothing can take back from them.
 *     So every counted byte is reported as persistent (ncclStatGpuMemPersist) and
 *     ncclStatGpuMemSuspend, the bytes suspend would release, is 0.
 */
#include <stdint.h>

#include "api.h"
#include "checks.h"
#include "comm.h"
#include "onesided.h"
#include "transport/fifo.h"
#include "transport/transport.h"

void mendCommMemAccount(struct ncclComm* comm, int64_t bytes) {
  if (comm != NULL) atomic_fetch_add_explicit(&comm->memExtraBytes, bytes, memory_order_relaxed);
}

/* Bytes one connector holds in this rank's memory. */
static uint64_t connBytes(const struct mendConnector* conn) {
  if (conn->kind != MEND_TRANSPORT_NET && conn->dir != MEND_RECV) return 0; /* the receiver holds it */
  return (uint64_t)conn->slotBytes * (uint64_t)conn->nSlots + sizeof(struct mendFifo);
}

/* Every connected connector of comm, walked through the transport's lookup (read-only). */
static uint64_t connectorBytes(struct ncclComm* comm) {
  uint64_t sum = 0;
  if (comm->transport == NULL) return 0;
  for (int c = 0; c < comm->nChannels; c++)
    for (int peer = 0; peer < comm->nRanks; peer++)
      for (int dir = MEND_SEND; dir <= MEND_RECV; dir++)
        for (int k = 0; k < MEND_NCONN_INDEX; k++) {
          const struct mendConnector* conn = mendTransportGetConn(comm, c, peer, dir, k);
          if (conn) sum += connBytes(conn);
        }
  return sum;
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
  if (flags & NCCL_SUSPEND_MEM)
    INFO_ONCE(NCCL_INIT, "ncclCommSuspend: Mend keeps connector memory while suspended (releasing it needs "
                         "transport support); operations are refused until ncclCommResume");
  INFO(NCCL_INIT, "comm %p rank %d suspended (flags 0x%x)", (void*)comm, comm->rank, flags);
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
  uint64_t total = connectorBytes(comm) + mendRmaBytes(comm) + (extra > 0 ? (uint64_t)extra : 0);
  switch (stat) {
    case ncclStatGpuMemSuspend: *value = 0; break; /* suspend releases nothing yet (see above) */
    case ncclStatGpuMemSuspended: *value = (uint64_t)atomic_load(&comm->suspended); break;
    case ncclStatGpuMemPersist: *value = total; break;
    case ncclStatGpuMemTotal: *value = total; break;
    default:
      WARN("ncclCommMemStats: invalid stat %d (valid: 0..%d)", (int)stat, (int)ncclStatGpuMemTotal);
      return ncclInvalidArgument;
  }
  return ncclSuccess;
}
