/* The sweep of a peer benchmark: the same sizes, warm-up, timing, checks and table as the Mend
 * tools (benchmarks/common), over whatever library the backend wraps. */
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "peer_colls.h"

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct sweep {
  const struct peerColl* pc;   /* the collective */
  struct peerBackend* be;      /* the library */
  const struct benchOpts* o;   /* options */
  char* send;                  /* send buffer */
  char* recv;                  /* receive buffer */
  char* expected;              /* expected results */
  size_t bytes;                /* usable bytes of each buffer */
  int errors;                  /* checks that found wrong values here */
  double bwSum;                /* sum of printed bus bandwidths */
  int bwCount;                 /* how many */
  uint64_t rep;                /* check seed */
};

static int call(struct sweep* s, int type, int op, const struct benchCounts* c, int inplace, int iter) {
  size_t esz = benchTypeSize(type);
  size_t total = (c->sendCount > c->recvCount ? c->sendCount : c->recvCount) * esz;
  size_t steps = total ? s->bytes / total : 1;
  size_t shift = total * ((size_t)iter % (steps ? steps : 1));
  char* recv = s->recv + shift;
  char* send = inplace ? recv + c->sendInplace * (size_t)s->be->rank * esz : s->send + shift;
  return s->be->run(s->be->ctx, s->pc, send, recv, c, type, op, s->o->root, inplace);
}

static int64_t checkOnce(struct sweep* s, int type, int op, const struct benchCounts* c, int inplace, int* rc) {
  const struct benchColl* d = &s->pc->desc;
  size_t esz = benchTypeSize(type);
  uint64_t seed = ++s->rep;
  memset(s->recv, 0, c->recvCount * esz);
  char* send = inplace ? s->recv + c->sendInplace * (size_t)s->be->rank * esz : s->send;
  d->fillSend(send, c, type, op, s->be->rank, s->be->size, s->o->root, seed);
  *rc = call(s, type, op, c, inplace, 0);
  size_t n = d->fillExpected(s->expected, c, type, op, s->be->rank, s->be->size, s->o->root, seed);
  size_t off = s->be->resultOffset(s->be->ctx, s->pc, c, inplace);
  return benchCompare(s->recv + off * esz, s->expected, n, type, op, s->be->size);
}

/* Out-of-place (inplace 0) or in-place (1) measurement of one size: prints its four columns. */
static int measure(struct sweep* s, int type, int op, const struct benchCounts* c, int inplace) {
  const struct benchOpts* o = s->o;
  int rc = call(s, type, op, c, inplace, 0);
  if (rc == 0) rc = s->be->barrier(s->be->ctx);
  double t0 = nowSec();
  for (int i = 0; i < o->iters && rc == 0; i++) rc = call(s, type, op, c, inplace, i);
  double sec = (nowSec() - t0) / o->iters;
  if (rc == 0) rc = s->be->sumDoubles(s->be->ctx, &sec, 1);
  sec /= s->be->size;
  double wrong = 0;
  int report = o->check > 0 && (!inplace || s->pc->desc.inplaceChecked);
  for (int k = 0; k < o->check && rc == 0; k++) {
    wrong = (double)checkOnce(s, type, op, c, inplace, &rc);
    if (wrong && report) s->errors++;
    if (rc == 0) rc = s->be->sumDoubles(s->be->ctx, &wrong, 1);
    if (wrong > 0) break;
  }
  if (rc != 0) return rc;
  double alg, bus;
  benchComputeBw(&s->pc->desc, c->paramCount, benchTypeSize(type), sec, s->be->size, &alg, &bus);
  s->bwSum += bus;
  s->bwCount++;
  if (s->be->rank == 0) benchPrintRowBody(o, sec * 1e6, alg, bus, report, (int64_t)wrong, NULL);
  return 0;
}

