/*
 * The graph layer's plan view: the first version of what every plan is built from (rings, trees,
 * NICs of mendGraphSetup, this rank's NICs in topology order for failover), handed to the planner at
 * init.  The resilience layer derives later versions from it (planview.h).
 */
#include "graph/graph.h"

#include "checks.h"
#include "enqueue/planview.h"

_Static_assert(MEND_VIEW_MAX_NICS == MEND_TOPO_MAX_NICS, "a view can name every NIC of the topology");

ncclResult_t mendGraphPlanView(struct ncclComm* comm, struct mendPlanView** out) {
  struct mendPlanView* v;
  MENDCHECK(mendPlanViewFromChannels(comm, &v));
  /* Failover walks the topology's order (PCIe/NUMA distance), so a backup is the nearest NIC. */
  v->nNics = mendTopoNicOrder(comm, v->nicOrder, MEND_VIEW_MAX_NICS);
  *out = v;
  return ncclSuccess;
}

ncclResult_t mendGraphInstallView(struct ncclComm* comm) {
  struct mendPlanView* v;
  MENDCHECK(mendGraphPlanView(comm, &v));
  return mendPlannerSetView(comm, v);
}
