#include "gpu_cases.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const size_t gpuCounts[GPU_NCOUNTS] = {0, 1, 7, 1000, GPU_MAX_COUNT};

static const char* const collNames[GC_NUM] = {"allreduce", "broadcast", "reduce",  "allgather", "reducescatter",
                                              "alltoall",  "gather",    "scatter", "sendrecv",  "memalloc_allreduce"};
static const char* const opNames[GPU_NUM_OPS] = {"sum", "prod", "max", "min", "avg", "premulsum_host", "premulsum_dev"};

static int isReduction(enum gpuColl c) {
  return c == GC_ALLREDUCE || c == GC_REDUCE || c == GC_REDUCESCATTER || c == GC_MEMALLOC;
}
static int isRooted(enum gpuColl c) { return c == GC_BROADCAST || c == GC_REDUCE || c == GC_GATHER || c == GC_SCATTER; }
static int sendIsBig(enum gpuColl c) { return c == GC_REDUCESCATTER || c == GC_ALLTOALL || c == GC_SCATTER; }
static int recvIsBig(enum gpuColl c) { return c == GC_ALLGATHER || c == GC_ALLTOALL || c == GC_GATHER; }

/* ---- rank buffers ---- */

int gpuRankAlloc(struct gpuRank* R, int rank, int n, struct gpuErr* e) {
  memset(R, 0, sizeof(*R));
  R->rank = rank;
  R->n = n;
  R->cap = GPU_MAX_COUNT * (size_t)n * 8;
  GCUDA(e, cudaStreamCreateWithFlags(&R->stream, cudaStreamNonBlocking));
  GCUDA(e, cudaMalloc(&R->dA, R->cap));
  GCUDA(e, cudaMalloc(&R->dB, R->cap));
  GCUDA(e, cudaMalloc(&R->dScalar, 16));
  GCUDA(e, cudaMallocHost(&R->hA, R->cap));
  GCUDA(e, cudaMallocHost(&R->hB, R->cap));
  GCUDA(e, cudaMallocHost(&R->hC, R->cap));
  GCUDA(e, cudaMallocHost(&R->hScalar, 16));
  /* ncclMemAlloc is the library's: its failure fails the memalloc cases only. */
  R->mCap = GPU_MAX_COUNT * sizeof(float);
  ncclResult_t r1 = ncclMemAlloc(&R->mA, R->mCap), r2 = r1 == ncclSuccess ? ncclMemAlloc(&R->mB, R->mCap) : r1;
  if (r1 != ncclSuccess || r2 != ncclSuccess) {
    gpuErrSet(&R->memErr, "ncclMemAlloc(%zu bytes): %s", R->mCap, ncclGetErrorString(r1 != ncclSuccess ? r1 : r2));
    if (R->mA) ncclMemFree(R->mA);
    R->mA = R->mB = NULL;
  }
  return 1;
}

void gpuRankFree(struct gpuRank* R) {
  if (R->mA) ncclMemFree(R->mA);
  if (R->mB) ncclMemFree(R->mB);
  if (R->dA) cudaFree(R->dA);
  if (R->dB) cudaFree(R->dB);
  if (R->dScalar) cudaFree(R->dScalar);
  if (R->hA) cudaFreeHost(R->hA);
  if (R->hB) cudaFreeHost(R->hB);
  if (R->hC) cudaFreeHost(R->hC);
  if (R->hScalar) cudaFreeHost(R->hScalar);
  if (R->stream) cudaStreamDestroy(R->stream);
  memset(R, 0, sizeof(*R));
}

/* ---- case lists ---- */

static int addCase(struct gpuCase* out, int k, int max, enum gpuColl coll, ncclDataType_t t, int op, int inPlace) {
  if (k < max) out[k] = (struct gpuCase){.coll = coll, .type = t, .op = op, .inPlace = inPlace};
  return k + 1;
}

