/*
 * Multi-process helpers for the lifecycle, abort, close-race and multi-host collective tests: a test
 * re-executes itself with a role argument once per rank, every child dies with its parent
 * (PR_SET_PDEATHSIG) and has a watchdog, waits are bounded, and on any failure the parent kills every
 * child it started.  Unique ids travel through files in a private temporary directory (written to a
 * temporary name, then renamed).
 */
#ifndef MEND_TEST_MP_UTIL_H_
#define MEND_TEST_MP_UTIL_H_

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mendtest.h"
#include "nccl.h"

#define MP_MAX_RANKS 16

static int mpRank = -1;  /* in a child: its rank (for messages) */

/* In a child: report a failed check on stderr and exit 1 (the parent turns it into "not ok"). */
#define CK(cond)                                                                                 \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "rank %d: check failed: %s (%s:%d)\n", mpRank, #cond, __FILE__, __LINE__); \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)
/* A call that must return `want`. */
#define CKR(call, want)                                                                                  \
  do {                                                                                                   \
    ncclResult_t r_ = (call);                                                                            \
    if (r_ != (want)) {                                                                                  \
      fprintf(stderr, "rank %d: %s returned %d (%s), expected %d (%s:%d)\n", mpRank, #call, (int)r_,     \
              ncclGetErrorString(r_), (int)(want), __FILE__, __LINE__);                                  \
      exit(1);                                                                                           \
    }                                                                                                    \
  } while (0)
#define CKOK(call) CKR(call, ncclSuccess)

/* A free TCP port on `host` ("127.0.0.1" or "::1"), or -1. */
static inline int mpFreePort(const char* host) {
  int v6 = strchr(host, ':') != NULL;
  int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof(ss));
  socklen_t len;
  if (v6) {
    struct sockaddr_in6* a = (struct sockaddr_in6*)&ss;
    a->sin6_family = AF_INET6;
    inet_pton(AF_INET6, host, &a->sin6_addr);
    len = sizeof(*a);
  } else {
    struct sockaddr_in* a = (struct sockaddr_in*)&ss;
    a->sin_family = AF_INET;
    inet_pton(AF_INET, host, &a->sin_addr);
    len = sizeof(*a);
  }
  int port = -1;
  if (bind(fd, (struct sockaddr*)&ss, len) == 0 && getsockname(fd, (struct sockaddr*)&ss, &len) == 0)
    port = ntohs(v6 ? ((struct sockaddr_in6*)&ss)->sin6_port : ((struct sockaddr_in*)&ss)->sin_port);
  close(fd);
  return port;
}

/* Write a unique id to dir/name atomically. */
static inline void mpPutId(const char* dir, const char* name, const ncclUniqueId* id) {
  char tmp[512], path[512];
  snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE* f = fopen(tmp, "wb");
  CK(f != NULL);
  CK(fwrite(id, sizeof(*id), 1, f) == 1);
  CK(fclose(f) == 0);
  CK(rename(tmp, path) == 0);
}

/* Read dir/name, waiting for it at most timeoutS seconds. */
static inline void mpGetId(const char* dir, const char* name, ncclUniqueId* id, double timeoutS) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  double until = mtNow() + timeoutS;
  for (;;) {
    FILE* f = fopen(path, "rb");
    if (f) {
      size_t n = fread(id, sizeof(*id), 1, f);
      fclose(f);
      CK(n == 1);
      return;
    }
    CK(mtNow() < until);
    usleep(5000);
  }
}

/* Say that this rank reached point `tag` (a marker file in dir). */
static inline void mpArrive(const char* dir, const char* tag, int rank) {
  ncclUniqueId mark;
  char name[64];
  memset(&mark, 0, sizeof(mark));
  snprintf(name, sizeof name, "%s.%d", tag, rank);
  mpPutId(dir, name, &mark);
}

