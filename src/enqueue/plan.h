/*
 * The planner: turns the operations of a group, for one communicator, into a plan: a list of
 * works (program + arguments + channel), the connectors they need, and an estimated time.
 *   build    choose algorithm, channels and chunk per op (tuning.c), split data over channels,
 *            generate programs (gen_*.c), list connection requests;
 *   connect  establish the connectors not connected yet (blocks until the peers do the same);
 *   resolve  look the connectors up, fit chunks to their slots;
 * then an executor runs plan->works.  Plain C without atomics (C++ tests include it).
 */
#ifndef MEND_ENQUEUE_PLAN_H_
#define MEND_ENQUEUE_PLAN_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "device/engine.h"
#include "device/reduce.h"
#include "enqueue/gen.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ncclComm;
struct mendConnector;
struct mendConnReq;
struct mendTuner;
struct mendPlanView;
struct mendPlannerViews;
struct mendPlanCache;
struct mendTuneCache;

/* One call of the API, as queued by the group until ncclGroupEnd. */
struct mendOp {
  int func;               /* enum mendFunc */
  struct ncclComm* comm;  /* communicator */
  const void* sendbuff;   /* as passed (ncclBcast: the buffer) */
  void* recvbuff;         /* as passed */
  size_t count;           /* NCCL's count: per rank for AllGather (send), ReduceScatter (recv), AlltoAll,
                             Gather, Scatter; the vector otherwise */
  ncclDataType_t type;    /* element type */
  ncclRedOp_t userOp;     /* op as passed (logs) */
  struct mendRedOp redop; /* op resolved at the call (a PreMulSum op may be destroyed before GroupEnd) */
  int root;               /* root (Broadcast, Reduce, Gather, Scatter) or peer (Send, Recv); -1 otherwise */
  uint64_t opCount;       /* collective sequence number (logs) */
  void* stream;           /* cudaStream_t as passed (device mode: where the group's launch goes) */
};

/* How the planner reaches connectors: the transport, or a test's loopback world. */
struct mendConnOps {
  ncclResult_t (*connect)(struct ncclComm* comm, int nReqs, const struct mendConnReq* reqs);
  struct mendConnector* (*get)(struct ncclComm* comm, int channel, int peer, int dir, int connIndex);
  int (*kindOf)(struct ncclComm* comm, int peer); /* enum mendTransportKind */
};

/* Per-communicator planner state (comm->planner), created on first use. */
struct mendPlanner {
  const struct mendConnOps* connOps; /* where connectors come from */
  int worstKind;                     /* slowest transport to any peer (comm-wide), -1 until known */
  int masksParsed;                   /* algoMask/protoMask hold NCCL_ALGO/NCCL_PROTO */
  uint32_t algoMask[MEND_NFUNCS];    /* allowed algorithms (bit = NCCL algorithm number) per function */
  uint32_t protoMask[MEND_NFUNCS];   /* allowed protocols (bit = NCCL protocol number) per function */
  int tunerTried;                    /* the tuner plugin was looked for */
  struct mendTuner* tuner;           /* external tuner plugin, NULL when none */
  struct mendPlanView* view;         /* plan view in force (planview.h), NULL until set or first use */
  struct mendPlannerViews* views;    /* base view, pending views, agreement hold (planview.c), NULL until used */
  struct mendPlanCache* cache;       /* plans kept for reuse (plan_cache.h), NULL until used */
  struct mendTuneCache* tuneCache;   /* AllReduce choices kept per view (tuning_cache.h), NULL until used */
};

/* Per-op choice (tuning.c). */
struct mendChoice {
  int algo;          /* enum mendAlgo */
  int proto;         /* NCCL protocol number (Mend runs Simple = 2) */
  int nChannels;     /* channels the op is split over */
  size_t chunkBytes; /* pipeline chunk before fitting to slots */
  double estUs;      /* cost-model estimate in microseconds */
};

struct mendPlan {
  struct ncclComm* comm;         /* whose plan */
  struct mendWork* works;        /* works in run order (op order, then channel) */
  int nWorks, capWorks;          /* used / allocated */
  struct mendProgram** progs;    /* programs the works point to (owned) */
  int nProgs, capProgs;          /* used / allocated */
  struct mendConnReq* reqs;      /* connectors the works need (unique) */
  int nReqs, capReqs;            /* used / allocated */
  struct mendStageCopy* stages;  /* device mode: copies into temporaries made on the stream first */
  int nStages, capStages;        /* used / allocated */
  void** scratch;                /* temporaries (in-place AlltoAll), freed with the plan */
  int nScratch, capScratch;      /* used / allocated */
  double estUs;                  /* sum of the ops' estimates */
  void* joins[MEND_MAX_JOIN_STREAMS]; /* streams of the ops beyond the first op's (device mode) */
  int nJoins;                    /* how many */
  const struct mendPlanView* view;/* view of the op being planned (rings, trees, NICs) */
  int collAlgo;                  /* AllReduce under a degraded view: the algorithm its choice priced (-1: none) */
  int collEven;                  /* ... and 1 when it chose backup: the even split, not the view's weights */
};