static int listAll(struct gpuCase* out, int max) {
  static const enum gpuColl reds[] = {GC_ALLREDUCE, GC_REDUCE, GC_REDUCESCATTER};
  static const enum gpuColl copies[] = {GC_BROADCAST, GC_ALLGATHER, GC_ALLTOALL, GC_GATHER, GC_SCATTER};
  static const ncclDataType_t opTypes[] = {ncclFloat32, ncclInt32};
  static const ncclDataType_t copyTypes[] = {ncclUint8, ncclFloat64};
  int k = 0;
  for (int p = 0; p < 2; p++) {
    /* AllReduce sum on every type (float32 and int32 come with the ops below). */
    for (int t = 0; t < ncclNumTypes; t++)
      if (t != ncclFloat32 && t != ncclInt32) k = addCase(out, k, max, GC_ALLREDUCE, (ncclDataType_t)t, ncclSum, p);
    for (int c = 0; c < 3; c++)
      for (int t = 0; t < 2; t++)
        for (int op = 0; op < GPU_NUM_OPS; op++) k = addCase(out, k, max, reds[c], opTypes[t], op, p);
    for (int c = 0; c < 5; c++)
      for (int t = 0; t < 2; t++) k = addCase(out, k, max, copies[c], copyTypes[t], ncclSum, p);
    k = addCase(out, k, max, GC_MEMALLOC, ncclFloat32, ncclSum, p);
  }
  k = addCase(out, k, max, GC_SENDRECV, ncclFloat32, ncclSum, 0);
  k = addCase(out, k, max, GC_SENDRECV, ncclUint8, ncclSum, 0);
  return k;
}

static int listCoreReduce(struct gpuCase* out, int max) {
  static const enum gpuColl reds[] = {GC_ALLREDUCE, GC_REDUCE, GC_REDUCESCATTER};
  static const int ops[] = {ncclSum, ncclAvg, GPU_OP_PREMUL_HOST, GPU_OP_PREMUL_DEV};
  static const ncclDataType_t types[] = {ncclInt8, ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclInt64};
  int k = 0;
  for (int c = 0; c < 3; c++)
    for (int o = 0; o < 4; o++) {
      k = addCase(out, k, max, reds[c], ncclFloat32, ops[o], 0);
      k = addCase(out, k, max, reds[c], ncclInt32, ops[o], 0);
    }
  for (int c = 0; c < 3; c++) k = addCase(out, k, max, reds[c], ncclFloat32, ncclMax, 1);
  for (int t = 0; t < 5; t++) k = addCase(out, k, max, GC_ALLREDUCE, types[t], ncclSum, 0);
  return k;
}

static int listCoreCopy(struct gpuCase* out, int max) {
  static const enum gpuColl copies[] = {GC_BROADCAST, GC_ALLGATHER, GC_ALLTOALL, GC_GATHER, GC_SCATTER};
  int k = 0;
  for (int c = 0; c < 5; c++)
    for (int p = 0; p < 2; p++) k = addCase(out, k, max, copies[c], ncclUint8, ncclSum, p);
  k = addCase(out, k, max, GC_SENDRECV, ncclFloat32, ncclSum, 0);
  k = addCase(out, k, max, GC_MEMALLOC, ncclFloat32, ncclSum, 0);
  return k;
}

int gpuCaseList(struct gpuCase* out, int max, enum gpuCaseSet set) {
  int k = set == GPU_CASES_ALL ? listAll(out, max) : set == GPU_CASES_CORE_REDUCE ? listCoreReduce(out, max)
                                                                                  : listCoreCopy(out, max);
  return k < max ? k : max;
}

void gpuCaseName(const struct gpuCase* c, const char* prefix, char* buf, size_t len) {
  snprintf(buf, len, "%s_%s_%s%s%s_%s", prefix, collNames[c->coll], gpuTypeName(c->type),
           isReduction(c->coll) ? "_" : "", isReduction(c->coll) ? opNames[c->op] : "",
           c->coll == GC_SENDRECV ? "ring" : c->inPlace ? "inplace" : "outofplace");
}

/* ---- data and reference ---- */

static int useWrapRange(const struct gpuCase* c) { return c->type == ncclInt32 && c->op == ncclAvg; }

/* Value range of a step: small integers whose n-rank reduction stays exact in the type. */
static void stepRange(struct gpuStep* s, int n) {
  const struct gpuCase* c = s->c;
  int sgn = gpuTypeIsSigned(c->type);
  if (useWrapRange(c)) { /* int32 average: sums leave int32 and wrap */
    s->lo = -1610612736.0;
    s->span = 3221225473.0;
    return;
  }
  double m = floor(gpuTypeExactMax(c->type) / n);
  if (m > 1000) m = 1000;
  s->lo = sgn ? -m : 0;
  s->span = sgn ? 2 * m + 1 : m + 1;
}

