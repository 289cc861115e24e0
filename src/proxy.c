/*
 * Proxy progress thread (see proxy.h).  One per communicator: comms fail and abort independently,
 * and a stuck Net on one comm never delays another's.
 */
#include "proxy.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "checks.h"
#include "comm.h"
#include "misc/fault.h"
#include "misc/param.h"
#include "misc/utils.h"

#define PROXY_SPIN_NS 20000        /* keep polling this long after the last movement (latency) */
#define PROXY_IDLE_WAIT_US 100000  /* sleep bound with nothing in flight: only the bell wakes us */
#define PROXY_TIMER_SLACK_NS 1000  /* the proxy thread's timer slack (its polls are tens of us apart) */

struct mendProxy {
  mendBell_t bell;                /* rung by the executor and by destroy */
  _Atomic int stop;               /* destroy asks the thread to leave */
  pthread_t thread;               /* the progress thread */
  int running;                    /* thread started (must be joined) */
  pthread_mutex_t lock;           /* protects conns/nConns against mendProxyAdd */
  struct mendProxyConn** conns;   /* connectors served */
  int nConns, cap;                /* used and allocated entries */
};

static ncclResult_t proxyGet(struct ncclComm* comm, struct mendProxy** out) {
  if (!comm->proxy) {
    struct mendProxy* p;
    MENDCHECK(MENDCALLOC(p, 1));
    pthread_mutex_init(&p->lock, NULL);
    comm->proxy = p;
  }
  *out = comm->proxy;
  return ncclSuccess;
}

ncclResult_t mendProxyBell(struct ncclComm* comm, mendBell_t** bell) {
  struct mendProxy* p;
  MENDCHECK(proxyGet(comm, &p));
  *bell = &p->bell;
  return ncclSuccess;
}

/* One pass over every connector. */
static void proxyPass(struct ncclComm* comm, struct mendProxy* p, int* moved, int* busy) {
  pthread_mutex_lock(&p->lock);
  for (int i = 0; i < p->nConns; i++) {
    struct mendProxyConn* pc = p->conns[i];
    if (pc->failed) continue;
    int m = 0, b = 0;
    ncclResult_t res = mendFaultCheck("proxy.progress") ? ncclSystemError : pc->progress(comm, pc, &m, &b);
    if (res != ncclSuccess) {
      if (res == ncclInProgress) res = ncclInternalError;
      INFO(NCCL_NET | NCCL_PROXY, "proxy: rank %d: a net connector failed (%s); an operation that needs it fails",
           comm->rank, ncclGetErrorString(res));
      pc->failed = 1;
      if (pc->error) atomic_store(pc->error, (int)res);
      else mendCommSetAsyncError(comm, res);
      m = 1; /* wake the executor so it sees the error */
    }
    *moved |= m;
    *busy |= b;
  }
  pthread_mutex_unlock(&p->lock);
}

static void* proxyMain(void* arg) {
  struct ncclComm* comm = arg;
  /* Its waits are 20-200 us polls: the default 50 us timer slack would stretch the short ones. */
  prctl(PR_SET_TIMERSLACK, PROXY_TIMER_SLACK_NS, 0, 0, 0);
  struct mendProxy* p = comm->proxy;
  int64_t idleMax = mendParamProxyIdleUs(), waitUs = 0;
  if (idleMax < 1) idleMax = 1;
  uint64_t lastMove = mendTimeNs();
  while (!atomic_load_explicit(&p->stop, memory_order_acquire)) {
    /* Read the bell before looking: a ring after this read makes the wait below return at once. */
    uint32_t seen = mendBellRead(&p->bell);
    int moved = 0, busy = 0;
    proxyPass(comm, p, &moved, &busy);
    if (moved) {
      mendBellRing(comm->bell);
      lastMove = mendTimeNs();
      waitUs = 0;
      continue;
    }
    if (busy && mendTimeNs() - lastMove < PROXY_SPIN_NS) {
      sched_yield();
      continue;
    }
    if (!comm->hostMode) {
      /* Device mode: kernels post slots without ringing (a bell is a futex): poll, yielding the CPU,
       * at most MEND_PROXY_IDLE_US apart. */
      waitUs = waitUs == 0 ? 5 : waitUs * 2;
      if (waitUs > idleMax) waitUs = idleMax;
      mendBellWait(&p->bell, seen, waitUs);
    } else if (busy) {
      /* Requests in flight: poll them at a growing interval, at most MEND_PROXY_IDLE_US.  A ring
       * (a slot posted, or an executor about to sleep on a receive it polled) starts it over. */
      waitUs = waitUs == 0 ? 20 : waitUs * 2;
      if (waitUs > idleMax) waitUs = idleMax;
      mendBellWait(&p->bell, seen, waitUs);
      if (mendBellRead(&p->bell) != seen) waitUs = 0;
    } else {
      mendBellWait(&p->bell, seen, PROXY_IDLE_WAIT_US);
    }
  }
  return NULL;
}

ncclResult_t mendProxyAdd(struct ncclComm* comm, struct mendProxyConn* pc) {
  struct mendProxy* p;
  MENDCHECK(proxyGet(comm, &p));
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&p->lock);
  if (p->nConns == p->cap) {
    int cap = p->cap ? p->cap * 2 : 16;
    struct mendProxyConn** conns = realloc(p->conns, sizeof(*conns) * (size_t)cap);
    if (!conns) {
      WARN("proxy: out of memory for %d connectors", cap);
      res = ncclSystemError;
      goto unlock;
    }
    p->conns = conns;
    p->cap = cap;
  }
  p->conns[p->nConns++] = pc;
  if (!p->running) {
    int err = pthread_create(&p->thread, NULL, proxyMain, comm);
    if (err) {
      WARN("proxy: cannot start the progress thread: %s", strerror(err));
      p->nConns--;
      res = ncclSystemError;
      goto unlock;
    }
    p->running = 1;
    INFO(NCCL_PROXY | NCCL_INIT, "proxy: progress thread started for rank %d", comm->rank);
  }
unlock:
  pthread_mutex_unlock(&p->lock);
  mendBellRing(&p->bell);
  return res;
}

void mendProxyStop(struct ncclComm* comm) {
  struct mendProxy* p = comm->proxy;
  if (!p) return;
  atomic_store_explicit(&p->stop, 1, memory_order_release);
  mendBellRing(&p->bell);
  pthread_mutex_lock(&p->lock); /* a connector added now starts a thread that sees stop and leaves */
  int running = p->running;
  p->running = 0;
  pthread_mutex_unlock(&p->lock);
  if (running) pthread_join(p->thread, NULL);
}

void mendProxyDestroy(struct ncclComm* comm) {
  struct mendProxy* p = comm->proxy;
  if (!p) return;
  mendProxyStop(comm);
  pthread_mutex_destroy(&p->lock);
  free(p->conns);
  free(p);
  comm->proxy = NULL;
}
