/*
 * Failure detection for the resilient net, per connection: progress timeouts confirmed by a probe of
 * the same path (a TCP connect to the peer's probe port over that NIC: the peer's kernel answers even
 * when the peer process is stopped, so a slow or stopped peer is never declared dead), plus the
 * events every detector reports.  Link state (netlink) and the probes themselves run in the
 * communicator's resilience service (resil.c).
 */
#ifndef MEND_RESILIENCE_DETECT_H_
#define MEND_RESILIENCE_DETECT_H_

#include "nccl.h"

struct rnetComm;

/* Why a path was fenced. */
enum mendRnetKill {
  MEND_RNET_KILL_NONE = 0,  /* alive */
  MEND_RNET_KILL_TEST,      /* mendRnetKillPath */
  MEND_RNET_KILL_LINK,      /* netlink: the interface went down or lost its carrier */
  MEND_RNET_KILL_PEER,      /* the peer's failure notice */
  MEND_RNET_KILL_PROBE,     /* progress timeout and a failed probe */
  MEND_RNET_KILL_ERROR,     /* a request on it failed */
  MEND_RNET_KILL_SWITCH,    /* planned: traffic moved to a preferred path (fail-back) */
  MEND_RNET_KILL_REBUILD,   /* a rebuild of it failed */
  MEND_RNET_KILL_CLOSED     /* the peer closed it (EOF or reset): it fenced the path, or closed the connection */
};

/* The progress probe of one sender connection (rnetComm.probeState). */
enum mendRnetProbeState {
  MEND_RNET_PROBE_IDLE = 0,  /* none */
  MEND_RNET_PROBE_RUNNING,   /* the service is probing rnetComm.probeMask */
  MEND_RNET_PROBE_DONE       /* results in rnetComm.probeFailed */
};

/* Short name of a cause ("link", "probe", ...), as events print it. */
const char* mendRnetKillName(int why);
/* Sender: progress timeout -> probe the path(s) we wait on; apply probe results. */
ncclResult_t mendRnetDetectCheck(struct rnetComm* rc);
/* One resilience event, as an INFO line of subsystem RESIL that tools parse:
 *   MEND_EVENT t=<CLOCK_MONOTONIC s> rank=<r> kind=<kind> peer=<r> dev=<d> path=<p> cause=<c> [extra]
 * kinds: detect (a path failed), resume (traffic resumed on a path), failback (back on a rebuilt
 * preferred path), rebuilt (a dead path is a backup again), lost (no path left), localize, health. */
void mendRnetEvent(const char* kind, const struct rnetComm* rc, int p, const char* cause, const char* extra);
/* The same with explicit fields (events that are not about one connection). */
void mendResilEvent(const char* kind, int rank, int peer, int dev, int path, const char* cause, const char* extra);

#endif
