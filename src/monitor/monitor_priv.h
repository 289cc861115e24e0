/*
 * Private to the monitor (monitor.c: registry and hooks; export.c: snapshots and their thread).
 */
#ifndef MEND_MONITOR_MONITOR_PRIV_H_
#define MEND_MONITOR_MONITOR_PRIV_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "monitor/monitor.h"
#include "monitor/window.h"
#include "transport/fifo.h"

#define MEND_MON_GRAIN_NS 1000 /* completions seen this close together share one time */

struct mendMonComm;

/* One net connector (one direction of a net connection). */
struct mendMonConn {
  struct mendMonComm* mc;              /* its communicator's entry; NULL once that was removed */
  int channel;                         /* channel index */
  int peer;                            /* remote rank */
  int dir;                             /* enum mendConnDir */
  int connIndex;                       /* MEND_CONN_COLL or MEND_CONN_P2P */
  int dev;                             /* local NIC it started on */
  _Atomic int curDev;                  /* local NIC carrying it now (the resilient net's active path, as
                                          the last snapshot saw it; dev otherwise) */
  const mendNet_t* net;                /* its Net (the resilient one has failover counters) */
  void* netComm;                       /* its send or recv comm */
  _Atomic uint64_t post[MEND_FIFO_SLOTS]; /* post time of the message in each slot */
  _Atomic uint64_t posted;             /* messages handed to the Net */
  const uint64_t* fifoBytes;           /* sends: the FIFO's size of each slot (read at post); NULL for receives */
  _Atomic uint64_t postBytes[MEND_FIFO_SLOTS]; /* sends: size of the message posted in each slot */
  uint64_t lastNow;                    /* proxy thread: the completion time last read (mendMonDone) */
  uint64_t failovers, failbacks;       /* the resilient net's counters, as last read (under monLock) */
  int activeDev;                       /* active path's device as last read (-1: none left) */
  struct mendMonWindow win;            /* its window and counters */
  struct mendMonConn* next;            /* the communicator's list */
};

/* One communicator. */
struct mendMonComm {
  struct ncclComm* comm;               /* the communicator (alive while registered) */
  uint64_t commHash;                   /* its id in labels */
  int rank, nRanks;                    /* ours, and the communicator's size */
  int nNics;                           /* local NICs (windows below) */
  struct mendMonWindow* nic;           /* [nNics * 2]: NIC d's sends at 2d, receives at 2d + 1 */
  struct mendMonConn* conns;           /* its net connectors */
  uint64_t goneFailovers;              /* counters of connectors already removed */
  uint64_t goneFailbacks;
  struct mendMonComm* next;            /* the process's list */
};

/* The process's monitor. */
struct mendMonitor {
  pthread_mutex_t lock;                /* comms, their conns lists, conn counters read by snapshots */
  struct mendMonComm* comms;           /* registered communicators */
  int nComms;
  int window, permille;                /* MEND_MONITOR_WINDOW, MEND_MONITOR_ANOMALY in 1/1000 */
  int64_t periodMs;                    /* MEND_MONITOR_PERIOD_MS */
  char path[4096];                     /* MEND_MONITOR_FILE expanded ("": no snapshots) */
  int json;                            /* snapshots as JSON lines */
  pthread_mutex_t writeLock;           /* one snapshot file write at a time (taken before lock) */
  pthread_mutex_t threadLock;          /* starting and stopping the thread (taken before the others) */
  pthread_cond_t cond;                 /* wakes the thread to stop */
  int stop;                            /* under lock: the thread must leave */
  int running;                         /* under threadLock: the thread was started */
  pthread_t thread;                    /* the export thread */
  uint64_t writes;                     /* snapshots written (under writeLock) */
};

extern struct mendMonitor mendMon;

/* Read the resilient net's counters and active device of m (under mendMon.lock). */
void mendMonConnRefresh(struct mendMonConn* m);
/* export.c: build the snapshot (caller holds mendMon.lock) / write it to mendMon.path atomically. */
ncclResult_t mendMonBuild(int json, char** text, size_t* len);
ncclResult_t mendMonWrite(const char* text, size_t len);
/* export.c: the thread's loop. */
void* mendMonThreadMain(void* arg);

#endif
