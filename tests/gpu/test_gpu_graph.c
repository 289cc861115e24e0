/*
 * CUDA graphs: every rank captures, on its own stream, ONE group of collectives (an AllReduce, an
 * AllGather and a ring send/recv pair), instantiates the graph and replays it 100 times.  Between
 * replays new input goes in with cudaMemcpyAsync on the same stream (outside the graph) and the
 * outputs are poisoned; every fifth replay an eager AllReduce (max) on the same communicator runs
 * just before the graph.  Every replay's outputs are checked exactly.
 *
 *   --threads N  N ranks as threads of this process (capture mode thread-local), N = 2 and 4 by default
 *   --procs N    N ranks as processes (capture mode global, as torch.cuda.graph captures)
 *
 * Two sizes each: 1000 and 1M+13 floats per rank.  Exit 77 when no CUDA device is usable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_util.h"
#include "mp_util.h"

#define REPLAYS 100
#define MAX_RANKS 8
static const size_t sizes[] = {1000, (1 << 20) + 13};

struct gRank {
  int rank, n;                   /* this rank, rank count */
  ncclComm_t comm;               /* device-mode communicator */
  cudaStream_t stream;           /* non-blocking stream the graph is captured on and replayed on */
  size_t count;                  /* floats per rank */
  float *dIn, *dAr, *dAg, *dRecv, *dEager; /* device: input, AllReduce, AllGather (n blocks), recv, eager */
  float *hIn, *hAr, *hAg, *hRecv, *hEager; /* pinned host copies */
  cudaGraph_t graph;             /* the captured group */
  cudaGraphExec_t exec;          /* its instance */
  struct gpuErr err;             /* first failure */
};

/* Where results go: a tally of rank threads, or (tally NULL, processes) "# rank R: not ok" lines. */
struct reporter {
  struct gpuTally* tally; /* threads */
  int rank;               /* this rank */
  int fails;              /* processes: failed checks */
};

static int report(struct reporter* rp, const char* name, int ok, const char* why) {
  if (rp->tally) return gpuTallyCase(rp->tally, name, rp->rank, ok, why, 2 * gpuWaitLimit());
  if (!ok) printf("# rank %d: not ok %s: %s\n", rp->rank, name, why);
  rp->fails += !ok;
  return ok;
}

/* Input element i of rank r for replay it: a small integer, so every sum is exact. */
static float gval(int it, int r, size_t i) { return (float)((int)(((size_t)it * 7 + (size_t)r * 13 + i * 3) % 41) - 20); }

static int gAlloc(struct gRank* g, size_t count) {
  size_t b = count * sizeof(float), nb = b * (size_t)g->n;
  g->count = count;
  GCUDA(&g->err, cudaMalloc((void**)&g->dIn, b));
  GCUDA(&g->err, cudaMalloc((void**)&g->dAr, b));
  GCUDA(&g->err, cudaMalloc((void**)&g->dAg, nb));
  GCUDA(&g->err, cudaMalloc((void**)&g->dRecv, b));
  GCUDA(&g->err, cudaMalloc((void**)&g->dEager, b));
  GCUDA(&g->err, cudaMallocHost((void**)&g->hIn, b));
  GCUDA(&g->err, cudaMallocHost((void**)&g->hAr, b));
  GCUDA(&g->err, cudaMallocHost((void**)&g->hAg, nb));
  GCUDA(&g->err, cudaMallocHost((void**)&g->hRecv, b));
  GCUDA(&g->err, cudaMallocHost((void**)&g->hEager, b));
  return 1;
}

static void gFree(struct gRank* g) {
  if (g->exec) cudaGraphExecDestroy(g->exec);
  if (g->graph) cudaGraphDestroy(g->graph);
  float* d[] = {g->dIn, g->dAr, g->dAg, g->dRecv, g->dEager};
  float* h[] = {g->hIn, g->hAr, g->hAg, g->hRecv, g->hEager};
  for (int k = 0; k < 5; k++) {
    if (d[k]) cudaFree(d[k]);
    if (h[k]) cudaFreeHost(h[k]);
  }
  g->dIn = g->dAr = g->dAg = g->dRecv = g->dEager = NULL;
  g->hIn = g->hAr = g->hAg = g->hRecv = g->hEager = NULL;
  g->exec = NULL;
  g->graph = NULL;
}