static int sweepSizes(struct sweep* s, int type, int op) {
  const struct benchOpts* o = s->o;
  size_t esz = benchTypeSize(type);
  int rc = 0;
  for (int w = 0; w < 2 && rc == 0; w++) {  /* warm up at the largest and the smallest size */
    struct benchCounts c;
    s->pc->desc.counts((w ? o->minBytes : o->maxBytes) / esz, esz, s->be->size, &c);
    for (int i = 0; i < o->warmupIters && rc == 0; i++) rc = call(s, type, op, &c, 0, i);
  }
  for (size_t size = o->minBytes; size <= o->maxBytes && rc == 0;) {
    struct benchCounts c;
    s->pc->desc.counts(size / esz, esz, s->be->size, &c);
    if (s->be->rank == 0)
      benchPrintRowStart((c.sendCount > c.recvCount ? c.sendCount : c.recvCount) * esz, c.paramCount,
                         benchTypeName(type), s->pc->desc.reduces ? benchOpName(op) : "none",
                         s->pc->desc.rooted ? o->root : -1);
    rc = measure(s, type, op, &c, 0);
    if (rc == 0) rc = measure(s, type, op, &c, 1);
    if (s->be->rank == 0) benchPrintRowEnd(o);
    size_t next = o->stepFactor > 1 ? size * o->stepFactor : size + o->stepBytes;
    if (next <= size) break;
    size = next;
  }
  return rc;
}

static void preamble(const struct benchOpts* o, const char* prog, struct peerBackend* be) {
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  int factor = o->stepFactor > 1;
  printf("# Peer benchmark %s (nccl-tests format): %s\n", prog, be->label);
  printf("# Collective test starting: %s\n", prog);
  printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
         "agg iters: 1 validation: %d graph: 0 unalign: 0\n#\n# Using devices\n", o->minBytes,
         o->maxBytes, factor ? o->stepFactor : o->stepBytes, factor ? "factor" : "bytes",
         o->warmupIters, o->iters, o->check);
  for (int r = 0; r < be->size; r++)
    printf("#  Rank %2d Group  0 Pid %6s on %10s device -1 [host] %s\n", r, "-", host, be->label);
}

int peerMain(int argc, char** argv, const struct peerColl* pc, struct peerBackend* be) {
  struct benchOpts o;
  benchOptsDefaults(&o);
  int prc = benchParseArgs(&o, argc, argv, NULL);
  if (prc == benchHelp) return 0;
  if (prc != benchOk) return benchUsage;
  if (o.nThreads != 1 || o.nGpus != 1 || o.aggIters != 1) {
    fprintf(stderr, "peers run one rank per process: -t, -g and -m must be 1\n");
    return benchUsage;
  }
  int type = o.type < 0 ? ncclFloat : o.type, op = pc->desc.reduces ? (o.op < 0 ? 0 : o.op) : BENCH_OP_NONE;
  if (!be->supports(be->ctx, pc, type, op)) return benchUsage;
  if (pc->desc.rooted && o.root >= be->size) {
    fprintf(stderr, "Invalid root %d for %d ranks\n", o.root, be->size);
    return benchUsage;
  }
  struct sweep s = {.pc = pc, .be = be, .o = &o, .bytes = o.maxBytes + 64};
  s.send = aligned_alloc(4096, (s.bytes + 4095) / 4096 * 4096);
  s.recv = aligned_alloc(4096, (s.bytes + 4095) / 4096 * 4096);
  s.expected = malloc(s.bytes);
  if (!s.send || !s.recv || !s.expected) return benchFailed;
  memset(s.send, 0, s.bytes);
  memset(s.recv, 0, s.bytes);
  const char* prog = basename(argv[0]);
  if (be->rank == 0) {
    preamble(&o, prog, be);
    benchPrintTableHeader(&o);
  }
  int rc = sweepSizes(&s, type, op);
  double errs = s.errors;
  if (rc == 0) rc = be->sumDoubles(be->ctx, &errs, 1);
  double avg = s.bwCount ? s.bwSum / s.bwCount : 0.0;
  if (be->rank == 0 && rc == 0) benchPrintFooter(&o, (int)errs, avg, prog);
  free(s.send);
  free(s.recv);
  free(s.expected);
  if (rc != 0) fprintf(stderr, "%s: the peer library failed (%d)\n", prog, rc);
  return rc != 0 || errs > 0 ? benchFailed : benchOk;
}
