/*
 * The loopback world: nRanks host-mode communicators of this process with connectors in plain
 * memory, created on request with both ends at once.  Nothing but the planner, the generators
 * and the host engine runs, so tests check schedules for many rank counts from one thread
 * (ncclGroupStart; one call per rank; ncclGroupEnd).  Ring order on channel c is a permutation
 * position p -> (p * stride + c) mod n (stride coprime with n), different on every channel, so
 * segment maps are exercised; trees are left empty for the planner to derive.
 */
#include "device/engine.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "enqueue/plan.h"
#include "misc/utils.h"
#include "transport/transport.h"

/* One connection (sender -> receiver, channel, connIndex): the FIFO, slot memory and both ends. */
struct lbLink {
  struct mendFifo fifo;          /* shared by the two ends */
  char* buff;                    /* MEND_FIFO_SLOTS slots */
  struct mendConnector ends[2];  /* [MEND_SEND] at the sender, [MEND_RECV] at the receiver */
};

struct mendLoopback {
  int nRanks;                 /* ranks */
  int nChannels;              /* channels */
  size_t slotBytes;           /* bytes per slot */
  struct ncclComm** comms;    /* [nRanks] */
  mendBell_t* bells;          /* [nRanks] one doorbell per rank */
  int* rings;                 /* [nChannels][nRanks] position -> rank */
  struct lbLink** links;      /* [channel][connIndex][sender][receiver], created on connect */
  pthread_mutex_t lock;       /* guards links: both ends' connect threads create the same link */
};

static struct mendLoopback* worldOf(struct ncclComm* comm) {
  /* The world pointer is kept in comm->transport, which no transport owns here. */
  return (struct mendLoopback*)comm->transport;
}

static struct lbLink** linkSlot(struct mendLoopback* lb, int channel, int connIndex, int sender, int receiver) {
  size_t n = (size_t)lb->nRanks;
  return lb->links + (((size_t)channel * MEND_NCONN_INDEX + (size_t)connIndex) * n + (size_t)sender) * n +
         (size_t)receiver;
}

/* Create the link of each request not made yet (by this rank or by its peer, the other end). */
static ncclResult_t lbConnectLocked(struct mendLoopback* lb, struct ncclComm* comm, int nReqs,
                                    const struct mendConnReq* reqs) {
  for (int i = 0; i < nReqs; i++) {
    const struct mendConnReq* r = reqs + i;
    int sender = r->dir == MEND_SEND ? comm->rank : r->peer, receiver = r->dir == MEND_SEND ? r->peer : comm->rank;
    MENDARGCHECK(r->channel >= 0 && r->channel < lb->nChannels && r->peer >= 0 && r->peer < lb->nRanks &&
                 r->connIndex >= 0 && r->connIndex < MEND_NCONN_INDEX && sender != receiver,
                 ncclInternalError, "Loopback: bad connection request (peer %d channel %d)", r->peer, r->channel);
    struct lbLink** slot = linkSlot(lb, r->channel, r->connIndex, sender, receiver);
    if (*slot) continue;
    struct lbLink* l;
    MENDCHECK(MENDCALLOC(l, 1));
    if (mendCalloc((void**)&l->buff, MEND_FIFO_SLOTS, lb->slotBytes) != ncclSuccess) {
      free(l);
      return ncclSystemError;
    }
    for (int d = 0; d < 2; d++) {
      struct mendConnector* c = l->ends + d;
      c->peer = d == MEND_SEND ? receiver : sender;
      c->channel = r->channel;
      c->dir = d;
      c->connIndex = r->connIndex;
      c->kind = MEND_TRANSPORT_P2P;
      c->connected = 1;
      c->fifo = &l->fifo;
      c->buff = l->buff;
      c->slotBytes = lb->slotBytes;
      c->nSlots = MEND_FIFO_SLOTS;
      c->peerBell = lb->bells + (d == MEND_SEND ? receiver : sender);
    }
    *slot = l;
  }
  return ncclSuccess;
}

/* The group connects every communicator on its own thread, and a link's two ends ask for it at once. */
static ncclResult_t lbConnect(struct ncclComm* comm, int nReqs, const struct mendConnReq* reqs) {
  struct mendLoopback* lb = worldOf(comm);
  pthread_mutex_lock(&lb->lock);
  ncclResult_t res = lbConnectLocked(lb, comm, nReqs, reqs);
  pthread_mutex_unlock(&lb->lock);
  return res;
}

static struct mendConnector* lbGet(struct ncclComm* comm, int channel, int peer, int dir, int connIndex) {
  struct mendLoopback* lb = worldOf(comm);
  if (channel < 0 || channel >= lb->nChannels || peer < 0 || peer >= lb->nRanks || peer == comm->rank) return NULL;
  int sender = dir == MEND_SEND ? comm->rank : peer, receiver = dir == MEND_SEND ? peer : comm->rank;
  pthread_mutex_lock(&lb->lock);
  struct lbLink* l = *linkSlot(lb, channel, connIndex, sender, receiver);
  pthread_mutex_unlock(&lb->lock);
  return l ? l->ends + dir : NULL;
}

static int lbKind(struct ncclComm* comm, int peer) { return MEND_TRANSPORT_P2P; }

static const struct mendConnOps loopbackOps = {.connect = lbConnect, .get = lbGet, .kindOf = lbKind};

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

