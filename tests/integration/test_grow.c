/*
 * ncclCommGetUniqueId and ncclCommGrow across processes (one rank per process, mp_util.h):
 *   - grow 2->3 and 4->6, blocking: existing ranks keep their numbers, new ranks take theirs; every
 *     collective and send/recv exact on the grown communicator, the old one still works, and the
 *     grown one splits and shrinks (and the coordinator may pass its own id);
 *   - non-blocking (ncclInProgress, then ncclCommGetAsyncError), and inside a group;
 *   - a new rank given a bad id: ncclGetUniqueId's id, random bytes, a damaged grow id, a rank that
 *     collides with an existing one (ncclInvalidArgument + WARN at once), then the good id works;
 *     two new ranks claiming one number: one is refused (duplicate) and joins with the next;
 *   - a second ncclCommGetUniqueId before a grow used the first (ncclInvalidUsage); no coordinator
 *     and disagreeing sizes fail on every existing rank alike; a used id allows a new one;
 *   - recovery: a rank of N is SIGKILLed; the survivors' AllReduce fails on its own within
 *     DETECT_BOUND_S; ncclCommShrink with NCCL_SHRINK_ABORT gives N-1 ranks that work; a replacement
 *     process joins through ncclCommGrow and the job is back to N; exact results at every stage.
 *     Over shared memory and over sockets.
 *   - a grown communicator is a full one (full): N ranks shrink without the last, which joins back
 *     by Grow; on the grown communicator every collective is exact, it splits, shrinks and grows
 *     again (by one more process, the grown-in rank coordinating); when the extra process aborts
 *     the twice-grown communicator, the others' AllReduce on it fails within DETECT_BOUND_S and
 *     their abort is bounded too; a revoke of the grown one stops an AllReduce that the last rank
 *     never joins (within ABORT_BOUND_S), new work is refused, and the others shrink the revoked
 *     communicator.  Over shared memory and sockets.
 * `test_grow --testbed-repair DIR` is one rank of tests/testbed/test_grow_repair.sh (not run alone):
 * RANK and WORLD_SIZE from the testbed; the last rank grows in, then AllReduces run in a loop while
 * the script cuts a NIC link (see tbRepair).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "mp_util.h"

#define COUNT 1031         /* elements per rank and collective: odd, so no size is a round number */
#define DETECT_BOUND_S 10.0 /* survivors see the lost rank within this */
#define ABORT_BOUND_S 1.0   /* revoke and abort return, and stop what runs, within this */

/* ------------------------------------------------------------ every collective, exact */

static int32_t val(int r, int i) { return (r + 1) * 3 + i % 11; }

static int32_t* ints(size_t n) {
  int32_t* p = calloc(n, sizeof(int32_t));
  CK(p != NULL);
  return p;
}

/* Every collective and a send/recv ring on comm, each checked element by element.  `expectN` is the
 * size comm must have and `expectRank` (>= 0) the rank this process must hold. */
