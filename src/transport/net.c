/*
 * net: ranks on different hosts (or forced).  Each end has a LOCAL FIFO and slots; the proxy thread
 * moves them through the Net:
 *   send end: for every slot the executor posted (tail), one isend of bytes[s]; when it completes,
 *             head advances and the slot is free again.
 *   recv end: an irecv of slotBytes into every free slot (head); when one completes, bytes[s] gets
 *             the received size and tail advances.
 * Completions are taken in order, so counters move in order.  The Net is reached through a
 * `const mendNet_t*` per connector, so a stacked Net (the resilient one) can take its place.
 */
#include "transport/transport_priv.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "checks.h"
#include "misc/cudrv.h"
#include "misc/utils.h"
#include "misc/param.h"
#include "monitor/monitor.h"
#include "proxy.h"
#include "resilience/rnet.h"

struct netConn {
  struct mendProxyConn pc;            /* first: the proxy's handle on us */
  struct mendConnector* conn;         /* the connector we serve */
  struct ncclComm* comm;              /* its communicator (the executor's direct calls name only the connector) */
  atomic_flag moving;                 /* held by whoever moves this connector now: the proxy or the executor */
  int direct;                         /* MEND_NET_DIRECT: the executor may move it from its own thread */
  ncclResult_t deferred;              /* an error the executor met, for the proxy's next pass (under moving) */
  uint64_t waitSinceNs;               /* receive: first kick since the last arrival that found nothing (0: none) */
  int handedOver;                     /* receive: the proxy was rung to poll while the executor may sleep */
  const mendNet_t* net;               /* Net used (per connector, so it can be swapped) */
  void* ctx;                          /* the Net's per-communicator context */
  int dev;                            /* local Net device (the channel's netDev) */
  void* mem;                          /* local FIFO page + slots */
  int registered;                     /* device mode: mem is registered with CUDA (kernels reach it) */
  _Alignas(8) char handle[MEND_NET_HANDLE_MAXSIZE]; /* peer's listen handle (sender); kept: connect may keep
                                                      state in it; aligned: Nets read it as their struct */
  int haveHandle;                     /* handle copied from the peer's info */
  void* listenComm;                   /* receiver, until accepted */
  void* netComm;                      /* send or recv comm once connected */
  void* mhandle;                      /* registration of the slots */
  void* reqs[MEND_FIFO_SLOTS];        /* request in flight per slot */
  uint64_t posted;                    /* slots handed to the Net */
  uint64_t done;                      /* slots whose request completed */
  _Atomic uint64_t bytes;             /* bytes moved by this connector (read by the monitor) */
  _Atomic uint64_t* nicBytes;         /* the device's tx or rx total */
  struct mendMonConn* mon;            /* throughput monitor's handle; NULL when it is off */
};

static ncclResult_t sendProgress(struct ncclComm* comm, struct mendProxyConn* pc, int* moved, int* busy) {
  struct netConn* nc = (struct netConn*)pc;
  struct mendConnector* conn = nc->conn;
  struct mendFifo* fifo = conn->fifo;
  uint64_t tail = mendFifoLoad(&fifo->tail);
  while (nc->posted < tail) {
    int s = (int)(nc->posted % (uint64_t)conn->nSlots);
    void* req = NULL;
    MENDCHECK(nc->net->isend(nc->netComm, conn->buff + (size_t)s * conn->slotBytes, fifo->bytes[s], 0, nc->mhandle, &req));
    if (!req) break;
    if (nc->mon) mendMonPost(nc->mon, s);
    nc->reqs[s] = req;
    nc->posted++;
    *moved = 1;
  }
  int advanced = 0;
  while (nc->done < nc->posted) {
    int s = (int)(nc->done % (uint64_t)conn->nSlots), d = 0, size = 0;
    MENDCHECK(nc->net->test(nc->reqs[s], &d, &size));
    if (!d) break;
    nc->reqs[s] = NULL;
    atomic_fetch_add_explicit(&nc->bytes, fifo->bytes[s], memory_order_relaxed);
    atomic_fetch_add_explicit(nc->nicBytes, fifo->bytes[s], memory_order_relaxed);
    if (nc->mon) mendMonDone(nc->mon, s, fifo->bytes[s]);
    mendFifoStore(&fifo->head, ++nc->done);
    advanced = 1;
  }
  if (advanced) mendBellRing(comm->bell);
  *moved |= advanced;
  *busy = nc->done < nc->posted;
  return ncclSuccess;
}

