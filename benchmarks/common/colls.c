/* The collectives the perf tools measure, one descriptor each: element counts and in-place
 * layout (nccl-tests' getCollByteCount), bus-bandwidth factor, the NCCL call, and the test data
 * (inputs and what each rank must hold afterwards). Every <coll>_perf main() and failover_loop
 * use these, so a collective is described once. */
#include <string.h>
#include "bench.h"

/* ---- counts: nccl-tests' per-collective rounding and in-place offsets */
static void countsSame(size_t count, size_t eltSize, int nRanks, struct benchCounts* c) {
  (void)eltSize;
  (void)nRanks;
  *c = (struct benchCounts){.sendCount = count, .recvCount = count, .paramCount = count};
}

/* AllGather, Gather: each rank sends one chunk; in place, its chunk is its slot of the output. */
static void countsGathered(size_t count, size_t eltSize, int nRanks, struct benchCounts* c) {
  size_t base = benchChunk(count, eltSize, nRanks);
  *c = (struct benchCounts){.sendCount = base, .recvCount = base * (size_t)nRanks,
                            .paramCount = base, .sendInplace = base, .recvInplace = 0};
}

/* ReduceScatter, Scatter: each rank receives one chunk; in place, its slot of the input. */
static void countsScattered(size_t count, size_t eltSize, int nRanks, struct benchCounts* c) {
  size_t base = benchChunk(count, eltSize, nRanks);
  *c = (struct benchCounts){.sendCount = base * (size_t)nRanks, .recvCount = base,
                            .paramCount = base, .sendInplace = 0, .recvInplace = base};
}

static void countsAlltoAll(size_t count, size_t eltSize, int nRanks, struct benchCounts* c) {
  size_t per = benchChunk(count, eltSize, nRanks);
  *c = (struct benchCounts){.sendCount = per * (size_t)nRanks, .recvCount = per * (size_t)nRanks,
                            .paramCount = per};
}

/* ---- bus-bandwidth factors (nccl-tests' table) */
static double factorAllReduce(int n) { return 2.0 * (n - 1) / n; }  /* ring: 2(n-1)/n per link */
static double factorSpread(int n) { return (double)(n - 1) / n; }
static double factorOne(int n) {
  (void)n;
  return 1.0;
}

/* ---- the NCCL calls */
static ncclResult_t runAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                 int root, ncclComm_t comm, int rank, int nRanks, cudaStream_t st) {
  (void)root, (void)rank, (void)nRanks;
  return ncclAllReduce(s, r, n, t, op, comm, st);
}
static ncclResult_t runAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                 int root, ncclComm_t comm, int rank, int nRanks, cudaStream_t st) {
  (void)op, (void)root, (void)rank, (void)nRanks;
  return ncclAllGather(s, r, n, t, comm, st);
}
static ncclResult_t runBroadcast(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                 int root, ncclComm_t comm, int rank, int nRanks, cudaStream_t st) {
  (void)op, (void)rank, (void)nRanks;
  return ncclBroadcast(s, r, n, t, root, comm, st);
}
static ncclResult_t runReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                              int root, ncclComm_t comm, int rank, int nRanks, cudaStream_t st) {
  (void)rank, (void)nRanks;
  return ncclReduce(s, r, n, t, op, root, comm, st);
}
static ncclResult_t runReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t,
                                     ncclRedOp_t op, int root, ncclComm_t comm, int rank,
                                     int nRanks, cudaStream_t st) {
  (void)root, (void)rank, (void)nRanks;
  return ncclReduceScatter(s, r, n, t, op, comm, st);
}
static ncclResult_t runAlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                int root, ncclComm_t comm, int rank, int nRanks, cudaStream_t st) {
  (void)op, (void)root, (void)rank, (void)nRanks;
  return ncclAlltoAll(s, r, n, t, comm, st);
}
static ncclResult_t runGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                              int root, ncclComm_t comm, int rank, int nRanks, cudaStream_t st) {
  (void)op, (void)rank, (void)nRanks;
  return ncclGather(s, r, n, t, root, comm, st);
}
static ncclResult_t runScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                               int root, ncclComm_t comm, int rank, int nRanks, cudaStream_t st) {
  (void)op, (void)rank, (void)nRanks;
  return ncclScatter(s, r, n, t, root, comm, st);
}
/* Each rank sends to rank+1 and receives from rank-1 in one group. */
static ncclResult_t runSendRecv(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                int root, ncclComm_t comm, int rank, int nRanks, cudaStream_t st) {
  (void)op, (void)root;
  ncclResult_t g = ncclGroupStart();
  if (g != ncclSuccess) return g;
  ncclResult_t res = ncclSend(s, n, t, (rank + 1) % nRanks, comm, st);
  if (res == ncclSuccess) res = ncclRecv(r, n, t, (rank - 1 + nRanks) % nRanks, comm, st);
  g = ncclGroupEnd();
  return res != ncclSuccess ? res : g;
}

