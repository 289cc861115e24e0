/*
 * One-sided operations in host mode: windows (window.c), puts and signals (onesided.c), and the
 * receiver that applies them (onesided_recv.c).
 *
 * A put or a signal travels as a message on the communicator's RMA connectors (connIndex
 * MEND_CONN_RMA, channel 0, one pair per peer, connected by the first window registration): a
 * header (struct mendRmaHdr) at the start of its first slot, then the data, in that slot and the
 * following ones.  Data and signal ride the same connector in order, so p2p, shm and every Net
 * (the resilient one included: hot repair replays slots) carry them alike; the signal counts once
 * the last byte has been written into the window.  The receiver is a thread per communicator that
 * drains every RMA receive connector, checks each header against its own windows and bounds, and
 * counts signals per (peer, ctx, sigIdx); ncclWaitSignal waits on those counts.
 */
#ifndef MEND_ONESIDED_H_
#define MEND_ONESIDED_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

struct ncclComm;
struct mendConnector;

#define MEND_WIN_MAGIC 0x4d454e4457494e21ULL /* "MENDWIN!" */
#define MEND_RMA_MAGIC 0x524d4131u           /* "RMA1": first word of every message header */

/* A registered window (what ncclWindow_t points at). */
struct mendWindow {
  uint64_t magic;          /* MEND_WIN_MAGIC while registered */
  struct ncclComm* comm;   /* owner */
  void* userPtr;           /* the registered buffer */
  size_t size;             /* its bytes */
  int flags;               /* winFlags as registered */
  uint64_t seq;            /* registration number on comm: the same window on every rank */
  uint64_t* peerSize;      /* [nRanks] bytes each rank registered for this window */
  struct mendWindow* next; /* comm's list */
};

/* Message kinds. */
enum mendRmaKind {
  MEND_RMA_PUT = 1,    /* data for a window, then a signal */
  MEND_RMA_SIGNAL = 2  /* a signal alone */
};

/* The header that starts every message (first bytes of its first slot). */
struct mendRmaHdr {
  uint32_t magic;   /* MEND_RMA_MAGIC */
  uint32_t kind;    /* enum mendRmaKind */
  uint64_t seq;     /* window registration number (PUT) */
  uint64_t offset;  /* byte offset in the receiver's window (PUT) */
  uint64_t bytes;   /* data bytes following the header (PUT; 0 for SIGNAL) */
  int32_t sigIdx;   /* signal to raise at the receiver */
  int32_t ctx;      /* its context */
};

/* The receiver's state for one peer's message stream. */
struct mendRmaRecv {
  uint64_t left;    /* data bytes of the current message still to come (0: next slot starts a message) */
  uint64_t seq;     /* its window (looked up again for every slot: the window may be deregistered meanwhile) */
  uint64_t pos;     /* where its next byte goes in that window */
  int sigIdx, ctx;  /* the signal raised when left reaches 0 */
  int refused;      /* the current message was refused: its data is dropped and its signal does not count */
  int broken;       /* a header could not be parsed: everything after it from this peer is dropped */
};

/* Per-communicator one-sided state (comm->rma). */
struct mendRma {
  pthread_mutex_t lock;         /* protects windows, counters and error */
  pthread_cond_t cond;          /* broadcast when a signal arrives or the receiver stops */
  pthread_mutex_t sendLock;     /* one put at a time per communicator (messages never interleave) */
  pthread_mutex_t drainLock;    /* who drains the receive connectors now: the receiver thread or a waiter */
  struct mendWindow* wins;      /* live windows */
  void* pendingJob;             /* this group's registration job not started yet (window.c), or NULL */
  uint64_t nextSeq;             /* next registration number */
  int connected;                /* RMA connectors established */
  int nCtx, nSig;               /* contexts (config numRmaCtx) and signals per context (MEND_RMA_SIGNALS) */
  uint64_t* arrived;            /* [nRanks][nCtx][nSig] signals received */
  uint64_t* consumed;           /* [nRanks][nCtx][nSig] signals consumed by ncclWaitSignal */
  struct mendRmaRecv* recv;     /* [nRanks] */
  pthread_t thread;             /* the receiver */
  int threadRunning;            /* thread must be joined */
  _Atomic int stop;             /* ask the receiver to leave */
  int error;                    /* ncclResult_t: the first refused message (reported by ncclWaitSignal) */
};

/* The state of comm, made on first use (NULL and a WARN on failure). */
ncclResult_t mendRmaGet(struct ncclComm* comm, struct mendRma** out);
/* Connect the RMA connectors to every peer and start the receiver (collective, first window). */
ncclResult_t mendRmaConnect(struct ncclComm* comm, struct mendRma* rma);
/* Index of the signal (peer, ctx, sigIdx) in arrived/consumed. */
static inline size_t mendRmaSigIndex(const struct mendRma* rma, int peer, int ctx, int sigIdx) {
  return ((size_t)peer * (size_t)rma->nCtx + (size_t)ctx) * (size_t)rma->nSig + (size_t)sigIdx;
}
/* The live window `win` of comm, or NULL (call with rma->lock held). */
struct mendWindow* mendRmaFindWindow(struct mendRma* rma, const void* win);
/* The live window with registration number seq, or NULL (rma->lock held). */
struct mendWindow* mendRmaFindSeq(struct mendRma* rma, uint64_t seq);
/* Receiver thread body (onesided_recv.c). */
void* mendRmaRecvThread(void* arg);
/* Drain every one-sided receive connector once, unless another thread is at it; 1 when a slot moved.
 * ncclWaitSignal calls it too, so a signal is taken up by the thread that waits for it. */
int mendRmaDrainAll(struct ncclComm* comm);
/* Record the first refused message (rma->lock held). */
void mendRmaSetError(struct mendRma* rma, ncclResult_t res);
/* Stop the receiver and free every window and the state (communicator teardown). */
void mendRmaStop(struct ncclComm* comm);
/* Bytes of memory the one-sided state holds outside the connectors (MemStats). */
uint64_t mendRmaBytes(struct ncclComm* comm);

#endif
