/*
 * Windows: ncclCommWindowRegister / ncclCommWindowDeregister / ncclWinGetUserPtr, and the
 * per-communicator one-sided state they create (onesided.h).
 *
 * In host mode a window is a real handle (struct mendWindow): the user pointer, size, flags, the
 * communicator, its registration number and every rank's size of it.  Registration is collective,
 * as in NCCL: the ranks allgather (number, size) over the bootstrap, so every rank knows how far a
 * put into each peer's window may reach, and the first registration connects the RMA connectors
 * and starts the receiver.  Inside a group it runs at ncclGroupEnd (one thread per communicator, so
 * one thread may register on several communicators of a process).  Deregistration is local: a put
 * that arrives for a window this rank no longer has is refused by the receiver with a WARN.
 * Device mode keeps NCCL's answer where windows are unsupported: success with a NULL window.
 */
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "bootstrap.h"
#include "checks.h"
#include "comm.h"
#include "group.h"
#include "misc/bell.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "onesided.h"
#include "transport/transport.h"

static pthread_mutex_t rmaInitLock = PTHREAD_MUTEX_INITIALIZER; /* makes comm->rma once */

ncclResult_t mendRmaGet(struct ncclComm* comm, struct mendRma** out) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&rmaInitLock);
  struct mendRma* rma = comm->rma;
  if (rma == NULL) {
    MENDCHECKGOTO(MENDCALLOC(rma, 1), res, unlock);
    rma->nCtx = comm->config.numRmaCtx > 0 ? comm->config.numRmaCtx : 1;
    int64_t nSig = mendParamRmaSignals();
    if (nSig < 1 || nSig > 65536) {
      WARN("MEND_RMA_SIGNALS=%lld is outside 1..65536; using 64", (long long)nSig);
      nSig = 64;
    }
    rma->nSig = (int)nSig;
    size_t n = (size_t)comm->nRanks * (size_t)rma->nCtx * (size_t)rma->nSig;
    if (MENDCALLOC(rma->arrived, n) != ncclSuccess || MENDCALLOC(rma->consumed, n) != ncclSuccess ||
        MENDCALLOC(rma->recv, comm->nRanks) != ncclSuccess) {
      free(rma->arrived);
      free(rma->consumed);
      free(rma);
      res = ncclSystemError;
      goto unlock;
    }
    pthread_mutex_init(&rma->lock, NULL);
    pthread_mutex_init(&rma->sendLock, NULL);
    pthread_mutex_init(&rma->drainLock, NULL);
    pthread_cond_init(&rma->cond, NULL);
    comm->rma = rma;
  }
  *out = rma;
unlock:
  pthread_mutex_unlock(&rmaInitLock);
  return res;
}

ncclResult_t mendRmaConnect(struct ncclComm* comm, struct mendRma* rma) {
  if (rma->connected) return ncclSuccess;
  struct mendConnReq* reqs = NULL;
  int n = 0;
  MENDCHECK(MENDCALLOC(reqs, 2 * (size_t)comm->nRanks));
  for (int p = 0; p < comm->nRanks; p++) {
    if (p == comm->rank) continue; /* a put to oneself is a copy */
    for (int dir = MEND_SEND; dir <= MEND_RECV; dir++)
      reqs[n++] = (struct mendConnReq){.peer = p, .channel = 0, .dir = dir, .connIndex = MEND_CONN_RMA, .netDev = -1};
  }
  ncclResult_t res = mendTransportConnect(comm, n, reqs);
  free(reqs);
  MENDCHECK(res);
  atomic_store(&rma->stop, 0);
  if (pthread_create(&rma->thread, NULL, mendRmaRecvThread, comm) != 0) {
    WARN("ncclCommWindowRegister: rank %d cannot start the one-sided receiver thread", comm->rank);
    return ncclSystemError;
  }
  rma->threadRunning = 1;
  rma->connected = 1;
  return ncclSuccess;
}

struct mendWindow* mendRmaFindWindow(struct mendRma* rma, const void* win) {
  for (struct mendWindow* w = rma ? rma->wins : NULL; w; w = w->next)
    if ((const void*)w == win) return w;
  return NULL;
}

struct mendWindow* mendRmaFindSeq(struct mendRma* rma, uint64_t seq) {
  for (struct mendWindow* w = rma->wins; w; w = w->next)
    if (w->seq == seq) return w;
  return NULL;
}

void mendRmaSetError(struct mendRma* rma, ncclResult_t res) {
  if (rma->error == ncclSuccess) rma->error = res;
}

/* What one rank contributes to a registration's allgather. */
struct winInfo {
  uint64_t seq;   /* its registration number */
  uint64_t size;  /* its window's bytes */
};

/* One registration's arguments, kept until it runs (inside a group: at ncclGroupEnd). */
struct winReq {
  void* buff;
  size_t size;
  int flags;
  ncclWindow_t* win;
};

