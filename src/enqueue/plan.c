/*
 * Planning: ops -> works.  Collectives are split into contiguous windows, one per channel, each
 * run by the channel's ring or tree program; P2P-based ops become direct transfers on the P2P
 * connectors.  Every choice depends only on values all ranks share (counts, types, rank count,
 * comm-wide transport kind, parameters), so every rank builds matching programs.
 */
#include "enqueue/plan.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "device/opsig.h"
#include "enqueue/plan_cache.h"
#include "enqueue/tuning_cache.h"
#include "enqueue/planview.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "plugin/tuner_plugin.h"
#include "resilience/resil.h"
#include "transport/transport.h"

#define COLL_ALIGN_BYTES 64 /* channel windows and balanced chunks start on this boundary */

static const struct mendConnOps transportOps = {
  .connect = mendTransportConnect,
  .get = mendTransportGetConn,
  .kindOf = mendTransportKindOf,
};

static pthread_mutex_t plannerLock = PTHREAD_MUTEX_INITIALIZER;

static ncclResult_t plannerCreate(struct ncclComm* comm, const struct mendConnOps* ops) {
  struct mendPlanner* pl;
  MENDCHECK(MENDCALLOC(pl, 1));
  pl->connOps = ops;
  pl->worstKind = -1;
  __atomic_store_n(&comm->planner, pl, __ATOMIC_RELEASE);
  return ncclSuccess;
}

/* Made once, under the lock; after that every call of every operation reads it without one. */
ncclResult_t mendPlannerGet(struct ncclComm* comm, struct mendPlanner** planner) {
  ncclResult_t res = ncclSuccess;
  *planner = __atomic_load_n(&comm->planner, __ATOMIC_ACQUIRE);
  if (*planner != NULL) return ncclSuccess;
  pthread_mutex_lock(&plannerLock);
  if (comm->planner == NULL) res = plannerCreate(comm, &transportOps);
  pthread_mutex_unlock(&plannerLock);
  *planner = comm->planner;
  return res;
}

ncclResult_t mendPlannerAttach(struct ncclComm* comm, const struct mendConnOps* ops) {
  struct mendPlanner* pl;
  MENDCHECK(mendPlannerGet(comm, &pl));
  pl->connOps = ops;
  return ncclSuccess;
}

void mendPlannerFree(struct ncclComm* comm) {
  if (comm == NULL || comm->planner == NULL) return;
  if (comm->planner->tuner) mendTunerClose(comm->planner->tuner);
  mendPlanCacheFree(comm->planner->cache);
  mendTuneCacheFree(comm->planner->tuneCache);
  mendPlannerViewsFree(comm->planner);
  free(comm->planner);
  comm->planner = NULL;
}

/* ---- growing arrays ---- */

static ncclResult_t grow(void** arr, int* cap, int need, size_t elem) {
  if (need <= *cap) return ncclSuccess;
  int ncap = *cap ? *cap * 2 : 16;
  while (ncap < need) ncap *= 2;
  void* n = realloc(*arr, (size_t)ncap * elem);
  if (n == NULL) {
    WARN("Planner: out of memory growing a table to %d entries", ncap);
    return ncclSystemError;
  }
  memset((char*)n + (size_t)*cap * elem, 0, (size_t)(ncap - *cap) * elem);
  *arr = n;
  *cap = ncap;
  return ncclSuccess;
}

static ncclResult_t keepProg(struct mendPlan* plan, struct mendProgram* prog) {
  ncclResult_t res = grow((void**)&plan->progs, &plan->capProgs, plan->nProgs + 1, sizeof(*plan->progs));
  if (res != ncclSuccess) {
    free(prog);
    return res;
  }
  plan->progs[plan->nProgs++] = prog;
  return ncclSuccess;
}

