/* The CUDA side of the perf tools: the memory mode, a GPU and a stream per rank, device buffers,
 * the copies that fill inputs and read results back for -c, waiting on streams, CUDA graphs.
 *
 * Built with MEND_PERF_CUDA (the build found nvcc: the CUDA runtime is linked statically) the
 * tools run in device mode when a GPU is found; without it, or with -M host, every rank stays in
 * host mode and nothing here touches CUDA (no context is ever created, so the library under test
 * runs in host mode too). Every CUDA call is checked; a failure ends the process with the call,
 * its place and CUDA's message. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "run.h"

#ifdef MEND_PERF_CUDA
#include <cuda_runtime.h>

#define BENCH_CUDA(call)                                                                            \
  do {                                                                                              \
    cudaError_t e_ = (call);                                                                        \
    if (e_ != cudaSuccess)                                                                          \
      benchFatal("Test CUDA failure %s:%d '%s' in %s", __FILE__, __LINE__, cudaGetErrorString(e_), \
                 #call);                                                                            \
  } while (0)

int benchGpuDecide(int mode, int* nDevs, char* why, size_t len) {
  *nDevs = 0;
  if (mode == benchMemHost) {
    snprintf(why, len, "-M host or MEND_PERF_MEMORY=host");
    return 0;
  }
  /* Before CUDA starts: the ranks (threads) of this process share the GPU's context, and their
   * streams must not share hardware queues (the driver's 8 by default), or two ranks can deadlock
   * (Mend's init WARNs about it; src/init_peers.c).  A value the user set stays. */
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  cudaError_t err = cudaGetDeviceCount(nDevs);
  if (err != cudaSuccess) *nDevs = 0;
  if (*nDevs > 0) {
    snprintf(why, len, "%d GPU(s) found; -M host for host buffers", *nDevs);
    return 1;
  }
  snprintf(why, len, "no usable GPU: cudaGetDeviceCount says '%s'",
           err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
  if (mode == benchMemDevice) benchFatal("-M device (or MEND_PERF_MEMORY=device) but %s", why);
  return 0;
}

void benchGpuUse(int dev) {
  BENCH_CUDA(cudaSetDevice(dev));
  BENCH_CUDA(cudaFree(NULL));  /* makes the device's primary context current on this thread now */
}

void benchGpuSetDevice(int dev) { BENCH_CUDA(cudaSetDevice(dev)); }

void benchGpuRankInit(struct benchRank* r, int streamNull) {
  benchGpuUse(r->cudaDev);
  r->stream = NULL;
  if (!streamNull) BENCH_CUDA(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
}

void benchGpuRankFree(struct benchRank* r) {
  benchGpuUse(r->cudaDev);
  if (r->stream) BENCH_CUDA(cudaStreamDestroy(r->stream));
  r->stream = NULL;
}

void* benchGpuAlloc(const struct benchRank* r, size_t bytes, int viaNccl) {
  void* p = NULL;
  benchGpuUse(r->cudaDev);
  if (viaNccl) BENCH_NCCL(ncclMemAlloc(&p, bytes));  /* -R 2: windows want the library's memory */
  else BENCH_CUDA(cudaMalloc(&p, bytes));
  BENCH_CUDA(cudaMemset(p, 0, bytes));
  BENCH_CUDA(cudaDeviceSynchronize());
  return p;
}

void benchGpuFree(const struct benchRank* r, void* p, int viaNccl) {
  if (!p) return;
  benchGpuUse(r->cudaDev);
  if (viaNccl) BENCH_NCCL(ncclMemFree(p));
  else BENCH_CUDA(cudaFree(p));
}

/* The copies run on the rank's stream, so they are ordered with its NCCL calls (cudaMemcpy and
 * cudaMemset on the legacy stream are not ordered with a non-blocking stream); each one waits. */
void benchGpuZero(const struct benchRank* r, void* dev, size_t bytes) {
  if (bytes == 0) return;
  BENCH_CUDA(cudaSetDevice(r->cudaDev));
  BENCH_CUDA(cudaMemsetAsync(dev, 0, bytes, r->stream));
  BENCH_CUDA(cudaStreamSynchronize(r->stream));
}

void benchGpuToDevice(const struct benchRank* r, void* dev, const void* host, size_t bytes) {
  if (bytes == 0) return;
  BENCH_CUDA(cudaSetDevice(r->cudaDev));
  BENCH_CUDA(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, r->stream));
  BENCH_CUDA(cudaStreamSynchronize(r->stream));
}

void benchGpuToHost(const struct benchRank* r, void* host, const void* dev, size_t bytes) {
  if (bytes == 0) return;
  BENCH_CUDA(cudaSetDevice(r->cudaDev));
  BENCH_CUDA(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, r->stream));
  BENCH_CUDA(cudaStreamSynchronize(r->stream));
}

/* Polls rather than blocks, as nccl-tests does, so that an error the library reports
 * asynchronously ends the run instead of hanging it. Once the -T watchdog starts aborting the
 * communicators, they are not touched again (it ends the process). */