/* Element i of rank r's input.  Products use {-1, 1, 1, 2} so |product| <= 2^n stays exact. */
static double stepVal(const struct gpuStep* s, int r, size_t i) {
  uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)(r + 1) * 0xBF58476D1CE4E5B9ull + s->seed;
  h ^= h >> 29;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 32;
  if (isReduction(s->c->coll) && s->c->op == ncclProd) {
    static const double table[4] = {-1, 1, 1, 2};
    double v = table[h & 3];
    return v < 0 && !gpuTypeIsSigned(s->c->type) ? 1 : v;
  }
  return s->lo + (double)(h % (uint64_t)s->span);
}

/* The PreMulSum scalar of a case: exact products for every input. */
static double premulScalar(const struct gpuCase* c) {
  if (c->op == GPU_OP_PREMUL_HOST) return c->type == ncclFloat32 ? 0.5 : 3;
  return c->type == ncclFloat32 ? 2.0 : -2;
}

/* Two's-complement wrap of an integer to the width of t (the reference of integer sums). */
static double wrapInt(ncclDataType_t t, double v) {
  int64_t x = (int64_t)v;
  switch (t) {
  case ncclInt8: return (int8_t)(uint8_t)x;
  case ncclUint8: return (uint8_t)x;
  case ncclInt32: return (int32_t)(uint32_t)x;
  case ncclUint32: return (uint32_t)x;
  default: return (double)x;
  }
}

/* The reduction over ranks of input element idx; *tol gets the allowed difference (0: exact). */
static double refReduce(const struct gpuRank* R, size_t idx, double* tol) {
  const struct gpuCase* c = R->step.c;
  int op = c->coll == GC_MEMALLOC ? ncclSum : c->op, n = R->n;
  double acc = 0, absSum = 0;
  for (int q = 0; q < n; q++) {
    double v = stepVal(&R->step, q, idx);
    absSum += fabs(v);
    if (op == GPU_OP_PREMUL_HOST || op == GPU_OP_PREMUL_DEV) v *= premulScalar(c);
    if (q == 0) acc = v;
    else if (op == ncclProd) acc *= v;
    else if (op == ncclMax) acc = v > acc ? v : acc;
    else if (op == ncclMin) acc = v < acc ? v : acc;
    else acc += v;
  }
  *tol = 0;
  if (!gpuTypeIsFloat(c->type)) acc = wrapInt(c->type, acc);
  if (op != ncclAvg) return acc;
  if (!gpuTypeIsFloat(c->type)) return trunc(acc / n); /* C integer division: toward zero */
  if (n & (n - 1)) *tol = 1e-6 * (1 + absSum);          /* x * (1/n) is inexact */
  return acc / n;
}

/* Expected element j of rank r's output. */
static double refOut(const struct gpuRank* R, size_t j, double* tol) {
  const struct gpuStep* s = &R->step;
  size_t cnt = s->count, q = cnt ? j / cnt : 0, i = cnt ? j % cnt : 0;
  int r = R->rank, n = R->n;
  *tol = 0;
  switch (s->c->coll) {
  case GC_ALLREDUCE: case GC_REDUCE: case GC_MEMALLOC: return refReduce(R, j, tol);
  case GC_REDUCESCATTER: return refReduce(R, (size_t)r * cnt + j, tol);
  case GC_BROADCAST: return stepVal(s, s->root, j);
  case GC_ALLGATHER: case GC_GATHER: return stepVal(s, (int)q, i);
  case GC_ALLTOALL: return stepVal(s, (int)q, (size_t)r * cnt + i);
  case GC_SCATTER: return stepVal(s, s->root, (size_t)r * cnt + j);
  case GC_SENDRECV: return stepVal(s, (r + n - 1) % n, j);
  default: return NAN;
  }
}

/* ---- phases ---- */