static ncclResult_t addReq(struct mendPlan* plan, int channel, const struct mendProgPeer* p) {
  for (int i = 0; i < plan->nReqs; i++) {
    const struct mendConnReq* r = plan->reqs + i;
    if (r->channel == channel && r->peer == p->rank && r->dir == p->dir && r->connIndex == p->connIndex)
      return ncclSuccess;
  }
  MENDCHECK(grow((void**)&plan->reqs, &plan->capReqs, plan->nReqs + 1, sizeof(*plan->reqs)));
  struct mendConnReq* r = plan->reqs + plan->nReqs++;
  r->peer = p->rank;
  r->channel = channel;
  r->dir = p->dir;
  r->connIndex = p->connIndex;
  r->netDev = -1;
  struct ncclComm* comm = plan->comm;
  if (plan->view && comm->planner->connOps->kindOf(comm, p->rank) == MEND_TRANSPORT_NET) {
    /* The NIC is decided here, once, from the view and the health registry; the transport follows. */
    uint32_t mine = mendResilUsableMask(comm->resil, comm->rank), theirs = mendResilUsableMask(comm->resil, p->rank);
    r->netDev = mendPlanViewConnDev(plan->view, channel, mine, theirs);
  }
  return ncclSuccess;
}

ncclResult_t mendPlanAddWork(struct mendPlan* plan, int opIndex, int channel, struct mendProgram* prog,
                             const struct mendWorkArgs* args) {
  MENDCHECK(keepProg(plan, prog));
  MENDCHECK(grow((void**)&plan->works, &plan->capWorks, plan->nWorks + 1, sizeof(*plan->works)));
  struct mendWork* w = plan->works + plan->nWorks++;
  memset(w, 0, sizeof(*w));
  w->prog = prog;
  w->args = *args;
  w->comm = plan->comm;
  w->channel = channel;
  w->opIndex = opIndex;
  for (int i = 0; i < prog->nPeers; i++) MENDCHECK(addReq(plan, channel, prog->peers + i));
  return ncclSuccess;
}

ncclResult_t mendPlanScratch(struct mendPlan* plan, size_t bytes, void* stream, void** ptr) {
  if (plan->comm->cuda) return mendCudaScratch(plan->comm, bytes, stream, ptr); /* device mode: GPU memory */
  MENDCHECK(grow((void**)&plan->scratch, &plan->capScratch, plan->nScratch + 1, sizeof(void*)));
  void* p = malloc(bytes ? bytes : 1);
  if (p == NULL) {
    WARN("Planner: cannot allocate %zu bytes of scratch", bytes);
    return ncclSystemError;
  }
  plan->scratch[plan->nScratch++] = p;
  *ptr = p;
  return ncclSuccess;
}

ncclResult_t mendPlanStage(struct mendPlan* plan, void* dst, const void* src, size_t bytes) {
  if (!plan->comm->cuda) {
    memcpy(dst, src, bytes);
    return ncclSuccess;
  }
  MENDCHECK(grow((void**)&plan->stages, &plan->capStages, plan->nStages + 1, sizeof(*plan->stages)));
  plan->stages[plan->nStages++] = (struct mendStageCopy){.src = src, .dst = dst, .bytes = bytes};
  return ncclSuccess;
}

/* ---- the split over channels ---- */

ncclResult_t mendPlanSplit(const int* weights, int n, size_t count, size_t align, size_t* off, size_t* len) {
  MENDARGCHECK(n >= 1 && n <= MEND_MAXCHANNELS && align >= 1, ncclInternalError,
               "Planner: cannot split %zu elements over %d channels (alignment %zu)", count, n, align);
  size_t total = 0;
  for (int c = 0; c < n; c++) {
    MENDARGCHECK(weights[c] >= 1 && weights[c] <= MEND_VIEW_MAX_WEIGHT, ncclInternalError,
                 "Planner: channel %d has weight %d (1..%d)", c, weights[c], MEND_VIEW_MAX_WEIGHT);
    total += (size_t)weights[c];
  }
  /* Window c holds ceil(count * w_c / total) elements rounded up to the alignment, the last ones
   * clipped at count: equal weights give alignUp(divUp(count, n)) per channel, the even split.  The
   * product is taken in two parts so it cannot overflow (total <= 64 x MEND_VIEW_MAX_WEIGHT). */
  size_t q = count / total, r = count % total, at = 0;
  for (int c = 0; c < n; c++) {
    size_t w = (size_t)weights[c];
    size_t part = mendAlignUp(q * w + mendDivUp(r * w, total), align);
    off[c] = at < count ? at : count;
    len[c] = count - off[c] < part ? count - off[c] : part;
    at = off[c] + len[c];
  }
  return ncclSuccess;
}

/* ---- collectives ---- */

