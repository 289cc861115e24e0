/* The harness shared by every perf tool: nccl-tests' flags, data, output table and timing.
 *
 * Layers (each file is one of them):
 *   colls.c   the collectives: counts, busbw factor, NCCL call, test data (one descriptor each)
 *   args.c    command line -> struct benchOpts (no NCCL calls; the peers reuse it)
 *   data.c    element types, test values, expected results, checking (no NCCL calls)
 *   report.c  header, table rows and footer in nccl-tests' format (no NCCL calls)
 *   ctrl.c    control plane between processes: local, TCP (env launch) or MPI (no NCCL calls)
 *   sync.c    barrier and reductions across the threads of a process, then across processes
 *   setup.c   world discovery, communicators, buffers, device report
 *   runner.c  the sweep: warm-up, timed loop, check, one table row per size
 *   main.c    benchMain(): what every <coll>_perf main() calls
 *   selftest.c  --selftest: checks of parsing, byte counts, bus-bandwidth math and formatting
 */
#ifndef MEND_BENCH_H_
#define MEND_BENCH_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BENCH_MAX_LOCAL 64     /* ranks one process may drive (threads x gpus) */
#define BENCH_NUM_TYPES 12     /* int8 .. f8e5m2, in ncclDataType_t order */
#define BENCH_NUM_OPS 6        /* sum prod max min avg mulsum */
#define BENCH_OP_MULSUM 5      /* our index of the pre-multiplied sum */
#define BENCH_OP_NONE (-1)     /* non-reducing collective: inputs are plain copies */

/* Exit codes, as a shell sees them. */
enum benchStatus {
  benchOk = 0,        /* everything ran and every checked value was right */
  benchFailed = 1,    /* a wrong value, an NCCL error, or a bandwidth below NCCL_TESTS_MIN_BW */
  benchUsage = 2,     /* bad command line */
  benchHelp = 3,      /* -h: help printed; the tool exits 0 */
};

/* Where the buffers live (-M host|device, MEND_PERF_MEMORY). */
enum benchMemMode {
  benchMemAuto = 0,    /* device when built with CUDA and a GPU is found, else host */
  benchMemHost = 1,    /* host buffers, stream NULL, calls complete when they return */
  benchMemDevice = 2,  /* cudaMalloc buffers and a CUDA stream per rank; no GPU is an error */
};

/* Everything the command line (and NCCL_TESTS_* variables) can set. */
struct benchOpts {
  int nThreads;          /* -t: threads per process */
  int nGpus;             /* -g: ranks driven by each thread */
  size_t minBytes;       /* -b */
  size_t maxBytes;       /* -e */
  size_t stepBytes;      /* -i: additive step, used when stepFactor <= 1 */
  size_t stepFactor;     /* -f: multiplicative step */
  int iters;             /* -n: timed iterations */
  int aggIters;          /* -m: operations grouped per iteration */
  int warmupIters;       /* -w */
  int runCycles;         /* -N: sweeps (0 = until interrupted) */
  int parallelInit;      /* -p: each thread creates its own communicators */
  int check;             /* -c: check iterations per size (0 = no check, N/A printed) */
  int op;                /* -o: index into the op table, or -1 for all */
  int type;              /* -d: ncclDataType_t, or -1 for all */
  int root;              /* -r */
  int blocking;          /* -z: 0..3 as in nccl-tests */
  int streamNull;        /* -y: device mode calls on the NULL stream; host mode has no streams */
  int timeout;           /* -T: seconds before the communicators are aborted (0 = off) */
  int graphLaunches;     /* -G: device mode replays the timed loop as a CUDA graph this many
                          * times; ignored in host mode (noted in the header) */
  int reportCputime;     /* -C */
  int average;           /* -a: 0 rank 0, 1 average, 2 min, 3 max across ranks */
  int localRegister;     /* -R: 0 none, 1 ncclCommRegister, 2 symmetric window */
  int ctaPolicy;         /* -x: config.CTAPolicy (-1 = leave undefined) */
  int deviceImpl;        /* -D: device-API kernels; only 0 is supported */
  int deviceCtaCount;    /* -V */
  const char* jsonFile;  /* -J: JSON output file, or NULL */
  int timestamps;        /* -S: timestamp column */
  int memReport;         /* -M 0|1: memory-usage line */
  int memMode;           /* -M host|device, MEND_PERF_MEMORY: enum benchMemMode */
  int unalign;           /* -u: misalign buffers by this many elements */
  int perIter;           /* -I: per-iteration i_min/i_max/i_p99/i_cv% columns */
  int perIterSkip;       /* -K: samples skipped for -I */
  double minBw;          /* NCCL_TESTS_MIN_BW (GB/s), or -1 */
  int selftest;          /* --selftest: run the harness checks and exit */
};