static void checkColls(ncclComm_t comm, int expectN, int expectRank) {
  int n = -1, me = -1;
  CKOK(ncclCommCount(comm, &n));
  CKOK(ncclCommUserRank(comm, &me));
  CK(n == expectN);
  CK(expectRank < 0 || me == expectRank);
  const size_t C = COUNT;
  int32_t *in = ints(C * n), *out = ints(C * n);
  int32_t tri = 3 * n * (n + 1) / 2;
  /* AllReduce: sum and max */
  for (size_t i = 0; i < C; i++) in[i] = val(me, (int)i);
  CKOK(ncclAllReduce(in, out, C, ncclInt32, ncclSum, comm, NULL));
  for (size_t i = 0; i < C; i++) CK(out[i] == tri + n * (int32_t)(i % 11));
  CKOK(ncclAllReduce(in, out, C, ncclInt32, ncclMax, comm, NULL));
  for (size_t i = 0; i < C; i++) CK(out[i] == val(n - 1, (int)i));
  /* Broadcast from the last rank; Reduce to rank 0 */
  CKOK(ncclBroadcast(in, out, C, ncclInt32, n - 1, comm, NULL));
  for (size_t i = 0; i < C; i++) CK(out[i] == val(n - 1, (int)i));
  memset(out, 0, C * sizeof(int32_t));
  CKOK(ncclReduce(in, out, C, ncclInt32, ncclSum, 0, comm, NULL));
  for (size_t i = 0; me == 0 && i < C; i++) CK(out[i] == tri + n * (int32_t)(i % 11));
  /* AllGather */
  CKOK(ncclAllGather(in, out, C, ncclInt32, comm, NULL));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < C; i++) CK(out[r * C + i] == val(r, (int)i));
  /* ReduceScatter: rank r gets the sum of everyone's block r */
  for (size_t j = 0; j < C * n; j++) in[j] = val(me, (int)j);
  CKOK(ncclReduceScatter(in, out, C, ncclInt32, ncclSum, comm, NULL));
  for (size_t i = 0; i < C; i++) CK(out[i] == tri + n * (int32_t)((me * C + i) % 11));
  /* AlltoAll: block p of rank r holds r * 100 + p * 7 + i % 5 */
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < C; i++) in[p * C + i] = me * 100 + p * 7 + (int32_t)(i % 5);
  CKOK(ncclAlltoAll(in, out, C, ncclInt32, comm, NULL));
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < C; i++) CK(out[q * C + i] == q * 100 + me * 7 + (int32_t)(i % 5));
  /* Gather to the middle rank, Scatter from rank 0 */
  int groot = n / 2;
  for (size_t i = 0; i < C; i++) in[i] = val(me, (int)i);
  CKOK(ncclGather(in, out, C, ncclInt32, groot, comm, NULL));
  for (int q = 0; me == groot && q < n; q++)
    for (size_t i = 0; i < C; i++) CK(out[q * C + i] == val(q, (int)i));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < C; i++) in[p * C + i] = p * 13 + (int32_t)(i % 3);
  CKOK(ncclScatter(in, out, C, ncclInt32, 0, comm, NULL));
  for (size_t i = 0; i < C; i++) CK(out[i] == me * 13 + (int32_t)(i % 3));
  /* Send/recv ring */
  for (size_t i = 0; i < C; i++) in[i] = val(me, (int)i);
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  CKOK(ncclGroupStart());
  CKOK(ncclSend(in, C, ncclInt32, next, comm, NULL));
  CKOK(ncclRecv(out, C, ncclInt32, prev, comm, NULL));
  CKOK(ncclGroupEnd());
  for (size_t i = 0; i < C; i++) CK(out[i] == val(prev, (int)i));
  free(in);
  free(out);
}

/* ------------------------------------------------------------ helpers */

static ncclResult_t waitAsync(ncclComm_t comm) { return mpWaitComm(comm, 60); }

/* The last WARN mentions `word`. */
static void ckLastError(const char* word) {
  const char* last = ncclGetLastError(NULL);
  if (last == NULL || strstr(last, word) == NULL) {
    fprintf(stderr, "rank %d: last error \"%s\" does not mention \"%s\"\n", mpRank, last ? last : "(null)", word);
    exit(1);
  }
}

/* The old communicator: ranks below oldN only. */
static ncclComm_t initOld(int rank, int oldN, const char* dir) {
  ncclComm_t comm = mpInitComm(rank, oldN, dir);
  checkColls(comm, oldN, rank);
  return comm;
}

/* Existing rank 0 makes the grow id and publishes it as dir/grow. */
static void publishGrowId(ncclComm_t old, const char* dir, ncclUniqueId* id) {
  CKOK(ncclCommGetUniqueId(old, id));
  mpPutId(dir, "grow", id);
}

/* A split or shrink of `parent` returned r: done, or (non-blocking parent) in progress until both are ready. */
static void ckChild(ncclResult_t r, ncclComm_t parent, ncclComm_t child) {
  CK(r == ncclSuccess || r == ncclInProgress);
  CK(child != NULL);
  CKOK(waitAsync(child));
  CKOK(waitAsync(parent));
}

