/*
 * Communicator lifecycle through the public API, one process per rank (this program re-executes
 * itself once per rank; see mp_util.h): NCCL_COMM_ID (IPv4, [IPv6], host name) with every rank
 * calling ncclGetUniqueId, ncclCommInitRankScalable with several roots, several inits in one group
 * from one thread and from several threads, non-blocking init/split/shrink/finalize, ncclCommSplit
 * (NOCOLOR, key order, inherited config), ncclCommShrink (default and abort, around a dead rank),
 * ncclCommRevoke, finalize, NCCL_HOSTID.  Every communicator made is checked with a real
 * AllReduce/AllGather.
 */
#include <dlfcn.h>
#include <pthread.h>

#include "mp_util.h"

#define COUNT 1031 /* elements per check: not a nice number */

/* ------------------------------------------------------------ checks run by every child */

/* AllReduce of (rank + 1) * (i % 7 + 1) over the communicator, checked element by element. */
static void checkAllReduce(ncclComm_t comm) {
  int n = -1, me = -1;
  CKOK(ncclCommCount(comm, &n));
  CKOK(ncclCommUserRank(comm, &me));
  int32_t* buf = malloc(COUNT * sizeof(int32_t));
  CK(buf != NULL);
  for (int i = 0; i < COUNT; i++) buf[i] = (me + 1) * (i % 7 + 1);
  CKOK(ncclAllReduce(buf, buf, COUNT, ncclInt32, ncclSum, comm, NULL));
  for (int i = 0; i < COUNT; i++) CK(buf[i] == n * (n + 1) / 2 * (i % 7 + 1));
  free(buf);
}

/* checkAllReduce, then an orderly destroy. */
static void checkThenDestroy(ncclComm_t comm) {
  checkAllReduce(comm);
  CKOK(ncclCommDestroy(comm));
}

/* AllGather of one int per rank: out[child rank] = value of that rank. */
static void allGatherInt(ncclComm_t comm, int value, int* out) {
  int n = -1, me = -1;
  CKOK(ncclCommCount(comm, &n));
  CKOK(ncclCommUserRank(comm, &me));
  int32_t* all = calloc((size_t)n, sizeof(int32_t));
  int32_t mine = value;
  CK(all != NULL);
  CKOK(ncclAllGather(&mine, all, 1, ncclInt32, comm, NULL));
  for (int r = 0; r < n; r++) out[r] = all[r];
  free(all);
}

static ncclResult_t waitAsync(ncclComm_t comm) { return mpWaitComm(comm, 60); }

/* ------------------------------------------------------------ scenarios (child side) */

/* NCCL_COMM_ID is set: every rank derives the id itself, and all derive the same bytes. */
static void scCommId(int rank, int n, const char* dir) {
  ncclUniqueId id, other;
  char name[32];
  CKOK(ncclGetUniqueId(&id));
  snprintf(name, sizeof name, "id%d", rank);
  mpPutId(dir, name, &id);
  for (int r = 0; r < n; r++) {
    snprintf(name, sizeof name, "id%d", r);
    mpGetId(dir, name, &other, 30);
    CK(memcmp(&id, &other, sizeof(id)) == 0);
  }
  ncclComm_t comm;
  CKOK(ncclCommInitRank(&comm, n, id, rank));
  checkThenDestroy(comm);
}

/* ncclCommInitRankScalable: the first nIds ranks each create one id (and its root). */
static void scScalable(int rank, int n, const char* dir, int nIds) {
  ncclUniqueId ids[4];
  char name[32];
  if (rank < nIds) {
    CKOK(ncclGetUniqueId(&ids[rank]));
    snprintf(name, sizeof name, "root%d", rank);
    mpPutId(dir, name, &ids[rank]);
  }
  for (int i = 0; i < nIds; i++) {
    snprintf(name, sizeof name, "root%d", i);
    mpGetId(dir, name, &ids[i], 30);
  }
  ncclComm_t comm;
  CKOK(ncclCommInitRankScalable(&comm, n, rank, nIds, ids, NULL));
  checkThenDestroy(comm);
}

