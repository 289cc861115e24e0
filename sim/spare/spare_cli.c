/* mend-spare: SPARe's reordering controller from the command line.
 *   mend-spare layout  -n N -r R [--replica]            the stacks, one group a line
 *   mend-spare control -n N -r R [-s S] [--fail LIST] [--stacks FILE]
 *                                                       phase 0..2 on a failed set; prints the outcome,
 *                                                       the new all-reduce stack, the moves, the stacks
 *   mend-spare bench   -n N -r R [--trials T] [--seed X]
 *                                                       fails groups one at a time in random order until
 *                                                       wipe-out, timing every controller call
 * LIST is comma-separated group indices; FILE has N lines of R types (default: the cyclic layout). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "spare.h"

struct cliArgs {
  const char* cmd;     /* layout, control or bench */
  int n, r, s;         /* groups, redundancy, committed all-reduce stack */
  int replica;         /* replica blocks instead of the cyclic layout */
  const char* fail;    /* failed groups, comma-separated */
  const char* stacks;  /* file of stacks, or NULL */
  int trials;          /* bench: failure orders */
  unsigned long seed;  /* bench: random seed */
};

static int usage(void) {
  fprintf(stderr, "usage: mend-spare layout|control|bench -n N -r R [-s S] [--replica] [--fail LIST] "
                  "[--stacks FILE] [--trials T] [--seed X]\n");
  return 2;
}

static int parseInt(const char* s, int* out) {
  char* end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < -2147483647L || v > 2147483647L) return -1;
  *out = (int)v;
  return 0;
}

static int parseArgs(int argc, char** argv, struct cliArgs* a) {
  static const struct option opts[] = {{"replica", no_argument, 0, 'p'}, {"fail", required_argument, 0, 'f'},
                                       {"stacks", required_argument, 0, 'k'}, {"trials", required_argument, 0, 't'},
                                       {"seed", required_argument, 0, 'x'}, {0, 0, 0, 0}};
  if (argc < 2) return -1;
  *a = (struct cliArgs){.cmd = argv[1], .s = 1, .trials = 5, .seed = 1};
  optind = 2;
  int c;
  while ((c = getopt_long(argc, argv, "n:r:s:", opts, NULL)) != -1) {
    int bad = 0;
    if (c == 'n') bad = parseInt(optarg, &a->n);
    else if (c == 'r') bad = parseInt(optarg, &a->r);
    else if (c == 's') bad = parseInt(optarg, &a->s);
    else if (c == 'p') a->replica = 1;
    else if (c == 'f') a->fail = optarg;
    else if (c == 'k') a->stacks = optarg;
    else if (c == 't') bad = parseInt(optarg, &a->trials) || a->trials < 1;
    else if (c == 'x') a->seed = strtoul(optarg, NULL, 10);
    else return -1;
    if (bad) {
      fprintf(stderr, "mend-spare: bad value '%s' for -%c\n", optarg, c < 128 ? c : '-');
      return -1;
    }
  }
  return optind == argc ? 0 : -1;
}

static int readStacks(const char* path, int n, int r, int* stk) {
  FILE* fp = fopen(path, "r");
  if (fp == NULL) {
    fprintf(stderr, "mend-spare: cannot open %s: %m\n", path);
    return -1;
  }
  for (long i = 0; i < (long)n * r; i++) {
    if (fscanf(fp, "%d", &stk[i]) != 1) {
      fprintf(stderr, "mend-spare: %s: expected %d lines of %d types, stopped at value %ld\n", path, n, r, i);
      fclose(fp);
      return -1;
    }
  }
  fclose(fp);
  return 0;
}

static int parseFailed(const char* list, int n, unsigned char* failed) {
  char* copy = strdup(list);
  int rc = 0;
  for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    int w;
    if (parseInt(tok, &w) || w < 0 || w >= n) {
      fprintf(stderr, "mend-spare: failed group '%s': must be an index in [0, %d)\n", tok, n);
      rc = -1;
      break;
    }
    failed[w] = 1;
  }
  free(copy);
  return rc;
}

