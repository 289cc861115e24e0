/*
 * Failure detection for the resilient net: link state from netlink, progress timeouts confirmed by a
 * probe of the same path (a TCP connect to the peer's probe port over that NIC: the peer's kernel
 * answers even when the peer process is stopped, so a slow or stopped peer is never declared dead),
 * and failure notices to and from the peer over the bootstrap.
 */
#ifndef MEND_RESILIENCE_DETECT_H_
#define MEND_RESILIENCE_DETECT_H_

#include "nccl.h"

struct rnetComm;
struct rnetCtx;
struct rnetHello;

/* Why a path was declared failed from outside its own requests (rnetPath.killed). */
enum mendRnetKill {
  MEND_RNET_KILL_NONE = 0,  /* alive */
  MEND_RNET_KILL_TEST,      /* mendRnetKillPath */
  MEND_RNET_KILL_LINK,      /* netlink: the interface went down or lost its carrier */
  MEND_RNET_KILL_PEER,      /* the peer's failure notice */
  MEND_RNET_KILL_PROBE      /* progress timeout and a failed probe */
};

/* Our probe address per device into a hello. */
void mendRnetDetectFillHello(struct rnetCtx* ctx, struct rnetHello* hello);
/* A connection became ready / is closing: link events and notices reach it while registered. */
void mendRnetDetectAdd(struct rnetComm* rc);
void mendRnetDetectRemove(struct rnetComm* rc);
/* Release detection state of a comm (probe in flight). */
void mendRnetDetectCommFree(struct rnetComm* rc);
/* Called by progress: timeouts, probes, pending link events. */
ncclResult_t mendRnetDetectCheck(struct rnetComm* rc);
/* Path p was fenced: tell the peer (over the bootstrap when attached). */
void mendRnetDetectPathDown(struct rnetComm* rc, int p);

#endif
