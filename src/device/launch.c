/*
 * Launch descriptors: the works of one plan laid out for the kernel (kernel.h) in one buffer:
 *   [struct mendDevWork x nWorks, lane after lane][uint32 laneStart x (nLanes + 1)][programs]
 * Lanes: works that share a connector, directly or through other works, form one lane in plan
 * order (union-find over (connector, work) pairs sorted by connector).
 */
#include "device/launch.h"

#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "misc/utils.h"
#include "transport/transport.h"

#define ALIGN8(x) (((x) + 7) & ~(size_t)7)

struct connUse {
  const void* conn; /* the connector */
  int work;         /* a work using it */
};

static int useCmp(const void* a, const void* b) {
  const struct connUse *x = a, *y = b;
  if (x->conn != y->conn) return (uintptr_t)x->conn < (uintptr_t)y->conn ? -1 : 1;
  return x->work - y->work;
}

static int findRoot(int* parent, int i) {
  while (parent[i] != i) {
    parent[i] = parent[parent[i]];
    i = parent[i];
  }
  return i;
}

/* lane[i]: lane index of work i, lanes numbered in order of their first work. */
static ncclResult_t assignLanes(struct mendWork* works, int nWorks, int* lane, int* nLanes) {
  int nUses = 0, *parent = NULL, *id = NULL;
  struct connUse* uses = NULL;
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < nWorks; i++) nUses += works[i].prog->nPeers;
  MENDCHECKGOTO(MENDCALLOC(uses, (size_t)nUses + 1), res, exit);
  MENDCHECKGOTO(MENDCALLOC(parent, (size_t)nWorks), res, exit);
  MENDCHECKGOTO(MENDCALLOC(id, (size_t)nWorks), res, exit);
  nUses = 0;
  for (int i = 0; i < nWorks; i++) {
    parent[i] = i;
    for (int p = 0; p < works[i].prog->nPeers; p++) uses[nUses++] = (struct connUse){works[i].conns[p], i};
  }
  qsort(uses, (size_t)nUses, sizeof(*uses), useCmp);
  for (int u = 1; u < nUses; u++) {
    if (uses[u].conn != uses[u - 1].conn) continue;
    int a = findRoot(parent, uses[u - 1].work), b = findRoot(parent, uses[u].work);
    if (a != b) parent[a > b ? a : b] = a < b ? a : b; /* the root is the lane's first work */
  }
  *nLanes = 0;
  for (int i = 0; i < nWorks; i++) {
    int r = findRoot(parent, i);
    if (r == i) id[i] = (*nLanes)++;
    lane[i] = id[r];
  }
exit:
  free(uses);
  free(parent);
  free(id);
  return res;
}

size_t mendLaunchBytes(const struct mendWork* works, int nWorks) {
  size_t bytes = ALIGN8((size_t)nWorks * sizeof(struct mendDevWork)) + ALIGN8(((size_t)nWorks + 1) * sizeof(uint32_t));
  for (int i = 0; i < nWorks; i++) bytes += ALIGN8(works[i].prog->bytes);
  return bytes;
}

static void devConn(const struct mendConnector* c, int useDev, struct mendDevConn* d) {
  d->fifo = useDev ? c->devFifo : c->fifo;
  d->buff = useDev ? c->devBuff : c->buff;
  d->slotBytes = c->slotBytes;
  d->nSlots = c->nSlots;
  d->peer = c->peer;
}

ncclResult_t mendLaunchBuild(struct mendWork* works, int nWorks, int useDev, char* buf, uintptr_t devBase,
                             struct mendDevLaunch* launch) {
  int *lane = NULL, nLanes = 0;
  ncclResult_t res = ncclSuccess;
  MENDCHECK(MENDCALLOC(lane, (size_t)nWorks + 1));
  MENDCHECKGOTO(assignLanes(works, nWorks, lane, &nLanes), res, exit);
  struct mendDevWork* dw = (struct mendDevWork*)buf;
  size_t off = ALIGN8((size_t)nWorks * sizeof(*dw));
  uint32_t* laneStart = (uint32_t*)(buf + off);
  off += ALIGN8(((size_t)nWorks + 1) * sizeof(uint32_t));
  uint32_t k = 0;
  for (int l = 0; l < nLanes; l++) {
    laneStart[l] = k;
    for (int i = 0; i < nWorks; i++) {
      if (lane[i] != l) continue;
      const struct mendWork* w = works + i;
      struct mendDevWork* d = dw + k++;
      memset(d, 0, sizeof(*d));
      memcpy(buf + off, w->prog, w->prog->bytes);
      d->prog = (const struct mendProgram*)(devBase + off);
      off += ALIGN8(w->prog->bytes);
      d->args = w->args;
      d->channel = w->channel;
      d->opIndex = w->opIndex;
      for (int p = 0; p < w->prog->nPeers; p++) {
        if (useDev && (!w->conns[p]->devFifo || !w->conns[p]->devBuff)) {
          WARN("Rank %d: connector to rank %d (channel %d) has no device mapping", w->comm->rank, w->conns[p]->peer,
               w->channel);
          res = ncclInternalError;
          goto exit;
        }
        devConn(w->conns[p], useDev, d->conns + p);
      }
    }
  }
  laneStart[nLanes] = k;
  memset(launch, 0, sizeof(*launch));
  launch->works = (const struct mendDevWork*)devBase;
  launch->laneStart = (const uint32_t*)(devBase + ((char*)laneStart - buf));
  launch->nLanes = (uint32_t)nLanes;
exit:
  free(lane);
  return res;
}
