/* sendrecv_perf: each rank sends to rank+1 and receives from rank-1 in one group. As in
 * nccl-tests, in-place results are not checked (#wrong N/A). */
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
  (void)root;
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  ncclResult_t s = ncclSend(send, count, type, (rank + 1) % nRanks, comm, NULL);
  if (s == ncclSuccess) s = ncclRecv(recv, count, type, (rank - 1 + nRanks) % nRanks, comm, NULL);
  r = ncclGroupEnd();
  return s != ncclSuccess ? s : r;
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
  benchFillGen(expected, c->recvCount, type, BENCH_OP_NONE, (rank - 1 + nRanks) % nRanks, 0, seed,
               nRanks);
  return c->recvCount;
}

static const struct benchColl coll = {
    .name = "SendRecv", .reduces = 0, .rooted = 0, .inplaceChecked = 0,
    .counts = counts, .busFactor = busFactor, .algBytesTimesRanks = 0,
    .run = run, .fillSend = fillSend, .fillExpected = fillExpected,
};

int main(int argc, char** argv) { return benchMain(argc, argv, &coll); }
