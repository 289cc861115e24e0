/*
 * Init phases after the bootstrap, shared by init, split and shrink: exchange peer info, derive the
 * host layout (hosts ordered by their first rank), agree on a communicator hash, bring up the
 * transports, and mark the communicator READY.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "checks.h"
#include "comm.h"
#include "init.h"
#include "misc/cudrv.h"
#include "misc/debug.h"
#include "misc/param.h"
#include "device/engine.h"
#include "enqueue/calib.h"
#include "graph/graph.h"
#include "misc/utils.h"
#include "transport/transport.h"

/* What each rank contributes to the init allgather. */
struct initExchange {
  struct mendPeerInfo info; /* the rank's identity */
  uint64_t nonce;           /* rank 0's value becomes the communicator hash */
  struct mendCalib calib;   /* the rank's cost-model constants: rank 0's are every rank's */
};

/* Every rank plans with rank 0's cost-model constants, so a rank whose MEND_CALIB_FILE differs (or
 * is missing) still chooses the same algorithms as the others.  Rank 0's values came over the
 * network: out of range, every rank (seeing the same bytes) uses the built-in ones. */
static ncclResult_t agreeCalib(struct ncclComm* comm, const struct initExchange* all) {
  MENDCHECK(MENDCALLOC(comm->calib, 1));
  *comm->calib = all[0].calib;
  char err[160];
  if (mendCalibCheck(comm->calib, err, sizeof(err)) != 0) {
    WARN("Init: rank 0's cost-model constants are not valid (%s); every rank uses the built-in ones", err);
    mendCalibDefaults(comm->calib);
    return ncclSuccess;
  }
  comm->calibBuiltIn = all[0].calib.fromFile == 0; /* a crowded host may measure (mendCalibMeasureCrowded) */
  int differ = 0;
  for (int r = 1; r < comm->nRanks; r++) differ += !mendCalibEqual(&all[r].calib, &all[0].calib);
  if (differ && comm->rank == 0)
    INFO(NCCL_INIT | NCCL_TUNING, "Init: %d rank(s) have cost-model constants (MEND_CALIB_FILE) other than rank 0's; "
         "every rank uses rank 0's", differ);
  if (!mendCalibEqual(mendCalibGet(), comm->calib)) {
    WARN_ONCE("Init: rank %d's cost-model constants (MEND_CALIB_FILE) differ from rank 0's; it plans with rank 0's "
              "so every rank chooses the same algorithms", comm->rank);
    comm->calib->fromFile = MEND_CALIB_RANK0;
  } else {
    comm->calib->fromFile = mendCalibGet()->fromFile;
  }
  return ncclSuccess;
}

/* comm->cudaDev was set by the creator (the caller's current device, InitAll's devlist, a split's
 * parent); -1 means host mode: buffers are host memory, streams must be NULL.  This runs in the init
 * thread, which enters the device's primary context for everything it does with CUDA. */
ncclResult_t mendInitDetectDevice(struct ncclComm* comm) {
  comm->hostMode = comm->cudaDev < 0;
  if (comm->hostMode) {
    comm->cudaDev = -1;
    return mendExecChoose(comm);
  }
  CUdevice dev;
  CUcontext ctx = NULL;
  CUCHECK(cuDeviceGet(&dev, comm->cudaDev));
  CUCHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  comm->cuCtx = ctx;
  MENDCHECK(mendCuEnter(ctx));
  char name[128] = "";
  mendCu.cuDeviceGetName(name, sizeof(name), dev);
  INFO(NCCL_INIT, "Rank %d: device mode on CUDA device %d (%s)", comm->rank, comm->cudaDev, name);
  return mendExecChoose(comm);
}

/* PCI address as topo.c reads it: domain << 20 | bus << 12 | device << 4 | function. */
static int64_t busIdOf(int cudaDev) {
  int dom = 0, bus = 0, dev = 0;
  CUdevice d;
  if (cudaDev < 0 || mendCu.cuDeviceGet(&d, cudaDev) != MEND_CU_SUCCESS) return -1;
  mendCu.cuDeviceGetAttribute(&dom, MEND_CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d);
  mendCu.cuDeviceGetAttribute(&bus, MEND_CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d);
  mendCu.cuDeviceGetAttribute(&dev, MEND_CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d);
  return ((int64_t)dom << 20) | ((int64_t)bus << 12) | ((int64_t)dev << 4);
}

