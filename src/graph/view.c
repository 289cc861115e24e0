/*
 * The graph layer's plan view: the first version of what every plan is built from (rings, trees,
 * NICs of mendGraphSetup, this rank's NICs in topology order for failover), handed to the planner at
 * init.  The resilience layer derives later versions from it (planview.h).  Also the failover chain
 * of a connection (mendGraphNicChain): the resilient net's paths and re-planning's Balance both
 * follow it, so the view describes what connections do after a NIC fails.
 */
#include "graph/graph.h"

#include "checks.h"
#include "enqueue/planview.h"

_Static_assert(MEND_VIEW_MAX_NICS == MEND_TOPO_MAX_NICS, "a view can name every NIC of the topology");

ncclResult_t mendGraphPlanView(struct ncclComm* comm, struct mendPlanView** out) {
  struct mendPlanView* v;
  MENDCHECK(mendPlanViewFromChannels(comm, &v));
  /* Failover walks the topology's order (PCIe/NUMA distance), so a backup is the nearest NIC. */
  v->nNics = mendGraphNicOrder(comm, v->nicOrder, v->nicDist, MEND_VIEW_MAX_NICS);
  *out = v;
  return ncclSuccess;
}

ncclResult_t mendGraphInstallView(struct ncclComm* comm) {
  struct mendPlanView* v;
  MENDCHECK(mendGraphPlanView(comm, &v));
  return mendPlannerSetView(comm, v);
}

int mendGraphNicOrder(struct ncclComm* comm, int* order, int* dist, int max) {
  int n = mendTopoNicOrder(comm, order, max);
  for (int d = 0; d < max; d++) dist[d] = 0;
  for (int d = 0; d < n && comm->topo && d < comm->topo->nNics; d++) dist[d] = comm->topo->nics[d].dist;
  return n;
}

int mendGraphNicChain(int channel, int primary, int nNics, const int* nicOrder, const int* dist, int* chain) {
  if (nNics <= 0) return 0;
  if (nNics > MEND_TOPO_MAX_NICS) nNics = MEND_TOPO_MAX_NICS;
  if (primary < 0 || primary >= nNics) primary = 0;
  if (channel < 0) channel = 0;
  int others[MEND_TOPO_MAX_NICS], n = 0;
  for (int i = 0; i < nNics; i++) {
    int d = nicOrder ? nicOrder[i] : i;
    if (d < 0 || d >= nNics || d == primary) continue;
    int dup = 0;
    for (int j = 0; j < n; j++) dup |= others[j] == d;
    if (!dup) others[n++] = d;
  }
  int k = 0;
  chain[k++] = primary;
  int turn = channel / nNics; /* the channel's rank among the channels of its NIC (rails: c % nNics) */
  for (int a = 0; a < n;) {
    int b = a + 1; /* [a, b): a run of equally near NICs */
    while (b < n && (dist == NULL || dist[others[b]] == dist[others[a]])) b++;
    int run[MEND_TOPO_MAX_NICS], len = b - a;
    /* Cyclically after the primary (device order), so each NIC's channels start on different peers. */
    for (int i = 0; i < len; i++) run[i] = others[a + i];
    for (int i = 1; i < len; i++) {
      int x = run[i], kx = (x - primary + nNics) % nNics, j = i;
      while (j > 0 && (run[j - 1] - primary + nNics) % nNics > kx) {
        run[j] = run[j - 1];
        j--;
      }
      run[j] = x;
    }
    for (int i = 0; i < len; i++) chain[k++] = run[(i + turn) % len];
    a = b;
  }
  return k;
}
