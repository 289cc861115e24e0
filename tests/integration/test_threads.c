/*
 * Several ranks in one process: ncclCommInitAll with 1..8 ranks, then collectives and send/recv
 * driven (a) from ONE thread inside a group over every communicator (as nccl-tests -t1 -g8 does)
 * and (b) from one thread per rank.  Results are checked; a watchdog turns a hang into a failure.
 * Also: a rank blocked on a late peer thread sleeps instead of spinning.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mendtest.h"
#include "nccl.h"

#define MAXR 8

struct bufs {
  float* in;    /* rank's input */
  float* ar;    /* AllReduce result */
  float* ag;    /* AllGather result (n blocks) */
  float* sr;    /* received from the previous rank */
  float* bc;    /* broadcast buffer */
};

static float inVal(int r, size_t i) { return (float)(r * 100 + (int)(i % 97)); }

static void allocBufs(struct bufs* b, int n, size_t count) {
  b->in = malloc(count * sizeof(float));
  b->ar = malloc(count * sizeof(float));
  b->ag = malloc(count * (size_t)n * sizeof(float));
  b->sr = malloc(count * sizeof(float));
  b->bc = malloc(count * sizeof(float));
}
static void freeBufs(struct bufs* b) {
  free(b->in);
  free(b->ar);
  free(b->ag);
  free(b->sr);
  free(b->bc);
}

static void fill(struct bufs* b, int r, size_t count) {
  for (size_t i = 0; i < count; i++) {
    b->in[i] = inVal(r, i);
    b->ar[i] = b->sr[i] = -1;
    b->bc[i] = r == 0 ? inVal(7, i) : -1;
  }
}

/* Issue this rank's share: AllReduce, AllGather, Broadcast from rank 0, ring send/recv. */
static ncclResult_t issue(ncclComm_t comm, struct bufs* b, int r, int n, size_t count) {
  ncclResult_t res;
  if ((res = ncclAllReduce(b->in, b->ar, count, ncclFloat, ncclSum, comm, NULL)) != ncclSuccess) return res;
  if ((res = ncclAllGather(b->in, b->ag, count, ncclFloat, comm, NULL)) != ncclSuccess) return res;
  if ((res = ncclBroadcast(b->bc, b->bc, count, ncclFloat, 0, comm, NULL)) != ncclSuccess) return res;
  if ((res = ncclGroupStart()) != ncclSuccess) return res;
  if ((res = ncclSend(b->in, count, ncclFloat, (r + 1) % n, comm, NULL)) != ncclSuccess) return res;
  if ((res = ncclRecv(b->sr, count, ncclFloat, (r + n - 1) % n, comm, NULL)) != ncclSuccess) return res;
  return ncclGroupEnd();
}

static int verify(struct bufs* b, int r, int n, size_t count, char* why, size_t whyLen) {
  for (size_t i = 0; i < count; i++) {
    float sum = 0;
    for (int q = 0; q < n; q++) sum += inVal(q, i);
    if (b->ar[i] != sum) { snprintf(why, whyLen, "rank %d allreduce[%zu] %g != %g", r, i, b->ar[i], sum); return 0; }
    if (b->sr[i] != inVal((r + n - 1) % n, i)) { snprintf(why, whyLen, "rank %d recv[%zu]", r, i); return 0; }
    if (b->bc[i] != inVal(7, i)) { snprintf(why, whyLen, "rank %d bcast[%zu]", r, i); return 0; }
    for (int q = 0; q < n; q++) {
      if (b->ag[(size_t)q * count + i] != inVal(q, i)) {
        snprintf(why, whyLen, "rank %d allgather block %d [%zu]", r, q, i);
        return 0;
      }
    }
  }
  return 1;
}

/* (a) one thread, every comm in one group (each collective is its own group level). */
static void oneThread(ncclComm_t* comms, int n, size_t count) {
  struct bufs b[MAXR];
  char name[96], why[160] = "";
  int ok = 1;
  for (int r = 0; r < n; r++) {
    allocBufs(&b[r], n, count);
    fill(&b[r], r, count);
  }
  ncclResult_t res = ncclGroupStart();
  for (int r = 0; r < n && res == ncclSuccess; r++) res = issue(comms[r], &b[r], r, n, count);
  ncclResult_t end = ncclGroupEnd();
  if (res != ncclSuccess || end != ncclSuccess) {
    ok = 0;
    snprintf(why, sizeof why, "issue %s, group end %s", ncclGetErrorString(res), ncclGetErrorString(end));
  }
  for (int r = 0; ok && r < n; r++) ok = verify(&b[r], r, n, count, why, sizeof why);
  for (int r = 0; r < n; r++) freeBufs(&b[r]);
  snprintf(name, sizeof name, "threads_one_thread_%dranks_count%zu", n, count);
  mtResult(ok, name, "%s", why);
}

