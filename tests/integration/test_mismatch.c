/*
 * Mismatched collectives: two ranks call different operations (function, datatype, reduction,
 * root, count, or a collective against send/recv), over p2p (two threads of one process), shared
 * memory and sockets (one process per rank, mp_util.h).  For every pair of different calls:
 *   - no rank hangs: each rank's call, or the AllReduce it runs next when its call returned success
 *     (the data it sent may simply sit in the peer's FIFO), fails within MISMATCH_BOUND_S;
 *   - no rank gets success from both;
 *   - some rank fails with ncclInvalidUsage, and the log holds the WARN naming both calls
 *     ("rank 0 AllReduce opCount ... vs rank 1 Broadcast ...").
 * The communicator first runs every call alike on both ranks, so the connectors are up and the
 * mismatch meets the data path.  A rank whose call failed aborts its communicator, so a peer still waiting on it fails too (the
 * transport reports the peer gone).  Every pair runs on a fresh communicator (a split of a parent that
 * stays healthy: it checks the pair's outcome with an AllReduce, and a matching call still gives exact
 * results at the end).
 */
#include <pthread.h>

#include "mp_util.h"

#define MISMATCH_BOUND_S 10.0
#define N 1024

/* The calls; rank 0 runs calls[a], rank 1 calls[b]. */
enum { AR_SUM, AR_MAX, AR_INT, AR_2N, BC_R0, BC_R1, RED_R0, RED_R1, AG, RS, A2A, SENDRECV, NCALLS };
static const char* const callName[NCALLS] = {"AllReduce", "AllReduce", "AllReduce", "AllReduce", "Broadcast",
                                             "Broadcast", "Reduce",    "Reduce",    "AllGather", "ReduceScatter",
                                             "AlltoAll",  "Send/Recv"};

static ncclResult_t runCall(int k, ncclComm_t c, int rank, float* a, float* b) {
  switch (k) {
    case AR_SUM: return ncclAllReduce(a, b, N, ncclFloat, ncclSum, c, NULL);
    case AR_MAX: return ncclAllReduce(a, b, N, ncclFloat, ncclMax, c, NULL);
    case AR_INT: return ncclAllReduce(a, b, N, ncclInt32, ncclSum, c, NULL);
    case AR_2N: return ncclAllReduce(a, b, 2 * N, ncclFloat, ncclSum, c, NULL);
    case BC_R0: return ncclBroadcast(a, b, N, ncclFloat, 0, c, NULL);
    case BC_R1: return ncclBroadcast(a, b, N, ncclFloat, 1, c, NULL);
    case RED_R0: return ncclReduce(a, b, N, ncclFloat, ncclSum, 0, c, NULL);
    case RED_R1: return ncclReduce(a, b, N, ncclFloat, ncclSum, 1, c, NULL);
    case AG: return ncclAllGather(a, b, N / 2, ncclFloat, c, NULL);
    case RS: return ncclReduceScatter(a, b, N / 2, ncclFloat, ncclSum, c, NULL);
    case A2A: return ncclAlltoAll(a, b, N / 2, ncclFloat, c, NULL);
    default: {
      ncclGroupStart();
      ncclSend(a, N, ncclFloat, 1 - rank, c, NULL);
      ncclRecv(b, N, ncclFloat, 1 - rank, c, NULL);
      return ncclGroupEnd();
    }
  }
}

/* What one rank saw of a pair. */
struct side {
  ncclComm_t comm;   /* the pair's communicator */
  int rank, call;    /* who, running what */
  ncclResult_t r1;   /* the call */
  ncclResult_t r2;   /* the AllReduce after it (when the call succeeded) */
  double took;       /* seconds for both */
  int aborted;       /* the communicator was aborted (freed) */
};

