/*
 * Plan views (planview.h): creation, copies, the shared hash, the NIC of a new connection, and the
 * planner's ownership of the view in force and the one pending.
 */
#include "enqueue/planview.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checks.h"
#include "comm.h"
#include "enqueue/plan.h"
#include "misc/param.h"
#include "misc/utils.h"

_Static_assert(MEND_VIEW_MAX_CHANNELS == MEND_MAXCHANNELS, "a view holds every channel");
_Static_assert(MEND_VIEW_TREE_ARITY == MEND_MAX_TREE_ARITY, "a view holds a channel's whole tree");

ncclResult_t mendPlanViewCreate(int nRanks, int rank, int nChannels, struct mendPlanView** out) {
  MENDARGCHECK(nRanks >= 1 && rank >= 0 && rank < nRanks && nChannels >= 1 && nChannels <= MEND_VIEW_MAX_CHANNELS,
               ncclInvalidArgument, "plan view: bad shape (rank %d of %d, %d channels)", rank, nRanks, nChannels);
  struct mendPlanView* v;
  MENDCHECK(MENDCALLOC(v, 1));
  if (MENDCALLOC(v->rings, (size_t)nRanks * (size_t)nChannels) != ncclSuccess ||
      MENDCALLOC(v->rankCap, (size_t)nRanks) != ncclSuccess || MENDCALLOC(v->rankNics, (size_t)nRanks) != ncclSuccess) {
    mendPlanViewFree(v);
    return ncclSystemError;
  }
  for (int r = 0; r < nRanks; r++) {
    v->rankCap[r] = 1000;
    v->rankNics[r] = ~0u;
  }
  v->nRanks = nRanks;
  v->rank = rank;
  v->nChannels = nChannels;
  for (int c = 0; c < nChannels; c++) {
    struct mendViewChannel* ch = v->ch + c;
    ch->ring = v->rings + (size_t)c * (size_t)nRanks;
    for (int i = 0; i < nRanks; i++) ch->ring[i] = -1;
    ch->ringIndex = -1;
    ch->treeUp = -1;
    for (int k = 0; k < MEND_VIEW_TREE_ARITY; k++) ch->treeDown[k] = -1;
    ch->netDev = -1;
    ch->weight = 1;
  }
  *out = v;
  return ncclSuccess;
}

void mendPlanViewFree(struct mendPlanView* view) {
  if (view == NULL) return;
  free(view->rings);
  free(view->rankCap);
  free(view->rankNics);
  free(view);
}

ncclResult_t mendPlanViewCopy(const struct mendPlanView* src, uint32_t epoch, uint64_t fromOp,
                              struct mendPlanView** out) {
  struct mendPlanView* v;
  MENDCHECK(mendPlanViewCreate(src->nRanks, src->rank, src->nChannels, &v));
  int* rings = v->rings;
  int* rankCap = v->rankCap;
  uint32_t* rankNics = v->rankNics;
  *v = *src;
  v->rings = rings;
  v->rankCap = rankCap;
  v->rankNics = rankNics;
  memcpy(rings, src->rings, sizeof(int) * (size_t)src->nRanks * (size_t)src->nChannels);
  memcpy(rankCap, src->rankCap, sizeof(int) * (size_t)src->nRanks);
  memcpy(rankNics, src->rankNics, sizeof(uint32_t) * (size_t)src->nRanks);
  for (int c = 0; c < v->nChannels; c++) v->ch[c].ring = rings + (size_t)c * (size_t)v->nRanks;
  v->epoch = epoch;
  v->fromOp = fromOp;
  v->hash = 0;
  *out = v;
  return ncclSuccess;
}