/* Wait (30 s at most) until ranks 0 .. n-1 other than `self` reached point `tag`. */
static inline void mpAwaitOthers(const char* dir, const char* tag, int self, int n) {
  ncclUniqueId mark;
  char name[64];
  for (int r = 0; r < n; r++) {
    if (r == self) continue;
    snprintf(name, sizeof name, "%s.%d", tag, r);
    mpGetId(dir, name, &mark, 30);
  }
}

/* Rank 0 creates a unique id and publishes it as dir/name; every other rank waits for it (30 s). */
static inline void mpShareId(int rank, const char* dir, const char* name, ncclUniqueId* id) {
  if (rank == 0) {
    CKOK(ncclGetUniqueId(id));
    mpPutId(dir, name, id);
  } else {
    mpGetId(dir, name, id, 30);
  }
}

/* A communicator of n ranks on the id that rank 0 shares as dir/id. */
static inline ncclComm_t mpInitComm(int rank, int n, const char* dir) {
  ncclUniqueId id;
  mpShareId(rank, dir, "id", &id);
  ncclComm_t comm = NULL;
  CKOK(ncclCommInitRank(&comm, n, id, rank));
  return comm;
}

/* In a child, first thing: die with the parent, and never outlive `seconds`. */
static inline void mpChildSetup(int rank, int seconds) {
  mpRank = rank;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  mtWatchdog(seconds);
}

/* The arguments of a child started by mpSpawn: argv0 --child <scenario> <rank> <n> <arg>. */
struct mpChild {
  const char* scenario; /* what to run */
  int rank, n;          /* this child's rank, the number of ranks */
  const char* arg;      /* the parent's argument ("-" for none) */
};

/* argv is that of a child started by mpSpawn. */
static inline int mpIsChild(int argc, char** argv) { return argc >= 6 && strcmp(argv[1], "--child") == 0; }

/* In a child started by mpSpawn, first thing: read the arguments, mpChildSetup, and WARN logging
 * unless NCCL_DEBUG is set. */
static inline struct mpChild mpChildStart(char** argv, int seconds) {
  struct mpChild c = {.scenario = argv[2], .rank = atoi(argv[3]), .n = atoi(argv[4]), .arg = argv[5]};
  mpChildSetup(c.rank, seconds);
  if (getenv("NCCL_DEBUG") == NULL) setenv("NCCL_DEBUG", "WARN", 1);
  return c;
}

struct mpJob {
  int n;                     /* children */
  pid_t pid[MP_MAX_RANKS];   /* their pids, 0 once reaped */
  int status[MP_MAX_RANKS];  /* wait status */
};

/* Start n children: argv0 --child <scenario> <rank> <n> <arg>, with extra environment `env`
 * (a NULL-terminated list of "NAME=value", may be NULL). */
static inline int mpSpawn(struct mpJob* job, const char* self, const char* scenario, int n, const char* arg,
                          const char* const* env) {
  memset(job, 0, sizeof(*job));
  job->n = n;
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < n; r++) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
      for (int i = 0; env && env[i]; i++) putenv((char*)env[i]);
      char rank[16], size[16];
      snprintf(rank, sizeof(rank), "%d", r);
      snprintf(size, sizeof(size), "%d", n);
      execl(self, self, "--child", scenario, rank, size, arg ? arg : "-", (char*)NULL);
      _exit(127);
    }
    job->pid[r] = pid;
  }
  return 0;
}

static inline void mpKillAll(struct mpJob* job) {
  for (int r = 0; r < job->n; r++)
    if (job->pid[r] > 0) {
      kill(job->pid[r], SIGCONT);
      kill(job->pid[r], SIGKILL);
    }
  for (int r = 0; r < job->n; r++)
    if (job->pid[r] > 0) {
      waitpid(job->pid[r], &job->status[r], 0);
      job->pid[r] = 0;
    }
}

/* Reap children 0 .. k-1 within timeoutS; on timeout kill them all.  Returns 1 when those were reaped
 * in time (the others are left running). */
