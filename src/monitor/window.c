/*
 * Sliding-window arithmetic of the monitor (see window.h).
 */
#include "monitor/window.h"

#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "misc/utils.h"

ncclResult_t mendMonWindowInit(struct mendMonWindow* w, int size, int permille, int judge, uint64_t minBytes) {
  if (!w || size < 1 || size > MEND_MON_MAX_WINDOW || permille < 1 || permille > 1000) {
    WARN("monitor: window of %d messages, anomaly threshold %d permille (valid: 1..%d, 1..1000)", size, permille,
         MEND_MON_MAX_WINDOW);
    return ncclInvalidArgument;
  }
  memset(w, 0, sizeof(*w));
  MENDCHECK(MENDCALLOC(w->ring, (size_t)size));
  w->size = size;
  w->permille = permille;
  w->judge = judge;
  w->minBytes = minBytes;
  return ncclSuccess;
}

void mendMonWindowFree(struct mendMonWindow* w) {
  if (!w) return;
  free(w->ring);
  w->ring = NULL;
}

uint64_t mendMonMedian(const uint64_t* v, int n) {
  if (n <= 0) return 0;
  uint64_t s[MEND_MON_HISTORY];
  if (n > MEND_MON_HISTORY) n = MEND_MON_HISTORY;
  /* Insertion sort: at most 16 values, once per W messages. */
  for (int i = 0; i < n; i++) {
    uint64_t x = v[i];
    int j = i;
    for (; j > 0 && s[j - 1] > x; j--) s[j] = s[j - 1];
    s[j] = x;
  }
  return s[(n - 1) / 2];
}

/* Judge the window just computed against the median of the earlier ones, then (every W messages)
 * let it join the history. */
static void judge(struct mendMonWindow* w, uint64_t bps, uint64_t done) {
  if (w->nSmall > 0) return; /* latency-bound: neither judged nor a sample */
  if (w->judge && w->median > 0) {
    int low = (unsigned __int128)bps * 1000 < (unsigned __int128)w->median * (unsigned)w->permille;
    if (low && !w->low) {
      atomic_store_explicit(&w->anomalies, atomic_load_explicit(&w->anomalies, memory_order_relaxed) + 1,
                            memory_order_relaxed);
      atomic_store_explicit(&w->lastAnomalyNs, done, memory_order_relaxed);
    }
    if (low != w->low) atomic_store_explicit(&w->inAnomaly, low, memory_order_relaxed);
    w->low = low;
  }
  if (w->count % (uint64_t)w->size != 0) return;
  /* Windows taken every W messages do not overlap: each message counts in one history value. */
  if (w->nHist < MEND_MON_HISTORY) {
    w->hist[w->nHist++] = bps;
  } else {
    memmove(w->hist, w->hist + 1, sizeof(w->hist) - sizeof(w->hist[0]));
    w->hist[MEND_MON_HISTORY - 1] = bps;
  }
  if (w->nHist >= MEND_MON_HISTORY_MIN) {
    w->median = mendMonMedian(w->hist, w->nHist);
    atomic_store_explicit(&w->medianBps, w->median, memory_order_relaxed);
  }
}

void mendMonWindowAdd(struct mendMonWindow* w, uint64_t post, uint64_t done, uint64_t bytes) {
  if (done < post) done = post; /* one clock, read in order: only a caller's mistake gets here */
  uint64_t start = post > w->prevDone ? post : w->prevDone;
  if (start > done) start = done;
  if (done > w->prevDone) w->prevDone = done;
  struct mendMonMsg* m = w->ring + w->count % (uint64_t)w->size;
  if (w->count >= (uint64_t)w->size) {
    w->sumBytes -= m->bytes;
    w->sumLat -= m->done - m->post;
    w->sumBusy -= m->done - m->start;
    w->nSmall -= m->bytes < w->minBytes;
  }
  *m = (struct mendMonMsg){ .post = post, .start = start, .done = done, .bytes = bytes };
  w->sumBytes += bytes;
  w->sumLat += done - post;
  w->sumBusy += done - start;
  w->nSmall += bytes < w->minBytes;
  w->count++;
  /* One writer: plain load and store (no locked instruction on the proxy's path). */
  atomic_store_explicit(&w->bytes, atomic_load_explicit(&w->bytes, memory_order_relaxed) + bytes, memory_order_relaxed);
  atomic_store_explicit(&w->msgs, atomic_load_explicit(&w->msgs, memory_order_relaxed) + 1, memory_order_relaxed);
  atomic_store_explicit(&w->lastDoneNs, done, memory_order_relaxed);
  if (w->count < (uint64_t)w->size) return;
  /* Service intervals [start, done] of successive messages touch or are apart (idle): their sum is
   * the time the link was busy with the window, its first start to its last completion less gaps. */
  uint64_t span = w->sumBusy;
  if (span == 0) span = 1; /* W completions seen at one instant: bounded by the clock's grain */
  uint64_t bps = (uint64_t)((unsigned __int128)w->sumBytes * 1000000000u / span);
  atomic_store_explicit(&w->bps, bps, memory_order_relaxed);
  atomic_store_explicit(&w->latNs, w->sumLat / (uint64_t)w->size, memory_order_relaxed);
  atomic_store_explicit(&w->spanNs, span, memory_order_relaxed);
  judge(w, bps, done);
}

int mendMonWindowSlow(struct mendMonWindow* w, uint64_t post, uint64_t bytes, uint64_t now) {
  if (!w || !w->judge || bytes < w->minBytes || bytes == 0) return 0;
  /* The reference is the median of the bulk windows, as for window anomalies: one message's service
   * time varies too much (a socket buffer filling, the proxy descheduled) to be judged against the
   * last window alone. */
  uint64_t ref = atomic_load_explicit(&w->medianBps, memory_order_relaxed);
  uint64_t last = atomic_load_explicit(&w->lastDoneNs, memory_order_relaxed);
  uint64_t start = post > last ? post : last;
  if (ref == 0 || post == 0 || now <= start) return 0;
  /* elapsed > bytes / (ref x permille / 1000), in ns: no division, no overflow in 128 bits. */
  unsigned __int128 lhs = (unsigned __int128)(now - start) * ref * (unsigned)w->permille;
  unsigned __int128 rhs = (unsigned __int128)bytes * 1000000000u * 1000u;
  return lhs > rhs;
}
