/* recover_perf: the recovery scenario, timed: lose a rank, shrink, grow back, beside a full re-init.
 *
 *   recover_perf [-n 4,8,16] [-r REPS] [-k VICTIM] [-K LOST] [-c COUNT] [-T TIMEOUT_S] [--sockets]
 *                [--testbed NAME --hosts H]
 *
 * For each size N, N processes (forked here, one rank each) make a communicator and run
 * AllReduces in a loop, every result checked; LOST more processes, the replacements, wait idle.
 * Then this program SIGKILLs ranks VICTIM .. VICTIM+LOST-1 (default rank 1 alone) in the middle of
 * the loop and the survivors go through NVIDIA's recovery pattern:
 *   detect   from the kill until a survivor's AllReduce returned an error (no abort, no watchdog:
 *            the library saw the loss); the slowest survivor's time is reported
 *   shrink   ncclCommShrink(NCCL_SHRINK_ABORT) without the victim, then an AllReduce on N-1 ranks,
 *            checked
 *   grow     rank 0 of the shrunk communicator makes an id (ncclCommGetUniqueId), the replacement
 *            joins with it (ncclCommGrow) and the survivors grow, then an AllReduce on N ranks,
 *            checked
 *   reinit   what recovery costs without shrink and grow: every rank destroys its communicators,
 *            rank 0 makes a fresh id and all N init a new communicator (ncclCommInitRank): from
 *            a common start (a barrier) to the last return
 *   init     the ncclCommInitRank part of reinit alone
 * shrink, grow and init run from the last rank's call (the coordinator's: from its id call) to the
 * last return: the collective's own time, not the spread of the ranks' arrival.
 * Times are CLOCK_MONOTONIC, shared by the processes through a shared mapping (so is the unique
 * id: the control plane never uses the library under test).  The table has the median over REPS
 * runs and the worst run; a wrong element or an unexpected result fails the run (exit 1).  The load
 * average is printed before and after: the processes share this host's cores.
 * --sockets: NCCL_SHM_DISABLE=1 and NCCL_SOCKET_IFNAME=lo (the net transport instead of shared memory).
 * --testbed NAME --hosts H: the ranks run on the H hosts of a testbed (tests/testbed, `testbed.py up
 * --name NAME`; root): N/H ranks per host, host-major, each process enters its host's network
 * namespace and gets the testbed's variables (NCCL_HOSTID, NCCL_SOCKET_IFNAME=rail,
 * MEND_OOB_IFNAME=mgmt0); the lost ranks are all of host 1 and their replacements start there.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

#define MAX_RANKS 64
#define MAX_PROCS (2 * MAX_RANKS)
#define MAX_REPS 32

enum stage { ST_DETECT, ST_SHRINK, ST_GROW, ST_REINIT, ST_INIT, NSTAGES };
static const char* const stageName[NSTAGES] = {"detect_s", "shrink_s", "grow_s", "reinit_s", "init_s"};

/* Shared by every process of one run. */
struct shared {
  _Atomic int arrive[8];           /* barrier counters, one per barrier */
  _Atomic int loopIters;           /* AllReduces the survivors-to-be finished before the kill */
  _Atomic int idReady, growReady, reinitReady; /* ids published */
  _Atomic int failed;              /* a process found a wrong result or an unexpected status */
  _Atomic int killing;             /* the victims are being killed (one after the other) */
  ncclUniqueId id, growId, reinitId;
  double killAt;                   /* when the victim was killed */
  double t[MAX_PROCS][12];         /* per process: the times below */
};
enum { T_ERR, T_SHRINK0, T_SHRINK1, T_GROW0, T_GROW1, T_RE0, T_INIT0, T_INIT1 };

static struct shared* sh;
static int gN, gVictim, gLost, gCount; /* ranks, first lost rank, lost ranks, AllReduce elements */
static const char* gTestbed;          /* testbed name, or NULL: this host's network */
static int gHosts = 1;                /* testbed hosts */

