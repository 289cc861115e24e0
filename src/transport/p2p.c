/*
 * p2p: ranks of one process.  The receiver allocates the FIFO and slots; the sender's connector
 * points at the same memory, so the producer writes straight into the consumer's slots.  Both ends
 * hold a reference on that block and on each other's bell page: either comm may be freed first.
 */
#include "transport/transport_priv.h"

#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "misc/utils.h"

/* Header of a p2p block: the FIFO counters, then the reference count, all inside the first page. */
struct p2pHdr {
  struct mendFifo fifo;  /* head/tail/bytes shared by both ends */
  _Atomic int refs;      /* receiver + sender */
};
_Static_assert(sizeof(struct p2pHdr) <= MEND_CONN_HDR_BYTES, "p2p header must fit the header page");

struct p2pPriv {
  struct p2pHdr* mem;          /* the shared block (one reference held) */
  struct mendBellSeg* peerSeg; /* the peer comm's bell page (one reference held) */
};

void mendConnAttach(struct mendTransport* t, struct mendConnector* conn, void* mem) {
  conn->fifo = (struct mendFifo*)mem;
  conn->buff = (char*)mem + MEND_CONN_HDR_BYTES;
  conn->nSlots = MEND_FIFO_SLOTS;
  conn->slotBytes = t->buffBytes / MEND_FIFO_SLOTS;
}

static void memRelease(struct p2pHdr* mem) {
  if (mem && atomic_fetch_sub(&mem->refs, 1) == 1) free(mem);
}

static ncclResult_t p2pSetup(struct ncclComm* comm, struct mendConnector* conn, struct mendConnInfo* mine) {
  struct mendTransport* t = comm->transport;
  struct p2pPriv* priv;
  MENDCHECK(MENDCALLOC(priv, 1));
  conn->priv = priv;
  if (conn->dir == MEND_RECV) {
    void* mem = NULL;
    int err = posix_memalign(&mem, MEND_CONN_HDR_BYTES, mendConnMemBytes(t));
    if (err || !mem) {
      WARN("P2P: cannot allocate %zu bytes of FIFO for channel %d from rank %d", mendConnMemBytes(t), conn->channel, conn->peer);
      return ncclSystemError;
    }
    memset(mem, 0, MEND_CONN_HDR_BYTES);
    priv->mem = mem;
    /* One reference for us and one handed to the sender with the info (it may outlive us). */
    atomic_store(&priv->mem->refs, 2);
    mendConnAttach(t, conn, mem);
    mine->u.p2p.mem = (uint64_t)(uintptr_t)mem;
  }
  atomic_fetch_add(&t->bellSeg->refs, 1);
  mine->u.p2p.bellSeg = (uint64_t)(uintptr_t)t->bellSeg;
  return ncclSuccess;
}

static ncclResult_t p2pConnect(struct ncclComm* comm, struct mendConnector* conn, const struct mendConnInfo* peer) {
  struct p2pPriv* priv = conn->priv;
  if (conn->dir == MEND_SEND) {
    priv->mem = (struct p2pHdr*)(uintptr_t)peer->u.p2p.mem;
    if (!priv->mem) {
      WARN("P2P: rank %d sent no FIFO for channel %d", conn->peer, conn->channel);
      return ncclInternalError;
    }
    mendConnAttach(comm->transport, conn, priv->mem);
  }
  priv->peerSeg = (struct mendBellSeg*)(uintptr_t)peer->u.p2p.bellSeg;
  conn->peerBell = (mendBell_t*)priv->peerSeg->map;
  return ncclSuccess;
}

static void p2pFree(struct ncclComm* comm, struct mendConnector* conn) {
  struct p2pPriv* priv = conn->priv;
  if (!priv) return;
  memRelease(priv->mem);
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
