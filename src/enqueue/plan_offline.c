/*
 * The planner without communicators (plan_offline.h).
 *
 * One communicator-shaped value stands for every rank in turn: it has what the graph layer and the
 * planner read (rank, host map, NIC list, channel bounds) and a connector table that only says
 * which transport joins two ranks (net across hosts, shared memory inside one); nothing connects.
 * Rank 0's view is built by the graph layer (mendGraphSetup, mendGraphPlanView) and re-planned by
 * mendReplanDerive from the topology's health picture: that is the part every rank shares.  Rank
 * r's view is that view with r's own fields put back: its ring positions (an index per channel and
 * rank, kept for all ranks) and its tree neighbours (the graph's trees for all ranks, or, after
 * re-ranking, replan_rerank.c's rule: the planner's double binary tree or a chain along the ring).
 * The NIC of each channel stays rank 0's: programs do not depend on it (the simulator asks
 * mendReplanHopNic for the rail of each hop instead).
 */
#include "enqueue/plan_offline.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "graph/graph.h"
#include "misc/utils.h"
#include "resilience/health.h"
#include "transport/transport.h"

struct mendOffline {
  struct mendOfflineTopo topo;        /* as given */
  int nRanks;                         /* servers x GPUs */
  struct ncclComm* comm;              /* stands for the rank being planned */
  struct mendTopo* nicTopo;           /* NICs every rank sees */
  int* rankToNode;                    /* [nRanks] */
  int* rankToLocal;                   /* [nRanks] */
  float* lineGbps;                    /* [nRanks x nics] */
  struct mendViewNic* pictured;       /* NICs not fully up, by (rank, dev) */
  struct mendViewHealth health;       /* the picture */
  struct mendPlanView* shared;        /* rank 0's derived view */
  struct mendPlanView rankView;       /* the view of the rank being planned (rings: shared's) */
  int* ringPos;                       /* [channel x nRanks]: position of a rank in the channel's ring */
  int* treeUp;                        /* [2 x nRanks]: graph tree parent (tree c % 2) */
  int (*treeDown)[MEND_MAX_TREE_ARITY]; /* [2 x nRanks]: graph tree children */
  int treeDepth[2];                   /* depth of each graph tree */
  int reranked;                       /* trees follow the re-ranked rings (replan_rerank.c) */
};

static int offlineKind(struct ncclComm* comm, int peer) {
  return comm->rankToNode[peer] == comm->rankToNode[comm->rank] ? MEND_TRANSPORT_SHM : MEND_TRANSPORT_NET;
}
static ncclResult_t offlineConnect(struct ncclComm* comm, int nReqs, const struct mendConnReq* reqs) {
  WARN("Offline planner: rank %d asked to connect %d connectors; an offline plan is never run", comm->rank, nReqs);
  return ncclInvalidUsage;
}
static struct mendConnector* offlineGet(struct ncclComm* comm, int channel, int peer, int dir, int connIndex) {
  return NULL;
}
static const struct mendConnOps offlineOps = {.connect = offlineConnect, .get = offlineGet, .kindOf = offlineKind};