/* Element counts of one call for a given size (nccl-tests' getCollByteCount). */
struct benchCounts {
  size_t sendCount;      /* elements in the send buffer */
  size_t recvCount;      /* elements in the receive buffer */
  size_t paramCount;     /* the count passed to the NCCL call */
  size_t sendInplace;    /* in place: send data sits at recvbuff + rank * sendInplace elements */
  size_t recvInplace;    /* in place: results are at recvbuff + rank * recvInplace elements */
};

/* What one rank holds while a collective is measured. */
struct benchRank {
  ncclComm_t comm;       /* communicator of this rank */
  int rank;              /* rank in comm */
  int nRanks;            /* size of comm */
  int device;            /* ncclCommCuDevice, -1 in host mode */
  int cudaDev;           /* GPU this rank was given (current at init), -1 in host mode */
  cudaStream_t stream;   /* stream of its calls: NULL in host mode and with -y 1 */
  void* stage;           /* device mode: host buffer that inputs and results pass through */
  void* graph;           /* device mode, -G: the captured timed loop (cudaGraphExec_t) */
  int color;             /* NCCL_TESTS_SPLIT group (0 without a split) */
  void* sendBuf;         /* allocation used as the send buffer (aligned, plus -u offset); GPU
                          * memory in device mode, as are recvBuf, sendBase and recvBase */
  void* recvBuf;         /* allocation used as the receive buffer */
  void* expected;        /* host buffer holding the values a check expects */
  void* sendBase;        /* what was allocated for sendBuf (freed at the end) */
  void* recvBase;        /* what was allocated for recvBuf */
  size_t allocBytes;     /* usable bytes of each of sendBuf and recvBuf */
  void* regHandle[2];    /* -R handles or windows for send and receive buffers */
};

/* A collective, described once per tool: counts, bandwidth factor, call, data. */
struct benchColl {
  const char* name;      /* "AllReduce": used in messages */
  const char* key;       /* "all_reduce": the tool is <key>_perf */
  int reduces;           /* 1: takes a reduction op (prints its name), 0: prints "none" */
  int rooted;            /* 1: uses -r; 0: prints root -1 */
  int inplaceChecked;    /* 0: in-place results are not checked (N/A), as nccl-tests does */
  void (*counts)(size_t count, size_t eltSize, int nRanks, struct benchCounts* c);
  double (*busFactor)(int nRanks);          /* busbw = algbw * factor */
  int algBytesTimesRanks;                   /* algbw bytes = paramCount * size * (this ? n : 1) */
  ncclResult_t (*run)(const void* send, void* recv, size_t count, ncclDataType_t type,
                      ncclRedOp_t op, int root, ncclComm_t comm, int rank, int nRanks,
                      cudaStream_t stream);
  /* Fills the send data of `rank` (sendCount elements at `send`) for one check. */
  void (*fillSend)(void* send, const struct benchCounts* c, int type, int op, int rank, int nRanks,
                   int root, uint64_t seed);
  /* Writes what `rank` must hold afterwards into `expected`; returns how many elements to check
   * (0 when this rank's output is undefined, e.g. a non-root rank of Reduce). */
  size_t (*fillExpected)(void* expected, const struct benchCounts* c, int type, int op, int rank,
                         int nRanks, int root, uint64_t seed);
};

/* ---- colls.c: the descriptors of every collective the tools measure */
extern const struct benchColl benchCollAllReduce, benchCollAllGather, benchCollBroadcast,
    benchCollReduce, benchCollReduceScatter, benchCollSendRecv, benchCollAlltoAll,
    benchCollGather, benchCollScatter;
const struct benchColl* benchCollByKey(const char* key);  /* "all_reduce" ...; NULL if unknown */

/* ---- args.c */
void benchOptsDefaults(struct benchOpts* o);
/* Parses argv; returns benchOk, or benchUsage after printing what was wrong (or the help). */
int benchParseArgs(struct benchOpts* o, int argc, char** argv, const struct benchColl* coll);
int benchParseSize(const char* text, size_t* out);
void benchUsageText(FILE* f, const char* prog);

