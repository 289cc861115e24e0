/*
 * The CUDA executor: launches the kernel (kernel.cu, embedded as a fatbin and loaded through the
 * driver API) on the operations' stream, one CTA per lane.  ncclGroupEnd returns once the launch
 * is enqueued; the work completes in stream order, under CUDA graph capture too: the launch
 * carries everything by value except its descriptor buffer, which lives in pinned host memory
 * until the kernel is known to be done (an event) or, when captured into a graph, until the
 * communicator is destroyed (a graph must not outlive its communicator, as with NCCL).
 * Errors a kernel meets go to the communicator's device state and surface through
 * ncclCommGetAsyncError and the next call.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checks.h"
#include "comm.h"
#include "device/engine.h"
#include "device/kernel.h"
#include "device/launch.h"
#include "misc/cudrv.h"
#include "misc/param.h"
#include "misc/utils.h"

#define MAX_DEVICES 64
#define BLOCK_BYTES 65536 /* one pooled descriptor buffer (about 60 works) */

/* The kernel image, written by the build (gen/device/kernel_fatbin.c); size 0 without nvcc. */
extern const unsigned char mendKernelFatbin[];
extern const size_t mendKernelFatbinSize;

struct bufHome;

/* One descriptor buffer (pinned, device-mapped) and the event that tells its kernel is done. */
struct launchBuf {
  struct bufHome* home;   /* where a captured buffer returns when its graph is destroyed */
  char* host;             /* the buffer (its device address is the same, UVA) */
  size_t cap;             /* bytes */
  CUevent done;           /* recorded after the launch (not under capture) */
  int inArena;            /* carved from the communicator's arena (freed with it) */
  struct launchBuf* next; /* list link */
};

/* Buffers held by CUDA graphs come back here when the graph is destroyed (a user-object destructor,
 * run by CUDA on its own thread, which must not call CUDA: it only moves the buffer).  The home
 * outlives the communicator while graphs still hold its buffers. */
struct bufHome {
  pthread_mutex_t lock;      /* returned, refs, dead */
  struct launchBuf* returned; /* given back by destroyed graphs, not yet in the pool */
  int refs;                  /* the communicator + one per buffer a graph holds */
  int dead;                  /* the communicator is gone: free what comes back */
};

struct mendCudaComm {
  struct bufHome* home;   /* captured buffers' way back */
  CUfunction fn;          /* the kernel in this device's module */
  int nThreads;           /* threads per CTA */
  pthread_mutex_t lock;   /* the lists below */
  struct launchBuf* live; /* launched, not yet known done */
  struct launchBuf* kept; /* captured into a graph: kept until destroy */
  struct launchBuf* pool; /* done, reusable */
  void** scratch;         /* temporaries of the plan being built (stream-ordered), freed after its launch */
  int nScratch;           /* how many */
  char* arena;            /* pinned memory of the pre-made buffers (CUDA refuses allocations while a
                             stream captures, so a graph's launches take these) */
  CUevent joinEv[MEND_MAX_JOIN_STREAMS]; /* recorded on a group's other streams, waited for by the launch */
  CUevent afterEv;        /* recorded after a launch, waited for by the group's other streams */
  CUevent lastDone;       /* the last launch (not captured): a launch on another stream waits for it */
  CUstream lastStream;    /* its stream */
};

static pthread_mutex_t moduleLock = PTHREAD_MUTEX_INITIALIZER;
static CUfunction moduleFn[MAX_DEVICES]; /* the kernel per device (primary contexts live as long as the process) */

static ncclResult_t loadKernel(int dev, CUfunction* fn) {
  ncclResult_t res = ncclSuccess;
  if (dev < 0 || dev >= MAX_DEVICES) {
    WARN("CUDA: device %d is beyond the %d devices Mend supports per process", dev, MAX_DEVICES);
    return ncclInvalidUsage;
  }
  if (mendKernelFatbinSize == 0) {
    WARN("CUDA: this build of Mend has no CUDA kernels (built without nvcc); device buffers are not supported");
    return ncclInvalidUsage;
  }
  pthread_mutex_lock(&moduleLock);
  if (moduleFn[dev] == NULL) {
    CUmodule mod = NULL;
    CUfunction f = NULL;
    MENDCHECKGOTO(mendCuCheck(mendCu.cuModuleLoadData(&mod, mendKernelFatbin), "cuModuleLoadData", __FILE__, __LINE__),
                  res, unlock);
    MENDCHECKGOTO(mendCuCheck(mendCu.cuModuleGetFunction(&f, mod, MEND_KERNEL_NAME), "cuModuleGetFunction", __FILE__,
                              __LINE__), res, unlock);
    int regs = 0, local = 0;
    mendCu.cuFuncGetAttribute(&regs, MEND_CU_FUNC_ATTRIBUTE_NUM_REGS, f);
    mendCu.cuFuncGetAttribute(&local, MEND_CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f);
    INFO(NCCL_INIT, "CUDA: kernel loaded on device %d (%d registers, %d bytes local memory per thread)", dev, regs,
         local);
    moduleFn[dev] = f;
  }
  *fn = moduleFn[dev];
unlock:
  pthread_mutex_unlock(&moduleLock);
  return res;
}

