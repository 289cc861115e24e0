/*
 * The plan view: everything a plan depends on besides the call's own arguments, as one versioned
 * value.  Per channel: the ring order, this rank's place in the channel's tree, its NIC and its
 * weight; plus this rank's failover order of NICs (nearest first).  An epoch and the op count from
 * which it holds make it a version: the graph layer builds the first one at init
 * (mendGraphPlanView), the planner owns the view in force (mendPlannerSetView), and a later view
 * (the resilience layer's, after a health change) takes effect at an op count every rank agreed
 * on, so every rank runs the same plan for the same op.  Plain C (C++ tests include it).
 */
#ifndef MEND_ENQUEUE_PLANVIEW_H_
#define MEND_ENQUEUE_PLANVIEW_H_

#include <stdint.h>

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MEND_VIEW_MAX_CHANNELS 64 /* = MEND_MAXCHANNELS (checked in planview.c) */
#define MEND_VIEW_MAX_NICS 32     /* = MEND_TOPO_MAX_NICS: NICs of one rank a view can name */
#define MEND_VIEW_TREE_ARITY 3    /* = MEND_MAX_TREE_ARITY */
#define MEND_VIEW_MAX_WEIGHT (1 << 20) /* largest channel weight (the split's products stay in 64 bits) */

struct ncclComm;

/* One channel as a plan sees it. */
struct mendViewChannel {
  int* ring;                          /* ring order, nRanks ranks (points into the view's storage) */
  int ringIndex;                      /* this rank's position in `ring` */
  int treeUp;                         /* tree parent, -1 at the root or when the channel has no tree */
  int treeDown[MEND_VIEW_TREE_ARITY]; /* tree children, -1 when absent */
  int treeDepth;                      /* tree depth (0: no tree: the planner derives one from the ring) */
  int netDev;                         /* this rank's NIC for the channel's inter-host traffic, -1: none */
  int weight;                         /* relative share of a collective's data (equal: an even split) */
};

struct mendPlanView {
  uint32_t epoch;                          /* version: 0 for the graph's view, +1 per replacement */
  uint64_t fromOp;                         /* first collective sequence number (comm->collSeq) it holds for */
  int nRanks;                              /* ranks of the communicator */
  int rank;                                /* whose view (trees, NICs and NIC order are this rank's) */
  int nChannels;                           /* channels */
  int nNics;                               /* this rank's NICs (0: no net) */
  int nicOrder[MEND_VIEW_MAX_NICS];        /* failover order of this rank's NICs, nearest first */
  int nicDist[MEND_VIEW_MAX_NICS];         /* distance of this rank's NIC d (PCIe/NUMA; equal: equally near) */
  struct mendViewChannel ch[MEND_VIEW_MAX_CHANNELS]; /* per channel */
  int* rings;                              /* storage of every channel's ring (nChannels x nRanks) */
  int* rankCap;                            /* per rank: usable share of its NIC bandwidth in permille
                                              (1000: every NIC up at line rate; 0: no usable NIC) */
  uint32_t* rankNics;                      /* per rank: bit d set when its NIC d is usable (all ones:
                                              unknown, e.g. ranks without a net) */
  uint64_t hash;                           /* of what all ranks share (mendPlanViewSeal) */
};

/* A view with nChannels channels of nRanks ranks: rings unset (-1), no trees, no NICs, weights 1,
 * every rank at full capacity with every NIC usable. */
ncclResult_t mendPlanViewCreate(int nRanks, int rank, int nChannels, struct mendPlanView** view);
void mendPlanViewFree(struct mendPlanView* view);
/* A copy of `src` as version (epoch, fromOp), for a replacement to edit (hash left to reseal). */
ncclResult_t mendPlanViewCopy(const struct mendPlanView* src, uint32_t epoch, uint64_t fromOp,
                              struct mendPlanView** view);
/* Snapshot of comm->channels (rings, trees, NICs), NICs in device order: the view of a communicator
 * whose graph layer built none (the loopback world of tests).  Sealed. */
ncclResult_t mendPlanViewFromChannels(struct ncclComm* comm, struct mendPlanView** view);
/* Check the view (rings are permutations holding this rank at ringIndex, NICs in range, weights > 0,
 * capacities in 0..1000) and compute its hash over what every rank shares: epoch, fromOp, shape,
 * rings, weights, capacities and usable NICs per rank.  Trees,
 * NICs and the NIC order are this rank's own and left out, so every rank of a world gets one hash. */
ncclResult_t mendPlanViewSeal(struct mendPlanView* view);
/* The hash that identifies the plan of op `opCount` under `view` (logged at TRACE, TUNING). */
uint64_t mendPlanViewOpHash(const struct mendPlanView* view, uint64_t opCount);
/* The NIC a new connection of `channel` starts on: the channel's NIC when usable at both ends, else
 * the first of the failover order usable at both ends, else the channel's NIC.  myMask / peerMask:
 * bit d set when NIC d of this rank / of the peer can carry a new path (the health registry). */
int mendPlanViewConnDev(const struct mendPlanView* view, int channel, uint32_t myMask, uint32_t peerMask);

/* ---- re-planning (replan.c): a view derived from an agreed health picture ---- */
#define MEND_VIEW_MAX_HEALTH 256 /* NICs that are not fully up, in one agreed picture */

