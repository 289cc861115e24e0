/*
 * The executor interface.  A work is one program run by one rank on one channel, with its
 * arguments (buffers, window, chunk size, datatype, reduction) and the connectors its peer table
 * resolves to.  Executors (the host engine here, the CUDA kernel later) interpret programs; they
 * know nothing about algorithms, so a re-plan swaps programs without touching them.
 *
 * Ordering: works that share a connector run in the order they are given (plan order, which is
 * call order); works with disjoint connectors progress concurrently, so sends and receives to
 * different peers, and P2P next to collectives, never wait on each other.
 *
 * This header is plain C without atomics, so C++ tests include it.
 */
#ifndef MEND_DEVICE_ENGINE_H_
#define MEND_DEVICE_ENGINE_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "device/reduce.h"
#include "enqueue/program.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ncclComm;
struct mendConnector;

/* The operation a work belongs to, as its first slot on every connector carries it (the slot's last
 * MEND_OPSIG_BYTES, behind the data or alone in a slot of its own: opsig.h).  The receiver compares
 * it with its own, so ranks that run different operations fail with ncclInvalidUsage naming both
 * calls instead of mixing data.  magic 0: an unsigned work (built by hand in tests), no framing. */
struct mendOpSig {
  uint32_t magic;   /* MEND_OPSIG_MAGIC, or 0 */
  uint8_t func;     /* enum mendFunc; ncclSend and ncclRecv both MEND_FUNC_SENDRECV */
  uint8_t type;     /* ncclDataType_t; 0xff for send/recv (bytes are what must match) */
  uint8_t redKind;  /* enum mendRedKind of a reducing function, 0xff otherwise */
  uint8_t reserved; /* 0 */
  int32_t root;     /* root of Broadcast, Reduce, Gather, Scatter; -1 otherwise */
  uint32_t zero;    /* 0 */
  uint64_t opCount; /* collective sequence number (send/recv: when called; not compared with the peer's) */
  uint64_t count;   /* NCCL's count argument; bytes for send/recv */
};
#define MEND_OPSIG_MAGIC 0x4753504du /* "MPSG" */
#define MEND_OPSIG_BYTES 32           /* sizeof(struct mendOpSig) on the wire */

/* What a program runs on: everything the program itself leaves open. */
struct mendWorkArgs {
  void* buf[MEND_NBUFS];            /* base pointer of each enum mendBufId (NULL when unused) */
  size_t blockStride[MEND_NBUFS];   /* BLOCKED phases: elements between blocks (0: one block) */
  size_t offset;                    /* first element of this work's window in each block */
  size_t count;                     /* elements in the window */
  size_t chunkElems;                /* largest chunk, a multiple of alignElems that fits a slot */
  uint32_t alignElems;              /* chunk granularity (elements) for balanced last loops */
  uint32_t typeSize;                /* bytes per element */
  struct mendRedOp redop;           /* resolved reduction (ignored by programs that only copy) */
  struct mendOpSig sig;             /* the operation, carried with the first slot on each connector */
};

/* Position of a work in its program. */
struct mendWalk {
  int32_t phase;   /* current phase */
  int32_t step;    /* current step within steps[] */
  int32_t rep;     /* repetition of the current step */
  int32_t done;    /* 1 once every phase ran */
  uint64_t loopBase; /* first element of the current loop iteration in the window */
  uint64_t eff;    /* chunk (elements) of the current loop iteration */
};

/* Host-engine state of a work (zeroed by the planner); the walk itself is device/walk.h's. */
struct mendWorkState {
  struct mendWalk walk;            /* position in the program (shared walker) */
  int started;                     /* its connectors are free of earlier works */
  int deps[MEND_PROG_MAX_PEERS];   /* index of the earlier work that last used each connector, -1 */
  uint64_t steps;                  /* steps executed (stall reports, tests) */
  uint32_t sigDone;                /* bit i: the signature went (send) or was checked (recv) on conns[i] */
  int directWait;                  /* it posted a direct slot (transport/fifo.h): done only once read */
  uint64_t directTail[MEND_PROG_MAX_PEERS]; /* conns[i]'s tail after its last direct slot (0: none) */
};

struct mendWork {
  const struct mendProgram* prog;                   /* what to run */
  struct mendWorkArgs args;                         /* on what */
  struct ncclComm* comm;                            /* whose (bell, abort flag, errors) */
  int channel;                                      /* channel the connectors belong to */
  int opIndex;                                      /* index of the op in its plan (logs) */
  struct mendConnector* conns[MEND_PROG_MAX_PEERS]; /* prog->peers[i] resolved on `channel` */
  struct mendWorkState st;                          /* executor progress */
};

/* ---- executors ----
 * An executor runs the works of one plan per communicator (a batch).  The group code calls
 * comm->executor and never one executor by name.  Host executors (the host engine, and the CUDA
 * kernel's source built for the CPU) return when every work is done; the CUDA executor returns
 * once the works are enqueued on the batch's stream (NCCL's stream semantics). */
/* A copy made on the stream before a batch's kernel starts (device mode's staging of in-place
 * AlltoAll; host mode copies at planning time). */
