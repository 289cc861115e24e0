/* Internal to setup.c, runner.c and main.c: the state of one process of a perf run. */
#ifndef MEND_BENCH_RUN_H_
#define MEND_BENCH_RUN_H_

#include <stdatomic.h>
#include "bench.h"

/* One thread of this process and the ranks it drives. */
struct benchThread {
  int thread;                    /* index in this process (0 is the main thread) */
  struct benchRank* ranks;       /* its nGpus ranks */
  int errors;                    /* checks that found wrong values on its ranks (nccl-tests' count) */
  double bwSum;                  /* sum of the bus bandwidths it reported */
  int bwCount;                   /* how many */
  uint64_t rep;                  /* check repetitions so far: the seed of the next check */
  double* iterTimes;             /* -I: seconds of each timed iteration */
  _Atomic long long opStartNs;   /* start of the NCCL call in progress, 0 when idle (for -T) */
};

/* This process. */
struct benchProc {
  struct benchOpts o;            /* options */
  const struct benchColl* coll;  /* the collective measured */
  const char* prog;              /* program name, for the header and footer */
  struct benchWorld w;           /* processes */
  int nLocal;                    /* ranks in this process: threads x gpus */
  int nRanks;                    /* ranks in all processes */
  int libVersion;                /* ncclGetVersion */
  struct benchRank ranks[BENCH_MAX_LOCAL];      /* local ranks, thread-major */
  struct benchThread threads[BENCH_MAX_LOCAL];  /* local threads */
  ncclComm_t parents[BENCH_MAX_LOCAL];          /* communicators before NCCL_TESTS_SPLIT, or NULL */
  int plant;                     /* MEND_PERF_PLANT_ERROR: corrupt one checked element */
};

extern struct benchProc benchP;

/* Prints an NCCL failure the way nccl-tests does and ends this process (other processes see
 * their control-plane connection close). Never returns. */
void benchFatalNccl(const char* file, int line, ncclResult_t res, ncclComm_t comm);
#define BENCH_NCCL(call)                                                  \
  do {                                                                    \
    ncclResult_t r_ = (call);                                             \
    if (r_ != ncclSuccess) benchFatalNccl(__FILE__, __LINE__, r_, NULL);  \
  } while (0)
void benchFatal(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

int benchSetup(void);            /* communicators, buffers, device report */
void benchTeardown(void);
void* benchRunThread(void* arg); /* the sweep of one thread; returns NULL */
double benchNowSec(void);
int benchIsMain(const struct benchThread* t);

#endif /* MEND_BENCH_RUN_H_ */
