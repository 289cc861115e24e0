/*
 * Topology of one rank: the Net's devices and how far each is from our GPU (or from the CPU we run
 * on in host mode), read from sysfs.  Virtual devices (veth, loopback) have no PCI place: they get
 * a middle distance and keep their device order.  hwloc is not needed for this much.
 */
#include "graph/graph.h"

#include <dirent.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "misc/param.h"

/* First integer in a sysfs file, or `def`. */
static int readSysInt(const char* path, int def) {
  FILE* f = fopen(path, "r");
  if (!f) return def;
  int v;
  if (fscanf(f, "%d", &v) != 1) v = def;
  fclose(f);
  return v;
}

/* NUMA node of the CPU this thread runs on (host mode has no GPU to be near). */
static int cpuNumaNode(void) {
  int cpu = sched_getcpu();
  if (cpu < 0) return -1;
  char path[64];
  snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d", cpu);
  DIR* d = opendir(path);
  if (!d) return -1;
  int node = -1;
  for (struct dirent* e; (e = readdir(d)) != NULL;)
    if (strncmp(e->d_name, "node", 4) == 0 && e->d_name[4] >= '0' && e->d_name[4] <= '9') node = atoi(e->d_name + 4);
  closedir(d);
  return node;
}

/* sysfs path of a GPU from its bus id (NCCL's int64 packing of "dddd:bb:dd.f"). */
static int gpuSysPath(int64_t busId, char* out) {
  if (busId < 0) return 0;
  char path[128];
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%04lx:%02lx:%02lx.%lx", (long)(busId >> 20),
           (long)((busId >> 12) & 0xff), (long)((busId >> 4) & 0xff), (long)(busId & 0xf));
  return realpath(path, out) != NULL;
}

/* Hops between two sysfs device paths through their deepest common PCI bridge. */
static int pciHops(const char* a, const char* b) {
  size_t common = 0;
  for (size_t i = 0; a[i] && a[i] == b[i]; i++)
    if (a[i] == '/') common = i;
  int hops = 0;
  for (const char* p = a + common; *p; p++) hops += *p == '/';
  for (const char* p = b + common; *p; p++) hops += *p == '/';
  return hops;
}

static void describeNic(struct mendTopo* topo, const char* gpuPath, int dev, const struct mendNetProperties* props) {
  struct mendTopoNic* nic = topo->nics + dev;
  nic->dev = dev;
  snprintf(nic->name, sizeof(nic->name), "%s", props->name ? props->name : "?");
  nic->speed = props->speed;
  nic->guid = props->guid;
  char sys[PATH_MAX], path[PATH_MAX + 32];
  int havePath = 0;
  if (props->pciPath) havePath = realpath(props->pciPath, sys) != NULL;
  if (!havePath && props->name) {
    snprintf(path, sizeof(path), "/sys/class/net/%s/device", props->name);
    havePath = realpath(path, sys) != NULL;
  }
  nic->numaNode = -1;
  if (havePath) {
    snprintf(path, sizeof(path), "%s/numa_node", sys);
    nic->numaNode = readSysInt(path, -1);
  }
  int numaCost = MEND_TOPO_DIST_UNKNOWN;
  if (nic->numaNode >= 0 && topo->numaNode >= 0) numaCost = nic->numaNode == topo->numaNode ? 0 : 100;
  nic->dist = numaCost + (havePath && gpuPath[0] ? pciHops(sys, gpuPath) : 0);
}

void mendTopoSortNics(struct mendTopo* topo) {
  for (int i = 0; i < topo->nNics; i++) topo->nicOrder[i] = i;
  /* Insertion sort, stable: ties keep the Net's device order. */
  for (int i = 1; i < topo->nNics; i++) {
    int d = topo->nicOrder[i], j = i;
    while (j > 0 && topo->nics[topo->nicOrder[j - 1]].dist > topo->nics[d].dist) {
      topo->nicOrder[j] = topo->nicOrder[j - 1];
      j--;
    }
    topo->nicOrder[j] = d;
  }
}

ncclResult_t mendTopoDiscover(struct ncclComm* comm, const mendNet_t* net, struct mendTopo** out) {
  struct mendTopo* topo = calloc(1, sizeof(*topo));
  if (!topo) { WARN("topo: out of memory"); return ncclSystemError; }
  topo->crossNic = mendParamCrossNic() == 1 ? 1 : 0;
  char gpuPath[PATH_MAX] = "";
  int64_t busId = comm->peerInfo ? comm->peerInfo[comm->rank].busId : -1;
  if (!comm->hostMode && gpuSysPath(busId, gpuPath)) {
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/numa_node", gpuPath);
    topo->numaNode = readSysInt(path, -1);
  } else {
    gpuPath[0] = '\0';
    topo->numaNode = cpuNumaNode();
  }
  int ndev = 0;
  if (net) {
    ncclResult_t res = net->devices(&ndev);
    if (res != ncclSuccess) {
      WARN("topo: Net %s could not list its devices (error %d)", net->name, res);
      free(topo);
      return res;
    }
  }
  if (ndev > MEND_TOPO_MAX_NICS) ndev = MEND_TOPO_MAX_NICS;
  for (int dev = 0; dev < ndev; dev++) {
    struct mendNetProperties props;
    memset(&props, 0, sizeof(props));
    ncclResult_t res = net->getProperties(dev, &props);
    if (res != ncclSuccess) {
      WARN("topo: Net %s: no properties for device %d (error %d)", net->name, dev, res);
      free(topo);
      return res;
    }
    describeNic(topo, gpuPath, dev, &props);
    topo->nNics++;
  }
  mendTopoSortNics(topo);
  for (int i = 0; i < topo->nNics; i++) {
    const struct mendTopoNic* nic = topo->nics + topo->nicOrder[i];
    INFO(NCCL_GRAPH, "NIC order %d: dev %d %s (NUMA %d, distance %d, %d Mbps)", i, nic->dev, nic->name,
         nic->numaNode, nic->dist, nic->speed);
  }
  *out = topo;
  return ncclSuccess;
}

void mendTopoFree(struct mendTopo* topo) { free(topo); }

int mendTopoNicOrder(struct ncclComm* comm, int* devs, int max) {
  const struct mendTopo* topo = comm->topo;
  if (!topo) return 0;
  int n = topo->nNics < max ? topo->nNics : max;
  for (int i = 0; i < n; i++) devs[i] = topo->nicOrder[i];
  return n;
}