static ncclResult_t checkTopo(const struct mendOfflineTopo* t) {
  MENDARGCHECK(t != NULL, ncclInvalidArgument, "Offline planner: no topology");
  MENDARGCHECK(t->nServers >= 1 && t->gpusPerServer >= 1 && (long long)t->nServers * t->gpusPerServer <= (1 << 24),
               ncclInvalidArgument, "Offline planner: %d servers x %d GPUs is not 1..2^24 ranks", t->nServers,
               t->gpusPerServer);
  MENDARGCHECK(t->nicsPerServer >= 0 && t->nicsPerServer <= MEND_VIEW_MAX_NICS, ncclInvalidArgument,
               "Offline planner: %d NICs per server (0..%d)", t->nicsPerServer, MEND_VIEW_MAX_NICS);
  MENDARGCHECK(t->nicsPerServer == 0 || (t->lineGbps > 0 && t->lineGbps < 1e6), ncclInvalidArgument,
               "Offline planner: NIC line rate %g Gbit/s (must be > 0)", (double)t->lineGbps);
  MENDARGCHECK(t->minChannels >= 0 && t->minChannels <= MEND_MAXCHANNELS && t->maxChannels >= 0 &&
                   t->maxChannels <= MEND_MAXCHANNELS,
               ncclInvalidArgument, "Offline planner: channel bounds %d..%d (0..%d)", t->minChannels, t->maxChannels,
               MEND_MAXCHANNELS);
  MENDARGCHECK(t->nFaults >= 0 && t->nFaults <= MEND_OFFLINE_MAX_FAULTS &&
                   t->nFaults * t->gpusPerServer <= MEND_VIEW_MAX_HEALTH,
               ncclInvalidArgument, "Offline planner: %d faulty NICs on servers of %d GPUs (at most %d NICs of ranks, %d faults)",
               t->nFaults, t->gpusPerServer, MEND_VIEW_MAX_HEALTH, MEND_OFFLINE_MAX_FAULTS);
  for (int i = 0; i < t->nFaults; i++) {
    const struct mendOfflineFault* f = t->faults + i;
    MENDARGCHECK(f->server >= 0 && f->server < t->nServers && f->nic >= 0 && f->nic < t->nicsPerServer &&
                     f->gbps >= 0 && f->gbps < t->lineGbps,
                 ncclInvalidArgument, "Offline planner: fault %d (server %d, NIC %d, %g Gbit/s) is not a NIC below its line rate %g",
                 i, f->server, f->nic, (double)f->gbps, (double)t->lineGbps);
    for (int j = 0; j < i; j++)
      MENDARGCHECK(t->faults[j].server != f->server || t->faults[j].nic != f->nic, ncclInvalidArgument,
                   "Offline planner: server %d NIC %d is named twice", f->server, f->nic);
  }
  return ncclSuccess;
}

static int faultCmp(const void* a, const void* b) {
  const struct mendViewNic *x = a, *y = b;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  return x->dev < y->dev ? -1 : x->dev > y->dev;
}

/* The health picture: every rank's line rates and, per fault, one entry per rank of its server. */
static ncclResult_t buildHealth(struct mendOffline* o) {
  const struct mendOfflineTopo* t = &o->topo;
  int nics = t->nicsPerServer, n = 0;
  MENDCHECK(MENDCALLOC(o->lineGbps, (size_t)o->nRanks * (size_t)(nics ? nics : 1)));
  for (size_t i = 0; i < (size_t)o->nRanks * (size_t)nics; i++) o->lineGbps[i] = t->lineGbps;
  MENDCHECK(MENDCALLOC(o->pictured, (size_t)t->nFaults * (size_t)t->gpusPerServer + 1));
  for (int i = 0; i < t->nFaults; i++) {
    const struct mendOfflineFault* f = t->faults + i;
    for (int g = 0; g < t->gpusPerServer; g++) {
      struct mendViewNic* v = o->pictured + n++;
      v->rank = f->server * t->gpusPerServer + g;
      v->dev = f->nic;
      v->state = f->gbps > 0 ? MEND_NIC_DEGRADED : MEND_NIC_DOWN;
      v->gbps = f->gbps;
    }
  }
  qsort(o->pictured, (size_t)n, sizeof(*o->pictured), faultCmp);
  o->health = (struct mendViewHealth){.nRanks = o->nRanks, .maxDevs = nics, .lineGbps = o->lineGbps, .nNics = n,
                                      .nics = o->pictured};
  return ncclSuccess;
}