/* One NIC that is not up at its line rate. */
struct mendViewNic {
  int32_t rank;  /* owner */
  int32_t dev;   /* its device index */
  int32_t state; /* enum mendNicState (resilience/health.h) */
  float gbps;    /* usable bandwidth (0 when down) */
};

/* What a new view is derived from, the same on every rank: the line rates every rank learnt at init
 * and the NICs the agreement named as not fully up (every other NIC is up at its line rate). */
struct mendViewHealth {
  int nRanks;                     /* ranks */
  int maxDevs;                    /* devices per rank in lineGbps */
  const float* lineGbps;          /* [rank * maxDevs + dev]: line rate, 0 when the NIC does not exist */
  int nNics;                      /* entries in nics */
  const struct mendViewNic* nics; /* sorted by (rank, dev), at most MEND_VIEW_MAX_HEALTH */
};

/* The view that replaces `base` as version (epoch, fromOp) for the health picture `h`: per rank its
 * capacity and usable NICs, per channel this rank's NIC (a failed NIC's channels move to usable
 * ones), and whatever re-planning the picture calls for (weights, re-ranked rings).  Sealed.  Every
 * rank gets the same shared part (hash) from the same (base rings, h, epoch, fromOp). */
ncclResult_t mendReplanDerive(const struct mendPlanView* base, const struct mendViewHealth* h, uint32_t epoch,
                              uint64_t fromOp, struct mendPlanView** view);

/* The NIC (rail) that the hop from -> to of `channel` uses in view v derived from picture h (v's
 * rankNics filled): the first device of the receiver's failover chain (mendGraphNicChain, every NIC
 * equally near) that both ends have and can use.  -1: a side has no NIC; -2: no usable NIC in common. */
int mendReplanHopNic(const struct mendPlanView* v, const struct mendViewHealth* h, int channel, int from, int to);
/* Can ranks x and y be ring neighbours under the picture (a usable rail in common, or no NICs)? */
int mendReplanLinked(const struct mendPlanView* v, const struct mendViewHealth* h, int x, int y);
/* Re-ranking (replan_rerank.c): when the picture leaves some pair of ranks without a common rail,
 * every ring with such neighbours becomes a ring whose neighbours are linked (bridge ranks between
 * mismatched ones, the base order kept where it can be), and every channel's tree is derived from
 * its ring (double binary when all its edges are linked, else a chain along the ring).  No ring
 * found: the base rings stay (WARN).  Shared: rings and trees follow from the picture and rings. */
ncclResult_t mendReplanRerank(struct mendPlanView* v, const struct mendViewHealth* h);
/* Does some pair of ranks share no usable rail under the picture (v's rankNics filled)?  Ranks are
 * compared by kind (NIC count, usable NICs), so the test is linear in the ranks. */
int mendReplanMismatch(const struct mendPlanView* v, const struct mendViewHealth* h);
/* Did mendReplanDerive re-rank the view `v` it derived from picture h (rings and trees then follow
 * the picture, not the graph)?  For planners that rebuild other ranks' views from one rank's. */
int mendReplanReranked(const struct mendPlanView* v, const struct mendViewHealth* h);
/* MEND_REPLAN=backup: re-planning keeps today's backup-only plan (weights, rings, failover chains). */
int mendReplanBackupOnly(void);

/* ---- the planner's ownership (planview.c) ---- */
/* Hand `view` (sealed) to the planner of comm: in force at once when the planner has none (and kept
 * as the base view agreements derive from), else pending from view->fromOp on (pending views from
 * the same op or later are dropped; earlier ones stay).  The planner frees it. */
ncclResult_t mendPlannerSetView(struct ncclComm* comm, struct mendPlanView* view);
/* The view in force for op `opCount`: adopts the pending view when opCount reached its fromOp;
 * makes one from comm->channels when none was set. */
ncclResult_t mendPlannerViewAt(struct ncclComm* comm, uint64_t opCount, const struct mendPlanView** view);
/* Epochs of the view in force and of the pending one (-1: none), for observers on any thread (the
 * monitor); changes nothing. */
void mendPlannerEpochs(struct ncclComm* comm, int64_t* inForce, int64_t* pending);

/* ---- agreement on a new view (resilience/agree.c drives these; planview.c) ---- */
struct mendPlanner;
/* Hold planning for agreement round `round`: *nextOp gets the first op this planner has not planned,
 * and every op from it on waits (mendPlannerViewAt) until the round commits, at most
 * MEND_AGREE_TIMEOUT ms, then fails.  Atomic with the planning thread; idempotent per round.
 * ncclInProgress (no hold): the planner has no view yet (init); ask again later. */
ncclResult_t mendPlannerHold(struct ncclComm* comm, uint32_t round, uint64_t* nextOp);
/* Commit round `round`: the view derived from the base (epoch 0) view and picture h as version
 * (round, fromOp) is installed pending from fromOp and the hold released.  When it cannot be
 * derived, ops from fromOp on fail (a rank never runs another plan than its peers).  changeMs: the
 * health change's time (mendTimeMs clock), for the log. */
ncclResult_t mendPlannerCommit(struct ncclComm* comm, uint32_t round, uint64_t fromOp, const struct mendViewHealth* h,
                               int64_t changeMs);
/* Free the planner's views (in force, base, pending) and its agreement state. */
void mendPlannerViewsFree(struct mendPlanner* pl);

#ifdef __cplusplus
}
#endif

#endif