/* A tree from the graph layer when the channel has one, else a double binary tree on the ring. */
static void channelTree(struct ncclComm* comm, const struct mendPlanView* view, int c, int* up,
                        int down[MEND_MAX_TREE_ARITY], int* nDown) {
  const struct mendViewChannel* ch = view->ch + c;
  int n = comm->nRanks, valid = 0, ok = 1;
  if (ch->treeUp >= -1 && ch->treeUp < n && ch->treeUp != comm->rank) {
    valid = ch->treeUp >= 0;
    for (int i = 0; i < MEND_MAX_TREE_ARITY; i++) {
      int d = ch->treeDown[i];
      if (d < -1 || d >= n || d == comm->rank) ok = 0;
      if (d >= 0) valid = 1;
    }
  } else {
    ok = 0;
  }
  if (ok && valid) {
    *up = ch->treeUp;
    memcpy(down, ch->treeDown, sizeof(int) * MEND_MAX_TREE_ARITY);
    *nDown = MEND_MAX_TREE_ARITY;
    return;
  }
  int pu, pd[2];
  mendTreeDoubleBinary(n, ch->ringIndex, c % 2, &pu, pd);
  *up = pu < 0 ? -1 : ch->ring[pu];
  for (int i = 0; i < 2; i++) down[i] = pd[i] < 0 ? -1 : ch->ring[pd[i]];
  *nDown = 2;
}

static ncclResult_t collProgram(struct ncclComm* comm, const struct mendPlanView* view, const struct mendOp* op,
                                int algo, int c, struct mendProgram** prog) {
  const struct mendViewChannel* ch = view->ch + c;
  if (algo == MEND_ALGO_TREE && op->func == MEND_FUNC_ALLREDUCE && comm->nRanks > 1) {
    int up, down[MEND_MAX_TREE_ARITY], nDown;
    channelTree(comm, view, c, &up, down, &nDown);
    return mendGenTreeAllReduce(up, down, nDown, prog);
  }
  if (algo == MEND_ALGO_RD && op->func == MEND_FUNC_ALLREDUCE)
    return mendGenRdAllReduce(comm->nRanks, ch->ring, ch->ringIndex, prog);
  if (algo == MEND_ALGO_RD && op->func == MEND_FUNC_ALLGATHER)
    return mendGenRdAllGather(comm->nRanks, ch->ring, ch->ringIndex, prog);
  if (algo == MEND_ALGO_RD && op->func == MEND_FUNC_REDUCESCATTER)
    return mendGenRdReduceScatter(comm->nRanks, ch->ring, ch->ringIndex, prog);
  return mendGenRing(op->func, comm->nRanks, ch->ring, ch->ringIndex, op->root, prog);
}

static ncclResult_t planColl(struct mendPlan* plan, struct mendPlanner* pl, const struct mendOp* op, int opIndex) {
  struct ncclComm* comm = plan->comm;
  size_t ts = mendTypeSize(op->type);
  int blockedRecv = op->func == MEND_FUNC_ALLGATHER, blockedSend = op->func == MEND_FUNC_REDUCESCATTER;
  size_t nBytes = op->count * ts * ((blockedRecv || blockedSend) ? (size_t)comm->nRanks : 1);
  struct mendChoice ch;
  MENDCHECK(mendTuneColl(comm, pl, op, nBytes, plan->collAlgo, &ch));
  plan->estUs += ch.estUs;
  size_t align = ts < COLL_ALIGN_BYTES ? COLL_ALIGN_BYTES / ts : 1;
  int weights[MEND_MAXCHANNELS];
  size_t off[MEND_MAXCHANNELS], len[MEND_MAXCHANNELS];
  /* Backup (MEND_REPLAN=backup, or the per-call choice): the even split, whatever the view says. */
  int even = mendReplanBackupOnly() || plan->collEven;
  for (int c = 0; c < ch.nChannels; c++) weights[c] = even ? 1 : plan->view->ch[c].weight;
  MENDCHECK(mendPlanSplit(weights, ch.nChannels, op->count, align, off, len));
  struct mendWorkArgs args = {
    .buf = {NULL, (void*)op->sendbuff, op->recvbuff, NULL},
    .blockStride = {0, blockedSend ? op->count : 0, blockedRecv ? op->count : 0, 0},
    .chunkElems = ch.chunkBytes / ts,
    .alignElems = (uint32_t)align,
    .typeSize = (uint32_t)ts,
    .redop = op->redop,
  };
  for (int c = 0; c < ch.nChannels; c++) {
    if (len[c] == 0) continue; /* every rank drops the same empty windows */
    struct mendProgram* prog;
    MENDCHECK(collProgram(comm, plan->view, op, ch.algo, c, &prog));
    args.offset = off[c];
    args.count = len[c];
    MENDCHECK(mendPlanAddWork(plan, opIndex, c, prog, &args));
  }
  return ncclSuccess;
}