static int threadsPerCta(void) {
  int64_t t = mendParamNthreads();
  if (t == -2) return MEND_KERNEL_MAX_THREADS;
  if (t < 64 || t > MEND_KERNEL_MAX_THREADS || t % 32 != 0) {
    WARN("NCCL_NTHREADS=%lld: expected a multiple of 32 in [64, %d]; using %d", (long long)t, MEND_KERNEL_MAX_THREADS,
         MEND_KERNEL_MAX_THREADS);
    return MEND_KERNEL_MAX_THREADS;
  }
  return (int)t;
}

/* The pre-made buffers: MEND_GRAPH_LAUNCHES blocks of BLOCK_BYTES in one pinned allocation. */
static ncclResult_t makeArena(struct mendCudaComm* cc) {
  int64_t n = mendParamGraphLaunches();
  if (n < 1) n = 1;
  MENDCHECK(mendCuHostAlloc((size_t)n * BLOCK_BYTES, (void**)&cc->arena));
  for (int64_t i = 0; i < n; i++) {
    struct launchBuf* b;
    MENDCHECK(MENDCALLOC(b, 1));
    b->host = cc->arena + (size_t)i * BLOCK_BYTES;
    b->cap = BLOCK_BYTES;
    b->inArena = 1;
    CUCHECK(cuEventCreate(&b->done, MEND_CU_EVENT_DISABLE_TIMING));
    b->next = cc->pool;
    cc->pool = b;
  }
  return ncclSuccess;
}

ncclResult_t mendCudaCommInit(struct ncclComm* comm) {
  struct mendCudaComm* cc;
  MENDCHECK(mendCuEnter(comm->cuCtx));
  MENDCHECK(MENDCALLOC(cc, 1));
  pthread_mutex_init(&cc->lock, NULL);
  comm->cuda = cc;
  cc->nThreads = threadsPerCta();
  MENDCHECK(loadKernel(comm->cudaDev, &cc->fn));
  MENDCHECK(MENDCALLOC(cc->home, 1));
  pthread_mutex_init(&cc->home->lock, NULL);
  cc->home->refs = 1;
  MENDCHECK(makeArena(cc));
  for (int i = 0; i < MEND_MAX_JOIN_STREAMS; i++) CUCHECK(cuEventCreate(&cc->joinEv[i], MEND_CU_EVENT_DISABLE_TIMING));
  CUCHECK(cuEventCreate(&cc->afterEv, MEND_CU_EVENT_DISABLE_TIMING));
  void* st = NULL;
  MENDCHECK(mendCuHostAlloc(sizeof(struct mendDevState), &st));
  comm->devState = st;
  comm->devState->abortFlag = mendCommAborted(comm);
  INFO(NCCL_INIT, "Rank %d: cuda executor on device %d, %d threads per CTA", comm->rank, comm->cudaDev, cc->nThreads);
  return ncclSuccess;
}

/* The temporaries of the plan just launched (or abandoned), freed in stream order after it. */
static void freeScratchAfter(struct mendCudaComm* cc, CUstream stream) {
  for (int i = 0; i < cc->nScratch; i++)
    mendCuCheck(mendCu.cuMemFreeAsync((CUdeviceptr)(uintptr_t)cc->scratch[i], stream), "cuMemFreeAsync", __FILE__,
                __LINE__);
  cc->nScratch = 0;
}

static void homeDrop(struct bufHome* h) {
  int last = --h->refs == 0;
  pthread_mutex_unlock(&h->lock);
  if (last) {
    pthread_mutex_destroy(&h->lock);
    free(h);
  }
}

/* CUDA destroyed a graph that held buffer p. */
static void bufReturned(void* p) {
  struct launchBuf* b = p;
  struct bufHome* h = b->home;
  pthread_mutex_lock(&h->lock);
  if (h->dead) {
    free(b); /* its pinned memory went with the communicator (a graph must not outlive it) */
  } else {
    b->next = h->returned;
    h->returned = b;
  }
  homeDrop(h);
}

