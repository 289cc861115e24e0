/* The sweep, as nccl-tests runs it: per type and op, warm up at the largest and the smallest
 * size, then for every size time the out-of-place and the in-place call, check the results,
 * and print one row. Every rank of every thread and process runs the same sequence, so the
 * check seeds and the control-plane rounds line up without further coordination. */
#include <string.h>
#include <time.h>
#include "run.h"

/* One size of the sweep. */
struct sizeCtx {
  int type;              /* ncclDataType_t */
  int op;                /* op index, BENCH_OP_NONE for copies */
  int root;              /* root rank (-1 when the collective has none) */
  size_t eltSize;        /* bytes per element */
  size_t count;          /* size / eltSize: nccl-tests' count before per-collective rounding */
};

double benchNowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int benchIsMain(const struct benchThread* t) { return benchP.w.proc == 0 && t->thread == 0; }

static void sync0(struct benchThread* t, double* v, int n, int op) {
  if (benchSync(t->thread, v, n, op) != 0) benchFatal("lost the other ranks (control plane failed)");
}
static void barrier(struct benchThread* t) { sync0(t, NULL, 0, benchCtrlSum); }

/* Device mode: until this thread's ranks have done what they queued; host mode: nothing to wait
 * for (a call is complete when it returns). */
static void waitRanks(struct benchThread* t) {
  if (benchP.devMode) benchGpuWait(t->ranks, benchP.o.nGpus);
}

static void countsOf(const struct benchRank* r, const struct sizeCtx* s, struct benchCounts* c) {
  benchP.coll->counts(s->count, s->eltSize, r->nRanks, c);
}

/* Send and receive pointers of one call: a shift per iteration (as nccl-tests, to move through
 * the buffer), the -u misalignment, and the in-place layout. */
static void callBuffers(const struct benchRank* r, const struct sizeCtx* s, const struct benchCounts* c,
                        int inplace, int iter, char** send, char** recv) {
  size_t total = (c->sendCount > c->recvCount ? c->sendCount : c->recvCount) * s->eltSize;
  size_t steps = total ? r->allocBytes / total : 1;
  size_t shift = total * ((size_t)iter % (steps ? steps : 1)) + (size_t)benchP.o.unalign * s->eltSize;
  *send = (char*)r->sendBuf + shift;
  *recv = (char*)r->recvBuf + shift;
  if (inplace) {
    *send = *recv + c->sendInplace * (size_t)r->rank * s->eltSize;
    *recv = *recv + c->recvInplace * (size_t)r->rank * s->eltSize;
  }
}

static void startColl(struct benchThread* t, const struct sizeCtx* s, int inplace, int iter) {
  int g = benchP.o.nGpus;
  if (g > 1) BENCH_NCCL(ncclGroupStart());
  for (int i = 0; i < g; i++) {
    struct benchRank* r = &t->ranks[i];
    struct benchCounts c;
    char *send, *recv;
    countsOf(r, s, &c);
    callBuffers(r, s, &c, inplace, iter, &send, &recv);
    if (benchP.devMode && g > 1) benchGpuSetDevice(r->cudaDev);
    ncclRedOp_t op = s->op < 0 ? ncclSum : (ncclRedOp_t)s->op;
    if (s->op == BENCH_OP_MULSUM) {
      uint64_t scalar = 0;
      benchStore(s->type, &scalar, 0, benchMulsumScalar(s->type, r->rank));
      BENCH_NCCL(ncclRedOpCreatePreMulSum(&op, &scalar, (ncclDataType_t)s->type,
                                          ncclScalarHostImmediate, r->comm));
    }
    BENCH_NCCL(benchP.coll->run(send, recv, c.paramCount, (ncclDataType_t)s->type, op, s->root,
                                r->comm, r->rank, r->nRanks, r->stream));
    if (s->op == BENCH_OP_MULSUM) BENCH_NCCL(ncclRedOpDestroy(op, r->comm));
  }
  if (g > 1) BENCH_NCCL(ncclGroupEnd());
  if (t->capturing) return;  /* -G: recorded into a graph, nothing runs yet */
  if (benchP.o.blocking == 1 || benchP.o.blocking == 2) waitRanks(t);
  if (benchP.o.blocking == 1) barrier(t);
}