static void printStacks(int n, int r, const int* stk, const unsigned char* failed) {
  for (int w = 0; w < n; w++) {
    printf("%d%s:", w, failed != NULL && failed[w] ? "x" : "");
    for (int t = 0; t < r; t++) printf(" %d", stk[(size_t)w * r + t]);
    printf("\n");
  }
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Random failure orders: one controller call per failure until a wipe-out. */
static int bench(const struct cliArgs* a, int* stk0) {
  int n = a->n, r = a->r;
  int* stk = malloc((size_t)n * r * sizeof(int));
  int* order = malloc((size_t)n * sizeof(int));
  unsigned char* failed = malloc((size_t)n);
  double* times = malloc((size_t)n * a->trials * sizeof(double));
  long calls = 0, reorders = 0, endured = 0;
  if (stk == NULL || order == NULL || failed == NULL || times == NULL) {
    fprintf(stderr, "mend-spare: no memory for the bench\n");
    free(stk), free(order), free(failed), free(times);
    return 1;
  }
  srand48((long)a->seed);
  for (int trial = 0; trial < a->trials; trial++) {
    memcpy(stk, stk0, (size_t)n * r * sizeof(int));
    memset(failed, 0, (size_t)n);
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = n - 1; i > 0; i--) {
      int j = (int)(drand48() * (i + 1)), x = order[i];
      order[i] = order[j], order[j] = x;
    }
    int s = 1;
    for (int k = 0; k < n; k++) {
      int outcome = 0, moves = 0;
      failed[order[k]] = 1;
      double t0 = now();
      if (mendSpareControl(n, r, stk, failed, &s, &outcome, &moves) != ncclSuccess) return 1;
      times[calls++] = now() - t0;
      reorders += outcome == MEND_SPARE_REORDER;
      if (outcome == MEND_SPARE_WIPEOUT) break;
      endured++;
    }
  }
  qsort(times, (size_t)calls, sizeof(double), cmpDouble);
  double sum = 0;
  for (long i = 0; i < calls; i++) sum += times[i];
  printf("bench N=%d r=%d trials=%d: %.1f failures endured on average, %ld controller calls (%ld reorders): "
         "mean %.3f ms, median %.3f ms, p99 %.3f ms, max %.3f ms\n",
         n, r, a->trials, (double)endured / a->trials, calls, reorders, 1e3 * sum / calls, 1e3 * times[calls / 2],
         1e3 * times[(long)(calls * 0.99)], 1e3 * times[calls - 1]);
  free(stk), free(order), free(failed), free(times);
  return 0;
}

static int control(const struct cliArgs* a, int* stk) {
  unsigned char* failed = calloc((size_t)a->n, 1);
  int rc = 1, s = a->s, outcome = 0, moves = 0;
  if (a->fail == NULL || parseFailed(a->fail, a->n, failed) == 0) {
    if (mendSpareControl(a->n, a->r, stk, failed, &s, &outcome, &moves) == ncclSuccess) {
      static const char* names[] = {"keep", "reorder", "wipeout"};
      printf("outcome %s\nallreduce_stack %d\nmoves %d\n", names[outcome], outcome == MEND_SPARE_WIPEOUT ? 0 : s, moves);
      printStacks(a->n, a->r, stk, failed);
      rc = 0;
    }
  }
  free(failed);
  return rc;
}

int main(int argc, char** argv) {
  struct cliArgs a;
  if (parseArgs(argc, argv, &a) != 0) return usage();
  if (mendSpareCheck(a.n, a.r, NULL, NULL) != ncclSuccess) return 1;
  int* stk = malloc((size_t)a.n * a.r * sizeof(int));
  if (stk == NULL) {
    fprintf(stderr, "mend-spare: no memory for a table of %d x %d types\n", a.n, a.r);
    return 1;
  }
  ncclResult_t res = a.stacks != NULL ? (readStacks(a.stacks, a.n, a.r, stk) ? ncclInvalidArgument : ncclSuccess)
                     : a.replica      ? mendSpareLayoutReplica(a.n, a.r, stk)
                                      : mendSpareLayoutCyclic(a.n, a.r, NULL, stk);
  int rc = 1;
  if (res == ncclSuccess) {
    if (strcmp(a.cmd, "layout") == 0) printStacks(a.n, a.r, stk, NULL), rc = 0;
    else if (strcmp(a.cmd, "control") == 0) rc = control(&a, stk);
    else if (strcmp(a.cmd, "bench") == 0) rc = mendSpareCheck(a.n, a.r, stk, NULL) == ncclSuccess ? bench(&a, stk) : 1;
    else rc = usage();
  }
  free(stk);
  return rc;
}
