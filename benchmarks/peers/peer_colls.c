/* Descriptors of the peer collectives; see peer_colls.h. */
#include <stdlib.h>
#include <string.h>
#include "peer_colls.h"

static void countsAll(size_t count, size_t eltSize, int n, struct benchCounts* c) {
  (void)eltSize;
  (void)n;
  *c = (struct benchCounts){.sendCount = count, .recvCount = count, .paramCount = count};
}
static void countsGather(size_t count, size_t eltSize, int n, struct benchCounts* c) {
  size_t base = benchChunk(count, eltSize, n);
  *c = (struct benchCounts){.sendCount = base, .recvCount = base * (size_t)n, .paramCount = base,
                            .sendInplace = base};
}
static void countsScatter(size_t count, size_t eltSize, int n, struct benchCounts* c) {
  size_t base = benchChunk(count, eltSize, n);
  *c = (struct benchCounts){.sendCount = base * (size_t)n, .recvCount = base, .paramCount = base,
                            .recvInplace = base};
}
static void countsA2a(size_t count, size_t eltSize, int n, struct benchCounts* c) {
  size_t per = benchChunk(count, eltSize, n);
  *c = (struct benchCounts){.sendCount = per * (size_t)n, .recvCount = per * (size_t)n, .paramCount = per};
}
static double twice(int n) { return 2.0 * (n - 1) / n; }
static double once(int n) { return (double)(n - 1) / n; }
static double one(int n) { (void)n; return 1.0; }

static void sendReduce(void* s, const struct benchCounts* c, int t, int op, int r, int n, int root, uint64_t seed) {
  (void)root;
  benchFillGen(s, c->sendCount, t, op, r, 0, seed, n);
}
static void sendCopy(void* s, const struct benchCounts* c, int t, int op, int r, int n, int root, uint64_t seed) {
  (void)op;
  (void)root;
  benchFillGen(s, c->sendCount, t, BENCH_OP_NONE, r, 0, seed, n);
}
static size_t expAllReduce(void* e, const struct benchCounts* c, int t, int op, int r, int n, int root, uint64_t seed) {
  (void)r;
  (void)root;
  benchFillReduced(e, c->recvCount, t, op, 0, seed, n);
  return c->recvCount;
}
static size_t expReduceScatter(void* e, const struct benchCounts* c, int t, int op, int r, int n, int root,
                               uint64_t seed) {
  (void)root;
  benchFillReduced(e, c->recvCount, t, op, (size_t)r * c->recvCount, seed, n);
  return c->recvCount;
}
static size_t expAllGather(void* e, const struct benchCounts* c, int t, int op, int r, int n, int root, uint64_t seed) {
  (void)op;
  (void)r;
  (void)root;
  for (int k = 0; k < n; k++)
    benchFillGen((char*)e + (size_t)k * c->paramCount * benchTypeSize(t), c->paramCount, t, BENCH_OP_NONE, k, 0,
                 seed, n);
  return c->recvCount;
}
static size_t expBroadcast(void* e, const struct benchCounts* c, int t, int op, int r, int n, int root, uint64_t seed) {
  (void)op;
  (void)r;
  benchFillGen(e, c->recvCount, t, BENCH_OP_NONE, root, 0, seed, n);
  return c->recvCount;
}
static size_t expAlltoAll(void* e, const struct benchCounts* c, int t, int op, int r, int n, int root, uint64_t seed) {
  (void)op;
  (void)root;
  for (int k = 0; k < n; k++)
    benchFillGen((char*)e + (size_t)k * c->paramCount * benchTypeSize(t), c->paramCount, t, BENCH_OP_NONE, k,
                 (size_t)r * c->paramCount, seed, n);
  return c->recvCount;
}

static const struct peerColl colls[peerNumColls] = {
    {peerAllReduce, "allreduce", "all_reduce_perf",
     {.name = "AllReduce", .reduces = 1, .inplaceChecked = 1, .counts = countsAll, .busFactor = twice,
      .fillSend = sendReduce, .fillExpected = expAllReduce}},
    {peerAllGather, "allgather", "all_gather_perf",
     {.name = "AllGather", .inplaceChecked = 1, .counts = countsGather, .busFactor = once, .algBytesTimesRanks = 1,
      .fillSend = sendCopy, .fillExpected = expAllGather}},
    {peerBroadcast, "broadcast", "broadcast_perf",
     {.name = "Broadcast", .rooted = 1, .inplaceChecked = 1, .counts = countsAll, .busFactor = one,
      .fillSend = sendCopy, .fillExpected = expBroadcast}},
    {peerReduceScatter, "reduce_scatter", "reduce_scatter_perf",
     {.name = "ReduceScatter", .reduces = 1, .inplaceChecked = 1, .counts = countsScatter, .busFactor = once,
      .algBytesTimesRanks = 1, .fillSend = sendReduce, .fillExpected = expReduceScatter}},
    {peerAlltoAll, "alltoall", "alltoall_perf",
     {.name = "AlltoAll", .inplaceChecked = 0, .counts = countsA2a, .busFactor = once, .algBytesTimesRanks = 1,
      .fillSend = sendCopy, .fillExpected = expAlltoAll}},
};

const struct peerColl* peerCollByArg(const char* arg) {
  for (int i = 0; i < peerNumColls; i++)
    if (arg && strcmp(arg, colls[i].arg) == 0) return &colls[i];
  fprintf(stderr, "want a collective first: allreduce, allgather, broadcast, reduce_scatter or alltoall\n");
  return NULL;
}

int peerEnvRank(int* rank, int* size) {
  const char* r = getenv("RANK");
  const char* s = getenv("WORLD_SIZE");
  if (!r || !s) return -1;
  char *e1 = NULL, *e2 = NULL;
  long rv = strtol(r, &e1, 10), sv = strtol(s, &e2, 10);
  if (*e1 || *e2 || sv < 1 || rv < 0 || rv >= sv) return -1;
  *rank = (int)rv;
  *size = (int)sv;
  return 0;
}
