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
#include "misc/mac.h"
#include "misc/socket.h"

/* Tags below MEND_BS_TAG_RESERVED are the bootstrap's own; callers use tags >= that value. */
#define MEND_BS_TAG_RESERVED (-1000000)
#define MEND_BS_TAG_ALLGATHER (INT32_MIN + 1) /* ring allgather steps */
#define MEND_BS_TAG_SPLIT (INT32_MIN + 2)     /* child rendezvous of split/shrink */

#define MEND_BS_HANDSHAKE_MAGIC 0x4d454e44424f4f54ULL /* "MENDBOOT": XORed with the comm's magic */
#define MEND_BS_CHALLENGE_MAGIC 0x4d454e444e4f4e43ULL /* "MENDNONC": first word a bootstrap listener sends */
#define MEND_BS_NONCE_BYTES 16                        /* fresh random bytes a listener challenges with */
#define MEND_BS_MSG_BASE (1u << 20)                   /* a message may carry this + 64 bytes per rank */
#define MEND_BS_MAX_UNPROVEN 64                       /* connections a rank's listener lets prove themselves at once */
#define MEND_BS_UNPROVEN_GRACE_MS 200                 /* an unproven connection is not closed to make room before this */

/* The front of ncclUniqueId.internal (the rest is zero).  Wire formats: docs/bootstrap.md. */
struct mendBsId {
  uint64_t magic;                       /* identifies the root: random, or a hash of the NCCL_COMM_ID address */
  union mendSocketAddr addr;            /* root address */
  uint8_t fromCommId;                   /* 1: NCCL_COMM_ID names the root; rank 0 starts it at init */
  uint8_t pad[3];                       /* zero */
  uint8_t secret[MEND_MAC_KEY_BYTES];   /* job secret: random, or derived from MEND_JOB_SECRET / a job id */
};

/* What a bootstrap listener (root or rank) sends first on every accepted connection. */
struct mendBsChallenge {
  uint64_t magic;                         /* MEND_BS_CHALLENGE_MAGIC */
  uint8_t nonce[MEND_BS_NONCE_BYTES];     /* the connector's MAC covers it: a recorded answer is useless */
};

enum mendBsRootKind {
  MEND_BS_ROOT_HELLO = 1, /* a rank reports its listen address */
  MEND_BS_ROOT_TABLE = 2  /* another root forwards the addresses of its ranks */
};
/* Connector to root, after the challenge. */
struct mendBsRootHello {
  uint64_t magic;                       /* magic of the root this is sent to */
  int32_t kind;                         /* enum mendBsRootKind */
  int32_t rank;                         /* HELLO: the rank; TABLE: the sending root's index */
  int32_t nRanks;                       /* communicator size as the sender sees it */
  int32_t nIds;                         /* number of roots */
  int32_t idIdx;                        /* index of the receiving root */
  int32_t count;                        /* HELLO: ids that follow (nIds > 1); TABLE: entries that follow */
  union mendSocketAddr addr;            /* HELLO: the rank's listen address */
  uint8_t nonce[MEND_BS_NONCE_BYTES];   /* the sender's challenge: the root's reply MAC covers it */
  uint32_t pad;                         /* zero */
  uint64_t mac;                         /* mendBsHelloMac: proves the root's secret */
};
/* One entry of a TABLE. */
struct mendBsRootEntry {
  int32_t rank;               /* rank */
  union mendSocketAddr addr;  /* its listen address */
};
enum mendBsRootStatus {
  MEND_BS_ROOT_OK = 0,
  MEND_BS_ROOT_ERR_MAGIC = 1,   /* the id's magic is not this root's */
  MEND_BS_ROOT_ERR_NRANKS = 2,  /* nranks differs from the first rank's (detail: that value) */
  MEND_BS_ROOT_ERR_RANK = 3,    /* rank out of range or reporting to the wrong root */
  MEND_BS_ROOT_ERR_DUP = 4,     /* rank already registered */
  MEND_BS_ROOT_ERR_TIMEOUT = 5, /* not every rank arrived in time (detail: ranks seen) */
  MEND_BS_ROOT_ERR_ROOTS = 6,   /* could not reach another root (scalable init) */
  MEND_BS_ROOT_ERR_AUTH = 7     /* the hello's MAC is wrong: another job's secret, or a stranger */
};
/* Root to rank; with MEND_BS_ROOT_OK the table of nRanks addresses follows. */
struct mendBsRootReply {
  int32_t status;  /* enum mendBsRootStatus */
  int32_t nRanks;  /* table entries that follow when MEND_BS_ROOT_OK */
  int32_t detail;  /* status-specific number */
  int32_t pad;     /* zero */
  uint64_t mac;    /* mendBsReplyMac: proves the root knows the secret (checked when OK) */
};

/* A peer-to-peer message on the wire: this header, then `size` bytes (at most bs->maxMsg). */
enum mendBsMsgType {
  MEND_BS_DATA = 1, /* a tagged message */
  MEND_BS_BYE = 2   /* orderly close: nothing follows on this connection */
};
struct mendBsHeader {
  uint32_t type; /* enum mendBsMsgType */
  int32_t tag;   /* caller's tag */
  uint64_t size; /* payload bytes */
};
/* First bytes on every peer connection, after the listener's challenge: who connects, for which network. */
struct mendBsHandshake {
  uint64_t magic; /* bootstrap magic ^ MEND_BS_HANDSHAKE_MAGIC */
  int32_t rank;   /* connecting rank */
  int32_t nRanks; /* its view of the size (checked) */
  uint64_t mac;   /* mendBsHandshakeMac: proves the network key */
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
  _Atomic int byeSaid;        /* we sent our BYE on sendFd: the peer hanging up after it is orderly */
  int goneSaid;               /* the peer-gone callback ran for this peer (receiver thread only) */
  size_t buffered;            /* payload bytes of qHead.. plus the message being read (under bs->lock) */
};

