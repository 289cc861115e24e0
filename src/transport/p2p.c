/*
 * p2p: ranks of one process.  The receiver allocates the connector memory (FIFO counters, then
 * slots); the sender's connector points at the same memory, so the producer writes straight into
 * the consumer's slots.  Where the memory lives:
 *   host mode                      plain host memory;
 *   device mode, same device       device memory (kernels on one GPU: the fastest path, and how
 *                                  several ranks share one GPU);
 *   device mode, other devices     pinned host memory mapped for every device.
 * A host-side block holds the reference count: both ends hold a reference on it and on each other's
 * bell page, so either comm may be freed first.
 */
#include "transport/transport_priv.h"

#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "misc/cudrv.h"
#include "misc/utils.h"

enum p2pMemKind { P2P_MEM_HOST = 0, P2P_MEM_PINNED = 1, P2P_MEM_DEVICE = 2 };

/* The connector memory of one connection, shared by its two ends. */
struct p2pBlock {
  _Atomic int refs; /* receiver + sender */
  int kind;         /* enum p2pMemKind */
  void* mem;        /* [struct mendFifo | pad to MEND_CONN_HDR_BYTES | slots] */
};

struct p2pPriv {
  struct p2pBlock* block;      /* the shared block (one reference held) */
  struct mendBellSeg* peerSeg; /* the peer comm's bell page (one reference held) */
};

void mendConnAttach(struct mendTransport* t, struct mendConnector* conn, void* mem) {
  conn->fifo = (struct mendFifo*)mem;
  conn->buff = (char*)mem + MEND_CONN_HDR_BYTES;
  conn->nSlots = MEND_FIFO_SLOTS;
  conn->slotBytes = t->buffBytes / MEND_FIFO_SLOTS;
}

static void blockRelease(struct p2pBlock* b) {
  if (!b || atomic_fetch_sub(&b->refs, 1) != 1) return;
  if (b->kind == P2P_MEM_DEVICE) mendCuDevFree(b->mem);
  else if (b->kind == P2P_MEM_PINNED) mendCuHostFree(b->mem);
  else free(b->mem);
  free(b);
}

/* Point conn at the block: host views where the host may touch it, device views in device mode. */
static void attachBlock(struct ncclComm* comm, struct mendConnector* conn, struct p2pBlock* b) {
  mendConnAttach(comm->transport, conn, b->mem);
  if (b->kind != P2P_MEM_HOST) {
    conn->devFifo = conn->fifo;
    conn->devBuff = conn->buff;
  }
  if (b->kind == P2P_MEM_DEVICE) { /* kernels only */
    conn->fifo = NULL;
    conn->buff = NULL;
  }
}

static ncclResult_t blockAlloc(struct ncclComm* comm, struct mendConnector* conn, struct p2pBlock** out) {
  struct mendTransport* t = comm->transport;
  size_t bytes = mendConnMemBytes(t);
  struct p2pBlock* b;
  MENDCHECK(MENDCALLOC(b, 1));
  ncclResult_t res = ncclSuccess;
  if (!comm->hostMode) {
    MENDCHECKGOTO(mendCuEnter(comm->cuCtx), res, fail);
    b->kind = comm->peerInfo[conn->peer].cudaDev == comm->cudaDev ? P2P_MEM_DEVICE : P2P_MEM_PINNED;
    res = b->kind == P2P_MEM_DEVICE ? mendCuDevAlloc(bytes, &b->mem) : mendCuHostAlloc(bytes, &b->mem);
    if (res != ncclSuccess) goto fail;
  } else {
    int err = posix_memalign(&b->mem, MEND_CONN_HDR_BYTES, bytes);
    if (err || !b->mem) {
      WARN("P2P: cannot allocate %zu bytes of FIFO for channel %d from rank %d", bytes, conn->channel, conn->peer);
      res = ncclSystemError;
      goto fail;
    }
    memset(b->mem, 0, MEND_CONN_HDR_BYTES);
  }
  atomic_store(&b->refs, 2); /* ours, and one handed to the sender with the info (it may outlive us) */
  *out = b;
  return ncclSuccess;
fail:
  free(b);
  return res;
}

static ncclResult_t p2pSetup(struct ncclComm* comm, struct mendConnector* conn, struct mendConnInfo* mine) {
  struct mendTransport* t = comm->transport;
  struct p2pPriv* priv;
  MENDCHECK(MENDCALLOC(priv, 1));
  conn->priv = priv;
  if (conn->dir == MEND_RECV) {
    MENDCHECK(blockAlloc(comm, conn, &priv->block));
    attachBlock(comm, conn, priv->block);
    mine->u.p2p.mem = (uint64_t)(uintptr_t)priv->block;
  }
  atomic_fetch_add(&t->bellSeg->refs, 1);
  mine->u.p2p.bellSeg = (uint64_t)(uintptr_t)t->bellSeg;
  return ncclSuccess;
}

static ncclResult_t p2pConnect(struct ncclComm* comm, struct mendConnector* conn, const struct mendConnInfo* peer) {
  struct p2pPriv* priv = conn->priv;
  if (conn->dir == MEND_SEND) {
    priv->block = (struct p2pBlock*)(uintptr_t)peer->u.p2p.mem;
    if (!priv->block) {
      WARN("P2P: rank %d sent no FIFO for channel %d", conn->peer, conn->channel);
      return ncclInternalError;
    }
    attachBlock(comm, conn, priv->block);
  }
  priv->peerSeg = (struct mendBellSeg*)(uintptr_t)peer->u.p2p.bellSeg;
  conn->peerBell = (mendBell_t*)priv->peerSeg->map;
  return ncclSuccess;
}

static void p2pFree(struct ncclComm* comm, struct mendConnector* conn) {
  struct p2pPriv* priv = conn->priv;
  if (!priv) return;
  blockRelease(priv->block);
  mendBellSegRelease(priv->peerSeg);
  free(priv);
  conn->priv = NULL;
}

const struct mendTransportOps mendTransportP2p = {
  .name = "P2P",
  .setup = p2pSetup,
  .connect = p2pConnect,
  .free = p2pFree,
};