/* Collectives of both local ranks must be issued together (each waits for the other). */
static void checkTwoLocal(ncclComm_t* comms) {
  int32_t in[2][64], out[2][64];
  int n = -1, me[2];
  CKOK(ncclCommCount(comms[0], &n));
  for (int k = 0; k < 2; k++) {
    CKOK(ncclCommUserRank(comms[k], &me[k]));
    for (int i = 0; i < 64; i++) in[k][i] = me[k] * 100 + i;
  }
  CKOK(ncclGroupStart());
  for (int k = 0; k < 2; k++) CKOK(ncclAllReduce(in[k], out[k], 64, ncclInt32, ncclSum, comms[k], NULL));
  CKOK(ncclGroupEnd());
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 64; i++) CK(out[k][i] == 100 * n * (n - 1) / 2 + n * i);
}

/* Several ncclCommInitRank in one group, from one thread (as nccl-tests -g 2 does): process p holds
 * ranks 2p and 2p+1. */
static void scGroupInit(int proc, int nProcs, const char* dir) {
  ncclUniqueId id;
  ncclComm_t comms[2] = {NULL, NULL};
  mpShareId(proc, dir, "id", &id);
  CKOK(ncclGroupStart());
  for (int k = 0; k < 2; k++) CKOK(ncclCommInitRank(&comms[k], 2 * nProcs, id, 2 * proc + k));
  CKOK(ncclGroupEnd());
  for (int k = 0; k < 2; k++) {
    int r = -1;
    CKOK(ncclCommUserRank(comms[k], &r));
    CK(r == 2 * proc + k);
  }
  checkTwoLocal(comms);
  for (int k = 0; k < 2; k++) CKOK(ncclCommDestroy(comms[k]));
}

struct initThread {
  ncclUniqueId id;  /* shared id */
  int nRanks, rank; /* communicator size, this thread's rank */
  int useGroup;     /* wrap the init in a group of its own */
  ncclComm_t comm;  /* result */
  ncclResult_t res; /* init result */
};

static void* initThreadMain(void* p) {
  struct initThread* t = p;
  if (t->useGroup) ncclGroupStart();
  t->res = ncclCommInitRank(&t->comm, t->nRanks, t->id, t->rank);
  if (t->useGroup) {
    ncclResult_t end = ncclGroupEnd();
    if (t->res == ncclSuccess) t->res = end;
  }
  return NULL;
}

/* Two threads per process each create their own rank (plain, then each inside its own group). */
static void scThreadInit(int proc, int nProcs, const char* dir) {
  for (int useGroup = 0; useGroup < 2; useGroup++) {
    struct initThread t[2];
    pthread_t th[2];
    char name[16];
    snprintf(name, sizeof name, "id%d", useGroup);
    ncclUniqueId id;
    mpShareId(proc, dir, name, &id);
    for (int k = 0; k < 2; k++) {
      t[k] = (struct initThread){.id = id, .nRanks = 2 * nProcs, .rank = 2 * proc + k, .useGroup = useGroup};
      CK(pthread_create(&th[k], NULL, initThreadMain, &t[k]) == 0);
    }
    for (int k = 0; k < 2; k++) {
      CK(pthread_join(th[k], NULL) == 0);
      CKOK(t[k].res);
    }
    ncclComm_t comms[2] = {t[0].comm, t[1].comm};
    checkTwoLocal(comms);
    for (int k = 0; k < 2; k++) CKOK(ncclCommDestroy(comms[k]));
  }
}

/* Non-blocking mode: init, split (config inherited), shrink and finalize return ncclInProgress or
 * ncclSuccess, and ncclCommGetAsyncError then reaches ncclSuccess. */
