/*
 * Private to the resilience service (resil.c, probe.c, link.c, localize.c, health.c).
 */
#ifndef MEND_RESILIENCE_RESIL_PRIV_H_
#define MEND_RESILIENCE_RESIL_PRIV_H_

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "misc/socket.h"
#include "resilience/agree.h"
#include "resilience/health.h"
#include "resilience/relay.h"
#include "resilience/resil.h"
#include "resilience/rnet.h"
#include "resilience/rnet_priv.h"

#define RESIL_TAG 0x52534c00          /* bootstrap tag of every out-of-band resilience message */
#define RESIL_MSG_MAGIC 0x52534c4du   /* "RSLM" */
#define RESIL_MAX_DEVS MEND_RNET_MAX_PATHS

/* Out-of-band message types (over the bootstrap, fixed size). */
enum resilMsgType {
  RESIL_MSG_NOTICE = 1,   /* a connection notice (rnet_notice.c) */
  RESIL_MSG_ACK,          /* the notice numbered `seq` was applied */
  RESIL_MSG_LOC_REQ,      /* please probe these NICs and answer (three-point localization) */
  RESIL_MSG_LOC_RESP,     /* the answer */
  RESIL_MSG_HEALTH,       /* a NIC's new state, for every rank's registry */
  RESIL_MSG_AGREE,        /* plan-view agreement (agree.h) */
  RESIL_MSG_RELAY         /* a relay request to a bridge (relay.h) */
};

struct resilLoc {
  int32_t id;                     /* the asker's request number */
  int32_t n;                      /* targets (1 or 2) */
  int32_t rank[2];                /* rank owning each target NIC */
  int32_t dev[2];                 /* that rank's device */
  int32_t ok[2];                  /* answer: 1 reachable, 0 not, -1 not probed */
};

struct resilMsg {
  uint32_t magic;                 /* RESIL_MSG_MAGIC */
  uint32_t type;                  /* enum resilMsgType */
  uint64_t seq;                   /* sender's number for this message (ACK names it) */
  union {
    struct rnetNotice notice;     /* RESIL_MSG_NOTICE */
    struct resilLoc loc;          /* RESIL_MSG_LOC_* */
    struct mendHealthUpdate health; /* RESIL_MSG_HEALTH */
    struct mendAgreeMsg agree;    /* RESIL_MSG_AGREE */
    struct mendRelayMsg relay;    /* RESIL_MSG_RELAY */
  } u;
};

/* A queued outgoing message. */
struct resilOut {
  int peer;                       /* destination rank */
  struct resilMsg msg;            /* the message */
  struct resilOut* next;          /* queue order */
};

/* A notice sent and not yet acknowledged. */
struct resilUnacked {
  int peer;                       /* destination */
  int64_t sentMs;                 /* when */
  int resent;                     /* sent a second time already */
  struct resilMsg msg;            /* copy, for a re-send */
  struct resilUnacked* next;
};

/* One local NIC as the service sees it. */
struct resilDev {
  char name[64];                  /* interface name (from the base Net) */
  int ifindex;                    /* 0: not an interface we can watch */
  int hasAddr;                    /* addr is valid */
  union mendSocketAddr addr;      /* the NIC's address (probe source) */
  int probeFd;                    /* listening probe socket, -1 when none */
  union mendSocketAddr probeAddr; /* its address (what peers connect to) */
  _Atomic int linkUp;             /* 1 up, 0 down, -1 unknown */
  int adminUp;                    /* last seen IFF_UP */
  int carrier;                    /* last seen IFF_LOWER_UP/IFF_RUNNING */
  int64_t changedMs;              /* last state change */
};

enum resilProbePurpose {
  RESIL_PROBE_PROGRESS = 0,       /* a sender's progress timeout: rc, path */
  RESIL_PROBE_TRACK,              /* watching a dead path's NIC pair for fail-back: track */
  RESIL_PROBE_LOC,                /* localization: loc slot and target index */
  RESIL_PROBE_CONFIRM,            /* a suspicion's confirmation: rc, path, which (0 suspect, 1 reference) */
  RESIL_PROBE_CROSS               /* a crossing pair, before a crossing path is built: rc */
};

/* One probe: a non-blocking TCP connect from a local NIC to a peer's probe listener. */
struct resilProbe {
  int purpose;                    /* enum resilProbePurpose */
  int localDev;                   /* source NIC */
  union mendSocketAddr dst;       /* the peer's probe listener */
  int fd;                         /* -1 until started */
  int64_t deadlineMs;             /* fails when not connected by then */
  struct rnetComm* rc;            /* PROGRESS */
  int path;                       /* PROGRESS */
  int peer, remoteDev;            /* TRACK: the pair's far end (tracks are found by key) */
  int loc;                        /* LOC: index in locs */
  int which;                      /* LOC: target 0 or 1; CONFIRM: 0 suspect, 1 reference */
  int done;                       /* CONFIRM: finished (kept listed until its connection's verdict) */
  struct resilProbe* next;
};

/* Does probe p hold connection rc (dropped when rc closes)? */
static inline int mendResilProbeHolds(const struct resilProbe* p, const struct rnetComm* rc) {
  return p->rc == rc && (p->purpose == RESIL_PROBE_PROGRESS || p->purpose == RESIL_PROBE_CONFIRM ||
                         p->purpose == RESIL_PROBE_CROSS);
}

