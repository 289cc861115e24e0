/*
 * Private to the resilient net (rnet*.c).  README.md in this folder describes the protocol:
 *   a logical connection = one PATH per NIC pair; each path = a data comm (sender -> receiver) and a
 *   ctrl comm (receiver -> sender, acknowledgements) of the base Net.  Messages are numbered in
 *   posting order on both ends (no sequence header on the wire: a path's stream starts at the
 *   receiver's RESUME value), the receiver acknowledges the count of messages it fully placed, and
 *   the sender reports an isend done only once it is acknowledged.
 *
 *   The RECEIVER decides which path carries the traffic: after any fence it picks the first live
 *   path of the chain and sends RESUME there; the sender keeps a receive posted on the ctrl comm of
 *   every live path and follows the newest RESUME.  So the two ends never have to agree by rule, a
 *   failure seen only by the sender reaches the receiver as a notice (rnet_notice.c), and fail-back
 *   is a planned fence of the backup followed by a RESUME on the rebuilt primary (rnet_rebuild.c).
 */
#ifndef MEND_RESILIENCE_RNET_PRIV_H_
#define MEND_RESILIENCE_RNET_PRIV_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "misc/socket.h"
#include "resilience/detect.h"
#include "resilience/rnet.h"
#include "transport/net.h"

#define RNET_MAGIC 0x524e4554u           /* "RNET": handles, hellos, control messages */
#define RNET_MR_MAGIC 0x524e4d52u        /* "RNMR": a live registration */
#define RNET_WINDOW MEND_NET_MAX_REQUESTS /* messages in flight per comm (and base requests per path) */
#define RNET_NCTRL 8                     /* control messages in flight per comm */
#define RNET_ACK_BATCH 6                 /* held acknowledgements: sent at this many when the receiver waits, */
#define RNET_ACK_MAX 7                   /* ... at this many at once (the sender's FIFO has 8 slots) */
#define RNET_ACK_BYTES MEND_RTT_RATE_BYTES /* ... and less than this many bytes (larger: at once, rate samples) */
#define RNET_BASE_HANDLE_BYTES (MEND_NET_HANDLE_MAXSIZE - 24) /* room for the base listen handle */
#define RNET_VIA_RAILS (-1)              /* a set-up on the primaries' rail (struct rnetHello's via) */
#define RNET_VIA_CROSS (-2)              /* ... from another NIC of the sender, crossing rails */

/* What the receiver's listen hands the sender (through the transport's connection info). */
struct rnetHandle {
  uint32_t magic;                     /* RNET_MAGIC: rejects handles of another Net */
  uint16_t dev;                       /* receiver's primary device */
  uint16_t nDevs;                     /* receiver's device count */
  int32_t rank;                       /* receiver's rank (-1: not attached): a bridge reaches it */
  int32_t pad;                        /* 0 */
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
  int32_t nOrder;                                        /* entries of order (0: none, rotate from primary) */
  int8_t order[MEND_RNET_MAX_PATHS];                     /* the writer's failover order (topology), nearest first */
  union mendSocketAddr probe[MEND_RNET_MAX_PATHS];       /* the writer's probe address per device */
  char handles[MEND_RNET_MAX_PATHS][MEND_NET_HANDLE_MAXSIZE]; /* the writer's listen handle per device */
  int32_t via;                                           /* sender: how this hello came: RNET_VIA_RAILS, _CROSS, */
                                                         /* or a bridge's rank (the set-up's path is a relay) */
  int32_t pad;                                           /* 0 */
  char viaHandle[MEND_NET_HANDLE_MAXSIZE];               /* via a bridge: its listen for the receiver's ctrl comm */
};

/* Sender: a set-up whose primary pair is out of reach (our NIC of the receiver's primary is down):
 * its first path is the last-resort slot, a crossing or relay path (rnet_relay.c). */
struct rnetVia {
  int how;                                /* RNET_VIA_RAILS (not used), _CROSS, or the bridge's rank */
  _Atomic int ready;                      /* a bridge: 0 waiting for its answer, 1 it listens, -1 it refused */
  char dataHandle[MEND_NET_HANDLE_MAXSIZE]; /* the bridge's listen on our rail (our data comm connects) */
  char ctrlHandle[MEND_NET_HANDLE_MAXSIZE]; /* its listen on the receiver's rail (the receiver's ctrl comm) */
  int64_t deadlineMs;                     /* the set-up fails if the bridge has not answered by then */
};