/* The grown communicator works, then splits (two colors) and shrinks (without its last rank); a
 * non-blocking one's children are non-blocking too. */
static void useGrown(ncclComm_t grown, int n, int rank) {
  checkColls(grown, n, rank);
  ncclComm_t half = NULL;
  ncclResult_t r = ncclCommSplit(grown, rank % 2, rank, &half, NULL);
  ckChild(r, grown, half);
  checkColls(half, (n + 1 - rank % 2) / 2, rank / 2);
  CKOK(ncclCommDestroy(half));
  if (rank != n - 1) {
    int excl[1] = {n - 1};
    ncclComm_t less = NULL;
    r = ncclCommShrink(grown, excl, 1, &less, NULL, NCCL_SHRINK_DEFAULT);
    ckChild(r, grown, less);
    checkColls(less, n - 1, rank);
    CKOK(ncclCommDestroy(less));
  }
  checkColls(grown, n, rank);
}

/* ------------------------------------------------------------ scenarios */

/* Blocking grow oldN -> n, optionally inside a group; existing rank 1 passes the id when it has it. */
static void scGrow(int rank, int n, int oldN, const char* dir, int inGroup, int nonBlocking) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = nonBlocking ? 0 : 1;
  ncclComm_t grown = NULL;
  ncclResult_t want = nonBlocking ? ncclInProgress : ncclSuccess;
  ncclComm_t old = NULL;
  ncclUniqueId id;
  if (rank < oldN) {
    old = initOld(rank, oldN, dir);
    if (rank == 0) publishGrowId(old, dir, &id);
    const ncclUniqueId* pass = rank == 0 && oldN > 2 ? &id : NULL; /* the coordinator may pass its id */
    if (inGroup) CKOK(ncclGroupStart());
    ncclResult_t r = ncclCommGrow(old, n, pass, -1, &grown, nonBlocking ? &cfg : NULL);
    if (inGroup) r = r == ncclSuccess ? ncclGroupEnd() : r;
    if (r != want && !(nonBlocking && r == ncclSuccess)) {
      fprintf(stderr, "rank %d: ncclCommGrow returned %d (%s)\n", rank, r, ncclGetErrorString(r));
      exit(1);
    }
    CK(grown != NULL);
    if (nonBlocking) {
      ncclResult_t pst = ncclSuccess;
      CKOK(ncclCommGetAsyncError(old, &pst));
      CK(pst == ncclInProgress || pst == ncclSuccess); /* busy while it grows, then itself again */
      CKOK(waitAsync(grown));
      CKOK(waitAsync(old));
    }
  } else {
    mpGetId(dir, "grow", &id, 60);
    if (inGroup) CKOK(ncclGroupStart());
    ncclResult_t r = ncclCommGrow(NULL, n, &id, rank, &grown, nonBlocking ? &cfg : NULL);
    if (inGroup) r = r == ncclSuccess ? ncclGroupEnd() : r;
    CK(r == want || (nonBlocking && r == ncclSuccess));
    CK(grown != NULL);
    if (nonBlocking) CKOK(waitAsync(grown));
  }
  useGrown(grown, n, rank);
  if (old) checkColls(old, oldN, rank); /* the old communicator still works beside it */
  CKOK(ncclCommDestroy(grown));
  if (old) CKOK(ncclCommDestroy(old));
}

/* A new rank with bad ids: each refused at once with a WARN; then the real id and rank work.  The
 * last two new ranks both claim rank n - 2 first: the root refuses one (duplicate), which then takes
 * the last number. */
