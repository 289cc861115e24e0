/* failover_loop: one collective in a loop, every iteration timed and checked, for failover_perf.
 *
 *   failover_loop --op all_reduce --size 4M (--iters N | --seconds S) [--warmup W] [--type float]
 *                 [--timeout S]
 *
 * One rank per process, started by an environment launch (RANK, WORLD_SIZE: mend-run, the
 * testbed). Before every iteration the ranks meet on the perf tools' control plane (TCP over the
 * management network, never through the library under test) and agree whether to go on, so the
 * iterations start together and all ranks stop at the same one. Each iteration gets new inputs
 * (small integers, exact in every type) and a poisoned output, so a lost, stale or duplicated
 * chunk shows as wrong elements. Every rank prints, line-buffered, with CLOCK_MONOTONIC times:
 *   # failover_loop op=<key> ranks=<n> rank=<r> bytes=<size column> count=<c> algbytes=<b> busfactor=<f>
 *   start t=<s>                                  (after the warm-up)
 *   iter=<i> t0=<s> t1=<s> wrong=<elements>      (one per timed iteration)
 *   error iter=<i> t=<s> result=<ncclResult_t> <error string>   (then it exits 1)
 *   done iters=<n> wrong=<total>
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench.h"

struct loopOpts {
  const struct benchColl* coll;  /* --op */
  size_t size;                   /* --size: bytes, as nccl-tests' -b */
  int iters;                     /* --iters: timed iterations (0: use --seconds) */
  double seconds;                /* --seconds: run time of the timed loop (0: use --iters) */
  int warmup;                    /* --warmup: untimed, unchecked iterations */
  int type;                      /* --type: ncclDataType_t */
  int timeout;                   /* --timeout: bound on every control-plane wait, seconds */
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE* f) {
  fprintf(f, "usage: failover_loop --op all_reduce|all_gather|reduce_scatter|broadcast|reduce|"
          "sendrecv|alltoall|gather|scatter --size BYTES (--iters N | --seconds S) [--warmup W] "
          "[--type float] [--timeout S]\n");
}