ncclResult_t mendPlanViewFromChannels(struct ncclComm* comm, struct mendPlanView** out) {
  struct mendPlanView* v;
  MENDCHECK(mendPlanViewCreate(comm->nRanks, comm->rank, comm->nChannels, &v));
  for (int c = 0; c < comm->nChannels; c++) {
    const struct mendChannel* src = comm->channels + c;
    struct mendViewChannel* ch = v->ch + c;
    if (src->ring.userRanks) memcpy(ch->ring, src->ring.userRanks, sizeof(int) * (size_t)comm->nRanks);
    ch->ringIndex = src->ring.index;
    ch->treeUp = src->tree.up;
    memcpy(ch->treeDown, src->tree.down, sizeof(ch->treeDown));
    ch->treeDepth = src->tree.depth;
    ch->netDev = src->netDev;
  }
  for (int d = 0; d < MEND_VIEW_MAX_NICS; d++) v->nicOrder[d] = d;
  ncclResult_t res = mendPlanViewSeal(v);
  if (res != ncclSuccess) {
    mendPlanViewFree(v);
    return res;
  }
  *out = v;
  return ncclSuccess;
}

/* Is ch's ring a permutation of the ranks with this rank at ringIndex? */
static int ringValid(const struct mendPlanView* v, const struct mendViewChannel* ch, char* seen) {
  memset(seen, 0, (size_t)v->nRanks);
  for (int i = 0; i < v->nRanks; i++) {
    int r = ch->ring[i];
    if (r < 0 || r >= v->nRanks || seen[r]) return 0;
    seen[r] = 1;
  }
  return ch->ringIndex >= 0 && ch->ringIndex < v->nRanks && ch->ring[ch->ringIndex] == v->rank;
}

ncclResult_t mendPlanViewSeal(struct mendPlanView* v) {
  char* seen = malloc((size_t)v->nRanks);
  if (seen == NULL) {
    WARN("plan view: out of memory checking %d ranks", v->nRanks);
    return ncclSystemError;
  }
  ncclResult_t res = ncclSuccess;
  for (int c = 0; c < v->nChannels && res == ncclSuccess; c++) {
    const struct mendViewChannel* ch = v->ch + c;
    if (!ringValid(v, ch, seen) || ch->weight <= 0 || ch->netDev < -1 || ch->netDev >= MEND_VIEW_MAX_NICS) {
      WARN("plan view (epoch %u): channel %d of rank %d is not valid (ring position %d, weight %d, NIC %d)",
           v->epoch, c, v->rank, ch->ringIndex, ch->weight, ch->netDev);
      res = ncclInternalError;
    }
  }
  free(seen);
  for (int r = 0; r < v->nRanks && res == ncclSuccess; r++) {
    if (v->rankCap[r] < 0 || v->rankCap[r] > 1000) {
      WARN("plan view (epoch %u): rank %d has capacity %d permille (0..1000)", v->epoch, r, v->rankCap[r]);
      res = ncclInternalError;
    }
  }
  if (res != ncclSuccess) return res;
  uint64_t h = mendHashCombine(mendHashCombine(v->epoch, v->fromOp), ((uint64_t)v->nRanks << 32) | (uint32_t)v->nChannels);
  h = mendHashCombine(h, mendHash(v->rings, sizeof(int) * (size_t)v->nRanks * (size_t)v->nChannels));
  for (int c = 0; c < v->nChannels; c++) h = mendHashCombine(h, (uint64_t)v->ch[c].weight);
  h = mendHashCombine(h, mendHash(v->rankCap, sizeof(int) * (size_t)v->nRanks));
  h = mendHashCombine(h, mendHash(v->rankNics, sizeof(uint32_t) * (size_t)v->nRanks));
  v->hash = h;
  return ncclSuccess;
}

uint64_t mendPlanViewOpHash(const struct mendPlanView* view, uint64_t opCount) {
  return mendHashCombine(view->hash, opCount);
}