enum rnetCtrlType {
  RNET_CTRL_ACK = 1,    /* value: messages fully placed so far */
  RNET_CTRL_RESUME = 2  /* the first message of the receiver on a path: same value, replay starts there */
};

/* A control message, receiver -> sender on the ctrl comm of the active path (24 bytes). */
struct rnetCtrl {
  uint32_t magic;    /* RNET_MAGIC */
  uint16_t type;     /* enum rnetCtrlType */
  uint16_t epoch;    /* the receiver's switch count: a RESUME older than the last one taken is stale */
  uint64_t value;    /* messages fully placed by the receiver */
  uint32_t delayUs;  /* how long the receiver held it after placing message value-1 (round-trip samples) */
  uint32_t spare;    /* 0 */
};

/* Buffers of one comm that the base moves (registered on the paths' comms). */
struct rnetArea {
  struct rnetHello mine;                       /* our hello */
  struct rnetHello peer;                       /* the peer's hello */
  struct rnetCtrl ctrl[RNET_NCTRL];            /* control messages in flight on the active path (ring) */
  struct rnetCtrl watch[MEND_RNET_MAX_SLOTS];  /* sender: the one receive posted on each idle path */
};

enum rnetPathState {
  RNET_PATH_CONNECTING = 0, /* handshake not finished */
  RNET_PATH_IDLE,           /* connected, standing by (a backup) */
  RNET_PATH_ACTIVE,         /* carrying the traffic */
  RNET_PATH_DEAD,           /* fenced: its comms are closed, it can never write again */
  RNET_PATH_REBUILDING,     /* dead, new base comms being connected (rnet_rebuild.c) */
  RNET_PATH_CONFIRMING      /* receiver: rebuilt on our side, waiting for the sender's REBUILT */
};

/* Steps of a path rebuild (each end runs its own half). */
enum rnetRebuildStage {
  RNET_RB_NONE = 0,   /* not rebuilding */
  RNET_RB_ASKED,      /* sender: REBUILD sent with our ctrl listen handle, waiting for REBUILD_ACK */
  RNET_RB_CONNECT,    /* both: connecting/accepting the new data and ctrl comms */
  RNET_RB_CONFIRM     /* receiver: connected, waiting for the sender's REBUILT */
};

/* Notices: what one end (or a local detector) tells a connection from outside its own requests.
 * Wire format over the bootstrap too (both ends run the same build). */
enum rnetNoticeType {
  RNET_NOTE_KILL = 1,         /* fence path `path` (cause: enum mendRnetKill) */
  RNET_NOTE_REBUILD,          /* sender -> receiver: rebuild `path`; handle = sender's ctrl listen */
  RNET_NOTE_REBUILD_ACK,      /* receiver -> sender: handle = receiver's data listen */
  RNET_NOTE_REBUILT,          /* sender -> receiver: our side of `path` is connected and watching */
  RNET_NOTE_REBUILD_FAIL,     /* either way: the rebuild of `path` is abandoned */
  RNET_NOTE_REBUILD_START,    /* local only (service thread): `path` probed healthy long enough */
  RNET_NOTE_CROSS_PROBED      /* local only (service thread): the crossing probe answered (cause 1) or not (0) */
};

struct rnetNotice {
  uint32_t magic;                          /* RNET_MAGIC */
  uint16_t type;                           /* enum rnetNoticeType */
  uint16_t path;                           /* path index (the same on both ends) */
  uint64_t connId;                         /* the connection it is for (the receiving end's id) */
  int32_t cause;                           /* RNET_NOTE_KILL: enum mendRnetKill */
  int32_t fromRank;                        /* rank that sent it (-1: unknown) */
  uint32_t remote;                         /* 1: from the other end of the connection, 0: local */
  uint32_t pad;                            /* keeps the handle aligned */
  char handle[MEND_NET_HANDLE_MAXSIZE];    /* base listen handle (rebuild) */
};

/* A queued notice (inbox of a connection, in arrival order). */
struct rnetNoticeItem {
  struct rnetNotice n;          /* the notice */
  struct rnetNoticeItem* next;  /* next in the inbox */
};