/* The registrations of one communicator in one group, in call order: one job runs them one after
 * the other, so every rank numbers its windows in its program order (jobs of a group run in parallel
 * threads, which would race for the numbers and for the bootstrap). */
struct winJob {
  struct ncclComm* comm;
  struct mendRma* rma;
  int n, cap;
  struct winReq* reqs;
};

/* Unlink window `win` of comm; NULL when it is not one. */
static struct mendWindow* unlinkWindow(struct ncclComm* comm, ncclWindow_t win) {
  struct mendRma* rma = comm->rma;
  struct mendWindow* found = NULL;
  if (rma == NULL) return NULL;
  pthread_mutex_lock(&rma->lock);
  for (struct mendWindow** p = &rma->wins; *p; p = &(*p)->next) {
    if ((void*)*p != (void*)win) continue;
    found = *p;
    *p = found->next;
    break;
  }
  pthread_mutex_unlock(&rma->lock);
  return found;
}

/* Every rank registered the same window (same number): sizes known, connectors up, handle made.
 * The window is linked (the receiver accepts puts into it) before the allgather: a peer may put the
 * moment its own registration returns, which can be before ours does. */
static ncclResult_t winRegister(struct ncclComm* comm, struct mendRma* rma, const struct winReq* req) {
  struct winInfo* all = NULL;
  struct mendWindow* w = NULL;
  ncclResult_t res = ncclSuccess;
  MENDCHECKGOTO(MENDCALLOC(all, comm->nRanks), res, fail);
  MENDCHECKGOTO(MENDCALLOC(w, 1), res, fail);
  MENDCHECKGOTO(MENDCALLOC(w->peerSize, comm->nRanks), res, fail);
  *w = (struct mendWindow){.magic = MEND_WIN_MAGIC, .comm = comm, .userPtr = req->buff, .size = req->size,
                           .flags = req->flags, .seq = rma->nextSeq, .peerSize = w->peerSize};
  pthread_mutex_lock(&rma->lock);
  w->next = rma->wins;
  rma->wins = w;
  pthread_mutex_unlock(&rma->lock);
  all[comm->rank] = (struct winInfo){.seq = rma->nextSeq, .size = req->size};
  MENDCHECKGOTO(mendBootstrapAllGather(comm->bootstrap, all, sizeof(*all)), res, unlink);
  for (int r = 0; r < comm->nRanks; r++) {
    if (all[r].seq != rma->nextSeq) {
      WARN("ncclCommWindowRegister: rank %d registers its window number %llu while rank %d registers number "
           "%llu: every rank must register the same windows in the same order", comm->rank,
           (unsigned long long)rma->nextSeq, r, (unsigned long long)all[r].seq);
      res = ncclInvalidUsage;
      goto unlink;
    }
    w->peerSize[r] = all[r].size;
  }
  MENDCHECKGOTO(mendRmaConnect(comm, rma), res, unlink);
  rma->nextSeq++;
  *req->win = (ncclWindow_t)w;
  INFO(NCCL_REG, "comm %p rank %d: window %llu registered (%p, %zu bytes, flags 0x%x)", (void*)comm, comm->rank,
       (unsigned long long)w->seq, req->buff, req->size, req->flags);
  free(all);
  return ncclSuccess;
unlink:
  unlinkWindow(comm, (ncclWindow_t)w);
fail:
  if (w) free(w->peerSize);
  free(w);
  free(all);
  return res;
}

/* The job is no longer the one later registrations of its group join. */
static void winJobDetach(struct winJob* j) {
  pthread_mutex_lock(&j->rma->lock);
  if (j->rma->pendingJob == j) j->rma->pendingJob = NULL;
  pthread_mutex_unlock(&j->rma->lock);
}

static ncclResult_t winJobRun(void* arg) {
  struct winJob* j = arg;
  winJobDetach(j);
  for (int i = 0; i < j->n; i++) MENDCHECK(winRegister(j->comm, j->rma, &j->reqs[i]));
  return ncclSuccess;
}