static void scNonBlocking(int rank, int n, const char* dir) {
  ncclUniqueId id;
  mpShareId(rank, dir, "id", &id);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&comm, n, id, rank, &cfg);
  CK(r == ncclInProgress || r == ncclSuccess);
  CK(comm != NULL);
  CKOK(waitAsync(comm));
  checkAllReduce(comm);
  /* split, config NULL: the child inherits blocking = 0 (Mend answers ncclInProgress at once) */
  ncclComm_t child = NULL;
  int color = rank == n - 1 ? NCCL_SPLIT_NOCOLOR : 0;
  r = ncclCommSplit(comm, color, rank, &child, NULL);
  CK(r == ncclInProgress);
  CKOK(waitAsync(comm));
  if (color == NCCL_SPLIT_NOCOLOR) {
    CK(child == NULL);
  } else {
    CK(child != NULL);
    CKOK(waitAsync(child));
    checkAllReduce(child);
  }
  /* an explicit blocking config overrides the parent's */
  ncclConfig_t blockingCfg = NCCL_CONFIG_INITIALIZER;
  blockingCfg.blocking = 1;
  ncclComm_t child2 = NULL;
  CKOK(ncclCommSplit(comm, 0, rank, &child2, &blockingCfg));
  checkAllReduce(child2);
  CKOK(ncclCommDestroy(child2));
  /* shrink without the last rank (which does not call it) */
  if (rank != n - 1) {
    int excl[1] = {n - 1};
    ncclComm_t shrunk = NULL;
    r = ncclCommShrink(comm, excl, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT);
    CK(r == ncclInProgress || r == ncclSuccess);
    CK(shrunk != NULL);
    CKOK(waitAsync(shrunk));
    CKOK(waitAsync(comm));
    checkAllReduce(shrunk);
    r = ncclCommFinalize(shrunk);
    CK(r == ncclInProgress || r == ncclSuccess);
    CKOK(waitAsync(shrunk));
    CKOK(ncclCommDestroy(shrunk));
  }
  if (child) CKOK(ncclCommDestroy(child));
  r = ncclCommFinalize(comm);
  CK(r == ncclInProgress || r == ncclSuccess);
  CKOK(waitAsync(comm));
  CKOK(ncclCommDestroy(comm));
}

/* mpInitComm, then checkAllReduce. */
static ncclComm_t initChecked(int rank, int n, const char* dir) {
  ncclComm_t comm = mpInitComm(rank, n, dir);
  checkAllReduce(comm);
  return comm;
}

/* ncclCommSplit with 5 ranks: colors {0, 1, 0, NOCOLOR, 0}, keys reversing parent order in color 0
 * (ties broken by parent rank). */
static void scSplit(int rank, int n, const char* dir) {
  CK(n == 5);
  ncclComm_t comm = mpInitComm(rank, n, dir);
  static const int colors[5] = {0, 1, 0, NCCL_SPLIT_NOCOLOR, 0};
  static const int keys[5] = {7, 0, 3, 0, 3};     /* color 0 order: rank 2 (3), rank 4 (3), rank 0 (7) */
  static const int childRank[5] = {2, 0, 0, -1, 1};
  ncclComm_t child = (ncclComm_t)0x1;
  CKOK(ncclCommSplit(comm, colors[rank], keys[rank], &child, NULL));
  if (colors[rank] == NCCL_SPLIT_NOCOLOR) {
    CK(child == NULL);
  } else {
    int cn = -1, cr = -1, parents[5];
    CKOK(ncclCommCount(child, &cn));
    CKOK(ncclCommUserRank(child, &cr));
    CK(cn == (colors[rank] == 0 ? 3 : 1));
    CK(cr == childRank[rank]);
    allGatherInt(child, rank, parents);
    if (colors[rank] == 0) CK(parents[0] == 2 && parents[1] == 4 && parents[2] == 0);
    checkThenDestroy(child);
  }
  checkAllReduce(comm); /* the parent still works */
  CKOK(ncclCommDestroy(comm));
}

/* ncclCommShrink (default) of 5 ranks excluding {3, 1} (unsorted): an excluded rank that calls it
 * gets ncclInvalidArgument; the survivors are parent ranks 0, 2, 4, in that order. */
