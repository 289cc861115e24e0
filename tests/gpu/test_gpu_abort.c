/*
 * Failures on the GPU path end in bounded time and with a clear error, never a hang or a crash.
 * Each scenario runs in a child process (this program re-executed with --child) so that the parent
 * can check that the child also EXITS cleanly and in time.
 *
 * inflight: 2 ranks as threads on one GPU.  After a warm-up AllReduce, rank 0 enqueues an
 *   AllReduce that rank 1 never joins, so its kernel waits.  200 ms later the stream must still be
 *   busy; rank 0 calls ncclCommAbort, which must return within 2 s, and its stream must then be idle
 *   within 2 s (cudaStreamQuery polled against a deadline).  Rank 1 aborts too (2 s).  Then the
 *   CUDA context still works and a new 2-rank communicator runs an AllReduce correctly.
 * args: a device pointer given to a host-mode communicator (made on a thread with no current CUDA
 *   context) and a pageable malloc() pointer given to a device-mode communicator must return
 *   ncclInvalidArgument with a WARN (in NCCL_DEBUG_FILE and ncclGetLastError); each communicator
 *   still works afterwards.
 *
 * Exit 77 when no CUDA device is usable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_util.h"
#include "mp_util.h"

#define BOUND_S 2.0
#define COUNT (1 << 20)

/* ---------------------------------------------------------------- inflight */

struct aRank {
  int rank;               /* 0 or 1 */
  ncclUniqueId id, id2;   /* first communicator, the one made after the abort */
  struct gpuTally* tally; /* step barrier and result lines */
  ncclComm_t comm;        /* device-mode communicator */
  cudaStream_t stream;    /* its stream */
  float *dBuf, *hBuf;     /* COUNT floats: device, pinned host */
  struct gpuErr err;      /* first failure */
};

/* AllReduce of ones on this rank's buffer, waited for and checked (== 2). */
static int allReduceOnes(struct aRank* a, ncclComm_t comm) {
  for (int i = 0; i < COUNT; i++) a->hBuf[i] = 1;
  GCUDA(&a->err, cudaMemcpyAsync(a->dBuf, a->hBuf, COUNT * sizeof(float), cudaMemcpyHostToDevice, a->stream));
  GNCCL(&a->err, ncclAllReduce(a->dBuf, a->dBuf, COUNT, ncclFloat32, ncclSum, comm, a->stream));
  GCUDA(&a->err, cudaMemcpyAsync(a->hBuf, a->dBuf, COUNT * sizeof(float), cudaMemcpyDeviceToHost, a->stream));
  if (!gpuWaitStream(a->stream, 60, &a->err)) return 0;
  for (int i = 0; i < COUNT; i++)
    if (a->hBuf[i] != 2) return gpuErrSet(&a->err, "AllReduce [%d] = %g, want 2", i, a->hBuf[i]);
  return 1;
}

static int setupRank(struct aRank* a) {
  if (!gpuUseDevice(&a->err)) return 0;
  GCUDA(&a->err, cudaStreamCreateWithFlags(&a->stream, cudaStreamNonBlocking));
  GCUDA(&a->err, cudaMalloc((void**)&a->dBuf, COUNT * sizeof(float)));
  GCUDA(&a->err, cudaMallocHost((void**)&a->hBuf, COUNT * sizeof(float)));
  GNCCL(&a->err, ncclCommInitRank(&a->comm, 2, a->id, a->rank));
  return allReduceOnes(a, a->comm);
}

/* Rank 0: the AllReduce its peer never joins, then the abort and the stream, each against 2 s. */
static void abortWaitingRank(struct aRank* a) {
  double t0 = mtNow();
  ncclResult_t r = ncclAllReduce(a->dBuf, a->dBuf, COUNT, ncclFloat32, ncclSum, a->comm, a->stream);
  double tEnq = mtNow() - t0;
  mtResult(r == ncclSuccess && tEnq < BOUND_S, "gpu_abort_enqueue_returns", "ncclAllReduce returned %s after %.3f s",
           ncclGetErrorString(r), tEnq);
  usleep(200 * 1000);
  cudaError_t q = cudaStreamQuery(a->stream);
  mtResult(q == cudaErrorNotReady, "gpu_abort_kernel_waits_for_peer",
           "200 ms after the enqueue cudaStreamQuery says %s (the AllReduce cannot finish without rank 1)",
           cudaGetErrorString(q));
  ncclResult_t async = ncclInternalError;
  ncclResult_t ga = ncclCommGetAsyncError(a->comm, &async);
  printf("# rank 0 before the abort: ncclCommGetAsyncError %s, async error %s\n", ncclGetErrorString(ga),
         ncclGetErrorString(async));
  double t1 = mtNow();
  r = ncclCommAbort(a->comm);
  double tAbort = mtNow() - t1;
  mtResult(r == ncclSuccess && tAbort < BOUND_S, "gpu_abort_returns_in_time", "ncclCommAbort returned %s after %.3f s",
           ncclGetErrorString(r), tAbort);
  double t2 = mtNow();
  while ((q = cudaStreamQuery(a->stream)) == cudaErrorNotReady && mtNow() - t2 < BOUND_S) usleep(1000);
  double tStream = mtNow() - t2;
  mtResult(q != cudaErrorNotReady, "gpu_abort_stream_done_in_time",
           "the stream is still busy %.3f s after ncclCommAbort returned", tStream);
  printf("# rank 0: abort %.3f s, stream idle %.3f s after it (cudaStreamQuery: %s)\n", tAbort, tStream,
         cudaGetErrorString(q));
  if (q != cudaErrorNotReady) {
    cudaError_t s = cudaStreamSynchronize(a->stream); /* returns at once now */
    printf("# rank 0: cudaStreamSynchronize after the abort: %s\n", cudaGetErrorString(s));
  }
}