static inline int mpWaitFirst(struct mpJob* job, int k, double timeoutS) {
  double until = mtNow() + timeoutS;
  int left = 0;
  for (int r = 0; r < k; r++) left += job->pid[r] > 0;
  while (left > 0) {
    for (int r = 0; r < k; r++) {
      if (job->pid[r] <= 0) continue;
      pid_t p = waitpid(job->pid[r], &job->status[r], WNOHANG);
      if (p == job->pid[r]) {
        job->pid[r] = 0;
        left--;
      }
    }
    if (left == 0) break;
    if (mtNow() > until) {
      fprintf(stderr, "timeout: killing %d children\n", left);
      mpKillAll(job);
      return 0;
    }
    usleep(2000);
  }
  return 1;
}

/* Reap every child within timeoutS; on timeout kill them all.  Returns 1 when all were reaped in time. */
static inline int mpWait(struct mpJob* job, double timeoutS) { return mpWaitFirst(job, job->n, timeoutS); }

/* Every child exited with 0 (ranks in `mayBeKilled`, a bit mask, may instead have died by SIGKILL). */
static inline int mpAllOk(const struct mpJob* job, unsigned mayBeKilled) {
  for (int r = 0; r < job->n; r++) {
    int st = job->status[r];
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
    if ((mayBeKilled >> r & 1) && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) continue;
    fprintf(stderr, "child rank %d: %s %d\n", r, WIFEXITED(st) ? "exit" : "signal",
            WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    return 0;
  }
  return 1;
}

/* A fresh private directory for id files. */
static inline void mpTempDir(char* buf, size_t len) {
  const char* base = getenv("TMPDIR");
  snprintf(buf, len, "%s/mendtest.XXXXXX", base && *base ? base : "/tmp");
  if (mkdtemp(buf) == NULL) {
    perror("mkdtemp");
    exit(1);
  }
}

static inline void mpRemoveDir(const char* dir) {
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

/* Start n children (see mpSpawn), wait within timeoutS for children 0 .. nWait-1 to exit, then kill
 * what is left (a rank that was meant to be lost; everyone after a timeout).  NULL when every child
 * exited 0 (ranks in `mayBeKilled`, a bit mask, may instead have died by SIGKILL), else what failed. */
static inline const char* mpSpawnWait(const char* self, const char* scenario, int n, const char* arg,
                                      const char* const* env, double timeoutS, int nWait, unsigned mayBeKilled) {
  struct mpJob job;
  if (mpSpawn(&job, self, scenario, n, arg, env) != 0) {
    mpKillAll(&job);
    return "fork failed";
  }
  int inTime = mpWaitFirst(&job, nWait, timeoutS);
  mpKillAll(&job);
  if (!inTime) return "timed out";
  return mpAllOk(&job, mayBeKilled) ? NULL : "a rank failed";
}

/* Run a scenario of this program (mpSpawnWait, the children's argument a fresh directory for id
 * files) and report one TAP line. */
static inline void mpRun(const char* name, const char* scenario, int n, const char* const* env, double timeoutS,
                         int nWait, unsigned mayBeKilled) {
  char dir[256];
  mpTempDir(dir, sizeof dir);
  double t0 = mtNow();
  const char* why = mpSpawnWait("/proc/self/exe", scenario, n, dir, env, timeoutS, nWait, mayBeKilled);
  mtResult(why == NULL, name, "%s after %.1f s", why ? why : "", mtNow() - t0);
  mpRemoveDir(dir);
}

/* Poll ncclCommGetAsyncError until it is no longer ncclInProgress (bounded). */
static inline ncclResult_t mpWaitComm(ncclComm_t comm, double timeoutS) {
  ncclResult_t st = ncclInProgress;
  double until = mtNow() + timeoutS;
  while (st == ncclInProgress && mtNow() < until) {
    if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) return ncclInvalidArgument;
    if (st == ncclInProgress) usleep(1000);
  }
  return st;
}

#endif
