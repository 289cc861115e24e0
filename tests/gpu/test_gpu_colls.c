/*
 * Every collective on device buffers of one GPU shared by all ranks, checked element by element
 * against a host reference (see gpu_cases.h for the cases, data and layouts):
 *
 *   --threads N   N ranks as threads of this process: each thread cudaSetDevice, its own
 *                 non-blocking stream, ncclCommInitRank on a shared id; every case, then one
 *                 group of two AllReduces on two streams of each rank (gpuTwoStreams).
 *   --initall N   ncclCommInitAll(comms, N, {dev, dev, ...}) and ONE thread driving every rank,
 *                 ncclGroupStart/End around the per-rank calls, one stream per rank; every case.
 *   --procs N     N ranks as processes (this program re-executed with --child, so no CUDA call
 *                 precedes a fork); the core cases.
 *
 * Without arguments: threads 1, 2, 3, 4, 8; initall 4; procs 2, 4.  One "ok"/"not ok" line per case
 * (threads, initall) or per part (procs: each child prints "# rank R: not ok ..." details).
 * Exit 77 when no CUDA device is usable.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu_cases.h"
#include "mp_util.h"

#define MAX_RANKS 8
#define MAX_CASES 320

static struct gpuCase allCases[MAX_CASES];
static int nAllCases;
static int watchdogS; /* this program's watchdog (seconds) */

/* ---------------------------------------------------------------- ranks as threads */

struct rankThread {
  struct gpuRank R;       /* communicator, stream, buffers */
  int rank, n;            /* this rank, rank count */
  ncclUniqueId id;        /* shared id */
  struct gpuTally* tally; /* agrees on one line per case */
  const char* prefix;     /* result names: "<prefix>_<case>" */
  int broken;             /* a call failed or a wait timed out: the communicator is aborted */
};

/* Device, stream, buffers, communicator; reported as one "<prefix>_init" line. */
static int threadInit(struct rankThread* t) {
  struct gpuErr e = {{0}};
  char name[128];
  int ok = gpuUseDevice(&e) && gpuRankAlloc(&t->R, t->rank, t->n, &e);
  if (ok) {
    ncclResult_t r = ncclCommInitRank(&t->R.comm, t->n, t->id, t->rank);
    if (r != ncclSuccess) ok = gpuErrSet(&e, "ncclCommInitRank: %s", ncclGetErrorString(r));
  }
  int dev = -1;
  if (ok && (ncclCommCuDevice(t->R.comm, &dev) != ncclSuccess || dev != gpuDevice()))
    ok = gpuErrSet(&e, "ncclCommCuDevice gave %d, want %d", dev, gpuDevice());
  snprintf(name, sizeof(name), "%s_init", t->prefix);
  return gpuTallyCase(t->tally, name, t->rank, ok, e.msg, gpuWaitLimit()) > 0;
}

/* Destroy (or abort, after a failure) and free; reported as "<prefix>_destroy". */
static void threadFini(struct rankThread* t, int inited) {
  struct gpuErr e = {{0}};
  char name[128];
  int ok = 1;
  if (t->R.comm && !t->broken) {
    ncclResult_t async = ncclInProgress;
    if (ncclCommGetAsyncError(t->R.comm, &async) != ncclSuccess || async != ncclSuccess)
      ok = gpuErrSet(&e, "ncclCommGetAsyncError reports %s", ncclGetErrorString(async));
    ncclResult_t r = ncclCommDestroy(t->R.comm);
    if (r != ncclSuccess) ok = gpuErrSet(&e, "ncclCommDestroy: %s", ncclGetErrorString(r));
  } else if (t->R.comm) {
    ncclCommAbort(t->R.comm);
  }
  snprintf(name, sizeof(name), "%s_destroy", t->prefix);
  if (inited && !t->broken) gpuTallyCase(t->tally, name, t->rank, ok, e.msg, gpuWaitLimit());
  if (!t->broken) gpuRankFree(&t->R); /* a stuck stream could make a free wait forever */
}

static void* threadMain(void* p) {
  struct rankThread* t = p;
  char name[160];
  int inited = threadInit(t);
  for (int k = 0; inited && !t->broken && k < nAllCases; k++) {
    int r = gpuCaseRun(&t->R, &allCases[k], (uint64_t)k + 1);
    gpuCaseName(&allCases[k], t->prefix, name, sizeof(name));
    if (gpuTallyCase(t->tally, name, t->rank, r > 0, t->R.err.msg, 2 * gpuWaitLimit()) < 0) t->broken = 1;
    if (r < 0) { /* this rank's stream or communicator cannot be trusted: everyone stops */
      t->broken = 1;
      gpuTallyBreak(t->tally);
    }
  }
  if (inited && !t->broken) {
    int r = gpuTwoStreams(&t->R);
    snprintf(name, sizeof(name), "%s_two_streams", t->prefix);
    if (gpuTallyCase(t->tally, name, t->rank, r > 0, t->R.err.msg, 2 * gpuWaitLimit()) < 0 || r < 0) {
      t->broken = 1;
      gpuTallyBreak(t->tally);
    }
  }
  if (!inited) t->broken = 1;
  threadFini(t, inited);
  return NULL;
}

