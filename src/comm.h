/*
 * The communicator.  Each layer keeps its own state behind an opaque pointer defined in that
 * layer's header (bootstrap, transport, proxy, planner, resilience), so layers evolve apart.
 */
#ifndef MEND_COMM_H_
#define MEND_COMM_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "nccl.h"
#include "misc/bell.h"

#define MEND_COMM_MAGIC 0x4d454e44434f4d4dULL /* "MENDCOMM": tells a live communicator from garbage */
#define MEND_MAXCHANNELS 64                    /* hard cap on channels, as NCCL 2.25+ */
#define MEND_MAX_TREE_ARITY 3                  /* children per tree node */
#define MEND_MAX_USER_REDOPS 64                /* PreMulSum ops alive at once per communicator */
#define MEND_HOSTID_LEN 64

/* The parsed, validated configuration (ncclConfig_t after defaults and env overrides). */
struct mendConfig {
  int blocking;            /* 1 blocking, 0 non-blocking */
  int cgaClusterSize;      /* kept for GPU launches */
  int minCTAs, maxCTAs;    /* bounds on channels */
  const char* netName;     /* requested Net name, NULL for auto (points into netNameBuf) */
  char netNameBuf[64];     /* copy of the user's string */
  int splitShare;          /* children of split share resources */
  int trafficClass;        /* NCCL_CONFIG_UNDEF_INT when unset */
  char commName[64];       /* "" when unset */
  int collnetEnable;       /* accepted, unused */
  int CTAPolicy;           /* NCCL_CTA_POLICY_* */
  int shrinkShare;         /* children of shrink share resources */
  int nvlsCTAs;            /* accepted, unused */
  int nChannelsPerNetPeer; /* channels per net peer for P2P; UNDEF = auto */
  int nvlinkCentricSched;  /* accepted, unused */
  int graphUsageMode;      /* 2.29: accepted, unused; UNDEF when unset */
  int numRmaCtx;           /* 2.29: one-sided contexts (no one-sided support yet); UNDEF when unset */
  int maxP2pPeers;         /* 2.30: accepted, unused; UNDEF when unset */
  int graphStreamOrdering; /* 2.30: accepted, unused; UNDEF when unset */
};

/* What every rank tells every other rank at init (allgathered through the bootstrap). */
struct mendCalib;

struct mendPeerInfo {
  int rank;                       /* rank in this communicator */
  int cudaDev;                    /* CUDA device, -1 in host mode */
  int64_t busId;                  /* PCI bus id of the GPU, -1 in host mode */
  uint64_t hostHash;              /* hash of the host identity (NCCL_HOSTID or hostname + boot id) */
  uint64_t pidHash;               /* hash of (host, pid namespace, pid): same process test */
  int pid;                        /* process id */
  int hostMode;                   /* 1: buffers are host memory */
  int cpus;                       /* CPUs the process may run on (its affinity), at least 1 */
  int cpusOnline;                 /* CPUs online on its host, at least 1 */
  char hostId[MEND_HOSTID_LEN];   /* printable host identity */
};

/* Ring order on one channel. */
struct mendRing {
  int prev;       /* rank we receive from */
  int next;       /* rank we send to */
  int index;      /* our position in the ring */
  int* userRanks; /* [nRanks]: rank at each ring position */
};

/* One tree on one channel (two trees per pair of channels for a double binary tree). */
struct mendTree {
  int up;                          /* parent rank, -1 at the root */
  int down[MEND_MAX_TREE_ARITY];   /* children, -1 when absent */
  int depth;                       /* tree depth (for the cost model) */
};

struct mendChannel {
  int id;                  /* channel index */
  struct mendRing ring;    /* ring for ring algorithms */
  struct mendTree tree;    /* tree for tree algorithms */
  int netDev;              /* local NIC (Net device) this channel's inter-host traffic uses */
};

/* A user-created reduction op (ncclRedOpCreatePreMulSum). */
struct mendUserRedOp {
  int used;                /* slot allocated */
  ncclDataType_t datatype; /* type the scalar was given in */
  int residence;           /* ncclScalarResidence_t */
  uint64_t scalar;         /* host-immediate scalar bytes (sizeof(datatype) bytes used) */
  const void* devScalar;   /* device-resident scalar pointer */
};

/* Opaque per-layer state. */
struct mendBootstrap;
struct mendTransport;
struct mendProxy;
struct mendRma;
struct mendPlanner;
struct mendTopo;
struct mendResil;
struct mendGroupJob;
struct mendExecutor;
struct mendCudaComm;
struct mendDevState;
struct mendGrowPending;

enum mendCommState {
  MEND_COMM_INITIALIZING = 0, /* init or split still running (non-blocking) */
  MEND_COMM_READY,            /* usable */
  MEND_COMM_FINALIZED,        /* ncclCommFinalize done: only destroy allowed */
  MEND_COMM_REVOKED,          /* ncclCommRevoke done: destroy, split, shrink allowed */
  MEND_COMM_FAILED            /* init failed or aborted */
};