/* The group the graph holds (also run once eagerly before the capture). */
static int issueGroup(struct gRank* g) {
  int next = (g->rank + 1) % g->n, prev = (g->rank + g->n - 1) % g->n;
  size_t c = g->count;
  ncclResult_t r[6];
  r[0] = ncclGroupStart();
  r[1] = ncclAllReduce(g->dIn, g->dAr, c, ncclFloat32, ncclSum, g->comm, g->stream);
  r[2] = ncclAllGather(g->dIn, g->dAg, c, ncclFloat32, g->comm, g->stream);
  r[3] = ncclSend(g->dIn, c, ncclFloat32, next, g->comm, g->stream);
  r[4] = ncclRecv(g->dRecv, c, ncclFloat32, prev, g->comm, g->stream);
  r[5] = ncclGroupEnd();
  for (int k = 0; k < 6; k++)
    if (r[k] != ncclSuccess)
      return gpuErrSet(&g->err, "call %d of the group (start, allreduce, allgather, send, recv, end): %s (%s)", k,
                       ncclGetErrorString(r[k]), ncclGetLastError(g->comm));
  return 1;
}

/* New input for replay it, outputs poisoned (NaN), all on the stream outside any graph. */
static int stageInput(struct gRank* g, int it) {
  size_t b = g->count * sizeof(float);
  for (size_t i = 0; i < g->count; i++) g->hIn[i] = gval(it, g->rank, i);
  GCUDA(&g->err, cudaMemcpyAsync(g->dIn, g->hIn, b, cudaMemcpyHostToDevice, g->stream));
  GCUDA(&g->err, cudaMemsetAsync(g->dAr, 0xFF, b, g->stream));
  GCUDA(&g->err, cudaMemsetAsync(g->dAg, 0xFF, b * (size_t)g->n, g->stream));
  GCUDA(&g->err, cudaMemsetAsync(g->dRecv, 0xFF, b, g->stream));
  GCUDA(&g->err, cudaMemsetAsync(g->dEager, 0xFF, b, g->stream));
  return 1;
}

static int fetchAndWait(struct gRank* g) {
  size_t b = g->count * sizeof(float);
  GCUDA(&g->err, cudaMemcpyAsync(g->hAr, g->dAr, b, cudaMemcpyDeviceToHost, g->stream));
  GCUDA(&g->err, cudaMemcpyAsync(g->hAg, g->dAg, b * (size_t)g->n, cudaMemcpyDeviceToHost, g->stream));
  GCUDA(&g->err, cudaMemcpyAsync(g->hRecv, g->dRecv, b, cudaMemcpyDeviceToHost, g->stream));
  GCUDA(&g->err, cudaMemcpyAsync(g->hEager, g->dEager, b, cudaMemcpyDeviceToHost, g->stream));
  return gpuWaitStream(g->stream, gpuWaitLimit(), &g->err);
}

/* Outputs of replay it (eager: the eager max AllReduce ran too). */
static int checkOutputs(struct gRank* g, int it, int eager) {
  int n = g->n, prev = (g->rank + n - 1) % n;
  for (size_t i = 0; i < g->count; i++) {
    float sum = 0, max = gval(it, 0, i);
    for (int q = 0; q < n; q++) {
      float v = gval(it, q, i);
      sum += v;
      max = v > max ? v : max;
      if (g->hAg[(size_t)q * g->count + i] != v)
        return gpuErrSet(&g->err, "replay %d: allgather block %d [%zu] = %g, want %g", it, q, i,
                         g->hAg[(size_t)q * g->count + i], v);
    }
    if (g->hAr[i] != sum) return gpuErrSet(&g->err, "replay %d: allreduce [%zu] = %g, want %g", it, i, g->hAr[i], sum);
    if (g->hRecv[i] != gval(it, prev, i))
      return gpuErrSet(&g->err, "replay %d: recv [%zu] = %g, want %g", it, i, g->hRecv[i], gval(it, prev, i));
    if (eager && g->hEager[i] != max)
      return gpuErrSet(&g->err, "replay %d: eager allreduce(max) [%zu] = %g, want %g", it, i, g->hEager[i], max);
  }
  return 1;
}

