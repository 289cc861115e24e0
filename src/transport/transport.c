/*
 * Transport layer lifecycle: per-peer transport choice, the bell page, the Net and topology,
 * channels, and release.  Connections themselves are made lazily (transport_connect.c).
 */
#include "transport/transport_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bootstrap.h"
#include "checks.h"
#include "device/kernel.h"
#include "misc/cudrv.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "monitor/monitor.h"
#include "plugin/net_plugin.h"
#include "proxy.h"
#include "resilience/resil.h"
#include "resilience/rnet.h"

static const char* kindName[] = { "P2P", "SHM", "NET" };
static _Atomic uint32_t shmCounter; /* makes shm names unique within this process */

void mendShmName(struct ncclComm* comm, const char* what, char* name) {
  snprintf(name, MEND_SHM_NAME_LEN, "/mend-%016llx-%d-%d-%s%u", (unsigned long long)comm->commHash, comm->rank,
           (int)getpid(), what, (unsigned)atomic_fetch_add(&shmCounter, 1));
}

const struct mendTransportOps* mendTransportOpsOf(int kind) {
  switch (kind) {
    case MEND_TRANSPORT_P2P: return &mendTransportP2p;
    case MEND_TRANSPORT_SHM: return &mendTransportShm;
    default: return &mendTransportNet;
  }
}

/* The transport between ranks a and b: the same on both ends (a function of allgathered info and
 * of parameters that must be set alike on every rank). */
static int chooseKind(struct ncclComm* comm, int a, int b) {
  const struct mendPeerInfo *pa = comm->peerInfo + a, *pb = comm->peerInfo + b;
  int sameHost = pa->hostHash == pb->hostHash, sameProc = sameHost && pa->pidHash == pb->pidHash;
  const char* force = mendParamForceTransport();
  if (force && force[0]) {
    if (strcasecmp(force, "net") == 0) return MEND_TRANSPORT_NET;
    if (strcasecmp(force, "shm") == 0 && sameHost) return MEND_TRANSPORT_SHM;
    if (strcasecmp(force, "p2p") == 0 && sameProc) return MEND_TRANSPORT_P2P;
    /* p2p/shm cannot cross what they cannot cross: fall through to the normal choice. */
  }
  int shmOk = !mendParamShmDisable();
  if (sameProc && !mendParamP2pDisable()) return MEND_TRANSPORT_P2P;
  if (sameHost && shmOk) return MEND_TRANSPORT_SHM;
  return MEND_TRANSPORT_NET;
}

