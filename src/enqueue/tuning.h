/*
 * Tuning: NCCL_ALGO / NCCL_PROTO parsing and the alpha-beta cost model (tuning.c).
 * Plain functions of plain numbers, so tests call them directly.  See src/enqueue/README.md for
 * the constants and how a choice is made.
 */
#ifndef MEND_ENQUEUE_TUNING_H_
#define MEND_ENQUEUE_TUNING_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "enqueue/gen.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NCCL's numbering (bits of the masks). */
#define MEND_NCCL_ALGO_TREE 0
#define MEND_NCCL_ALGO_RING 1
#define MEND_NCCL_NUM_ALGOS 7
#define MEND_NCCL_PROTO_LL 0
#define MEND_NCCL_PROTO_LL128 1
#define MEND_NCCL_PROTO_SIMPLE 2
#define MEND_NCCL_NUM_PROTOS 3

/* Parse NCCL_ALGO (kind 0) or NCCL_PROTO (kind 1) syntax into per-function masks:
 *   "Ring,Tree"      only these;          "^Tree"      all but these;
 *   "ring;allreduce:tree,ring;allgather:^ring"   a default list, then per-function lists.
 * Names are case-insensitive.  NULL or "" allows everything.  An unknown name or function sets
 * *bad to the offending token (static storage) and is ignored; returns ncclInvalidArgument then. */
ncclResult_t mendTuneParse(const char* str, int kind, uint32_t masks[MEND_NFUNCS], const char** bad);
const char* mendTuneAlgoName(int ncclAlgo);
const char* mendTuneProtoName(int ncclProto);

/* Cost model inputs that are the same on every rank. */
struct mendCalib;
struct mendCostIn {
  int func;          /* enum mendFunc */
  size_t nBytes;     /* NCCL's size of the op (AllGather/ReduceScatter: the full buffer) */
  int nRanks;        /* ranks */
  int kind;          /* slowest transport between ranks (enum mendTransportKind) */
  int nChannels;     /* channels the op is split over */
  double netGBs;     /* NIC speed in GB/s for net transports (0: default) */
  const struct mendCalib* calib; /* the constants (the communicator's: rank 0's); NULL: mendCalibGet() */
  int nRails;        /* net: NICs the channels spread over, channel c on NIC c mod nRails (0: unknown) */
  int nNodes;        /* hosts (the tree's nodes between hosts; 0: one per rank) */
  size_t slotBytes;  /* net: the FIFO slot, whose chunk (mendTuneChunk) a tree fills its pipeline with
                      * level by level; 0: the fill is left out */
  double cpuCrowd;   /* ranks per CPU on the most crowded host (comm->cpuCrowd); <= 1: none */
};
/* Estimated time in microseconds of algo (enum mendAlgo) for the op; < 0 when it cannot run it. */
double mendTuneCostUs(const struct mendCostIn* in, int algo);
/* Channels worth using for nBytes (before NCCL_MIN/MAX_NCHANNELS and the channels that exist). */
int mendTuneChannels(size_t nBytes, int kind);
/* Chunk for an op on one channel, given the FIFO slot size (before MEND_CHUNKSIZE). */
size_t mendTuneChunk(int func, int algo, size_t bytesPerChannel, int nRanks, size_t slotBytes);

/* ---- re-planned AllReduce: R2 and its recursive form (tuning_r2.c, choice in tuning.c) ---- */

/* The AllReduce schedules the per-call choice picks from (MEND_REPLAN names them). */
enum mendReplan {
  MEND_REPLAN_AUTO = 0,      /* the cost model picks per call (the default) */
  MEND_REPLAN_BACKUP = 1,    /* today's ring/tree plan on hot repair's backup paths, capacities ignored */
  MEND_REPLAN_BALANCE = 2,   /* the ring/tree plan under the view's channel weights */
  MEND_REPLAN_R2 = 3,        /* R2 AllReduce: the global ring plus one partial level */
  MEND_REPLAN_RECURSIVE = 4, /* the global ring plus 2..MEND_R2_MAX_LEVELS-1 partial levels */
  MEND_NREPLANS = 5          /* size of name tables */
};
const char* mendReplanName(int replan);
/* MEND_REPLAN as an enum mendReplan (case-insensitive); an unknown value WARNs once and gives auto. */
int mendReplanParam(void);

#define MEND_R2_MAX_LEVELS 4      /* the global ring plus at most 3 partial levels */
#define MEND_R2_MAX_CANDIDATES 8  /* capacity thresholds the search tries (the largest steps) */

/* One level of the decomposition: a ring over its members reduces its share of the vector. */
struct mendR2Level {
  int minCap;   /* members: the ranks whose capacity is >= minCap permille (level 0: every rank) */
  int nMembers; /* how many ranks that is */
  int rate;     /* permille of the line rate its ring runs at: the members' incremental capacity,
                   minCap minus the level below's minCap (level 0: the slowest rank's capacity) */
  double share; /* fraction of the vector (the levels' shares add up to 1) */
};

struct mendR2Split {
  int nLevels;                              /* levels (1: the plain ring, no partial level) */
  struct mendR2Level lv[MEND_R2_MAX_LEVELS]; /* level 0 is the global ring */
  double estUs;                             /* the model's time */
};