void benchGpuWait(struct benchRank* ranks, int n) {
  for (int i = 0; i < n; i++) {
    struct benchRank* r = &ranks[i];
    for (unsigned spin = 0;; spin++) {
      cudaError_t err = cudaStreamQuery(r->stream);
      if (err == cudaSuccess) break;
      if (err != cudaErrorNotReady) BENCH_CUDA(err);
      if (atomic_load(&benchP.aborting)) {
        pause();
        continue;
      }
      if (spin % 64 == 63) {
        ncclResult_t state = ncclSuccess;
        BENCH_NCCL(ncclCommGetAsyncError(r->comm, &state));
        if (state != ncclSuccess && state != ncclInProgress) benchFatalNccl(__FILE__, __LINE__, state, r->comm);
        sched_yield();
      }
    }
  }
}

void benchGpuDescribe(int dev, char* out, size_t len) {
  struct cudaDeviceProp p;
  BENCH_CUDA(cudaGetDeviceProperties(&p, dev));
  snprintf(out, len, "[%04x:%02x:%02x] %s", p.pciDomainID, p.pciBusID, p.pciDeviceID, p.name);
}

/* The -M 1 line: what this process's GPU has left. */
void benchGpuMemInfo(int dev, size_t* freeBytes, size_t* totalBytes) {
  benchGpuUse(dev);
  BENCH_CUDA(cudaMemGetInfo(freeBytes, totalBytes));
}

/* -G: the thread's ranks record their calls into one graph per stream (thread-local capture,
 * so other threads' CUDA calls do not break it), which is then replayed. */
void benchGpuCaptureBegin(struct benchRank* ranks, int n) {
  for (int i = 0; i < n; i++)
    BENCH_CUDA(cudaStreamBeginCapture(ranks[i].stream, cudaStreamCaptureModeThreadLocal));
}

/* Every capture of the thread ends before the first graph is instantiated: instantiating is not
 * allowed while this thread still captures another stream. */
void benchGpuCaptureEnd(struct benchRank* ranks, int n) {
  for (int i = 0; i < n; i++) {
    cudaGraph_t graph = NULL;
    BENCH_CUDA(cudaStreamEndCapture(ranks[i].stream, &graph));
    ranks[i].graph = graph;
  }
  for (int i = 0; i < n; i++) {
    cudaGraph_t graph = (cudaGraph_t)ranks[i].graph;
    cudaGraphExec_t exec = NULL;
    BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    BENCH_CUDA(cudaGraphDestroy(graph));
    ranks[i].graph = exec;
  }
}

void benchGpuGraphLaunch(struct benchRank* r) {
  BENCH_CUDA(cudaGraphLaunch((cudaGraphExec_t)r->graph, r->stream));
}

void benchGpuGraphFree(struct benchRank* r) {
  if (r->graph) BENCH_CUDA(cudaGraphExecDestroy((cudaGraphExec_t)r->graph));
  r->graph = NULL;
}

#else /* host-only build: no GPU can be selected, so nothing below is reached in device mode */

int benchGpuDecide(int mode, int* nDevs, char* why, size_t len) {
  *nDevs = 0;
  snprintf(why, len, mode == benchMemHost ? "-M host or MEND_PERF_MEMORY=host"
                                          : "built without CUDA (no nvcc at build time)");
  if (mode == benchMemDevice)
    benchFatal("-M device (or MEND_PERF_MEMORY=device): these tools were built without CUDA (no nvcc "
               "at build time; set CUDA_HOME and rebuild)");
  return 0;
}

static void noCuda(void) { benchFatal("internal error: a CUDA call in a build without CUDA"); }
void benchGpuUse(int dev) { (void)dev, noCuda(); }
void benchGpuSetDevice(int dev) { (void)dev, noCuda(); }
void benchGpuRankInit(struct benchRank* r, int streamNull) { (void)r, (void)streamNull, noCuda(); }
void benchGpuRankFree(struct benchRank* r) { (void)r; }
void* benchGpuAlloc(const struct benchRank* r, size_t bytes, int viaNccl) {
  (void)r, (void)bytes, (void)viaNccl, noCuda();
  return NULL;
}
void benchGpuFree(const struct benchRank* r, void* p, int viaNccl) { (void)r, (void)p, (void)viaNccl; }
void benchGpuZero(const struct benchRank* r, void* dev, size_t bytes) { (void)r, (void)dev, (void)bytes, noCuda(); }
void benchGpuToDevice(const struct benchRank* r, void* dev, const void* host, size_t bytes) {
  (void)r, (void)dev, (void)host, (void)bytes, noCuda();
}
void benchGpuToHost(const struct benchRank* r, void* host, const void* dev, size_t bytes) {
  (void)r, (void)host, (void)dev, (void)bytes, noCuda();
}
void benchGpuWait(struct benchRank* ranks, int n) { (void)ranks, (void)n; }
void benchGpuDescribe(int dev, char* out, size_t len) { snprintf(out, len, "[gpu %d]", dev); }
void benchGpuMemInfo(int dev, size_t* freeBytes, size_t* totalBytes) {
  (void)dev;
  *freeBytes = *totalBytes = 0;
}
void benchGpuCaptureBegin(struct benchRank* ranks, int n) { (void)ranks, (void)n, noCuda(); }
void benchGpuCaptureEnd(struct benchRank* ranks, int n) { (void)ranks, (void)n, noCuda(); }
void benchGpuGraphLaunch(struct benchRank* r) { (void)r, noCuda(); }
void benchGpuGraphFree(struct benchRank* r) { (void)r; }

#endif