static int isLost(int w) { return w >= gVictim && w < gVictim + gLost; }

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fail(int who, const char* what, ncclResult_t r) {
  fprintf(stderr, "recover_perf: process %d: %s (%d: %s)\n", who, what, (int)r, ncclGetErrorString(r));
  atomic_store(&sh->failed, 1);
  _exit(1);
}
#define OK(who, call)                            \
  do {                                           \
    ncclResult_t r_ = (call);                    \
    if (r_ != ncclSuccess) fail(who, #call, r_); \
  } while (0)

/* Spin-wait (with sleeps) until `count` processes reached barrier `b`; bounded by the watchdog. */
static void barrier(int b, int count) {
  atomic_fetch_add(&sh->arrive[b], 1);
  while (atomic_load(&sh->arrive[b]) < count) usleep(200);
}

static void waitFlag(_Atomic int* flag) {
  while (!atomic_load(flag)) usleep(200);
}

/* AllReduce of rank-dependent integers, checked exactly. */
static ncclResult_t checkedAllReduce(ncclComm_t comm, int who, int32_t* buf) {
  int n = 0, me = 0;
  OK(who, ncclCommCount(comm, &n));
  OK(who, ncclCommUserRank(comm, &me));
  for (int i = 0; i < gCount; i++) buf[i] = (me + 1) * (i % 13 + 1);
  ncclResult_t r = ncclAllReduce(buf, buf, (size_t)gCount, ncclInt32, ncclSum, comm, NULL);
  if (r != ncclSuccess) return r;
  for (int i = 0; i < gCount; i++)
    if (buf[i] != n * (n + 1) / 2 * (i % 13 + 1)) fail(who, "wrong AllReduce result", ncclSuccess);
  return ncclSuccess;
}

/* Full re-init of N ranks: destroy what is held, rank 0 makes a fresh id, all init and check. */
static void reinit(int who, int rank, ncclComm_t* comms, int nComms, int32_t* buf) {
  barrier(3, gN);
  sh->t[who][T_RE0] = now();
  for (int i = 0; i < nComms; i++)
    if (comms[i]) OK(who, ncclCommDestroy(comms[i]));
  if (rank == 0) {
    OK(who, ncclGetUniqueId(&sh->reinitId));
    atomic_store(&sh->reinitReady, 1);
  }
  waitFlag(&sh->reinitReady);
  ncclComm_t comm = NULL;
  sh->t[who][T_INIT0] = now();
  OK(who, ncclCommInitRank(&comm, gN, sh->reinitId, rank));
  sh->t[who][T_INIT1] = now();
  OK(who, checkedAllReduce(comm, who, buf));
  /* Every rank is done before any destroys: a peer's orderly close can still fail a slower rank's
   * last operation (its host engine checks every connector of the work, needed or not). */
  barrier(4, gN);
  OK(who, ncclCommDestroy(comm));
}

/* A replacement (process N + j): idle until the survivors publish the grow id; takes rank N-LOST+j. */
static void replacement(int who, int32_t* buf) {
  int rank = who - gLost;
  waitFlag(&sh->growReady);
  ncclComm_t grown = NULL;
  sh->t[who][T_GROW0] = now();
  OK(who, ncclCommGrow(NULL, gN, &sh->growId, rank, &grown, NULL));
  sh->t[who][T_GROW1] = now();
  OK(who, checkedAllReduce(grown, who, buf));
  reinit(who, rank, &grown, 1, buf);
}

/* An original rank: the training loop until the loss, then shrink, grow and re-init. */
static void original(int rank, int32_t* buf) {
  if (rank == 0) {
    OK(rank, ncclGetUniqueId(&sh->id));
    atomic_store(&sh->idReady, 1);
  }
  waitFlag(&sh->idReady);
  ncclComm_t comm = NULL;
  OK(rank, ncclCommInitRank(&comm, gN, sh->id, rank));
  ncclResult_t r;
  for (int it = 0;; it++) {
    r = checkedAllReduce(comm, rank, buf);
    if (r != ncclSuccess) break;
    if (it == 3) atomic_fetch_add(&sh->loopIters, 1); /* the killer waits for every rank's 4th */
  }
  sh->t[rank][T_ERR] = now();
  if (isLost(rank) && !atomic_load(&sh->killing)) fail(rank, "a victim saw an error before any kill", r);
  while (isLost(rank)) pause(); /* another victim died first: our SIGKILL is on its way */
  int excl[MAX_RANKS], sRank = rank - (rank >= gVictim + gLost ? gLost : 0);
  for (int i = 0; i < gLost; i++) excl[i] = gVictim + i;
  ncclComm_t shrunk = NULL;
  sh->t[rank][T_SHRINK0] = now();
  OK(rank, ncclCommShrink(comm, excl, gLost, &shrunk, NULL, NCCL_SHRINK_ABORT));
  sh->t[rank][T_SHRINK1] = now();
  OK(rank, ncclCommAbort(comm)); /* the broken one: nothing to wait for */
  OK(rank, checkedAllReduce(shrunk, rank, buf));
  sh->t[rank][T_GROW0] = now(); /* the coordinator's grow starts with its id */
  if (sRank == 0) {
    OK(rank, ncclCommGetUniqueId(shrunk, &sh->growId));
    atomic_store(&sh->growReady, 1);
  }
  ncclComm_t grown = NULL;
  OK(rank, ncclCommGrow(shrunk, gN, NULL, -1, &grown, NULL));
  sh->t[rank][T_GROW1] = now();
  OK(rank, checkedAllReduce(grown, rank, buf));
  ncclComm_t held[2] = {grown, shrunk};
  reinit(rank, sRank, held, 2, buf);
}

/* Testbed: enter the namespace of this process's host and take the variables a testbed rank gets. */
static void enterHost(int who) {
  int host = who < gN ? who / (gN / gHosts) : 1; /* replacements start on the lost host */
  char name[128], path[256];
  snprintf(name, sizeof name, "%sh%d", gTestbed, host);
  snprintf(path, sizeof path, "/var/run/netns/%s", name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    fprintf(stderr, "recover_perf: process %d: cannot enter %s: %s\n", who, path, strerror(errno));
    atomic_store(&sh->failed, 1);
    _exit(1);
  }
  close(fd);
  setenv("NCCL_HOSTID", name, 1);
  setenv("NCCL_SOCKET_IFNAME", "rail", 1);
  setenv("MEND_OOB_IFNAME", "mgmt0", 1);
}

static void child(int who, int timeoutS) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  alarm((unsigned)timeoutS); /* a hang ends this process, and the run fails */
  if (gTestbed) enterHost(who);
  int32_t* buf = malloc((size_t)gCount * sizeof(int32_t));
  if (buf == NULL) fail(who, "out of memory", ncclSystemError);
  if (who >= gN) replacement(who, buf);
  else original(who, buf);
  free(buf);
  _exit(0);
}

