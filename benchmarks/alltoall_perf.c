/* alltoall_perf: ncclAlltoAll; chunk p of rank r's input goes to rank p. As in nccl-tests,
 * in-place results are not checked (#wrong N/A). */
#include "bench.h"

static void counts(size_t count, size_t eltSize, int nRanks, struct benchCounts* c) {
  size_t per = benchChunk(count, eltSize, nRanks);
  *c = (struct benchCounts){.sendCount = per * (size_t)nRanks, .recvCount = per * (size_t)nRanks,
                            .paramCount = per};
}

static double busFactor(int n) { return (double)(n - 1) / n; }

static ncclResult_t run(const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, int rank, int nRanks) {
  (void)op;
  (void)root;
  (void)rank;
  (void)nRanks;
  return ncclAlltoAll(send, recv, count, type, comm, NULL);
}

static void fillSend(void* send, const struct benchCounts* c, int type, int op, int rank,
                     int nRanks, int root, uint64_t seed) {
  (void)op;
  (void)root;
  benchFillGen(send, c->sendCount, type, BENCH_OP_NONE, rank, 0, seed, nRanks);
}

static size_t fillExpected(void* expected, const struct benchCounts* c, int type, int op, int rank,
                           int nRanks, int root, uint64_t seed) {
  (void)op;
  (void)root;
  size_t per = c->paramCount;
  for (int k = 0; k < nRanks; k++)
    benchFillGen((char*)expected + (size_t)k * per * benchTypeSize(type), per, type, BENCH_OP_NONE,
                 k, (size_t)rank * per, seed, nRanks);
  return c->recvCount;
}

static const struct benchColl coll = {
    .name = "AlltoAll", .reduces = 0, .rooted = 0, .inplaceChecked = 0,
    .counts = counts, .busFactor = busFactor, .algBytesTimesRanks = 1,
    .run = run, .fillSend = fillSend, .fillExpected = fillExpected,
};

int main(int argc, char** argv) { return benchMain(argc, argv, &coll); }
