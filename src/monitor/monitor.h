/*
 * The throughput monitor (issue 14, ICCL's window-based monitor): for every net connection and
 * every NIC of a communicator, message post and completion times give a sliding window of
 * MEND_MONITOR_WINDOW messages (throughput at microsecond grain, per-window latency, anomaly flags,
 * window.h); with counters of bytes and messages, failovers and fail-backs (the resilient net's),
 * plan-view epochs (the planner's), NIC states (the health registry) and op counts, it is written
 * every MEND_MONITOR_PERIOD_MS to MEND_MONITOR_FILE in Prometheus text format or as JSON lines,
 * by one thread per process (export.c).
 *
 * The net transport (transport/net.c) registers each connection once connected and calls
 * mendMonPost / mendMonDone from the proxy thread as each message is posted and completes.  With
 * the monitor off a connection has no monitor handle, and each hook costs one predictable branch.
 */
#ifndef MEND_MONITOR_MONITOR_H_
#define MEND_MONITOR_MONITOR_H_

#include <stdint.h>

#include "nccl.h"
#include "transport/net.h"

struct ncclComm;
struct mendConnector;
struct mendMonConn;

/* Is the monitor on (MEND_MONITOR, MEND_MONITOR_FILE)?  Decided once per process. */
int mendMonitorOn(void);

/* A communicator whose transport is set up (transport init; slotBytes: its FIFO slots, the largest
 * message; windows of messages below half of it are not judged) / being freed, after its proxy
 * stopped and before its connectors are freed (transport free).  The first one starts the export thread;
 * a removal writes a last snapshot that includes the communicator, and the last removal stops the
 * thread.  No-ops with the monitor off; Remove of a communicator never added is harmless. */
ncclResult_t mendMonitorCommAdd(struct ncclComm* comm, size_t slotBytes);
void mendMonitorCommRemove(struct ncclComm* comm);

/* A net connector is connected on local device dev through `net` (its comm `netComm`): *out gets
 * its monitor handle, NULL with the monitor off.  Remove before the net comm is closed. */
ncclResult_t mendMonitorConnAdd(struct ncclComm* comm, const struct mendConnector* conn, int dev,
                                const mendNet_t* net, void* netComm, struct mendMonConn** out);
void mendMonitorConnRemove(struct mendMonConn* m);

/* Proxy thread: the message of FIFO slot `slot` was handed to the Net / completed with `bytes`. */
void mendMonPost(struct mendMonConn* m, int slot);
void mendMonDone(struct mendMonConn* m, int slot, uint64_t bytes);

/* The current snapshot of every registered communicator as text (json: JSON lines, else Prometheus
 * text format); free() it.  For mend-top's tests and the unit tests. */
ncclResult_t mendMonitorSnapshot(int json, char** text, size_t* len);

#endif