/* ---- P2P ---- */

/* Channels of a transfer sender -> receiver: both ends derive them from the same numbers. */
static void xferChannels(struct ncclComm* comm, struct mendPlanner* pl, int sender, int receiver, size_t bytes,
                         int* base, int* nCh) {
  int n = comm->nRanks, peer = sender == comm->rank ? receiver : sender;
  int64_t perPeer = mendParamP2pNchannelsPerPeer();
  if (pl->connOps->kindOf(comm, peer) == MEND_TRANSPORT_NET) {
    /* Default: host mode has one channel per rail (max(2, NICs)), so a transfer over all of them
     * loads every rail alike (2 of 3 rails left one idle and AlltoAll doubled one); device mode
     * has a channel per CTA: 2, as NCCL. */
    int cfg = comm->config.nChannelsPerNetPeer;
    perPeer = (cfg > 0 && cfg != NCCL_CONFIG_UNDEF_INT) ? cfg : comm->hostMode ? comm->nChannels : 2;
  }
  int64_t byBytes = (int64_t)(bytes / (size_t)(mendParamP2pChannelBytes() > 0 ? mendParamP2pChannelBytes() : 1));
  int64_t k = byBytes < perPeer ? byBytes : perPeer;
  if (k > comm->nChannels) k = comm->nChannels;
  *nCh = k < 1 ? 1 : (int)k;
  *base = ((receiver - sender + n) % n) % comm->nChannels;
}

ncclResult_t mendPlanAddXfer(struct mendPlan* plan, int opIndex, int peer, int dir, void* buf, size_t bytes) {
  struct ncclComm* comm = plan->comm;
  struct mendPlanner* pl;
  MENDCHECK(mendPlannerGet(comm, &pl));
  if (bytes == 0) return ncclSuccess;
  int sender = dir == MEND_SEND ? comm->rank : peer, receiver = dir == MEND_SEND ? peer : comm->rank;
  int base, nCh;
  xferChannels(comm, pl, sender, receiver, bytes, &base, &nCh);
  /* The transfer's channels share it by their weights (the view's, alike at both ends). */
  int weights[MEND_MAXCHANNELS];
  size_t off[MEND_MAXCHANNELS], len[MEND_MAXCHANNELS];
  int even = plan->view == NULL || mendReplanBackupOnly();
  for (int i = 0; i < nCh; i++) weights[i] = even ? 1 : plan->view->ch[(base + i) % comm->nChannels].weight;
  MENDCHECK(mendPlanSplit(weights, nCh, bytes, COLL_ALIGN_BYTES, off, len));
  int64_t chunk = mendParamP2pChunksize();
  struct mendWorkArgs args = {
    .chunkElems = chunk > 0 ? (size_t)chunk : SIZE_MAX / 2,
    .alignElems = 1,
    .typeSize = 1,
  };
  args.buf[dir == MEND_SEND ? MEND_BUF_SEND : MEND_BUF_RECV] = buf;
  plan->estUs += mendTuneP2pUs(comm, pl, bytes);
  for (int i = 0; i < nCh; i++) {
    if (len[i] == 0) continue;
    struct mendProgram* prog;
    MENDCHECK(dir == MEND_SEND ? mendGenP2pSend(peer, &prog) : mendGenP2pRecv(peer, &prog));
    args.offset = off[i];
    args.count = len[i];
    MENDCHECK(mendPlanAddWork(plan, opIndex, (base + i) % comm->nChannels, prog, &args));
  }
  return ncclSuccess;
}