static void scShrink(int rank, int n, const char* dir) {
  CK(n == 5);
  ncclComm_t comm = mpInitComm(rank, n, dir);
  int excl[2] = {3, 1};
  ncclComm_t child = (ncclComm_t)0x1;
  if (rank == 3) {
    /* does not call shrink at all */
  } else if (rank == 1) {
    CKR(ncclCommShrink(comm, excl, 2, &child, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
    CK(child == NULL);
  } else {
    CKOK(ncclCommShrink(comm, excl, 2, &child, NULL, NCCL_SHRINK_DEFAULT));
    CK(excl[0] == 1 && excl[1] == 3); /* NCCL sorts the caller's list in place */
    int cn = -1, cr = -1, parents[3];
    CKOK(ncclCommCount(child, &cn));
    CKOK(ncclCommUserRank(child, &cr));
    CK(cn == 3 && cr == rank / 2);
    allGatherInt(child, rank, parents);
    CK(parents[0] == 0 && parents[1] == 2 && parents[2] == 4);
    checkThenDestroy(child);
  }
  CKOK(ncclCommDestroy(comm));
}

/* ncclCommShrink with NCCL_SHRINK_ABORT around a rank that died: the survivors build their
 * communicator from the parent's without a new unique id, and it works. */
static void scShrinkAbort(int rank, int n, const char* dir) {
  ncclComm_t comm = initChecked(rank, n, dir);
  /* The last rank dies only once every rank finished the check: its own AllReduce returning does
   * not mean the others' did, and an operation still running when a peer is lost fails. */
  mpArrive(dir, "checked", rank);
  if (rank == n - 1) {
    mpAwaitOthers(dir, "checked", rank, n);
    raise(SIGKILL);
  }
  usleep(200 * 1000);
  int excl[1] = {n - 1};
  ncclComm_t child = NULL;
  double t0 = mtNow();
  CKOK(ncclCommShrink(comm, excl, 1, &child, NULL, NCCL_SHRINK_ABORT));
  CK(mtNow() - t0 < 10.0);
  int cn = -1, cr = -1;
  CKOK(ncclCommCount(child, &cn));
  CKOK(ncclCommUserRank(child, &cr));
  CK(cn == n - 1 && cr == rank);
  checkAllReduce(child);
  /* the parent was stopped for good: it takes no more work */
  int32_t x = 1;
  CKR(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, NULL), ncclInvalidUsage);
  CKOK(ncclCommDestroy(child));
  t0 = mtNow();
  CKOK(ncclCommAbort(comm));
  CK(mtNow() - t0 < 1.0);
}

/* ncclCommRevoke: flags must be 0; a revoked communicator takes no work and cannot be finalized,
 * but split still works and destroy ends it. */
static void scRevoke(int rank, int n, const char* dir) {
  ncclComm_t comm = initChecked(rank, n, dir);
  CKR(ncclCommRevoke(comm, 1), ncclInvalidArgument);
  CKOK(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
  int32_t x = 1;
  CKR(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, NULL), ncclInvalidUsage);
  CKR(ncclCommFinalize(comm), ncclInvalidUsage);
  ncclComm_t child = NULL;
  CKOK(ncclCommSplit(comm, 0, rank, &child, NULL));
  CK(child != NULL);
  checkThenDestroy(child);
  CKOK(ncclCommDestroy(comm));
}

/* Blocking finalize, then destroy; finalizing twice is invalid. */
static void scFinalize(int rank, int n, const char* dir) {
  ncclComm_t comm = initChecked(rank, n, dir);
  CKOK(ncclCommFinalize(comm));
  CKR(ncclCommFinalize(comm), ncclInvalidUsage);
  int32_t x = 1;
  CKR(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, NULL), ncclInvalidUsage);
  CKOK(ncclCommDestroy(comm));
}

/* NCCL_HOSTID decides which ranks share a host (network namespaces share a hostname): 4 ranks as
 * 2 hosts x 2.  The host layout is read back through the exported device-API team queries. */
typedef struct { int nRanks, rank, stride; } team_t; /* NCCL 2.28's ncclTeam_t */
static void scHostId(int rank, int n, const char* dir) {
  char host[32];
  snprintf(host, sizeof host, "mend-test-host-%d", rank / 2);
  setenv("NCCL_HOSTID", host, 1);
  ncclComm_t comm = mpInitComm(rank, n, dir);
  team_t (*lsa)(ncclComm_t) = (team_t(*)(ncclComm_t))dlsym(RTLD_DEFAULT, "ncclTeamLsa");
  team_t (*rail)(ncclComm_t) = (team_t(*)(ncclComm_t))dlsym(RTLD_DEFAULT, "ncclTeamRail");
  CK(lsa != NULL && rail != NULL);
  team_t local = lsa(comm), hosts = rail(comm);
  CK(local.nRanks == 2 && local.rank == rank % 2);
  CK(hosts.nRanks == n / 2 && hosts.rank == rank / 2);
  checkThenDestroy(comm);
}