struct rankThread {
  ncclComm_t comm;   /* this thread's communicator */
  int rank, n;       /* its rank and the count */
  size_t count;      /* elements */
  int ok;            /* results correct */
  char why[160];     /* first problem */
};

static void* rankMain(void* p) {
  struct rankThread* t = p;
  struct bufs b;
  allocBufs(&b, t->n, t->count);
  for (int iter = 0; iter < 3; iter++) {
    fill(&b, t->rank, t->count);
    ncclResult_t res = issue(t->comm, &b, t->rank, t->n, t->count);
    if (res != ncclSuccess) {
      snprintf(t->why, sizeof t->why, "rank %d: %s", t->rank, ncclGetErrorString(res));
      t->ok = 0;
      break;
    }
    if (!(t->ok = verify(&b, t->rank, t->n, t->count, t->why, sizeof t->why))) break;
  }
  freeBufs(&b);
  return NULL;
}

/* (b) one thread per rank, each calling the API without groups (except its send/recv pair). */
static void nThreads(ncclComm_t* comms, int n, size_t count) {
  struct rankThread t[MAXR];
  pthread_t th[MAXR];
  char name[96];
  int ok = 1;
  for (int r = 0; r < n; r++) {
    t[r] = (struct rankThread){.comm = comms[r], .rank = r, .n = n, .count = count, .ok = 1};
    pthread_create(&th[r], NULL, rankMain, &t[r]);
  }
  const char* why = "";
  for (int r = 0; r < n; r++) {
    pthread_join(th[r], NULL);
    if (!t[r].ok && ok) { ok = 0; why = t[r].why; }
  }
  snprintf(name, sizeof name, "threads_per_rank_%dranks_count%zu", n, count);
  mtResult(ok, name, "%s", why);
}

struct lateRank {
  ncclComm_t comm;   /* the late rank's communicator */
  float* buf;        /* its buffer */
  ncclResult_t res;  /* its AllReduce result */
};

static void* lateMain(void* p) {
  struct lateRank* l = p;
  usleep(1000 * 1000);
  l->res = ncclAllReduce(l->buf, l->buf, 1000, ncclFloat, ncclSum, l->comm, NULL);
  return NULL;
}

static double threadCpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A rank blocked in an AllReduce on a peer thread that comes 1 s late sleeps instead of spinning. */
static void waitCpu(void) {
  ncclComm_t comms[2];
  float a[1000], b[1000];
  for (int i = 0; i < 1000; i++) a[i] = b[i] = 1;
  ncclResult_t res = ncclCommInitAll(comms, 2, NULL);
  if (res != ncclSuccess) {
    mtResult(0, "threads_wait_does_not_spin", "ncclCommInitAll: %s", ncclGetErrorString(res));
    return;
  }
  ncclGroupStart(); /* connections are up before the measured call */
  ncclAllReduce(a, a, 1000, ncclFloat, ncclSum, comms[0], NULL);
  ncclAllReduce(b, b, 1000, ncclFloat, ncclSum, comms[1], NULL);
  ncclGroupEnd();
  struct lateRank late = {.comm = comms[1], .buf = b};
  pthread_t th;
  pthread_create(&th, NULL, lateMain, &late);
  double c0 = threadCpu(), t0 = mtNow();
  res = ncclAllReduce(a, a, 1000, ncclFloat, ncclSum, comms[0], NULL);
  double cpu = threadCpu() - c0, wall = mtNow() - t0;
  pthread_join(th, NULL);
  mtResult(res == ncclSuccess && late.res == ncclSuccess && a[0] == 4 && b[999] == 4 && wall > 0.8 && cpu < 0.1 * wall,
           "threads_wait_does_not_spin", "%s/%s, result %g %g, %.3f s CPU over %.3f s", ncclGetErrorString(res),
           ncclGetErrorString(late.res), a[0], b[999], cpu, wall);
  printf("# %.3f s of CPU while blocked for %.3f s\n", cpu, wall);
  ncclCommDestroy(comms[0]);
  ncclCommDestroy(comms[1]);
}

int main(void) {
  if (!mtStart("threads", 300)) return mtExitCode();
  for (int n = 1; n <= MAXR; n++) {
    ncclComm_t comms[MAXR];
    ncclResult_t res = ncclCommInitAll(comms, n, NULL);
    char name[64];
    snprintf(name, sizeof name, "threads_initall_%dranks", n);
    mtResult(res == ncclSuccess, name, "ncclCommInitAll: %s", ncclGetErrorString(res));
    if (res != ncclSuccess) continue;
    for (size_t count = 1; count <= 300000; count *= 547) {
      oneThread(comms, n, count);
      nThreads(comms, n, count);
    }
    int okDestroy = 1;
    for (int r = 0; r < n; r++) okDestroy &= ncclCommDestroy(comms[r]) == ncclSuccess;
    snprintf(name, sizeof name, "threads_destroy_%dranks", n);
    mtResult(okDestroy, name, "ncclCommDestroy failed");
  }
  waitCpu();
  return mtExitCode();
}