/* Buffers of the step, with NCCL's in-place layouts. */
static void stepLayout(struct gpuRank* R) {
  struct gpuStep* s = &R->step;
  enum gpuColl coll = s->c->coll;
  size_t ts = gpuTypeSize(s->c->type), cnt = s->count, n = (size_t)R->n, mine = (size_t)R->rank * cnt * ts;
  /* Without ncclMemAlloc buffers the case still runs (every rank must call) and then fails. */
  char* a = coll == GC_MEMALLOC && R->mA ? R->mA : R->dA;
  char* b = coll == GC_MEMALLOC && R->mB ? R->mB : R->dB;
  s->sendElems = sendIsBig(coll) ? n * cnt : cnt;
  s->recvElems = recvIsBig(coll) ? n * cnt : cnt;
  s->readSend = !s->c->inPlace;
  if (!s->c->inPlace) {
    s->send = a;
    s->recv = b;
  } else if (coll == GC_ALLGATHER || coll == GC_GATHER) {
    s->recv = b;
    s->send = b + mine;
  } else if (coll == GC_REDUCESCATTER || coll == GC_SCATTER) {
    s->send = a;
    s->recv = a + mine;
  } else {
    s->send = s->recv = a;
  }
}

/* Create the step's PreMulSum op.  A host scalar is overwritten right after: it must have been read. */
static int makeOp(struct gpuRank* R) {
  struct gpuStep* s = &R->step;
  const struct gpuCase* c = s->c;
  s->op = c->coll == GC_MEMALLOC || !isReduction(c->coll) ? ncclSum : (ncclRedOp_t)c->op;
  if (c->op != GPU_OP_PREMUL_HOST && c->op != GPU_OP_PREMUL_DEV) return 1;
  if (!isReduction(c->coll) || c->coll == GC_MEMALLOC) return 1;
  double v = premulScalar(c);
  if (c->op == GPU_OP_PREMUL_HOST) {
    union { float f; int32_t i; } scalar;
    gpuPut(c->type, &scalar, 0, v);
    GNCCL(&R->err, ncclRedOpCreatePreMulSum(&s->op, &scalar, c->type, ncclScalarHostImmediate, R->comm));
    memset(&scalar, 0x7f, sizeof(scalar));
  } else {
    gpuPut(c->type, R->hScalar, 0, v);
    GCUDA(&R->err, cudaMemcpyAsync(R->dScalar, R->hScalar, 4, cudaMemcpyHostToDevice, R->stream));
    GNCCL(&R->err, ncclRedOpCreatePreMulSum(&s->op, R->dScalar, c->type, ncclScalarDevice, R->comm));
  }
  s->opMade = 1;
  return 1;
}

int gpuStepPrepare(struct gpuRank* R, const struct gpuCase* c, int countIdx, uint64_t seed) {
  struct gpuStep* s = &R->step;
  memset(s, 0, sizeof(*s));
  s->c = c;
  s->count = gpuCounts[countIdx];
  s->root = isRooted(c->coll) ? (int)((seed + (uint64_t)countIdx) % (uint64_t)R->n) : 0;
  s->seed = seed * 0x2545F4914F6CDD1Dull + (uint64_t)countIdx;
  stepRange(s, R->n);
  stepLayout(R);
  size_t ts = gpuTypeSize(c->type);
  for (size_t i = 0; i < s->sendElems; i++) gpuPut(c->type, R->hA, i, stepVal(s, R->rank, i));
  if (!c->inPlace || c->coll == GC_ALLGATHER || c->coll == GC_GATHER)
    GCUDA(&R->err, cudaMemsetAsync(s->recv, 0xA5, s->recvElems * ts, R->stream));
  GCUDA(&R->err, cudaMemcpyAsync(s->send, R->hA, s->sendElems * ts, cudaMemcpyHostToDevice, R->stream));
  return makeOp(R) ? 1 : -1;
}

