/*
 * Bootstrap internals shared by bootstrap.c (peer network), bootstrap_root.c (unique id, root
 * rendezvous) and bootstrap_split.c (child networks built over a parent's), plus the two extra
 * calls the communicator layer needs.  Wire formats are described in docs/bootstrap.md.
 */
#ifndef MEND_BOOTSTRAP_PRIV_H_
#define MEND_BOOTSTRAP_PRIV_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "bootstrap.h"
#include "misc/socket.h"

/* Tags below MEND_BS_TAG_RESERVED are the bootstrap's own; callers use tags >= that value. */
#define MEND_BS_TAG_RESERVED (-1000000)
#define MEND_BS_TAG_ALLGATHER (INT32_MIN + 1) /* ring allgather steps */
#define MEND_BS_TAG_SPLIT (INT32_MIN + 2)     /* child rendezvous of split/shrink */

#define MEND_BS_HANDSHAKE_MAGIC 0x4d454e44424f4f54ULL /* "MENDBOOT": XORed with the comm's magic */
#define MEND_BS_MAX_MSG (1ULL << 30)                  /* larger sizes mean a corrupt stream */

/* A peer-to-peer message on the wire: this header, then `size` bytes. */
enum mendBsMsgType {
  MEND_BS_DATA = 1, /* a tagged message */
  MEND_BS_BYE = 2   /* orderly close: nothing follows on this connection */
};
struct mendBsHeader {
  uint32_t type; /* enum mendBsMsgType */
  int32_t tag;   /* caller's tag */
  uint64_t size; /* payload bytes */
};
/* First bytes on every peer connection: who connects, for which network. */
struct mendBsHandshake {
  uint64_t magic; /* bootstrap magic ^ MEND_BS_HANDSHAKE_MAGIC */
  int32_t rank;   /* connecting rank */
  int32_t nRanks; /* its view of the size (checked) */
};

/* A buffered message. */
struct mendBsMsg {
  struct mendBsMsg* next; /* next message of the same peer, in arrival order */
  int tag;                /* caller's tag */
  uint64_t seq;           /* arrival order across peers (RecvAny picks the oldest) */
  size_t size;            /* payload bytes */
  char data[];            /* payload */
};

enum mendBsLinkState {
  MEND_BS_LINK_OPEN = 0, /* usable (or not connected yet) */
  MEND_BS_LINK_BYE = 1,  /* the peer closed its communicator in order */
  MEND_BS_LINK_LOST = 2  /* the connection broke: the peer died or was aborted */
};

struct mendBsPeer {
  pthread_mutex_t sendLock;   /* one sender at a time on sendFd */
  _Atomic int sendFd;         /* connection we opened to send to this peer, -1 until first send */
  _Atomic int sendState;      /* enum mendBsLinkState of sendFd (EOF seen by the receiver thread) */
  int recvState;              /* enum mendBsLinkState of the peer's connection to us (under bs->lock) */
  struct mendBsMsg* qHead;    /* buffered messages from this peer (under bs->lock) */
  struct mendBsMsg* qTail;    /* last buffered message */
  struct mendBsHeader back;   /* BYE the peer writes back on sendFd when it closes (receiver thread) */
  size_t backOff;             /* bytes of `back` read so far */
};

/* An incoming connection handled by the receiver thread. */
struct mendBsRx {
  int fd;                     /* socket */
  int peer;                   /* sender rank, -1 until the handshake arrived */
  size_t off;                 /* bytes of the current header/handshake/payload already read */
  union {
    struct mendBsHandshake hs;/* while peer < 0 */
    struct mendBsHeader hdr;  /* while msg == NULL */
  } u;
  struct mendBsMsg* msg;      /* payload being read, NULL while reading a header */
};

struct mendBootstrap {
  int rank, nRanks;               /* my rank and the network size */
  uint64_t magic;                 /* identifies this network (unique id magic or split-chosen) */
  _Atomic int* commAbort;         /* the communicator's abort flag */
  _Atomic int useCommAbort;       /* 0 after mendBootstrapDetachAbort (revoked communicators) */
  _Atomic int abort;              /* set by mendBootstrapAbort */
  _Atomic int stop;               /* tells the receiver thread to exit */
  _Atomic int closing;            /* Close started: the receiver says BYE on incoming connections */
  int rxByeSent;                  /* it did (receiver thread only) */
  _Atomic int users;              /* threads inside bootstrap calls (abort waits for 0) */
  int64_t timeoutMs;              /* MEND_BOOTSTRAP_TIMEOUT */
  int listenFd;                   /* where peers connect */
  union mendSocketAddr listenAddr;/* its address */
  union mendSocketAddr* peerAddrs;/* [nRanks] listen address of every rank */
  struct mendBsPeer* peers;       /* [nRanks] */
  int wakeFd;                     /* eventfd that interrupts the receiver's poll */
  pthread_t thread;               /* receiver thread */
  int threadRunning;              /* thread must be joined */
  struct mendBsRx* rx;            /* incoming connections (receiver thread only) */
  int nRx, maxRx;                 /* used / allocated entries of rx */
  pthread_mutex_t lock;           /* message queues and recvState */
  pthread_cond_t cond;            /* signalled on every arrival and state change */
  uint64_t seq;                   /* next arrival number */
};

/* Build the network from an address table (takes ownership of listenFd and peerAddrs) and start its
 * receiver thread. */
ncclResult_t mendBsCreate(struct ncclComm* comm, uint64_t magic, int listenFd, const union mendSocketAddr* listenAddr,
                          union mendSocketAddr* peerAddrs, struct mendBootstrap** out);
/* Aborted (by mendBootstrapAbort, the communicator's flag, or `extra` when non-NULL)? */
int mendBsAborted(struct mendBootstrap* bs, _Atomic int* extra);
/* Recv that also stops on `extra` (a child communicator's abort flag during split). */
ncclResult_t mendBsRecvExtra(struct mendBootstrap* bs, int peer, int tag, void* data, size_t size,
                             _Atomic int* extra);
/* Listening socket on the bootstrap interface: MEND_OOB_IFNAME, else the interface on the subnet of
 * `near` (when non-NULL), else NCCL_SOCKET_IFNAME rules. */
ncclResult_t mendBsListenOnOobIface(const union mendSocketAddr* near, int* fd, union mendSocketAddr* bound);
/* A unique id whose root listens on 127.0.0.1 (ncclCommInitAll: every rank is in this process).
 * MEND_OOB_IFNAME still decides where the ranks themselves listen. */
ncclResult_t mendBsGetLoopbackId(ncclUniqueId* id);
/* Random 64-bit value. */
uint64_t mendBsRandom64(void);

/* For the communicator layer. */
/* Stop watching the communicator's abort flag: a revoked communicator sets its flag for good to stop
 * in-flight work but keeps its out-of-band network for split and shrink; only mendBootstrapAbort (or
 * Close) stops it afterwards. */
void mendBootstrapDetachAbort(struct mendBootstrap* bs);
/* State of the link from `peer` (enum mendBsLinkState), for resilience and tests. */
int mendBootstrapPeerState(struct mendBootstrap* bs, int peer);

#endif