/* After both aborts: the context still works (on a fresh stream: the old one is rank 0's aborted
 * one), and a new communicator runs correctly. */
static void afterAbort(struct aRank* a) {
  struct gpuErr e = {{0}};
  char name[96];
  void* p = NULL;
  cudaError_t c0 = cudaStreamCreateWithFlags(&a->stream, cudaStreamNonBlocking);
  cudaError_t c1 = c0 == cudaSuccess ? cudaMalloc(&p, 1 << 20) : c0;
  cudaError_t c2 = c1 == cudaSuccess ? cudaMemsetAsync(p, 0, 1 << 20, a->stream) : c1;
  int ok = c2 == cudaSuccess && gpuWaitStream(a->stream, 10, &e);
  if (p) cudaFree(p);
  snprintf(name, sizeof(name), "gpu_abort_context_usable_rank%d", a->rank);
  mtResult(ok, name, "cudaMalloc %s, cudaMemsetAsync %s %s", cudaGetErrorString(c1), cudaGetErrorString(c2), e.msg);
  ncclComm_t c = NULL;
  a->err.msg[0] = '\0';
  ncclResult_t r = ncclCommInitRank(&c, 2, a->id2, a->rank);
  if (r != ncclSuccess) gpuErrSet(&a->err, "ncclCommInitRank: %s", ncclGetErrorString(r));
  ok = r == ncclSuccess && allReduceOnes(a, c);
  if (c) ok &= (ok ? ncclCommDestroy(c) : ncclCommAbort(c)) == ncclSuccess;
  gpuTallyCase(a->tally, "gpu_abort_new_comm_after_abort", a->rank, ok, a->err.msg, 60);
}

static void* inflightRank(void* p) {
  struct aRank* a = p;
  int ok = setupRank(a);
  if (gpuTallyCase(a->tally, "gpu_abort_setup_and_warmup", a->rank, ok, a->err.msg, 60) <= 0) {
    if (a->comm) ncclCommAbort(a->comm);
    return NULL;
  }
  if (a->rank == 0) abortWaitingRank(a);
  /* Rank 1 waits here (never calling the AllReduce) until rank 0 has aborted. */
  if (gpuTallyCase(a->tally, NULL, a->rank, 1, "", 30) < 0) return NULL;
  if (a->rank == 1) {
    double t0 = mtNow();
    ncclResult_t r = ncclCommAbort(a->comm);
    double dt = mtNow() - t0;
    mtResult(r == ncclSuccess && dt < BOUND_S, "gpu_abort_peer_abort_in_time", "ncclCommAbort returned %s after %.3f s",
             ncclGetErrorString(r), dt);
  }
  if (gpuTallyCase(a->tally, NULL, a->rank, 1, "", 30) < 0) return NULL;
  afterAbort(a);
  return NULL;
}

static int scenarioInflight(void) {
  static struct aRank a[2];
  struct gpuTally tally;
  pthread_t th[2];
  ncclUniqueId id, id2;
  CKOK(ncclGetUniqueId(&id));
  CKOK(ncclGetUniqueId(&id2));
  gpuTallyInit(&tally, 2);
  for (int r = 0; r < 2; r++) {
    a[r] = (struct aRank){.rank = r, .id = id, .id2 = id2, .tally = &tally};
    CK(pthread_create(&th[r], NULL, inflightRank, &a[r]) == 0);
  }
  for (int r = 0; r < 2; r++) CK(pthread_join(th[r], NULL) == 0); /* the child's watchdog bounds this */
  /* Failed checks have their own lines: exit 0 tells the parent this process got to its end.  The
   * buffers and the aborted communicators' leftovers are left to the exit, which must be clean too. */
  return 0;
}

/* ---------------------------------------------------------------- args */

static char debugFile[512]; /* NCCL_DEBUG_FILE of the child */

/* Number of WARN lines the library has logged so far. */
static int warnCount(void) {
  FILE* f = fopen(debugFile, "r");
  if (!f) return 0;
  char line[2048];
  int n = 0;
  while (fgets(line, sizeof(line), f))
    if (strstr(line, "WARN")) n++;
  fclose(f);
  return n;
}