int gpuStepIssue(struct gpuRank* R) {
  const struct gpuStep* s = &R->step;
  ncclDataType_t t = s->c->type;
  ncclComm_t comm = R->comm;
  cudaStream_t st = R->stream;
  size_t cnt = s->count;
  ncclResult_t res = ncclInternalError;
  switch (s->c->coll) {
  case GC_ALLREDUCE: case GC_MEMALLOC: res = ncclAllReduce(s->send, s->recv, cnt, t, s->op, comm, st); break;
  case GC_BROADCAST: res = ncclBroadcast(s->send, s->recv, cnt, t, s->root, comm, st); break;
  case GC_REDUCE: res = ncclReduce(s->send, s->recv, cnt, t, s->op, s->root, comm, st); break;
  case GC_ALLGATHER: res = ncclAllGather(s->send, s->recv, cnt, t, comm, st); break;
  case GC_REDUCESCATTER: res = ncclReduceScatter(s->send, s->recv, cnt, t, s->op, comm, st); break;
  case GC_ALLTOALL: res = ncclAlltoAll(s->send, s->recv, cnt, t, comm, st); break;
  case GC_GATHER: res = ncclGather(s->send, s->recv, cnt, t, s->root, comm, st); break;
  case GC_SCATTER: res = ncclScatter(s->send, s->recv, cnt, t, s->root, comm, st); break;
  case GC_SENDRECV: {
    int next = (R->rank + 1) % R->n, prev = (R->rank + R->n - 1) % R->n;
    ncclResult_t a = ncclGroupStart(), b = ncclSend(s->send, cnt, t, next, comm, st);
    ncclResult_t c = ncclRecv(s->recv, cnt, t, prev, comm, st), d = ncclGroupEnd();
    res = a != ncclSuccess ? a : b != ncclSuccess ? b : c != ncclSuccess ? c : d;
    break;
  }
  default: break;
  }
  if (res != ncclSuccess)
    return gpuErrSet(&R->err, "count %zu: the %s call returned %s (%s)", cnt, collNames[s->c->coll],
                     ncclGetErrorString(res), ncclGetLastError(comm)) - 1;
  return 1;
}

int gpuStepFinish(struct gpuRank* R) {
  struct gpuStep* s = &R->step;
  size_t ts = gpuTypeSize(s->c->type);
  if (s->opMade) {
    s->opMade = 0;
    GNCCL(&R->err, ncclRedOpDestroy(s->op, R->comm));
  }
  GCUDA(&R->err, cudaMemcpyAsync(R->hB, s->recv, s->recvElems * ts, cudaMemcpyDeviceToHost, R->stream));
  if (s->readSend)
    GCUDA(&R->err, cudaMemcpyAsync(R->hC, s->send, s->sendElems * ts, cudaMemcpyDeviceToHost, R->stream));
  return 1;
}

int gpuStepWait(struct gpuRank* R) {
  if (!gpuWaitStream(R->stream, gpuWaitLimit(), &R->err)) {
    char why[sizeof(R->err.msg)];
    snprintf(why, sizeof(why), "%s", R->err.msg);
    R->err.msg[0] = '\0';
    return gpuErrSet(&R->err, "count %zu: %s", R->step.count, why) - 1;
  }
  return 1;
}

int gpuStepCheck(struct gpuRank* R) {
  const struct gpuStep* s = &R->step;
  enum gpuColl coll = s->c->coll;
  ncclDataType_t t = s->c->type;
  int hasResult = !((coll == GC_REDUCE || coll == GC_GATHER) && R->rank != s->root);
  if (coll == GC_MEMALLOC && !R->mA) return gpuErrSet(&R->err, "%s", R->memErr.msg);
  for (size_t j = 0; hasResult && j < s->recvElems; j++) {
    double tol, want = refOut(R, j, &tol), got = gpuGet(t, R->hB, j);
    if (got == want || fabs(got - want) <= tol) continue;
    char root[24] = "";
    if (isRooted(coll)) snprintf(root, sizeof(root), " root %d", s->root);
    return gpuErrSet(&R->err, "count %zu%s: element %zu of %zu is %.17g, want %.17g", s->count, root, j,
                     s->recvElems, got, want);
  }
  if (s->readSend && memcmp(R->hA, R->hC, s->sendElems * gpuTypeSize(t)) != 0)
    return gpuErrSet(&R->err, "count %zu: the send buffer changed (out of place)", s->count);
  return 1;
}

int gpuCaseRun(struct gpuRank* R, const struct gpuCase* c, uint64_t seed) {
  R->err.msg[0] = '\0';
  int ok = 1;
  for (int k = 0; k < GPU_NCOUNTS; k++) {
    int r = gpuStepPrepare(R, c, k, seed);
    if (r > 0) r = gpuStepIssue(R);
    if (r > 0) r = gpuStepFinish(R);
    if (r > 0) r = gpuStepWait(R);
    if (r > 0) r = gpuStepCheck(R);
    if (r < 0) return -1;
    if (r == 0) ok = 0;
  }
  return ok;
}