struct mendStageCopy {
  const void* src;  /* from */
  void* dst;        /* to (a plan temporary) */
  size_t bytes;     /* how much */
};

struct mendExecBatch {
  const struct mendStageCopy* stages; /* copies to make before the works start (device mode) */
  int nStages;             /* how many */
  struct ncclComm* comm;   /* whose works */
  struct mendWork* works;  /* the plan's works, in plan order */
  int nWorks;              /* how many */
  void* stream;            /* cudaStream_t of the batch's operations (device mode), NULL in host mode */
  void* const* joins;      /* other streams the communicator's operations of the group named: the
                              launch waits for them, and they for the launch (NCCL's stream joining) */
  int nJoins;              /* how many */
};

#define MEND_MAX_JOIN_STREAMS 8 /* streams of one communicator in one group beyond the first */

struct mendExecutor {
  const char* name; /* "host", "kernel-cpu", "cuda" (logs, MEND_EXECUTOR) */
  /* Run (or enqueue) the batches; every batch's communicator uses this executor. */
  ncclResult_t (*run)(struct mendExecBatch* batches, int nBatches);
  /* Wait until nothing this executor started for comm still runs, at most timeoutMs (< 0: no bound
   * beyond a stall warning); 1 when idle.  Teardown frees connectors only after this. */
  int (*quiesce)(struct ncclComm* comm, int64_t timeoutMs);
  /* Release the executor's per-communicator state (after quiesce). */
  void (*release)(struct ncclComm* comm);
};
extern const struct mendExecutor mendExecHost, mendExecKernelCpu, mendExecCuda;

/* Pick comm->executor at init: "cuda" in device mode, else "host", or what MEND_EXECUTOR names
 * ("kernel-cpu" runs host-mode work through the kernel's source). */
ncclResult_t mendExecChoose(struct ncclComm* comm);
/* Device mode: the CUDA executor's per-communicator state (kernel, device state); needs comm->cuCtx. */
ncclResult_t mendCudaCommInit(struct ncclComm* comm);
/* Device memory for a plan being built (in-place AlltoAll's temporary), allocated in stream order
 * on `stream` (the operation's) and freed in stream order right after the plan's launch: no call
 * here waits for the device, where a plain cuMemFree would wait for every kernel on it, the
 * kernels of other ranks of the GPU that wait for this one included.  Under graph capture both
 * become nodes of the graph. */
ncclResult_t mendCudaScratch(struct ncclComm* comm, size_t bytes, void* stream, void** ptr);
/* An error a kernel recorded in comm->devState becomes comm's asynchronous error (WARNed once);
 * returns comm's asynchronous error state (ncclSuccess when none). */
ncclResult_t mendExecPollError(struct ncclComm* comm);

/* Run works to completion on host memory, from the calling thread, for every rank whose works
 * are listed (one thread can drive every rank of a process).  Waits spin for MEND_SPIN_US, then
 * sleep on a communicator's doorbell; every round checks abort flags and asynchronous errors.
 * Returns ncclSuccess when all are done, else the first error (aborted: ncclInternalError, or the
 * communicator's asynchronous error). */
ncclResult_t mendEngineRunHost(struct mendWork** works, int nWorks, struct ncclComm** comms, int nComms);

/* Oversubscribed waits (host_engine.c): whether the calling thread takes other programs' threads to
 * be competing for its CPU at time `now` (ns, mendTimeNs; it then spins MEND_SPIN_LOADED_US before
 * sleeping instead of MEND_SPIN_OVERSUB_US), fed with every yield of its spin (start, duration).
 * A thread's first look starts it loaded for 250 ms.  Per thread; the reset is for tests. */
int mendLoadWatchLoaded(uint64_t now);
void mendLoadWatchYield(uint64_t start, uint64_t took);
void mendLoadWatchReset(void);

/* Rounding helpers of the planner and of the program walker (walk.h): host and device. */
MEND_HD size_t mendDivUp(size_t a, size_t b) { return (a + b - 1) / b; }
MEND_HD size_t mendAlignUp(size_t a, size_t b) { return mendDivUp(a, b) * b; }

/* ---- loopback world (host_engine_loopback.c) ----
 * nRanks communicators in this process whose connectors are plain memory wired up at once, in host
 * mode: the planner, the generators and the engine run for real, with nothing else under them.
 * Tests use it to check every schedule for many rank counts from one thread.  Ring order on
 * channel c is a permutation that differs per channel; trees are left for the planner to derive. */
struct mendLoopback;
ncclResult_t mendLoopbackCreate(int nRanks, int nChannels, size_t buffSize, struct mendLoopback** lb);
struct ncclComm* mendLoopbackComm(struct mendLoopback* lb, int rank);
/* Ring positions of channel c (position -> rank), for tests. */
const int* mendLoopbackRing(struct mendLoopback* lb, int channel);
/* The FIFO from sender to receiver on (channel, connIndex), NULL until connected; for tests. */
struct mendFifo* mendLoopbackFifo(struct mendLoopback* lb, int channel, int connIndex, int sender, int receiver);
void mendLoopbackDestroy(struct mendLoopback* lb);

#ifdef __cplusplus
}
#endif

#endif
