/* broadcast_perf: ncclBroadcast from -r root; every rank fills its own input, so a rank that
 * kept its own data instead of the root's shows up as wrong. */
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
  (void)op;
  (void)rank;
  (void)nRanks;
  return ncclBroadcast(send, recv, count, type, root, comm, NULL);
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
  benchFillGen(expected, c->recvCount, type, BENCH_OP_NONE, root, 0, seed, nRanks);
  return c->recvCount;
}

static const struct benchColl coll = {
    .name = "Broadcast", .reduces = 0, .rooted = 1, .inplaceChecked = 1,
    .counts = counts, .busFactor = busFactor, .algBytesTimesRanks = 0,
    .run = run, .fillSend = fillSend, .fillExpected = fillExpected,
};

int main(int argc, char** argv) { return benchMain(argc, argv, &coll); }