/* ---- a group over two streams ---- */

/* A host function on the second stream: it holds that stream's later work back for 30 ms. */
static void CUDART_CB holdStream(void* arg) {
  (void)arg;
  usleep(30000);
}

static float twoStreamsVal(int which, int rank, size_t i) {
  return (float)((size_t)(rank + 1 + which) * ((i * (which ? 7u : 3u)) % 1000u));
}

int gpuTwoStreams(struct gpuRank* R) {
  const size_t cnt = GPU_MAX_COUNT, bytes = cnt * sizeof(float);
  float *x = R->dA, *y = (float*)R->dA + cnt, *ox = R->dB, *oy = (float*)R->dB + cnt;
  float *hx = R->hA, *hy = (float*)R->hA + cnt, *gx = R->hB, *gy = (float*)R->hB + cnt;
  cudaStream_t s1 = R->stream, s2 = NULL;
  R->err.msg[0] = '\0';
  if (R->cap < 2 * bytes) return gpuErrSet(&R->err, "buffers of %zu bytes hold less than two inputs", R->cap) - 1;
  for (size_t i = 0; i < cnt; i++) {
    hx[i] = twoStreamsVal(0, R->rank, i);
    hy[i] = twoStreamsVal(1, R->rank, i);
  }
  GCUDA(&R->err, cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  int res = 1;
  cudaError_t ce = cudaMemcpyAsync(x, hx, bytes, cudaMemcpyHostToDevice, s1);
  if (ce == cudaSuccess) ce = cudaMemsetAsync(ox, 0xA5, bytes, s1);
  /* y is written on s2 after a 30 ms hold: the launch must wait for s2. */
  if (ce == cudaSuccess) ce = cudaLaunchHostFunc(s2, holdStream, NULL);
  if (ce == cudaSuccess) ce = cudaMemsetAsync(oy, 0xA5, bytes, s2);
  if (ce == cudaSuccess) ce = cudaMemcpyAsync(y, hy, bytes, cudaMemcpyHostToDevice, s2);
  if (ce != cudaSuccess) res = gpuErrSet(&R->err, "staging the inputs: %s", cudaGetErrorString(ce)) - 1;
  if (res > 0) {
    ncclResult_t a = ncclGroupStart(), b = ncclAllReduce(x, ox, cnt, ncclFloat32, ncclSum, R->comm, s1);
    ncclResult_t c = ncclAllReduce(y, oy, cnt, ncclFloat32, ncclSum, R->comm, s2), d = ncclGroupEnd();
    ncclResult_t r = a != ncclSuccess ? a : b != ncclSuccess ? b : c != ncclSuccess ? c : d;
    if (r != ncclSuccess) res = gpuErrSet(&R->err, "the group returned %s", ncclGetErrorString(r)) - 1;
  }
  /* Each output is read on its own stream: s2's copy must wait for the launch made on s1. */
  if (res > 0) ce = cudaMemcpyAsync(gx, ox, bytes, cudaMemcpyDeviceToHost, s1);
  if (res > 0 && ce == cudaSuccess) ce = cudaMemcpyAsync(gy, oy, bytes, cudaMemcpyDeviceToHost, s2);
  if (res > 0 && ce != cudaSuccess) res = gpuErrSet(&R->err, "reading back: %s", cudaGetErrorString(ce)) - 1;
  if (!gpuWaitStream(s2, gpuWaitLimit(), &R->err) || !gpuWaitStream(s1, gpuWaitLimit(), &R->err)) res = -1;
  for (size_t i = 0; res > 0 && i < cnt; i++) {
    float wx = 0, wy = 0;
    for (int r = 0; r < R->n; r++) {
      wx += twoStreamsVal(0, r, i);
      wy += twoStreamsVal(1, r, i);
    }
    if (gx[i] != wx) res = gpuErrSet(&R->err, "stream 1: element %zu is %.9g, want %.9g", i, gx[i], wx);
    else if (gy[i] != wy) res = gpuErrSet(&R->err, "stream 2: element %zu is %.9g, want %.9g", i, gy[i], wy);
  }
  if (res >= 0) cudaStreamDestroy(s2); /* a hung stream stays: destroying it could wait */
  return res;
}