static void winJobFree(void* arg) {
  struct winJob* j = arg;
  winJobDetach(j);
  free(j->reqs);
  free(j);
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
         int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  MENDCHECK(mendCommCheck(comm, "ncclCommWindowRegister"));
  MENDARGCHECK(win != NULL, ncclInvalidArgument, "ncclCommWindowRegister: win is NULL");
  *win = NULL;
  MENDARGCHECK(buff != NULL && size > 0, ncclInvalidArgument, "ncclCommWindowRegister: empty buffer (%p, %zu bytes)",
               buff, size);
  MENDARGCHECK((uintptr_t)buff <= UINTPTR_MAX - (size - 1), ncclInvalidArgument,
               "ncclCommWindowRegister: range %p + %zu bytes wraps the address space", buff, size);
  MENDARGCHECK((winFlags & ~0x3) == 0, ncclInvalidArgument, "ncclCommWindowRegister: invalid winFlags 0x%x", winFlags);
  if (!comm->hostMode) {
    INFO_ONCE(NCCL_REG, "ncclCommWindowRegister: device mode has no windows yet; returning a NULL window");
    return ncclSuccess;
  }
  int state = atomic_load(&comm->state);
  MENDARGCHECK(state == MEND_COMM_READY && !mendCommAborted(comm), ncclInvalidUsage,
               "ncclCommWindowRegister: communicator %p is not ready (state %d)", (void*)comm, state);
  struct mendRma* rma = NULL;
  MENDCHECK(mendRmaGet(comm, &rma));
  struct winReq req = {.buff = buff, .size = size, .flags = winFlags, .win = win};
  pthread_mutex_lock(&rma->lock);
  struct winJob* j = rma->pendingJob;
  int isNew = j == NULL;
  if (isNew && (j = calloc(1, sizeof(*j))) != NULL) *j = (struct winJob){.comm = comm, .rma = rma};
  if (j && j->n == j->cap) {
    struct winReq* r = realloc(j->reqs, sizeof(*r) * (size_t)(j->cap ? 2 * j->cap : 4));
    if (r) j->reqs = r, j->cap = j->cap ? 2 * j->cap : 4;
  }
  int ok = j && j->n < j->cap;
  if (ok) j->reqs[j->n++] = req;
  if (ok && isNew) rma->pendingJob = j;
  pthread_mutex_unlock(&rma->lock);
  if (!ok) {
    if (isNew && j) free(j);
    WARN("ncclCommWindowRegister: out of memory");
    return ncclSystemError;
  }
  return isNew ? mendGroupAddJob(comm, winJobRun, j, winJobFree) : ncclSuccess;
}

static void windowFree(struct mendWindow* w) {
  w->magic = 0;
  free(w->peerSize);
  free(w);
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  MENDCHECK(mendCommCheck(comm, "ncclCommWindowDeregister"));
  if (!comm->hostMode && win == NULL) return ncclSuccess; /* device mode hands out NULL windows */
  MENDARGCHECK(win != NULL, ncclInvalidArgument, "ncclCommWindowDeregister: window is NULL");
  struct mendWindow* w = unlinkWindow(comm, win);
  MENDARGCHECK(w != NULL, ncclInvalidArgument,
               "ncclCommWindowDeregister: window %p is not a live window of communicator %p", (void*)win, (void*)comm);
  windowFree(w);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  MENDCHECK(mendCommCheck(comm, "ncclWinGetUserPtr"));
  MENDARGCHECK(outUserPtr != NULL, ncclInvalidArgument, "ncclWinGetUserPtr: outUserPtr is NULL");
  *outUserPtr = NULL;
  MENDARGCHECK(win != NULL, ncclInvalidArgument, "ncclWinGetUserPtr: window is NULL");
  struct mendRma* rma = comm->rma;
  void* ptr = NULL;
  if (rma) {
    pthread_mutex_lock(&rma->lock);
    struct mendWindow* w = mendRmaFindWindow(rma, win);
    if (w) ptr = w->userPtr;
    pthread_mutex_unlock(&rma->lock);
  }
  MENDARGCHECK(ptr != NULL, ncclInvalidArgument, "ncclWinGetUserPtr: window %p is not a live window of communicator %p",
               (void*)win, (void*)comm);
  *outUserPtr = ptr;
  return ncclSuccess;
}

void mendRmaStop(struct ncclComm* comm) {
  struct mendRma* rma = comm->rma;
  if (rma == NULL) return;
  atomic_store(&rma->stop, 1);
  if (comm->bell) mendBellRing(comm->bell);
  if (rma->threadRunning) pthread_join(rma->thread, NULL);
  rma->threadRunning = 0;
  while (rma->wins) {
    struct mendWindow* w = rma->wins;
    rma->wins = w->next;
    windowFree(w);
  }
  free(rma->arrived);
  free(rma->consumed);
  free(rma->recv);
  pthread_cond_destroy(&rma->cond);
  pthread_mutex_destroy(&rma->sendLock);
  pthread_mutex_destroy(&rma->drainLock);
  pthread_mutex_destroy(&rma->lock);
  free(rma);
  comm->rma = NULL;
}

uint64_t mendRmaBytes(struct ncclComm* comm) {
  struct mendRma* rma = comm->rma;
  if (rma == NULL) return 0;
  size_t n = (size_t)comm->nRanks * (size_t)rma->nCtx * (size_t)rma->nSig;
  return sizeof(*rma) + 2 * n * sizeof(uint64_t) + (size_t)comm->nRanks * sizeof(struct mendRmaRecv);
}
