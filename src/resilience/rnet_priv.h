/*
 * Private to the resilient net (rnet*.c).  README.md in this folder describes the protocol:
 *   a logical connection = one PATH per NIC pair; each path = a data comm (sender -> receiver) and a
 *   ctrl comm (receiver -> sender, acknowledgements) of the base Net.  Messages are numbered in
 *   posting order on both ends (no sequence header on the wire: a path's stream starts at the
 *   receiver's RESUME value), the receiver acknowledges the count of messages it fully placed, and
 *   the sender reports an isend done only once it is acknowledged.
 */
#ifndef MEND_RESILIENCE_RNET_PRIV_H_
#define MEND_RESILIENCE_RNET_PRIV_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "misc/socket.h"
#include "resilience/rnet.h"
#include "transport/net.h"

#define RNET_MAGIC 0x524e4554u           /* "RNET": handles, hellos, control messages */
#define RNET_MR_MAGIC 0x524e4d52u        /* "RNMR": a live registration */
#define RNET_WINDOW MEND_NET_MAX_REQUESTS /* messages in flight per comm (and base requests per path) */
#define RNET_NCTRL 8                     /* control messages in flight per comm */
#define RNET_BASE_HANDLE_BYTES (MEND_NET_HANDLE_MAXSIZE - 16) /* room for the base listen handle */

/* What the receiver's listen hands the sender (through the transport's connection info). */
struct rnetHandle {
  uint32_t magic;                     /* RNET_MAGIC: rejects handles of another Net */
  uint16_t dev;                       /* receiver's primary device */
  uint16_t nDevs;                     /* receiver's device count */
  struct rnetComm* stage;             /* sender side: the comm being built (meaningless on the wire) */
  char base[RNET_BASE_HANDLE_BYTES];  /* base listen handle of the primary device */
};

/* Exchanged once per connection on the primary path: sender -> receiver on the data comm, then
 * receiver -> sender on the ctrl comm. */
struct rnetHello {
  uint32_t magic;                                        /* RNET_MAGIC */
  int32_t nDevs;                                         /* the writer's devices */
  int32_t primary;                                       /* the writer's primary device */
  int32_t rank;                                          /* the writer's rank (-1: not attached) */
  uint64_t connId;                                       /* the writer's id of this connection (OOB notices) */
  uint32_t validMask;                                    /* bit d: handles[d] and probe[d] are usable */
  uint32_t pad;                                          /* keeps what follows aligned */
  union mendSocketAddr probe[MEND_RNET_MAX_PATHS];       /* the writer's probe address per device */
  char handles[MEND_RNET_MAX_PATHS][MEND_NET_HANDLE_MAXSIZE]; /* the writer's listen handle per device */
};

enum rnetCtrlType {
  RNET_CTRL_ACK = 1,    /* value: messages fully placed so far */
  RNET_CTRL_RESUME = 2  /* the first message of the receiver on a path: same value, replay starts there */
};

/* A control message, receiver -> sender on the ctrl comm of the active path. */
struct rnetCtrl {
  uint32_t magic;  /* RNET_MAGIC */
  uint32_t type;   /* enum rnetCtrlType */
  uint64_t value;  /* messages fully placed by the receiver */
};

/* Buffers of one comm that the base moves (registered on the paths' comms). */
struct rnetArea {
  struct rnetHello mine;              /* our hello */
  struct rnetHello peer;              /* the peer's hello */
  struct rnetCtrl ctrl[RNET_NCTRL];   /* control messages in flight (ring) */
};

enum rnetPathState {
  RNET_PATH_CONNECTING = 0, /* handshake not finished */
  RNET_PATH_IDLE,           /* connected, standing by (a backup) */
  RNET_PATH_ACTIVE,         /* carrying the traffic */
  RNET_PATH_DEAD            /* fenced: its comms are closed, it can never write again */
};

struct rnetPath {
  int state;                              /* enum rnetPathState */
  int localDev;                           /* our base device */
  int remoteDev;                          /* the peer's base device */
  void* data;                             /* base sendComm (sender) or recvComm (receiver) of messages */
  void* ctrl;                             /* base recvComm (sender) or sendComm (receiver) of control */
  char handle[MEND_NET_HANDLE_MAXSIZE];   /* base handle our connect uses (the base keeps state in it) */
  void* dataArea;                         /* registration of the area on `data` (hello) */
  void* ctrlArea;                         /* registration of the area on `ctrl` */
  int64_t deadSinceMs;                    /* when it was fenced (fail-back bookkeeping) */
  _Atomic int killed;                     /* set by another thread (link down, OOB notice): fence it */
  uint64_t msgs;                          /* messages carried (statistics) */
};

struct rnetMr {
  uint32_t magic;                         /* RNET_MR_MAGIC while registered */
  int type;                               /* MEND_PTR_* */
  void* base[MEND_RNET_MAX_PATHS];        /* base registration per path (NULL once the path is dead) */
  struct rnetMr* next;                    /* in the comm's list (dead paths deregister everything) */
};