static void scBadId(int rank, int n, int oldN, const char* dir) {
  if (rank < oldN) {
    ncclComm_t old = initOld(rank, oldN, dir);
    ncclUniqueId id;
    if (rank == 0) publishGrowId(old, dir, &id);
    ncclComm_t grown = NULL;
    CKOK(ncclCommGrow(old, n, NULL, -1, &grown, NULL));
    checkColls(grown, n, rank);
    CKOK(ncclCommDestroy(grown));
    CKOK(ncclCommDestroy(old));
    return;
  }
  ncclUniqueId good, bad;
  ncclComm_t grown = (ncclComm_t)0x1;
  mpGetId(dir, "grow", &good, 60);
  if (rank == oldN) {
    CKOK(ncclGetUniqueId(&bad)); /* an init id is no grow id */
    CKR(ncclCommGrow(NULL, n, &bad, rank, &grown, NULL), ncclInvalidArgument);
    ckLastError("not an id from ncclCommGetUniqueId");
    CK(grown == NULL);
    for (size_t i = 0; i < sizeof(bad.internal); i++) bad.internal[i] = (char)(rand() & 0xff);
    CKR(ncclCommGrow(NULL, n, &bad, rank, &grown, NULL), ncclInvalidArgument);
    ckLastError("refused");
    for (size_t i = 0; i < sizeof(bad.internal); i += 7) { /* one changed byte anywhere is seen */
      bad = good;
      bad.internal[i] ^= 0x20;
      CKR(ncclCommGrow(NULL, n, &bad, rank, &grown, NULL), ncclInvalidArgument);
      ckLastError("refused");
    }
    CKR(ncclCommGrow(NULL, n, &good, oldN - 1, &grown, NULL), ncclInvalidArgument);
    ckLastError("collides with an existing rank");
    CKR(ncclCommGrow(NULL, oldN, &good, rank, &grown, NULL), ncclInvalidArgument);
    CKR(ncclCommGrow(NULL, n, &good, n, &grown, NULL), ncclInvalidArgument);
    ckLastError("outside");
  }
  /* With three new ranks or more, the last two race for number n - 2; the loser takes n - 1. */
  int racer = n - oldN >= 3 && rank >= n - 2, claim = racer ? n - 2 : rank;
  ncclResult_t r = ncclCommGrow(NULL, n, &good, claim, &grown, NULL);
  if (r == ncclInvalidUsage && racer) {
    ckLastError("already registered");
    CK(grown == NULL);
    claim = n - 1; /* the loser takes the last number */
    r = ncclCommGrow(NULL, n, &good, claim, &grown, NULL);
  }
  CKOK(r);
  checkColls(grown, n, claim);
  CKOK(ncclCommDestroy(grown));
}

/* Existing ranks only (n == oldN): id errors and agreement. */
static void scIdRules(int rank, int n, const char* dir) {
  ncclComm_t old = initOld(rank, n, dir);
  ncclComm_t grown = (ncclComm_t)0x1;
  ncclUniqueId id, id2;
  /* No coordinator: every rank fails alike. */
  CKR(ncclCommGrow(old, n + 1, NULL, -1, &grown, NULL), ncclInvalidUsage);
  ckLastError("no rank");
  CK(grown == NULL);
  if (rank == 0) {
    CKOK(ncclCommGetUniqueId(old, &id));
    CKR(ncclCommGetUniqueId(old, &id2), ncclInvalidUsage);
    ckLastError("one id at a time");
  }
  /* Sizes that disagree: every rank fails alike, and the id is used up. */
  CKR(ncclCommGrow(old, n + 1 + (rank == 1), NULL, -1, &grown, NULL), ncclInvalidArgument);
  ckLastError("disagree");
  /* An existing rank passing some other id is refused at once. */
  if (rank == 1) {
    memset(&id2, 0, sizeof(id2));
    CKR(ncclCommGrow(old, n + 1, &id2, -1, &grown, NULL), ncclInvalidArgument);
    ckLastError("refused");
  }
  if (rank == 0) {
    CKOK(ncclCommGetUniqueId(old, &id2)); /* the failed grow used the first id up */
    CK(memcmp(&id, &id2, sizeof(id)) != 0);
  }
  CKOK(ncclCommDestroy(old)); /* rank 0's unused id is retired with it */
}