static ncclResult_t recvProgress(struct ncclComm* comm, struct mendProxyConn* pc, int* moved, int* busy) {
  struct netConn* nc = (struct netConn*)pc;
  struct mendConnector* conn = nc->conn;
  struct mendFifo* fifo = conn->fifo;
  uint64_t head = mendFifoLoad(&fifo->head);
  while (nc->posted - head < (uint64_t)conn->nSlots) {
    int s = (int)(nc->posted % (uint64_t)conn->nSlots), tag = 0;
    void* data = conn->buff + (size_t)s * conn->slotBytes;
    size_t size = conn->slotBytes;
    void* req = NULL;
    MENDCHECK(nc->net->irecv(nc->netComm, 1, &data, &size, &tag, &nc->mhandle, &req));
    if (!req) break;
    if (nc->mon) mendMonPost(nc->mon, s);
    nc->reqs[s] = req;
    nc->posted++;
    *moved = 1;
  }
  int advanced = 0;
  while (nc->done < nc->posted) {
    int s = (int)(nc->done % (uint64_t)conn->nSlots), d = 0, size = 0;
    MENDCHECK(nc->net->test(nc->reqs[s], &d, &size));
    if (!d) break;
    nc->reqs[s] = NULL;
    if (size < 0 || (size_t)size > conn->slotBytes) {
      WARN("NET/%s: rank %d got %d bytes from rank %d for a %zu-byte slot", nc->net->name, comm->rank, size,
           conn->peer, conn->slotBytes);
      return ncclInternalError;
    }
    fifo->bytes[s] = (uint64_t)size;
    atomic_fetch_add_explicit(&nc->bytes, (uint64_t)size, memory_order_relaxed);
    atomic_fetch_add_explicit(nc->nicBytes, (uint64_t)size, memory_order_relaxed);
    if (nc->mon) mendMonDone(nc->mon, s, (uint64_t)size);
    mendFifoStore(&fifo->tail, ++nc->done);
    advanced = 1;
  }
  if (advanced) mendBellRing(comm->bell);
  *moved |= advanced;
  *busy = nc->done < nc->posted;
  return ncclSuccess;
}

/* Whoever moves a connector holds nc->moving: the proxy's pass skips a connector the executor is
 * moving (and reports it busy, so it looks again soon), and the executor's direct call gives up when
 * the proxy is in it.  An error met by the executor is stored for the proxy's next pass, which
 * handles it as its own (one place logs and marks the connector failed). */
static ncclResult_t moveOnce(struct netConn* nc, int* moved, int* busy) {
  if (nc->deferred != ncclSuccess) return nc->deferred;
  return nc->conn->dir == MEND_SEND ? sendProgress(nc->comm, &nc->pc, moved, busy)
                                    : recvProgress(nc->comm, &nc->pc, moved, busy);
}

static ncclResult_t proxyProgress(struct ncclComm* comm, struct mendProxyConn* pc, int* moved, int* busy) {
  struct netConn* nc = (struct netConn*)pc;
  (void)comm;
  if (atomic_flag_test_and_set_explicit(&nc->moving, memory_order_acquire)) {
    *busy = 1;
    return ncclSuccess;
  }
  ncclResult_t res = moveOnce(nc, moved, busy);
  atomic_flag_clear_explicit(&nc->moving, memory_order_release);
  return res;
}

/* A receive the executor has polled this long without an arrival is handed to the proxy too (its
 * bell is rung once, which restarts its shortest poll interval): the executor stops polling after
 * MEND_SPIN_US and sleeps until the proxy rings it. */
#define KICK_HANDOVER_NS 20000

/* Receive side of a kick, under `moving`: returns 1 when the proxy should be rung now. */
static int recvWaited(struct netConn* nc, uint64_t doneBefore) {
  if (nc->done > doneBefore) {
    nc->waitSinceNs = 0;
    nc->handedOver = 0;
    return 0;
  }
  uint64_t now = mendTimeNs();
  if (nc->waitSinceNs == 0) nc->waitSinceNs = now;
  if (nc->handedOver || now - nc->waitSinceNs < KICK_HANDOVER_NS) return 0;
  nc->handedOver = 1;
  return 1;
}