static void runSide(struct side* s) {
  float* a = calloc(4 * N, sizeof(float));
  float* b = calloc(4 * N, sizeof(float));
  CK(a && b);
  /* Every call once, alike on both ranks: every connector is up, so what follows tests the data path
   * (a first operation on new connectors is matched when they connect). */
  for (int k = 0; k < NCALLS; k++) CKOK(runCall(k, s->comm, s->rank, a, b));
  double t0 = mtNow();
  s->r1 = runCall(s->call, s->comm, s->rank, a, b);
  s->r2 = ncclSuccess;
  if (s->r1 == ncclSuccess) s->r2 = ncclAllReduce(a, b, 1, ncclFloat, ncclSum, s->comm, NULL);
  s->took = mtNow() - t0;
  if (s->r1 != ncclSuccess || s->r2 != ncclSuccess) { /* the peer must not wait on us */
    ncclCommAbort(s->comm);
    s->aborted = 1;
  }
  free(a);
  free(b);
}

static void* sideMain(void* p) {
  runSide(p);
  return NULL;
}

/* Log text written since *at (the debug file of this process). */
static char* logSince(const char* path, long* at) {
  FILE* f = fopen(path, "r");
  if (!f) return strdup("");
  fseek(f, 0, SEEK_END);
  long end = ftell(f);
  char* text = calloc((size_t)(end - *at) + 1, 1);
  fseek(f, *at, SEEK_SET);
  size_t got = text ? fread(text, 1, (size_t)(end - *at), f) : 0;
  if (text) text[got] = 0;
  fclose(f);
  *at = end;
  return text;
}

/* The WARN naming both calls: "rank <r> <name> ... vs rank <p> <name>". */
static int namesBoth(const char* log, int a, int b) {
  char x[96], y[96];
  snprintf(x, sizeof x, "rank 0 %s", callName[a]);
  snprintf(y, sizeof y, "vs rank 1 %s", callName[b]);
  char u[96], v[96];
  snprintf(u, sizeof u, "rank 1 %s", callName[b]);
  snprintf(v, sizeof v, "vs rank 0 %s", callName[a]);
  for (const char* p = strstr(log, "Collective mismatch"); p; p = strstr(p + 1, "Collective mismatch")) {
    const char* eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line - 1 ? len : sizeof line - 1), p);
    /* Both calls; or, where the mismatch showed only in the next operation (the call's slots sat in
     * the peer's FIFO), that operation and the peer's call. */
    if ((strstr(line, x) && strstr(line, y)) || (strstr(line, u) && strstr(line, v))) return 1;
    if ((strstr(line, "rank 0 AllReduce") && strstr(line, y)) || (strstr(line, "rank 1 AllReduce") && strstr(line, v)))
      return 1;
  }
  return 0;
}

static int sideOk(const struct side* s) {
  int ok = (s->r1 != ncclSuccess || s->r2 != ncclSuccess) && s->took < MISMATCH_BOUND_S;
  if (!ok)
    fprintf(stderr, "rank %d %s: call %d, then %d, %.3f s\n", s->rank, callName[s->call], s->r1, s->r2, s->took);
  return ok;
}

static int detected(const struct side* s) { return s->r1 == ncclInvalidUsage || s->r2 == ncclInvalidUsage; }

/* Pairs where neither rank receives a slot the other sent for the call (Broadcast with root 1 or
 * Reduce with root 0 on rank 0, which only receive, against rank 1 receiving in Reduce with root 1 or
 * in Send/Recv): across hosts neither end sees what the other waits for (on p2p and shm the FIFO
 * shows it).  They stall with the stuck-steps WARN, as NCCL does; the sockets run leaves them out. */
static int netBlind(int a, int b) { return (a == BC_R1 || a == RED_R0) && (b == RED_R1 || b == SENDRECV); }

/* ---- processes (shm, sockets): each child loops over every pair ---- */