/* Recovery: ranks 0..N-1 (N = n - 1) train; rank `lost` is SIGKILLed; the survivors detect it, shrink
 * with NCCL_SHRINK_ABORT, train on N-1, and process n-1 (the replacement) joins by Grow. */
static void scRecover(int rank, int n, const char* dir) {
  int N = n - 1, lost = 1;
  if (rank == N) { /* the replacement: starts now, joins when the survivors publish the id */
    ncclUniqueId id;
    mpGetId(dir, "grow", &id, 60);
    ncclComm_t grown = NULL;
    CKOK(ncclCommGrow(NULL, N, &id, N - 1, &grown, NULL));
    checkColls(grown, N, N - 1);
    CKOK(ncclCommDestroy(grown));
    return;
  }
  ncclComm_t comm = initOld(rank, N, dir);
  usleep(300 * 1000); /* the lost rank's last slots reach the others before it goes */
  if (rank == lost) raise(SIGKILL);
  usleep(300 * 1000);
  int32_t* buf = ints(COUNT);
  double t0 = mtNow();
  ncclResult_t r = ncclAllReduce(buf, buf, COUNT, ncclInt32, ncclSum, comm, NULL);
  double took = mtNow() - t0;
  CK(r != ncclSuccess);
  if (took > DETECT_BOUND_S) {
    fprintf(stderr, "rank %d: the loss was seen only after %.3f s\n", rank, took);
    exit(1);
  }
  ncclResult_t async = ncclSuccess;
  CKOK(ncclCommGetAsyncError(comm, &async));
  CK(async != ncclSuccess);
  int excl[1] = {lost};
  ncclComm_t shrunk = NULL;
  CKOK(ncclCommShrink(comm, excl, 1, &shrunk, NULL, NCCL_SHRINK_ABORT));
  int sRank = rank - (rank > lost);
  checkColls(shrunk, N - 1, sRank);
  ncclUniqueId id;
  if (sRank == 0) publishGrowId(shrunk, dir, &id);
  ncclComm_t grown = NULL;
  CKOK(ncclCommGrow(shrunk, N, NULL, -1, &grown, NULL));
  checkColls(grown, N, sRank);
  checkColls(shrunk, N - 1, sRank);
  CKOK(ncclCommDestroy(grown));
  CKOK(ncclCommDestroy(shrunk));
  CKOK(ncclCommAbort(comm));
  free(buf);
}

/* ------------------------------------------------------------ a grown communicator is a full one */

/* Every process of [0, n) reached `tag` (through files in dir, bounded). */
static void fileBarrier(const char* dir, const char* tag, int rank, int n) {
  ncclUniqueId z;
  char name[64];
  memset(&z, 0, sizeof(z));
  snprintf(name, sizeof name, "%s%d", tag, rank);
  mpPutId(dir, name, &z);
  for (int r = 0; r < n; r++) {
    snprintf(name, sizeof name, "%s%d", tag, r);
    mpGetId(dir, name, &z, 60);
  }
}

struct blocked {
  ncclComm_t comm;  /* communicator the AllReduce runs on */
  int32_t* buf;     /* its buffer */
  ncclResult_t res; /* what it returned */
  double doneAt;    /* when */
  _Atomic int done; /* it returned (res and doneAt written before) */
};

static void* blockedMain(void* p) {
  struct blocked* b = p;
  b->res = ncclAllReduce(b->buf, b->buf, COUNT, ncclInt32, ncclSum, b->comm, NULL);
  b->doneAt = mtNow();
  atomic_store(&b->done, 1);
  return NULL;
}

/* Ranks below the last start an AllReduce on the grown communicator that the last never joins; their
 * revoke stops it in time, new work is refused, and they shrink the revoked communicator without the
 * last rank, which destroys its own revoked copy once they are done. */
