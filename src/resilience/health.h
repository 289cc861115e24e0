/*
 * The health registry: every rank's view of every NIC of the communicator (state and bandwidth),
 * with an epoch number.  A rank that learns something (its own link went down, a localization
 * verdict, a NIC that works again) applies it with the next epoch and broadcasts it; every rank
 * applies an update only when it is newer than what it holds for that NIC, so all views converge.
 */
#ifndef MEND_RESILIENCE_HEALTH_H_
#define MEND_RESILIENCE_HEALTH_H_

#include <pthread.h>
#include <stdint.h>

#include "nccl.h"

enum mendNicState {
  MEND_NIC_UP = 0,      /* carrying traffic or ready to */
  MEND_NIC_DOWN,        /* failed: its paths are fenced */
  MEND_NIC_DEGRADED,    /* works, below its line rate */
  MEND_NIC_PROBING      /* was down; probes succeed, not yet back in use */
};

/* One change, as applied and broadcast (fixed size: it travels over the bootstrap). */
struct mendHealthUpdate {
  int32_t rank;         /* owner of the NIC */
  int32_t dev;          /* its device index */
  int32_t state;        /* enum mendNicState */
  uint32_t epoch;       /* registry epoch of this change */
  float gbps;           /* usable bandwidth, Gbit/s (0 when down) */
  int32_t reporter;     /* rank that decided it */
  char verdict[48];     /* why, e.g. "local NIC down", "remote NIC unreachable" */
};

struct mendHealthNic {
  int state;            /* enum mendNicState */
  float gbps;           /* usable bandwidth */
  float lineGbps;       /* line rate when up */
  uint32_t epoch;       /* epoch of the last change applied */
  int reporter;         /* rank that decided it (breaks ties between equal epochs) */
};

struct mendHealth {
  pthread_mutex_t lock; /* the fields below */
  int nRanks;           /* ranks */
  int maxDevs;          /* devices per rank in the table */
  struct mendHealthNic* nics; /* [nRanks * maxDevs] */
  uint32_t epoch;       /* highest epoch applied */
};

/* lineMbps[rank * maxDevs + dev]: each NIC's line rate (0: absent). */
ncclResult_t mendHealthInit(struct mendHealth* h, int nRanks, int maxDevs, const int* lineMbps);
void mendHealthFree(struct mendHealth* h);
/* Fill u->epoch with the next epoch and apply it (a local decision). */
void mendHealthDecide(struct mendHealth* h, struct mendHealthUpdate* u);
/* Apply an update; returns 1 when it changed the registry (it was newer). */
int mendHealthApply(struct mendHealth* h, const struct mendHealthUpdate* u);
/* State of one NIC (MEND_NIC_UP when out of range). */
int mendHealthState(struct mendHealth* h, int rank, int dev);
uint32_t mendHealthEpoch(struct mendHealth* h);
const char* mendNicStateName(int state);

#endif