int mendProxyKick(struct mendConnector* conn) {
  if (!conn || conn->kind != MEND_TRANSPORT_NET || !conn->priv) return 0;
  struct netConn* nc = conn->priv;
  if (!nc->direct || !nc->netComm || !nc->mhandle) return 0;
  if (atomic_flag_test_and_set_explicit(&nc->moving, memory_order_acquire)) return 0;
  int moved = 0, busy = 0, idle = 0, handOver = 0;
  if (nc->deferred == ncclSuccess) {
    uint64_t doneBefore = nc->done;
    ncclResult_t res = moveOnce(nc, &moved, &busy);
    if (res == ncclInProgress) res = ncclInternalError;
    if (res != ncclSuccess) {
      nc->deferred = res;
      atomic_store(&conn->error, (int)res);
    }
    idle = res == ncclSuccess && !busy;
    if (conn->dir == MEND_RECV && res == ncclSuccess) handOver = recvWaited(nc, doneBefore);
  }
  atomic_flag_clear_explicit(&nc->moving, memory_order_release);
  if (handOver) mendBellRing(conn->peerBell);
  return idle;
}

/* The receiver's listen.  Over the resilient net the connection gets its channel's failover chain
 * (mendGraphNicChain: equally near NICs rotate by channel), so when a NIC fails its channels spread
 * over the others as re-planning's Balance expects; MEND_REPLAN=backup keeps the topology order. */
static ncclResult_t netListen(struct ncclComm* comm, struct netConn* nc, void* handle) {
  const char* mode = mendParamReplan();
  const struct mendTopo* topo = comm->topo;
  if (nc->net != &mendNetResilient || (mode && strcasecmp(mode, "backup") == 0))
    return nc->net->listen(nc->ctx, nc->dev, handle, &nc->listenComm);
  int dist[MEND_TOPO_MAX_NICS], chain[MEND_TOPO_MAX_NICS];
  for (int d = 0; d < topo->nNics && d < MEND_TOPO_MAX_NICS; d++) dist[d] = topo->nics[d].dist;
  int k = mendGraphNicChain(nc->conn->channel, nc->dev, topo->nNics, topo->nicOrder, dist, chain);
  return mendRnetListenOrdered(nc->ctx, nc->dev, chain, k, handle, &nc->listenComm);
}

static ncclResult_t netSetup(struct ncclComm* comm, struct mendConnector* conn, struct mendConnInfo* mine) {
  struct mendTransport* t = comm->transport;
  struct netConn* nc;
  if (!t->net) {
    WARN("NET: rank %d has no Net for rank %d", comm->rank, conn->peer);
    return ncclInternalError;
  }
  MENDCHECK(MENDCALLOC(nc, 1));
  conn->priv = nc;
  nc->conn = conn;
  nc->net = t->net;
  nc->ctx = t->netCtx;
  /* The NIC was decided once, by the planner from its plan view and the health registry (a NIC down
   * at either end does not start a new connection); requests made without one use the channel's. */
  nc->dev = conn->netDev >= 0 ? conn->netDev : comm->channels[conn->channel].netDev;
  if (nc->dev < 0 || nc->dev >= MEND_TOPO_MAX_NICS || !comm->topo || nc->dev >= comm->topo->nNics) {
    WARN("NET: channel %d of rank %d has no NIC (device %d of %d)", conn->channel, comm->rank, nc->dev,
         comm->topo ? comm->topo->nNics : 0);
    return ncclInternalError;
  }
  if (nc->dev != comm->channels[conn->channel].netDev)
    INFO(MEND_RESIL | NCCL_NET, "NET: rank %d: channel %d %s rank %d starts on device %d, not %d (down at one end)",
         comm->rank, conn->channel, conn->dir == MEND_SEND ? "to" : "from", conn->peer, nc->dev,
         comm->channels[conn->channel].netDev);
  nc->pc.progress = proxyProgress;
  nc->comm = comm;
  atomic_flag_clear(&nc->moving);
  nc->direct = mendParamNetDirect() != 0;
  nc->pc.error = &conn->error;
  nc->nicBytes = conn->dir == MEND_SEND ? &t->nicTx[nc->dev] : &t->nicRx[nc->dev];
  int err = posix_memalign(&nc->mem, MEND_CONN_HDR_BYTES, mendConnMemBytes(t));
  if (err || !nc->mem) {
    nc->mem = NULL;
    WARN("NET: cannot allocate %zu bytes of FIFO", mendConnMemBytes(t));
    return ncclSystemError;
  }
  memset(nc->mem, 0, MEND_CONN_HDR_BYTES);
  mendConnAttach(t, conn, nc->mem);
  if (!comm->hostMode) {
    /* Device mode: the kernel fills and drains the staging slots the proxy moves (pinned, mapped). */
    void* dev = NULL;
    MENDCHECK(mendCuEnter(comm->cuCtx));
    MENDCHECK(mendCuHostRegister(nc->mem, mendConnMemBytes(t), &dev));
    nc->registered = 1;
    conn->devFifo = (struct mendFifo*)dev;
    conn->devBuff = (char*)dev + MEND_CONN_HDR_BYTES;
  }
  MENDCHECK(mendProxyBell(comm, &conn->peerBell));
  if (conn->dir == MEND_RECV) {
    ncclResult_t res = netListen(comm, nc, mine->u.net.handle);
    if (res != ncclSuccess) {
      WARN("NET/%s: listen on device %d failed (error %d)", nc->net->name, nc->dev, res);
      return res;
    }
  }
  return ncclSuccess;
}

