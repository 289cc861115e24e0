/*
 * Who is late (mend-info --ras, src/bootstrap_ras.c): 4 ranks over sockets with MEND_RAS=1, one
 * process per rank (mp_util.h).  The parent finds the job through rank 0's monitor snapshot (its
 * "ras" label) and checks what the query prints:
 *   - all ranks idle at the same op count: every rank listed with its pid, nobody late or dead;
 *   - rank 2 stopped (SIGSTOP) while the others enter a collective that needs it: the query names
 *     rank 2 late within 2 s of the signal; after 3 s it is continued, the ranks catch up, and a
 *     query names nobody;
 *   - rank 3 killed (SIGKILL): the query reports it DEAD, the others not late, within 2 s;
 *   - bad mend-info --ras arguments: exit status 2.
 * Phases are driven by files in the job's directory: the ranks run OPS_PER_PHASE AllReduces when
 * "go<k>" appears, then wait for the next one.
 */
#include <fcntl.h>

#include "mp_util.h"

#define NRANKS 4
#define OPS_PER_PHASE 5
#define LATE_BOUND_S 2.0   /* issue 14: a stopped rank is named within 2 s */
#define STOP_S 3.0         /* how long rank 2 stays stopped */

static int fileExists(const char* dir, const char* name) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

static void touch(const char* dir, const char* name) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  int fd = open(p, O_CREAT | O_WRONLY, 0644);
  if (fd >= 0) close(fd);
}

/* A rank: OPS_PER_PHASE AllReduces per phase; after an error (a dead peer) it keeps its
 * communicator, so its query service still answers, until "end". */
static int child(char** argv) {
  struct mpChild c = mpChildStart(argv, 90);
  ncclComm_t comm = mpInitComm(c.rank, c.n, c.arg);
  int failed = 0;
  for (int phase = 1; phase <= 3 && !failed; phase++) {
    char go[16];
    snprintf(go, sizeof(go), "go%d", phase);
    while (!fileExists(c.arg, go) && !fileExists(c.arg, "end")) usleep(1000);
    for (int i = 0; i < OPS_PER_PHASE && !failed; i++) {
      float x[256];
      for (int k = 0; k < 256; k++) x[k] = 1;
      failed = ncclAllReduce(x, x, 256, ncclFloat, ncclSum, comm, NULL) != ncclSuccess;
      CK(failed || x[0] == (float)c.n);
    }
  }
  while (!fileExists(c.arg, "end")) usleep(5000);
  ncclCommAbort(comm);
  return 0;
}

/* Run mend-info --ras on the snapshot; *late / *dead get its lists for the one communicator
 * (" 2 3"), pids[] each rank's pid from the table.  Returns mend-info's exit status. */