/* Hand buffer b to the graph stream s is capturing; it comes back when the graph is destroyed. */
static ncclResult_t giveToGraph(struct mendCudaComm* cc, CUstream s, struct launchBuf* b) {
  int status = 0;
  uint64_t id = 0;
  CUgraph graph = NULL;
  const CUgraphNode* deps = NULL;
  size_t nDeps = 0;
  CUuserObject obj = NULL;
  CUCHECK(cuStreamGetCaptureInfo(s, &status, &id, &graph, &deps, &nDeps));
  b->home = cc->home;
  CUCHECK(cuUserObjectCreate(&obj, b, bufReturned, 1, MEND_CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  pthread_mutex_lock(&cc->home->lock);
  cc->home->refs++;
  pthread_mutex_unlock(&cc->home->lock);
  CUCHECK(cuGraphRetainUserObject(graph, obj, 1, MEND_CU_GRAPH_USER_OBJECT_MOVE));
  return ncclSuccess;
}

/* Buffers of destroyed graphs go back to the pool. */
static void takeReturned(struct mendCudaComm* cc) {
  pthread_mutex_lock(&cc->home->lock);
  struct launchBuf* b = cc->home->returned;
  cc->home->returned = NULL;
  pthread_mutex_unlock(&cc->home->lock);
  while (b) {
    struct launchBuf* next = b->next;
    b->next = cc->pool;
    cc->pool = b;
    b = next;
  }
}

/* Move the buffers whose kernel finished from live to the pool; returns how many are still live. */
static int reclaim(struct mendCudaComm* cc) {
  int left = 0;
  for (struct launchBuf** p = &cc->live; *p;) {
    struct launchBuf* b = *p;
    if (mendCu.cuEventQuery(b->done) == MEND_CU_SUCCESS) {
      *p = b->next;
      b->next = cc->pool;
      cc->pool = b;
    } else {
      left++;
      p = &b->next;
    }
  }
  return left;
}

ncclResult_t mendCudaScratch(struct ncclComm* comm, size_t bytes, void* stream, void** ptr) {
  struct mendCudaComm* cc = comm->cuda;
  CUdeviceptr p = 0;
  *ptr = NULL;
  MENDCHECK(mendCuEnter(comm->cuCtx));
  void** grown = realloc(cc->scratch, sizeof(void*) * (size_t)(cc->nScratch + 1));
  if (grown == NULL) {
    WARN("CUDA: out of memory for a scratch list");
    return ncclSystemError;
  }
  cc->scratch = grown;
  CUCHECK(cuMemAllocAsync(&p, bytes ? bytes : 1, (CUstream)stream));
  *ptr = (void*)(uintptr_t)p;
  cc->scratch[cc->nScratch++] = *ptr;
  return ncclSuccess;
}

static ncclResult_t getBuf(struct mendCudaComm* cc, size_t bytes, int capture, struct launchBuf** out) {
  for (struct launchBuf** p = &cc->pool; *p; p = &(*p)->next) {
    if ((*p)->cap < bytes) continue;
    *out = *p;
    *p = (*p)->next;
    return ncclSuccess;
  }
  if (capture) {
    WARN("CUDA graph capture: no launch buffer of %zu bytes left (%lld made at init, %d KiB each, are held by "
         "captured graphs); raise MEND_GRAPH_LAUNCHES", bytes, (long long)mendParamGraphLaunches(), BLOCK_BYTES >> 10);
    return ncclInvalidUsage;
  }
  struct launchBuf* b;
  MENDCHECK(MENDCALLOC(b, 1));
  b->cap = bytes < 65536 ? 65536 : bytes;
  ncclResult_t res = mendCuHostAlloc(b->cap, (void**)&b->host);
  if (res == ncclSuccess) res = mendCuCheck(mendCu.cuEventCreate(&b->done, MEND_CU_EVENT_DISABLE_TIMING),
                                            "cuEventCreate", __FILE__, __LINE__);
  if (res != ncclSuccess) {
    mendCuHostFree(b->host);
    free(b);
    return res;
  }
  *out = b;
  return ncclSuccess;
}

static void freeBufs(struct launchBuf* b) {
  while (b) {
    struct launchBuf* next = b->next;
    if (b->done) mendCu.cuEventDestroy(b->done);
    if (!b->inArena) mendCuHostFree(b->host);
    free(b);
    b = next;
  }
}

/* Lanes per CTA.  Every CTA of every rank on a GPU must be resident at once (they wait on each
 * other), so a rank keeps to comm->nChannels CTAs (its share of the GPU, graph/channels.c): more
 * lanes than that share CTAs, each with a group of warps, up to MEND_KERNEL_MAX_GROUPS per CTA. */
static uint32_t lanesPerCta(struct ncclComm* comm, uint32_t nLanes, int nThreads) {
  uint32_t budget = comm->nChannels > 0 ? (uint32_t)comm->nChannels : 1;
  uint32_t per = (nLanes + budget - 1) / budget, most = (uint32_t)nThreads / 32;
  if (most > MEND_KERNEL_MAX_GROUPS) most = MEND_KERNEL_MAX_GROUPS;
  if (per > most) {
    INFO_SPARSE(NCCL_COLL, 10000, "Rank %d: %u lanes in one launch exceed %u CTAs x %u lanes; the CTAs must all be "
                "resident at once", comm->rank, nLanes, budget, most);
    per = most;
  }
  return per < 1 ? 1 : per;
}

/* Stream order as NCCL keeps it: the launch waits for the group's other streams and for this
 * communicator's previous launch when that went to another stream (operations of one
 * communicator run in the order they were issued, whatever their streams). */
static ncclResult_t joinBefore(struct mendCudaComm* cc, const struct mendExecBatch* bt, CUstream stream, int capture) {
  for (int i = 0; i < bt->nJoins; i++) {
    CUCHECK(cuEventRecord(cc->joinEv[i], (CUstream)bt->joins[i]));
    CUCHECK(cuStreamWaitEvent(stream, cc->joinEv[i], 0));
  }
  if (!capture && cc->lastDone && cc->lastStream != stream) CUCHECK(cuStreamWaitEvent(stream, cc->lastDone, 0));
  return ncclSuccess;
}

/* The group's other streams wait for the launch. */
static ncclResult_t joinAfter(struct mendCudaComm* cc, const struct mendExecBatch* bt, CUstream stream) {
  if (bt->nJoins == 0) return ncclSuccess;
  CUCHECK(cuEventRecord(cc->afterEv, stream));
  for (int i = 0; i < bt->nJoins; i++) CUCHECK(cuStreamWaitEvent((CUstream)bt->joins[i], cc->afterEv, 0));
  return ncclSuccess;
}

/* Launch one communicator's works on its stream. */
static ncclResult_t launchBatch(struct mendExecBatch* bt) {
  struct ncclComm* comm = bt->comm;
  struct mendCudaComm* cc = comm->cuda;
  ncclResult_t res;
  MENDCHECK(mendExecPollError(comm));
  MENDCHECK(mendCuEnter(comm->cuCtx));
  CUstream stream = (CUstream)bt->stream;
  int capture = MEND_CU_STREAM_CAPTURE_STATUS_NONE;
  CUCHECK(cuStreamIsCapturing(stream, &capture));
  pthread_mutex_lock(&cc->lock);
  struct launchBuf* b = NULL;
  if (!capture) {
    takeReturned(cc);
    reclaim(cc); /* event queries are not allowed while a stream captures */
  }
  MENDCHECKGOTO(getBuf(cc, mendLaunchBytes(bt->works, bt->nWorks), capture, &b), res, unlock);
  struct mendDevLaunch launch;
  MENDCHECKGOTO(mendLaunchBuild(bt->works, bt->nWorks, 1, b->host, (uintptr_t)b->host, &launch), res, fail_buf);
  launch.state = comm->devState;
  launch.abortSpins = (uint32_t)mendParamKernelAbortPollSpins();
  launch.rank = comm->rank;
  launch.lanesPerCta = lanesPerCta(comm, launch.nLanes, cc->nThreads);
  unsigned grid = (launch.nLanes + launch.lanesPerCta - 1) / launch.lanesPerCta;
  MENDCHECKGOTO(joinBefore(cc, bt, stream, capture != MEND_CU_STREAM_CAPTURE_STATUS_NONE), res, fail_buf);
  for (int i = 0; i < bt->nStages; i++) { /* stream order: the copies finish before the kernel starts */
    const struct mendStageCopy* c = bt->stages + i;
    MENDCHECKGOTO(mendCuCheck(mendCu.cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)c->dst, (CUdeviceptr)(uintptr_t)c->src,
                                                       c->bytes, stream), "cuMemcpyDtoDAsync", __FILE__, __LINE__),
                  res, fail_buf);
  }
  void* params[] = {&launch};
  MENDCHECKGOTO(mendCuCheck(mendCu.cuLaunchKernel(cc->fn, grid, 1, 1, (unsigned)cc->nThreads, 1, 1, 0, stream,
                                                  params, NULL), "cuLaunchKernel", __FILE__, __LINE__), res, fail_buf);
  freeScratchAfter(cc, stream); /* in stream order after the kernel (a node of the graph under capture) */
  if (capture != MEND_CU_STREAM_CAPTURE_STATUS_NONE) {
    /* The graph replays this launch: the descriptor stays until the graph goes. */
    res = giveToGraph(cc, stream, b);
    if (res != ncclSuccess) {
      b->next = cc->kept; /* kept until the communicator is destroyed */
      cc->kept = b;
    }
  } else {
    res = mendCuCheck(mendCu.cuEventRecord(b->done, stream), "cuEventRecord", __FILE__, __LINE__);
    b->next = cc->live; /* on failure too: the kernel was launched and may still read it */
    cc->live = b;
    cc->lastDone = b->done;
    cc->lastStream = stream;
  }
  if (res == ncclSuccess) res = joinAfter(cc, bt, stream);
  TRACE(NCCL_COLL, "Rank %d: launched %u lanes on %u CTAs x %d threads (%d works) on stream %p%s", comm->rank,
        launch.nLanes, grid, cc->nThreads, bt->nWorks, (void*)stream, capture ? " (captured)" : "");
  goto unlock;
fail_buf:
  b->next = cc->pool;
  cc->pool = b;
  freeScratchAfter(cc, stream); /* after whatever of the launch was queued */
unlock:
  pthread_mutex_unlock(&cc->lock);
  return res;
}

