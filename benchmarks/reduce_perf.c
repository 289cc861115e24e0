/* reduce_perf: ncclReduce to -r root; only the root's output is defined and checked. */
#include "bench.h"

static void counts(size_t count, size_t eltSize, int nRanks, struct benchCounts* c) {
  (void)eltSize;
  (void)nRanks;
  *c = (struct benchCounts){.sendCount = count, .recvCount = count, .paramCount = count};
}

static double busFactor(int n) {
  (void)n;
  return 1.0;
}

static ncclResult_t run(const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, int rank, int nRanks) {
  (void)rank;
  (void)nRanks;
  return ncclReduce(send, recv, count, type, op, root, comm, NULL);
}

static void fillSend(void* send, const struct benchCounts* c, int type, int op, int rank,
                     int nRanks, int root, uint64_t seed) {
  (void)root;
  benchFillGen(send, c->sendCount, type, op, rank, 0, seed, nRanks);
}

static size_t fillExpected(void* expected, const struct benchCounts* c, int type, int op, int rank,
                           int nRanks, int root, uint64_t seed) {
  if (rank != root) return 0;
  benchFillReduced(expected, c->recvCount, type, op, 0, seed, nRanks);
  return c->recvCount;
}

static const struct benchColl coll = {
    .name = "Reduce", .reduces = 1, .rooted = 1, .inplaceChecked = 1,
    .counts = counts, .busFactor = busFactor, .algBytesTimesRanks = 0,
    .run = run, .fillSend = fillSend, .fillExpected = fillExpected,
};

int main(int argc, char** argv) { return benchMain(argc, argv, &coll); }
