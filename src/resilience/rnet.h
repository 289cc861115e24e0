/*
 * The resilient net ("Resilient"): a Net stacked over the devices of a base Net (one per NIC), like
 * libfabric's mrail.  One rnet device per base device; a connection made on device d uses d as its
 * primary path and opens a backup path on every other device (the failover chain), all connected
 * before connect/accept return.  Messages are numbered; the receiver acknowledges what it has fully
 * placed and an isend completes only once acknowledged, so a path failure loses nothing: both ends
 * fence the dead path, agree on the receiver's count of placed messages, and the sender replays the
 * rest on the next healthy path.  Each message's completion reaches the user exactly once, in order.
 *
 * Limits: one receive per irecv (maxRecvs 1); host memory (what the base supports); base listen
 * handles must fit in MEND_NET_HANDLE_MAXSIZE - 16 bytes.
 */
#ifndef MEND_RESILIENCE_RNET_H_
#define MEND_RESILIENCE_RNET_H_

#include <stdint.h>

#include "nccl.h"
#include "transport/net.h"

#define MEND_RNET_MAX_PATHS 8  /* NICs used per host: paths of a connection's chain */
#define MEND_RNET_MAX_SLOTS (MEND_RNET_MAX_PATHS + 1) /* paths per connection: the chain and one crossing path */

/* The resilient Net.  Its devices and properties are the base Net's (set with mendRnetSetBase). */
extern const mendNet_t mendNetResilient;

/* The Net under the resilient one for init()/devices()/getProperties() (default: the socket Net). */
void mendRnetSetBase(const mendNet_t* base);
/* Tests without a resilience service: let receivers hold acknowledgements anyway (MEND_ACK_DELAY_US);
 * only their own calls send them then.  Read when a connection is made. */
void mendRnetHoldAcksForTest(int on);

struct ncclComm;
/* A context over an already initialised base (baseCtx stays the caller's).  With comm set (and its
 * resilience service in comm->resil), notices reach peers in other processes over the bootstrap,
 * and the service watches links, probes and fails back. */
ncclResult_t mendRnetCtxCreate(const mendNet_t* base, void* baseCtx, struct ncclComm* comm, void** ctx);

/* The failover order of this context's devices, nearest first (the topology's PCIe/NUMA order): a
 * connection's chain is its primary, then the receiver's order.  Without one, chains rotate from the
 * primary device.  Call before the first connection. */
ncclResult_t mendRnetSetOrder(void* ctx, const int* order, int n);
/* listen() for one connection with its own failover order (devices, primary first; the transport
 * passes the channel's chain, mendGraphNicChain, so the channels of a failed NIC spread over the
 * others): the receiver's order is the connection's chain at both ends. */
ncclResult_t mendRnetListenOrdered(void* ctx, int dev, const int* order, int n, void* handle, void** listenComm);

/* Is resilience on for this communicator?  MEND_RESILIENCE: 1 on, 0 off, -2 auto (on when the most
 * NICs any rank has is 2 or more, the same answer on every rank). */
int mendRnetEnabled(int nNicsMax);


/* Observability and tests. */
struct mendRnetStats {
  int nPaths;                              /* paths of the connection */
  int active;                              /* path carrying traffic (-1: none left) */
  int dead;                                /* dead paths */
  uint64_t failovers;                      /* paths failed under this connection */
  uint64_t failbacks;                      /* planned returns to a rebuilt preferred path */
  uint64_t rebuilds;                       /* dead paths made backups again */
  uint64_t ctrlLooks;                      /* sender: tests of its control comm for acknowledgements */
  uint64_t wordAcks;                       /* sender: messages acknowledged by words on the peer's data */
  uint64_t ctrlSent;                       /* receiver: control messages sent (acknowledgements, RESUMEs) */
  int cross;                               /* the last-resort slot: crossing or relay path (rnet_cross.c); -1: none */
  int relay;                               /* the bridge rank when that slot is a relay path; -1: not one */
  uint64_t msgs[MEND_RNET_MAX_SLOTS];      /* messages carried per path */
  int localDev[MEND_RNET_MAX_SLOTS];       /* local device of each path */
  int remoteDev[MEND_RNET_MAX_SLOTS];      /* the peer's device of each path */
};
ncclResult_t mendRnetGetStats(void* netComm, struct mendRnetStats* st);
/* Ask a sending connection to rebuild its dead path p now, as its resilience service does once the
 * path's NICs probe healthy for MEND_FAILBACK_DELAY (any thread; applied by the next progress call). */
ncclResult_t mendRnetRebuildPath(void* sendComm, int p);
/* Tests without a resilience service: a bridge in this process (relay.h) that sending connections
 * with no path left relay through, as rank `rank`; NULL stops it. */
struct mendRelay;
void mendRnetSetTestRelay(struct mendRelay* rl, int rank);
/* Tests: the rank a context's connections carry in their hellos (notices name it). */
ncclResult_t mendRnetSetRankForTest(void* ctx, int rank);
/* Tests without a resilience service: devices of ctx (bit d) that new paths take as down, as the
 * service's link state would say. */
ncclResult_t mendRnetSetDownForTest(void* ctx, uint32_t mask);
/* Declare path p of a connection failed, as if its NIC had died (any thread; applied by the next
 * progress call of the owner). */
ncclResult_t mendRnetKillPath(void* netComm, int p);

#endif
