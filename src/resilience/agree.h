/*
 * Agreement on a new plan view (docs/planview.md): a health change becomes a plan view that every
 * rank of the communicator adopts at the same collective sequence number.
 *
 * Rank 0 coordinates.  When its health registry's epoch moves and the picture (the NICs not up at
 * line rate) differs from the one last agreed, it opens round k: PROPOSE(k) to every rank.  A rank
 * holds its planner (every op from nextOp on, the first op it has not planned, waits) and answers
 * REPLY(k, nextOp).  With every reply in, the coordinator picks fromOp = max(nextOp) and sends
 * COMMIT(k, fromOp, picture) in parts; each rank derives view epoch k from its base view and the
 * picture (mendReplanDerive), installs it pending from fromOp, releases its hold and answers ACK(k).
 * Round k + 1 starts only when every rank acknowledged round k.  Messages may be lost, delayed,
 * duplicated or reordered: rounds are numbered, every message is idempotent, and the coordinator
 * re-sends PROPOSE / COMMIT to ranks that have not answered.  Nothing crosses the data path when no
 * round is open.
 *
 * The state machine sends through a small table (the resilience service's out-of-band queue, or a
 * test's fake network) and acts on the planner of its communicator (planview.h).
 */
#ifndef MEND_RESILIENCE_AGREE_H_
#define MEND_RESILIENCE_AGREE_H_

#include <stdint.h>

#include "nccl.h"
#include "enqueue/planview.h"
#include "resilience/health.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MEND_AGREE_COORDINATOR 0 /* the rank that opens rounds */
#define MEND_AGREE_PART_NICS 8   /* picture entries per COMMIT message */

/* Message kinds. */
enum mendAgreeKind {
  MEND_AGREE_PROPOSE = 1, /* coordinator -> rank: round opened, hold and tell your nextOp */
  MEND_AGREE_REPLY,       /* rank -> coordinator: held; op = first op not planned */
  MEND_AGREE_COMMIT,      /* coordinator -> rank: op = fromOp, one part of the picture */
  MEND_AGREE_ACK          /* rank -> coordinator: the round's view is installed */
};

/* One message (fixed size: it rides in the resilience service's out-of-band message). */
struct mendAgreeMsg {
  uint32_t kind;                                /* enum mendAgreeKind */
  uint32_t round;                               /* round number = the view epoch it agrees on (1, 2, ...) */
  uint64_t op;                                  /* REPLY: nextOp; COMMIT: fromOp */
  uint32_t healthEpoch;                         /* COMMIT: the coordinator's registry epoch of the picture */
  int32_t nNics;                                /* COMMIT: entries in the whole picture (0..MEND_VIEW_MAX_HEALTH) */
  int32_t first;                                /* COMMIT: index of nics[0] in the picture */
  int32_t count;                                /* COMMIT: entries in this part */
  int64_t ageMs;                                /* COMMIT: ms from the health change to the send */
  struct mendViewNic nics[MEND_AGREE_PART_NICS]; /* COMMIT: picture entries first..first+count-1 */
};

/* How the state machine sends (queued, never blocking). */
struct mendAgreeNet {
  void (*send)(void* ctx, int peer, const struct mendAgreeMsg* m); /* one message to rank `peer` */
  void* ctx;                                                       /* the sender's own */
};

struct mendAgree;

/* The agreement of rank `rank` of comm (whose planner it holds and gives views to).  `health` is
 * the rank's registry: line rates for every rank's derivation, and the coordinator's picture; it
 * must outlive the agreement.  `resendMs`: the coordinator's re-send interval. */
ncclResult_t mendAgreeCreate(struct ncclComm* comm, int rank, int nRanks, struct mendHealth* health,
                             const struct mendAgreeNet* net, int64_t resendMs, struct mendAgree** out);
void mendAgreeFree(struct mendAgree* a);
/* A message from rank `from` (checked before use; a bad one is dropped with a WARN). */
void mendAgreeOnMsg(struct mendAgree* a, int from, const struct mendAgreeMsg* m, int64_t nowMs);
/* Time passes (the service loop): the coordinator opens rounds and re-sends.  Cheap when idle. */
void mendAgreeTick(struct mendAgree* a, int64_t nowMs);
/* Rounds this rank has installed (its newest view epoch from an agreement; 0: none). */
uint32_t mendAgreeRound(struct mendAgree* a);
/* Coordinator: is a round open (proposed and not acknowledged by every rank)? */
int mendAgreeBusy(struct mendAgree* a);

#ifdef __cplusplus
}
#endif

#endif