/* Latest / earliest time `idx` over processes [0, to) that were not killed. */
static double maxOf(int to, int idx) {
  double m = 0;
  for (int w = 0; w < to; w++)
    if (!isLost(w) && sh->t[w][idx] > m) m = sh->t[w][idx];
  return m;
}
static double minOf(int to, int idx) {
  double m = 1e300;
  for (int w = 0; w < to; w++)
    if (!isLost(w) && sh->t[w][idx] < m) m = sh->t[w][idx];
  return m;
}

/* One run of size N: 1 when every process finished and every result was right; res[] gets the times. */
static int runOnce(int timeoutS, double* res) {
  memset(sh, 0, sizeof(*sh));
  pid_t pid[MAX_PROCS];
  int all = gN + gLost;
  fflush(stdout);
  for (int w = 0; w < all; w++) {
    pid[w] = fork();
    if (pid[w] == 0) child(w, timeoutS);
    if (pid[w] < 0) {
      perror("fork");
      return 0;
    }
  }
  double until = now() + timeoutS;
  while (atomic_load(&sh->loopIters) < gN && !atomic_load(&sh->failed) && now() < until) usleep(200);
  int ok = atomic_load(&sh->loopIters) >= gN;
  if (ok) {
    usleep(20 * 1000); /* into the loop's steady state */
    sh->killAt = now();
    atomic_store(&sh->killing, 1);
    for (int w = gVictim; w < gVictim + gLost; w++) kill(pid[w], SIGKILL);
  }
  for (int w = 0; w < all; w++) {
    int st = 0;
    while (ok && waitpid(pid[w], &st, WNOHANG) == 0) {
      if (now() > until) {
        fprintf(stderr, "recover_perf: N=%d: timed out after %d s\n", gN, timeoutS);
        ok = 0;
        break;
      }
      usleep(1000);
    }
    if (!ok) {
      kill(pid[w], SIGKILL);
      waitpid(pid[w], &st, 0);
      continue;
    }
    if (!isLost(w) && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) ok = 0;
  }
  if (!ok || atomic_load(&sh->failed)) return 0;
  res[ST_DETECT] = maxOf(gN, T_ERR) - sh->killAt;
  res[ST_SHRINK] = maxOf(gN, T_SHRINK1) - maxOf(gN, T_SHRINK0);
  res[ST_GROW] = maxOf(all, T_GROW1) - maxOf(all, T_GROW0);
  res[ST_REINIT] = maxOf(all, T_INIT1) - minOf(all, T_RE0);
  res[ST_INIT] = maxOf(all, T_INIT1) - maxOf(all, T_INIT0);
  return 1;
}

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static void loadAvg(char* buf, size_t len) {
  FILE* f = fopen("/proc/loadavg", "r");
  buf[0] = 0;
  if (f && fgets(buf, (int)len, f)) buf[strcspn(buf, "\n")] = 0;
  if (f) fclose(f);
}