/* A NIC pair watched because a connection's path over it is dead (fail-back). */
struct resilTrack {
  int localDev, peer, remoteDev;  /* the pair (peer's rank and device) */
  int64_t okSinceMs;              /* probes succeed since then (0: last probe failed) */
  int64_t lastProbeMs;            /* last probe start */
  int64_t lastUsedMs;             /* last time a dead path needed it (unused tracks are dropped) */
  int inFlight;                   /* a probe is running */
  int upAnnounced;                /* the registry was told the pair works again */
};

/* A localization in progress (ours) or a request we answer (theirs). */
struct resilLocSlot {
  int used;                       /* slot taken */
  int mine;                       /* 1: we asked; 0: we answer `asker` */
  int asker;                      /* rank that asked (answer) */
  int64_t startMs;                /* for the time bound */
  int pending;                    /* probes or answers outstanding */
  struct resilLoc loc;            /* targets and results */
  int localDev, peer, remoteDev;  /* ours: the failed path's NIC pair */
  int helper;                     /* ours: the auxiliary rank asked (-1: none) */
  int selfOk;                     /* ours: our own probe of the remote NIC */
};

#define RESIL_MAX_TRACKS 256
#define RESIL_MAX_LOCS 16

struct mendResil {
  struct ncclComm* comm;          /* owner (NULL in unit tests) */
  int rank, nRanks;               /* ours */
  const mendNet_t* base;          /* the Net under the resilient one */
  int nDevs;                      /* local devices (capped at RESIL_MAX_DEVS) */
  struct resilDev devs[RESIL_MAX_DEVS];
  union mendSocketAddr* peerProbe;/* [nRanks * RESIL_MAX_DEVS] every rank's probe listeners (family 0: none) */
  int* peerNDevs;                 /* [nRanks] */
  uint64_t* peerHost;             /* [nRanks] host hash (localization picks a third host) */
  struct rnetCtx* ctx;            /* connections watched (NULL until attached) */
  mendBell_t* wake;               /* rung after posting to connections (the proxy's bell) */
  int nlFd;                       /* netlink socket, -1 when unavailable */
  int evFd;                       /* eventfd: wakes the service loop */
  pthread_t svc, oob;             /* the two threads */
  int svcRunning, oobRunning;     /* started (must be joined) */
  _Atomic int stop;               /* threads leave */
  pthread_mutex_t outLock;        /* the out queue, unacknowledged notices, nextSeq (taken last) */
  struct resilOut* outHead;       /* outgoing messages */
  struct resilOut* outTail;
  struct resilUnacked* unacked;   /* notices waiting for their ACK */
  uint64_t nextSeq;               /* message numbers */
  pthread_mutex_t lock;           /* everything below; order: lock -> ctx->lock -> inbox; lock -> outLock */
  struct resilProbe* probes;      /* running or waiting probes */
  struct resilTrack tracks[RESIL_MAX_TRACKS];
  int nTracks;
  struct resilLocSlot locs[RESIL_MAX_LOCS];
  int nextLocId;                  /* request numbers */
  int64_t lastScanMs;             /* last fail-back scan */
  int64_t lastLocMs[RESIL_MAX_DEVS]; /* last localization started per local device (one per fault) */
  struct mendHealth health;       /* the registry */
  struct mendAgree* agree;        /* plan-view agreement over the registry (NULL in unit tests) */
  struct mendRelay* relay;        /* the bridge's engine, made on the first relay request (OOB thread) */
  _Atomic int acksHeld;           /* receiving connections holding an acknowledgement (mendResilAckHeld) */
  _Atomic int napping;            /* the service sleeps its idle tick: a first held acknowledgement wakes it */
};

/* ---- resil.c ---- */
/* Queue an out-of-band message to `peer` (takes outLock only: callable with r->lock held). */
void mendResilQueue(struct mendResil* r, int peer, const struct resilMsg* m);
/* Post a notice to every watched connection using local device `dev` on a live path. */
void mendResilKillDev(struct mendResil* r, int dev, int why);

/* ---- probe.c ---- */
ncclResult_t mendResilProbeListen(struct mendResil* r);
void mendResilProbeCloseAll(struct mendResil* r);
/* Add one probe (lock held); 0 when out of memory. */
int mendResilProbeAdd(struct mendResil* r, const struct resilProbe* p);
/* Fill pollfds with listeners and running probes; returns the count (at most max). */
int mendResilProbeFds(struct mendResil* r, struct pollfd* fds, int max);
/* Accept on listeners, start waiting probes, finish connected/expired ones. */
void mendResilProbeStep(struct mendResil* r);
/* Fail-back: watch dead paths' NIC pairs and start rebuilds once healthy long enough. */
void mendResilTrackScan(struct mendResil* r);
/* The probe address of rank's device, or NULL. */
const union mendSocketAddr* mendResilPeerProbe(struct mendResil* r, int rank, int dev);

/* ---- link.c ---- */
ncclResult_t mendResilLinkOpen(struct mendResil* r);
/* Read netlink events (non-blocking) and act on link changes. */
void mendResilLinkRead(struct mendResil* r);

/* ---- localize.c ---- */
/* A path over (localDev -> peer's remoteDev) failed for `why`: find out whose NIC is at fault. */
void mendResilLocalize(struct mendResil* r, int localDev, int peer, int remoteDev, int why);
/* A probe of a localization finished (lock held). */
void mendResilLocProbeDone(struct mendResil* r, int slot, int which, int ok);
/* Out-of-band LOC_REQ / LOC_RESP. */
void mendResilLocMsg(struct mendResil* r, int from, const struct resilMsg* m);
/* Time bounds of localizations (lock held). */
void mendResilLocExpire(struct mendResil* r);

#endif
