/* all_gather_perf: ncclAllGather; in place, each rank's input is its slot of the output. */
#include "bench.h"

static void counts(size_t count, size_t eltSize, int nRanks, struct benchCounts* c) {
  size_t base = benchChunk(count, eltSize, nRanks);
  *c = (struct benchCounts){.sendCount = base, .recvCount = base * (size_t)nRanks,
                            .paramCount = base, .sendInplace = base, .recvInplace = 0};
}

static double busFactor(int n) { return (double)(n - 1) / n; }

static ncclResult_t run(const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, int rank, int nRanks) {
  (void)op;
  (void)root;
  (void)rank;
  (void)nRanks;
  return ncclAllGather(send, recv, count, type, comm, NULL);
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
  (void)rank;
  (void)root;
  for (int k = 0; k < nRanks; k++)
    benchFillGen((char*)expected + (size_t)k * c->paramCount * benchTypeSize(type), c->paramCount,
                 type, BENCH_OP_NONE, k, 0, seed, nRanks);
  return c->recvCount;
}

static const struct benchColl coll = {
    .name = "AllGather", .reduces = 0, .rooted = 0, .inplaceChecked = 1,
    .counts = counts, .busFactor = busFactor, .algBytesTimesRanks = 1,
    .run = run, .fillSend = fillSend, .fillExpected = fillExpected,
};

int main(int argc, char** argv) { return benchMain(argc, argv, &coll); }
