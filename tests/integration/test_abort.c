/*
 * No call blocks forever: one process per rank (see mp_util.h), the last rank stops itself
 * (SIGSTOP) or dies (SIGKILL), and the others check that
 *   - ncclCommAbort returns within 1 s, also while another thread of theirs is blocked in an
 *     AllReduce that waits for the lost rank (that call then returns an error, also within 1 s);
 *   - ncclCommDestroy with a stopped peer returns in bounded time;
 *   - ncclCommRevoke likewise stops a blocked AllReduce, and ncclCommShrink then rebuilds the
 *     communicator without the lost rank;
 *   - a non-blocking init whose peer never arrives is ended by ncclCommAbort within 1 s;
 *   - with no abort at all, an AllReduce that needs a dead rank fails within DEAD_BOUND_S (2 s), and
 *     the WARN names the dead rank and its host (dead_alone); also when it died before any operation,
 *     so the survivors' first AllReduce is still setting up its connectors (dead_before_connect).
 * Over shared memory and over sockets.  The parent SIGCONTs/kills a stopped rank once the others
 * are done.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "mp_util.h"

#define ABORT_BOUND_S 1.0
#define DEAD_BOUND_S 2.0 /* issue 12: the others fail within 2 s, naming it */
#define COUNT (1 << 16)

struct blocked {
  ncclComm_t comm;   /* communicator the AllReduce runs on */
  float* buf;        /* its buffer */
  ncclResult_t res;  /* what the AllReduce returned */
  double doneAt;     /* when it returned */
  _Atomic int done;  /* it returned (res and doneAt are written before; TSan flagged a volatile int) */
};

static void* blockedMain(void* p) {
  struct blocked* b = p;
  b->res = ncclAllReduce(b->buf, b->buf, COUNT, ncclFloat, ncclSum, b->comm, NULL);
  b->doneAt = mtNow();
  b->done = 1;
  return NULL;
}

static ncclComm_t initFromFile(int rank, int n, const char* dir) {
  ncclComm_t comm = mpInitComm(rank, n, dir);
  float x = 1;
  CKOK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL)); /* connections are up */
  CK(x == (float)n);
  /* The last rank (the one lost in most scenarios) goes on only once every rank's AllReduce
   * returned: its own returning does not mean the others' did. */
  mpArrive(dir, "inited", rank);
  if (rank == n - 1) mpAwaitOthers(dir, "inited", rank, n);
  return comm;
}

/* The lost rank: stop (the parent kills it later) or die. */
static void loseSelf(int dead) {
  if (dead) raise(SIGKILL);
  raise(SIGSTOP);
  for (;;) pause(); /* only SIGKILL from the parent ends us */
}

/* Survivors: an AllReduce blocks in a thread; ncclCommAbort from this thread ends it in time. */
static void scInflight(int rank, int n, const char* dir, int dead) {
  ncclComm_t comm = initFromFile(rank, n, dir);
  if (rank == n - 1) loseSelf(dead);
  struct blocked b = {.comm = comm, .buf = calloc(COUNT, sizeof(float))};
  CK(b.buf != NULL);
  pthread_t th;
  usleep(dead ? 100 * 1000 : 0);
  CK(pthread_create(&th, NULL, blockedMain, &b) == 0);
  usleep(500 * 1000);
  /* A stopped peer never completes the AllReduce.  A dead peer may make it fail on its own
   * (a broken connection), but never succeed. */
  CK(!b.done || b.res != ncclSuccess);
  double t0 = mtNow();
  CKOK(ncclCommAbort(comm));
  double t1 = mtNow();
  if (t1 - t0 >= ABORT_BOUND_S) {
    fprintf(stderr, "rank %d: ncclCommAbort took %.3f s\n", rank, t1 - t0);
    exit(1);
  }
  while (!b.done && mtNow() - t0 < 5.0) usleep(1000);
  CK(b.done);
  CK(b.res != ncclSuccess);
  if (b.doneAt - t0 >= ABORT_BOUND_S) {
    fprintf(stderr, "rank %d: the blocked AllReduce returned %.3f s after the abort\n", rank, b.doneAt - t0);
    exit(1);
  }
  CK(pthread_join(th, NULL) == 0);
  free(b.buf);
}

/* Survivors, no abort: an AllReduce that needs a rank whose process died fails on its own, in
 * bounded time, and the communicator reports the error (over shm it waited forever). */