static int child(char** argv) {
  struct mpChild c = mpChildStart(argv, 120);
  const char *sc = c.scenario, *dir = c.arg;
  int rank = c.rank, n = c.n;
  if (strcmp(sc, "commid") == 0) scCommId(rank, n, dir);
  else if (strcmp(sc, "scalable2") == 0) scScalable(rank, n, dir, 2);
  else if (strcmp(sc, "scalable3") == 0) scScalable(rank, n, dir, 3);
  else if (strcmp(sc, "group_init") == 0) scGroupInit(rank, n, dir);
  else if (strcmp(sc, "thread_init") == 0) scThreadInit(rank, n, dir);
  else if (strcmp(sc, "nonblocking") == 0) scNonBlocking(rank, n, dir);
  else if (strcmp(sc, "split") == 0) scSplit(rank, n, dir);
  else if (strcmp(sc, "shrink") == 0) scShrink(rank, n, dir);
  else if (strcmp(sc, "shrink_abort") == 0) scShrinkAbort(rank, n, dir);
  else if (strcmp(sc, "revoke") == 0) scRevoke(rank, n, dir);
  else if (strcmp(sc, "finalize") == 0) scFinalize(rank, n, dir);
  else if (strcmp(sc, "hostid") == 0) scHostId(rank, n, dir);
  else {
    fprintf(stderr, "unknown scenario %s\n", sc);
    return 2;
  }
  return 0;
}

/* ------------------------------------------------------------ parent */

static void run(const char* name, const char* sc, int n, const char* const* env, unsigned mayBeKilled) {
  mpRun(name, sc, n, env, 90, n, mayBeKilled);
}

static void runCommId(const char* name, const char* host, const char* fmt, int n) {
  int port = mpFreePort(host);
  if (port <= 0) {
    printf("ok %s # SKIP no %s on this machine\n", name, host);
    return;
  }
  static char env[128];
  snprintf(env, sizeof env, fmt, port);
  const char* envs[] = {env, NULL};
  run(name, "commid", n, envs, 0);
}

int main(int argc, char** argv) {
  if (mpIsChild(argc, argv)) return child(argv);
  if (!mtStart("lifecycle", 600)) return mtExitCode();
  /* Sockets between "hosts" for a part of the runs: different NCCL_HOSTID, no shared memory. */
  const char* const net[] = {"NCCL_SHM_DISABLE=1", "NCCL_SOCKET_IFNAME=lo", NULL};
  runCommId("lifecycle_commid_ipv4", "127.0.0.1", "NCCL_COMM_ID=127.0.0.1:%d", 3);
  runCommId("lifecycle_commid_ipv6", "::1", "NCCL_COMM_ID=[::1]:%d", 2);
  runCommId("lifecycle_commid_hostname", "127.0.0.1", "NCCL_COMM_ID=localhost:%d", 2);
  run("lifecycle_scalable_2roots_4ranks", "scalable2", 4, NULL, 0);
  run("lifecycle_scalable_3roots_7ranks", "scalable3", 7, NULL, 0);
  run("lifecycle_group_init_one_thread", "group_init", 2, NULL, 0);
  run("lifecycle_init_from_threads", "thread_init", 2, NULL, 0);
  run("lifecycle_nonblocking", "nonblocking", 4, NULL, 0);
  run("lifecycle_split", "split", 5, NULL, 0);
  run("lifecycle_shrink_default", "shrink", 5, NULL, 0);
  run("lifecycle_shrink_abort_dead_rank_shm", "shrink_abort", 4, NULL, 1u << 3);
  run("lifecycle_shrink_abort_dead_rank_sockets", "shrink_abort", 4, net, 1u << 3);
  run("lifecycle_revoke", "revoke", 3, NULL, 0);
  run("lifecycle_finalize", "finalize", 2, NULL, 0);
  const char* const lo[] = {"NCCL_SOCKET_IFNAME=lo", NULL};
  run("lifecycle_hostid_2hosts_x_2ranks", "hostid", 4, lo, 0);
  return mtExitCode();
}
