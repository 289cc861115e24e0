/*
 * The monitor's sliding window (ICCL's per-window estimate): the last W messages of a connection or
 * NIC, each with its post and completion time (CLOCK_MONOTONIC, ns) and size, give
 *   throughput = bytes of the W messages / busy time of the W messages
 *   latency    = mean of (completion - post) over the W messages.
 * A message's service starts at its post time, or at the previous completion when that is later (it
 * waited behind it), and ends at its completion; the busy time is the sum of these intervals.  With
 * messages queued back to back the intervals touch, and the busy time is ICCL's t2 - t1 (last
 * completion - first start); time with nothing posted (an idle connection between operations) falls
 * between intervals and is not counted as slowness, while a stall with messages in flight is.
 * Windows slide by one message.  Every W messages the current value joins a history of the last
 * MEND_MON_HISTORY values; a window below `permille`/1000 of the history's median is an anomaly
 * (counted once per episode: the count grows when a window falls below, not again until one is back
 * above).  Only windows of bulk messages (each at least minBytes) are judged and kept in the
 * history: a window of small messages measures latency, and a job that alternates sizes would
 * otherwise flag every small one.  Pure arithmetic, no clock read, no lock: one writer (the comm's proxy thread) feeds it;
 * other threads read only the published atomics.
 */
#ifndef MEND_MONITOR_WINDOW_H_
#define MEND_MONITOR_WINDOW_H_

#include <stdatomic.h>
#include <stdint.h>

#include "nccl.h"

#define MEND_MON_MAX_WINDOW 256  /* largest MEND_MONITOR_WINDOW */
#define MEND_MON_HISTORY 16      /* window values the median is taken over */
#define MEND_MON_HISTORY_MIN 4   /* values needed before anomalies are judged */

/* One message in the window. */
struct mendMonMsg {
  uint64_t post;   /* when it was handed to the Net */
  uint64_t start;  /* max(post, previous completion): when the link started on it */
  uint64_t done;   /* when its completion was seen */
  uint64_t bytes;  /* its size */
};

struct mendMonWindow {
  /* Writer's state (the feeding thread only). */
  int size;                          /* W: messages per window */
  int judge;                         /* 1: anomalies are judged (see mendMonWindowInit) */
  int permille;                      /* anomaly threshold, share of the median in 1/1000 */
  uint64_t minBytes;                 /* a window with a message smaller than this is not judged and
                                        not in the history (latency-bound, not a throughput sample) */
  int nSmall;                        /* messages in the window smaller than minBytes */
  uint64_t count;                    /* messages fed */
  uint64_t prevDone;                 /* completion time of the last message fed */
  uint64_t sumBytes;                 /* bytes of the messages in the window */
  uint64_t sumLat;                   /* sum of (done - post) over them */
  uint64_t sumBusy;                  /* sum of (done - start) over them: the window's busy time */
  struct mendMonMsg* ring;           /* [size]: message i at ring[i % size] */
  uint64_t hist[MEND_MON_HISTORY];   /* window values, one per W messages, oldest overwritten */
  int nHist;                         /* values in hist */
  uint64_t median;                   /* median of hist (0 until MEND_MON_HISTORY_MIN values) */
  int low;                           /* the last window was an anomaly */
  /* Published (relaxed atomics, read by the exporter). */
  _Atomic uint64_t bytes;            /* bytes completed */
  _Atomic uint64_t msgs;             /* messages completed */
  _Atomic uint64_t bps;              /* last window's throughput, bytes/s (0 until W messages) */
  _Atomic uint64_t latNs;            /* last window's mean latency */
  _Atomic uint64_t spanNs;           /* last window's busy time */
  _Atomic uint64_t medianBps;        /* median of the history (0 until it has enough values) */
  _Atomic uint64_t anomalies;        /* anomaly episodes */
  _Atomic int inAnomaly;             /* 1 while the last window is an anomaly */
  _Atomic uint64_t lastAnomalyNs;    /* completion time that started the last episode (0: none) */
  _Atomic uint64_t lastDoneNs;       /* completion time of the last message (0: none) */
};

/* size 1..MEND_MON_MAX_WINDOW, permille 1..1000; judge 0 for windows whose idle time cannot be told
 * from slowness (receives: a receive is posted before the data exists); minBytes: see above. */
ncclResult_t mendMonWindowInit(struct mendMonWindow* w, int size, int permille, int judge, uint64_t minBytes);
void mendMonWindowFree(struct mendMonWindow* w);
/* One completed message (times in ns, done >= post). */
void mendMonWindowAdd(struct mendMonWindow* w, uint64_t post, uint64_t done, uint64_t bytes);
/* Judging a send window live (the export thread, at each snapshot; reads only w's published values
 * and its fixed settings): the oldest in-flight message of `bytes`, posted at `post`, has been in
 * service since the later of its post and w's last completion (time before that was idle or spent
 * behind the previous message).  Once that service time exceeds what `bytes` take at permille/1000
 * of the history's median, the message's own rate is below the anomaly threshold whenever it
 * completes: returns 1.  Returns 0 for receive windows (not judged), messages smaller than minBytes,
 * a window with no median yet, and `now` not after the start. */
int mendMonWindowSlow(struct mendMonWindow* w, uint64_t post, uint64_t bytes, uint64_t now);
/* Median of n values (the lower middle one when n is even); 0 when n is 0.  Sorts a copy. */
uint64_t mendMonMedian(const uint64_t* v, int n);

#endif