static void revokeGrown(ncclComm_t grown, int rank, int n, const char* dir) {
  int last = n - 1;
  if (rank == last) {
    CKOK(ncclCommRevoke(grown, NCCL_REVOKE_DEFAULT));
    fileBarrier(dir, "revoked", rank, n);
    ncclResult_t r = ncclCommDestroy(grown);
    CK(r == ncclSuccess || r == ncclRemoteError);
    return;
  }
  struct blocked b = {.comm = grown, .buf = ints(COUNT)};
  pthread_t th;
  CK(pthread_create(&th, NULL, blockedMain, &b) == 0);
  usleep(300 * 1000);
  CK(!atomic_load(&b.done));
  double t0 = mtNow();
  CKOK(ncclCommRevoke(grown, NCCL_REVOKE_DEFAULT));
  CK(mtNow() - t0 < ABORT_BOUND_S);
  while (!atomic_load(&b.done) && mtNow() - t0 < 5.0) usleep(1000);
  CK(atomic_load(&b.done) && b.res != ncclSuccess && b.doneAt - t0 < ABORT_BOUND_S);
  CK(pthread_join(th, NULL) == 0);
  CK(ncclAllReduce(b.buf, b.buf, COUNT, ncclInt32, ncclSum, grown, NULL) != ncclSuccess);
  int excl[1] = {last};
  ncclComm_t less = NULL;
  CKOK(ncclCommShrink(grown, excl, 1, &less, NULL, NCCL_SHRINK_DEFAULT));
  checkColls(less, n - 1, rank);
  CKOK(ncclCommDestroy(less));
  fileBarrier(dir, "revoked", rank, n);
  ncclResult_t r = ncclCommDestroy(grown);
  CK(r == ncclSuccess || r == ncclRemoteError);
  free(b.buf);
}

/* The last rank aborts `comm` while the others wait in an AllReduce on it: theirs fails within
 * DETECT_BOUND_S, and their own abort is bounded. */
static void abortLast(ncclComm_t comm, int rank, int n) {
  double t0;
  if (rank == n - 1) {
    usleep(300 * 1000);
    t0 = mtNow();
    CKOK(ncclCommAbort(comm));
    CK(mtNow() - t0 < ABORT_BOUND_S);
    return;
  }
  int32_t* buf = ints(COUNT);
  t0 = mtNow();
  ncclResult_t r = ncclAllReduce(buf, buf, COUNT, ncclInt32, ncclSum, comm, NULL);
  double took = mtNow() - t0;
  if (r == ncclSuccess || took > DETECT_BOUND_S) {
    fprintf(stderr, "rank %d: AllReduce beside an aborted rank returned %d after %.3f s\n", rank, r, took);
    exit(1);
  }
  t0 = mtNow();
  CKOK(ncclCommAbort(comm));
  CK(mtNow() - t0 < ABORT_BOUND_S);
  free(buf);
}

/* The grown communicator grows again, by the extra process (number N): every collective on N + 1;
 * then the extra process aborts this twice-grown communicator under the others' AllReduce. */
static void growAgain(ncclComm_t grown, int rank, int N, const char* dir) {
  ncclUniqueId id;
  ncclComm_t again = NULL;
  if (rank == N) {
    mpGetId(dir, "grow2", &id, 60);
    CKOK(ncclCommGrow(NULL, N + 1, &id, N, &again, NULL));
  } else {
    if (rank == N - 1) { /* the grown-in rank coordinates this time */
      CKOK(ncclCommGetUniqueId(grown, &id));
      mpPutId(dir, "grow2", &id);
    }
    CKOK(ncclCommGrow(grown, N + 1, NULL, -1, &again, NULL));
  }
  checkColls(again, N + 1, rank);
  abortLast(again, rank, N + 1);
}

/* N = n - 1 ranks shrink without the last (NCCL_SHRINK_DEFAULT), which joins back through Grow; the
 * grown communicator then does everything a communicator does, growing again by process N too. */