static int capture(struct gRank* g, enum cudaStreamCaptureMode mode) {
  GCUDA(&g->err, cudaStreamBeginCapture(g->stream, mode));
  int ok = issueGroup(g);
  cudaError_t end = cudaStreamEndCapture(g->stream, &g->graph); /* always end the capture */
  if (!ok) return 0;
  GCUDA(&g->err, end);
  size_t nodes = 0;
  GCUDA(&g->err, cudaGraphGetNodes(g->graph, NULL, &nodes));
  if (nodes == 0) return gpuErrSet(&g->err, "the captured graph is empty");
  GCUDA(&g->err, cudaGraphInstantiate(&g->exec, g->graph, 0));
  return 1;
}

/* 100 replays with new input each; returns 1, 0 (wrong results), -1 (a call failed or timed out).
 * Wrong results do not stop the replays: the other ranks' graphs need this rank's. */
static int replays(struct gRank* g) {
  int ok = 1;
  for (int it = 0; it < REPLAYS; it++) {
    int eager = it % 5 == 4;
    if (!stageInput(g, it)) return -1;
    if (eager) {
      ncclResult_t r = ncclAllReduce(g->dIn, g->dEager, g->count, ncclFloat32, ncclMax, g->comm, g->stream);
      if (r != ncclSuccess)
        return gpuErrSet(&g->err, "replay %d: eager ncclAllReduce: %s", it, ncclGetErrorString(r)) - 1;
    }
    cudaError_t e = cudaGraphLaunch(g->exec, g->stream);
    if (e != cudaSuccess) return gpuErrSet(&g->err, "replay %d: cudaGraphLaunch: %s", it, cudaGetErrorString(e)) - 1;
    if (!fetchAndWait(g)) return -1;
    if (!checkOutputs(g, it, eager)) ok = 0;
  }
  return ok;
}

/* Warm-up, capture, replays for one size; returns 0 when the rank must stop (a failure it cannot undo). */
static int oneSize(struct gRank* g, size_t count, enum cudaStreamCaptureMode mode, struct reporter* rp,
                   const char* prefix) {
  char name[128];
  g->err.msg[0] = '\0';
  int ok = gAlloc(g, count) && stageInput(g, REPLAYS) && issueGroup(g) && fetchAndWait(g);
  ok = ok && checkOutputs(g, REPLAYS, 0);
  snprintf(name, sizeof(name), "%s_count%zu_eager_group", prefix, count);
  if (report(rp, name, ok, g->err.msg) <= 0) return 0;
  ok = capture(g, mode);
  snprintf(name, sizeof(name), "%s_count%zu_capture", prefix, count);
  if (report(rp, name, ok, g->err.msg) <= 0) return 0;
  int r = replays(g);
  snprintf(name, sizeof(name), "%s_count%zu_%d_replays", prefix, count, REPLAYS);
  if (report(rp, name, r > 0, g->err.msg) < 0 || r < 0) return 0;
  gFree(g);
  return 1;
}

/* Everything after the communicator exists; then destroy (or abort after a failure). */
static void rankBody(struct gRank* g, enum cudaStreamCaptureMode mode, struct reporter* rp, const char* prefix) {
  int alive = 1;
  for (size_t k = 0; alive && k < sizeof(sizes) / sizeof(sizes[0]); k++) alive = oneSize(g, sizes[k], mode, rp, prefix);
  if (!alive) {
    if (rp->tally) gpuTallyBreak(rp->tally);
    ncclCommAbort(g->comm); /* buffers stay: a stuck stream could make a free wait forever */
    return;
  }
  ncclResult_t async = ncclInProgress, got = ncclCommGetAsyncError(g->comm, &async);
  ncclResult_t d = ncclCommDestroy(g->comm);
  char name[128], why[160];
  snprintf(why, sizeof(why), "ncclCommGetAsyncError %s (%s), ncclCommDestroy %s", ncclGetErrorString(got),
           ncclGetErrorString(async), ncclGetErrorString(d));
  snprintf(name, sizeof(name), "%s_destroy", prefix);
  report(rp, name, got == ncclSuccess && async == ncclSuccess && d == ncclSuccess, why);
  if (g->stream) cudaStreamDestroy(g->stream);
}

/* ---------------------------------------------------------------- threads */

struct gThread {
  struct gRank g;         /* the rank */
  ncclUniqueId id;        /* shared */
  struct gpuTally* tally; /* one line per step */
  const char* prefix;     /* result names */
};