static void fillInfo(struct ncclComm* comm, struct mendPeerInfo* info) {
  memset(info, 0, sizeof(*info));
  info->rank = comm->rank;
  info->cudaDev = comm->cudaDev;
  info->busId = comm->hostMode ? -1 : busIdOf(comm->cudaDev);
  info->hostHash = mendHostHash();
  info->pidHash = mendPidHash();
  info->pid = (int)getpid();
  info->hostMode = comm->hostMode;
  info->cpus = mendCpusAvailable();
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  info->cpusOnline = online > 0 ? (int)online : 1;
  snprintf(info->hostId, sizeof(info->hostId), "%s", mendHostId());
}

/* Ranks per CPU on the most crowded host, from what every rank reported (so every rank computes the
 * same value): a host's CPUs are its online count, or fewer when its ranks' affinities add up to
 * fewer (ranks bound to one CPU each count one each).  The cost model charges dependent steps and
 * per-rank work for it (tuning.c). */
#define MAX_CPUS (1 << 20) /* bound on a reported CPU count */

static ncclResult_t hostCrowding(struct ncclComm* comm) {
  int n = comm->nRanks, nNodes = comm->nNodes;
  int *ranks = NULL, *cpus = NULL, *online = NULL;
  ncclResult_t res = ncclSystemError;
  if (MENDCALLOC(ranks, nNodes) != ncclSuccess || MENDCALLOC(cpus, nNodes) != ncclSuccess ||
      MENDCALLOC(online, nNodes) != ncclSuccess)
    goto out;
  for (int r = 0; r < n; r++) {
    const struct mendPeerInfo* p = comm->peerInfo + r;
    int h = comm->rankToNode[r];
    /* Counts from other ranks: bounded before they are summed. */
    int c = p->cpus < 1 ? 1 : p->cpus > MAX_CPUS ? MAX_CPUS : p->cpus;
    int on = p->cpusOnline < 1 ? 1 : p->cpusOnline > MAX_CPUS ? MAX_CPUS : p->cpusOnline;
    ranks[h]++;
    cpus[h] = cpus[h] + c > MAX_CPUS ? MAX_CPUS : cpus[h] + c;
    if (online[h] == 0 || on < online[h]) online[h] = on;
  }
  comm->cpuCrowd = 1.0;
  for (int h = 0; h < nNodes; h++) {
    int c = cpus[h] < online[h] ? cpus[h] : online[h];
    double crowd = (double)ranks[h] / c;
    if (crowd > comm->cpuCrowd) comm->cpuCrowd = crowd;
  }
  if (comm->cpuCrowd > 1.0 && comm->rank == 0)
    INFO(NCCL_INIT | NCCL_TUNING, "Init: %.2f ranks per CPU on the most crowded host: the cost model charges for it",
         comm->cpuCrowd);
  res = ncclSuccess;
out:
  free(ranks);
  free(cpus);
  free(online);
  return res;
}

/* node = index of the host in order of its first rank; localRank = order among the host's ranks. */
static ncclResult_t hostLayout(struct ncclComm* comm) {
  int n = comm->nRanks;
  MENDCHECK(MENDCALLOC(comm->rankToNode, n));
  MENDCHECK(MENDCALLOC(comm->rankToLocalRank, n));
  comm->nNodes = 0;
  for (int r = 0; r < n; r++) {
    int node = -1, local = 0;
    for (int q = 0; q < r; q++) {
      if (comm->peerInfo[q].hostHash != comm->peerInfo[r].hostHash) continue;
      node = comm->rankToNode[q];
      local++;
    }
    comm->rankToNode[r] = node >= 0 ? node : comm->nNodes++;
    comm->rankToLocalRank[r] = local;
  }
  comm->node = comm->rankToNode[comm->rank];
  comm->localRank = comm->rankToLocalRank[comm->rank];
  comm->nLocalRanks = 0;
  for (int r = 0; r < n; r++) comm->nLocalRanks += comm->rankToNode[r] == comm->node;
  return hostCrowding(comm);
}

