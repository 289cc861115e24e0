/*
 * Failure detection for the resilient net, per connection: a silent path is suspected after a time
 * derived from its measured round trip and the bytes in flight (struct mendRtt), and the suspicion
 * is confirmed by probes of that path and of another path to the same peer (struct mendConfirm)
 * before anything fails over: a TCP connect to the peer's probe port over each NIC, which the
 * peer's kernel answers even when the peer process is stopped or starved.  Only a path that stays
 * silent while another path to the same peer answers is a black hole; a peer silent on every path
 * is slow or stopped, and gets the fixed MEND_PROGRESS_TIMEOUT rule.  Also the events every
 * detector reports.  Link state (netlink) and the probes themselves run in the communicator's
 * resilience service (resil.c).
 */
#ifndef MEND_RESILIENCE_DETECT_H_
#define MEND_RESILIENCE_DETECT_H_

#include <stdint.h>

#include "nccl.h"
#include "resilience/rnet.h"

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

/* Round-trip estimator of one path (Jacobson/Karels gains as in RFC 6298, microseconds).  A sample
 * is an acknowledgement's wait: from when its oldest message became the oldest outstanding one (it
 * was posted, or the previous acknowledgement came) to the acknowledgement, for `bytes` acknowledged.
 * The wait is split into a transmit part (bytes at the measured rate) and a latency part. */
struct mendRtt {
  int64_t srttUs;     /* smoothed latency part */
  int64_t rttvarUs;   /* its mean deviation */
  double bytesPerUs;  /* smoothed delivery rate, from waits of at least MEND_RTT_RATE_BYTES (0: none yet) */
  int nSamples;       /* latency samples taken */
};
#define MEND_RTT_MIN_SAMPLES 4       /* fewer: no estimate (the fixed timeout applies) */
#define MEND_RTT_RATE_BYTES 16384    /* smaller acknowledgements measure latency only */
#define MEND_RTT_VAR_MULT 4          /* suspicion: srtt + 4 rttvar + in-flight transmit time */
void mendRttSample(struct mendRtt* e, int64_t waitUs, uint64_t bytes);
/* The wait an acknowledgement measures: from `sinceUs` to its arrival at `nowUs`, less the time the
 * receiver held it (`heldUs`, from the message).  -1 when there is no sample: no start, or a hold
 * longer than the whole wait (not believed). */
int64_t mendRttAckWaitUs(int64_t nowUs, int64_t sinceUs, uint32_t heldUs);
/* How long a path with `inFlight` bytes unacknowledged may stay silent before it is suspected:
 * max(floor, srtt + 4 rttvar + inFlight / rate), doubled `backoff` times, at most cap; cap while
 * the estimate has fewer than MEND_RTT_MIN_SAMPLES samples or bytes are in flight and no rate is
 * known yet. */
int64_t mendRttSuspectUs(const struct mendRtt* e, uint64_t inFlight, int64_t floorUs, int64_t capUs, int backoff);

/* Confirmation of a suspicion: a probe of the suspect path and one of a reference path (another
 * path to the same peer), started together.  Written by the service thread while the connection's
 * probe runs; read by the connection once it is done. */
enum mendConfirmVerdict {
  MEND_CONFIRM_WAIT = 0,   /* not decided yet */
  MEND_CONFIRM_RETRY,      /* the suspect missed its window: one more probe of it (the others stay) */
  MEND_CONFIRM_REFUTED,    /* the suspect path answered: the peer is slow, the path works */
  MEND_CONFIRM_PATH,       /* the suspect stayed silent while the reference answered: a black hole */
  MEND_CONFIRM_PEER        /* both silent: the peer (or its host) is slow or gone, not this path */
};
struct mendConfirmCfg {
  int64_t windowMinUs;     /* the suspect's window is max(this, windowMult x the reference's connect time) */
  int windowMult;
  int attempts;            /* suspect probes, each started when the previous one missed its window */
  int64_t timeoutUs;       /* nobody answered for this long: MEND_CONFIRM_PEER */
};
struct mendConfirm {
  int64_t beganUs;         /* both probes started */
  int64_t attemptUs;       /* the suspect's current probe started */
  int attempt;             /* suspect probes started (1..) */
  int suspectOk;           /* some suspect probe answered */
  int suspectFailed;       /* suspect probes that failed outright (connect error or time bound) */
  int ref;                 /* reference probe: 0 running, 1 answered, -1 failed */
  int64_t refUs;           /* the reference's connect time, once it answered */
  int verdict;             /* the final enum mendConfirmVerdict (set by the service) */
};
void mendConfirmStart(struct mendConfirm* c, int64_t nowUs);
void mendConfirmResult(struct mendConfirm* c, int isRef, int ok, int64_t nowUs);
void mendConfirmRetry(struct mendConfirm* c, int64_t nowUs);
int mendConfirmDecide(const struct mendConfirm* c, int64_t nowUs, const struct mendConfirmCfg* cfg);
const char* mendConfirmName(int verdict);
/* The configuration from the parameters (MEND_PROBE_WINDOW, MEND_PROBE_ATTEMPTS, MEND_PROBE_TIMEOUT). */
struct mendConfirmCfg mendConfirmConfig(void);

/* Per sender connection (rnetComm.det): the estimators, the suspicion's back-off, the confirmation. */
struct mendDetect {
  struct mendRtt rtt[MEND_RNET_MAX_SLOTS]; /* per path */
  int64_t lastAckUs;       /* last acknowledgement that advanced */
  int backoff;             /* suspicions refuted since the last progress (each doubles the next wait) */
  int peerSilent;          /* the last confirmation found every path silent: the fixed rule until progress */
  int ackPath;             /* path of the last acknowledgement (a change starts the waits afresh) */
  int64_t suspectMs;       /* the suspicion time in force when the confirmation started */
  int confirming;          /* the running progress probe is a confirmation (else the fixed rule's) */
  int suspectPath, refPath;/* paths of the running confirmation */
  struct mendConfirm cf;   /* the running confirmation */
  int64_t lastMissMs;      /* first failed probe of the connection's only live path since progress (0: none) */
};
/* Sender: an acknowledgement on path p advanced the done count to `done` (before rc->nDone moves). */
void mendRnetDetectAcked(struct rnetComm* rc, int p, uint64_t done, uint32_t delayUs);
/* Sender: an acknowledgement that rode with the peer's data (a word) on path p's watch: `waitUs` since
 * the newest message it covers was posted.  That includes the peer's wait for its next message our
 * way, so it is never below the path's round trip: a sample (without bytes: no rate). */
void mendRnetDetectWord(struct rnetComm* rc, int p, int64_t waitUs);

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