/* The communicator that stands for every rank: host map, NICs, channel bounds, no transport. */
static ncclResult_t buildComm(struct mendOffline* o) {
  const struct mendOfflineTopo* t = &o->topo;
  MENDCHECK(MENDCALLOC(o->rankToNode, (size_t)o->nRanks));
  MENDCHECK(MENDCALLOC(o->rankToLocal, (size_t)o->nRanks));
  for (int r = 0; r < o->nRanks; r++) {
    o->rankToNode[r] = r / t->gpusPerServer;
    o->rankToLocal[r] = r % t->gpusPerServer;
  }
  MENDCHECK(MENDCALLOC(o->nicTopo, 1));
  o->nicTopo->nNics = t->nicsPerServer;
  o->nicTopo->numaNode = -1;
  for (int d = 0; d < t->nicsPerServer; d++) {
    struct mendTopoNic* nic = o->nicTopo->nics + d;
    nic->dev = d;
    nic->numaNode = -1;
    nic->speed = (int)(t->lineGbps * 1000.0f + 0.5f);
    o->nicTopo->nicOrder[d] = d; /* rail-optimised: every NIC equally near */
  }
  struct ncclComm* c;
  MENDCHECK(MENDCALLOC(c, 1));
  o->comm = c;
  c->magic = MEND_COMM_MAGIC;
  c->nRanks = o->nRanks;
  c->cudaDev = -1;
  c->hostMode = 1;
  c->nNodes = t->nServers;
  c->nLocalRanks = t->gpusPerServer;
  c->rankToNode = o->rankToNode;
  c->rankToLocalRank = o->rankToLocal;
  c->config.minCTAs = t->minChannels;
  c->config.maxCTAs = t->maxChannels;
  c->config.nChannelsPerNetPeer = NCCL_CONFIG_UNDEF_INT;
  c->topo = o->nicTopo;
  MENDCHECK(mendGraphSetup(c, t->nicsPerServer));
  return mendPlannerAttach(c, &offlineOps);
}

/* Rank 0's view, re-planned for the picture; the ring positions and graph trees of every rank. */
static ncclResult_t buildShared(struct mendOffline* o) {
  struct ncclComm* c = o->comm;
  struct mendPlanView* base;
  MENDCHECK(mendGraphPlanView(c, &base));
  ncclResult_t res = mendReplanDerive(base, &o->health, 0, 0, &o->shared);
  mendPlanViewFree(base);
  if (res != ncclSuccess) return res;
  int n = o->nRanks, nCh = o->shared->nChannels;
  o->reranked = mendReplanReranked(o->shared, &o->health);
  MENDCHECK(MENDCALLOC(o->ringPos, (size_t)nCh * (size_t)n));
  for (int ch = 0; ch < nCh; ch++)
    for (int i = 0; i < n; i++) o->ringPos[(size_t)ch * n + (size_t)o->shared->ch[ch].ring[i]] = i;
  MENDCHECK(MENDCALLOC(o->treeUp, 2 * (size_t)n));
  o->treeDown = malloc(sizeof(*o->treeDown) * 2 * (size_t)n);
  MENDARGCHECK(o->treeDown != NULL, ncclSystemError, "Offline planner: out of memory for the trees of %d ranks", n);
  struct mendGraphShape shape = {.nRanks = n, .nNodes = c->nNodes, .rankToNode = o->rankToNode,
                                 .rankToLocalRank = o->rankToLocal};
  for (int t = 0; t < 2; t++)
    MENDCHECK(mendGraphTree(&shape, t, o->treeUp + (size_t)t * n, o->treeDown + (size_t)t * n, o->treeDepth + t));
  o->rankView = *o->shared;
  return ncclSuccess;
}

ncclResult_t mendOfflineCreate(const struct mendOfflineTopo* t, struct mendOffline** out) {
  MENDCHECK(checkTopo(t));
  struct mendOffline* o;
  MENDCHECK(MENDCALLOC(o, 1));
  o->topo = *t;
  o->nRanks = t->nServers * t->gpusPerServer;
  ncclResult_t res;
  MENDCHECKGOTO(buildHealth(o), res, fail);
  MENDCHECKGOTO(buildComm(o), res, fail);
  MENDCHECKGOTO(buildShared(o), res, fail);
  *out = o;
  return ncclSuccess;
fail:
  mendOfflineFree(o);
  return res;
}