/* ---- inputs: reducing collectives use the op's value range, the others plain copies */
static void sendReducing(void* send, const struct benchCounts* c, int type, int op, int rank,
                         int nRanks, int root, uint64_t seed) {
  (void)root;
  benchFillGen(send, c->sendCount, type, op, rank, 0, seed, nRanks);
}
static void sendCopy(void* send, const struct benchCounts* c, int type, int op, int rank,
                     int nRanks, int root, uint64_t seed) {
  (void)op, (void)root;
  benchFillGen(send, c->sendCount, type, BENCH_OP_NONE, rank, 0, seed, nRanks);
}

/* ---- expected results of `rank` */
static size_t expAllReduce(void* e, const struct benchCounts* c, int type, int op, int rank,
                           int nRanks, int root, uint64_t seed) {
  (void)rank, (void)root;
  benchFillReduced(e, c->recvCount, type, op, 0, seed, nRanks);
  return c->recvCount;
}
static size_t expReduce(void* e, const struct benchCounts* c, int type, int op, int rank,
                        int nRanks, int root, uint64_t seed) {
  if (rank != root) return 0;  /* only the root's output is defined */
  benchFillReduced(e, c->recvCount, type, op, 0, seed, nRanks);
  return c->recvCount;
}
static size_t expReduceScatter(void* e, const struct benchCounts* c, int type, int op, int rank,
                               int nRanks, int root, uint64_t seed) {
  (void)root;
  benchFillReduced(e, c->recvCount, type, op, (size_t)rank * c->recvCount, seed, nRanks);
  return c->recvCount;
}
/* Every rank's input, in rank order (AllGather everywhere, Gather at the root). */
static size_t expConcat(void* e, const struct benchCounts* c, int type, int nRanks, uint64_t seed) {
  for (int k = 0; k < nRanks; k++)
    benchFillGen((char*)e + (size_t)k * c->paramCount * benchTypeSize(type), c->paramCount, type,
                 BENCH_OP_NONE, k, 0, seed, nRanks);
  return c->recvCount;
}
static size_t expAllGather(void* e, const struct benchCounts* c, int type, int op, int rank,
                           int nRanks, int root, uint64_t seed) {
  (void)op, (void)rank, (void)root;
  return expConcat(e, c, type, nRanks, seed);
}
static size_t expGather(void* e, const struct benchCounts* c, int type, int op, int rank,
                        int nRanks, int root, uint64_t seed) {
  (void)op;
  return rank == root ? expConcat(e, c, type, nRanks, seed) : 0;
}
/* Every rank filled its own input, so a rank that kept its data instead of the root's shows. */
static size_t expBroadcast(void* e, const struct benchCounts* c, int type, int op, int rank,
                           int nRanks, int root, uint64_t seed) {
  (void)op, (void)rank;
  benchFillGen(e, c->recvCount, type, BENCH_OP_NONE, root, 0, seed, nRanks);
  return c->recvCount;
}
static size_t expScatter(void* e, const struct benchCounts* c, int type, int op, int rank,
                         int nRanks, int root, uint64_t seed) {
  (void)op;
  benchFillGen(e, c->recvCount, type, BENCH_OP_NONE, root, (size_t)rank * c->recvCount, seed,
               nRanks);
  return c->recvCount;
}
/* Chunk k comes from rank k: the part of its input meant for `rank`. */
static size_t expAlltoAll(void* e, const struct benchCounts* c, int type, int op, int rank,
                          int nRanks, int root, uint64_t seed) {
  (void)op, (void)root;
  size_t per = c->paramCount;
  for (int k = 0; k < nRanks; k++)
    benchFillGen((char*)e + (size_t)k * per * benchTypeSize(type), per, type, BENCH_OP_NONE, k,
                 (size_t)rank * per, seed, nRanks);
  return c->recvCount;
}
static size_t expSendRecv(void* e, const struct benchCounts* c, int type, int op, int rank,
                          int nRanks, int root, uint64_t seed) {
  (void)op, (void)root;
  benchFillGen(e, c->recvCount, type, BENCH_OP_NONE, (rank - 1 + nRanks) % nRanks, 0, seed, nRanks);
  return c->recvCount;
}