/* ---- data.c */
size_t benchTypeSize(int type);
const char* benchTypeName(int type);
int benchTypeByName(const char* name);           /* -1 if unknown */
const char* benchOpName(int op);                 /* "sum" ... "mulsum", "none" for -1 */
int benchOpByName(const char* name);             /* -2 if unknown, -1 for "all" */
int benchOpValid(int type, int op);              /* 0 for combinations nccl-tests skips */
double benchGenValue(int type, int op, int rank, size_t idx, uint64_t seed, int nRanks);
void benchStore(int type, void* buf, size_t idx, double v);
double benchLoad(int type, const void* buf, size_t idx);
double benchMulsumScalar(int type, int rank);    /* the per-rank scalar of -o mulsum */
double benchReduceExpected(int type, int op, size_t idx, uint64_t seed, int nRanks);
void benchFillGen(void* buf, size_t n, int type, int op, int rank, size_t idx0, uint64_t seed,
                  int nRanks);
void benchFillReduced(void* buf, size_t n, int type, int op, size_t idx0, uint64_t seed,
                      int nRanks);
/* Elements of `got` that differ from `want` (a tolerance only for avg on floating types). */
/* Per-rank chunk of the split collectives, rounded down to 16 bytes (nccl-tests' rule). */
size_t benchChunk(size_t count, size_t eltSize, int nRanks);
int64_t benchCompare(const void* got, const void* want, size_t n, int type, int op, int nRanks);
double benchEncodeDecode(int type, double v);    /* v rounded through the type (selftest) */

/* ---- report.c: all printing happens on the first thread of process 0 */
void benchFmtFloat(char* out, int width, double v);
void benchPrintPreamble(const struct benchOpts* o, const char* prog, int libVersion);
void benchPrintTableHeader(const struct benchOpts* o);
void benchPrintRowStart(size_t bytes, size_t count, const char* type, const char* op, int root);
void benchPrintRowBody(const struct benchOpts* o, double usec, double algbw, double busbw,
                       int reportErrors, int64_t wrong, const double* iterStats);
void benchPrintRowEnd(const struct benchOpts* o);
void benchPrintFooter(const struct benchOpts* o, int errors, double avgBw, const char* prog);
void benchComputeBw(const struct benchColl* coll, size_t paramCount, size_t eltSize, double sec,
                    int nRanks, double* algbw, double* busbw);
void benchIterStats(const double* t, int n, double* stats4);  /* min, max, p99 (us), cv% */
void benchJsonRow(size_t bytes, size_t count, const char* type, const char* op, int root,
                  int inplace, double usec, double algbw, double busbw, int reportErrors,
                  int64_t wrong);
int benchJsonWrite(const char* path, const struct benchOpts* o, const char* prog, int errors,
                   double avgBw);

/* ---- ctrl.c: processes */
enum benchCtrlOp { benchCtrlSum = 0, benchCtrlMin = 1, benchCtrlMax = 2, benchCtrlFirst = 3 };
struct benchWorld {
  int nProcs;            /* processes */
  int proc;              /* this process */
  int localRank;         /* this process on its host */
  int mpi;               /* 1 when MPI carries the control plane */
  char host[64];         /* host name */
};
int benchCtrlInit(struct benchWorld* w, int* argc, char*** argv, int timeoutSec);
/* Reduces n doubles across processes (in place); every process gets the result. */
int benchCtrlAllreduce(double* v, int n, int op);
int benchCtrlBcast(void* buf, size_t len);                    /* from process 0 */
int benchCtrlGather(const void* mine, size_t len, void* all); /* to process 0 */
void benchCtrlFinalize(int failed);

/* ---- sync.c: threads of this process, then processes */
/* Sets how many threads take part in each round (call again when the thread count changes,
 * only while no round is in progress). */
void benchSyncInit(int nThreads, int timeoutSec);
/* Combines n values of every thread of every process; all get the result. n == 0: barrier. */
int benchSync(int thread, double* v, int n, int op);

/* ---- setup.c / runner.c / main.c */
struct benchThread;
int benchMain(int argc, char** argv, const struct benchColl* coll);
int benchSelftest(const struct benchColl* coll);

/* Hidden for the tools' own tests: MEND_PERF_PLANT_ERROR=1 corrupts one received element of
 * rank 0 after each checked call, so a test can see -c catch it. */
#define BENCH_PLANT_ENV "MEND_PERF_PLANT_ERROR"

#ifdef __cplusplus
}
#endif

#endif /* MEND_BENCH_H_ */