/* For the -T watchdog only: without it the timed loop reads no clock per call (as the peers' driver
 * and nccl-tests do), so the tool's own time between calls stays out of small-message latencies. */
static void markOp(struct benchThread* t, int busy) {
  if (benchP.o.timeout > 0) atomic_store(&t->opStartNs, busy ? (long long)(benchNowSec() * 1e9) : 0);
}

/* Zeroes a rank's output and writes its inputs (through the staging buffer in device mode). */
static void fillInputs(struct benchRank* r, const struct sizeCtx* s, int inplace, uint64_t seed) {
  struct benchCounts c;
  char *send, *recv;
  countsOf(r, s, &c);
  callBuffers(r, s, &c, 0, 0, &send, &recv);
  if (benchP.devMode) benchGpuZero(r, recv, c.recvCount * s->eltSize);
  else memset(recv, 0, c.recvCount * s->eltSize);
  callBuffers(r, s, &c, inplace, 0, &send, &recv);
  benchP.coll->fillSend(benchP.devMode ? r->stage : send, &c, s->type, s->op, r->rank, r->nRanks, s->root, seed);
  if (benchP.devMode) benchGpuToDevice(r, send, r->stage, c.sendCount * s->eltSize);
}

/* The wrong elements of a rank's output (read back into the staging buffer in device mode). */
static int64_t checkRank(struct benchRank* r, const struct sizeCtx* s, int inplace, uint64_t seed) {
  const struct benchColl* coll = benchP.coll;
  struct benchCounts c;
  char *send, *recv;
  countsOf(r, s, &c);
  callBuffers(r, s, &c, inplace, 0, &send, &recv);
  size_t n = coll->fillExpected(r->expected, &c, s->type, s->op, r->rank, r->nRanks, s->root, seed);
  void* got = recv;
  if (benchP.devMode) {
    benchGpuToHost(r, r->stage, recv, n * s->eltSize);
    got = r->stage;
  }
  if (benchP.plant && n > 0 && r->rank == (coll->rooted ? s->root : 0)) {
    double e = benchLoad(s->type, r->expected, 0);
    benchStore(s->type, got, 0, e == 119.0 ? 118.0 : 119.0);
  }
  return benchCompare(got, r->expected, n, s->type, s->op, r->nRanks);
}

/* Fills inputs, runs one call and counts the wrong elements of this thread's ranks. */
static int64_t checkOnce(struct benchThread* t, const struct sizeCtx* s, int inplace, uint64_t seed) {
  for (int i = 0; i < benchP.o.nGpus; i++) fillInputs(&t->ranks[i], s, inplace, seed);
  markOp(t, 1);
  startColl(t, s, inplace, 0);
  waitRanks(t);
  markOp(t, 0);
  int64_t wrong = 0;
  for (int i = 0; i < benchP.o.nGpus; i++) wrong += checkRank(&t->ranks[i], s, inplace, seed);
  return wrong;
}

/* -c iterations; returns the wrong elements of all ranks (nccl-tests' #wrong). */
static int64_t checkAll(struct benchThread* t, const struct sizeCtx* s, int inplace, int report) {
  double total = 0;
  for (int k = 0; k < benchP.o.check; k++) {
    int64_t mine = checkOnce(t, s, inplace, ++t->rep);
    if (mine && report) t->errors++;
    if (mine && report)
      fprintf(stderr, "%s: rank %d: %lld wrong elements (%s %s, %s)\n", benchP.w.host,
              t->ranks[0].rank, (long long)mine, benchTypeName(s->type), benchOpName(s->op),
              inplace ? "in-place" : "out-of-place");
    total = (double)mine;
    sync0(t, &total, 1, benchCtrlSum);
    if (total > 0) break;
  }
  return (int64_t)total;
}