/* An incoming connection handled by the receiver thread. */
struct mendBsRx {
  int fd;                     /* socket */
  int peer;                   /* sender rank, -1 until the handshake arrived and proved the key */
  int64_t deadline;           /* while peer < 0: dropped when the handshake is not done by then */
  uint8_t nonce[MEND_BS_NONCE_BYTES]; /* challenge sent on accept */
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
  uint8_t key[MEND_MAC_KEY_BYTES];/* every connection proves it (derived from the job secret, or split-chosen) */
  size_t maxMsg;                  /* largest message: MEND_BS_MSG_BASE + 64 bytes per rank */
  size_t maxBuffered;             /* MEND_BOOTSTRAP_MAX_BUFFERED: unreceived bytes kept per peer */
  int64_t helloMs;                /* MEND_BOOTSTRAP_HELLO_TIMEOUT */
  int64_t acceptPauseUntil;       /* accept failed for lack of descriptors: not before then (receiver thread) */
  _Atomic int* commAbort;         /* the communicator's abort flag */
  _Atomic int useCommAbort;       /* 0 after mendBootstrapDetachAbort (revoked communicators) */
  _Atomic int abort;              /* set by mendBootstrapAbort */
  _Atomic int stop;               /* tells the receiver thread to exit */
  _Atomic int closing;            /* Close started: the receiver says BYE on incoming connections */
  _Atomic int rxByeSent;          /* it did (set by the receiver thread; Close waits for it) */
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
  pthread_mutex_t goneLock;       /* goneFn/goneArg, held while the callback runs */
  mendBsPeerGoneFn goneFn;        /* told when a peer's link ends (the transport fails its connectors) */
  void* goneArg;                  /* its argument */
  pthread_mutex_t lock;           /* message queues and recvState */
  pthread_cond_t cond;            /* signalled on every arrival and state change */
  uint64_t seq;                   /* next arrival number */
};

/* Build the network from an address table (takes ownership of listenFd and peerAddrs) and start its
 * receiver thread. */
ncclResult_t mendBsCreate(struct ncclComm* comm, uint64_t magic, const uint8_t key[MEND_MAC_KEY_BYTES], int listenFd,
                          const union mendSocketAddr* listenAddr, union mendSocketAddr* peerAddrs,
                          struct mendBootstrap** out);
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

/* Authentication (bootstrap_id.c).  A listener sends a mendBsChallenge; the connector answers with a
 * MAC over the challenge's nonce and its message, keyed by the secret both should share. */
uint64_t mendBsHelloMac(const uint8_t secret[MEND_MAC_KEY_BYTES], const uint8_t nonce[MEND_BS_NONCE_BYTES],
                        const struct mendBsRootHello* h);
/* MAC of a reply: over the hello's nonce, the reply and tableMac (mendBsTableMac of the table). */
uint64_t mendBsReplyMac(const uint8_t secret[MEND_MAC_KEY_BYTES], const uint8_t nonce[MEND_BS_NONCE_BYTES],
                        const struct mendBsRootReply* rep, uint64_t tableMac);
uint64_t mendBsTableMac(const uint8_t secret[MEND_MAC_KEY_BYTES], const union mendSocketAddr* table, int nRanks);
uint64_t mendBsHandshakeMac(const uint8_t key[MEND_MAC_KEY_BYTES], const uint8_t nonce[MEND_BS_NONCE_BYTES],
                            const struct mendBsHandshake* hs);
/* Send a fresh challenge on an accepted socket without waiting (it always fits a new socket's buffer).
 * Returns 0 when it could not be sent whole. */
int mendBsSendChallenge(int fd, uint8_t nonce[MEND_BS_NONCE_BYTES]);
/* Read a listener's challenge (bounded by timeoutMs and *abortFlag). */
ncclResult_t mendBsRecvChallenge(int fd, uint8_t nonce[MEND_BS_NONCE_BYTES], _Atomic int* abortFlag,
                                 int64_t timeoutMs, const union mendSocketAddr* from);
/* Root that rank r reports to among nIds (ranks spread evenly, in order). */
static inline int mendBsRootOf(int rank, int nRanks, int nIds) { return (int)((int64_t)rank * nIds / nRanks); }
/* How many ranks report to root idx: those from ceil(idx * nRanks / nIds) up to the next root's first. */
static inline int mendBsGroupSize(int idx, int nRanks, int nIds) {
  int64_t first = ((int64_t)idx * nRanks + nIds - 1) / nIds, next = ((int64_t)(idx + 1) * nRanks + nIds - 1) / nIds;
  return (int)(next - first);
}
/* Start a root (bootstrap_root.c) on an open listening socket; nRanks < 0 when the first rank will tell. */
ncclResult_t mendBsRootStart(int listenFd, const struct mendBsId* id, int nRanks);

/* For the communicator layer. */
/* Stop watching the communicator's abort flag: a revoked communicator sets its flag for good to stop
 * in-flight work but keeps its out-of-band network for split and shrink; only mendBootstrapAbort (or
 * Close) stops it afterwards. */
void mendBootstrapDetachAbort(struct mendBootstrap* bs);
/* State of the link from `peer` (enum mendBsLinkState), for resilience and tests. */
int mendBootstrapPeerState(struct mendBootstrap* bs, int peer);

#endif