static void scDeadAlone(int rank, int n, const char* dir, int connectFirst) {
  char logPath[600];
  snprintf(logPath, sizeof logPath, "%s/log.%d", dir, rank);
  setenv("NCCL_DEBUG_FILE", logPath, 1); /* before the first call reads it */
  ncclComm_t comm = initFromFile(rank, n, dir);
  float* buf = calloc(COUNT, sizeof(float));
  CK(buf != NULL);
  if (connectFirst) {
    CKOK(ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, NULL)); /* every connector it needs is up */
    /* An operation completes once its sends are queued: the dying rank's last slots must reach the
     * others (its proxy sends them) before it goes. */
    usleep(300 * 1000);
  }
  if (rank == n - 1) loseSelf(1);
  usleep(300 * 1000); /* the process is gone before the collective starts */
  double t0 = mtNow();
  ncclResult_t res = ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, NULL);
  double took = mtNow() - t0;
  CK(res != ncclSuccess);
  if (took > DEAD_BOUND_S) {
    fprintf(stderr, "rank %d: the AllReduce needing a dead rank failed only after %.3f s\n", rank, took);
    exit(1);
  }
  ncclResult_t async = ncclSuccess;
  CKOK(ncclCommGetAsyncError(comm, &async));
  CK(async != ncclSuccess);
  /* The WARN names the dead rank and its host. */
  char want[64], line[1024];
  snprintf(want, sizeof want, "rank %d on host ", n - 1);
  FILE* f = fopen(logPath, "r");
  int named = 0;
  while (f && !named && fgets(line, sizeof line, f)) named = strstr(line, want) != NULL && strstr(line, "gone");
  if (f) fclose(f);
  if (!named) fprintf(stderr, "rank %d: no WARN naming '%s...' in %s\n", rank, want, logPath);
  CK(named);
  CKOK(ncclCommAbort(comm));
  free(buf);
}

/* Rank 0 exchanges with rank 1 and sends to the last rank in one group; rank 1 only exchanges with
 * rank 0; the last rank takes no part and dies DEAD_LATE_S in (while rank 0 waits for its connection
 * info).  Rank 0 then fails, and rank 1, which needs nothing from the dead rank but waits for rank
 * 0's connectors, must fail within DEAD_BOUND_S of the death as well (not at the connect timeout). */
#define DEAD_LATE_S 1.0
static void scDeadMidSetup(int rank, int n, const char* dir) {
  ncclComm_t comm = initFromFile(rank, n, dir);
  float* buf = calloc(2 * COUNT, sizeof(float));
  CK(buf != NULL);
  double t0 = mtNow();
  if (rank == n - 1) {
    usleep((useconds_t)(DEAD_LATE_S * 1e6));
    loseSelf(1);
  }
  int other = 1 - rank;
  CKOK(ncclGroupStart());
  CKOK(ncclSend(buf, COUNT, ncclFloat, other, comm, NULL));
  CKOK(ncclRecv(buf + COUNT, COUNT, ncclFloat, other, comm, NULL));
  if (rank == 0) CKOK(ncclSend(buf, COUNT, ncclFloat, n - 1, comm, NULL));
  ncclResult_t res = ncclGroupEnd();
  double took = mtNow() - t0;
  CK(res != ncclSuccess);
  if (took > DEAD_LATE_S + DEAD_BOUND_S) {
    fprintf(stderr, "rank %d: the group beside the dead rank failed only %.3f s after its death\n", rank,
            took - DEAD_LATE_S);
    exit(1);
  }
  CKOK(ncclCommAbort(comm));
  free(buf);
}

/* Survivors: ncclCommRevoke stops an AllReduce blocked on the stopped rank (in time), then
 * ncclCommShrink builds a communicator without it, which works; the parent is destroyed last. */
