/*
 * Plan views (planview.h): creation, copies, the shared hash, the NIC of a new connection, and the
 * planner's ownership of the view in force and the one pending.
 */
#include "enqueue/planview.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "enqueue/plan.h"
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
  return home;
}

/* ---- the planner's views ---- */

static pthread_mutex_t viewLock = PTHREAD_MUTEX_INITIALIZER; /* the planner's view and pending view */

ncclResult_t mendPlannerSetView(struct ncclComm* comm, struct mendPlanView* view) {
  struct mendPlanner* pl;
  ncclResult_t res = mendPlannerGet(comm, &pl);
  if (res != ncclSuccess) {
    mendPlanViewFree(view);
    return res;
  }
  pthread_mutex_lock(&viewLock);
  if (pl->view == NULL) {
    pl->view = view;
  } else {
    mendPlanViewFree(pl->nextView);
    pl->nextView = view;
  }
  pthread_mutex_unlock(&viewLock);
  INFO(NCCL_TUNING | NCCL_INIT, "Rank %d: plan view epoch %u from op %llu (%d channels, hash %016llx)%s", comm->rank,
       view->epoch, (unsigned long long)view->fromOp, view->nChannels, (unsigned long long)view->hash,
       pl->view == view ? "" : ", pending");
  return ncclSuccess;
}

void mendPlannerEpochs(struct ncclComm* comm, int64_t* inForce, int64_t* pending) {
  *inForce = *pending = -1;
  /* The planner is made by the first operation, on the thread that issues it. */
  struct mendPlanner* pl = comm ? __atomic_load_n(&comm->planner, __ATOMIC_ACQUIRE) : NULL;
  if (!pl) return;
  pthread_mutex_lock(&viewLock);
  if (pl->view) *inForce = pl->view->epoch;
  if (pl->nextView) *pending = pl->nextView->epoch;
  pthread_mutex_unlock(&viewLock);
}

ncclResult_t mendPlannerViewAt(struct ncclComm* comm, uint64_t opCount, const struct mendPlanView** out) {
  struct mendPlanner* pl;
  MENDCHECK(mendPlannerGet(comm, &pl));
  if (pl->view == NULL) {
    struct mendPlanView* v;
    MENDCHECK(mendPlanViewFromChannels(comm, &v));
    MENDCHECK(mendPlannerSetView(comm, v));
  }
  pthread_mutex_lock(&viewLock);
  if (pl->nextView && opCount >= pl->nextView->fromOp) {
    /* Programs copy what they read from a view, so the old one is not referenced any more. */
    mendPlanViewFree(pl->view);
    pl->view = pl->nextView;
    pl->nextView = NULL;
    INFO(NCCL_TUNING, "Rank %d: plan view epoch %u in force from op %llu (hash %016llx)", comm->rank, pl->view->epoch,
         (unsigned long long)opCount, (unsigned long long)pl->view->hash);
  }
  *out = pl->view;
  pthread_mutex_unlock(&viewLock);
  return ncclSuccess;
}