static void processes(int rank, const char* dir, int net) {
  char logPath[600];
  snprintf(logPath, sizeof logPath, "%s/log.%d", dir, rank);
  setenv("NCCL_DEBUG_FILE", logPath, 1);
  setenv("NCCL_DEBUG", "WARN", 1);
  ncclComm_t parent = mpInitComm(rank, 2, dir);
  long at = 0;
  for (int a = 0; a < NCALLS; a++) {
    for (int b = a + 1; b < NCALLS; b++) {
      if (net && netBlind(a, b)) continue;
      struct side s = {.rank = rank, .call = rank == 0 ? a : b};
      CKOK(ncclCommSplit(parent, 0, rank, &s.comm, NULL));
      runSide(&s);
      char* log = logSince(logPath, &at);
      int mine[2] = {sideOk(&s), detected(&s) && namesBoth(log, a, b)};
      if (detected(&s) && !mine[1]) fprintf(stderr, "rank %d pair %d/%d: no WARN naming both calls:\n%s", rank, a, b, log);
      free(log);
      CKOK(ncclAllReduce(mine, mine, 2, ncclInt32, ncclSum, parent, NULL));
      if (mine[0] != 2 || mine[1] < 1) fprintf(stderr, "rank %d: pair %s/%s (%d/%d) failed\n", rank, callName[a], callName[b], a, b);
      CK(mine[0] == 2 && mine[1] >= 1);
      if (!s.aborted) ncclCommDestroy(s.comm);
    }
  }
  /* A matching call is still exact on a fresh communicator. */
  ncclComm_t c;
  CKOK(ncclCommSplit(parent, 0, rank, &c, NULL));
  float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)(i + rank);
  CKOK(ncclAllReduce(x, x, N, ncclFloat, ncclSum, c, NULL));
  for (int i = 0; i < N; i++) CK(x[i] == (float)(2 * i + 1));
  CKOK(ncclCommDestroy(c));
  CKOK(ncclCommDestroy(parent));
}

/* ---- threads (p2p): one process, two ranks ---- */

static void threads(void) {
  char dir[256];
  mpTempDir(dir, sizeof dir);
  char logPath[600];
  snprintf(logPath, sizeof logPath, "%s/log", dir);
  setenv("NCCL_DEBUG_FILE", logPath, 1);
  setenv("NCCL_DEBUG", "WARN", 1);
  long at = 0;
  int bad = 0, total = 0;
  for (int a = 0; a < NCALLS; a++) {
    for (int b = a + 1; b < NCALLS; b++) {
      ncclComm_t pair[2];
      if (ncclCommInitAll(pair, 2, NULL) != ncclSuccess) {
        bad++;
        continue;
      }
      struct side s[2] = {{.comm = pair[0], .rank = 0, .call = a}, {.comm = pair[1], .rank = 1, .call = b}};
      pthread_t th[2];
      for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, sideMain, &s[r]);
      for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
      char* log = logSince(logPath, &at);
      int ok = sideOk(&s[0]) && sideOk(&s[1]) && (detected(&s[0]) || detected(&s[1])) && namesBoth(log, a, b);
      if (!ok) fprintf(stderr, "p2p pair %s/%s (%d/%d): results %d %d / %d %d\n%s", callName[a], callName[b], a, b,
                       s[0].r1, s[0].r2, s[1].r1, s[1].r2, log);
      free(log);
      bad += !ok;
      total++;
      for (int r = 0; r < 2; r++)
        if (!s[r].aborted) ncclCommDestroy(pair[r]);
    }
  }
  mtResult(bad == 0, "mismatch_p2p_threads", "%d of %d pairs failed", bad, total);
  mpRemoveDir(dir);
}

int main(int argc, char** argv) {
  if (mpIsChild(argc, argv)) {
    struct mpChild c = mpChildStart(argv, 240);
    processes(c.rank, c.arg, strcmp(c.scenario, "sockets") == 0);
    return 0;
  }
  if (!mtStart("mismatch", 600)) return mtExitCode();
  threads();
  const char* const net[] = {"NCCL_SHM_DISABLE=1", "NCCL_SOCKET_IFNAME=lo", NULL};
  mpRun("mismatch_shm", "shm", 2, NULL, 240, 2, 0);
  mpRun("mismatch_sockets", "sockets", 2, net, 240, 2, 0);
  return mtExitCode();
}