static ncclResult_t checkForce(void) {
  const char* force = mendParamForceTransport();
  if (force && force[0] && strcasecmp(force, "p2p") && strcasecmp(force, "shm") && strcasecmp(force, "net")) {
    WARN("MEND_FORCE_TRANSPORT=%s: expected p2p, shm or net", force);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

static ncclResult_t bellSegCreate(struct ncclComm* comm, struct mendBellSeg** out) {
  struct mendBellSeg* seg;
  MENDCHECK(MENDCALLOC(seg, 1));
  mendShmName(comm, "bell", seg->name);
  seg->size = 4096;
  ncclResult_t res = mendShmCreate(seg->name, seg->size, &seg->map);
  if (res != ncclSuccess) { free(seg); return res; }
  atomic_store(&seg->refs, 1);
  *out = seg;
  return ncclSuccess;
}

static void bellSegUnlink(struct mendBellSeg* seg) {
  if (seg->name[0]) shm_unlink(seg->name);
  seg->name[0] = '\0';
}

void mendBellSegRelease(struct mendBellSeg* seg) {
  if (!seg || atomic_fetch_sub(&seg->refs, 1) != 1) return;
  bellSegUnlink(seg);
  munmap(seg->map, seg->size);
  free(seg);
}

/* Do some ranks of one host talk over shm?  Then bell pages must be mapped by each other.
 * O(nRanks): the choice depends only on (same process, same host), so comparing each rank with
 * the first rank of its host finds such a pair when one exists. */
static int anyShmPair(struct ncclComm* comm) {
  int* first = calloc((size_t)comm->nNodes, sizeof(int));
  int found = 0;
  if (!first) return 1; /* the safe answer: do the exchange */
  for (int h = 0; h < comm->nNodes; h++) first[h] = -1;
  for (int r = 0; r < comm->nRanks && !found; r++) {
    int* f = first + comm->rankToNode[r];
    if (*f < 0) *f = r;
    else found = chooseKind(comm, *f, r) == MEND_TRANSPORT_SHM;
  }
  free(first);
  return found;
}

/* What every rank tells the others at transport init. */
struct initInfo {
  char bellName[MEND_SHM_NAME_LEN]; /* shm name of its bell page */
  int nNics;                        /* its Net devices */
};

static ncclResult_t mapPeerBells(struct ncclComm* comm, const struct initInfo* all) {
  struct mendTransport* t = comm->transport;
  for (int r = 0; r < comm->nRanks; r++) {
    if (r == comm->rank || t->peerKind[r] != MEND_TRANSPORT_SHM) continue;
    MENDCHECK(mendShmOpen(all[r].bellName, 4096, &t->peerBellMap[r]));
  }
  return ncclSuccess;
}

static ncclResult_t initNet(struct ncclComm* comm) {
  struct mendTransport* t = comm->transport;
  const char* name = comm->config.netName ? comm->config.netName : mendParamNet();
  MENDCHECK(mendNetSelect(name, &t->net));
  ncclResult_t res = t->net->init(&t->netCtx, comm->commHash, mendDebugLog);
  if (res != ncclSuccess) {
    WARN("NET/%s: init failed (error %d)", t->net->name, res);
    t->net = NULL;
    return res;
  }
  MENDCHECK(mendTopoDiscover(comm, t->net, &comm->topo));
  INFO(NCCL_INIT | NCCL_NET, "Using network %s with %d device(s)", t->net->name, comm->topo->nNics);
  if (comm->topo->nNics == 0) {
    WARN("NET/%s: no network device, but rank %d has peers that need the net", t->net->name, comm->rank);
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* Hot repair: stack the resilient net over the base Net when some rank has 2+ NICs (MEND_RESILIENCE).
 * Collective (the service allgathers probe addresses): every rank decides alike. */
static ncclResult_t initResil(struct ncclComm* comm) {
  struct mendTransport* t = comm->transport;
  if (!mendRnetEnabled(t->nNicsMax)) {
    INFO(NCCL_INIT | MEND_RESIL, "NET: resilience off (MEND_RESILIENCE=%lld, at most %d NIC(s) per rank)",
         (long long)mendParamResilience(), t->nNicsMax);
    return ncclSuccess;
  }
  mendBell_t* wake;
  MENDCHECK(mendProxyBell(comm, &wake));
  MENDCHECK(mendResilCreate(comm, t->net, wake, &comm->resil));
  void* ctx = NULL;
  MENDCHECK(mendRnetCtxCreate(t->net, t->netCtx, comm, &ctx));
  /* Failover chains follow the topology (PCIe/NUMA distance): a backup is the nearest NIC. */
  int order[MEND_TOPO_MAX_NICS];
  int nOrder = mendTopoNicOrder(comm, order, MEND_TOPO_MAX_NICS);
  MENDCHECK(mendRnetSetOrder(ctx, order, nOrder));
  mendResilAttach(comm->resil, ctx);
  t->baseNet = t->net;
  t->baseCtx = t->netCtx;
  t->net = &mendNetResilient;
  t->netCtx = ctx;
  INFO(NCCL_INIT | NCCL_NET | MEND_RESIL, "Using network Resilient over %s (%d NIC(s) here, %d at most per rank)",
       t->baseNet->name, comm->topo->nNics, t->nNicsMax);
  return ncclSuccess;
}

static ncclResult_t exchangeInit(struct ncclComm* comm, int shared) {
  struct mendTransport* t = comm->transport;
  struct initInfo* all;
  MENDCHECK(MENDCALLOC(all, comm->nRanks));
  ncclResult_t res = ncclSuccess;
  snprintf(all[comm->rank].bellName, MEND_SHM_NAME_LEN, "%s", t->bellSeg->name);
  all[comm->rank].nNics = comm->topo ? comm->topo->nNics : 0;
  MENDCHECKGOTO(mendBootstrapAllGather(comm->bootstrap, all, sizeof(*all)), res, free_all);
  for (int r = 0; r < comm->nRanks; r++)
    if (all[r].nNics > t->nNicsMax) t->nNicsMax = all[r].nNics;
  if (shared) {
    MENDCHECKGOTO(mapPeerBells(comm, all), res, free_all);
    /* Everyone mapped every page it needs: the names can go, so nothing leaks if we die later. */
    MENDCHECKGOTO(mendBootstrapBarrier(comm->bootstrap, MEND_TAG_TRANSPORT + 0), res, free_all);
  }
free_all:
  free(all);
  return res;
}

static ncclResult_t validateBuffsize(struct mendTransport* t) {
  int64_t b = mendParamBuffsize();
  if (b < 64 * 1024 || b > ((int64_t)1 << 34)) {
    WARN("NCCL_BUFFSIZE=%lld is outside [64 KiB, 16 GiB]; using 4194304", (long long)b);
    b = 4194304;
  }
  t->buffBytes = (size_t)b & ~(size_t)(MEND_FIFO_SLOTS * 64 - 1); /* slots stay cache-line aligned */
  return ncclSuccess;
}

static void logPeers(struct ncclComm* comm) {
  for (int r = 0; r < comm->nRanks; r++) {
    if (r == comm->rank) continue;
    int k = comm->transport->peerKind[r];
    INFO(k == MEND_TRANSPORT_NET ? NCCL_NET : k == MEND_TRANSPORT_SHM ? NCCL_SHM : NCCL_P2P,
         "Rank %d -> %d via %s (host %d -> %d)", comm->rank, r, kindName[k], comm->node, comm->rankToNode[r]);
  }
}

/* The bootstrap saw a peer's link end.  Its p2p and shm connectors can never move again: mark them
 * failed, so an operation waiting on one fails (the host engine looks only when nothing moved, so
 * data already in a FIFO is still used), and in device mode stop the kernels when the peer died.
 * Net connectors have their own failure detection (hot repair).  A lost peer (died or aborted)
 * breaks the communicator: every connector fails, net ones too, since ranks that wait on a survivor
 * which already left the operation would wait forever; the application shrinks or aborts it; and
 * connection setup in progress stops (lostPeer; transport_connect.c) instead of waiting for a
 * connect that will never come, from the lost peer or from a survivor that already gave up. */
static void peerGone(void* arg, int peer, int lost) {
  struct ncclComm* comm = arg;
  struct mendTransport* t = comm->transport;
  int marked = 0;
  pthread_mutex_lock(&t->lock);
  if (lost && t->lostPeer < 0) t->lostPeer = peer;
  for (size_t i = 0; i < sizeof(t->slices) / sizeof(t->slices[0]); i++) {
    for (int r = lost ? 0 : peer; r < (lost ? comm->nRanks : peer + 1); r++) {
      struct mendConnector* conn = t->slices[i] ? t->slices[i][r] : NULL;
      if (!conn || !conn->connected || (!lost && conn->kind == MEND_TRANSPORT_NET)) continue;
      int none = ncclSuccess;
      marked += atomic_compare_exchange_strong(&conn->error, &none, (int)ncclRemoteError);
    }
  }
  pthread_mutex_unlock(&t->lock);
  if (lost) mendCommSetAsyncError(comm, ncclRemoteError);
  if (marked && lost) {
    WARN("Rank %d: rank %d on host %s (pid %d) is gone (its process died or aborted): the communicator's "
         "operations fail (shrink or abort it)", comm->rank, peer,
         comm->peerInfo ? comm->peerInfo[peer].hostId : "?", comm->peerInfo ? comm->peerInfo[peer].pid : -1);
    if (comm->devState) {
      __atomic_store_n(&comm->devState->errPeer, peer, __ATOMIC_RELAXED);
      int32_t none = 0;
      __atomic_compare_exchange_n(&comm->devState->error, &none, (int32_t)ncclRemoteError, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE);
    }
  } else if (marked) {
    INFO(NCCL_INIT, "Rank %d: rank %d closed its communicator; operations still waiting on it fail", comm->rank,
         peer);
  }
  if (marked && comm->bell) mendBellRing(comm->bell);
}

ncclResult_t mendTransportInit(struct ncclComm* comm) {
  ncclResult_t res = ncclSuccess;
  struct mendTransport* t;
  MENDCHECK(checkForce());
  MENDCHECK(MENDCALLOC(t, 1));
  t->lostPeer = -1;
  comm->transport = t;
  pthread_mutex_init(&t->lock, NULL);
  MENDCHECKGOTO(validateBuffsize(t), res, fail);
  MENDCHECKGOTO(MENDCALLOC(t->peerKind, comm->nRanks), res, fail);
  MENDCHECKGOTO(MENDCALLOC(t->peerBellMap, comm->nRanks), res, fail);
  int needNet = 0;
  for (int r = 0; r < comm->nRanks; r++) {
    t->peerKind[r] = r == comm->rank ? MEND_TRANSPORT_P2P : chooseKind(comm, comm->rank, r);
    needNet |= t->peerKind[r] == MEND_TRANSPORT_NET;
  }
  MENDCHECKGOTO(bellSegCreate(comm, &t->bellSeg), res, fail);
  comm->bell = (mendBell_t*)t->bellSeg->map;
  comm->bellPage = t->bellSeg->map;
  if (needNet) MENDCHECKGOTO(initNet(comm), res, fail);
  int shared = anyShmPair(comm);
  /* These conditions are the same on every rank, so either all ranks exchange or none does. */
  if (shared || comm->nNodes > 1 || needNet) MENDCHECKGOTO(exchangeInit(comm, shared), res, fail);
  if (needNet) MENDCHECKGOTO(initResil(comm), res, fail);
  bellSegUnlink(t->bellSeg);
  MENDCHECKGOTO(mendGraphSetup(comm, t->nNicsMax), res, fail);
  logPeers(comm);
  MENDCHECKGOTO(mendMonitorCommAdd(comm, t->buffBytes / MEND_FIFO_SLOTS), res, fail);
  mendBootstrapSetPeerGone(comm->bootstrap, peerGone, comm);
  return ncclSuccess;
fail:
  mendTransportFree(comm);
  return res;
}

static struct mendConnector** sliceOf(struct mendTransport* t, int channel, int dir, int connIndex) {
  return t->slices[(channel * MEND_NCONN_INDEX + connIndex) * 2 + dir];
}

struct mendConnector* mendTransportGetConn(struct ncclComm* comm, int channel, int peer, int dir, int connIndex) {
  struct mendTransport* t = comm ? comm->transport : NULL;
  if (!t || channel < 0 || channel >= comm->nChannels || peer < 0 || peer >= comm->nRanks || (dir != MEND_SEND && dir != MEND_RECV) ||
      connIndex < 0 || connIndex >= MEND_NCONN_INDEX)
    return NULL;
  struct mendConnector** slice = sliceOf(t, channel, dir, connIndex);
  struct mendConnector* conn = slice ? slice[peer] : NULL;
  return conn && conn->connected ? conn : NULL;
}

int mendTransportKindOf(struct ncclComm* comm, int peer) {
  if (!comm || !comm->transport || peer < 0 || peer >= comm->nRanks) return MEND_TRANSPORT_NET;
  return comm->transport->peerKind[peer];
}

static void freeConnectors(struct ncclComm* comm) {
  struct mendTransport* t = comm->transport;
  for (size_t i = 0; i < sizeof(t->slices) / sizeof(t->slices[0]); i++) {
    if (!t->slices[i]) continue;
    for (int r = 0; r < comm->nRanks; r++) {
      struct mendConnector* conn = t->slices[i][r];
      if (!conn) continue;
      mendTransportOpsOf(conn->kind)->free(comm, conn);
      free(conn);
    }
    free(t->slices[i]);
    t->slices[i] = NULL;
  }
}

ncclResult_t mendTransportFree(struct ncclComm* comm) {
  struct mendTransport* t = comm ? comm->transport : NULL;
  if (!t) return ncclSuccess;
  mendBootstrapSetPeerGone(comm->bootstrap, NULL, NULL); /* returns after a call in progress */
  mendCuEnter(comm->cuCtx); /* device mode: connector memory is freed through the driver */
  /* The proxy and the resilience service go first: they are the other users of net connectors.
   * The proxy's memory goes after the service, which rings the proxy's bell until it stops. */
  mendProxyStop(comm);
  mendResilStop(comm->resil);
  mendProxyDestroy(comm);
  mendMonitorCommRemove(comm); /* its last snapshot, while the connectors still exist */
  freeConnectors(comm);
  if (t->net && t->netCtx && t->net->finalize) t->net->finalize(t->netCtx);
  if (t->baseNet && t->baseCtx && t->baseNet->finalize) t->baseNet->finalize(t->baseCtx);
  mendResilFree(comm->resil);
  comm->resil = NULL;
  if (t->peerBellMap)
    for (int r = 0; r < comm->nRanks; r++)
      if (t->peerBellMap[r]) munmap(t->peerBellMap[r], 4096);
  comm->bell = NULL;
  comm->bellPage = NULL;
  mendBellSegRelease(t->bellSeg);
  mendTopoFree(comm->topo);
  comm->topo = NULL;
  mendGraphFree(comm);
  pthread_mutex_destroy(&t->lock);
  free(t->peerBellMap);
  free(t->peerKind);
  free(t);
  comm->transport = NULL;
  return ncclSuccess;
}

ncclResult_t mendTransportNicBytes(struct ncclComm* comm, int dev, uint64_t* tx, uint64_t* rx) {
  if (!comm || !comm->transport || !tx || !rx) {
    WARN("mendTransportNicBytes: NULL argument");
    return ncclInvalidArgument;
  }
  if (dev < 0 || dev >= MEND_TOPO_MAX_NICS || !comm->topo || dev >= comm->topo->nNics) {
    WARN("mendTransportNicBytes: device %d is not one of this rank's %d NIC(s)", dev, comm->topo ? comm->topo->nNics : 0);
    return ncclInvalidArgument;
  }
  *tx = atomic_load(&comm->transport->nicTx[dev]);
  *rx = atomic_load(&comm->transport->nicRx[dev]);
  return ncclSuccess;
}

/* The first net send connector with slots not yet delivered (or failed: *err), or NULL. */
static struct mendConnector* undelivered(struct ncclComm* comm, int* err) {
  struct mendTransport* t = comm->transport;
  *err = ncclSuccess;
  for (int c = 0; c < comm->nChannels; c++) {
    for (int k = 0; k < MEND_NCONN_INDEX; k++) {
      struct mendConnector** slice = sliceOf(t, c, MEND_SEND, k);
      for (int r = 0; slice && r < comm->nRanks; r++) {
        struct mendConnector* conn = slice[r];
        if (!conn || !conn->connected || conn->kind != MEND_TRANSPORT_NET) continue;
        if (mendFifoLoad(&conn->fifo->head) ==
            mendFifoLoad(&conn->fifo->tail))
          continue;
        *err = atomic_load(&conn->error);
        return conn;
      }
    }
  }
  return NULL;
}

ncclResult_t mendTransportDrain(struct ncclComm* comm, int64_t timeoutMs) {
  if (!comm || !comm->transport || !comm->bell) return ncclSuccess;
  int64_t deadline = mendTimeMs() + (timeoutMs > 0 ? timeoutMs : 0);
  for (;;) {
    uint32_t seen = mendBellRead(comm->bell);
    int err;
    struct mendConnector* conn = undelivered(comm, &err);
    if (!conn) return ncclSuccess;
    if (err != ncclSuccess) {
      WARN("transport: rank %d: sends to rank %d (channel %d) cannot be delivered: %s", comm->rank, conn->peer,
           conn->channel, ncclGetErrorString((ncclResult_t)err));
      return (ncclResult_t)err;
    }
    if (mendCommAborted(comm)) return ncclInternalError;
    if (mendTimeMs() >= deadline) {
      WARN("transport: rank %d: sends to rank %d (channel %d) still in flight after %lld ms (MEND_DRAIN_TIMEOUT_MS); "
           "closing anyway", comm->rank, conn->peer, conn->channel, (long long)timeoutMs);
      return ncclRemoteError;
    }
    mendBellWait(comm->bell, seen, 1000);  /* the proxy rings it when a slot is delivered */
  }
}