struct ncclComm {
  uint64_t magic;                 /* MEND_COMM_MAGIC while alive */
  int rank;                       /* my rank */
  int nRanks;                     /* ranks in the communicator */
  int cudaDev;                    /* CUDA device, -1 in host mode */
  int hostMode;                   /* 1: no GPU; buffers are host memory, stream must be NULL */
  void* cuCtx;                    /* device mode: the CUcontext (device's primary context) every thread enters */
  int node, nNodes;               /* my host index and host count (hosts ordered by first rank) */
  int localRank, nLocalRanks;     /* position among ranks of my host */
  double cpuCrowd;                /* ranks per CPU on the most crowded host, at least 1 (the same on every rank) */
  int* rankToNode;                /* [nRanks] host index of each rank */
  int* rankToLocalRank;           /* [nRanks] local rank of each rank */
  uint64_t commHash;              /* identifies this communicator (logs, Net init) */
  struct mendConfig config;       /* parsed configuration */
  struct mendPeerInfo* peerInfo;  /* [nRanks] */
  struct mendCalib* calib;        /* the cost model's constants every rank plans with: rank 0's (init) */
  int calibInner;                 /* made by the library to measure those constants: measures none itself */
  int calibBuiltIn;               /* rank 0 offered the built-in constants at init: a crowded host may measure */

  int nChannels;                  /* channels in use */
  int nRails;                     /* NICs the channels spread over between hosts (channel c on NIC c mod
                                     nRails, the graph's rule; the largest count of any rank), 0: one host */
  struct mendChannel channels[MEND_MAXCHANNELS];

  struct mendBootstrap* bootstrap;/* out-of-band network */
  struct mendTopo* topo;          /* NICs, distances, rails */
  struct mendTransport* transport;/* connectors per (channel, peer, direction) */
  struct mendProxy* proxy;        /* progress thread for net connectors */
  struct mendPlanner* planner;    /* tuning state, cached programs */
  struct mendResil* resil;        /* health registry and failover state (NULL when off) */
  const struct mendExecutor* executor; /* runs this communicator's works (device/exec.h) */
  struct mendCudaComm* cuda;      /* device mode: context, kernel, launch buffers (exec_cuda.c); NULL in host mode */
  struct mendDevState* devState;  /* abort flag and errors shared with kernels (device or kernel-cpu executor) */

  mendBell_t* bell;               /* rung when something this rank waits on moved (may live in shm) */
  void* bellPage;                 /* the shm page bell starts, when it lives in one (transport.c), else NULL */
  _Atomic int abortFlag;          /* set by ncclCommAbort / revoke: every wait returns */
  _Atomic int state;              /* enum mendCommState */
  _Atomic int asyncResult;        /* ncclResult_t reported by ncclCommGetAsyncError */
  _Atomic int inflight;           /* queued or running operations (teardown waits for 0 before freeing) */
  uint64_t collSeq;               /* collectives issued (same on every rank) */
  pthread_mutex_t lock;           /* protects the fields below */
  pthread_t initThread;           /* non-blocking init/split worker */
  int initThreadRunning;          /* initThread must be joined */
  struct mendUserRedOp userRedOps[MEND_MAX_USER_REDOPS]; /* PreMulSum ops; op value = ncclNumOps + slot */
  struct ncclComm* parent;        /* communicator this one was split/shrunk/grown from, or NULL */
  struct mendGrowPending* grow;   /* ncclCommGetUniqueId's id not consumed by a grow yet (comm_grow.c), or NULL */
  int destroyed;                  /* guards double destroy */
  _Atomic int suspended;          /* 1 between ncclCommSuspend and ncclCommResume: operations are refused */
  _Atomic int64_t memExtraBytes;  /* bytes reported through mendCommMemAccount (staging beyond the connectors) */
  struct mendRma* rma;            /* windows, one-sided connectors and signals (onesided.h); NULL until a window */
};

/* Validate a handle at the API boundary: WARN and ncclInvalidArgument on NULL or a dead comm. */
ncclResult_t mendCommCheck(struct ncclComm* comm, const char* api);
/* Memory accounting for ncclCommMemStats (comm_suspend.c): a layer that allocates memory for this
 * communicator outside its connectors' FIFOs (staging, launch buffers) adds the bytes, and subtracts
 * them when it frees them.  Connector FIFO and slot memory is counted from the connectors themselves. */
void mendCommMemAccount(struct ncclComm* comm, int64_t bytes);
/* Record an asynchronous error (first one wins) so ncclCommGetAsyncError reports it. */
void mendCommSetAsyncError(struct ncclComm* comm, ncclResult_t res);
/* An operation on `comm` was queued (+1) or has finished or was dropped (-1): teardown does not free a
 * communicator that another thread still runs work on. */
static inline void mendCommInflight(struct ncclComm* comm, int delta) {
  atomic_fetch_add_explicit(&comm->inflight, delta, memory_order_acq_rel); /* on every call: inline */
}
/* Wait (bounded by ms) until no operation is queued or running on comm; 1 when idle. */
int mendCommWaitIdle(struct ncclComm* comm, int64_t ms);
static inline int mendCommAborted(struct ncclComm* comm) {
  return atomic_load_explicit(&comm->abortFlag, memory_order_acquire);
}

#endif
