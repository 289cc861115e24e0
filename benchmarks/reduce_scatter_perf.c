/* reduce_scatter_perf: ncclReduceScatter; in place, each rank's result is its slot of the input. */
#include "bench.h"

static void counts(size_t count, size_t eltSize, int nRanks, struct benchCounts* c) {
  size_t base = benchChunk(count, eltSize, nRanks);
  *c = (struct benchCounts){.sendCount = base * (size_t)nRanks, .recvCount = base,
                            .paramCount = base, .sendInplace = 0, .recvInplace = base};
}

static double busFactor(int n) { return (double)(n - 1) / n; }

static ncclResult_t run(const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, int rank, int nRanks) {
  (void)root;
  (void)rank;
  (void)nRanks;
  return ncclReduceScatter(send, recv, count, type, op, comm, NULL);
}

static void fillSend(void* send, const struct benchCounts* c, int type, int op, int rank,
                     int nRanks, int root, uint64_t seed) {
  (void)root;
  benchFillGen(send, c->sendCount, type, op, rank, 0, seed, nRanks);
}

static size_t fillExpected(void* expected, const struct benchCounts* c, int type, int op, int rank,
                           int nRanks, int root, uint64_t seed) {
  (void)root;
  benchFillReduced(expected, c->recvCount, type, op, (size_t)rank * c->recvCount, seed, nRanks);
  return c->recvCount;
}

static const struct benchColl coll = {
    .name = "ReduceScatter", .reduces = 1, .rooted = 0, .inplaceChecked = 1,
    .counts = counts, .busFactor = busFactor, .algBytesTimesRanks = 1,
    .run = run, .fillSend = fillSend, .fillExpected = fillExpected,
};

int main(int argc, char** argv) { return benchMain(argc, argv, &coll); }