struct rnetPath {
  _Atomic int state;                      /* enum rnetPathState (read by the service thread) */
  _Atomic int localDev;                   /* our base device (read by the service thread) */
  _Atomic int remoteDev;                  /* the peer's base device (read by the service thread) */
  void* data;                             /* base sendComm (sender) or recvComm (receiver) of messages */
  void* ctrl;                             /* base recvComm (sender) or sendComm (receiver) of control */
  char handle[MEND_NET_HANDLE_MAXSIZE];   /* base handle our connect uses (the base keeps state in it) */
  void* dataArea;                         /* registration of the area on `data` (hello) */
  void* ctrlArea;                         /* registration of the area on `ctrl` */
  int64_t deadSinceMs;                    /* when it was fenced (fail-back bookkeeping) */
  int deadCause;                          /* enum mendRnetKill that fenced it */
  uint64_t msgs;                          /* messages carried (statistics) */
  void* watchReq;                         /* sender: receive posted on ctrl while the path is idle */
  int confirmed;                          /* receiver: the sender's side is up (initial paths, REBUILT) */
  int rbStage;                            /* enum rnetRebuildStage */
  void* rbListen;                         /* base listen of our new comm during a rebuild */
  int64_t rbDeadlineMs;                   /* a rebuild gives up after this */
  int rbFailures;                         /* rebuilds that failed in a row (spaces out retries) */
  _Atomic int64_t rbNotBeforeMs;          /* next rebuild attempt not before this (failures space them) */
  _Atomic int rbPosted;                   /* the service asked for a rebuild; cleared when it ends */
  int relayed;                            /* a relay path: a bridge rank forwards it (relay.h) */
  int relayRank;                          /* ... that bridge (valid when relayed) */
};

/* Device d of the host that wrote hello h exists and has a listen handle. */
static inline int mendRnetDevValid(const struct rnetHello* h, int d) {
  return d >= 0 && d < h->nDevs && d < MEND_RNET_MAX_PATHS && ((h->validMask >> d) & 1);
}

/* Who answers a probe of path p: the peer on its device, or, for a relay path, the bridge on ours
 * (the first hop: the bridge is on our rail, the peer is not). */
static inline void mendRnetProbeTarget(const struct rnetPath* path, int peerRank, int* rank, int* dev) {
  *rank = path->relayed ? path->relayRank : peerRank;
  *dev = path->relayed ? path->localDev : path->remoteDev;
}

