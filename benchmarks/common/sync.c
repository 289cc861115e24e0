/* Barrier and reductions across the threads of this process, then across processes: the last
 * thread to arrive combines the local values, runs the control-plane step and wakes the rest.
 * Results live in two slots used in turn, so a slow thread can still read round g while the
 * others already start round g+1 (round g+2 cannot start before the slow thread arrives). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench.h"

static struct {
  pthread_mutex_t mu;    /* guards everything below */
  pthread_cond_t cv;     /* signalled when a round completes */
  int nThreads;          /* threads taking part in every round */
  int timeoutSec;        /* bound on waiting for the other threads */
  int arrived;           /* threads in the current round */
  unsigned round;        /* rounds completed */
  double* slot[2];       /* combined values of rounds with even / odd numbers */
  int cap[2];            /* capacity of each slot, in values */
  int rc[2];             /* control-plane result of each slot's round */
} sy = {.mu = PTHREAD_MUTEX_INITIALIZER, .nThreads = 1, .timeoutSec = 900};

void benchSyncInit(int nThreads, int timeoutSec) {
  static int condReady;
  if (!condReady) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&sy.cv, &a);
    pthread_condattr_destroy(&a);
    condReady = 1;
  }
  pthread_mutex_lock(&sy.mu);
  sy.nThreads = nThreads;
  pthread_mutex_unlock(&sy.mu);
  sy.timeoutSec = timeoutSec > 0 ? 2 * timeoutSec + 30 : 900;
}

static int ensureSlot(int s, int n) {
  if (n <= sy.cap[s]) return 0;
  double* p = realloc(sy.slot[s], (size_t)n * sizeof(double));
  if (!p) return -1;
  sy.slot[s] = p;
  sy.cap[s] = n;
  return 0;
}

static void combineLocal(double* acc, const double* v, int n, int op, int thread) {
  for (int i = 0; i < n; i++) {
    if (op == benchCtrlSum) acc[i] += v[i];
    else if (op == benchCtrlMin) acc[i] = v[i] < acc[i] ? v[i] : acc[i];
    else if (op == benchCtrlMax) acc[i] = v[i] > acc[i] ? v[i] : acc[i];
    else if (thread == 0) acc[i] = v[i];  /* first: thread 0 of process 0 */
  }
}

int benchSync(int thread, double* v, int n, int op) {
  pthread_mutex_lock(&sy.mu);
  unsigned round = sy.round;
  int s = (int)(round & 1);
  if (ensureSlot(s, n) != 0) {
    pthread_mutex_unlock(&sy.mu);
    return -1;
  }
  if (sy.arrived == 0) {
    if (n > 0) memcpy(sy.slot[s], v, (size_t)n * sizeof(double));
  } else combineLocal(sy.slot[s], v, n, op, thread);
  if (++sy.arrived == sy.nThreads) {
    sy.rc[s] = benchCtrlAllreduce(sy.slot[s], n, op);
    sy.arrived = 0;
    sy.round++;
    pthread_cond_broadcast(&sy.cv);
  } else {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += sy.timeoutSec;
    while (sy.round == round) {
      if (pthread_cond_timedwait(&sy.cv, &sy.mu, &dl) == ETIMEDOUT && sy.round == round) {
        fprintf(stderr, "thread barrier: the other threads did not arrive within %d s\n",
                sy.timeoutSec);
        pthread_mutex_unlock(&sy.mu);
        return -1;
      }
    }
  }
  if (n > 0) memcpy(v, sy.slot[s], (size_t)n * sizeof(double));
  int rc = sy.rc[s];
  pthread_mutex_unlock(&sy.mu);
  return rc;
}