ncclResult_t mendPlanAddCopy(struct mendPlan* plan, int opIndex, const void* src, void* dst, size_t bytes) {
  if (bytes == 0 || src == dst) return ncclSuccess;
  struct mendProgram* prog;
  MENDCHECK(mendGenCopy(0, &prog));
  struct mendWorkArgs args = {
    .buf = {NULL, (void*)src, dst, NULL},
    .count = bytes,
    .chunkElems = SIZE_MAX / 2,
    .alignElems = 1,
    .typeSize = 1,
  };
  return mendPlanAddWork(plan, opIndex, 0, prog, &args);
}

/* Sends and receives to self pair up in call order, each pair a local copy. */
static ncclResult_t planSelf(struct mendPlan* plan, const struct mendOp* ops, int nOps) {
  int me = plan->comm->rank, r = 0;
  for (int s = 0; s < nOps; s++) {
    if (ops[s].func != MEND_FUNC_SEND || ops[s].root != me) continue;
    while (r < nOps && !(ops[r].func == MEND_FUNC_RECV && ops[r].root == me)) r++;
    size_t sb = ops[s].count * mendTypeSize(ops[s].type);
    size_t rb = r < nOps ? ops[r].count * mendTypeSize(ops[r].type) : 0;
    if (r == nOps || sb != rb) {
      WARN("Rank %d: a send to self of %zu bytes has %s", me, sb,
           r == nOps ? "no matching receive from self in the group" : "a receive from self of a different size");
      return ncclInvalidUsage;
    }
    MENDCHECK(mendPlanAddCopy(plan, s, ops[s].sendbuff, ops[r].recvbuff, sb));
    r++;
  }
  for (; r < nOps; r++) {
    if (ops[r].func == MEND_FUNC_RECV && ops[r].root == me) {
      WARN("Rank %d: a receive from self has no matching send to self in the group", me);
      return ncclInvalidUsage;
    }
  }
  return ncclSuccess;
}

static ncclResult_t planOp(struct mendPlan* plan, struct mendPlanner* pl, const struct mendOp* op, int i) {
  size_t bytes = op->count * mendTypeSize(op->type);
  switch (op->func) {
  case MEND_FUNC_SEND:
    if (op->root == plan->comm->rank) return ncclSuccess;
    return mendPlanAddXfer(plan, i, op->root, MEND_SEND, (void*)op->sendbuff, bytes);
  case MEND_FUNC_RECV:
    if (op->root == plan->comm->rank) return ncclSuccess;
    return mendPlanAddXfer(plan, i, op->root, MEND_RECV, op->recvbuff, bytes);
  case MEND_FUNC_ALLREDUCE: return op->count ? mendPlanAllReduce(plan, pl, op, i, planColl) : ncclSuccess;
  case MEND_FUNC_ALLTOALL: return mendPlanAlltoAll(plan, op, i);
  case MEND_FUNC_GATHER: return mendPlanGather(plan, op, i);
  case MEND_FUNC_SCATTER: return mendPlanScatter(plan, op, i);
  default: return op->count ? planColl(plan, pl, op, i) : ncclSuccess;
  }
}

ncclResult_t mendPlanBuild(struct ncclComm* comm, const struct mendOp* ops, int nOps, struct mendPlan** out) {
  return mendPlanBuildView(comm, NULL, ops, nOps, out);
}

ncclResult_t mendPlanBuildView(struct ncclComm* comm, const struct mendPlanView* view, const struct mendOp* ops,
                               int nOps, struct mendPlan** out) {
  ncclResult_t res;
  struct mendPlanner* pl;
  MENDCHECK(mendPlannerGet(comm, &pl));
  struct mendPlan* plan;
  MENDCHECK(MENDCALLOC(plan, 1));
  plan->comm = comm;
  plan->collAlgo = -1;
  MENDCHECKGOTO(planSelf(plan, ops, nOps), res, fail_free_plan);
  for (int i = 0; i < nOps; i++) {
    plan->view = view;
    if (view == NULL) MENDCHECKGOTO(mendPlannerViewAt(comm, ops[i].opCount, &plan->view), res, fail_free_plan);
    TRACE(NCCL_TUNING, "%s: opCount %llu rank %d plan view epoch %u hash %016llx", mendFuncName(ops[i].func),
          (unsigned long long)ops[i].opCount, comm->rank, plan->view->epoch,
          (unsigned long long)mendPlanViewOpHash(plan->view, ops[i].opCount));
    int first = plan->nWorks;
    MENDCHECKGOTO(planOp(plan, pl, ops + i, i), res, fail_free_plan);
    mendOpSigFill(plan->works + first, plan->nWorks - first, ops + i); /* carried with each first slot */
  }
  plan->view = NULL; /* the planner may replace it after this call */
  *out = plan;
  return ncclSuccess;
fail_free_plan:
  mendPlanFree(plan);
  return res;
}

