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
  for (int i = 0; i < n; i++) {
    if (benchP.devMode) benchGpuUse(r[i].cudaDev);  /* device mode: the rank's GPU is current */
    BENCH_NCCL(ncclCommInitRankConfig(&r[i].comm, benchP.nRanks, id, r[i].rank, &config));
  }
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
    if (benchP.devMode) benchGpuUse(r->cudaDev);
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

/* Host memory in host mode; in device mode GPU memory on the rank's device (through ncclMemAlloc
 * with -R 2, whose symmetric windows want the library's memory) and a host staging buffer that
 * inputs and results pass through. */
static void* allocBuffer(const struct benchRank* r, size_t bytes) {
  void* p = NULL;
  if (benchP.devMode) return benchGpuAlloc(r, bytes, benchP.o.localRegister == 2);
  if (posix_memalign(&p, 4096, bytes) != 0) return NULL;
  memset(p, 0, bytes);
  return p;
}

static void freeBuffer(const struct benchRank* r, void* p) {
  if (benchP.devMode) benchGpuFree(r, p, benchP.o.localRegister == 2);
  else free(p);
}

static void allocRank(struct benchRank* r, size_t bytes) {
  size_t extra = (size_t)benchP.o.unalign * 8;  /* -u shifts pointers by unalign x element size */
  r->sendBase = allocBuffer(r, bytes + extra);
  r->recvBase = allocBuffer(r, bytes + extra);
  r->expected = malloc(bytes);
  r->stage = benchP.devMode ? malloc(bytes) : NULL;
  if (!r->sendBase || !r->recvBase || !r->expected || (benchP.devMode && !r->stage))
    benchFatal("cannot allocate %d x %zu bytes of buffers for rank %d", benchP.devMode ? 4 : 3, bytes, r->rank);
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

#define REPORT_LINE 384
/* One "#  Rank" line, as nccl-tests prints it: "[domain:bus:device] GPU name" in device mode,
 * "[host] CPU model (host memory)" in host mode. */
static void rankLine(const struct benchRank* r, const char* model, char* out) {
  char what[160];
  if (benchP.devMode) benchGpuDescribe(r->cudaDev, what, sizeof(what));
  else snprintf(what, sizeof(what), "[host] %s", model);
  snprintf(out, REPORT_LINE, "#  Rank %2d Group %2d Pid %6d on %10s device %2d %s\n", r->rank, r->color,
           (int)getpid(), benchP.w.host, r->device, what);
}

/* Process 0's notes under the rank lines: -G in host mode, -M 1's memory line. */
static void reportNotes(void) {
  const struct benchOpts* o = &benchP.o;
  size_t bytes = benchP.ranks[0].allocBytes;
  if (o->graphLaunches > 0 && !benchP.devMode)
    printf("# -G %d: CUDA graphs do not apply in host mode; ignored\n", o->graphLaunches);
  if (o->graphLaunches > 0 && benchP.devMode && o->perIter)
    printf("# -G %d with -I: per-iteration columns hold the average of the graph launches\n", o->graphLaunches);
  if (!o->memReport) return;
  if (!benchP.devMode) {
    printf("# %-20s : send %zu B | recv %zu B | expected %zu B per rank\n", "Host memory usage", bytes, bytes,
           bytes);
    return;
  }
  size_t freeB = 0, totalB = 0;
  benchGpuMemInfo(benchP.ranks[0].cudaDev, &freeB, &totalB);
  printf("# %-20s : send %zu B | recv %zu B per rank | host expected + staging %zu B per rank | "
         "GPU %d: %zu of %zu B free\n", "GPU memory usage", bytes, bytes, 2 * bytes, benchP.ranks[0].cudaDev,
         freeB, totalB);
}

static void deviceReport(void) {
  char model[128];
  cpuModel(model, sizeof(model));
  char* mine = calloc((size_t)benchP.nLocal, REPORT_LINE);
  char* all = calloc((size_t)benchP.nLocal * (size_t)benchP.w.nProcs, REPORT_LINE);
  if (!mine || !all) benchFatal("out of memory");
  for (int i = 0; i < benchP.nLocal; i++) rankLine(&benchP.ranks[i], model, mine + (size_t)i * REPORT_LINE);
  if (benchCtrlGather(mine, (size_t)benchP.nLocal * REPORT_LINE, all) != 0)
    benchFatal("could not gather the device report");
  if (benchP.w.proc == 0) {
    printf("# Memory mode: %s (%s)\n", benchP.devMode ? "device" : "host", benchP.memWhy);
    printf("# Using devices\n");
    for (int i = 0; i < benchP.nLocal * benchP.w.nProcs; i++) printf("%s", all + (size_t)i * REPORT_LINE);
    reportNotes();
    fflush(stdout);
  }
  free(mine);
  free(all);
}

/* The memory mode of this process and each rank's GPU: with NCCL_TESTS_DEVICE=d the ranks of a
 * process take GPUs d, d+1, ...; otherwise this host's local rank index, both modulo the GPUs
 * found, so that several ranks share a GPU when there are fewer GPUs than ranks. Every process
 * must run in the same mode. */
static void chooseDevices(void) {
  benchP.devMode = benchGpuDecide(benchP.o.memMode, &benchP.nDevs, benchP.memWhy, sizeof(benchP.memWhy));
  double inDevMode = benchP.devMode;
  if (benchCtrlAllreduce(&inDevMode, 1, benchCtrlSum) != 0) benchFatal("control plane failed at start-up");
  if (inDevMode != 0 && inDevMode != benchP.w.nProcs)
    benchFatal("%g of %d processes run in device mode, the others found no GPU: give every process "
               "the same -M host|device", inDevMode, benchP.w.nProcs);
  if (benchP.devMode && benchP.o.graphLaunches > 0 && benchP.o.streamNull)
    benchFatal("-G %d needs a stream of each rank's own to capture: drop -y 1", benchP.o.graphLaunches);
  const char* base = getenv("NCCL_TESTS_DEVICE");
  int first = benchP.w.localRank * benchP.nLocal;
  if (base && *base) {
    char* end = NULL;
    long v = strtol(base, &end, 10);
    if (*end != '\0' || v < 0) benchFatal("Invalid NCCL_TESTS_DEVICE='%s': want a GPU index", base);
    first = (int)v;
  }
  for (int i = 0; i < benchP.nLocal; i++)
    benchP.ranks[i].cudaDev = benchP.devMode ? (first + i) % benchP.nDevs : -1;
}

/* What the library says about a rank's GPU must match the memory mode. */
static void checkDevice(const struct benchRank* r) {
  if (benchP.devMode && r->device != r->cudaDev)
    benchFatal("rank %d: GPU %d was current at init, but the library's communicator %s; this library "
               "does not run in device mode here (run with -M host, or MEND_PERF_MEMORY=host)", r->rank,
               r->cudaDev, r->device < 0 ? "is in host mode (ncclCommCuDevice -1)" : "reports another GPU");
  if (!benchP.devMode && r->device >= 0)
    benchFatal("rank %d: host mode (%s), but the library runs the communicator on GPU %d and would "
               "get host buffers", r->rank, benchP.memWhy, r->device);
}

int benchSetup(void) {
  chooseDevices();
  initComms();
  splitComms();
  for (int i = 0; i < benchP.nLocal; i++) {
    struct benchRank* r = &benchP.ranks[i];
    BENCH_NCCL(ncclCommCuDevice(r->comm, &r->device));
    BENCH_NCCL(ncclCommUserRank(r->comm, &r->rank));
    BENCH_NCCL(ncclCommCount(r->comm, &r->nRanks));
    checkDevice(r);
    if (benchP.coll->rooted && benchP.o.root >= r->nRanks)
      benchFatal("Invalid root %d: the communicator has %d ranks", benchP.o.root, r->nRanks);
    if (benchP.devMode) benchGpuRankInit(r, benchP.o.streamNull);
  }
  size_t bytes = bufferBytes();
  /* Window registration (-R 2) is collective: one group registers every local rank's windows. */
  BENCH_NCCL(ncclGroupStart());
  for (int i = 0; i < benchP.nLocal; i++) allocRank(&benchP.ranks[i], bytes);
  BENCH_NCCL(ncclGroupEnd());
  deviceReport();
  return 0;
}

void benchTeardown(void) {
  for (int i = 0; i < benchP.nLocal; i++) {
    struct benchRank* r = &benchP.ranks[i];
    if (benchP.devMode) benchGpuUse(r->cudaDev);
    for (int k = 0; k < 2 && benchP.o.localRegister; k++) {
      if (!r->regHandle[k]) continue;
      if (benchP.o.localRegister == 1) BENCH_NCCL(ncclCommDeregister(r->comm, r->regHandle[k]));
      else BENCH_NCCL(ncclCommWindowDeregister(r->comm, (ncclWindow_t)r->regHandle[k]));
    }
    BENCH_NCCL(ncclCommDestroy(r->comm));
    if (benchP.parents[i]) BENCH_NCCL(ncclCommDestroy(benchP.parents[i]));
    freeBuffer(r, r->sendBase);
    freeBuffer(r, r->recvBase);
    free(r->expected);
    free(r->stage);
    if (benchP.devMode) benchGpuRankFree(r);
  }
}