static void* threadMain(void* p) {
  struct gThread* t = p;
  struct reporter rp = {.tally = t->tally, .rank = t->g.rank};
  char name[128];
  int ok = gpuUseDevice(&t->g.err);
  cudaError_t e = ok ? cudaStreamCreateWithFlags(&t->g.stream, cudaStreamNonBlocking) : cudaSuccess;
  if (e != cudaSuccess) ok = gpuErrSet(&t->g.err, "cudaStreamCreateWithFlags: %s", cudaGetErrorString(e));
  ncclResult_t r = ok ? ncclCommInitRank(&t->g.comm, t->g.n, t->id, t->g.rank) : ncclInvalidUsage;
  if (ok && r != ncclSuccess) ok = gpuErrSet(&t->g.err, "ncclCommInitRank: %s", ncclGetErrorString(r));
  snprintf(name, sizeof(name), "%s_init", t->prefix);
  if (report(&rp, name, ok, t->g.err.msg) > 0) rankBody(&t->g, cudaStreamCaptureModeThreadLocal, &rp, t->prefix);
  else if (t->g.comm) ncclCommAbort(t->g.comm);
  return NULL;
}

static void runThreads(int n) {
  static struct gThread t[MAX_RANKS];
  pthread_t th[MAX_RANKS];
  struct gpuTally tally;
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "gpu_graph_threads_%dr", n);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    mtResult(0, prefix, "ncclGetUniqueId failed");
    return;
  }
  gpuTallyInit(&tally, n);
  for (int r = 0; r < n; r++) {
    memset(&t[r], 0, sizeof(t[r]));
    t[r].g.rank = r;
    t[r].g.n = n;
    t[r].id = id;
    t[r].tally = &tally;
    t[r].prefix = prefix;
    if (pthread_create(&th[r], NULL, threadMain, &t[r]) != 0) {
      mtResult(0, prefix, "pthread_create failed");
      _exit(1);
    }
  }
  for (int r = 0; r < n; r++) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(4 * gpuWaitLimit());
    if (pthread_timedjoin_np(th[r], NULL, &until) != 0) {
      mtResult(0, prefix, "rank %d's thread is still running long after the others", r);
      _exit(1);
    }
  }
  gpuTallyFree(&tally);
}

/* ---------------------------------------------------------------- processes */

static int childMain(char** argv) {
  struct mpChild c = mpChildStart(argv, 570);
  static struct gRank g;
  g.rank = c.rank;
  g.n = c.n;
  if (!gpuUseDevice(&g.err) || cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking) != cudaSuccess) {
    fprintf(stderr, "rank %d: %s\n", c.rank, g.err.msg[0] ? g.err.msg : "cudaStreamCreateWithFlags failed");
    return 1;
  }
  g.comm = mpInitComm(c.rank, c.n, c.arg);
  struct reporter rp = {.tally = NULL, .rank = c.rank};
  rankBody(&g, cudaStreamCaptureModeGlobal, &rp, "gpu_graph_procs");
  return rp.fails ? 1 : 0;
}

int main(int argc, char** argv) {
  if (mpIsChild(argc, argv)) return childMain(argv);
  int n = argc == 3 ? atoi(argv[2]) : 0;
  if ((argc != 1 && argc != 3) || (argc == 3 && (n < 1 || n > MAX_RANKS))) {
    fprintf(stderr, "usage: %s [--threads N | --procs N]\n", argv[0]);
    return 2;
  }
  const char* w = getenv("MEND_TEST_GPU_WATCHDOG_S");
  int watchdogS = w && atoi(w) > 30 ? atoi(w) : 280;
  if (!gpuStart("gpu_graph", watchdogS)) return mtExitCode();
  char name[64];
  if (argc == 3 && strcmp(argv[1], "--threads") != 0 && strcmp(argv[1], "--procs") != 0) {
    fprintf(stderr, "usage: %s [--threads N | --procs N]\n", argv[0]);
    return 2;
  }
  if (argc == 1 || strcmp(argv[1], "--threads") == 0) {
    if (argc == 3) runThreads(n);
    else for (int k = 2; k <= 4; k += 2) runThreads(k);
  }
  if (argc == 1 || strcmp(argv[1], "--procs") == 0) {
    snprintf(name, sizeof(name), "gpu_graph_procs_%dr", argc == 3 ? n : 2);
    mpRun(name, "graph", argc == 3 ? n : 2, NULL, watchdogS - 20, argc == 3 ? n : 2, 0);
  }
  return mtExitCode();
}