static ncclResult_t netConnect(struct ncclComm* comm, struct mendConnector* conn, const struct mendConnInfo* peer) {
  struct netConn* nc = conn->priv;
  ncclResult_t res;
  if (!nc->netComm) {
    if (conn->dir == MEND_SEND) {
      if (!nc->haveHandle) memcpy(nc->handle, peer->u.net.handle, sizeof(nc->handle));
      nc->haveHandle = 1;
      res = nc->net->connect(nc->ctx, nc->dev, nc->handle, &nc->netComm);
    } else {
      res = nc->net->accept(nc->listenComm, &nc->netComm);
    }
    if (res != ncclSuccess) {
      WARN("NET/%s: %s rank %d on device %d failed (error %d)", nc->net->name,
           conn->dir == MEND_SEND ? "connect to" : "accept from", conn->peer, nc->dev, res);
      return res;
    }
    if (!nc->netComm) return ncclInProgress;
  }
  res = nc->net->regMr(nc->netComm, conn->buff, (size_t)conn->nSlots * conn->slotBytes, MEND_PTR_HOST, &nc->mhandle);
  if (res != ncclSuccess) {
    WARN("NET/%s: cannot register %zu bytes of slots (error %d)", nc->net->name, (size_t)conn->nSlots * conn->slotBytes, res);
    return res;
  }
  if (nc->listenComm) {
    nc->net->closeListen(nc->listenComm);
    nc->listenComm = NULL;
  }
  INFO(NCCL_NET, "Channel %02d: %d %s %d via NET/%s/%d", conn->channel, comm->rank, conn->dir == MEND_SEND ? "->" : "<-",
       conn->peer, nc->net->name, nc->dev);
  if (!nc->mon) MENDCHECK(mendMonitorConnAdd(comm, conn, nc->dev, nc->net, nc->netComm, &nc->mon));
  return mendProxyAdd(comm, &nc->pc);
}

static void netFree(struct ncclComm* comm, struct mendConnector* conn) {
  struct netConn* nc = conn->priv;
  if (!nc) return;
  mendMonitorConnRemove(nc->mon); /* reads the net comm's counters one last time */
  if (nc->netComm) {
    if (nc->mhandle) nc->net->deregMr(nc->netComm, nc->mhandle);
    if (conn->dir == MEND_SEND) nc->net->closeSend(nc->netComm);
    else nc->net->closeRecv(nc->netComm);
  }
  if (nc->listenComm) nc->net->closeListen(nc->listenComm);
  if (nc->registered) mendCuHostUnregister(nc->mem);
  free(nc->mem);
  free(nc);
  conn->priv = NULL;
}

uint64_t mendTransportConnBytes(const struct mendConnector* conn) {
  if (!conn || conn->kind != MEND_TRANSPORT_NET || !conn->priv) return 0;
  return atomic_load_explicit(&((struct netConn*)conn->priv)->bytes, memory_order_relaxed);
}

const struct mendTransportOps mendTransportNet = {
  .name = "NET",
  .setup = netSetup,
  .connect = netConnect,
  .free = netFree,
};
