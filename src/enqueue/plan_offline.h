/*
 * The planner without communicators: Mend's own graph, re-planning and planner code run for a
 * cluster described by a few numbers (servers, GPUs and NICs per server, line rate, failed or
 * degraded NICs), so a tool or a simulator gets the programs every rank of a 10^5-rank job would
 * run without creating one communicator per rank.
 *
 * What is shared by all ranks (rings, capacities, usable NICs, Balance weights, re-ranked rings)
 * is derived once, by mendGraphSetup / mendGraphPlanView / mendReplanDerive for rank 0; a rank's
 * own view (its ring positions and tree neighbours) is then filled in O(channels) from it, and its
 * plan is mendPlanBuildView on one reused, transport-free communicator.  Nothing per rank is kept:
 * rank r's programs are built when asked for, so memory is O(ranks x channels) for the rings.
 * Plain C (C++ tests include it).
 */
#ifndef MEND_ENQUEUE_PLAN_OFFLINE_H_
#define MEND_ENQUEUE_PLAN_OFFLINE_H_

#include <stddef.h>

#include "nccl.h"
#include "enqueue/plan.h"
#include "enqueue/planview.h"
#include "enqueue/tuning.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MEND_OFFLINE_MAX_FAULTS 64 /* server NICs named as down or degraded in one topology */

/* A NIC of a server that is down (gbps 0) or below its line rate; every rank of the server sees it. */
struct mendOfflineFault {
  int server; /* 0..nServers-1 */
  int nic;    /* 0..nicsPerServer-1 (its rail) */
  float gbps; /* usable rate, 0 when down */
};

/* A rail-optimised cluster: NIC i of every server on rail i; every rank of a server uses all its NICs
 * (channel c on NIC c % nics, as the graph layer does). */
struct mendOfflineTopo {
  int nServers;      /* hosts (>= 1) */
  int gpusPerServer; /* ranks per host (>= 1) */
  int nicsPerServer; /* NICs (rails) per host, 0..MEND_VIEW_MAX_NICS */
  float lineGbps;    /* NIC line rate in Gbit/s (> 0 when there are NICs) */
  int minChannels;   /* at least this many channels (device mode: 32, as mendGraphDeviceChannels); 0: graph's */
  int maxChannels;   /* at most this many (0: no limit) */
  int nFaults;                                        /* entries of faults */
  struct mendOfflineFault faults[MEND_OFFLINE_MAX_FAULTS]; /* distinct (server, nic) pairs */
};

struct mendOffline; /* the shared part of a cluster's plans */

/* Check `t` (WARN and ncclInvalidArgument on what is wrong) and derive what every rank shares. */
ncclResult_t mendOfflineCreate(const struct mendOfflineTopo* t, struct mendOffline** out);
void mendOfflineFree(struct mendOffline* o);
int mendOfflineRanks(const struct mendOffline* o);
/* The view every rank shares (rank 0's): rings, weights, capacities, usable NICs. */
const struct mendPlanView* mendOfflineView(const struct mendOffline* o);
/* The health picture the view was derived from (line rates, the NICs not fully up). */
const struct mendViewHealth* mendOfflineHealth(const struct mendOffline* o);
/* Host of a rank. */
int mendOfflineServer(const struct mendOffline* o, int rank);
/* Rank `rank`'s plan of op (func, count, type, redop, root).  Buffers are never touched; NULL ones
 * stand for addresses 2^44 bytes apart (an out-of-place op), since in-place AlltoAll plans a staging copy.  Free it with mendPlanFree before asking for another rank. */
ncclResult_t mendOfflinePlan(struct mendOffline* o, int rank, const struct mendOp* op, struct mendPlan** plan);
/* The choice an AllReduce of nBytes gets (backup, Balance, R2, recursive; estimates of each). */
ncclResult_t mendOfflineChoice(struct mendOffline* o, size_t nBytes, struct mendReplanChoice* choice);

#ifdef __cplusplus
}
#endif

#endif