/* Seconds per operation of the timed loop; *cpuSec: the same up to the last call's return (-C).
 * In device mode the calls are queued on the streams and the time runs until they are idle
 * (-I and -z 3 wait after every iteration). */
static double timedLoop(struct benchThread* t, const struct sizeCtx* s, int inplace, double* cpuSec) {
  const struct benchOpts* o = &benchP.o;
  double excluded = 0, start = benchNowSec();
  int clocked = o->perIter || o->blocking == 3; /* per-iteration times wanted */
  for (int iter = 0; iter < o->iters; iter++) {
    double it0 = clocked ? benchNowSec() : 0;
    markOp(t, 1);
    if (o->aggIters > 1) BENCH_NCCL(ncclGroupStart());
    for (int a = 0; a < o->aggIters; a++) startColl(t, s, inplace, iter * o->aggIters + a);
    if (o->aggIters > 1) BENCH_NCCL(ncclGroupEnd());
    if (o->perIter || o->blocking == 3) waitRanks(t);
    markOp(t, 0);
    double it1 = clocked ? benchNowSec() : 0;
    if (o->perIter) t->iterTimes[iter] = (it1 - it0) / o->aggIters;
    if (o->blocking == 3) {
      barrier(t);
      excluded += benchNowSec() - it1;
    }
  }
  double launched = benchNowSec();
  markOp(t, 1);
  waitRanks(t);
  markOp(t, 0);
  double ops = (double)o->iters * o->aggIters;
  *cpuSec = (launched - start - excluded) / ops;
  return (benchNowSec() - start - excluded) / ops;
}

/* -G in device mode: the timed loop is captured once per rank stream (not timed), then the
 * graphs are launched -G times back to back and timed until the streams are idle. */
static double graphLoop(struct benchThread* t, const struct sizeCtx* s, int inplace, double* cpuSec) {
  const struct benchOpts* o = &benchP.o;
  int g = o->nGpus;
  t->capturing = 1;
  benchGpuCaptureBegin(t->ranks, g);
  for (int iter = 0; iter < o->iters; iter++) {
    if (o->aggIters > 1) BENCH_NCCL(ncclGroupStart());
    for (int a = 0; a < o->aggIters; a++) startColl(t, s, inplace, iter * o->aggIters + a);
    if (o->aggIters > 1) BENCH_NCCL(ncclGroupEnd());
  }
  benchGpuCaptureEnd(t->ranks, g);
  t->capturing = 0;
  barrier(t);
  double start = benchNowSec();
  markOp(t, 1);
  for (int l = 0; l < o->graphLaunches; l++)
    for (int i = 0; i < g; i++) benchGpuGraphLaunch(&t->ranks[i]);
  double launched = benchNowSec();
  waitRanks(t);
  markOp(t, 0);
  double sec = (benchNowSec() - start) / ((double)o->iters * o->aggIters * o->graphLaunches);
  for (int i = 0; i < g; i++) benchGpuGraphFree(&t->ranks[i]);
  for (int iter = 0; o->perIter && iter < o->iters; iter++) t->iterTimes[iter] = sec;
  *cpuSec = (launched - start) / ((double)o->iters * o->aggIters * o->graphLaunches);
  return sec;
}

/* nccl-tests' -a: 0 rank 0, 1 average, 2 min, 3 max over ranks. */
static double combineTime(struct benchThread* t, double sec) {
  static const int ops[] = {benchCtrlFirst, benchCtrlSum, benchCtrlMin, benchCtrlMax};
  sync0(t, &sec, 1, ops[benchP.o.average]);
  if (benchP.o.average == 1) sec /= (double)benchP.w.nProcs * benchP.o.nThreads;
  return sec;
}

