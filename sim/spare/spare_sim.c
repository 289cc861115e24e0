/* mend-spare-sim: one time-to-train simulation of SPARe+CKPT, Rep+CKPT or CKPT-only on SimGrid.
 *   mend-spare-sim --scheme spare|rep|ckpt -n N [-r R] [--ta S] [--seed X] [options]
 * prints one line of key=value results (sim/spare/README.md lists the options and the model). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <simgrid/engine.h>

#include "spare_sim.h"

/* The paper's Table 1, with the shrink cost from Mend's measurement (benchmarks/RESULTS.md, rank
 * recovery: 0.032 s to shrink 16 ranks over 4 testbed hosts, taken as linear in the ranks). */
static const struct simParams defaults = {
    .scheme = SIM_SPARE, .n = 200, .r = 1, .steps = 10000, .tcomp = 64, .ta = 2, .mtbf = 300,
    .shape = 0.78, .tr = 3600, .ts = 60, .shrinkPerRank = 0.032 / 16, .shrinkFixed = -1, .ctlrCost = 0.1,
    .jitter = 0.05, .cap = 20, .restartFailures = 1, .seed = 1};

static int usage(void) {
  fprintf(stderr,
          "usage: mend-spare-sim --scheme spare|rep|ckpt -n N [-r R] [--ta S] [--tcomp S] [--steps K]\n"
          "       [--mtbf S] [--shape K] [--restart S] [--ckpt S] [--shrink-per-rank S | --shrink S]\n"
          "       [--ctlr S] [--jitter F] [--cap X] [--seed X] [--restart-failures hit|skip]\n");
  return 2;
}

static int number(const char* s, double lo, double hi, double* out) {
  char* end;
  double v = strtod(s, &end);
  if (*s == '\0' || *end != '\0' || !(v >= lo && v <= hi)) return -1;
  *out = v;
  return 0;
}

static int parse(int argc, char** argv, struct simParams* p) {
  static const struct option opts[] = {
      {"scheme", 1, 0, 'S'}, {"ta", 1, 0, 'a'},      {"tcomp", 1, 0, 'c'},  {"steps", 1, 0, 'k'},
      {"mtbf", 1, 0, 'm'},   {"shape", 1, 0, 'w'},   {"restart", 1, 0, 'R'}, {"ckpt", 1, 0, 'C'},
      {"shrink-per-rank", 1, 0, 'p'}, {"shrink", 1, 0, 'f'}, {"ctlr", 1, 0, 'l'}, {"jitter", 1, 0, 'j'},
      {"cap", 1, 0, 'x'},    {"seed", 1, 0, 'e'},    {"restart-failures", 1, 0, 'F'}, {0, 0, 0, 0}};
  int c;
  double v = 0;
  while ((c = getopt_long(argc, argv, "n:r:", opts, NULL)) != -1) {
    int bad = 0;
    switch (c) {
      case 'S':
        if (strcmp(optarg, "spare") == 0) p->scheme = SIM_SPARE;
        else if (strcmp(optarg, "rep") == 0) p->scheme = SIM_REP;
        else if (strcmp(optarg, "ckpt") == 0) p->scheme = SIM_CKPT;
        else bad = 1;
        break;
      case 'n': bad = number(optarg, 1, MEND_SPARE_MAX_GROUPS, &v); p->n = (int)v; break;
      case 'r': bad = number(optarg, 1, 1000, &v); p->r = (int)v; break;
      case 'a': bad = number(optarg, 0, 1e6, &p->ta); break;
      case 'c': bad = number(optarg, 0, 1e6, &p->tcomp); break;
      case 'k': bad = number(optarg, 1, 1e9, &v); p->steps = (long)v; break;
      case 'm': bad = number(optarg, 1e-3, 1e12, &p->mtbf); break;
      case 'w': bad = number(optarg, 0.05, 20, &p->shape); break;
      case 'R': bad = number(optarg, 0, 1e9, &p->tr); break;
      case 'C': bad = number(optarg, 0, 1e9, &p->ts); break;
      case 'p': bad = number(optarg, 0, 1e6, &p->shrinkPerRank); break;
      case 'f': bad = number(optarg, 0, 1e6, &p->shrinkFixed); break;
      case 'l': bad = number(optarg, 0, 1e6, &p->ctlrCost); break;
      case 'j': bad = number(optarg, 0, 0.5, &p->jitter); break;
      case 'x': bad = number(optarg, 1, 1e4, &p->cap); break;
      case 'e': bad = number(optarg, 0, 4e9, &v); p->seed = (unsigned long)v; break;
      case 'F':
        if (strcmp(optarg, "hit") == 0) p->restartFailures = 1;
        else if (strcmp(optarg, "skip") == 0) p->restartFailures = 0;
        else bad = 1;
        break;
      default: return -1;
    }
    if (bad) {
      fprintf(stderr, "mend-spare-sim: bad value '%s' for --%s\n", optarg, c == 'n' ? "n" : c == 'r' ? "r" : "option");
      return -1;
    }
  }
  if (optind != argc) return -1;
  if (p->scheme == SIM_CKPT && p->r != 1) {
    fprintf(stderr, "mend-spare-sim: checkpointing only has no redundancy: r must be 1\n");
    return -1;
  }
  if (p->scheme != SIM_CKPT && (p->r < 2 || p->r > p->n)) {
    fprintf(stderr, "mend-spare-sim: redundancy r = %d: must be in [2, N = %d]\n", p->r, p->n);
    return -1;
  }
  return 0;
}

/* One host: every duration is slept on SimGrid's clock.  The platform is written to a temporary file. */
static int loadPlatform(void) {
  char path[] = "/tmp/mend-spare-platformXXXXXX.xml";
  int fd = mkstemps(path, 4);
  if (fd < 0) {
    perror("mend-spare-sim: platform file");
    return -1;
  }
  static const char xml[] = "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
                            "<platform version=\"4.1\"><zone id=\"spare\" routing=\"Full\">"
                            "<host id=\"cluster\" speed=\"1f\"/></zone></platform>\n";
  int ok = write(fd, xml, sizeof(xml) - 1) == (ssize_t)(sizeof(xml) - 1);
  close(fd);
  if (ok) simgrid_load_platform(path);
  unlink(path);
  return ok ? 0 : -1;
}

int main(int argc, char** argv) {
  struct simParams p = defaults;
  if (parse(argc, argv, &p) != 0) return usage();
  int sgArgc = 2;
  char* sgArgv[] = {argv[0], "--log=root.thresh:warning", NULL};
  simgrid_init(&sgArgc, sgArgv);
  if (loadPlatform() != 0) return 1;
  struct simResult r;
  if (simRun(&p, &r) != ncclSuccess) return 1;
  static const char* names[] = {"ckpt", "rep", "spare"};
  printf("scheme=%s n=%d r=%d ta=%g seed=%lu finished=%d ttt=%.1f t0=%.1f ratio=%.4f availability=%.4f "
         "mu=%.1f tc=%.1f steps_done=%ld steps_run=%ld stacks_per_step=%.4f failures=%ld restarts=%ld "
         "reorders=%ld patches=%ld checkpoints=%ld\n",
         names[p.scheme], p.n, p.r, p.ta, p.seed, r.finished, r.ttt, r.t0, r.ttt / r.t0, r.useful / r.ttt, r.mu, r.tc,
         r.stepsDone, r.stepsRun, r.stepsRun ? (double)r.stacks / r.stepsRun : 0.0, r.failures, r.restarts, r.reorders,
         r.patches, r.checkpoints);
  return 0;
}
