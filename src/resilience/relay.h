/*
 * The relay: a bridge rank that carries one path of another pair's connection.  On a fabric whose
 * rails never meet (no spine), two hosts that lost different rails (host A rail 0, host B rail 1)
 * have no path between them at all, but a third host C with both rails reaches each of them on its
 * own rail.  A relay path runs A --rail 0--> C --rail 1--> B for the data and B -> C -> A for the
 * acknowledgements: C forwards every message of each direction, in order, byte for byte, and never
 * looks inside.  The two ends keep the resilient net's rules (numbered messages, acknowledgement of
 * what was placed, fencing by closing their own comms, RESUME and replay), so a relay path is one
 * more path of the connection; README.md in this folder describes how it is chosen and built.
 *
 * This file is the bridge's side: one engine per communicator (made by the resilience service on
 * the first request), one thread, and one *link* per relayed path.
 */
#ifndef MEND_RESILIENCE_RELAY_H_
#define MEND_RESILIENCE_RELAY_H_

#include <stdint.h>

#include "nccl.h"
#include "transport/net.h"

#define MEND_RELAY_MAX_BYTES (8u << 20)  /* largest message a bridge buffers: a slot of NCCL_BUFFSIZE (64 MiB
                                            over 8 slots); a link holds 8 of them each way at most */
#define MEND_RELAY_SLOTS 8               /* messages in flight per direction of a link (the FIFO's 8 slots) */
#define MEND_RELAY_TAG 0x524c0000u       /* "RL" in the top half of a REBUILD's cause: the bridge's relay path,
                                            RELAY_TAG | srcDev << 8 | dstDev (rnet_cross.c has "CR") */

struct rnetNotice;

enum mendRelayKind {
  MEND_RELAY_OPEN = 1,    /* sender -> bridge: relay `path` of connection srcConn; handle: the sender's ctrl listen */
  MEND_RELAY_ACCEPT = 2,  /* receiver -> bridge: handle: the receiver's data listen; maxBytes: its largest receive */
  MEND_RELAY_SETUP = 3,   /* sender -> bridge, at connection set-up: handle: the sender's ctrl listen, handle2: */
                          /* the receiver's (its primary's listen); maxBytes: a slot */
  MEND_RELAY_READY = 4,   /* bridge -> sender: handle: its listen on the sender's rail, handle2: on the receiver's */
  MEND_RELAY_REFUSED = 5  /* bridge -> sender: it cannot relay that set-up */
};

/* The out-of-band message of the relay protocol (inside a resilience message). */
struct mendRelayMsg {
  uint32_t magic;                       /* RNET_MAGIC */
  uint16_t kind;                        /* enum mendRelayKind */
  uint16_t path;                        /* the path's slot (the same index at both ends) */
  int32_t srcRank;                      /* the sending end of the connection */
  int32_t dstRank;                      /* the receiving end */
  uint64_t srcConn;                     /* the sender's id of the connection */
  uint64_t dstConn;                     /* the receiver's id */
  int32_t srcDev;                       /* the rail between the sender and the bridge (a device index) */
  int32_t dstDev;                       /* the rail between the bridge and the receiver */
  uint32_t maxBytes;                    /* ACCEPT: the largest message the receiver posts for */
  uint32_t pad;                         /* 0 */
  char handle[MEND_NET_HANDLE_MAXSIZE]; /* base listen handle (see kind) */
  char handle2[MEND_NET_HANDLE_MAXSIZE]; /* a second one (SETUP, READY) */
};

/* Is m, received by rank `self` (of nRanks, with nDevs devices) from rank `from`, a relay message
 * it may act on?  1 when it is; else 0 with *why set.  Pure (resil_wire.c): the fuzz target calls it too. */
int mendRelayMsgCheck(const struct mendRelayMsg* m, int from, int self, int nRanks, int nDevs, const char** why);

/* How the engine reaches the ends: a connection notice to `rank`, or a relay message (READY, REFUSED)
 * to a sender setting up (over the bootstrap, or in-process).  Without them (NULL ops, or NULL
 * members) they reach connections of this process only (tests). */
struct mendRelayOps {
  void (*notify)(void* ctx, int rank, const struct rnetNotice* n);
  void (*reply)(void* ctx, int rank, const struct mendRelayMsg* m);
  void* ctx;
};

struct mendRelay;

/* An engine over `base` (its context baseCtx stays the caller's).  rank/nRanks/nDevs check requests. */
ncclResult_t mendRelayCreate(const mendNet_t* base, void* baseCtx, int rank, int nRanks, int nDevs,
                             const struct mendRelayOps* ops, struct mendRelay** out);
/* A relay message from rank `from` (any thread): checked, then acted on by the engine's thread.  A
 * refused OPEN is answered with REBUILD_FAIL to the sender. */
void mendRelayPost(struct mendRelay* rl, int from, const struct mendRelayMsg* m);
/* Stop the thread and close every link (the ends see their relay paths closed). */
void mendRelayFree(struct mendRelay* rl);

struct mendRelayStats {
  int links;           /* links open (being built or running) */
  int running;         /* links forwarding */
  uint64_t opened;     /* links ever opened */
  uint64_t closed;     /* links closed (an end fenced its path, an error, a deadline) */
  uint64_t msgs;       /* data messages forwarded */
  uint64_t bytes;      /* data bytes forwarded */
  uint64_t ctrlMsgs;   /* control messages forwarded (acknowledgements, RESUMEs) */
};
void mendRelayGetStats(struct mendRelay* rl, struct mendRelayStats* st);

#endif
