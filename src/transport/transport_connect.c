/*
 * mendTransportConnect: both ends list matching requests; each end sets up its connectors, sends
 * the peer what it needs over the bootstrap (buffered sends, so call order between ranks never
 * deadlocks), receives the peer's info, and completes.  Info about a SEND connector travels on tag
 * MEND_TAG_TRANSPORT+1 and about a RECV connector on +2, so a rank that both sends to and receives
 * from the same peer never mixes them up; within a tag, messages are matched by (channel, connIndex),
 * so the two lists may even be in different orders.
 */
#include "transport/transport_priv.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap.h"
#include "checks.h"
#include "misc/cudrv.h"
#include "misc/param.h"
#include "misc/utils.h"

/* Everything one call works on. */
struct connectJob {
  int n;                          /* pending requests */
  struct mendConnector** conns;   /* [n] connectors being connected */
  struct mendConnInfo* mine;      /* [n] what we sent */
  struct mendConnInfo* theirs;    /* [n] what the peer sent, matched to conns[i] */
  int* done;                      /* [n] connect finished */
  struct mendConnInfo* selfQ[2];  /* [n] infos we sent ourselves (ring of one rank), per tag */
  int selfHead[2], selfTail[2];   /* read/write positions in selfQ */
};

static ncclResult_t checkReq(struct ncclComm* comm, const struct mendConnReq* r) {
  if (r->peer < 0 || r->peer >= comm->nRanks || r->channel < 0 || r->channel >= comm->nChannels ||
      (r->dir != MEND_SEND && r->dir != MEND_RECV) || r->connIndex < 0 || r->connIndex >= MEND_NCONN_INDEX) {
    WARN("transport: bad connection request (peer %d of %d, channel %d of %d, dir %d, connIndex %d)", r->peer,
         comm->nRanks, r->channel, comm->nChannels, r->dir, r->connIndex);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static ncclResult_t getConnector(struct ncclComm* comm, const struct mendConnReq* r, struct mendConnector** out) {
  struct mendTransport* t = comm->transport;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&t->lock);
  struct mendConnector*** slice = &t->slices[(r->channel * MEND_NCONN_INDEX + r->connIndex) * 2 + r->dir];
  if (!*slice) MENDCHECKGOTO(MENDCALLOC(*slice, comm->nRanks), res, unlock);
  struct mendConnector* conn = (*slice)[r->peer];
  if (!conn) {
    MENDCHECKGOTO(MENDCALLOC(conn, 1), res, unlock);
    conn->peer = r->peer;
    conn->channel = r->channel;
    conn->dir = r->dir;
    conn->connIndex = r->connIndex;
    conn->kind = t->peerKind[r->peer];
    conn->nSlots = MEND_FIFO_SLOTS;
    (*slice)[r->peer] = conn;
  }
  if (!conn->connected) conn->netDev = r->netDev; /* a retry after a failed call may start elsewhere */
  *out = conn;
unlock:
  pthread_mutex_unlock(&t->lock);
  return res;
}

static void jobFree(struct connectJob* job) {
  free(job->conns);
  free(job->mine);
  free(job->theirs);
  free(job->done);
  free(job->selfQ[0]);
  free(job->selfQ[1]);
}

/* Collect the connectors that still need connecting. */
static ncclResult_t jobInit(struct ncclComm* comm, int nReqs, const struct mendConnReq* reqs, struct connectJob* job) {
  memset(job, 0, sizeof(*job));
  size_t n = nReqs > 0 ? (size_t)nReqs : 1;
  MENDCHECK(MENDCALLOC(job->conns, n));
  MENDCHECK(MENDCALLOC(job->mine, n));
  MENDCHECK(MENDCALLOC(job->theirs, n));
  MENDCHECK(MENDCALLOC(job->done, n));
  MENDCHECK(MENDCALLOC(job->selfQ[0], n));
  MENDCHECK(MENDCALLOC(job->selfQ[1], n));
  for (int i = 0; i < nReqs; i++) {
    struct mendConnector* conn;
    MENDCHECK(checkReq(comm, reqs + i));
    MENDCHECK(getConnector(comm, reqs + i, &conn));
    if (conn->connected) continue;
    for (int j = 0; j < job->n; j++) {
      if (job->conns[j] == conn) {
        WARN("transport: request (peer %d, channel %d, dir %d, connIndex %d) listed twice", conn->peer,
             conn->channel, conn->dir, conn->connIndex);
        return ncclInvalidUsage;
      }
    }
    /* Left over from an earlier call that failed half way: start it again. */
    if (conn->priv) mendTransportOpsOf(conn->kind)->free(comm, conn);
    job->conns[job->n++] = conn;
  }
  return ncclSuccess;
}

static ncclResult_t sendInfo(struct ncclComm* comm, struct connectJob* job, int i) {
  struct mendConnector* conn = job->conns[i];
  struct mendConnInfo* info = job->mine + i;
  info->channel = conn->channel;
  info->connIndex = conn->connIndex;
  info->dir = conn->dir;
  info->kind = conn->kind;
  MENDCHECK(mendTransportOpsOf(conn->kind)->setup(comm, conn, info));
  if (conn->peer == comm->rank) {
    job->selfQ[conn->dir][job->selfTail[conn->dir]++] = *info;
    return ncclSuccess;
  }
  return mendBootstrapSend(comm->bootstrap, conn->peer, MEND_TAG_TRANSPORT + 1 + conn->dir, info, sizeof(*info));
}

/* Receive one info per pending connector, then pair each connector with the info about its match. */
static ncclResult_t recvInfos(struct ncclComm* comm, struct connectJob* job) {
  for (int i = 0; i < job->n; i++) {
    struct mendConnector* conn = job->conns[i];
    int peerDir = 1 - conn->dir;
    if (conn->peer == comm->rank) {
      if (job->selfHead[peerDir] >= job->selfTail[peerDir]) {
        WARN("transport: rank %d connects to itself on channel %d without the matching %s request", comm->rank,
             conn->channel, peerDir == MEND_SEND ? "send" : "receive");
        return ncclInvalidUsage;
      }
      job->theirs[i] = job->selfQ[peerDir][job->selfHead[peerDir]++];
      continue;
    }
    MENDCHECK(mendBootstrapRecv(comm->bootstrap, conn->peer, MEND_TAG_TRANSPORT + 1 + peerDir, job->theirs + i,
                                sizeof(job->theirs[i])));
  }
  for (int i = 0; i < job->n; i++) {
    struct mendConnector* conn = job->conns[i];
    int j = i;
    while (j < job->n && !(job->conns[j]->peer == conn->peer && job->conns[j]->dir == conn->dir &&
                           job->theirs[j].channel == conn->channel && job->theirs[j].connIndex == conn->connIndex))
      j++;
    if (j == job->n) {
      WARN("transport: rank %d has no matching request for (channel %d, connIndex %d, %s rank %d)", conn->peer,
           conn->channel, conn->connIndex, conn->dir == MEND_SEND ? "send to" : "receive from", conn->peer);
      return ncclInvalidUsage;
    }
    struct mendConnInfo tmp = job->theirs[i];
    job->theirs[i] = job->theirs[j];
    job->theirs[j] = tmp;
    if (job->theirs[i].kind != conn->kind) {
      WARN("transport: ranks %d and %d chose different transports (%d vs %d): set NCCL_SHM_DISABLE, "
           "NCCL_P2P_DISABLE and MEND_FORCE_TRANSPORT alike on every rank", comm->rank, conn->peer, conn->kind,
           job->theirs[i].kind);
      return ncclInvalidUsage;
    }
  }
  return ncclSuccess;
}

/* A peer was lost (died or aborted) while connectors are pending: the communicator is broken, and
 * a pending connect may never come (from that peer, or from a survivor that saw it first and gave
 * up).  A peer that closed its communicator normally is not a reason: its data may be in flight. */
static int setupBroken(struct ncclComm* comm) {
  struct mendTransport* t = comm->transport;
  pthread_mutex_lock(&t->lock);
  int peer = t->lostPeer;
  pthread_mutex_unlock(&t->lock);
  if (peer < 0) return 0;
  WARN("transport: rank %d stops connection setup: rank %d is gone (its process died or aborted); shrink or "
       "abort the communicator", comm->rank, peer);
  return 1;
}

/* Complete every connector; Net ones may need several rounds (connect/accept in progress). */
static ncclResult_t completeAll(struct ncclComm* comm, struct connectJob* job) {
  int64_t deadline = mendTimeMs() + mendParamConnectTimeout();
  for (int left = job->n; left > 0;) {
    for (int i = 0; i < job->n; i++) {
      if (job->done[i]) continue;
      struct mendConnector* conn = job->conns[i];
      ncclResult_t res = mendTransportOpsOf(conn->kind)->connect(comm, conn, job->theirs + i);
      if (res == ncclInProgress) continue;
      if (res != ncclSuccess) return res;
      job->done[i] = 1;
      pthread_mutex_lock(&comm->transport->lock);  /* peerGone reads it on the bootstrap's thread */
      conn->connected = 1;
      pthread_mutex_unlock(&comm->transport->lock);
      left--;
    }
    if (left == 0) break;
    if (mendCommAborted(comm)) {
      WARN("transport: rank %d: connection setup aborted", comm->rank);
      return ncclInternalError;
    }
    if (setupBroken(comm)) return ncclRemoteError;
    if (mendTimeMs() > deadline) {
      WARN("transport: rank %d: %d connection(s) not established after %lld ms (MEND_CONNECT_TIMEOUT_MS)",
           comm->rank, left, (long long)mendParamConnectTimeout());
      return ncclRemoteError;
    }
    struct timespec ts = { .tv_sec = 0, .tv_nsec = 20000 };
    nanosleep(&ts, NULL);
  }
  return ncclSuccess;
}

ncclResult_t mendTransportConnect(struct ncclComm* comm, int nReqs, const struct mendConnReq* reqs) {
  if (!comm || !comm->transport) {
    WARN("mendTransportConnect: communicator has no transport state");
    return ncclInvalidArgument;
  }
  if (nReqs < 0 || (nReqs > 0 && !reqs)) {
    WARN("mendTransportConnect: bad request list (%d requests at %p)", nReqs, (const void*)reqs);
    return ncclInvalidArgument;
  }
  MENDCHECK(mendCuEnter(comm->cuCtx)); /* device mode: connector memory comes from the driver */
  struct connectJob job;
  ncclResult_t res = ncclSuccess;
  MENDCHECKGOTO(jobInit(comm, nReqs, reqs, &job), res, free_job);
  for (int i = 0; i < job.n; i++) MENDCHECKGOTO(sendInfo(comm, &job, i), res, free_job);
  MENDCHECKGOTO(recvInfos(comm, &job), res, free_job);
  MENDCHECKGOTO(completeAll(comm, &job), res, free_job);
  for (int i = 0; i < job.n; i++) {
    struct mendConnector* c = job.conns[i];
    INFO(c->kind == MEND_TRANSPORT_NET ? NCCL_NET : c->kind == MEND_TRANSPORT_SHM ? NCCL_SHM : NCCL_P2P,
         "Channel %02d/%d: %d %s %d via %s (connIndex %d)", c->channel, c->connIndex, comm->rank,
         c->dir == MEND_SEND ? "->" : "<-", c->peer, mendTransportOpsOf(c->kind)->name, c->connIndex);
  }
free_job:
  jobFree(&job);
  return res;
}