static ncclResult_t makeComm(struct mendLoopback* lb, int r) {
  struct ncclComm* comm;
  MENDCHECK(MENDCALLOC(comm, 1));
  lb->comms[r] = comm;
  comm->magic = MEND_COMM_MAGIC;
  comm->rank = r;
  comm->nRanks = lb->nRanks;
  comm->cudaDev = -1;
  comm->hostMode = 1;
  comm->nNodes = 1;
  comm->nLocalRanks = lb->nRanks;
  comm->localRank = r;
  comm->config.blocking = 1;
  comm->config.nChannelsPerNetPeer = NCCL_CONFIG_UNDEF_INT;
  comm->nChannels = lb->nChannels;
  comm->transport = (struct mendTransport*)lb;
  comm->bell = lb->bells + r;
  pthread_mutex_init(&comm->lock, NULL);
  atomic_store(&comm->state, MEND_COMM_READY);
  MENDCHECK(mendExecChoose(comm)); /* host engine, or kernel-cpu with MEND_EXECUTOR=kernel-cpu */
  atomic_store(&comm->asyncResult, ncclSuccess);
  for (int c = 0; c < lb->nChannels; c++) {
    struct mendChannel* ch = comm->channels + c;
    int* ring = lb->rings + (size_t)c * lb->nRanks;
    ch->id = c;
    ch->ring.userRanks = ring;
    for (int p = 0; p < lb->nRanks; p++) {
      if (ring[p] == r) ch->ring.index = p;
    }
    ch->ring.prev = ring[(ch->ring.index + lb->nRanks - 1) % lb->nRanks];
    ch->ring.next = ring[(ch->ring.index + 1) % lb->nRanks];
    ch->tree.up = -1;
    for (int k = 0; k < MEND_MAX_TREE_ARITY; k++) ch->tree.down[k] = -1;
    ch->netDev = -1;
  }
  return mendPlannerAttach(comm, &loopbackOps);
}

ncclResult_t mendLoopbackCreate(int nRanks, int nChannels, size_t buffSize, struct mendLoopback** out) {
  MENDARGCHECK(nRanks >= 1 && nChannels >= 1 && nChannels <= MEND_MAXCHANNELS && buffSize >= MEND_FIFO_SLOTS * 64,
               ncclInvalidArgument, "Loopback: bad shape (%d ranks, %d channels, %zu bytes)", nRanks, nChannels,
               buffSize);
  struct mendLoopback* lb;
  MENDCHECK(MENDCALLOC(lb, 1));
  lb->nRanks = nRanks;
  lb->nChannels = nChannels;
  lb->slotBytes = buffSize / MEND_FIFO_SLOTS / 64 * 64;
  pthread_mutex_init(&lb->lock, NULL);
  ncclResult_t res;
  MENDCHECKGOTO(MENDCALLOC(lb->comms, nRanks), res, fail);
  MENDCHECKGOTO(MENDCALLOC(lb->bells, nRanks), res, fail);
  MENDCHECKGOTO(MENDCALLOC(lb->rings, (size_t)nRanks * nChannels), res, fail);
  MENDCHECKGOTO(MENDCALLOC(lb->links, (size_t)nChannels * MEND_NCONN_INDEX * nRanks * nRanks), res, fail);
  for (int c = 0; c < nChannels; c++) {
    int stride = 1 + c;
    while (gcd(stride, nRanks) != 1) stride++;
    for (int p = 0; p < nRanks; p++) lb->rings[(size_t)c * nRanks + p] = (int)(((long)p * stride + c) % nRanks);
  }
  for (int r = 0; r < nRanks; r++) MENDCHECKGOTO(makeComm(lb, r), res, fail);
  *out = lb;
  return ncclSuccess;
fail:
  mendLoopbackDestroy(lb);
  return res;
}

struct ncclComm* mendLoopbackComm(struct mendLoopback* lb, int rank) { return lb->comms[rank]; }
const int* mendLoopbackRing(struct mendLoopback* lb, int channel) { return lb->rings + (size_t)channel * lb->nRanks; }

struct mendFifo* mendLoopbackFifo(struct mendLoopback* lb, int channel, int connIndex, int sender, int receiver) {
  if (channel < 0 || channel >= lb->nChannels || connIndex < 0 || connIndex >= MEND_NCONN_INDEX || sender < 0 ||
      sender >= lb->nRanks || receiver < 0 || receiver >= lb->nRanks)
    return NULL;
  pthread_mutex_lock(&lb->lock);
  struct lbLink* l = *linkSlot(lb, channel, connIndex, sender, receiver);
  pthread_mutex_unlock(&lb->lock);
  return l ? &l->fifo : NULL;
}

void mendLoopbackDestroy(struct mendLoopback* lb) {
  if (lb == NULL) return;
  size_t nLinks = (size_t)lb->nChannels * MEND_NCONN_INDEX * lb->nRanks * lb->nRanks;
  for (size_t i = 0; lb->links && i < nLinks; i++) {
    if (lb->links[i]) free(lb->links[i]->buff);
    free(lb->links[i]);
  }
  for (int r = 0; lb->comms && r < lb->nRanks; r++) {
    if (lb->comms[r] == NULL) continue;
    if (lb->comms[r]->executor) lb->comms[r]->executor->release(lb->comms[r]);
    mendPlannerFree(lb->comms[r]);
    pthread_mutex_destroy(&lb->comms[r]->lock);
    lb->comms[r]->magic = 0;
    free(lb->comms[r]);
  }
  free(lb->links);
  free(lb->rings);
  free(lb->bells);
  free(lb->comms);
  pthread_mutex_destroy(&lb->lock);
  free(lb);
}