static void scFull(int rank, int n, const char* dir) {
  int N = n - 1, last = N - 1;
  if (rank == N) { /* the extra process: only in the second grow */
    growAgain(NULL, rank, N, dir);
    return;
  }
  ncclComm_t comm = initOld(rank, N, dir), shrunk = NULL, grown = NULL;
  ncclUniqueId id;
  if (rank != last) {
    int excl[1] = {last};
    CKOK(ncclCommShrink(comm, excl, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT));
    checkColls(shrunk, N - 1, rank);
    if (rank == 0) publishGrowId(shrunk, dir, &id);
    CKOK(ncclCommGrow(shrunk, N, NULL, -1, &grown, NULL));
  } else {
    mpGetId(dir, "grow", &id, 60);
    CKOK(ncclCommGrow(NULL, N, &id, last, &grown, NULL));
  }
  useGrown(grown, N, rank); /* every collective, a split, a shrink */
  growAgain(grown, rank, N, dir); /* and an abort of what that makes */
  checkColls(grown, N, rank);
  revokeGrown(grown, rank, N, dir);
  if (shrunk) checkColls(shrunk, N - 1, rank); /* what the grown one came from still works */
  fileBarrier(dir, "end", rank, N);
  if (shrunk) CKOK(ncclCommDestroy(shrunk));
  CKOK(ncclCommDestroy(comm));
}

/* ------------------------------------------------------------ testbed: hot repair on a grown one */

#define TB_COUNT (1 << 20) /* 4 MiB per AllReduce: a link cut lands inside one on 1 Gbit rails */
#define TB_AFTER_S 3.0     /* the loop goes on this long after the cut (and 5 AllReduces at least) */
#define TB_WATCHDOG_S 100  /* a rank never outlives this */