static void benchTime(struct benchThread* t, const struct sizeCtx* s, int inplace) {
  const struct benchOpts* o = &benchP.o;
  markOp(t, 1);
  startColl(t, s, inplace, 0);  /* one untimed call lines the ranks up */
  waitRanks(t);
  markOp(t, 0);
  barrier(t);
  double cpuSec = 0;
  double sec = benchP.devMode && o->graphLaunches > 0 ? graphLoop(t, s, inplace, &cpuSec)
                                                       : timedLoop(t, s, inplace, &cpuSec);
  sec = combineTime(t, o->reportCputime ? cpuSec : sec);
  double stats[4] = {0, 0, 0, 0};
  if (o->perIter) {
    int n = o->iters - o->perIterSkip;
    sync0(t, t->iterTimes + o->perIterSkip, n, benchCtrlMax);
    benchIterStats(t->iterTimes + o->perIterSkip, n, stats);
  }
  struct benchCounts c;
  countsOf(&t->ranks[0], s, &c);
  double algbw, busbw;
  benchComputeBw(benchP.coll, c.paramCount, s->eltSize, sec, t->ranks[0].nRanks, &algbw, &busbw);
  barrier(t);
  int report = o->check > 0 && (!inplace || benchP.coll->inplaceChecked);
  int64_t wrong = o->check > 0 ? checkAll(t, s, inplace, report) : 0;
  t->bwSum += busbw;
  t->bwCount++;
  if (!benchIsMain(t)) return;
  benchPrintRowBody(o, sec * 1e6, algbw, busbw, report, wrong, stats);
  if (o->jsonFile) {
    size_t bytes = (c.sendCount > c.recvCount ? c.sendCount : c.recvCount) * s->eltSize;
    benchJsonRow(bytes, c.paramCount, benchTypeName(s->type), benchOpName(s->op), s->root, inplace,
                 sec * 1e6, algbw, busbw, report, wrong);
  }
}

static void warmup(struct benchThread* t, struct sizeCtx* s, size_t bytes) {
  s->count = bytes / s->eltSize;
  markOp(t, 1);
  for (int iter = 0; iter < benchP.o.warmupIters; iter++) startColl(t, s, 0, iter);
  waitRanks(t);
  markOp(t, 0);
}

static void timeTest(struct benchThread* t, int type, int op) {
  const struct benchOpts* o = &benchP.o;
  struct sizeCtx s = {.type = type, .op = op, .root = benchP.coll->rooted ? o->root : -1,
                      .eltSize = benchTypeSize(type)};
  barrier(t);
  warmup(t, &s, o->maxBytes);
  warmup(t, &s, o->minBytes);
  for (size_t size = o->minBytes; size <= o->maxBytes;) {
    s.count = size / s.eltSize;
    if (benchIsMain(t)) {
      struct benchCounts c;
      countsOf(&t->ranks[0], &s, &c);
      size_t bytes = (c.sendCount > c.recvCount ? c.sendCount : c.recvCount) * s.eltSize;
      benchPrintRowStart(bytes, c.paramCount, benchTypeName(type), benchOpName(op), s.root);
    }
    benchTime(t, &s, 0);
    benchTime(t, &s, 1);
    if (benchIsMain(t)) benchPrintRowEnd(o);
    size_t next = o->stepFactor > 1 ? size * o->stepFactor : size + o->stepBytes;
    if (next <= size) break;
    size = next;
  }
}

void* benchRunThread(void* arg) {
  struct benchThread* t = arg;
  const struct benchOpts* o = &benchP.o;
  if (benchP.devMode) benchGpuUse(t->ranks[0].cudaDev);  /* this thread's calls go to its GPU */
  for (int cycle = 0; o->runCycles == 0 || cycle < o->runCycles; cycle++) {
    for (int type = 0; type < BENCH_NUM_TYPES; type++) {
      if (o->type >= 0 && type != o->type) continue;
      if (!benchP.coll->reduces) {
        timeTest(t, type, BENCH_OP_NONE);
        continue;
      }
      for (int op = 0; op < BENCH_NUM_OPS; op++) {
        if ((o->op >= 0 && op != o->op) || (o->op < 0 && !benchOpValid(type, op))) continue;
        timeTest(t, type, op);
      }
    }
  }
  return NULL;
}
