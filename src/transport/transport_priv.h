/*
 * Internals shared by transport.c, transport_connect.c and the three transports (p2p, shm, net).
 * Each transport is one const ops table; the connect code drives every request through
 * setup -> (exchange info over the bootstrap) -> connect, so adding a transport adds one table.
 */
#ifndef MEND_TRANSPORT_TRANSPORT_PRIV_H_
#define MEND_TRANSPORT_TRANSPORT_PRIV_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "transport/net.h"
#include "transport/transport.h"
#include "graph/graph.h"

#define MEND_CONN_HDR_BYTES 4096 /* slot memory starts one page after the FIFO counters */
_Static_assert(sizeof(struct mendFifo) <= MEND_CONN_HDR_BYTES, "the FIFO counters fit before the slots");
_Static_assert(offsetof(struct mendFifo, line) % 64 == 0 && sizeof(struct mendFifoLine) == 64,
               "each latency line is one cache line");
#define MEND_SHM_NAME_LEN 64     /* POSIX shm names we build ("/mend-...") */

/* A bell page: comm->bell lives in one so local peers in other processes can map it.  Peers in the
 * same process share the mapping and hold references (a peer may ring it after our free). */
struct mendBellSeg {
  _Atomic int refs;               /* owner + same-process peers */
  void* map;                      /* the mapped page (the bell word is at offset 0) */
  size_t size;                    /* mapping length */
  char name[MEND_SHM_NAME_LEN];   /* shm name while not unlinked, "" after */
};

/* Connection info sent to the peer for one request. */
struct mendConnInfo {
  int channel;    /* channel of the request (checked on receipt) */
  int connIndex;  /* connIndex of the request */
  int dir;        /* direction of the SENDER's connector */
  int kind;       /* transport the sender chose (both ends must agree) */
  union {
    struct {
      uint64_t mem;      /* struct p2p memory block (receiver -> sender) */
      uint64_t bellSeg;  /* struct mendBellSeg* of the sender of this info, one reference taken for the peer */
    } p2p;
    struct { char name[MEND_SHM_NAME_LEN]; } shm;  /* segment name (receiver -> sender) */
    struct { char handle[64]; } ipc;               /* device mode, same GPU: CUDA IPC handle of the block */
    struct { _Alignas(8) char handle[MEND_NET_HANDLE_MAXSIZE]; } net;  /* listen handle (receiver -> sender) */
  } u;
};

struct mendTransportOps {
  const char* name;  /* "P2P", "SHM", "NET" (log lines) */
  /* Prepare our end and fill what the peer needs. */
  ncclResult_t (*setup)(struct ncclComm* comm, struct mendConnector* conn, struct mendConnInfo* mine);
  /* Complete with the peer's info; ncclInProgress: call again (Net connect/accept in progress). */
  ncclResult_t (*connect)(struct ncclComm* comm, struct mendConnector* conn, const struct mendConnInfo* peer);
  /* Release our end; never waits for the peer. */
  void (*free)(struct ncclComm* comm, struct mendConnector* conn);
};

extern const struct mendTransportOps mendTransportP2p;
extern const struct mendTransportOps mendTransportShm;
extern const struct mendTransportOps mendTransportNet;

/* Per-communicator transport state (comm->transport). */
struct mendTransport {
  int* peerKind;                          /* [nRanks] enum mendTransportKind per peer */
  struct mendBellSeg* bellSeg;            /* the page holding comm->bell */
  void** peerBellMap;                     /* [nRanks] our mapping of a shm peer's bell page, or NULL */
  struct mendConnector** slices[MEND_MAXCHANNELS * MEND_NCONN_INDEX * 2]; /* [channel][connIndex][dir] -> [nRanks] */
  pthread_mutex_t lock;                   /* connector table changes (connect vs free), lostPeer */
  int lostPeer;                           /* the first peer lost (died or aborted), -1 while none: the
                                           * communicator is broken; under lock */
  size_t buffBytes;                       /* NCCL_BUFFSIZE, validated */
  const mendNet_t* net;                   /* Net for net connectors (NULL until needed): the resilient one when on */
  void* netCtx;                           /* the Net's per-communicator context */
  const mendNet_t* baseNet;               /* the Net under the resilient one (NULL when resilience is off) */
  void* baseCtx;                          /* its context */
  int nNicsMax;                           /* largest NIC count over all ranks */
  _Atomic uint64_t nicTx[MEND_TOPO_MAX_NICS]; /* bytes sent per local Net device */
  _Atomic uint64_t nicRx[MEND_TOPO_MAX_NICS]; /* bytes received per local Net device */
};

const struct mendTransportOps* mendTransportOpsOf(int kind);
/* Bell pages (transport.c). */
void mendBellSegRelease(struct mendBellSeg* seg);
/* Unique shm name for something of this comm ("/mend-<hash>-<rank>-<pid>-<what><n>"). */
void mendShmName(struct ncclComm* comm, const char* what, char* name);
/* shm helpers (shm.c): create (O_EXCL) or open an existing segment and map it. */
ncclResult_t mendShmCreate(const char* name, size_t size, void** map);
ncclResult_t mendShmOpen(const char* name, size_t size, void** map);
/* Bytes of one connector's memory: header page + slots. */
static inline size_t mendConnMemBytes(const struct mendTransport* t) { return MEND_CONN_HDR_BYTES + t->buffBytes; }
/* Point conn at a memory block laid out as [struct mendFifo | pad to a page | slots]. */
void mendConnAttach(struct mendTransport* t, struct mendConnector* conn, void* mem);

#endif