/* Join within timeoutS; a thread that stays stuck ends the program (its GPU work cannot be undone). */
static void joinOrDie(pthread_t th, const char* prefix, int rank, double timeoutS) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += (time_t)timeoutS;
  if (pthread_timedjoin_np(th, NULL, &until) == 0) return;
  char name[128];
  snprintf(name, sizeof(name), "%s_join", prefix);
  mtResult(0, name, "rank %d's thread is still running %.0f s after the others", rank, timeoutS);
  fflush(stdout);
  _exit(1);
}

static void runThreads(int n) {
  static struct rankThread t[MAX_RANKS];
  pthread_t th[MAX_RANKS];
  struct gpuTally tally;
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "gpu_threads_%dr", n);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    mtResult(0, prefix, "ncclGetUniqueId failed");
    return;
  }
  gpuTallyInit(&tally, n);
  for (int r = 0; r < n; r++) {
    t[r] = (struct rankThread){.rank = r, .n = n, .id = id, .tally = &tally, .prefix = prefix};
    if (pthread_create(&th[r], NULL, threadMain, &t[r]) != 0) {
      mtResult(0, prefix, "pthread_create failed");
      _exit(1);
    }
  }
  for (int r = 0; r < n; r++) joinOrDie(th[r], prefix, r, 4 * gpuWaitLimit());
  gpuTallyFree(&tally);
}

/* ---------------------------------------------------------------- one thread, every rank */

/* One case, every count: each phase for every rank, the NCCL calls of all ranks in one group. */
static int oneThreadCase(struct gpuRank* R, int n, const struct gpuCase* c, uint64_t seed, struct gpuErr* e) {
  int ok = 1;
  for (int r = 0; r < n; r++) R[r].err.msg[0] = '\0';
  for (int k = 0; k < GPU_NCOUNTS; k++) {
    int res = 1;
    for (int r = 0; r < n && res > 0; r++) res = gpuStepPrepare(&R[r], c, k, seed);
    ncclResult_t gs = ncclGroupStart();
    for (int r = 0; r < n && res > 0; r++) res = gpuStepIssue(&R[r]);
    ncclResult_t ge = ncclGroupEnd();
    if (gs != ncclSuccess || ge != ncclSuccess)
      res = gpuErrSet(e, "count %zu: ncclGroupStart %s, ncclGroupEnd %s", gpuCounts[k], ncclGetErrorString(gs),
                      ncclGetErrorString(ge)) - 1;
    for (int r = 0; r < n && res > 0; r++) res = gpuStepFinish(&R[r]);
    for (int r = 0; r < n && res > 0; r++) res = gpuStepWait(&R[r]);
    for (int r = 0; r < n && res >= 0; r++)
      if (gpuStepCheck(&R[r]) == 0) ok = 0;
    for (int r = 0; r < n; r++)
      if (R[r].err.msg[0]) gpuErrSet(e, "rank %d: %s", r, R[r].err.msg);
    if (res < 0) return -1;
  }
  return ok;
}

static int initAllSetup(struct gpuRank* R, ncclComm_t* comms, int n, const char* prefix) {
  struct gpuErr e = {{0}};
  int devs[MAX_RANKS];
  char name[128];
  for (int r = 0; r < n; r++) devs[r] = gpuDevice();
  int ok = gpuUseDevice(&e);
  for (int r = 0; ok && r < n; r++) ok = gpuRankAlloc(&R[r], r, n, &e);
  ncclResult_t res = ok ? ncclCommInitAll(comms, n, devs) : ncclInvalidUsage;
  if (ok && res != ncclSuccess) ok = gpuErrSet(&e, "ncclCommInitAll: %s", ncclGetErrorString(res));
  for (int r = 0; ok && r < n; r++) R[r].comm = comms[r];
  snprintf(name, sizeof(name), "%s_init", prefix);
  mtResult(ok, name, "%s", e.msg);
  return ok;
}

