/*
 * What the CUDA kernel reads: plain C structs, the same layout for the host code that builds a
 * launch (exec_cuda.c), the kernel under nvcc (kernel.cu) and the kernel source compiled for the
 * CPU (the kernel-cpu executor).  No C11 atomics, no host-only types.
 *
 * A launch runs the works of one communicator's plan.  Works are grouped into lanes: the works
 * that share a connector (directly or through a chain of works) form one lane, in plan order, and
 * one CTA runs one lane from first to last.  Lanes share no connector, so CTAs never wait on each
 * other except through the FIFOs, exactly as the host engine runs works: ordered where they share
 * a connector, concurrent otherwise.
 */
#ifndef MEND_DEVICE_KERNEL_H_
#define MEND_DEVICE_KERNEL_H_

#include <stdint.h>

#include "device/engine.h"
#include "transport/fifo.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MEND_KERNEL_NAME "mendKernel"
#define MEND_KERNEL_MAX_THREADS 512   /* threads per CTA at most (NCCL_NTHREADS) */
#define MEND_KERNEL_MAX_GROUPS 8      /* lanes one CTA runs side by side at most (named barriers 1..8) */

/* One connector as the kernel addresses it. */
struct mendDevConn {
  struct mendFifo* fifo;   /* FIFO counters (device memory, or mapped pinned host memory) */
  char* buff;              /* slot memory, same */
  uint64_t slotBytes;      /* bytes per slot */
  int32_t nSlots;          /* slots (MEND_FIFO_SLOTS) */
  int32_t peer;            /* remote rank (error reports) */
};

/* One work: a program, its arguments, its connectors. */
struct mendDevWork {
  const struct mendProgram* prog;                 /* the program (in the launch buffer) */
  struct mendWorkArgs args;                       /* buffers, window, chunk, type, reduction */
  struct mendDevConn conns[MEND_PROG_MAX_PEERS];  /* prog->peers[i] resolved */
  int32_t channel;                                /* channel (error reports) */
  int32_t opIndex;                                /* op of the plan (error reports) */
};

/* Per-communicator state shared by the host and its kernels (mapped pinned host memory). */
struct mendDevState {
  volatile int32_t abortFlag; /* set by ncclCommAbort / revoke: every kernel leaves its waits */
  volatile int32_t error;     /* first error a kernel met (ncclResult_t), 0 while none */
  volatile int32_t errLane;   /* where: lane and work index, peer, expected and received bytes */
  volatile int32_t errWork;
  volatile int32_t errPeer;
  volatile int32_t reported; /* host side: the error was WARNed and made asynchronous */
  volatile uint64_t errWant;
  volatile uint64_t errGot;
  volatile int32_t errSig;     /* 1: the operation signatures differ (errSigMine/errSigPeer), 0: byte counts */
  volatile int32_t errChannel; /* channel of the failed work */
  volatile uint64_t errSigMine[MEND_OPSIG_BYTES / 8]; /* this rank's signature (struct mendOpSig) */
  volatile uint64_t errSigPeer[MEND_OPSIG_BYTES / 8]; /* what the peer's first slot held (magic 0: none) */
};

/* The kernel's one parameter. */
struct mendDevLaunch {
  const struct mendDevWork* works; /* all works, lane after lane */
  const uint32_t* laneStart;       /* [nLanes + 1]: lane l runs works[laneStart[l] .. laneStart[l+1]) */
  struct mendDevState* state;      /* the communicator's shared state */
  uint32_t nLanes;                 /* CTAs of the launch */
  uint32_t abortSpins;             /* FIFO polls between two looks at abortFlag/error */
  int32_t rank;                    /* this rank (error reports) */
  uint32_t lanesPerCta;            /* lanes a CTA runs side by side, each with blockDim / lanesPerCta
                                      threads (rounded down to warps); 1 normally, more when the lanes
                                      outnumber the CTAs this rank may keep resident */
};

/* The kernel source built for the CPU (kernel.cu without nvcc): run every lane of `n` launches
 * (one per communicator, all at once: ranks wait on each other) with `threadsPerCta` threads per
 * lane, as fibers of `workers` OS threads (a thread that waits yields to the next fiber), or with
 * workers 0 (and in sanitizer builds) each an OS thread of its own; returns when every lane
 * finished or left on an error (then its state->error is set).  Host memory only. */
void mendKernelCpuRun(const struct mendDevLaunch* launches, int n, int threadsPerCta, int workers);

#ifdef __cplusplus
}
#endif

#endif