int mendPlanViewConnDev(const struct mendPlanView* v, int channel, uint32_t myMask, uint32_t peerMask) {
  if (channel < 0 || channel >= v->nChannels) return -1;
  int home = v->ch[channel].netDev;
  if (home < 0) return -1;
  uint32_t both = myMask & peerMask;
  if ((both >> home) & 1) return home;
  int n = v->nNics < MEND_VIEW_MAX_NICS ? v->nNics : MEND_VIEW_MAX_NICS;
  for (int i = 0; i < n; i++) {
    int d = v->nicOrder[i];
    if (d >= 0 && d < 32 && ((both >> d) & 1)) return d;
  }
  /* No NIC works at both ends (rails lost on both hosts): one that works here.  The receiver listens
   * on it, and a sender whose NIC of that rail is down sets up through a bridge or a crossing. */
  if ((myMask >> home) & 1) return home;
  for (int i = 0; i < n; i++) {
    int d = v->nicOrder[i];
    if (d >= 0 && d < 32 && ((myMask >> d) & 1)) return d;
  }
  return home;
}

/* ---- the planner's views ----
 * The view in force (pl->view) is read and replaced by the planning thread only.  The resilience
 * service holds planning and hands in committed views through the lock; the planning thread finds
 * out with two atomic loads per op (holdOpen, pendingFrom) and takes the lock only when one says so.
 */

/* A view waiting for its op. */
struct viewNode {
  struct mendPlanView* view; /* pending from view->fromOp */
  int64_t changeMs;          /* the health change it answers (mendTimeMs clock; 0: none) */
  struct viewNode* next;     /* by fromOp, ascending */
};

struct mendPlannerViews {
  pthread_mutex_t lock;          /* everything but the atomics' fast reads */
  pthread_cond_t cond;           /* a hold released */
  struct mendPlanView* base;     /* the first view (the graph's, epoch 0): agreements derive from it */
  struct viewNode* pending;      /* views not in force yet */
  _Atomic uint64_t pendingFrom;  /* fromOp of the first pending view or of brokenFrom, UINT64_MAX: none */
  _Atomic uint64_t nextOp;       /* first op not planned yet (written by the planning thread only) */
  _Atomic int holdOpen;          /* an agreement round holds planning */
  uint32_t holdRound;            /* that round */
  uint64_t holdFrom;             /* ops from here on wait */
  int64_t holdSinceMs;           /* when the hold opened (the bound runs from here) */
  uint64_t brokenFrom;           /* a committed view could not be made: ops from here fail (UINT64_MAX: none) */
  uint32_t brokenRound;          /* that round */
};

static pthread_mutex_t viewsCreateLock = PTHREAD_MUTEX_INITIALIZER; /* creation of a planner's views only */

