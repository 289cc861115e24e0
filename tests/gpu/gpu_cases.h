/*
 * One collective test case on device buffers, split in phases so that the same case runs with one
 * thread per rank, with one thread driving every rank inside a group, and with one process per rank:
 *
 *   prepare (fill the input on the host, copy it in, poison the output, create the op)
 *   issue   (the NCCL call(s) on the rank's stream; the caller may wrap several ranks in a group)
 *   finish  (destroy the op, queue the copies back)
 *   wait    (the stream, bounded)
 *   check   (every output element against a host reference; the send buffer unchanged)
 *
 * Data are small integers that every type of the case holds exactly (or, for int32 averages,
 * large ones whose sum wraps), so results are compared exactly; the only tolerance is for a float
 * average over a rank count that is not a power of two (1/n is inexact).
 */
#ifndef MEND_TEST_GPU_CASES_H_
#define MEND_TEST_GPU_CASES_H_

#include <stddef.h>
#include <stdint.h>

#include "gpu_util.h"

enum gpuColl {
  GC_ALLREDUCE,     /* ncclAllReduce */
  GC_BROADCAST,     /* ncclBroadcast, root varies with the count */
  GC_REDUCE,        /* ncclReduce, root varies with the count */
  GC_ALLGATHER,     /* ncclAllGather */
  GC_REDUCESCATTER, /* ncclReduceScatter */
  GC_ALLTOALL,      /* ncclAlltoAll */
  GC_GATHER,        /* ncclGather, root varies with the count */
  GC_SCATTER,       /* ncclScatter, root varies with the count */
  GC_SENDRECV,      /* ring exchange: ncclSend to next, ncclRecv from previous, in one group */
  GC_MEMALLOC,      /* ncclAllReduce on buffers from ncclMemAlloc */
  GC_NUM
};

/* Ops beyond NCCL's built-in ones: PreMulSum with the scalar on the host or on the device. */
#define GPU_OP_PREMUL_HOST 5
#define GPU_OP_PREMUL_DEV 6
#define GPU_NUM_OPS 7

struct gpuCase {
  enum gpuColl coll;   /* what to call */
  ncclDataType_t type; /* element type */
  int op;              /* ncclSum .. ncclAvg or GPU_OP_PREMUL_*; reductions only */
  int inPlace;         /* NCCL's in-place layout for this collective */
};

/* Which cases gpuCaseList returns. */
enum gpuCaseSet {
  GPU_CASES_ALL,         /* every collective, type and op (threads, one thread) */
  GPU_CASES_CORE_REDUCE, /* reductions: float32/int32, main ops, a few types (processes) */
  GPU_CASES_CORE_COPY    /* data movement and send/recv (processes) */
};

/* Element counts every case runs with (per rank; see each collective for the buffer sizes). */
#define GPU_NCOUNTS 5
extern const size_t gpuCounts[GPU_NCOUNTS];
#define GPU_MAX_COUNT ((size_t)(1 << 20) + 13)

/* The step in progress on a rank: one count of one case. */
struct gpuStep {
  const struct gpuCase* c; /* the case */
  size_t count;            /* elements per rank */
  int root;                /* for rooted collectives */
  uint64_t seed;           /* makes every step's data different */
  double lo, span;         /* input values: lo + (hash % span), or the product table */
  void *send, *recv;       /* device pointers passed to NCCL */
  size_t sendElems;        /* elements read from send */
  size_t recvElems;        /* elements written to recv */
  int readSend;            /* the send buffer is read back to check it is unchanged */
  ncclRedOp_t op;          /* the op passed to NCCL */
  int opMade;              /* op is a PreMulSum to destroy */
};

/* One rank's communicator, stream and buffers. */
struct gpuRank {
  int rank, n;            /* this rank and the rank count */
  ncclComm_t comm;        /* device-mode communicator */
  cudaStream_t stream;    /* non-blocking stream of this rank */
  size_t cap;             /* bytes in each of dA, dB, hA, hB, hC */
  void *dA, *dB;          /* device buffers (cudaMalloc) */
  void *hA, *hB, *hC;     /* pinned host: input, output read back, send buffer read back */
  void *dScalar, *hScalar;/* PreMulSum scalar: device memory and its pinned staging copy */
  void *mA, *mB;          /* buffers from ncclMemAlloc (GC_MEMALLOC), NULL if it failed */
  size_t mCap;            /* bytes in each of mA, mB */
  struct gpuErr memErr;   /* why ncclMemAlloc failed */
  struct gpuStep step;    /* the step in progress */
  struct gpuErr err;      /* first failure of the current case */
};

/* Stream and buffers for rank `rank` of n (the test device must be current). */
int gpuRankAlloc(struct gpuRank* R, int rank, int n, struct gpuErr* e);
/* Free what gpuRankAlloc made (call after the communicator is destroyed and the stream idle). */
void gpuRankFree(struct gpuRank* R);

/* Fill out (room for max) with a set of cases; returns how many. */
int gpuCaseList(struct gpuCase* out, int max, enum gpuCaseSet set);
/* "<prefix>_allreduce_float32_sum_inplace" */
void gpuCaseName(const struct gpuCase* c, const char* prefix, char* buf, size_t len);

/* Phase results: 1 ok, 0 wrong results (the case fails, the next can run), -1 a call failed or a
 * wait timed out (the communicator or stream cannot be trusted any more). */
int gpuStepPrepare(struct gpuRank* R, const struct gpuCase* c, int countIdx, uint64_t seed);
int gpuStepIssue(struct gpuRank* R);
int gpuStepFinish(struct gpuRank* R);
int gpuStepWait(struct gpuRank* R);
int gpuStepCheck(struct gpuRank* R);
/* Every phase for every count, on this rank alone (one thread or process per rank). */
int gpuCaseRun(struct gpuRank* R, const struct gpuCase* c, uint64_t seed);

/* One group of two AllReduces (1M+13 floats) on two streams of this rank: the second stream's input is
 * written after a 30 ms host hold, and each output is read back on its own stream, so the launch
 * must wait for both streams and both must wait for the launch.  Same result codes as the phases. */
int gpuTwoStreams(struct gpuRank* R);

#endif
