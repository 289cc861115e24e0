/*
 * The proxy: one progress thread per communicator, started when its first net connector is
 * connected.  It moves net connectors' slots to and from the Net (the per-connector work lives in
 * src/transport/net.c behind `progress`) and sleeps when nothing moves: it waits on its bell, which
 * the executor rings (connector->peerBell) after posting a send slot or freeing a receive slot,
 * with a short timeout while Net requests are in flight (the Net cannot ring a bell) and a long
 * one when idle.
 */
#ifndef MEND_PROXY_H_
#define MEND_PROXY_H_

#include "nccl.h"
#include "misc/bell.h"

struct ncclComm;

/* One unit of proxy work (embedded first in a transport's private connector state). */
struct mendProxyConn {
  /* Move what can move now without waiting.  *moved = 1 when a counter advanced; *busy = 1 while
   * Net requests are in flight.  An error stops this connector; the executor fails an operation
   * that still needs it (receives are posted ahead of need, so a peer's close is no error by itself). */
  ncclResult_t (*progress)(struct ncclComm* comm, struct mendProxyConn* pc, int* moved, int* busy);
  int failed;  /* 1 after an error: skipped from then on (owned by the proxy thread) */
  _Atomic int* error;  /* where the error goes (the connector's): an operation that needs it fails */
};

/* Hand a connected net connector to the proxy (starts the thread on first use). */
ncclResult_t mendProxyAdd(struct ncclComm* comm, struct mendProxyConn* pc);
/* The bell the executor rings for net connectors (started or not). */
ncclResult_t mendProxyBell(struct ncclComm* comm, mendBell_t** bell);
/* The executor's short path (host mode): move a net connector's slots from the calling thread (post
 * a send the executor just wrote, poll a receive it waits for) unless the proxy is moving it now or
 * MEND_NET_DIRECT is 0.  Returns 1 when nothing is left in flight on it (the proxy need not be
 * rung), 0 otherwise (not a net connector, not moved, or requests in flight: ring its bell). */
struct mendConnector;
int mendProxyKick(struct mendConnector* conn);
/* Stop and join the thread (bounded: every step is non-blocking); the proxy's memory, its bell
 * included, stays until mendProxyDestroy (the resilience service rings that bell until it stops). */
void mendProxyStop(struct ncclComm* comm);
/* Stop (if not yet) and free the proxy. */
void mendProxyDestroy(struct ncclComm* comm);

#endif