static void scRevokeShrink(int rank, int n, const char* dir) {
  ncclComm_t comm = initFromFile(rank, n, dir);
  if (rank == n - 1) loseSelf(0);
  struct blocked b = {.comm = comm, .buf = calloc(COUNT, sizeof(float))};
  CK(b.buf != NULL);
  pthread_t th;
  CK(pthread_create(&th, NULL, blockedMain, &b) == 0);
  usleep(300 * 1000);
  CK(!b.done);
  double t0 = mtNow();
  CKOK(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
  CK(mtNow() - t0 < ABORT_BOUND_S);
  while (!b.done && mtNow() - t0 < 5.0) usleep(1000);
  CK(b.done && b.res != ncclSuccess && b.doneAt - t0 < ABORT_BOUND_S);
  CK(pthread_join(th, NULL) == 0);
  int excl[1] = {n - 1};
  ncclComm_t child = NULL;
  CKOK(ncclCommShrink(comm, excl, 1, &child, NULL, NCCL_SHRINK_DEFAULT));
  for (int i = 0; i < COUNT; i++) b.buf[i] = (float)(rank + 1);
  CKOK(ncclAllReduce(b.buf, b.buf, COUNT, ncclFloat, ncclSum, child, NULL));
  for (int i = 0; i < COUNT; i++) CK(b.buf[i] == (float)(n * (n - 1) / 2));
  usleep(300 * 1000); /* the peer finishes receiving before our sockets close (destroy waits for no peer) */
  CKOK(ncclCommDestroy(child));
  t0 = mtNow();
  ncclResult_t r = ncclCommDestroy(comm);
  CK(r == ncclSuccess || r == ncclRemoteError);
  CK(mtNow() - t0 < 5.0);
  free(b.buf);
}

/* Survivors: nothing in flight; abort (after the peer is gone) returns in time. */
static void scIdle(int rank, int n, const char* dir, int dead) {
  ncclComm_t comm = initFromFile(rank, n, dir);
  if (rank == n - 1) loseSelf(dead);
  usleep(300 * 1000);
  double t0 = mtNow();
  CKOK(ncclCommAbort(comm));
  CK(mtNow() - t0 < ABORT_BOUND_S);
}

/* Survivors: an orderly destroy with a stopped peer is bounded too (the close handshake times out). */
static void scDestroyStopped(int rank, int n, const char* dir) {
  ncclComm_t comm = initFromFile(rank, n, dir);
  if (rank == n - 1) loseSelf(0);
  usleep(300 * 1000);
  double t0 = mtNow();
  ncclResult_t r = ncclCommDestroy(comm);
  CK(r == ncclSuccess || r == ncclRemoteError || r == ncclSystemError);
  CK(mtNow() - t0 < 5.0);
}

/* A non-blocking init whose last rank never arrives: abort ends it within the bound. */
static void scInitMissing(int rank, int n, const char* dir) {
  ncclUniqueId id;
  if (rank == n - 1) loseSelf(0); /* never calls init */
  mpShareId(rank, dir, "id", &id);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&comm, n, id, rank, &cfg);
  CK(r == ncclInProgress);
  usleep(rank == 0 ? 800 * 1000 : 300 * 1000); /* the root lives in rank 0: it exits last */
  ncclResult_t st = ncclSuccess;
  CKOK(ncclCommGetAsyncError(comm, &st));
  if (st != ncclInProgress) fprintf(stderr, "rank %d: init state %d (%s)\n", rank, st, ncclGetErrorString(st));
  CK(st == ncclInProgress);
  double t0 = mtNow();
  CKOK(ncclCommAbort(comm));
  CK(mtNow() - t0 < ABORT_BOUND_S);
}

static int child(char** argv) {
  struct mpChild c = mpChildStart(argv, 90);
  const char *sc = c.scenario, *dir = c.arg;
  int rank = c.rank, n = c.n;
  if (strcmp(sc, "inflight_stopped") == 0) scInflight(rank, n, dir, 0);
  else if (strcmp(sc, "inflight_dead") == 0) scInflight(rank, n, dir, 1);
  else if (strcmp(sc, "idle_stopped") == 0) scIdle(rank, n, dir, 0);
  else if (strcmp(sc, "idle_dead") == 0) scIdle(rank, n, dir, 1);
  else if (strcmp(sc, "destroy_stopped") == 0) scDestroyStopped(rank, n, dir);
  else if (strcmp(sc, "init_missing") == 0) scInitMissing(rank, n, dir);
  else if (strcmp(sc, "revoke_shrink") == 0) scRevokeShrink(rank, n, dir);
  else if (strcmp(sc, "dead_alone") == 0) scDeadAlone(rank, n, dir, 1);
  else if (strcmp(sc, "dead_before_connect") == 0) scDeadAlone(rank, n, dir, 0);
  else if (strcmp(sc, "dead_mid_setup") == 0) scDeadMidSetup(rank, n, dir);
  else {
    fprintf(stderr, "unknown scenario %s\n", sc);
    return 2;
  }
  return 0;
}

/* ------------------------------------------------------------ parent */

/* Wait for every rank but the last (bounded), then end the last one (stopped or dead). */
static void run(const char* name, const char* sc, int n, const char* const* env) {
  mpRun(name, sc, n, env, 60, n - 1, 1u << (n - 1));
}

int main(int argc, char** argv) {
  if (mpIsChild(argc, argv)) return child(argv);
  if (!mtStart("abort", 500)) return mtExitCode();
  const char* const net[] = {"NCCL_SHM_DISABLE=1", "NCCL_SOCKET_IFNAME=lo", NULL};
  const char* scs[] = {"inflight_stopped", "inflight_dead", "idle_stopped", "idle_dead", "destroy_stopped",
                       "revoke_shrink", "dead_alone", "dead_before_connect", "dead_mid_setup"};
  for (int t = 0; t < 2; t++) {
    for (size_t s = 0; s < sizeof(scs) / sizeof(scs[0]); s++) {
      char name[96];
      snprintf(name, sizeof name, "abort_%s_%s", scs[s], t ? "sockets" : "shm");
      run(name, scs[s], 3, t ? net : NULL);
    }
  }
  run("abort_nonblocking_init_missing_rank", "init_missing", 3, NULL);
  return mtExitCode();
}