static void runInitAll(int n) {
  static struct gpuRank R[MAX_RANKS];
  ncclComm_t comms[MAX_RANKS] = {0};
  char prefix[64], name[160];
  snprintf(prefix, sizeof(prefix), "gpu_initall_%dr", n);
  if (!initAllSetup(R, comms, n, prefix)) return;
  int broken = 0;
  for (int k = 0; k < nAllCases && !broken; k++) {
    struct gpuErr e = {{0}};
    int r = oneThreadCase(R, n, &allCases[k], (uint64_t)k + 101, &e);
    gpuCaseName(&allCases[k], prefix, name, sizeof(name));
    mtResult(r > 0, name, "%s", e.msg);
    broken = r < 0;
  }
  int ok = 1;
  for (int r = 0; r < n; r++) {
    ncclResult_t res = broken ? ncclCommAbort(comms[r]) : ncclCommDestroy(comms[r]);
    ok &= res == ncclSuccess;
  }
  snprintf(name, sizeof(name), "%s_destroy", prefix);
  if (!broken) mtResult(ok, name, "ncclCommDestroy failed");
  for (int r = 0; r < n && !broken; r++) gpuRankFree(&R[r]);
}

/* ---------------------------------------------------------------- ranks as processes */

/* A child: one rank of the part (core reduction or copy cases); failures as "# rank R: not ok" lines. */
static int childMain(char** argv) {
  struct mpChild c = mpChildStart(argv, 570);
  static struct gpuCase cases[MAX_CASES];
  int nc = gpuCaseList(cases, MAX_CASES, strcmp(c.scenario, "reduce") == 0 ? GPU_CASES_CORE_REDUCE
                                                                            : GPU_CASES_CORE_COPY);
  static struct gpuRank R;
  struct gpuErr e = {{0}};
  if (!gpuUseDevice(&e) || !gpuRankAlloc(&R, c.rank, c.n, &e)) {
    fprintf(stderr, "rank %d: %s\n", c.rank, e.msg);
    return 1;
  }
  R.comm = mpInitComm(c.rank, c.n, c.arg);
  int fails = 0, broken = 0;
  char name[160];
  for (int k = 0; k < nc && !broken; k++) {
    int r = gpuCaseRun(&R, &cases[k], (uint64_t)k + 1001);
    gpuCaseName(&cases[k], "gpu_procs", name, sizeof(name));
    if (r <= 0) printf("# rank %d: not ok %s: %s\n", c.rank, name, R.err.msg);
    fails += r <= 0;
    broken = r < 0;
  }
  ncclResult_t async = ncclInProgress;
  if (!broken && (ncclCommGetAsyncError(R.comm, &async) != ncclSuccess || async != ncclSuccess)) {
    printf("# rank %d: ncclCommGetAsyncError reports %s\n", c.rank, ncclGetErrorString(async));
    fails++;
  }
  CKOK(broken ? ncclCommAbort(R.comm) : ncclCommDestroy(R.comm));
  if (!broken) gpuRankFree(&R);
  return fails ? 1 : 0;
}

static void runProcs(int n) {
  static const char* const parts[] = {"reduce", "copy"};
  for (int p = 0; p < 2; p++) {
    char name[64];
    snprintf(name, sizeof(name), "gpu_procs_%dr_%s", n, parts[p]);
    mpRun(name, parts[p], n, NULL, (watchdogS - 10) / 2.0, n, 0);
  }
}

/* ---------------------------------------------------------------- main */

static int usage(const char* self) {
  fprintf(stderr, "usage: %s [--threads N | --initall N | --procs N]  (N in 1..%d)\n", self, MAX_RANKS);
  return 2;
}

int main(int argc, char** argv) {
  if (mpIsChild(argc, argv)) return childMain(argv);
  if (argc != 1 && argc != 3) return usage(argv[0]);
  int n = argc == 3 ? atoi(argv[2]) : 0;
  if (argc == 3 && (n < 1 || n > MAX_RANKS)) return usage(argv[0]);
  const char* w = getenv("MEND_TEST_GPU_WATCHDOG_S");
  watchdogS = w && atoi(w) > 30 ? atoi(w) : argc == 3 ? 280 : 3000;
  if (!gpuStart("gpu_colls", watchdogS)) return mtExitCode();
  nAllCases = gpuCaseList(allCases, MAX_CASES, GPU_CASES_ALL);
  if (argc == 1) {
    static const int sizes[] = {1, 2, 3, 4, 8};
    for (int i = 0; i < 5; i++) runThreads(sizes[i]);
    runInitAll(4);
    runProcs(2);
    runProcs(4);
  } else if (strcmp(argv[1], "--threads") == 0) {
    runThreads(n);
  } else if (strcmp(argv[1], "--initall") == 0) {
    runInitAll(n);
  } else if (strcmp(argv[1], "--procs") == 0) {
    runProcs(n);
  } else {
    return usage(argv[0]);
  }
  return mtExitCode();
}