static int tbFlag(const char* dir, const char* name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

/* AllReduces on `comm`, each checked element by element, until rank 0 (which has seen dir/faulted
 * for TB_AFTER_S) says stop; rank 0 marks dir/looping once the loop runs. */
static void tbLoop(ncclComm_t comm, int rank, int n, const char* dir) {
  int32_t* buf = ints(TB_COUNT);
  int32_t stop = 0, tri = 3 * n * (n + 1) / 2;
  long it = 0, after = 0;
  double faultAt = 0;
  ncclUniqueId z;
  memset(&z, 0, sizeof(z));
  for (; !stop; it++) {
    for (size_t i = 0; i < TB_COUNT; i++) buf[i] = val(rank, (int)(i + it));
    CKOK(ncclAllReduce(buf, buf, TB_COUNT, ncclInt32, ncclSum, comm, NULL));
    for (size_t i = 0; i < TB_COUNT; i++) CK(buf[i] == tri + n * (int32_t)((i + it) % 11));
    if (rank == 0) {
      if (it == 2) mpPutId(dir, "looping", &z);
      if (faultAt == 0 && tbFlag(dir, "faulted")) faultAt = mtNow();
      after += faultAt > 0;
      stop = faultAt > 0 && after >= 5 && mtNow() - faultAt >= TB_AFTER_S;
    }
    CKOK(ncclBroadcast(&stop, &stop, 1, ncclInt32, 0, comm, NULL));
  }
  if (rank == 0) printf("grow_repair: %ld AllReduces exact on %d ranks, %ld after the cut\n", it, n, after);
  free(buf);
}

/* One testbed rank: ranks below WORLD_SIZE - 1 make a communicator, the last joins by Grow, and the
 * grown communicator runs every collective, then the AllReduce loop. */
static int tbRepair(const char* dir) {
  const char *re = getenv("RANK"), *ws = getenv("WORLD_SIZE");
  int rank = re ? atoi(re) : -1, n = ws ? atoi(ws) : 0;
  if (rank < 0 || n < 3 || n > MP_MAX_RANKS || rank >= n) {
    fprintf(stderr, "test_grow --testbed-repair: RANK (%s) and WORLD_SIZE (%s) must be set, 3 <= WORLD_SIZE <= %d\n",
            re ? re : "unset", ws ? ws : "unset", MP_MAX_RANKS);
    return 2;
  }
  mpChildSetup(rank, TB_WATCHDOG_S);
  setvbuf(stdout, NULL, _IOLBF, 0);
  ncclComm_t old = NULL, grown = NULL;
  ncclUniqueId id;
  if (rank < n - 1) {
    old = initOld(rank, n - 1, dir);
    if (rank == 0) publishGrowId(old, dir, &id);
    CKOK(ncclCommGrow(old, n, NULL, -1, &grown, NULL));
  } else {
    mpGetId(dir, "grow", &id, 60);
    CKOK(ncclCommGrow(NULL, n, &id, rank, &grown, NULL));
  }
  checkColls(grown, n, rank);
  tbLoop(grown, rank, n, dir);
  checkColls(grown, n, rank); /* after the repair, every collective again */
  CKOK(ncclCommDestroy(grown));
  if (old) CKOK(ncclCommDestroy(old));
  return 0;
}

static int child(char** argv) {
  struct mpChild c = mpChildStart(argv, 150);
  const char *sc = c.scenario, *dir = c.arg;
  int rank = c.rank, n = c.n, oldN = 0;
  char name[32] = "";
  if (sscanf(sc, "%31[a-z_]:%d", name, &oldN) < 1) return 2;
  if (strcmp(name, "blocking") == 0) scGrow(rank, n, oldN, dir, 0, 0);
  else if (strcmp(name, "nonblocking") == 0) scGrow(rank, n, oldN, dir, 0, 1);
  else if (strcmp(name, "group") == 0) scGrow(rank, n, oldN, dir, 1, 0);
  else if (strcmp(name, "group_nonblocking") == 0) scGrow(rank, n, oldN, dir, 1, 1);
  else if (strcmp(name, "bad_id") == 0) scBadId(rank, n, oldN, dir);
  else if (strcmp(name, "id_rules") == 0) scIdRules(rank, n, dir);
  else if (strcmp(name, "recover") == 0) scRecover(rank, n, dir);
  else if (strcmp(name, "full") == 0) scFull(rank, n, dir);
  else {
    fprintf(stderr, "unknown scenario %s\n", sc);
    return 2;
  }
  return 0;
}

static const char* only; /* argv[1]: run the scenarios whose name holds it */

static void run(const char* name, const char* sc, int n, const char* const* env, double timeoutS, unsigned killed) {
  if (only == NULL || strstr(name, only)) mpRun(name, sc, n, env, timeoutS, n, killed);
}

int main(int argc, char** argv) {
  if (mpIsChild(argc, argv)) return child(argv);
  if (argc == 3 && strcmp(argv[1], "--testbed-repair") == 0) return tbRepair(argv[2]);
  only = argc > 1 ? argv[1] : NULL;
  if (!mtStart("grow", 900)) return mtExitCode();
  run("grow_blocking_2_to_3", "blocking:2", 3, NULL, 120, 0);
  run("grow_blocking_4_to_6", "blocking:4", 6, NULL, 120, 0);
  run("grow_nonblocking_2_to_4", "nonblocking:2", 4, NULL, 120, 0);
  run("grow_in_group_3_to_4", "group:3", 4, NULL, 120, 0);
  run("grow_in_group_nonblocking_2_to_3", "group_nonblocking:2", 3, NULL, 120, 0);
  run("grow_bad_id_and_collisions_2_to_5", "bad_id:2", 5, NULL, 120, 0);
  run("grow_id_rules", "id_rules:3", 3, NULL, 120, 0);
  const char* const net[] = {"NCCL_SHM_DISABLE=1", "NCCL_SOCKET_IFNAME=lo", NULL};
  run("grow_recover_4_shm", "recover:4", 5, NULL, 150, 1u << 1);
  run("grow_recover_4_sockets", "recover:4", 5, net, 150, 1u << 1);
  run("grow_full_shm", "full:4", 5, NULL, 120, 0);
  run("grow_full_sockets", "full:4", 5, net, 120, 0);
  return mtExitCode();
}