struct rnetMr {
  uint32_t magic;                         /* RNET_MR_MAGIC while registered */
  int type;                               /* MEND_PTR_* */
  void* data;                             /* registered range (re-registered on rebuilt paths) */
  size_t size;
  void* base[MEND_RNET_MAX_SLOTS];        /* base registration per path (NULL once the path is dead) */
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
  int64_t postUs;         /* sender: when the user posted it (round-trip estimate, detect.c) */
  uint64_t wordConn;      /* sender: connId of our receive comm whose placed count this message carried (0: none) */
  uint64_t wordCount;     /* sender: ... that count */
  uint64_t placedNs;      /* receiver: when it was placed */
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
  _Atomic int stage;                              /* enum rnetStage (the service skips comms not READY) */
  int64_t deadlineMs;                             /* backups not connected by then start dead */
  _Atomic int nPaths;                             /* paths (primary first, the failover chain, a crossing path) */
  struct rnetPath paths[MEND_RNET_MAX_SLOTS];     /* [0] primary */
  int active;                                     /* path carrying traffic; -1: none (sender: waiting for a RESUME) */
  int waitResume;                                 /* sender: hold traffic until the receiver's RESUME */
  int64_t waitSinceMs;                            /* sender: waiting for a RESUME since */
  int lastKilled;                                 /* sender: the path whose fence we await a RESUME for */
  uint16_t epoch;                                 /* receiver: switches made; sender: newest RESUME taken */
  ncclResult_t error;                             /* set when no path is left: every call fails */
  _Atomic int lost;                               /* error is set: for readers without our lock (the service) */
  int crossPath;                                  /* last-resort slot: crossing or relay path (rnet_cross.c); -1: none */
  int crossNone;                                  /* receiver: the sender said it has nothing left to try */
  int64_t crossUntilMs;                           /* no path, a last resort being built: fail after this (0: none) */
  int crossProbing;                               /* sender: waiting for the crossing pair's probe */
  int crossMine, crossTheirs;                     /* sender: ... the pair it probes */
  int crossFailed;                                /* sender: a crossing failed since the last RESUME: relay instead */
  int lastTries;                                  /* sender: last-resort attempts since the last RESUME */
  uint32_t maxRecvBytes;                          /* receiver: largest receive posted (a bridge buffers that much) */
  struct rnetArea* area;                          /* hello and control buffers */
  void* hsReq[2];                                 /* handshake requests in flight: [0] our hello, [1] theirs */
  void* listens[MEND_RNET_MAX_PATHS];             /* sender: base listen per local device (ctrl comms) */
  int hsStep;                                     /* handshake sub-step */
  int hsPath;                                     /* the path of the handshake: 0, or the last-resort slot */
  struct rnetVia via;                             /* sender: a set-up via a crossing or a bridge */
  uint64_t nPosted;                               /* messages posted by the user */
  uint64_t nDone;                                 /* sender: acknowledged; receiver: placed */
  uint64_t nIssued;                               /* messages handed to the base on the active path */
  uint64_t nBaseDone;                             /* sender: base isends completed (in order) */
  uint64_t placeTo;                               /* receiver: a pass places messages below this (the one tested) */
  uint64_t passNs;                                /* the clock when the current progress pass began (one read a pass) */
  struct rnetReq reqs[RNET_WINDOW];               /* message seq lives at reqs[seq % RNET_WINDOW] */
  void* ctrlReq[RNET_NCTRL];                      /* control requests in flight (ring) */
  uint64_t ctrlPosted, ctrlDone;                  /* ring counters */
  uint64_t ctrlSent;                              /* receiver: highest value sent */
  uint64_t ctrlLooks;                             /* sender: tests of the control comm (mendRnetGetStats) */
  uint64_t ackDelayNs;                            /* receiver: hold small messages' acknowledgement this long (0: never) */
  uint64_t ackHeldNs;                             /* receiver: when the oldest unacknowledged placed message was placed */
  uint64_t lastPlacedNs;                          /* receiver: when the newest one was placed */
  uint64_t owedBytes;                             /* receiver: bytes placed and not yet acknowledged */
  _Atomic uint64_t ackHeldSince;                  /* receiver: ackHeldNs while an acknowledgement is held, else 0 */
  int sendResume;                                 /* receiver: next control message is a RESUME */
  int words;                                      /* acknowledgements ride with the reverse data (MEND_ACK_WORDS) */
  _Atomic uint64_t placedPub;                     /* receiver: nDone, for our send comm to the peer to carry */
  _Atomic uint64_t wordSeen;                      /* receiver: a count the peer has read in a word */
  uint64_t wordSeenUsed;                          /* receiver: wordSeen when the held clock last moved */
  _Atomic uint64_t wordAck;                       /* sender: highest count the peer's words brought */
  uint64_t wordAcks;                              /* sender: acknowledgements taken from words (statistics) */
  struct rnetMr* mrs;                             /* live registrations */
  int64_t lastProgressMs;                         /* sender: last acknowledgement (or start of waiting) */
  _Atomic int probeState;                         /* enum mendRnetProbeState of the progress probe */
  uint32_t probeMask;                             /* paths the progress probe covers */
  _Atomic uint32_t probeFailed;                   /* paths the progress probe found dead */
  struct mendDetect det;                          /* sender: round-trip estimates and suspicion (detect.h) */
  uint64_t failovers;                             /* statistics */
  int sawFailure;                                 /* a path died of something else than the peer closing it */
  uint64_t failbacks;                             /* statistics: planned switches to a rebuilt path */
  uint64_t rebuilds;                              /* statistics: dead paths made backups again */
  _Atomic int rebuilding;                         /* paths being rebuilt (the service progresses us) */
  pthread_mutex_t inboxLock;                      /* protects the inbox */
  struct rnetNoticeItem* inHead;                  /* notices not yet applied (oldest first) */
  struct rnetNoticeItem* inTail;                  /* last one */
  _Atomic int inboxCount;                         /* quick check without the lock */
  pthread_mutex_t lock;                           /* one thread at a time: the proxy's calls or the service */
  int64_t lastKillNoticeMs;                       /* sender: last re-sent KILL while waiting for a RESUME */
  uint64_t lastWatchNs;                           /* sender: last look at the idle paths' receives */
  struct rnetComm* next;                          /* in ctx's list of comms (OOB notices, link events) */
};

struct mendResil;
struct rnetCtx {
  const mendNet_t* base;         /* the Net under us */
  struct mendResil* resil;       /* the communicator's resilience service (NULL in unit tests) */
  void* baseCtx;                 /* its context */
  int ownBaseCtx;                /* we made baseCtx (init) and finalize it */
  int nDevs;                     /* base devices */
  int nOrder;                    /* entries of order (0: none: chains rotate from the primary) */
  uint32_t testDown;             /* tests without a service: our devices taken as down (mendRnetSetDownForTest) */
  int8_t order[MEND_RNET_MAX_PATHS]; /* failover order of our devices, nearest first (mendRnetSetOrder) */
  struct ncclComm* comm;         /* communicator for OOB signals (NULL in tests: no OOB) */
  int rank;                      /* our rank, -1 when not attached */
  pthread_mutex_t lock;          /* protects `comms` */
  struct rnetComm* comms;        /* live data comms */
  uint64_t nextConnId;           /* id generator */
  struct rnetCtx* nextCtx;       /* in the process-wide list of contexts (in-process notices) */
};