/* Ranks of this process on one GPU: their streams share the context's hardware work queues, and two
 * of them on one queue can deadlock (measured on an H200 at 8 ranks as threads: 3 of 3 runs of
 * test_gpu_colls hung with the default 8 queues, 0 of 3 with 32). */
static void warnSharedQueues(struct ncclComm* comm) {
  if (comm->hostMode) return;
  const struct mendPeerInfo* me = comm->peerInfo + comm->rank;
  int shared = 0;
  for (int r = 0; r < comm->nRanks; r++)
    shared += comm->peerInfo[r].pidHash == me->pidHash && comm->peerInfo[r].busId == me->busId;
  int64_t queues = mendParamCudaMaxConnections();
  if (shared < 2 || queues >= 32) return;
  WARN_ONCE("Rank %d: %d ranks of this process share CUDA device %d with CUDA_DEVICE_MAX_CONNECTIONS=%lld: their "
            "streams can share a hardware queue and deadlock; set CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA "
            "starts (or run one rank per process)", comm->rank, shared, comm->cudaDev, (long long)queues);
}

static ncclResult_t exchangePeerInfo(struct ncclComm* comm) {
  int n = comm->nRanks;
  struct initExchange* all = NULL;
  ncclResult_t res;
  MENDCHECK(MENDCALLOC(all, n));
  fillInfo(comm, &all[comm->rank].info);
  all[comm->rank].nonce = mendHashCombine(mendTimeNs(), mendPidHash() ^ (uint64_t)(uintptr_t)comm);
  all[comm->rank].calib = *mendCalibGet();
  MENDCHECKGOTO(mendBootstrapAllGather(comm->bootstrap, all, sizeof(*all)), res, fail_free);
  MENDCHECKGOTO(MENDCALLOC(comm->peerInfo, n), res, fail_free);
  for (int r = 0; r < n; r++) {
    comm->peerInfo[r] = all[r].info;
    if (comm->peerInfo[r].rank != r) {
      WARN("Init: peer info of rank %d claims rank %d", r, comm->peerInfo[r].rank);
      res = ncclInternalError;
      goto fail_free;
    }
    if (comm->peerInfo[r].hostMode != comm->hostMode) {
      WARN("Init: rank %d runs in %s mode but rank %d in %s mode: every rank must have a CUDA device current when "
           "it creates the communicator, or none", comm->rank, comm->hostMode ? "host" : "device", r,
           comm->peerInfo[r].hostMode ? "host" : "device");
      res = ncclInvalidUsage;
      goto fail_free;
    }
  }
  comm->commHash = mendHashCombine(all[0].nonce, (uint64_t)n);
  warnSharedQueues(comm);
  res = agreeCalib(comm, all);
  free(all);
  return res;
fail_free:
  free(all);
  return res;
}

void mendInitSetOutcome(struct ncclComm* comm, ncclResult_t res) {
  if (res == ncclSuccess) {
    atomic_store(&comm->state, MEND_COMM_READY);
    atomic_store(&comm->asyncResult, ncclSuccess);
  } else {
    atomic_store(&comm->state, MEND_COMM_FAILED);
    atomic_store(&comm->asyncResult, res == ncclInProgress ? ncclInternalError : res);
  }
}

ncclResult_t mendInitFinish(struct ncclComm* comm) {
  MENDCHECK(exchangePeerInfo(comm));
  MENDCHECK(mendInitLinkAll(comm));
  MENDCHECK(hostLayout(comm));
  MENDCHECK(mendCalibMeasureCrowded(comm));
  MENDCHECK(mendTransportInit(comm));
  MENDCHECK(mendGraphInstallView(comm));
  INFO(NCCL_INIT, "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d commHash 0x%llx - Init COMPLETE",
       (void*)comm, comm->rank, comm->nRanks, comm->nNodes, comm->nLocalRanks, comm->localRank,
       (unsigned long long)comm->commHash);
  return ncclSuccess;
}
