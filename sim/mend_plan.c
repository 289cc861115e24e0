/*
 * mend-plan: the programs Mend would run on a cluster described by a topology (sim/README.md),
 * planned by Mend's own planner without communicators (src/enqueue/plan_offline.h).
 *
 *   mend-plan --topo FILE [-e LINE]... [--op NAME] [--bytes N] [--root R] [--replan MODE]
 *             [--rank R | --all | --summary [--sample K]]
 *
 * --summary (the default) plans every rank, one at a time, and prints the shared view, the
 * AllReduce choice, counts and a hash of all programs; --rank prints one rank's works, --all every
 * rank's.  --sample K plans K ranks spread evenly instead of all (the per-call AllReduce choice
 * costs O(ranks) on every rank, so a degraded 10^5-rank summary of every rank takes long).  Memory stays O(ranks x channels): no rank's plan is kept after it is printed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checks.h"
#include "device/reduce.h"
#include "enqueue/plan_offline.h"
#include "misc/param.h"
#include "topo_file.h"

struct args {
  struct mendOfflineTopo topo;
  int func;       /* enum mendFunc */
  size_t bytes;   /* of the operation (NCCL's count x 4: float elements) */
  int root;       /* Broadcast / Reduce */
  int rank;       /* --rank, -1: none */
  int all;        /* --all */
  int sample;     /* --sample K: plan K ranks spread evenly (0: every rank) */
};

static const struct {
  const char* name;
  int func;
} ops[] = {{"allreduce", MEND_FUNC_ALLREDUCE}, {"allgather", MEND_FUNC_ALLGATHER},
           {"reducescatter", MEND_FUNC_REDUCESCATTER}, {"broadcast", MEND_FUNC_BROADCAST},
           {"reduce", MEND_FUNC_REDUCE}, {"alltoall", MEND_FUNC_ALLTOALL}};

static int usage(const char* why) {
  fprintf(stderr, "mend-plan: %s\nusage: mend-plan --topo FILE [-e LINE]... [--op allreduce|allgather|reducescatter|"
                  "broadcast|reduce|alltoall] [--bytes N] [--root R] [--replan auto|backup|balance|r2|recursive] "
                  "[--rank R | --all | --summary [--sample K]]\n", why);
  return 2;
}

static int parseArgs(int argc, char** argv, struct args* a) {
  mendSimTopoInit(&a->topo);
  a->func = MEND_FUNC_ALLREDUCE;
  a->bytes = 1 << 30;
  a->root = 0;
  a->rank = -1;
  int haveTopo = 0;
  for (int i = 1; i < argc; i++) {
    const char* o = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    int takes = strcmp(o, "--all") != 0 && strcmp(o, "--summary") != 0;
    if (takes && v == NULL) return usage("an option lacks its value");
    if (strcmp(o, "--topo") == 0) {
      if (mendSimTopoRead(v, &a->topo) != ncclSuccess) return 2;
      haveTopo = 1;
    } else if (strcmp(o, "-e") == 0) {
      if (mendSimTopoParse(v, "-e", &a->topo) != ncclSuccess) return 2;
      haveTopo = 1;
    } else if (strcmp(o, "--op") == 0) {
      a->func = -1;
      for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++)
        if (strcmp(v, ops[k].name) == 0) a->func = ops[k].func;
      if (a->func < 0) return usage("unknown --op");
    } else if (strcmp(o, "--bytes") == 0) {
      char* end;
      unsigned long long b = strtoull(v, &end, 10);
      if (*end != '\0' || b == 0 || b % 4 != 0 || b > (1ull << 40)) return usage("--bytes: a multiple of 4, 4..2^40");
      a->bytes = (size_t)b;
    } else if (strcmp(o, "--root") == 0 || strcmp(o, "--rank") == 0) {
      char* end;
      long x = strtol(v, &end, 10);
      if (*end != '\0' || x < 0 || x >= (1L << 24)) return usage("--root / --rank: a rank");
      *(strcmp(o, "--root") == 0 ? &a->root : &a->rank) = (int)x;
    } else if (strcmp(o, "--sample") == 0) {
      char* end;
      long x = strtol(v, &end, 10);
      if (*end != '\0' || x < 1 || x >= (1L << 24)) return usage("--sample: a rank count");
      a->sample = (int)x;
    } else if (strcmp(o, "--replan") == 0) {
      setenv("MEND_REPLAN", v, 1); /* the planner reads the registry's MEND_REPLAN */
      mendParamResetCache();
    } else if (strcmp(o, "--all") == 0) {
      a->all = 1;
    } else if (strcmp(o, "--summary") != 0) {
      return usage("unknown option");
    }
    i += takes;
  }
  return haveTopo ? 0 : usage("no topology (--topo FILE or -e LINE)");
}

static uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const unsigned char* b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static void printPlan(int rank, const struct mendPlan* p) {
  static char buf[8192];
  for (int i = 0; i < p->nWorks; i++) {
    const struct mendWork* w = p->works + i;
    mendProgDump(w->prog, buf, sizeof(buf));
    printf("rank %d work %d channel %d offset %zu count %zu chunk %zu\n%s", rank, i, w->channel, w->args.offset,
           w->args.count, w->args.chunkElems, buf);
  }
}

static void printShared(struct mendOffline* o, const struct args* a) {
  const struct mendPlanView* v = mendOfflineView(o);
  int degraded = 0, minCap = 1000;
  for (int r = 0; r < v->nRanks; r++) {
    degraded += v->rankCap[r] < 1000;
    if (v->rankCap[r] < minCap) minCap = v->rankCap[r];
  }
  printf("ranks %d servers %d channels %d degraded ranks %d (lowest capacity %d permille)\nweights", v->nRanks,
         a->topo.nServers, v->nChannels, degraded, minCap);
  for (int c = 0; c < v->nChannels; c++) printf(" %d", v->ch[c].weight);
  printf("\n");
  struct mendReplanChoice ch;
  if (a->func != MEND_FUNC_ALLREDUCE || mendOfflineChoice(o, a->bytes, &ch) != ncclSuccess) return;
  if (ch.costUs[MEND_REPLAN_BALANCE] < 0)
    printf("allreduce %zu bytes: every rank healthy, the ring/tree plan (no re-planning choice)\n", a->bytes);
  else
    printf("allreduce %zu bytes: %s, modelled %.1f us (backup %.1f, balance %.1f, r2 %.1f, recursive %.1f)\n", a->bytes,
           mendReplanName(ch.replan), ch.estUs, ch.costUs[MEND_REPLAN_BACKUP], ch.costUs[MEND_REPLAN_BALANCE],
           ch.costUs[MEND_REPLAN_R2], ch.costUs[MEND_REPLAN_RECURSIVE]);
}

static double secondsSince(const struct timespec* t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

int main(int argc, char** argv) {
  struct args a;
  memset(&a, 0, sizeof(a));
  setenv("NCCL_DEBUG", "WARN", 0); /* what is wrong with a topology is said in a WARN */
  int bad = parseArgs(argc, argv, &a);
  if (bad) return bad;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  struct mendOffline* o;
  ncclResult_t res = mendOfflineCreate(&a.topo, &o);
  if (res != ncclSuccess) return res == ncclInvalidArgument ? 2 : 1;
  int n = mendOfflineRanks(o);
  double tShared = secondsSince(&t0);
  int per = a.func == MEND_FUNC_ALLGATHER || a.func == MEND_FUNC_REDUCESCATTER || a.func == MEND_FUNC_ALLTOALL;
  struct mendOp op = {.func = a.func, .count = a.bytes / 4 / (per ? (size_t)n : 1), .type = ncclFloat,
                      .userOp = ncclSum, .root = a.root < n ? a.root : 0};
  if (op.count == 0 || mendRedOpResolve(ncclSum, ncclFloat, n, &op.redop) != ncclSuccess) {
    fprintf(stderr, "mend-plan: %zu bytes are less than one element per rank of %d\n", a.bytes, n);
    mendOfflineFree(o);
    return 2;
  }
  if (a.rank >= n) {
    fprintf(stderr, "mend-plan: --rank %d: the cluster has %d ranks\n", a.rank, n);
    mendOfflineFree(o);
    return 2;
  }
  if (a.rank < 0 && !a.all) printShared(o, &a);
  uint64_t hash = 0xcbf29ce484222325ull, works = 0, steps = 0;
  int rc = 0;
  int count = a.rank >= 0 ? 1 : (a.sample > 0 && a.sample < n && !a.all) ? a.sample : n;
  for (int k = 0; k < count && rc == 0; k++) {
    int r = a.rank >= 0 ? a.rank : count == n ? k : (int)((long long)k * n / count);
    struct mendPlan* p;
    if (mendOfflinePlan(o, r, &op, &p) != ncclSuccess) {
      rc = 1;
      break;
    }
    if (a.rank >= 0 || a.all) printPlan(r, p);
    for (int i = 0; i < p->nWorks; i++) {
      const struct mendWork* w = p->works + i;
      hash = fnv(hash, w->prog, w->prog->bytes);
      hash = fnv(hash, &w->args.offset, sizeof(w->args.offset));
      hash = fnv(hash, &w->args.count, sizeof(w->args.count));
      steps += w->prog->nSteps;
    }
    works += (uint64_t)p->nWorks;
    mendPlanFree(p);
  }
  if (rc == 0 && a.rank < 0 && !a.all)
    printf("planned %d of %d ranks: %llu works, %llu steps, programs hash %016llx; shared part %.2f s, total %.2f s\n", count, n,
           (unsigned long long)works, (unsigned long long)steps, (unsigned long long)hash, tShared, secondsSince(&t0));
  mendOfflineFree(o);
  return rc;
}
