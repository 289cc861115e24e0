/* scatter_perf: ncclScatter from -r root; in place, each rank's output is its slot of the input. */
#include "bench.h"

static void counts(size_t count, size_t eltSize, int nRanks, struct benchCounts* c) {
  size_t base = benchChunk(count, eltSize, nRanks);
  *c = (struct benchCounts){.sendCount = base * (size_t)nRanks, .recvCount = base,
                            .paramCount = base, .sendInplace = 0, .recvInplace = base};
}

static double busFactor(int n) { return (double)(n - 1) / n; }

static ncclResult_t run(const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, int rank, int nRanks) {
  (void)op;
  (void)rank;
  (void)nRanks;
  return ncclScatter(send, recv, count, type, root, comm, NULL);
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
  benchFillGen(expected, c->recvCount, type, BENCH_OP_NONE, root, (size_t)rank * c->recvCount, seed,
               nRanks);
  return c->recvCount;
}

static const struct benchColl coll = {
    .name = "Scatter", .reduces = 0, .rooted = 1, .inplaceChecked = 1,
    .counts = counts, .busFactor = busFactor, .algBytesTimesRanks = 1,
    .run = run, .fillSend = fillSend, .fillExpected = fillExpected,
};

int main(int argc, char** argv) { return benchMain(argc, argv, &coll); }