/* What the R2 model reads; the same on every rank. */
struct mendR2ModelIn {
  int nRanks;         /* ranks */
  const int* rankCap; /* per rank, permille of its line rate (the plan view's rankCap) */
  double nBytes;      /* bytes of the AllReduce */
  double alphaUs;     /* cost of one hop */
  double bytesPerUs;  /* a healthy rank's bandwidth */
  double chunkBytes;  /* the chains' pipeline chunk: a chain fills over n - 1 hops first (0: not counted) */
};
/* The model's time for a split: R2CCL's T = max(T1, T2) + T3 generalized to levels that use
 * disjoint slices of their members' bandwidth: the longest ring (2(k-1) alpha + 2(k-1)/k x share x
 * S / (rate x bw)) plus the longest chain (n alpha + share x S / (rate x bw), the paper's T3 = YD/(XB),
 * plus its pipeline's fill: n - 1 chunks at that rate). */
double mendR2CostUs(const struct mendR2ModelIn* in, const struct mendR2Split* split);
/* The split with minPartial..maxPartial partial levels of least modelled time: levels are subsets
 * of the distinct capacities above the slowest one (at most MEND_R2_MAX_CANDIDATES of them, those
 * with the largest steps), each with the shares that minimise its time (for one level, the paper's
 * Y* = aX / (aX + b(1-X))).  A level needs 1 <= outer ranks <= MEND_R2_MAX_FANOUT x members.
 * Returns 0 (and the 1-level split, the plain ring) when no set applies. */
int mendR2BestSplit(const struct mendR2ModelIn* in, int minPartial, int maxPartial, struct mendR2Split* out);
/* The ranks' capacities summarised for the split search: distinct values and how many ranks reach
 * each, computed once per plan view (tuning_cache.c) so that a choice costs O(distinct capacities),
 * not O(ranks log ranks). */
struct mendR2Caps {
  int nRanks;    /* ranks summarised */
  int nDistinct; /* distinct capacities (0: none summarised) */
  int* cap;      /* [nDistinct] ascending distinct capacities, values below 1 counted as 1 */
  int* atLeast;  /* [nDistinct] ranks whose capacity is >= cap[i] */
};
/* Summarise nRanks capacities (sorts a copy: O(n log n)); free with mendR2CapsFree. */
ncclResult_t mendR2CapsOf(const int* rankCap, int nRanks, struct mendR2Caps* caps);
void mendR2CapsFree(struct mendR2Caps* caps);
/* mendR2BestSplit on a summary of in->rankCap (in->rankCap is not read): the same split. */
int mendR2BestSplitCaps(const struct mendR2ModelIn* in, const struct mendR2Caps* caps, int minPartial,
                        int maxPartial, struct mendR2Split* out);
/* R2CCL's threshold: with one degraded rank of N, R2 beats the ring when the lost fraction X of its
 * bandwidth exceeds N / (3N - 2) (the paper's ng / (3ng - 2), appendix A). */
double mendR2PaperThreshold(int nRanks);

/* The choice for one AllReduce (mendTuneAllReduce). */
struct mendReplanChoice {
  int replan;                          /* what runs: BACKUP, BALANCE, R2 or RECURSIVE (never AUTO) */
  struct mendR2Split split;            /* R2 / RECURSIVE: the levels and their shares */
  int nChannels;                       /* R2 / RECURSIVE: channels, at least one per level where they exist */
  size_t chunkBytes;                   /* R2 / RECURSIVE: pipeline chunk */
  double estUs;                        /* the model's time of what runs */
  double costUs[MEND_NREPLANS];        /* the model's time per schedule, -1 where it cannot run */
  int algo;                            /* BACKUP / BALANCE: the algorithm (Ring, Tree) the estimate is for
                                        * where the trees were priced per host (-1: mendTuneColl's choice) */
};
/* The NIC channel c's hops use at a rank with usable NICs m (bit d: NIC d) over `rails` NICs: NIC
 * c mod rails, else the first usable one of the failover chain mendReplanHopNic follows
 * (mendGraphNicChain with every NIC equally near: a rank's own distances are its own, and the
 * choice must be every rank's). */
int mendReplanPlacedNic(int c, int rails, uint32_t m);
/* Where an R2 plan's bytes land (plan_r2.c): its layout puts each level on channels, channel c on
 * rail c mod rails, or on the first usable NIC of its failover chain (mendGraphNicChain, as
 * mendReplanHopNic) when the rank lost that rail.  The time the busiest
 * NIC of the busiest degraded rank needs for its bytes (at bytesPerUs / rails per NIC), which the
 * model's slices (tuning_r2.c) do not see: a failed rail's channels pile onto one surviving NIC.
 * 0 when the view has no per-rank NIC masks or fewer than 2 rails. */
double mendR2PlacedUs(int nRanks, const int* rankCap, const uint32_t* rankNics, const struct mendReplanChoice* rc,
                      double nBytes, double bytesPerUs);
struct ncclComm;
struct mendPlanner;
struct mendPlanView;
/* Which AllReduce schedule runs under `view` for nBytes: every input is shared (sizes, rank count,
 * the comm-wide transport kind, the view's capacities, parameters), so every rank picks alike.
 * Logs the choice and the estimates (NCCL_DEBUG_SUBSYS=TUNING) whenever the view is degraded or
 * MEND_REPLAN forces a schedule. */
ncclResult_t mendTuneAllReduce(struct ncclComm* comm, struct mendPlanner* pl, const struct mendPlanView* view,
                               size_t nBytes, struct mendReplanChoice* choice);

#ifdef __cplusplus
}
#endif

#endif
