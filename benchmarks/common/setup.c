/* Communicators, buffers and the device report of one process. */
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "run.h"

struct benchProc benchP;

void benchFatal(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fflush(stdout);
  fprintf(stderr, "%s: ", benchP.w.host);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(stderr);
  _exit(benchFailed);
}

void benchFatalNccl(const char* file, int line, ncclResult_t res, ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  benchFatal("Test NCCL failure %s:%d '%s / %s'", file, line, ncclGetErrorString(res),
             last ? last : "");
}

/* Every process must use the same id: with NCCL_COMM_ID set the library derives it from that
 * address in every process; otherwise process 0 asks for one and sends it to the others. */
static void getUniqueId(ncclUniqueId* id) {
  const char* commId = getenv("NCCL_COMM_ID");
  if ((commId && *commId) || benchP.w.proc == 0) BENCH_NCCL(ncclGetUniqueId(id));
  if (!(commId && *commId) && benchCtrlBcast(id, sizeof(*id)) != 0)
    benchFatal("could not share the unique id between processes");
}

static void initRanks(struct benchRank* r, int n, ncclUniqueId id) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (benchP.o.ctaPolicy >= 0) config.CTAPolicy = benchP.o.ctaPolicy;
  BENCH_NCCL(ncclGroupStart());
  for (int i = 0; i < n; i++)
    BENCH_NCCL(ncclCommInitRankConfig(&r[i].comm, benchP.nRanks, id, r[i].rank, &config));
  BENCH_NCCL(ncclGroupEnd());
}

struct initArg {
  struct benchRank* ranks;  /* first rank of the thread */
  ncclUniqueId id;          /* shared id */
};

static void* initThread(void* p) {
  struct initArg* a = p;
  initRanks(a->ranks, benchP.o.nGpus, a->id);
  return NULL;
}

static void initComms(void) {
  ncclUniqueId id;
  getUniqueId(&id);
  for (int i = 0; i < benchP.nLocal; i++) benchP.ranks[i].rank = benchP.w.proc * benchP.nLocal + i;
  if (!benchP.o.parallelInit) {
    initRanks(benchP.ranks, benchP.nLocal, id);
    return;
  }
  pthread_t th[BENCH_MAX_LOCAL];
  struct initArg args[BENCH_MAX_LOCAL];
  for (int t = 0; t < benchP.o.nThreads; t++) {
    args[t] = (struct initArg){.ranks = &benchP.ranks[t * benchP.o.nGpus], .id = id};
    if (pthread_create(&th[t], NULL, initThread, &args[t]) != 0) benchFatal("pthread_create failed");
  }
  for (int t = 0; t < benchP.o.nThreads; t++) pthread_join(th[t], NULL);
}

/* NCCL_TESTS_SPLIT_MASK=m (color = rank & m) or NCCL_TESTS_SPLIT="AND|OR|MOD|DIV <v>". */
static int splitColor(int rank, int* color) {
  const char* mask = getenv("NCCL_TESTS_SPLIT_MASK");
  const char* spec = getenv("NCCL_TESTS_SPLIT");
  char* end = NULL;
  if (mask && *mask) {
    long m = strtol(mask, &end, 0);
    if (*end != '\0' || m < 0) benchFatal("Invalid NCCL_TESTS_SPLIT_MASK='%s'", mask);
    *color = rank & (int)m;
    return 1;
  }
  if (!spec || !*spec) return 0;
  static const char* const ops[] = {"AND", "OR", "MOD", "DIV"};
  for (int k = 0; k < 4; k++) {
    size_t l = strlen(ops[k]);
    if (strncasecmp(spec, ops[k], l) != 0) continue;
    const char* num = spec + l;
    while (*num == ' ' || *num == ':' || *num == '=') num++;
    long v = strtol(num, &end, 0);
    if (end == num || *end != '\0' || v < 0 || (k >= 2 && v == 0)) break;
    *color = k == 0 ? (rank & (int)v) : k == 1 ? (rank | (int)v) : k == 2 ? rank % (int)v : rank / (int)v;
    return 1;
  }
  benchFatal("Invalid NCCL_TESTS_SPLIT='%s': want AND, OR, MOD or DIV and a number", spec);
}

static void splitComms(void) {
  int color = 0;
  if (!splitColor(0, &color)) return;
  BENCH_NCCL(ncclGroupStart());
  for (int i = 0; i < benchP.nLocal; i++) {
    struct benchRank* r = &benchP.ranks[i];
    splitColor(r->rank, &r->color);
    benchP.parents[i] = r->comm;
    BENCH_NCCL(ncclCommSplit(benchP.parents[i], r->color, r->rank, &r->comm, NULL));
  }
  BENCH_NCCL(ncclGroupEnd());
}

/* Bytes each of the send and receive buffers needs for the whole sweep. */
static size_t bufferBytes(void) {
  size_t best = 0;
  for (int t = 0; t < BENCH_NUM_TYPES; t++) {
    if (benchP.o.type >= 0 && t != benchP.o.type) continue;
    size_t sz = benchTypeSize(t);
    struct benchCounts c;
    benchP.coll->counts(benchP.o.maxBytes / sz, sz, benchP.ranks[0].nRanks, &c);
    size_t b = (c.sendCount > c.recvCount ? c.sendCount : c.recvCount) * sz;
    if (b > best) best = b;
  }
  return best ? best : 64;
}

/* Host memory in host mode. Device memory (ncclMemAlloc on the rank's GPU, with copies for
 * filling and checking) is where a GPU build fills this in; until then a GPU rank is refused
 * in benchSetup rather than measured with the wrong memory. */
