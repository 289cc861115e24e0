/* The simulation's actors: a trainer (one training step after another, failure handling, checkpoints,
 * global restarts) and a failure injector, on SimGrid's clock. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>

#include "spare_sim.h"

static unsigned long long rotl(unsigned long long x, int k) { return (x << k) | (x >> (64 - k)); }

void simRngSeed(struct simRng* g, unsigned long long seed) {
  for (int i = 0; i < 4; i++) {  /* splitmix64 fills the state */
    unsigned long long z = (seed += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    g->s[i] = z ^ (z >> 31);
  }
}

double simRngUniform(struct simRng* g) {
  unsigned long long* s = g->s;
  unsigned long long out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
  return ((out >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double simRngNormal(struct simRng* g) {
  return sqrt(-2 * log(simRngUniform(g))) * cos(2 * M_PI * simRngUniform(g));
}

double simEnduredMean(int n, int r, const int* stk, int samples, unsigned long long seed) {
  struct simRng g;
  simRngSeed(&g, seed);
  int* hosts = malloc((size_t)n * sizeof(int));
  int* order = malloc((size_t)n * sizeof(int));
  long total = 0;
  for (int k = 0; k < samples; k++) {
    memset(hosts, 0, (size_t)n * sizeof(int));
    for (long i = 0; i < (long)n * r; i++) hosts[stk[i]]++;
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = n - 1; i > 0; i--) {
      int j = (int)(simRngUniform(&g) * (i + 1)), x = order[i];
      order[i] = order[j], order[j] = x;
    }
    int endured = 0, wiped = 0;
    for (int i = 0; i < n && !wiped; i++) {
      for (int t = 0; t < r; t++) wiped |= --hosts[stk[(size_t)order[i] * r + t]] == 0;
      endured += !wiped;
    }
    total += endured;
  }
  free(hosts);
  free(order);
  return (double)total / samples;
}

/* Everything both actors see (they run one at a time: SimGrid actors are cooperative). */
struct simState {
  const struct simParams* p;
  struct simResult* res;
  int* stk0;               /* the layout at start and after every restart */
  int* stk;                /* the current stacks */
  unsigned char* failed;   /* failed[w]: group w is lost */
  int alive;               /* groups alive */
  int newFailures;         /* failures since the last all-reduce saw them */
  int s;                   /* the committed all-reduce stack */
  struct simRng failRng;   /* failure times and victims */
  struct simRng jitterRng; /* duration jitter */
  sg_actor_t injector;     /* the failure actor of this epoch */
  double ckptEnd;          /* when the last checkpoint (or restart) ended */
  long ckptSteps;          /* steps the last checkpoint holds */
  double pendingUseful;    /* useful seconds since that checkpoint */
};

static void simWait(struct simState* st, double seconds) {
  double f = 1 + st->p->jitter * simRngNormal(&st->jitterRng);
  sg_actor_sleep_for(seconds * (f > 0 ? f : 0));
}

static void injectorMain(int argc, char** argv) {
  struct simState* st = sg_actor_self_get_data();
  const struct simParams* p = st->p;
  double scale = p->mtbf / tgamma(1 + 1 / p->shape);
  for (;;) {
    double u = simRngUniform(&st->failRng), gap = scale * pow(-log(u), 1 / p->shape);
    sg_actor_sleep_for(gap * p->n / (st->alive > 0 ? st->alive : 1));  /* rate scales with groups alive */
    if (st->alive == 0) continue;
    int k = (int)(simRngUniform(&st->failRng) * st->alive), w = -1;
    while (k >= 0) k -= !st->failed[++w];
    st->failed[w] = 1;
    st->alive--;
    st->newFailures++;
    st->res->failures++;
  }
}

static void startInjector(struct simState* st) {
  st->injector = sg_actor_init("failures", sg_host_by_name("cluster"));
  sg_actor_set_data(st->injector, st);
  sg_actor_start(st->injector, injectorMain, 0, NULL);
  sg_actor_daemonize(st->injector);
}

/* A global restart: all groups back, the layout reset, progress rolled back to the checkpoint.  With
 * restartFailures the failure actor keeps running: what fails during the restart is lost from the
 * new allocation and the first all-reduce after it sees the loss. */
static void globalRestart(struct simState* st) {
  const struct simParams* p = st->p;
  if (!p->restartFailures) sg_actor_kill(st->injector);
  memcpy(st->stk, st->stk0, (size_t)p->n * p->r * sizeof(int));
  memset(st->failed, 0, (size_t)p->n);
  st->alive = p->n;
  st->newFailures = 0;
  st->s = 1;
  st->res->restarts++;
  st->res->stepsDone = st->ckptSteps;
  st->pendingUseful = 0;
  simWait(st, p->tr);
  st->ckptEnd = simgrid_get_clock();
  if (!p->restartFailures) startInjector(st);
}

/* Failures seen by an all-reduce: 1 when the step survives them (masked), 0 after a restart. */
static int handleFailures(struct simState* st) {
  const struct simParams* p = st->p;
  while (st->newFailures > 0) {
    st->newFailures = 0;
    int ok = 0, outcome = MEND_SPARE_WIPEOUT;
    if (p->scheme == SIM_REP) {
      mendSpareFixed(p->n, p->r, st->stk, st->failed, p->r, &ok);
      outcome = ok ? MEND_SPARE_KEEP : MEND_SPARE_WIPEOUT;
    } else if (p->scheme == SIM_SPARE) {
      simWait(st, p->ctlrCost);
      mendSpareControl(p->n, p->r, st->stk, st->failed, &st->s, &outcome, NULL);
    }
    if (outcome == MEND_SPARE_WIPEOUT) {
      globalRestart(st);
      return 0;
    }
    if (outcome == MEND_SPARE_REORDER) {  /* this step's slots lost a type: compute it again */
      st->res->reorders++;
      st->res->patches++;
      st->res->stacks++;
      simWait(st, p->tcomp);
    }
    simWait(st, p->shrinkFixed >= 0 ? p->shrinkFixed : p->shrinkPerRank * st->alive);
    simWait(st, p->ta);  /* the all-reduce again, over the survivors (new failures fail it) */
  }
  return 1;
}

/* One training step; returns its useful seconds, or -1 when a restart lost it. */
static double trainStep(struct simState* st) {
  const struct simParams* p = st->p;
  int stacks = p->scheme == SIM_REP ? p->r : p->scheme == SIM_SPARE ? st->s : 1;
  double start = simgrid_get_clock();
  st->res->stepsRun++;
  st->res->stacks += stacks;
  simWait(st, stacks * p->tcomp);
  if (st->newFailures == 0) {
    simWait(st, p->ta);
    return simgrid_get_clock() - start;
  }
  simWait(st, 0.5 * p->ta);  /* the all-reduce that found the failures */
  if (!handleFailures(st)) return -1;
  return stacks * p->tcomp + p->ta;
}

static void trainerMain(int argc, char** argv) {
  struct simState* st = sg_actor_self_get_data();
  const struct simParams* p = st->p;
  struct simResult* res = st->res;
  startInjector(st);
  while (res->stepsDone < p->steps && simgrid_get_clock() < p->cap * res->t0) {
    double useful = trainStep(st);
    if (useful < 0) continue;
    res->stepsDone++;
    st->pendingUseful += useful;
    if (res->stepsDone < p->steps && simgrid_get_clock() - st->ckptEnd >= res->tc) {
      simWait(st, p->ts);
      st->ckptSteps = res->stepsDone;
      res->useful += st->pendingUseful;
      st->pendingUseful = 0;
      st->ckptEnd = simgrid_get_clock();
      res->checkpoints++;
    }
  }
  res->useful += st->pendingUseful;
  res->finished = res->stepsDone >= p->steps;
  res->ttt = simgrid_get_clock();
  sg_actor_kill(st->injector);
}

ncclResult_t simRun(const struct simParams* p, struct simResult* out) {
  int n = p->n, r = p->r;
  struct simState st = {.p = p, .res = out, .alive = n, .s = 1};
  memset(out, 0, sizeof(*out));
  st.stk0 = malloc((size_t)n * r * sizeof(int));
  st.stk = malloc((size_t)n * r * sizeof(int));
  st.failed = calloc((size_t)n, 1);
  ncclResult_t res = ncclSystemError;
  if (st.stk0 == NULL || st.stk == NULL || st.failed == NULL) goto out;
  res = p->scheme == SIM_SPARE ? mendSpareLayoutCyclic(n, r, NULL, st.stk0)
        : p->scheme == SIM_REP ? mendSpareLayoutReplica(n, r, st.stk0)
                               : mendSpareLayoutReplica(n, 1, st.stk0);
  if (res != ncclSuccess) goto out;
  memcpy(st.stk, st.stk0, (size_t)n * r * sizeof(int));
  simRngSeed(&st.failRng, 2 * p->seed + 1);
  simRngSeed(&st.jitterRng, 2 * p->seed + 2);
  out->t0 = p->steps * (p->tcomp + p->ta);
  out->mu = p->scheme == SIM_CKPT ? 1 : simEnduredMean(n, r, st.stk0, 200, p->seed + 99);
  double tf = out->mu * p->mtbf;  /* the paper's Eq. 1: optimal period for availability */
  out->tc = p->ts + sqrt(p->ts * p->ts + 2 * p->ts * (tf + p->tr));
  sg_actor_t trainer = sg_actor_init("trainer", sg_host_by_name("cluster"));
  sg_actor_set_data(trainer, &st);
  sg_actor_start(trainer, trainerMain, 0, NULL);
  simgrid_run();
out:
  free(st.stk0);
  free(st.stk);
  free(st.failed);
  return res;
}
