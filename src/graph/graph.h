/*
 * Graph: what this rank's host looks like (NICs and their distance from our GPU or CPU) and the
 * shapes every channel uses: ring order, tree, and the NIC that carries its inter-host traffic.
 * Every shape is a deterministic function of allgathered information, so all ranks build the same
 * rings and trees without talking.  See src/graph/README.md.
 */
#ifndef MEND_GRAPH_GRAPH_H_
#define MEND_GRAPH_GRAPH_H_

#include <stdint.h>

#include "nccl.h"
#include "comm.h"
#include "transport/net.h"

#define MEND_TOPO_MAX_NICS 32     /* Net devices we consider per rank */
#define MEND_TOPO_DIST_UNKNOWN 50 /* distance of a NIC whose place in the machine we cannot read */

/* One Net device as the topology sees it. */
struct mendTopoNic {
  int dev;         /* Net device index */
  char name[64];   /* interface or device name */
  int numaNode;    /* NUMA node of the NIC, -1 when unknown (virtual devices) */
  int dist;        /* cost from our GPU/CPU: 100 * NUMA distance class + PCI hops (lower is closer) */
  int speed;       /* line rate in Mbps (0 unknown) */
  uint64_t guid;   /* device id from the Net */
};

struct mendTopo {
  int nNics;                                 /* Net devices found (0: no Net needed or none) */
  struct mendTopoNic nics[MEND_TOPO_MAX_NICS];/* indexed by Net device */
  int nicOrder[MEND_TOPO_MAX_NICS];          /* Net devices, closest first (ties by device index) */
  int numaNode;                              /* NUMA node of our GPU (or of the CPU we run on), -1 unknown */
  int crossNic;                              /* resolved NCCL_CROSS_NIC: 0 rails, 1 crossing allowed */
};

/* Shape of a communicator, enough to build rings and trees (pure functions, unit-tested). */
struct mendGraphShape {
  int nRanks;                 /* ranks */
  int nNodes;                 /* hosts */
  const int* rankToNode;      /* [nRanks] host index (hosts numbered by first rank) */
  const int* rankToLocalRank; /* [nRanks] position within the host */
};

/* topo.c: NICs of this rank from `net` (may be NULL: no NICs) plus sysfs NUMA/PCI distances. */
ncclResult_t mendTopoDiscover(struct ncclComm* comm, const mendNet_t* net, struct mendTopo** topo);
void mendTopoFree(struct mendTopo* topo);
/* Fill topo->nicOrder: devices by distance, closest first, ties in device order (stable). */
void mendTopoSortNics(struct mendTopo* topo);
/* Up to `max` Net devices of this rank, closest first (the resilient net's failover order). */
int mendTopoNicOrder(struct ncclComm* comm, int* devs, int max);

/* channels.c */
/* Channels for a communicator: 2 on one host; across hosts max(2, nNics) so every NIC gets some;
 * then NCCL_MIN/MAX_NCHANNELS and config minCTAs/maxCTAs (values <= 0 mean unset), capped at 64. */
int mendGraphChooseNChannels(int nNodes, int nNics, int minCTAs, int maxCTAs);
/* Device mode's base channel count for a GPU shared by `ranksOnGpu` ranks of the communicator. */
int mendGraphDeviceChannels(int ranksOnGpu);
/* Ring order of `channel`: ranks host by host (hosts in index order, local ranks in order);
 * odd channels run the same ring backwards.  userRanks gets nRanks entries. */
ncclResult_t mendGraphRing(const struct mendGraphShape* shape, int channel, int* userRanks);
/* Tree of `channel`: a double binary tree over hosts (channel parity picks one of the two),
 * a chain inside each host.  parent[r] = -1 at the root; down[r][k] = -1 when absent. */
ncclResult_t mendGraphTree(const struct mendGraphShape* shape, int channel, int* parent,
                           int (*down)[MEND_MAX_TREE_ARITY], int* depth);
/* Binary tree over n positions (tree 0 or its mirror/shift, tree 1): parent[p], child[p][2]. */
void mendGraphBtree(int n, int which, int* parent, int (*child)[2]);
/* Net device of `channel` for a rank with these NICs: rails (crossNic 0) use device
 * channel % nNics on both ends; crossNic 1 walks this rank's closest-first order. -1: no NIC. */
int mendGraphNetDev(int channel, int nNics, const int* nicOrder, int crossNic);
/* Fill comm->nChannels and every channel's ring, tree and netDev.  `nNicsMax` is the largest NIC
 * count over all ranks (the same on every rank). */
ncclResult_t mendGraphSetup(struct ncclComm* comm, int nNicsMax);
/* Free what mendGraphSetup allocated (ring orders). */
void mendGraphFree(struct ncclComm* comm);

/* view.c */
struct mendPlanView;
/* The first plan view of comm (epoch 0, from op 0): mendGraphSetup's rings, trees and NICs, and this
 * rank's NICs in topology order (the failover order). */
ncclResult_t mendGraphPlanView(struct ncclComm* comm, struct mendPlanView** view);
/* Build it and hand it to comm's planner (init, after the transport's graph set-up). */
ncclResult_t mendGraphInstallView(struct ncclComm* comm);
/* Up to `max` NICs of this rank nearest first (order) and each NIC's distance (dist[d], indexed by
 * device; 0 beyond the NICs); returns how many NICs. */
int mendGraphNicOrder(struct ncclComm* comm, int* order, int* dist, int max);
/* The failover chain of a connection of `channel` whose primary NIC is `primary`, over NICs
 * 0..nNics-1: the primary, then the other NICs nearest first (nicOrder; NULL: device order), each run
 * of equally near NICs (dist[d] equal; dist NULL: all alike) taken cyclically after the primary and
 * rotated by the channel's rank among the channels of its NIC (channel / nNics), so the channels of
 * a failed NIC spread over its equally near peers instead of all landing on one.  Every rank
 * computes the same chain from the same arguments.  Returns its length (0 when nNics <= 0). */
int mendGraphNicChain(int channel, int primary, int nNics, const int* nicOrder, const int* dist, int* chain);

#endif