static void* allocBuffer(int device, size_t bytes) {
  void* p = NULL;
  if (device >= 0) return NULL;
  if (posix_memalign(&p, 4096, bytes) != 0) return NULL;
  memset(p, 0, bytes);
  return p;
}

static void allocRank(struct benchRank* r, size_t bytes) {
  size_t extra = (size_t)benchP.o.unalign * 8;  /* -u shifts pointers by unalign x element size */
  r->sendBase = allocBuffer(r->device, bytes + extra);
  r->recvBase = allocBuffer(r->device, bytes + extra);
  r->expected = malloc(bytes);
  if (!r->sendBase || !r->recvBase || !r->expected)
    benchFatal("cannot allocate 3 x %zu bytes of buffers for rank %d", bytes, r->rank);
  r->sendBuf = r->sendBase;
  r->recvBuf = r->recvBase;
  r->allocBytes = bytes;
  size_t off = extra;
  if (benchP.o.localRegister == 1) {
    BENCH_NCCL(ncclCommRegister(r->comm, r->sendBase, bytes + off, &r->regHandle[0]));
    BENCH_NCCL(ncclCommRegister(r->comm, r->recvBase, bytes + off, &r->regHandle[1]));
  } else if (benchP.o.localRegister == 2) {
    BENCH_NCCL(ncclCommWindowRegister(r->comm, r->sendBase, bytes + off, (ncclWindow_t*)&r->regHandle[0],
                                      NCCL_WIN_COLL_SYMMETRIC));
    BENCH_NCCL(ncclCommWindowRegister(r->comm, r->recvBase, bytes + off, (ncclWindow_t*)&r->regHandle[1],
                                      NCCL_WIN_COLL_SYMMETRIC));
  }
}

static void cpuModel(char* out, size_t len) {
  snprintf(out, len, "host CPU");
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof(line), f)) {
    char* c = strchr(line, ':');
    if (strncmp(line, "model name", 10) == 0 && c) {
      c += 2;
      c[strcspn(c, "\n")] = '\0';
      snprintf(out, len, "%s (host memory)", c);
      break;
    }
  }
  fclose(f);
}

#define REPORT_LINE 256
static void deviceReport(void) {
  char model[128];
  cpuModel(model, sizeof(model));
  char* mine = calloc((size_t)benchP.nLocal, REPORT_LINE);
  char* all = calloc((size_t)benchP.nLocal * (size_t)benchP.w.nProcs, REPORT_LINE);
  if (!mine || !all) benchFatal("out of memory");
  for (int i = 0; i < benchP.nLocal; i++) {
    struct benchRank* r = &benchP.ranks[i];
    snprintf(mine + (size_t)i * REPORT_LINE, REPORT_LINE,
             "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s\n", r->rank, r->color,
             (int)getpid(), benchP.w.host, r->device, r->device < 0 ? "host" : "gpu", model);
  }
  if (benchCtrlGather(mine, (size_t)benchP.nLocal * REPORT_LINE, all) != 0)
    benchFatal("could not gather the device report");
  if (benchP.w.proc == 0) {
    printf("# Using devices\n");
    for (int i = 0; i < benchP.nLocal * benchP.w.nProcs; i++) printf("%s", all + (size_t)i * REPORT_LINE);
    if (benchP.o.graphLaunches > 0) printf("# -G %d: CUDA graphs do not apply in host mode; ignored\n",
                                           benchP.o.graphLaunches);
    if (benchP.o.memReport) printf("# %-20s : send %zu B | recv %zu B | expected %zu B per rank\n",
                                   "Host memory usage", benchP.ranks[0].allocBytes,
                                   benchP.ranks[0].allocBytes, benchP.ranks[0].allocBytes);
    fflush(stdout);
  }
  free(mine);
  free(all);
}

int benchSetup(void) {
  initComms();
  splitComms();
  for (int i = 0; i < benchP.nLocal; i++) {
    struct benchRank* r = &benchP.ranks[i];
    BENCH_NCCL(ncclCommCuDevice(r->comm, &r->device));
    BENCH_NCCL(ncclCommUserRank(r->comm, &r->rank));
    BENCH_NCCL(ncclCommCount(r->comm, &r->nRanks));
    if (r->device >= 0)
      benchFatal("rank %d runs on GPU %d, but these tools only fill and check host buffers so far "
                 "(device buffers via ncclMemAlloc are not implemented in this build)", r->rank,
                 r->device);
    if (benchP.coll->rooted && benchP.o.root >= r->nRanks)
      benchFatal("Invalid root %d: the communicator has %d ranks", benchP.o.root, r->nRanks);
  }
  size_t bytes = bufferBytes();
  for (int i = 0; i < benchP.nLocal; i++) allocRank(&benchP.ranks[i], bytes);
  deviceReport();
  return 0;
}

void benchTeardown(void) {
  for (int i = 0; i < benchP.nLocal; i++) {
    struct benchRank* r = &benchP.ranks[i];
    for (int k = 0; k < 2 && benchP.o.localRegister; k++) {
      if (!r->regHandle[k]) continue;
      if (benchP.o.localRegister == 1) BENCH_NCCL(ncclCommDeregister(r->comm, r->regHandle[k]));
      else BENCH_NCCL(ncclCommWindowDeregister(r->comm, (ncclWindow_t)r->regHandle[k]));
    }
    BENCH_NCCL(ncclCommDestroy(r->comm));
    if (benchP.parents[i]) BENCH_NCCL(ncclCommDestroy(benchP.parents[i]));
    free(r->sendBase);
    free(r->recvBase);
    free(r->expected);
  }
}