void mendOfflineFree(struct mendOffline* o) {
  if (o == NULL) return;
  if (o->comm) {
    mendPlannerFree(o->comm);
    mendGraphFree(o->comm);
    free(o->comm);
  }
  mendPlanViewFree(o->shared);
  free(o->ringPos);
  free(o->treeUp);
  free(o->treeDown);
  free(o->nicTopo);
  free(o->rankToNode);
  free(o->rankToLocal);
  free(o->lineGbps);
  free(o->pictured);
  free(o);
}

int mendOfflineRanks(const struct mendOffline* o) { return o->nRanks; }
const struct mendPlanView* mendOfflineView(const struct mendOffline* o) { return o->shared; }
const struct mendViewHealth* mendOfflineHealth(const struct mendOffline* o) { return &o->health; }
int mendOfflineServer(const struct mendOffline* o, int rank) { return o->rankToNode[rank]; }

/* Rank r's own fields of the shared view. */
static void rankFields(struct mendOffline* o, int r) {
  struct mendPlanView* v = &o->rankView;
  int n = o->nRanks;
  v->rank = r;
  for (int c = 0; c < v->nChannels; c++) {
    struct mendViewChannel* ch = v->ch + c;
    int i = o->ringPos[(size_t)c * n + (size_t)r];
    ch->ringIndex = i;
    for (int k = 0; k < MEND_VIEW_TREE_ARITY; k++) ch->treeDown[k] = -1;
    if (!o->reranked) { /* the graph's tree c % 2 */
      size_t at = (size_t)(c % 2) * n + (size_t)r;
      ch->treeUp = o->treeUp[at];
      memcpy(ch->treeDown, o->treeDown[at], sizeof(ch->treeDown));
      ch->treeDepth = o->treeDepth[c % 2];
    } else if (o->shared->ch[c].treeDepth == 0) { /* re-ranked, tree derived by the planner */
      ch->treeUp = -1;
    } else { /* re-ranked, a chain along the ring */
      ch->treeUp = i > 0 ? ch->ring[i - 1] : -1;
      ch->treeDown[0] = i + 1 < n ? ch->ring[i + 1] : -1;
      ch->treeDepth = n;
    }
  }
}

ncclResult_t mendOfflinePlan(struct mendOffline* o, int rank, const struct mendOp* op, struct mendPlan** plan) {
  MENDARGCHECK(rank >= 0 && rank < o->nRanks, ncclInvalidArgument, "Offline planner: rank %d of %d", rank, o->nRanks);
  MENDARGCHECK(op != NULL && op->func >= 0 && op->func < MEND_NFUNCS && op->func != MEND_FUNC_SENDRECV,
               ncclInvalidArgument, "Offline planner: no operation %d", op ? op->func : -1);
  rankFields(o, rank);
  o->comm->rank = rank;
  o->comm->node = o->rankToNode[rank];
  o->comm->localRank = o->rankToLocal[rank];
  struct mendOp one = *op;
  one.comm = o->comm;
  /* Programs and windows do not depend on the buffers, but in-place operations plan differently
   * (AlltoAll stages its input): without buffers, plan out of place, on addresses never touched. */
  if (one.sendbuff == NULL) one.sendbuff = (const void*)((uintptr_t)1 << 44);
  if (one.recvbuff == NULL) one.recvbuff = (void*)((uintptr_t)1 << 45);
  return mendPlanBuildView(o->comm, &o->rankView, &one, 1, plan);
}

ncclResult_t mendOfflineChoice(struct mendOffline* o, size_t nBytes, struct mendReplanChoice* choice) {
  struct mendPlanner* pl;
  MENDCHECK(mendPlannerGet(o->comm, &pl));
  return mendTuneAllReduce(o->comm, pl, o->shared, nBytes, choice);
}
