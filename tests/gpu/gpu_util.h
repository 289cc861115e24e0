/*
 * Helpers for Mend's GPU tests (tests/gpu): the skip (exit 77) when no CUDA device is usable,
 * checked CUDA and NCCL calls that report into an error buffer, bounded waits on streams, a timed
 * tally that turns the verdicts of rank threads into one result line per case, and the 12 NCCL
 * data types written and read on the host (exact small integers only).
 *
 * Every wait here is bounded: a stream that never finishes, or a rank that never arrives, becomes a
 * failed result rather than a hang.
 */
#ifndef MEND_TEST_GPU_UTIL_H_
#define MEND_TEST_GPU_UTIL_H_

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stddef.h>

#include "mendtest.h"
#include "nccl.h"

/* Why a step failed: the first failed call or check, with its place. */
struct gpuErr {
  char msg[400]; /* empty while nothing failed */
};

/* Record the first failure in e (later ones are dropped); returns 0 so a step can `return gpuErrSet(...)`. */
int gpuErrSet(struct gpuErr* e, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/* In a function returning int (1 = ok): a CUDA or NCCL call that must succeed, else record and return 0. */
#define GCUDA(e, call)                                                                                   \
  do {                                                                                                   \
    cudaError_t c_ = (call);                                                                             \
    if (c_ != cudaSuccess)                                                                               \
      return gpuErrSet((e), "%s: %s (%s:%d)", #call, cudaGetErrorString(c_), __FILE__, __LINE__);        \
  } while (0)
#define GNCCL(e, call)                                                                                   \
  do {                                                                                                   \
    ncclResult_t r_ = (call);                                                                            \
    if (r_ != ncclSuccess)                                                                               \
      return gpuErrSet((e), "%s: %s (%s:%d)", #call, ncclGetErrorString(r_), __FILE__, __LINE__);        \
  } while (0)

/* First step of every GPU test program: exit 77 with a "# skip" line when no CUDA device is usable
 * (no driver, no device), then mtStart (watchdog, Mend's library loaded).  Returns mtStart's answer. */
int gpuStart(const char* test, int watchdogSeconds);
/* The device the tests use (0; MEND_TEST_GPU_DEVICE overrides). */
int gpuDevice(void);
/* Make the test device current on this thread and create its primary context. */
int gpuUseDevice(struct gpuErr* e);
/* Seconds a single wait may last (a stream, a barrier): 120, or MEND_TEST_GPU_WAIT_S. */
double gpuWaitLimit(void);
/* Poll cudaStreamQuery until the stream is idle, an error, or timeoutS passed (then 0 with a reason). */
int gpuWaitStream(cudaStream_t s, double timeoutS, struct gpuErr* e);

/* Rank threads agree on one result line per case: each rank adds its verdict, the last to arrive
 * prints "ok"/"not ok" (the first failure's reason).  A rank that waits longer than the limit prints
 * the case as failed and breaks the tally: every later call returns 0 at once. */
struct gpuTally {
  pthread_mutex_t mu; /* guards the rest */
  pthread_cond_t cv;  /* signalled when a round completes or the tally breaks */
  int n;              /* ranks taking part */
  int arrived;        /* ranks in the current round */
  unsigned round;     /* completed rounds */
  int broken;         /* a rank gave up waiting: nobody waits any more */
  int ok;             /* verdict of the current round so far */
  int lastOk;         /* verdict of the last completed round */
  char why[400];      /* first failure of the current round */
};
void gpuTallyInit(struct gpuTally* t, int n);
void gpuTallyFree(struct gpuTally* t);
/* Add rank's verdict for case `name` (NULL: a plain barrier, nothing printed unless it fails) and
 * wait for the round.  Returns the round's verdict (1 every rank ok, 0 one failed), or -1 when the
 * tally is broken (a rank gave up waiting, or called gpuTallyBreak). */
int gpuTallyCase(struct gpuTally* t, const char* name, int rank, int ok, const char* why, double timeoutS);
/* A rank cannot go on (e.g. its stream hung): wake every waiter; later rounds fail at once. */
void gpuTallyBreak(struct gpuTally* t);

/* ---- data types ---- */

size_t gpuTypeSize(ncclDataType_t t);
const char* gpuTypeName(ncclDataType_t t);
int gpuTypeIsFloat(ncclDataType_t t);
int gpuTypeIsSigned(ncclDataType_t t); /* signed integers and every floating type */
/* Largest integer m such that every integer in [-m, m] (or [0, m], unsigned) is exact in t. */
double gpuTypeExactMax(ncclDataType_t t);
/* Store v (exactly representable in t) as element i of p. */
void gpuPut(ncclDataType_t t, void* p, size_t i, double v);
/* Element i of p, widened to double (exact for every value the tests use). */
double gpuGet(ncclDataType_t t, const void* p, size_t i);

#endif
