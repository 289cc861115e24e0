/* all_reduce_perf: ncclAllReduce, measured and checked like nccl-tests' all_reduce_perf. */
#include "bench.h"

static void counts(size_t count, size_t eltSize, int nRanks, struct benchCounts* c) {
  (void)eltSize;
  (void)nRanks;
  *c = (struct benchCounts){.sendCount = count, .recvCount = count, .paramCount = count};
}

/* Ring AllReduce moves 2(n-1)/n of the data over each link. */
static double busFactor(int n) { return 2.0 * (n - 1) / n; }

static ncclResult_t run(const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, int rank, int nRanks) {
  (void)root;
  (void)rank;
  (void)nRanks;
  return ncclAllReduce(send, recv, count, type, op, comm, NULL);
}

static void fillSend(void* send, const struct benchCounts* c, int type, int op, int rank,
                     int nRanks, int root, uint64_t seed) {
  (void)root;
  benchFillGen(send, c->sendCount, type, op, rank, 0, seed, nRanks);
}

static size_t fillExpected(void* expected, const struct benchCounts* c, int type, int op, int rank,
                           int nRanks, int root, uint64_t seed) {
  (void)rank;
  (void)root;
  benchFillReduced(expected, c->recvCount, type, op, 0, seed, nRanks);
  return c->recvCount;
}

static const struct benchColl coll = {
    .name = "AllReduce", .reduces = 1, .rooted = 0, .inplaceChecked = 1,
    .counts = counts, .busFactor = busFactor, .algBytesTimesRanks = 0,
    .run = run, .fillSend = fillSend, .fillExpected = fillExpected,
};

int main(int argc, char** argv) { return benchMain(argc, argv, &coll); }