/* ---- connect and resolve ---- */

/* Order requests by (channel, connIndex, sender, receiver): any two ranks list the connections
 * between them in the same relative order. */
static int reqKeyCmp(const void* a, const void* b, void* meP) {
  const struct mendConnReq *x = a, *y = b;
  int me = *(const int*)meP;
  int xs = x->dir == MEND_SEND ? me : x->peer, xr = x->dir == MEND_SEND ? x->peer : me;
  int ys = y->dir == MEND_SEND ? me : y->peer, yr = y->dir == MEND_SEND ? y->peer : me;
  int kx[4] = {x->channel, x->connIndex, xs, xr}, ky[4] = {y->channel, y->connIndex, ys, yr};
  for (int i = 0; i < 4; i++) {
    if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
  }
  return 0;
}

int mendPlanPendingConns(struct mendPlan* plan) {
  struct ncclComm* comm = plan->comm;
  const struct mendConnOps* ops = comm->planner->connOps;
  int n = 0;
  for (int i = 0; i < plan->nReqs; i++) {
    const struct mendConnReq* r = plan->reqs + i;
    if (ops->get(comm, r->channel, r->peer, r->dir, r->connIndex) == NULL) plan->reqs[n++] = *r;
  }
  plan->nReqs = n; /* the others are connected already */
  return n;
}

ncclResult_t mendPlanConnect(struct mendPlan* plan) {
  struct ncclComm* comm = plan->comm;
  int n = mendPlanPendingConns(plan);
  if (n == 0) return ncclSuccess;
  qsort_r(plan->reqs, (size_t)n, sizeof(*plan->reqs), reqKeyCmp, &comm->rank);
  INFO(NCCL_P2P, "Rank %d: connecting %d connectors", comm->rank, n);
  return comm->planner->connOps->connect(comm, n, plan->reqs);
}

ncclResult_t mendPlanResolve(struct mendPlan* plan) {
  struct ncclComm* comm = plan->comm;
  struct mendPlanner* pl;
  MENDCHECK(mendPlannerGet(comm, &pl));
  for (int i = 0; i < plan->nWorks; i++) {
    struct mendWork* w = plan->works + i;
    size_t slot = SIZE_MAX;
    for (int p = 0; p < w->prog->nPeers; p++) {
      const struct mendProgPeer* pp = w->prog->peers + p;
      w->conns[p] = pl->connOps->get(comm, w->channel, pp->rank, pp->dir, pp->connIndex);
      if (w->conns[p] == NULL) {
        WARN("Rank %d: no connector to rank %d on channel %d (dir %d, connIndex %d) after connecting", comm->rank,
             pp->rank, w->channel, pp->dir, pp->connIndex);
        return ncclInternalError;
      }
      if (w->conns[p]->slotBytes < slot) slot = w->conns[p]->slotBytes;
    }
    size_t ts = w->args.typeSize, align = w->args.alignElems;
    size_t maxElems = slot == SIZE_MAX ? SIZE_MAX / 2 : slot / ts;
    if (align > maxElems) align = maxElems ? maxElems : 1;
    size_t chunk = w->args.chunkElems < maxElems ? w->args.chunkElems : maxElems;
    chunk = chunk / align * align;
    w->args.alignElems = (uint32_t)align;
    w->args.chunkElems = chunk ? chunk : align;
  }
  return ncclSuccess;
}

void mendPlanFree(struct mendPlan* plan) {
  if (plan == NULL) return;
  for (int i = 0; i < plan->nProgs; i++) free(plan->progs[i]);
  for (int i = 0; i < plan->nScratch; i++) free(plan->scratch[i]);
  free(plan->progs);
  free(plan->stages);
  free(plan->scratch);
  free(plan->works);
  free(plan->reqs);
  free(plan);
}
