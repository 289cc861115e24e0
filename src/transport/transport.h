/*
 * Connections.  Each (channel, peer, direction, connIndex) has a connector: a FIFO of slots with
 * head/tail counters.  The executor (host engine or CUDA kernel) only ever sees this FIFO; the
 * transport behind it decides where the slots live and who moves them:
 *   p2p : ranks of one process; the FIFO and slots are in the receiver's memory.
 *   shm : ranks of one host, different processes; FIFO and slots in a shared-memory segment.
 *   net : ranks on different hosts; each side has a local FIFO and the proxy thread moves slots
 *         through the Net (socket, or the resilient net stacked over several NICs).
 *
 * Protocol (the only contract between executor and transport):
 *   producer: slot s = tail % nSlots is free when tail - head < nSlots.  Write data into
 *             buff + s * slotBytes, set bytes[s], then tail += 1 (release) and ring peerBell.
 *   consumer: slot s = head % nSlots is full when tail > head (acquire).  Read bytes[s] bytes,
 *             then head += 1 (release) and ring peerBell.
 *   latency lines (fifo.h; host engine, p2p and shm): a slot of at most MEND_FIFO_LINE_BYTES is
 *             first written to line[s] with seq = tail + 1, then to the slot as above; a consumer
 *             that finds line[s].seq == head + 1 may take it from there before it sees tail move.
 *   direct slots (fifo.h; host engine, p2p and shm): bytes[s] with MEND_FIFO_DIRECT set means the
 *             slot holds the data's address in the producer, for the consumer to copy from there
 *             (only after the consumer set directOk = 1); the producer keeps the data until head
 *             passes s.
 * A slot's ready notification (tail) reaches the consumer exactly once and in order, even when
 * the net layer replays data after a failure.
 */
#ifndef MEND_TRANSPORT_TRANSPORT_H_
#define MEND_TRANSPORT_TRANSPORT_H_

#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "misc/bell.h"
#include "transport/fifo.h"

#define MEND_CONN_COLL 0         /* connIndex of collective connectors */
#define MEND_CONN_P2P 1          /* connIndex of send/recv connectors (never shared with collectives) */
#define MEND_CONN_RMA 2          /* connIndex of one-sided puts and signals (onesided.c; the engine never uses it) */
#define MEND_NCONN_ENGINE 2      /* connIndexes the executors use: [0, MEND_NCONN_ENGINE) */
#define MEND_NCONN_INDEX 3
/* Bootstrap tags of the transport layer: [MEND_TAG_TRANSPORT, MEND_TAG_TRANSPORT + 16).
 *   +0 init barrier (bell pages mapped), +1 info about the sender's SEND connectors, +2 about its RECV ones. */
#define MEND_TAG_TRANSPORT 0x54520000

enum mendConnDir { MEND_SEND = 0, MEND_RECV = 1 };
enum mendTransportKind {
  MEND_TRANSPORT_P2P = 0,  /* same process */
  MEND_TRANSPORT_SHM = 1,  /* same host */
  MEND_TRANSPORT_NET = 2   /* other host, through the proxy */
};

struct mendConnector {
  int peer;                 /* remote rank */
  int channel;              /* channel index */
  int dir;                  /* enum mendConnDir: which end of the FIFO we are */
  int connIndex;            /* MEND_CONN_COLL or MEND_CONN_P2P */
  int netDev;               /* net: the NIC the connection starts on, from its request */
  int kind;                 /* enum mendTransportKind */
  int connected;            /* 1 once usable */
  struct mendFifo* fifo;    /* head/tail this end reads and writes */
  char* buff;               /* slot memory: slot i at buff + i * slotBytes */
  size_t slotBytes;         /* bytes per slot (NCCL_BUFFSIZE / MEND_FIFO_SLOTS) */
  int nSlots;               /* MEND_FIFO_SLOTS */
  mendBell_t* peerBell;     /* ring after moving tail (producer) or head (consumer) */
  struct mendFifo* devFifo; /* device mode: the FIFO as the CUDA kernel addresses it (NULL otherwise) */
  char* devBuff;            /* device mode: the slot memory as the kernel addresses it */
  void* priv;               /* transport-private state */
  _Atomic int error;        /* ncclResult_t: the transport lost this connector (net: no path left, peer
                             * gone); 0 while healthy.  An operation stuck on it fails. */
};

/* A connection request; both ends list matching requests in the same order
 * (my SEND to P on channel c, connIndex k  <->  P's RECV from me on channel c, connIndex k). */
struct mendConnReq {
  int peer;       /* remote rank */
  int channel;    /* channel index */
  int dir;        /* enum mendConnDir */
  int connIndex;  /* MEND_CONN_COLL or MEND_CONN_P2P */
  int netDev;     /* net: the NIC to start on, decided by the planner from its plan view (the receiver's
                   * choice wins: it travels in the listen handle); -1: the channel's NIC */
};

struct ncclComm;

/* At init, after the bootstrap and peer info: topology, bells, per-peer transport choice, proxy.
 * Also fills comm->nChannels and each channel's ring, tree and netDev. */
ncclResult_t mendTransportInit(struct ncclComm* comm);
/* Establish every connector in reqs that is not connected yet.  Blocks (bounded, abort-aware) until
 * the peers made the matching calls; each comm must run it in its own thread when one thread drives
 * several comms. */
ncclResult_t mendTransportConnect(struct ncclComm* comm, int nReqs, const struct mendConnReq* reqs);
/* The connector, or NULL when not connected yet. */
struct mendConnector* mendTransportGetConn(struct ncclComm* comm, int channel, int peer, int dir, int connIndex);
/* Which transport reaches `peer` (for the planner's cost model). */
int mendTransportKindOf(struct ncclComm* comm, int peer);
/* Wait until every net send connector's slots were delivered (the Net completed them), a connector
 * failed, or timeoutMs passed: operations complete once their data is in the FIFO, so finalize and
 * destroy call this before the proxy stops.  ncclSuccess when drained; the error otherwise. */
ncclResult_t mendTransportDrain(struct ncclComm* comm, int64_t timeoutMs);
/* Stop the proxy and release every connector.  With abort set, never waits for peers. */
ncclResult_t mendTransportFree(struct ncclComm* comm);
/* Bytes this rank moved through its Net device `dev` (every net connector of comm), for the monitor. */
ncclResult_t mendTransportNicBytes(struct ncclComm* comm, int dev, uint64_t* tx, uint64_t* rx);
/* Bytes moved by one connector (net: through the Net; p2p/shm: counted by the executor, 0 here). */
uint64_t mendTransportConnBytes(const struct mendConnector* conn);

/* Ranks of one host sharing a CPU (spread.c).  Publish the CPU this thread runs on in comm's bell page. */
void mendSpreadPublish(struct ncclComm* comm);
/* After a yield another thread's run made long: when a lower rank of this host published this CPU and
 * the thread's mask has a CPU no rank published, move there (mask restored after).  1 when it moved. */
int mendSpreadCheck(struct ncclComm* comm);
/* The choice itself: the CPU to move to, or -1 to stay.  The peers' published CPUs and ranks. */
int mendSpreadChoose(int myCpu, int myRank, const cpu_set_t* mask, const int* peerCpu, const int* peerRank,
                     int nPeers);

#endif
