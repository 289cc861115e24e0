/*
 * Ranks of one host that land on one CPU while another CPU they may use is idle (transport/spread.c):
 * two processes, each with every CPU in its mask, are put on one CPU after init (narrowed to it,
 * then given their mask back, as the kernel's wake-up placement leaves them).  With MEND_SPREAD on
 * (the default), rank 1 says it shared that CPU with rank 0 and moved, the two end on different CPUs
 * within a bounded number of AllReduces, every result exact, and each thread's mask is what it set.
 * With MEND_SPREAD=0 nothing moves by Mend's hand (the kernel may still separate them later).
 * Ranks that outnumber the CPUs never move (they must share).
 */
#include <dirent.h>
#include <sched.h>

#include "mp_util.h"

#define COUNT 16384  /* 64 KiB of floats: a few microseconds a call when the ranks have a CPU each */
#define MAX_OPS 4000 /* AllReduces before giving up on seeing the ranks apart */
#define LOOK_EVERY 50


/* Both ranks on the first CPU of the mask, the mask left as it was. */
static int gatherOnFirstCpu(const cpu_set_t* mask) {
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
    if (CPU_ISSET(c, mask)) first = c;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  CK(sched_setaffinity(0, sizeof(one), &one) == 0);
  CK(sched_setaffinity(0, sizeof(*mask), mask) == 0);
  CK(sched_getcpu() == first);
  return first;
}

/* arg: the directory; writes dir/apart.<rank> with the AllReduces it took until the ranks were on
 * different CPUs (or MAX_OPS + 1). */
static void scColocated(int rank, int n, const char* dir) {
  ncclComm_t comm = mpInitComm(rank, n, dir);
  cpu_set_t mask, after;
  CK(sched_getaffinity(0, sizeof(mask), &mask) == 0);
  float* buf = malloc(COUNT * sizeof(float));
  CK(buf != NULL);
  int cpus[MP_MAX_RANKS];
  int mine = 0;
  CKOK(ncclAllReduce(&mine, &mine, 1, ncclInt32, ncclSum, comm, NULL)); /* connected, both ranks ready */
  mine = gatherOnFirstCpu(&mask);
  int apart = MAX_OPS + 1;
  for (int op = 1; op <= MAX_OPS && apart > MAX_OPS; op++) {
    for (int i = 0; i < COUNT; i++) buf[i] = (float)(rank + 1) * (float)(i % 7 + 1);
    CKOK(ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, NULL));
    float f = (float)(n * (n + 1) / 2);
    for (int i = 0; i < COUNT; i++) CK(buf[i] == f * (float)(i % 7 + 1));
    if (op % LOOK_EVERY) continue;
    mine = sched_getcpu();
    CKOK(ncclAllGather(&mine, cpus, 1, ncclInt32, comm, NULL));
    int differ = 1;
    for (int r = 1; r < n; r++) differ &= cpus[r] != cpus[0];
    if (differ) apart = op;
  }
  CK(sched_getaffinity(0, sizeof(after), &after) == 0);
  CK(CPU_EQUAL(&mask, &after));
  char path[512];
  snprintf(path, sizeof path, "%s/apart.%d", dir, rank);
  FILE* f = fopen(path, "w");
  CK(f != NULL);
  fprintf(f, "%d\n", apart);
  fclose(f);
  free(buf);
  CKOK(ncclCommDestroy(comm));
}

static int child(char** argv) {
  struct mpChild c = mpChildStart(argv, 60);
  mpRank = c.rank;
  if (strcmp(c.scenario, "colocated") == 0) scColocated(c.rank, c.n, c.arg);
  else {
    fprintf(stderr, "unknown scenario %s\n", c.scenario);
    return 2;
  }
  return 0;
}

/* ------------------------------------------------------------ parent */

/* Lines of dir/log.* that contain `what`. */
static int countLines(const char* dir, const char* what) {
  DIR* d = opendir(dir);
  if (!d) return -1;
  int found = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "log.", 4) != 0) continue;
    char path[512], line[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE* f = fopen(path, "r");
    if (!f) continue;
    while (fgets(line, sizeof line, f)) found += strstr(line, what) != NULL;
    fclose(f);
  }
  closedir(d);
  return found;
}

static int readApart(const char* dir, int rank) {
  char path[512];
  snprintf(path, sizeof path, "%s/apart.%d", dir, rank);
  FILE* f = fopen(path, "r");
  int v = -1;
  if (f) {
    if (fscanf(f, "%d", &v) != 1) v = -1;
    fclose(f);
  }
  return v;
}

/* 2 ranks put on one CPU; spread: MEND_SPREAD's value. */
static void runColocated(const char* name, int n, const char* spread, int wantMove) {
  char dir[256], logEnv[320], spreadEnv[64];
  mpTempDir(dir, sizeof dir);
  snprintf(logEnv, sizeof logEnv, "NCCL_DEBUG_FILE=%s/log.%%p", dir);
  snprintf(spreadEnv, sizeof spreadEnv, "MEND_SPREAD=%s", spread);
  const char* const env[] = {logEnv, spreadEnv, "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT", NULL};
  const char* why = mpSpawnWait("/proc/self/exe", "colocated", n, dir, env, 90, n, 0);
  char want[128];
  snprintf(want, sizeof want, "Spread: rank %d shared CPU", n - 1);
  int moved = countLines(dir, want), anyMove = countLines(dir, "Spread: rank");
  int apart = readApart(dir, 0);
  int ok = why == NULL && (wantMove ? moved >= 1 && apart >= 1 && apart <= MAX_OPS : anyMove == 0);
  printf("# %s: rank %d's moves logged %d, ranks apart after %d AllReduces\n", name, n - 1, moved, apart);
  mtResult(ok, name, "%s; rank %d's moves logged %d (any rank %d), ranks apart after %d AllReduces", why ? why : "ranks ok",
           n - 1, moved, anyMove, apart);
  mpRemoveDir(dir);
}

int main(int argc, char** argv) {
  if (mpIsChild(argc, argv)) return child(argv);
  if (!mtStart("spread", 300)) return mtExitCode();
  cpu_set_t mask;
  int cpus = sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask) : 1;
  if (cpus < 2) {
    printf("ok spread_colocated_ranks_move # SKIP %d CPU\n", cpus);
    printf("ok spread_off_moves_nothing # SKIP %d CPU\n", cpus);
  } else {
    runColocated("spread_colocated_ranks_move", 2, "1", 1);
    runColocated("spread_off_moves_nothing", 2, "0", 0);
  }
  /* More ranks than CPUs: sharing is expected, and nobody moves (the engine does not even look). */
  if (cpus + 1 <= MP_MAX_RANKS) {
    char name[64];
    snprintf(name, sizeof name, "spread_crowded_%d_ranks_stay", cpus + 1);
    runColocated(name, cpus + 1, "1", 0);
  }
  return mtExitCode();
}