static int query(const char* snap, char* late, char* dead, int pids[NRANKS], long long* most, char* out, size_t outLen) {
  const char* b = getenv("MEND_BUILDDIR");
  char cmd[1024];
  snprintf(cmd, sizeof(cmd), "%s/bin/mend-info --ras --file %s --timeout 1000 2>&1", b ? b : "build", snap);
  FILE* f = popen(cmd, "r");
  if (f == NULL) return -1;
  late[0] = dead[0] = out[0] = '\0';
  *most = -1;
  for (int r = 0; r < NRANKS; r++) pids[r] = -1;
  char line[512];
  size_t used = 0;
  while (fgets(line, sizeof(line), f)) {
    int n = snprintf(out + used, outLen - used, "%s", line);
    if (n > 0 && used + (size_t)n < outLen) used += (size_t)n;
    int r, pid;
    char host[128];
    if (sscanf(line, "comm %*x: %*d ranks, most collectives issued %lld", most) == 1) continue;
    if (sscanf(line, " late:%127[^\n]", host) == 1) snprintf(late, 128, "%s", host);
    else if (sscanf(line, " dead:%127[^\n]", host) == 1) snprintf(dead, 128, "%s", host);
    else if (sscanf(line, " %d %127s %d", &r, host, &pid) == 3 && r >= 0 && r < NRANKS) pids[r] = pid;
  }
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* rank 0's snapshot, once it names the query service (bounded). */
static int findSnapshot(const char* dir, pid_t pid0, char* snap, size_t len) {
  snprintf(snap, len, "%s/snap-%d.prom", dir, (int)pid0);
  for (double until = mtNow() + 30; mtNow() < until; usleep(20000)) {
    FILE* f = fopen(snap, "r");
    if (!f) continue;
    char line[1024];
    int named = 0;
    while (fgets(line, sizeof(line), f)) named |= strncmp(line, "mend_monitor_info{", 18) == 0 && strstr(line, "ras=\"\"") == NULL;
    fclose(f);
    if (named) return 1;
  }
  return 0;
}

static int samePids(const int pids[NRANKS], const struct mpJob* job, int skip) {
  for (int r = 0; r < NRANKS; r++)
    if (r != skip && pids[r] != job->pid[r]) return 0;
  return 1;
}

/* Query until the lists read `wantLate` / `wantDead` and the most ops issued is `wantMost` (-1: any),
 * or `bound` seconds pass; the time it took, or -1. */
static double queryUntil(const char* snap, const char* wantLate, const char* wantDead, long long wantMost, double bound,
                         int* pids, char* out, size_t outLen) {
  double t0 = mtNow();
  char late[128], dead[128], tries[512] = "";
  long long most;
  do {
    double t1 = mtNow();
    int st = query(snap, late, dead, pids, &most, out, outLen);
    if (st == 0 && strcmp(late, wantLate) == 0 && strcmp(dead, wantDead) == 0 && (wantMost < 0 || most == wantMost))
      return mtNow() - t0;
    size_t n = strlen(tries); /* what each try saw, for the failure message */
    snprintf(tries + n, sizeof(tries) - n, "[%.2f s: status %d, late '%s', dead '%s', most %lld] ", mtNow() - t1, st,
             late, dead, most);
    usleep(50000);
  } while (mtNow() - t0 < bound);
  size_t n = strlen(out);
  snprintf(out + n, outLen - n, "tries: %s\n", tries);
  return -1;
}

static void phases(const char* dir, struct mpJob* job, const char* snap) {
  char out[8192];
  int pids[NRANKS];
  touch(dir, "go1");
  double t = queryUntil(snap, "", "", OPS_PER_PHASE, 20, pids, out, sizeof(out));
  mtResult(t >= 0 && samePids(pids, job, -1), "ras_all_ok", "query:\n%s", out);
  kill(job->pid[2], SIGSTOP);
  double stoppedAt = mtNow();
  touch(dir, "go2"); /* the others enter an AllReduce that waits for rank 2 */
  usleep(200000);    /* (they poll every millisecond: a query before would see them behind too) */
  t = queryUntil(snap, " 2", "", -1, LATE_BOUND_S, pids, out, sizeof(out));
  double named = mtNow() - stoppedAt;
  mtResult(t >= 0 && named <= LATE_BOUND_S, "ras_stopped_rank_late", "%.2f s after SIGSTOP:\n%s", named, out);
  if (t >= 0) printf("# rank 2 named late %.2f s after SIGSTOP; the query printed:\n%s", named, out);
  while (mtNow() - stoppedAt < STOP_S) usleep(10000);
  kill(job->pid[2], SIGCONT);
  t = queryUntil(snap, "", "", 2 * OPS_PER_PHASE, 10, pids, out, sizeof(out));
  mtResult(t >= 0 && samePids(pids, job, -1), "ras_continued_rank_clears", "query:\n%s", out);
  kill(job->pid[3], SIGKILL);
  double killedAt = mtNow();
  touch(dir, "go3"); /* the others fail on the dead rank and keep their communicators */
  t = queryUntil(snap, "", " 3", -1, 2.0, pids, out, sizeof(out));
  double dead = mtNow() - killedAt;
  mtResult(t >= 0 && samePids(pids, job, 3), "ras_killed_rank_dead", "%.2f s after SIGKILL:\n%s", dead, out);
  if (t >= 0) printf("# rank 3 reported DEAD %.2f s after SIGKILL\n", dead);
}

static void badArgs(void) {
  const char* b = getenv("MEND_BUILDDIR");
  const char* args[] = {"--port", "--port 1 --file x", "--host 127.0.0.1", "--port 1 --timeout 0", "--bogus 1"};
  int ok = 1;
  for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); i++) {
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s/bin/mend-info --ras %s >/dev/null 2>&1", b ? b : "build", args[i]);
    int st = system(cmd);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 2) {
      fprintf(stderr, "mend-info --ras %s: status %d, expected 2\n", args[i], st);
      ok = 0;
    }
  }
  mtResult(ok, "ras_bad_arguments", "a bad argument list was not refused with status 2");
}

int main(int argc, char** argv) {
  if (mpIsChild(argc, argv)) return child(argv);
  if (!mtStart("ras", 240)) return mtExitCode();
  char dir[256], snapEnv[320], snap[512];
  mpTempDir(dir, sizeof dir);
  snprintf(snapEnv, sizeof(snapEnv), "MEND_MONITOR_FILE=%s/snap-%%p.prom", dir);
  const char* const env[] = {"NCCL_SHM_DISABLE=1", "NCCL_SOCKET_IFNAME=lo", "MEND_RAS=1", "MEND_MONITOR_PERIOD_MS=50",
                             snapEnv, NULL};
  struct mpJob job;
  if (mpSpawn(&job, "/proc/self/exe", "ras", NRANKS, dir, env) != 0) {
    mtResult(0, "ras_spawn", "fork failed");
    return mtExitCode();
  }
  if (findSnapshot(dir, job.pid[0], snap, sizeof(snap))) phases(dir, &job, snap);
  else mtResult(0, "ras_snapshot_names_service", "%s never named a query service", snap);
  touch(dir, "end");
  kill(job.pid[2], SIGCONT);
  int reaped = mpWait(&job, 30);
  mtResult(reaped && mpAllOk(&job, 1u << 3), "ras_job_ends", "the ranks did not all end cleanly");
  badArgs();
  mpRemoveDir(dir);
  return mtExitCode();
}