/* Planner state of a communicator, created on first use with the transport's connectors. */
ncclResult_t mendPlannerGet(struct ncclComm* comm, struct mendPlanner** planner);
/* Use other connectors for this communicator (the loopback world of tests). */
ncclResult_t mendPlannerAttach(struct ncclComm* comm, const struct mendConnOps* ops);
/* Release comm->planner (communicator destroy). */
void mendPlannerFree(struct ncclComm* comm);

/* Plan ops, each under the plan view in force for its opCount (mendPlannerViewAt). */
ncclResult_t mendPlanBuild(struct ncclComm* comm, const struct mendOp* ops, int nOps, struct mendPlan** plan);
/* Plan ops under `view` (NULL: as mendPlanBuild).  Tests compare plans of different views. */
ncclResult_t mendPlanBuildView(struct ncclComm* comm, const struct mendPlanView* view, const struct mendOp* ops,
                               int nOps, struct mendPlan** plan);
/* Drop the requests already connected; returns how many remain (does not block). */
int mendPlanPendingConns(struct mendPlan* plan);
ncclResult_t mendPlanConnect(struct mendPlan* plan);
ncclResult_t mendPlanResolve(struct mendPlan* plan);
void mendPlanFree(struct mendPlan* plan);

/* A work running `prog` (the plan keeps it, and frees it on failure) with `args` on `channel`; its
 * connectors become requests.  Works sharing a connector run in plan order. */
ncclResult_t mendPlanAddWork(struct mendPlan* plan, int opIndex, int channel, struct mendProgram* prog,
                             const struct mendWorkArgs* args);
/* Split `count` elements over n channels in proportion to their weights (1..MEND_VIEW_MAX_WEIGHT):
 * window c is [off[c], off[c] + len[c]), consecutive, each a multiple of `align` long but the last
 * non-empty one, covering count exactly once; equal weights give the even split
 * alignUp(divUp(count, n), align).  Every rank computes the same windows from the same weights. */
ncclResult_t mendPlanSplit(const int* weights, int n, size_t count, size_t align, size_t* off, size_t* len);
/* Building blocks of the P2P-based generators (gen_alltoall.c, gen_gather_scatter.c):
 * a transfer of `bytes` from/to buf with a peer, split over its channels by their weights the same
 * way on both sides,
 * and a local copy. */
ncclResult_t mendPlanAddXfer(struct mendPlan* plan, int opIndex, int peer, int dir, void* buf, size_t bytes);
ncclResult_t mendPlanAddCopy(struct mendPlan* plan, int opIndex, const void* src, void* dst, size_t bytes);
/* A temporary owned by the plan (host memory; device memory in device mode, freed with the launch). */
ncclResult_t mendPlanScratch(struct mendPlan* plan, size_t bytes, void* stream, void** ptr);
/* Copy src to a plan temporary before the plan's works start: at once in host mode, on the stream
 * ahead of the kernel in device mode. */
ncclResult_t mendPlanStage(struct mendPlan* plan, void* dst, const void* src, size_t bytes);
ncclResult_t mendPlanAlltoAll(struct mendPlan* plan, const struct mendOp* op, int opIndex);
ncclResult_t mendPlanGather(struct mendPlan* plan, const struct mendOp* op, int opIndex);
ncclResult_t mendPlanScatter(struct mendPlan* plan, const struct mendOp* op, int opIndex);

/* ---- tuning.c ---- */
/* Algorithm, protocol, channels and chunk for a collective (not P2P) of nBytes.  algoHint (Ring or
 * Tree; -1: none) is the algorithm the re-planned AllReduce's choice priced: it replaces the model's
 * Ring or Tree unless a tuner plugin decides (recursive doubling is still taken where it wins). */
ncclResult_t mendTuneColl(struct ncclComm* comm, struct mendPlanner* pl, const struct mendOp* op, size_t nBytes,
                          int algoHint, struct mendChoice* choice);
/* Estimated time of a direct transfer of nBytes to `peer`. */
double mendTuneP2pUs(struct ncclComm* comm, struct mendPlanner* pl, size_t nBytes);

/* ---- plan_r2.c ---- */
/* An AllReduce: the per-call choice (mendTuneAllReduce) between `coll`, the ring/tree plan (backup
 * or Balance, under the view's weights), and R2 / recursive R2, whose works it adds itself. */
typedef ncclResult_t (*mendPlanCollFn)(struct mendPlan* plan, struct mendPlanner* pl, const struct mendOp* op,
                                       int opIndex);
ncclResult_t mendPlanAllReduce(struct mendPlan* plan, struct mendPlanner* pl, const struct mendOp* op, int opIndex,
                               mendPlanCollFn coll);

#ifdef __cplusplus
}
#endif

#endif