static ncclResult_t cudaRun(struct mendExecBatch* batches, int nBatches) {
  for (int i = 0; i < nBatches; i++) {
    if (batches[i].nWorks == 0) continue; /* stages only come with works */
    ncclResult_t res = launchBatch(batches + i);
    if (res != ncclSuccess) {
      mendCommSetAsyncError(batches[i].comm, res);
      return res;
    }
  }
  return ncclSuccess;
}

static int cudaQuiesce(struct ncclComm* comm, int64_t timeoutMs) {
  struct mendCudaComm* cc = comm->cuda;
  if (cc == NULL) return 1;
  if (mendCuEnter(comm->cuCtx) != ncclSuccess) return 0;
  int64_t start = mendTimeMs();
  int64_t warnAt = start + 10000;
  for (;;) {
    pthread_mutex_lock(&cc->lock);
    int left = reclaim(cc);
    pthread_mutex_unlock(&cc->lock);
    if (left == 0) return 1;
    int64_t now = mendTimeMs();
    if (timeoutMs >= 0 && now - start >= timeoutMs) return 0;
    if (now >= warnAt) {
      WARN("Rank %d: %d kernel launch(es) still running after %lld ms (waiting for their stream)", comm->rank, left,
           (long long)(now - start));
      warnAt = now + 10000;
    }
    usleep(200);
  }
}