static void usage(FILE* f) {
  fprintf(f, "usage: recover_perf [-n 4,8,16] [-r REPS] [-k VICTIM] [-K LOST] [-c COUNT] [-T TIMEOUT_S] [--sockets] "
          "[--testbed NAME --hosts H]\n");
}

/* One size of the sweep: `reps` runs, then the row of medians and worst times.  1 when a run failed;
 * -1 when the size itself is unusable. */
static int runSize(const char* tok, int reps, int timeoutS) {
  gN = atoi(tok);
  if (gTestbed && gN >= gHosts && gN % gHosts == 0) {
    gVictim = gN / gHosts; /* every rank of host 1 */
    gLost = gN / gHosts;
  }
  if (gN < 2 || gN > MAX_RANKS || (gTestbed && gN % gHosts) || gVictim < 0 || gVictim + gLost > gN || gLost >= gN) {
    fprintf(stderr, "recover_perf: size %s: need 2..%d ranks (a multiple of the hosts), lost ranks inside it and "
            "at least one survivor\n", tok, MAX_RANKS);
    return -1;
  }
  double res[NSTAGES][MAX_REPS];
  int good = 0, failed = 0;
  for (int r = 0; r < reps; r++) {
    double one[NSTAGES];
    if (!runOnce(timeoutS, one)) {
      failed = 1;
      continue;
    }
    for (int s = 0; s < NSTAGES; s++) res[s][good] = one[s];
    good++;
  }
  printf("  %5d", gN);
  for (int s = 0; s < NSTAGES; s++) {
    if (good == 0) {
      printf("  %17s", "failed");
      continue;
    }
    qsort(res[s], (size_t)good, sizeof(double), cmpDouble);
    printf("  %8.4f (%6.4f)", res[s][good / 2], res[s][good - 1]);
  }
  printf("%s\n", good < reps ? "  (some runs failed)" : "");
  return failed;
}

int main(int argc, char** argv) {
  const char* sizes = "4,8,16";
  int reps = 3, timeoutS = 120, sockets = 0;
  gVictim = 1;
  gLost = 1;
  gCount = 1 << 16;
  static const struct option opts[] = {{"sockets", no_argument, 0, 's'}, {"testbed", required_argument, 0, 'b'},
                                       {"hosts", required_argument, 0, 'H'}, {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "n:r:k:K:c:T:h", opts, NULL)) != -1;) {
    switch (c) {
      case 'K': gLost = atoi(optarg); break;
      case 'b': gTestbed = optarg; break;
      case 'H': gHosts = atoi(optarg); break;
      case 'n': sizes = optarg; break;
      case 'r': reps = atoi(optarg); break;
      case 'k': gVictim = atoi(optarg); break;
      case 'c': gCount = atoi(optarg); break;
      case 'T': timeoutS = atoi(optarg); break;
      case 's': sockets = 1; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  int tbOk = gTestbed ? gHosts >= 2 && strlen(gTestbed) < 64 && !sockets : gHosts == 1;
  if (reps < 1 || reps > MAX_REPS || gCount < 1 || timeoutS < 1 || gLost < 1 || !tbOk || optind != argc) {
    usage(stderr);
    return 2;
  }
  if (sockets) {
    setenv("NCCL_SHM_DISABLE", "1", 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  }
  sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  char la[128];
  loadAvg(la, sizeof la);
  if (gTestbed)
    printf("# recover_perf: ranks as processes on %d hosts of testbed %s (net between hosts, shm within), the ranks "
           "of host 1 lost", gHosts, gTestbed);
  else
    printf("# recover_perf: ranks as processes on one host, transport %s, ranks %d..%d lost", sockets ? "sockets (lo)"
           : "shm", gVictim, gVictim + gLost - 1);
  printf(", AllReduce of %d int32, %d run(s) per size (median, worst)\n# load average before: %s\n", gCount, reps, la);
  printf("# %5s", "ranks");
  for (int s = 0; s < NSTAGES; s++) printf("  %17s", stageName[s]);
  printf("\n");
  int failed = 0;
  char list[256];
  snprintf(list, sizeof list, "%s", sizes);
  for (char* tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    int r = runSize(tok, reps, timeoutS);
    if (r < 0) return 2;
    failed |= r;
  }
  loadAvg(la, sizeof la);
  printf("# load average after: %s\n", la);
  return failed;
}
