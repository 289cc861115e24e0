/*
 * Bootstrap: the out-of-band TCP network between the ranks of a communicator.
 * ncclGetUniqueId starts a root listener (or, with NCCL_COMM_ID, names one that rank 0 starts);
 * every rank connects to the root, the root hands out everyone's listen address, and from then on
 * ranks exchange tagged, ordered point-to-point messages directly.  It also carries resilience
 * signals (failure notices, rollback agreement, health broadcasts).
 * Every call returns when the communicator's abort flag is set or its time bound passes.
 */
#ifndef MEND_BOOTSTRAP_H_
#define MEND_BOOTSTRAP_H_

#include <stddef.h>
#include <stdint.h>
#include "nccl.h"

struct ncclComm;
struct mendBootstrap;

/* Fill *id; starts the root listener unless NCCL_COMM_ID is set. */
ncclResult_t mendBootstrapGetUniqueId(ncclUniqueId* id);
/* Connect `comm` (rank, nRanks, abortFlag set) to its peers through the root(s) of `ids`
 * (nIds > 1: ncclCommInitRankScalable, ranks spread over roots).  Sets comm->bootstrap. */
ncclResult_t mendBootstrapInit(struct ncclComm* comm, int nIds, const ncclUniqueId* ids);
/* Build the bootstrap of a child communicator (split/shrink) from the parent's, without a unique id.
 * `parentRanks[i]` is the parent rank of child rank i; every child rank calls it. */
ncclResult_t mendBootstrapSplit(struct ncclComm* parent, struct ncclComm* child, const int* parentRanks);

/* Tagged, ordered messages: a send never waits for the matching recv (messages are buffered). */
ncclResult_t mendBootstrapSend(struct mendBootstrap* bs, int peer, int tag, const void* data, size_t size);
ncclResult_t mendBootstrapRecv(struct mendBootstrap* bs, int peer, int tag, void* data, size_t size);
/* allData holds nRanks blocks of `size` bytes; block `rank` is ours on entry, all blocks on return. */
ncclResult_t mendBootstrapAllGather(struct mendBootstrap* bs, void* allData, size_t size);
ncclResult_t mendBootstrapBarrier(struct mendBootstrap* bs, int tag);
/* Receive from any peer with this tag (resilience signals); *peer gets the sender.  timeoutMs < 0 waits
 * until abort; returns ncclInProgress when nothing arrived within timeoutMs. */
ncclResult_t mendBootstrapRecvAny(struct mendBootstrap* bs, int tag, int* peer, void* data, size_t size,
                                  int64_t timeoutMs);
/* Called on the bootstrap's receiver thread, once per peer, when the peer's link ends: lost = 1 when
 * it broke (the process died or aborted), 0 when the peer closed its communicator in order.  Set
 * with fn NULL to stop the calls; that returns only after a call in progress finished. */
typedef void (*mendBsPeerGoneFn)(void* arg, int peer, int lost);
void mendBootstrapSetPeerGone(struct mendBootstrap* bs, mendBsPeerGoneFn fn, void* arg);
/* Stop every wait (abort) and free.  Never blocks on peers. */
ncclResult_t mendBootstrapAbort(struct mendBootstrap* bs);
/* Orderly close: a short handshake so no peer sees "connection closed" mid-read. */
ncclResult_t mendBootstrapClose(struct mendBootstrap* bs);

#endif