static void cudaRelease(struct ncclComm* comm) {
  struct mendCudaComm* cc = comm->cuda;
  int running = cc && cc->live;
  if (cc) {
    mendCuEnter(comm->cuCtx);
    if (cc->home) takeReturned(cc);
    freeBufs(cc->pool);
    freeBufs(cc->kept);
    /* Temporaries of a plan that failed before its launch (nothing used them): freed in order on
     * the legacy stream, which never blocks this thread (cuMemFree would wait for the device). */
    for (int i = 0; i < cc->nScratch; i++) mendCu.cuMemFreeAsync((CUdeviceptr)(uintptr_t)cc->scratch[i], NULL);
    free(cc->scratch);
    for (int i = 0; i < MEND_MAX_JOIN_STREAMS; i++)
      if (cc->joinEv[i]) mendCu.cuEventDestroy(cc->joinEv[i]);
    if (cc->afterEv) mendCu.cuEventDestroy(cc->afterEv);
    if (!running) mendCuHostFree(cc->arena); /* else a kernel that did not stop may still read it */
    if (cc->home) {
      pthread_mutex_lock(&cc->home->lock);
      cc->home->dead = 1; /* buffers still held by graphs are freed when they come back */
      homeDrop(cc->home);
    }
    /* Live buffers remain only when a kernel did not stop: leaking them is safer than freeing them. */
    if (cc->live) WARN("Rank %d: leaving %s kernel's launch memory allocated", comm->rank, "a running");
    pthread_mutex_destroy(&cc->lock);
    free(cc);
    comm->cuda = NULL;
  }
  if (comm->devState) {
    if (!running) mendCuHostFree(comm->devState);
    comm->devState = NULL;
  }
}

const struct mendExecutor mendExecCuda = {
  .name = "cuda",
  .run = cudaRun,
  .quiesce = cudaQuiesce,
  .release = cudaRelease,
};