/* ---- rnet.c ---- */
/* Every pending thing of one comm that can move now (called from isend, irecv and test). */
ncclResult_t mendRnetProgress(struct rnetComm* rc);
/* Receiver closing (its lock held): send a held acknowledgement, which a draining sender waits for. */
void mendRnetAckClose(struct rnetComm* rc);
void mendRnetCtxAdd(struct rnetCtx* ctx, struct rnetComm* rc);
void mendRnetCtxRemove(struct rnetCtx* ctx, struct rnetComm* rc);
/* Register the area and every user registration on path p's fresh comms (after a rebuild). */
ncclResult_t mendRnetPathRegister(struct rnetComm* rc, int p);
/* Is path p alive (idle or active)? */
static inline int mendRnetPathLive(const struct rnetComm* rc, int p) {
  int s = atomic_load_explicit(&rc->paths[p].state, memory_order_relaxed);
  return s == RNET_PATH_IDLE || s == RNET_PATH_ACTIVE;
}

/* ---- rnet_conn.c: listen, connect, accept, close ---- */
ncclResult_t mendRnetListen(void* ctx, int dev, void* handle, void** listenComm);
ncclResult_t mendRnetConnect(void* ctx, int dev, void* handle, void** sendComm);
ncclResult_t mendRnetAccept(void* listenComm, void** recvComm);
ncclResult_t mendRnetCloseSend(void* sendComm);
ncclResult_t mendRnetCloseRecv(void* recvComm);
ncclResult_t mendRnetCloseListen(void* listenComm);
/* Close path p's base comms and registrations (idempotent). */
void mendRnetPathClose(struct rnetComm* rc, int p);
/* Register the hello/control area on a base comm once. */
ncclResult_t mendRnetRegArea(struct rnetComm* rc, void* comm, void** mh);

/* ---- rnet_fail.c: failover ---- */
/* Path p failed: fence it, tell the peer (unless the peer told us), and move on: the receiver picks
 * the first live path and sends RESUME there; the sender waits for that RESUME. */
ncclResult_t mendRnetFailPath(struct rnetComm* rc, int p, int why, const char* detail);
/* No path is left and none will come: the connection fails (detail: why, or NULL). */
ncclResult_t mendRnetLost(struct rnetComm* rc, const char* detail);
/* Receiver: make live path p the active one (RESUME goes out on it). */
void mendRnetActivate(struct rnetComm* rc, int p);
/* Sender: a RESUME arrived on path p (possibly not the active one): follow it. */
ncclResult_t mendRnetTakeResume(struct rnetComm* rc, int p, const struct rnetCtrl* m);
/* Apply queued notices and run the detectors. */
ncclResult_t mendRnetApplyNotices(struct rnetComm* rc);

/* ---- rnet_notice.c: notices between the two ends of a connection ---- */
/* Send a notice about path p to the other end (in-process delivery when it lives here, else over
 * the bootstrap through the resilience service; dropped with neither). */
void mendRnetNotify(struct rnetComm* rc, int type, int p, int cause, const void* handle);
/* Queue a notice on a connection (any thread). */
void mendRnetPost(struct rnetComm* rc, const struct rnetNotice* n);
/* Deliver a notice to the connection whose id it names, looking in ctx (or every context of the
 * process when ctx is NULL).  Returns 1 when found. */
int mendRnetDeliver(struct rnetCtx* ctx, const struct rnetNotice* n);
/* Run fn(rc, arg) on the connection named connId (in ctx, or in every context of the process when
 * ctx is NULL), under its context's lock; 1 when found. */
int mendRnetWithConn(struct rnetCtx* ctx, uint64_t connId, void (*fn)(struct rnetComm*, const void*), const void* arg);
/* Take the oldest queued notice; 0 when none. */
int mendRnetTakeNotice(struct rnetComm* rc, struct rnetNotice* out);
/* Free queued notices (close). */
void mendRnetDropNotices(struct rnetComm* rc);
/* The process-wide list of contexts. */
void mendRnetCtxRegister(struct rnetCtx* ctx);
void mendRnetCtxUnregister(struct rnetCtx* ctx);