static const struct option longOpts[] = {
    {"op", required_argument, 0, 'o'},     {"size", required_argument, 0, 's'},
    {"iters", required_argument, 0, 'n'},  {"seconds", required_argument, 0, 'S'},
    {"warmup", required_argument, 0, 'w'}, {"type", required_argument, 0, 'd'},
    {"timeout", required_argument, 0, 'T'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};

/* One option's value; 0 if valid. */
static int parseOne(struct loopOpts* o, int c, const char* a) {
  char* end = NULL;
  switch (c) {
    case 'o': o->coll = benchCollByKey(a); return o->coll ? 0 : -1;
    case 's': return benchParseSize(a, &o->size);
    case 'n': o->iters = (int)strtol(a, &end, 10); return *end || o->iters < 1 ? -1 : 0;
    case 'S': o->seconds = strtod(a, &end); return *end || !(o->seconds > 0) ? -1 : 0;
    case 'w': o->warmup = (int)strtol(a, &end, 10); return *end || o->warmup < 0 ? -1 : 0;
    case 'd': o->type = benchTypeByName(a); return o->type < 0 ? -1 : 0;
    case 'T': o->timeout = (int)strtol(a, &end, 10); return *end || o->timeout < 1 ? -1 : 0;
    default: return -1;
  }
}

static int parseArgs(int argc, char** argv, struct loopOpts* o) {
  *o = (struct loopOpts){.coll = &benchCollAllReduce, .size = 1 << 20, .warmup = 2,
                         .type = ncclFloat, .timeout = 600};
  int c, idx = 0;
  while ((c = getopt_long(argc, argv, "h", longOpts, &idx)) != -1) {
    if (c == 'h') {
      usage(stdout);
      exit(0);
    }
    if (c == '?') {
      usage(stderr);
      return -1;
    }
    if (parseOne(o, c, optarg) != 0) {
      fprintf(stderr, "failover_loop: invalid value '%s' for --%s\n", optarg, longOpts[idx].name);
      usage(stderr);
      return -1;
    }
  }
  if (optind < argc || (o->iters > 0) == (o->seconds > 0)) {
    fprintf(stderr, "failover_loop: give exactly one of --iters and --seconds\n");
    usage(stderr);
    return -1;
  }
  return 0;
}

/* Everything one rank holds. */
struct loopRank {
  struct loopOpts o;       /* options */
  struct benchWorld w;     /* processes (one rank each) */
  ncclComm_t comm;         /* communicator */
  struct benchCounts c;    /* element counts of one call */
  size_t eltSize;          /* bytes per element */
  char* send;              /* send buffer */
  char* recv;              /* receive buffer */
  char* expected;          /* what this rank must hold after a call */
};

static void fail(const char* what) {
  fprintf(stderr, "failover_loop: %s\n", what);
  fflush(stdout);
  exit(benchFailed);
}

static void setup(struct loopRank* L) {
  ncclUniqueId id;
  const char* commId = getenv("NCCL_COMM_ID");
  int envId = commId && *commId;  /* then every rank derives the same id from that address */
  if ((envId || L->w.proc == 0) && ncclGetUniqueId(&id) != ncclSuccess) fail("ncclGetUniqueId failed");
  if (!envId && benchCtrlBcast(&id, sizeof(id)) != 0) fail("could not share the unique id");
  ncclResult_t res = ncclCommInitRank(&L->comm, L->w.nProcs, id, L->w.proc);
  if (res != ncclSuccess) {
    fprintf(stderr, "failover_loop: ncclCommInitRank: %s\n", ncclGetErrorString(res));
    fail("communicator init failed");
  }
  L->eltSize = benchTypeSize(L->o.type);
  L->o.coll->counts(L->o.size / L->eltSize, L->eltSize, L->w.nProcs, &L->c);
  size_t big = (L->c.sendCount > L->c.recvCount ? L->c.sendCount : L->c.recvCount) * L->eltSize;
  size_t bytes = (big + 4095) / 4096 * 4096 + 4096;
  L->send = aligned_alloc(4096, bytes);
  L->recv = aligned_alloc(4096, bytes);
  L->expected = malloc(bytes);
  if (!L->send || !L->recv || !L->expected) fail("out of memory");
  memset(L->send, 0, bytes);
  memset(L->recv, 0, bytes);
}

/* One call; returns the wrong elements of this rank, or -1 after printing an NCCL error. */
static int64_t iterate(struct loopRank* L, int iter, uint64_t seed, int check, double* t0, double* t1) {
  const struct benchColl* coll = L->o.coll;
  int rank = L->w.proc, n = L->w.nProcs, root = coll->rooted ? 0 : -1;
  if (check) {
    coll->fillSend(L->send, &L->c, L->o.type, ncclSum, rank, n, root, seed);
    memset(L->recv, 0xff, L->c.recvCount * L->eltSize);  /* an unwritten element never matches */
  }
  *t0 = now();
  ncclResult_t res = coll->run(L->send, L->recv, L->c.paramCount, (ncclDataType_t)L->o.type,
                               ncclSum, root < 0 ? 0 : root, L->comm, rank, n, NULL);
  *t1 = now();
  if (res != ncclSuccess) {
    const char* last = ncclGetLastError(L->comm);
    printf("error iter=%d t=%.6f result=%d %s%s%s\n", iter, *t1, (int)res, ncclGetErrorString(res),
           last && *last ? ": " : "", last ? last : "");
    return -1;
  }
  if (!check) return 0;
  size_t m = coll->fillExpected(L->expected, &L->c, L->o.type, ncclSum, rank, n, root, seed);
  return benchCompare(L->recv, L->expected, m, L->o.type, ncclSum, n);
}

/* All ranks agree to go on: any rank past the end stops everyone at the same iteration. */
static int goOn(const struct loopRank* L, int iter, double deadline) {
  double stop = (L->o.iters > 0 && iter >= L->o.iters) || (L->o.seconds > 0 && now() >= deadline);
  if (benchCtrlAllreduce(&stop, 1, benchCtrlMax) != 0) fail("control plane failed");
  return stop == 0;
}

static void header(const struct loopRank* L) {
  const struct benchColl* coll = L->o.coll;
  size_t bytes = (L->c.sendCount > L->c.recvCount ? L->c.sendCount : L->c.recvCount) * L->eltSize;
  double alg = (double)L->c.paramCount * (double)L->eltSize * (coll->algBytesTimesRanks ? L->w.nProcs : 1);
  printf("# failover_loop op=%s ranks=%d rank=%d bytes=%zu count=%zu algbytes=%.0f busfactor=%.6f "
         "type=%s host=%s\n", coll->key, L->w.nProcs, L->w.proc, bytes, L->c.paramCount, alg,
         coll->busFactor(L->w.nProcs), benchTypeName(L->o.type), L->w.host);
}

int main(int argc, char** argv) {
  struct loopRank L;
  memset(&L, 0, sizeof(L));
  if (parseArgs(argc, argv, &L.o) != 0) return benchUsage;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (benchCtrlInit(&L.w, &argc, &argv, L.o.timeout) != 0) return benchFailed;
  setup(&L);
  header(&L);
  double t0, t1;
  for (int i = 0; i < L.o.warmup; i++)
    if (iterate(&L, -1 - i, 0, 0, &t0, &t1) < 0) return benchFailed;
  if (benchCtrlAllreduce(NULL, 0, benchCtrlSum) != 0) fail("control plane failed");
  double start = now(), deadline = start + L.o.seconds;
  printf("start t=%.6f\n", start);
  long long total = 0;
  int iter = 0;
  for (; goOn(&L, iter, deadline); iter++) {
    int64_t wrong = iterate(&L, iter, (uint64_t)iter + 1, 1, &t0, &t1);
    if (wrong < 0) return benchFailed;
    total += wrong;
    printf("iter=%d t0=%.6f t1=%.6f wrong=%lld\n", iter, t0, t1, (long long)wrong);
  }
  ncclResult_t res = ncclCommDestroy(L.comm);
  printf("done iters=%d wrong=%lld\n", iter, total);
  free(L.send);
  free(L.recv);
  free(L.expected);
  benchCtrlFinalize(0);
  return res != ncclSuccess || total > 0 ? benchFailed : benchOk;
}