static ncclResult_t plannerViews(struct ncclComm* comm, struct mendPlanner** plOut, struct mendPlannerViews** out) {
  struct mendPlanner* pl;
  MENDCHECK(mendPlannerGet(comm, &pl));
  struct mendPlannerViews* vs = __atomic_load_n(&pl->views, __ATOMIC_ACQUIRE);
  if (vs == NULL) {
    pthread_mutex_lock(&viewsCreateLock);
    vs = pl->views;
    if (vs == NULL && MENDCALLOC(vs, 1) == ncclSuccess) {
      pthread_mutex_init(&vs->lock, NULL);
      pthread_cond_init(&vs->cond, NULL);
      atomic_init(&vs->pendingFrom, UINT64_MAX);
      atomic_init(&vs->nextOp, 0);
      atomic_init(&vs->holdOpen, 0);
      vs->brokenFrom = UINT64_MAX;
      __atomic_store_n(&pl->views, vs, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&viewsCreateLock);
    if (vs == NULL) return ncclSystemError;
  }
  *plOut = pl;
  *out = vs;
  return ncclSuccess;
}

void mendPlannerViewsFree(struct mendPlanner* pl) {
  if (pl == NULL) return;
  mendPlanViewFree(pl->view);
  pl->view = NULL;
  struct mendPlannerViews* vs = pl->views;
  if (vs == NULL) return;
  while (vs->pending) {
    struct viewNode* n = vs->pending;
    vs->pending = n->next;
    mendPlanViewFree(n->view);
    free(n);
  }
  mendPlanViewFree(vs->base);
  pthread_cond_destroy(&vs->cond);
  pthread_mutex_destroy(&vs->lock);
  free(vs);
  pl->views = NULL;
}

/* Keep pendingFrom = the first op at which the planning thread must look (lock held). */
static void updatePendingFrom(struct mendPlannerViews* vs) {
  uint64_t from = vs->pending ? vs->pending->view->fromOp : UINT64_MAX;
  atomic_store(&vs->pendingFrom, from < vs->brokenFrom ? from : vs->brokenFrom);
}

/* Queue `view` (lock held): pending views from its op on are superseded by it. */
static void addPending(struct mendPlannerViews* vs, struct mendPlanView* view, int64_t changeMs, struct viewNode* n) {
  struct viewNode** pp = &vs->pending;
  while (*pp && (*pp)->view->fromOp < view->fromOp) pp = &(*pp)->next;
  while (*pp) {
    struct viewNode* old = *pp;
    *pp = old->next;
    mendPlanViewFree(old->view);
    free(old);
  }
  *n = (struct viewNode){ .view = view, .changeMs = changeMs, .next = NULL };
  *pp = n;
  updatePendingFrom(vs);
}

ncclResult_t mendPlannerSetView(struct ncclComm* comm, struct mendPlanView* view) {
  struct mendPlanner* pl;
  struct mendPlannerViews* vs;
  struct viewNode* node = NULL;
  struct mendPlanView* base = NULL;
  ncclResult_t res = plannerViews(comm, &pl, &vs);
  if (res == ncclSuccess) res = MENDCALLOC(node, 1);
  if (res == ncclSuccess) res = mendPlanViewCopy(view, view->epoch, view->fromOp, &base);
  if (res == ncclSuccess) base->hash = view->hash;
  if (res != ncclSuccess) {
    free(node);
    mendPlanViewFree(view);
    return res;
  }
  pthread_mutex_lock(&vs->lock);
  int inForce = pl->view == NULL;
  if (inForce) {
    pl->view = view;
    if (vs->base == NULL) vs->base = base, base = NULL;
  } else {
    addPending(vs, view, 0, node), node = NULL;
  }
  pthread_mutex_unlock(&vs->lock);
  free(node);
  mendPlanViewFree(base);
  INFO(NCCL_TUNING | NCCL_INIT, "Rank %d: plan view epoch %u from op %llu (%d channels, hash %016llx)%s", comm->rank,
       view->epoch, (unsigned long long)view->fromOp, view->nChannels, (unsigned long long)view->hash,
       inForce ? "" : ", pending");
  return ncclSuccess;
}

ncclResult_t mendPlannerHold(struct ncclComm* comm, uint32_t round, uint64_t* nextOp) {
  struct mendPlanner* pl;
  struct mendPlannerViews* vs;
  MENDCHECK(plannerViews(comm, &pl, &vs));
  pthread_mutex_lock(&vs->lock);
  if (vs->base == NULL) {
    /* No view yet (communicator init has not installed the graph's): nothing to derive from, and
     * nothing planned.  The coordinator asks again. */
    pthread_mutex_unlock(&vs->lock);
    return ncclInProgress;
  }
  if (!atomic_load(&vs->holdOpen)) {
    /* Open the hold, then read how far planning got: the planning thread publishes nextOp before it
     * looks at holdOpen, so either we see its op or it sees the hold (both sequentially consistent). */
    atomic_store(&vs->holdOpen, 1);
    vs->holdFrom = atomic_load(&vs->nextOp);
    vs->holdSinceMs = mendTimeMs();
  }
  vs->holdRound = round;
  *nextOp = vs->holdFrom;
  pthread_mutex_unlock(&vs->lock);
  INFO(MEND_RESIL | NCCL_TUNING, "Rank %d: agreement round %u: planning held from op %llu", comm->rank, round,
       (unsigned long long)*nextOp);
  return ncclSuccess;
}

/* "w0:w1:...", the channel weights of a view, for the log (cut short with "..." past the buffer). */
static void weightsText(const struct mendPlanView* v, char* buf, size_t size) {
  size_t at = 0;
  buf[0] = '\0';
  for (int c = 0; c < v->nChannels && at < size; c++) {
    int w = snprintf(buf + at, size - at, "%s%d", c ? ":" : "", v->ch[c].weight);
    if (w < 0 || (size_t)w >= size - at) {
      if (size >= 4) snprintf(buf + size - 4, 4, "...");
      return;
    }
    at += (size_t)w;
  }
}

ncclResult_t mendPlannerCommit(struct ncclComm* comm, uint32_t round, uint64_t fromOp, const struct mendViewHealth* h,
                               int64_t changeMs) {
  struct mendPlanner* pl;
  struct mendPlannerViews* vs;
  MENDCHECK(plannerViews(comm, &pl, &vs));
  pthread_mutex_lock(&vs->lock);
  const struct mendPlanView* base = vs->base; /* set once, freed with the planner */
  pthread_mutex_unlock(&vs->lock);
  struct mendPlanView* v = NULL;
  struct viewNode* node = NULL;
  ncclResult_t res = ncclSuccess;
  if (base == NULL) {
    WARN("Rank %d: agreement round %u: no base plan view to derive the new view from", comm->rank, round);
    res = ncclInternalError;
  }
  if (res == ncclSuccess) res = MENDCALLOC(node, 1);
  if (res == ncclSuccess) res = mendReplanDerive(base, h, round, fromOp, &v);
  /* What the log says about v is read now: once pending, the planner may adopt and free it. */
  char weights[96] = "";
  uint32_t epoch = v ? v->epoch : 0;
  uint64_t hash = v ? v->hash : 0;
  if (v) weightsText(v, weights, sizeof(weights));
  pthread_mutex_lock(&vs->lock);
  if (res == ncclSuccess) {
    addPending(vs, v, changeMs, node), node = NULL;
  } else if (fromOp < vs->brokenFrom) {
    vs->brokenFrom = fromOp, vs->brokenRound = round;
    updatePendingFrom(vs);
  }
  if (atomic_load(&vs->holdOpen) && vs->holdRound == round) {
    atomic_store(&vs->holdOpen, 0);
    pthread_cond_broadcast(&vs->cond);
  }
  pthread_mutex_unlock(&vs->lock);
  free(node);
  if (res != ncclSuccess) {
    WARN("Rank %d: agreement round %u: the plan view for ops from %llu could not be made (error %d): those ops fail",
         comm->rank, round, (unsigned long long)fromOp, res);
    return res;
  }
  INFO(MEND_RESIL | NCCL_TUNING, "Rank %d: plan view epoch %u agreed from op %llu (hash %016llx, %d NIC(s) not up at "
       "line rate, channel weights %s), pending", comm->rank, epoch, (unsigned long long)fromOp,
       (unsigned long long)hash, h->nNics, weights);
  return ncclSuccess;
}

/* Wait while a hold covers opCount (lock held): until the round commits, the bound, or an abort. */
static ncclResult_t waitHold(struct ncclComm* comm, struct mendPlannerViews* vs, uint64_t opCount) {
  int64_t bound = mendParamAgreeTimeout();
  while (atomic_load(&vs->holdOpen) && opCount >= vs->holdFrom) {
    int64_t now = mendTimeMs(), left = vs->holdSinceMs + bound - now;
    if (mendCommAborted(comm)) return ncclInternalError;
    if (left <= 0) {
      WARN("Rank %d: op %llu held by plan-view agreement round %u (ops from %llu) for %lld ms with no commit "
           "(MEND_AGREE_TIMEOUT): the op fails rather than risk a plan other ranks do not run", comm->rank,
           (unsigned long long)opCount, vs->holdRound, (unsigned long long)vs->holdFrom,
           (long long)(now - vs->holdSinceMs));
      return ncclRemoteError;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ms = left < 100 ? left : 100; /* slices: the abort flag is looked at */
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    ts.tv_sec += (time_t)(ms / 1000) + ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&vs->cond, &vs->lock, &ts);
  }
  return ncclSuccess;
}

/* The slow path of mendPlannerViewAt: a hold, a pending view due, or a broken commit. */
static ncclResult_t viewAtLocked(struct ncclComm* comm, struct mendPlanner* pl, struct mendPlannerViews* vs,
                                 uint64_t opCount) {
  MENDCHECK(waitHold(comm, vs, opCount));
  while (vs->pending && opCount >= vs->pending->view->fromOp) {
    struct viewNode* n = vs->pending;
    vs->pending = n->next;
    /* Programs copy what they read from a view, so the old one is not referenced any more. */
    mendPlanViewFree(pl->view);
    pl->view = n->view;
    int64_t now = mendTimeMs();
    if (n->changeMs > 0)
      INFO(MEND_RESIL | NCCL_TUNING, "Rank %d: plan view epoch %u in force from op %llu (hash %016llx), %lld ms after "
           "the health change (t=%lld ms)", comm->rank, pl->view->epoch, (unsigned long long)opCount,
           (unsigned long long)pl->view->hash, (long long)(now - n->changeMs), (long long)now);
    else
      INFO(NCCL_TUNING, "Rank %d: plan view epoch %u in force from op %llu (hash %016llx)", comm->rank, pl->view->epoch,
           (unsigned long long)opCount, (unsigned long long)pl->view->hash);
    free(n);
  }
  updatePendingFrom(vs);
  if (opCount >= vs->brokenFrom) {
    WARN("Rank %d: op %llu: the plan view of agreement round %u (from op %llu) could not be made on this rank",
         comm->rank, (unsigned long long)opCount, vs->brokenRound, (unsigned long long)vs->brokenFrom);
    return ncclInternalError;
  }
  return ncclSuccess;
}

void mendPlannerEpochs(struct ncclComm* comm, int64_t* inForce, int64_t* pending) {
  *inForce = *pending = -1;
  /* The planner is made by the first operation, on the thread that issues it. */
  struct mendPlanner* pl = comm ? __atomic_load_n(&comm->planner, __ATOMIC_ACQUIRE) : NULL;
  if (!pl) return;
  struct mendPlannerViews* vs = __atomic_load_n(&pl->views, __ATOMIC_ACQUIRE);
  if (!vs) return; /* no view yet */
  /* pl->view changes under vs->lock only (the planning thread adopting, or the first view set). */
  pthread_mutex_lock(&vs->lock);
  if (pl->view) *inForce = pl->view->epoch;
  struct viewNode* last = vs->pending;
  while (last && last->next) last = last->next;
  if (last) *pending = last->view->epoch;
  pthread_mutex_unlock(&vs->lock);
}

ncclResult_t mendPlannerViewAt(struct ncclComm* comm, uint64_t opCount, const struct mendPlanView** out) {
  struct mendPlanner* pl;
  struct mendPlannerViews* vs;
  MENDCHECK(plannerViews(comm, &pl, &vs));
  if (pl->view == NULL) {
    struct mendPlanView* v;
    MENDCHECK(mendPlanViewFromChannels(comm, &v));
    MENDCHECK(mendPlannerSetView(comm, v));
  }
  /* Publish how far planning got, then look for a hold (see mendPlannerHold). */
  if (opCount + 1 > atomic_load_explicit(&vs->nextOp, memory_order_relaxed)) atomic_store(&vs->nextOp, opCount + 1);
  if (!atomic_load(&vs->holdOpen) && opCount < atomic_load(&vs->pendingFrom)) {
    *out = pl->view;
    return ncclSuccess;
  }
  pthread_mutex_lock(&vs->lock);
  ncclResult_t res = viewAtLocked(comm, pl, vs, opCount);
  pthread_mutex_unlock(&vs->lock);
  *out = pl->view;
  return res;
}