/* ---- rnet_cross.c: a crossing path when no rail is left ---- */
/* No path is left (rc->active is -1): start or await a crossing path instead of failing.  Returns 1
 * when one is being built (the connection waits, bounded), 0 when the connection must fail. */
int mendRnetCrossStart(struct rnetComm* rc);
/* Receiver: a notice naming path rc->nPaths (one past the chain): the sender's crossing path or its
 * word that it has none.  Every field is checked first. */
ncclResult_t mendRnetCrossNotice(struct rnetComm* rc, const struct rnetNotice* n);
/* The crossing path's device pair as carried in a REBUILD notice's cause (0 for other paths). */
int mendRnetCrossCode(const struct rnetComm* rc, int p);
/* The crossing path's rebuild could not start or was abandoned: stop waiting for it. */
void mendRnetCrossAbandoned(struct rnetComm* rc, int p);
/* Fail the connection once a crossing that did not come up in time is overdue. */
ncclResult_t mendRnetCrossCheck(struct rnetComm* rc);
/* Sender: the crossing probe answered (ok 1) or not: build the crossing path, or try a relay. */
void mendRnetCrossProbed(struct rnetComm* rc, int ok);
/* Receiver: make the slot ready for a new attempt (a live or half-built path there ends first). */
ncclResult_t mendRnetCrossReset(struct rnetComm* rc, int p);
/* How long a receiver with no path left waits for the sender's next attempt. */
int64_t mendRnetCrossWaitMs(void);
/* Sender: a last resort was given up (no crossing, no relay): tell the receiver to stop waiting. */
void mendRnetCrossGiveUp(struct rnetComm* rc);
/* Use the last-resort slot for a path from our device `local` to the peer's `remote` (added after
 * the chain, or the existing slot again: it is dead and idle); returns its index. */
int mendRnetCrossSlot(struct rnetComm* rc, int local, int remote);

/* ---- rnet_relay.c: a relay path through a bridge rank (relay.h) ---- */
/* Sender: pick a bridge and start a relay path in the last-resort slot; 0 when none can carry it. */
int mendRnetRelayStart(struct rnetComm* rc);
/* Sender: the relay path's REBUILD goes to its bridge as OPEN (handle: our ctrl listen). */
void mendRnetRelayOpen(struct rnetComm* rc, int p, const void* handle);
/* Receiver: the REBUILD_ACK of a relay path goes to its bridge as ACCEPT (handle: our data listen). */
void mendRnetRelayAccept(struct rnetComm* rc, int p, const void* handle);
/* Receiver: a REBUILD from bridge n->fromRank for the last-resort slot: checked, then taken. */
ncclResult_t mendRnetRelayNotice(struct rnetComm* rc, const struct rnetNotice* n);
struct mendRelayMsg;
/* Sender, set-up: our NIC of the receiver's primary is out of reach: set up via a bridge or a
 * crossing instead (rc->via, the first path's devices); 0 when neither can be tried. */
int mendRnetViaStart(struct rnetComm* rc, const struct rnetHandle* h);
/* A bridge's READY or REFUSED for the set-up of our connection m->srcConn (looked up in ctx, or in
 * every context of the process when NULL); 1 when that connection is here. */
int mendRnetViaReady(struct rnetCtx* ctx, int from, const struct mendRelayMsg* m);
/* Sender, set-up: *ready 0 while a bridge has not answered (then its listen is our first path's
 * handle); an error when it refused or did not answer in time. */
ncclResult_t mendRnetViaWait(struct rnetComm* rc, int* ready);
/* Receiver, set-up: may the sender's hello come `via` a crossing or that bridge? */
ncclResult_t mendRnetViaCheck(struct rnetComm* rc, int via);

/* ---- rnet_rebuild.c: bringing a dead path back, fail-back ---- */
/* Rebuild notices (REBUILD*, and the local START) for path p. */
ncclResult_t mendRnetRebuildNotice(struct rnetComm* rc, const struct rnetNotice* n);
/* Advance rebuilds in progress; the receiver switches back to a preferred path once rebuilt. */
ncclResult_t mendRnetRebuildProgress(struct rnetComm* rc);
/* How long a rebuild has to finish. */
int64_t mendRnetRebuildTimeoutMs(void);
/* Abandon path p's rebuild (close what it opened). */
void mendRnetRebuildAbort(struct rnetComm* rc, int p);

#endif
