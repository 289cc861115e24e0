/* benchMain(): what every <collective>_perf main() calls. */
#include <libgen.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "run.h"

/* -T: aborts the communicators when one call runs longer than the timeout, as nccl-tests does
 * while it waits on its streams; a call that still does not return ends the process. */
static void* watchdog(void* arg) {
  (void)arg;
  long long limit = (long long)benchP.o.timeout * 1000000000LL;
  for (;;) {
    usleep(100 * 1000);
    long long now = (long long)(benchNowSec() * 1e9);
    for (int t = 0; t < benchP.o.nThreads; t++) {
      long long start = atomic_load(&benchP.threads[t].opStartNs);
      if (start == 0 || now - start < limit) continue;
      printf("%s: Test timeout (%ds) %s:%d\n", benchP.w.host, benchP.o.timeout, __FILE__, __LINE__);
      fflush(stdout);
      atomic_store(&benchP.aborting, 1);  /* threads polling their streams stop using the comms */
      if (benchP.devMode) usleep(200 * 1000);
      for (int i = 0; i < benchP.nLocal; i++) ncclCommAbort(benchP.ranks[i].comm);
      sleep(10);
      benchFatal("a call did not return 10 s after its communicator was aborted");
    }
  }
  return NULL;
}

static int parse(int argc, char** argv, const struct benchColl* coll) {
  benchOptsDefaults(&benchP.o);
  int rc = benchParseArgs(&benchP.o, argc, argv, coll);
  if (rc == benchHelp) exit(0);
  if (rc != benchOk) exit(benchUsage);
  const char* plant = getenv(BENCH_PLANT_ENV);
  benchP.plant = plant && strcmp(plant, "1") == 0;
  return benchP.o.selftest;
}

static void runThreads(void) {
  pthread_t th[BENCH_MAX_LOCAL];
  for (int t = 0; t < benchP.o.nThreads; t++) {
    struct benchThread* bt = &benchP.threads[t];
    bt->thread = t;
    bt->ranks = &benchP.ranks[t * benchP.o.nGpus];
    bt->iterTimes = calloc((size_t)benchP.o.iters, sizeof(double));
    if (!bt->iterTimes) benchFatal("out of memory");
  }
  for (int t = 1; t < benchP.o.nThreads; t++)
    if (pthread_create(&th[t], NULL, benchRunThread, &benchP.threads[t]) != 0)
      benchFatal("pthread_create failed");
  benchRunThread(&benchP.threads[0]);
  for (int t = 1; t < benchP.o.nThreads; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < benchP.o.nThreads; t++) free(benchP.threads[t].iterTimes);
}

/* Footer and exit status: wrong values anywhere, or a bandwidth below NCCL_TESTS_MIN_BW. */
static int finish(void) {
  double errs = 0;
  for (int t = 0; t < benchP.o.nThreads; t++) errs += benchP.threads[t].errors;
  if (benchSync(0, &errs, 1, benchCtrlSum) != 0) benchFatal("control plane failed at the end");
  struct benchThread* t0 = &benchP.threads[0];
  double avgBw = t0->bwCount ? t0->bwSum / t0->bwCount : 0.0;
  int failed = errs > 0 || (benchP.o.minBw >= 0 && avgBw < benchP.o.minBw * 0.9);
  if (benchP.w.proc == 0) {
    benchPrintFooter(&benchP.o, (int)errs, avgBw, benchP.prog);
    if (benchP.o.jsonFile) benchJsonWrite(benchP.o.jsonFile, &benchP.o, benchP.prog, (int)errs, avgBw);
  }
  return failed;
}

int benchMain(int argc, char** argv, const struct benchColl* coll) {
  benchP.coll = coll;
  benchP.prog = basename(argv[0]);
  if (parse(argc, argv, coll)) return benchSelftest(coll);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (benchCtrlInit(&benchP.w, &argc, &argv, benchP.o.timeout) != 0) return benchFailed;
  benchP.nLocal = benchP.o.nThreads * benchP.o.nGpus;
  benchP.nRanks = benchP.nLocal * benchP.w.nProcs;
  benchSyncInit(benchP.o.nThreads, benchP.o.timeout);
  ncclGetVersion(&benchP.libVersion);
  if (benchP.w.proc == 0) benchPrintPreamble(&benchP.o, benchP.prog, benchP.libVersion);
  benchSetup();
  pthread_t wd;
  if (benchP.o.timeout > 0 && pthread_create(&wd, NULL, watchdog, NULL) == 0) pthread_detach(wd);
  if (benchP.w.proc == 0) benchPrintTableHeader(&benchP.o);
  runThreads();
  benchSyncInit(1, benchP.o.timeout);  /* only the main thread is left */
  int failed = finish();
  benchTeardown();
  if (benchSync(0, NULL, 0, benchCtrlSum) != 0) benchFatal("control plane failed at the end");
  benchCtrlFinalize(0);
  return failed ? benchFailed : benchOk;
}