/* One message: posted by the user, kept until acknowledged (sender) or placed (receiver). */
struct rnetReq {
  struct rnetComm* comm;  /* owner */
  int used;               /* handed to the user and not yet reported done */
  uint64_t seq;           /* message number on this connection, from 0 */
  char* data;             /* user buffer */
  size_t size;            /* sender: bytes; receiver: buffer size */
  int got;                /* receiver: bytes received */
  struct rnetMr* mr;      /* user registration */
  void* base;             /* base request in flight, or NULL */
  int basePath;           /* path of `base` */
};

enum rnetStage {
  RNET_STAGE_START = 0,   /* nothing done */
  RNET_STAGE_HELLO,       /* primary being connected / hellos moving */
  RNET_STAGE_PATHS,       /* backups being connected */
  RNET_STAGE_READY        /* handed to the user */
};

struct rnetComm {
  int isSend;                                     /* 1: sendComm, 0: recvComm */
  struct rnetCtx* ctx;                            /* the context it was made from */
  const mendNet_t* base;                          /* the Net under us */
  uint64_t connId;                                /* our id (OOB notices name it) */
  uint64_t peerConnId;                            /* the peer's id of this connection */
  int peerRank;                                   /* the peer's rank (-1: unknown) */
  int stage;                                      /* enum rnetStage */
  int64_t deadlineMs;                             /* handshake gives up after this */
  int nPaths;                                     /* paths (primary first, then the failover chain) */
  struct rnetPath paths[MEND_RNET_MAX_PATHS];     /* [0] primary */
  int active;                                     /* path carrying traffic, -1 when none is left */
  int waitResume;                                 /* sender: hold traffic until the receiver's RESUME */
  ncclResult_t error;                             /* set when no path is left: every call fails */
  struct rnetArea* area;                          /* hello and control buffers */
  void* hsReq[2];                                 /* handshake requests in flight: [0] our hello, [1] theirs */
  void* listens[MEND_RNET_MAX_PATHS];             /* sender: base listen per local device (ctrl comms) */
  int hsStep;                                     /* handshake sub-step */
  uint64_t nPosted;                               /* messages posted by the user */
  uint64_t nDone;                                 /* sender: acknowledged; receiver: placed */
  uint64_t nIssued;                               /* messages handed to the base on the active path */
  uint64_t nBaseDone;                             /* sender: base isends completed (in order) */
  struct rnetReq reqs[RNET_WINDOW];               /* message seq lives at reqs[seq % RNET_WINDOW] */
  void* ctrlReq[RNET_NCTRL];                      /* control requests in flight (ring) */
  uint64_t ctrlPosted, ctrlDone;                  /* ring counters */
  uint64_t ctrlSent;                              /* receiver: highest value sent */
  int sendResume;                                 /* receiver: next control message is a RESUME */
  struct rnetMr* mrs;                             /* live registrations */
  int64_t lastProgressMs;                         /* sender: last acknowledgement (or start of waiting) */
  int probing;                                    /* a probe of the active path is running */
  struct rnetProbe* probe;                        /* that probe */
  uint64_t failovers;                             /* statistics */
  struct rnetComm* next;                          /* in ctx's list of comms (OOB notices, link events) */
};

struct rnetCtx {
  const mendNet_t* base;         /* the Net under us */
  void* baseCtx;                 /* its context */
  int ownBaseCtx;                /* we made baseCtx (init) and finalize it */
  int nDevs;                     /* base devices */
  struct ncclComm* comm;         /* communicator for OOB signals (NULL in tests: no OOB) */
  int rank;                      /* our rank, -1 when not attached */
  pthread_mutex_t lock;          /* protects `comms` */
  struct rnetComm* comms;        /* live data comms */
  uint64_t nextConnId;           /* id generator */
};

/* ---- rnet.c ---- */
/* Every pending thing of one comm that can move now (called from isend, irecv and test). */
ncclResult_t mendRnetProgress(struct rnetComm* rc);
/* Register the user's memory on path p (a path connected after regMr, or re-registration). */
void mendRnetCtxAdd(struct rnetCtx* ctx, struct rnetComm* rc);
void mendRnetCtxRemove(struct rnetCtx* ctx, struct rnetComm* rc);

/* ---- rnet_conn.c: listen, connect, accept, close ---- */
ncclResult_t mendRnetListen(void* ctx, int dev, void* handle, void** listenComm);
ncclResult_t mendRnetConnect(void* ctx, int dev, void* handle, void** sendComm);
ncclResult_t mendRnetAccept(void* listenComm, void** recvComm);
ncclResult_t mendRnetCloseSend(void* sendComm);
ncclResult_t mendRnetCloseRecv(void* recvComm);
ncclResult_t mendRnetCloseListen(void* listenComm);
/* Close path p's base comms (idempotent). */
void mendRnetPathClose(struct rnetComm* rc, int p);

/* ---- rnet_fail.c: failover ---- */
/* Path p failed (cause for the log): fence it, pick the next healthy path, start the resume. */
ncclResult_t mendRnetFailPath(struct rnetComm* rc, int p, ncclResult_t res, const char* cause);
/* Apply kills requested by other threads (link events, OOB notices, tests). */
ncclResult_t mendRnetApplyKills(struct rnetComm* rc);

#endif
