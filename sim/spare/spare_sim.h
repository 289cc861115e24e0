/* mend-spare-sim: SPARe's time-to-train study (the paper's section 5) as a SimGrid discrete-event
 * simulation: a trainer actor steps through compute, all-reduce, failure handling, checkpoints and
 * global restarts; a failure actor injects Weibull-distributed group failures (sim/spare/README.md). */
#ifndef MEND_SPARE_SIM_H
#define MEND_SPARE_SIM_H

#include "spare.h"

/* The fault-tolerance scheme simulated. */
enum simScheme {
  SIM_CKPT = 0,   /* checkpointing only: any group failure is a global restart */
  SIM_REP = 1,    /* replication in blocks of r groups: every group computes all r stacks */
  SIM_SPARE = 2,  /* SPARe: cyclic stacks, compute up to the all-reduce stack, reorder on failure */
};

/* The study's parameters (the paper's Table 1 by default). */
struct simParams {
  enum simScheme scheme;  /* what is simulated */
  int n;                  /* data-parallel groups */
  int r;                  /* redundancy (1 for SIM_CKPT) */
  long steps;             /* training steps to finish */
  double tcomp;           /* seconds of compute per stack */
  double ta;              /* seconds per successful all-reduce; a failed one takes half */
  double mtbf;            /* seconds between group failures with all N groups alive */
  double shape;           /* Weibull shape k of the intervals between failures */
  double tr;              /* seconds per global restart */
  double ts;              /* seconds per checkpoint save */
  double shrinkPerRank;   /* communicator shrink: seconds per surviving rank */
  double shrinkFixed;     /* if >= 0, seconds per shrink whatever the size (the paper's 0.1) */
  double ctlrCost;        /* seconds per reordering-controller run */
  double jitter;          /* standard deviation of the factor N(1, jitter^2) on every duration */
  double cap;             /* stop (unfinished) after cap * T0 seconds */
  int restartFailures;    /* 1: failures go on during a restart and hit the new allocation; 0: none */
  unsigned long seed;     /* event trail: failures and jitter */
};

/* What one run measured. */
struct simResult {
  double ttt;        /* time-to-train (or the time stopped at), seconds */
  double t0;         /* failure-free data-parallel time: steps * (tcomp + ta) */
  double useful;     /* seconds of steps that were kept (not rolled back) */
  double tc;         /* checkpoint period used (Eq. 1 of the paper with Tf = mu * mtbf) */
  double mu;         /* failures endured before a wipe-out, Monte-Carlo mean for this layout */
  long stepsDone;    /* steps kept at the end */
  long stepsRun;     /* steps executed, kept or not */
  long stacks;       /* stacks computed over all executed steps, patches included */
  long failures;     /* group failures injected */
  long restarts;     /* global restarts */
  long reorders;     /* controller runs that reordered */
  long patches;      /* patch computes */
  long checkpoints;  /* checkpoints saved */
  int finished;      /* 1 when all steps were done before the cap */
};

/* A small random generator (xoshiro256**), one stream per purpose. */
struct simRng {
  unsigned long long s[4];  /* state */
};
void simRngSeed(struct simRng* g, unsigned long long seed);
double simRngUniform(struct simRng* g);     /* in (0, 1) */
double simRngNormal(struct simRng* g);      /* standard normal */

/* Mean failures endured before a wipe-out for a layout (random orders, seeded). */
double simEnduredMean(int n, int r, const int* stk, int samples, unsigned long long seed);
/* Runs one simulation on the SimGrid engine (simgrid_init must have been called). */
ncclResult_t simRun(const struct simParams* p, struct simResult* out);

#endif