/* In-place AlltoAll and SendRecv results are not checked (#wrong N/A), as in nccl-tests. */
const struct benchColl benchCollAllReduce = {
    .name = "AllReduce", .key = "all_reduce", .reduces = 1, .inplaceChecked = 1,
    .counts = countsSame, .busFactor = factorAllReduce, .run = runAllReduce,
    .fillSend = sendReducing, .fillExpected = expAllReduce};
const struct benchColl benchCollAllGather = {
    .name = "AllGather", .key = "all_gather", .inplaceChecked = 1, .counts = countsGathered,
    .busFactor = factorSpread, .algBytesTimesRanks = 1, .run = runAllGather, .fillSend = sendCopy,
    .fillExpected = expAllGather};
const struct benchColl benchCollBroadcast = {
    .name = "Broadcast", .key = "broadcast", .rooted = 1, .inplaceChecked = 1,
    .counts = countsSame, .busFactor = factorOne, .run = runBroadcast, .fillSend = sendCopy,
    .fillExpected = expBroadcast};
const struct benchColl benchCollReduce = {
    .name = "Reduce", .key = "reduce", .reduces = 1, .rooted = 1, .inplaceChecked = 1,
    .counts = countsSame, .busFactor = factorOne, .run = runReduce, .fillSend = sendReducing,
    .fillExpected = expReduce};
const struct benchColl benchCollReduceScatter = {
    .name = "ReduceScatter", .key = "reduce_scatter", .reduces = 1, .inplaceChecked = 1,
    .counts = countsScattered, .busFactor = factorSpread, .algBytesTimesRanks = 1,
    .run = runReduceScatter, .fillSend = sendReducing, .fillExpected = expReduceScatter};
const struct benchColl benchCollSendRecv = {
    .name = "SendRecv", .key = "sendrecv", .inplaceChecked = 0, .counts = countsSame,
    .busFactor = factorOne, .run = runSendRecv, .fillSend = sendCopy, .fillExpected = expSendRecv};
const struct benchColl benchCollAlltoAll = {
    .name = "AlltoAll", .key = "alltoall", .inplaceChecked = 0, .counts = countsAlltoAll,
    .busFactor = factorSpread, .algBytesTimesRanks = 1, .run = runAlltoAll, .fillSend = sendCopy,
    .fillExpected = expAlltoAll};
const struct benchColl benchCollGather = {
    .name = "Gather", .key = "gather", .rooted = 1, .inplaceChecked = 1, .counts = countsGathered,
    .busFactor = factorSpread, .algBytesTimesRanks = 1, .run = runGather, .fillSend = sendCopy,
    .fillExpected = expGather};
const struct benchColl benchCollScatter = {
    .name = "Scatter", .key = "scatter", .rooted = 1, .inplaceChecked = 1,
    .counts = countsScattered, .busFactor = factorSpread, .algBytesTimesRanks = 1,
    .run = runScatter, .fillSend = sendCopy, .fillExpected = expScatter};

static const struct benchColl* const all[] = {
    &benchCollAllReduce, &benchCollAllGather, &benchCollBroadcast, &benchCollReduce,
    &benchCollReduceScatter, &benchCollSendRecv, &benchCollAlltoAll, &benchCollGather,
    &benchCollScatter};

const struct benchColl* benchCollByKey(const char* key) {
  for (size_t i = 0; key && i < sizeof(all) / sizeof(all[0]); i++)
    if (strcmp(all[i]->key, key) == 0) return all[i];
  return NULL;
}