/* A call that must fail with ncclInvalidArgument, log a WARN and set ncclGetLastError. */
static void expectInvalid(const char* name, ncclResult_t r, int warnsBefore, ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  int warns = warnCount() - warnsBefore;
  mtResult(r == ncclInvalidArgument && warns > 0 && last && *last, name,
           "returned %s (want invalid argument), %d new WARN lines in %s, ncclGetLastError \"%s\"",
           ncclGetErrorString(r), warns, debugFile, last ? last : "(null)");
}

struct hostModeArgs {
  void* dptr;      /* device memory from the main thread */
};

/* On a thread that never called CUDA (no current context): a host-mode communicator. */
static void* hostModeThread(void* p) {
  struct hostModeArgs* h = p;
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  CKOK(ncclGetUniqueId(&id));
  CKOK(ncclCommInitRank(&comm, 1, id, 0));
  int dev = -2;
  CKOK(ncclCommCuDevice(comm, &dev));
  printf("# host-mode communicator (made with no current CUDA context): ncclCommCuDevice = %d\n", dev);
  int w = warnCount();
  ncclResult_t r = ncclAllReduce(h->dptr, h->dptr, 1024, ncclFloat32, ncclSum, comm, NULL);
  expectInvalid("gpu_args_device_pointer_to_host_comm", r, w, comm);
  float x[1024];
  for (int i = 0; i < 1024; i++) x[i] = (float)i;
  r = ncclAllReduce(x, x, 1024, ncclFloat32, ncclSum, comm, NULL);
  mtResult(r == ncclSuccess && x[1023] == 1023.0f, "gpu_args_host_comm_still_works", "AllReduce %s, x[1023] = %g",
           ncclGetErrorString(r), x[1023]);
  CKOK(ncclCommDestroy(comm));
  return NULL;
}

/* On the main thread (device current): a device-mode communicator given pageable host memory. */
static void deviceModeArgs(void* dptr) {
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  CKOK(ncclGetUniqueId(&id));
  CKOK(ncclCommInitRank(&comm, 1, id, 0));
  float* pageable = malloc(1024 * sizeof(float));
  CK(pageable != NULL);
  int w = warnCount();
  ncclResult_t r = ncclAllReduce(pageable, pageable, 1024, ncclFloat32, ncclSum, comm, s);
  expectInvalid("gpu_args_pageable_pointer_to_device_comm", r, w, comm);
  w = warnCount();
  r = ncclAllReduce(dptr, pageable, 1024, ncclFloat32, ncclSum, comm, s);
  expectInvalid("gpu_args_pageable_recv_to_device_comm", r, w, comm);
  struct gpuErr e = {{0}};
  r = ncclAllReduce(dptr, dptr, 1024, ncclFloat32, ncclSum, comm, s);
  int ok = r == ncclSuccess && gpuWaitStream(s, 30, &e);
  mtResult(ok, "gpu_args_device_comm_still_works", "AllReduce %s %s", ncclGetErrorString(r), e.msg);
  CKOK(ncclCommDestroy(comm));
  free(pageable);
  CK(cudaStreamDestroy(s) == cudaSuccess);
}

static int scenarioArgs(const char* dir) {
  snprintf(debugFile, sizeof(debugFile), "%s/nccl_debug.log", dir);
  setenv("NCCL_DEBUG", "WARN", 1); /* before the first NCCL call of this process */
  setenv("NCCL_DEBUG_FILE", debugFile, 1);
  struct gpuErr e = {{0}};
  struct hostModeArgs h = {0};
  if (!gpuUseDevice(&e) || cudaMalloc(&h.dptr, 1024 * sizeof(float)) != cudaSuccess ||
      cudaMemset(h.dptr, 0, 1024 * sizeof(float)) != cudaSuccess) {
    fprintf(stderr, "setup failed: %s\n", e.msg);
    return 1;
  }
  pthread_t th;
  CK(pthread_create(&th, NULL, hostModeThread, &h) == 0);
  CK(pthread_join(th, NULL) == 0);
  deviceModeArgs(h.dptr);
  CK(cudaFree(h.dptr) == cudaSuccess);
  return 0; /* failed checks have their own lines */
}

/* ---------------------------------------------------------------- parent */

static int childMain(char** argv) {
  struct mpChild c = mpChildStart(argv, 90);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (strcmp(c.scenario, "inflight") == 0) return scenarioInflight();
  return scenarioArgs(c.arg);
}

int main(int argc, char** argv) {
  if (mpIsChild(argc, argv)) return childMain(argv);
  const char* w = getenv("MEND_TEST_GPU_WATCHDOG_S");
  int watchdogS = w && atoi(w) > 30 ? atoi(w) : 280;
  if (!gpuStart("gpu_abort", watchdogS)) return mtExitCode();
  double partS = (watchdogS - 10) / 2.0 < 120 ? (watchdogS - 10) / 2.0 : 120;
  /* The child prints its own result lines; the parent adds whether it exited cleanly and in time. */
  mpRun("gpu_abort_inflight_clean_exit", "inflight", 1, NULL, partS, 1, 0);
  mpRun("gpu_args_clean_exit", "args", 1, NULL, partS, 1, 0);
  return mtExitCode();
}
