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
  _Atomic long long opStartNs;   /* start of the NCCL call (and its wait) in progress, 0 when idle (-T) */
  int capturing;                 /* -G: its streams are being captured (no waits, no barriers) */
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
  int devMode;                   /* 1: device mode (GPU buffers, a stream per rank), 0: host mode */
  int nDevs;                     /* GPUs this process sees (0 in host mode) */
  char memWhy[160];              /* why this memory mode, for the header */
  _Atomic int aborting;          /* the -T watchdog is aborting the communicators: leave them alone */
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

/* ---- gpu.c: the CUDA side (device mode); see the file's comment */
/* Device mode (1) or host mode (0) for -M/MEND_PERF_MEMORY `mode`; `why` says why, for the header.
 * -M device without a GPU (or without CUDA in the build) ends the process with a message. */
int benchGpuDecide(int mode, int* nDevs, char* why, size_t len);
void benchGpuUse(int dev);                                /* current device, context created */
void benchGpuSetDevice(int dev);                          /* current device only (safe in -G capture) */
void benchGpuRankInit(struct benchRank* r, int streamNull);  /* the rank's stream (none with -y 1) */
void benchGpuRankFree(struct benchRank* r);
void* benchGpuAlloc(const struct benchRank* r, size_t bytes, int viaNccl);  /* zeroed; ncclMemAlloc if viaNccl */
void benchGpuFree(const struct benchRank* r, void* p, int viaNccl);
void benchGpuZero(const struct benchRank* r, void* dev, size_t bytes);      /* these three wait */
void benchGpuToDevice(const struct benchRank* r, void* dev, const void* host, size_t bytes);
void benchGpuToHost(const struct benchRank* r, void* host, const void* dev, size_t bytes);
void benchGpuWait(struct benchRank* ranks, int n);        /* until the ranks' streams are idle */
void benchGpuDescribe(int dev, char* out, size_t len);    /* "[dddd:bb:dd] name" */
void benchGpuMemInfo(int dev, size_t* freeBytes, size_t* totalBytes);
void benchGpuCaptureBegin(struct benchRank* ranks, int n);
void benchGpuCaptureEnd(struct benchRank* ranks, int n);  /* instantiates each rank's graph */
void benchGpuGraphLaunch(struct benchRank* r);
void benchGpuGraphFree(struct benchRank* r);

#endif /* MEND_BENCH_RUN_H_ */
