/*
 * The monitor's registry and hooks (see monitor.h): parameters, communicators and their net
 * connectors, the proxy's post/completion hooks, and starting and stopping the export thread.
 *
 * Threads: the hooks run on a communicator's proxy thread, the only writer of its connectors'
 * windows and of its NIC windows, and take no lock.  Registration (connect, free, init, destroy)
 * and snapshots take mendMon.lock.  Lock order: threadLock -> writeLock -> lock -> a resilient
 * connection's lock (its counters are read under lock).
 */
#include "monitor/monitor_priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap_ras.h"
#include "checks.h"
#include "comm.h"
#include "graph/graph.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "resilience/rnet.h"
#include "transport/transport.h"

struct mendMonitor mendMon = {
  .lock = PTHREAD_MUTEX_INITIALIZER,
  .writeLock = PTHREAD_MUTEX_INITIALIZER,
  .threadLock = PTHREAD_MUTEX_INITIALIZER,
};

static pthread_once_t monOnce = PTHREAD_ONCE_INIT;
static int monOn;

/* MEND_MONITOR_FILE with %h (host), %p (pid) and %% expanded; 0 (WARN) on anything else. */
static int expandPath(const char* spec, char* out, size_t len) {
  char host[256];
  mendHostName(host, sizeof(host));
  size_t o = 0;
  for (const char* p = spec; *p; p++) {
    char buf[300];
    const char* piece = buf;
    if (p[0] != '%') {
      buf[0] = p[0];
      buf[1] = '\0';
    } else if (p[1] == 'h') {
      piece = host;
      p++;
    } else if (p[1] == 'p') {
      snprintf(buf, sizeof(buf), "%d", (int)getpid());
      p++;
    } else if (p[1] == '%') {
      snprintf(buf, sizeof(buf), "%%");
      p++;
    } else {
      WARN("MEND_MONITOR_FILE=%s: '%%%c' is not %%h (host), %%p (pid) or %%%%; no snapshots are written", spec,
           p[1] ? p[1] : ' ');
      return 0;
    }
    size_t n = strlen(piece);
    if (o + n >= len) {
      WARN("MEND_MONITOR_FILE=%s: the path is longer than %zu bytes; no snapshots are written", spec, len - 1);
      return 0;
    }
    memcpy(out + o, piece, n);
    o += n;
  }
  out[o] = '\0';
  return o > 0;
}

/* MEND_MONITOR_ANOMALY: a fraction in (0, 1], kept in 1/1000. */
static int anomalyPermille(void) {
  const char* s = mendParamMonitorAnomaly();
  if (!s) return 500;
  char* end = NULL;
  errno = 0;
  double f = strtod(s, &end);
  while (end && (*end == ' ' || *end == '\t')) end++;
  if (errno || end == s || (end && *end) || !(f > 0.0 && f <= 1.0) || (int)(f * 1000 + 0.5) < 1) {
    WARN("MEND_MONITOR_ANOMALY=%s is not a fraction in [0.001, 1]; using 0.5", s);
    return 500;
  }
  return (int)(f * 1000 + 0.5);
}

static void monInit(void) {
  /* The thread's period is measured on the monotonic clock (a wall-clock step does not stall it). */
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&mendMon.cond, &attr);
  pthread_condattr_destroy(&attr);
  const char* file = mendParamMonitorFile();
  int64_t on = mendParamMonitor();
  if (on != 0 && on != 1 && on != -2) {
    WARN("MEND_MONITOR=%lld is not 0, 1 or -2 (auto); using -2", (long long)on);
    on = -2;
  }
  monOn = on == 1 || (on == -2 && file != NULL);
  int64_t w = mendParamMonitorWindow();
  if (w < 1 || w > MEND_MON_MAX_WINDOW) {
    WARN("MEND_MONITOR_WINDOW=%lld is outside 1..%d messages; using 8", (long long)w, MEND_MON_MAX_WINDOW);
    w = 8;
  }
  mendMon.window = (int)w;
  mendMon.permille = anomalyPermille();
  int64_t period = mendParamMonitorPeriodMs();
  if (period < 10 || period > 3600000) {
    WARN("MEND_MONITOR_PERIOD_MS=%lld is outside 10..3600000 ms; using 1000", (long long)period);
    period = 1000;
  }
  mendMon.periodMs = period;
  mendMon.path[0] = '\0';
  if (monOn && file && !expandPath(file, mendMon.path, sizeof(mendMon.path))) mendMon.path[0] = '\0';
  size_t n = strlen(mendMon.path);
  const char* fmt = mendParamMonitorFormat();
  if (fmt && strcasecmp(fmt, "json") == 0) mendMon.json = 1;
  else if (fmt && strcasecmp(fmt, "prom") == 0) mendMon.json = 0;
  else {
    if (fmt) WARN("MEND_MONITOR_FORMAT=%s is not prom or json; choosing by the file name", fmt);
    mendMon.json = n > 6 && strcmp(mendMon.path + n - 6, ".jsonl") == 0;
  }
  if (monOn)
    INFO(NCCL_INIT, "Monitor on: window %d messages, anomaly below %d permille of the median; snapshots: %s every %lld ms",
         mendMon.window, mendMon.permille, mendMon.path[0] ? mendMon.path : "none", (long long)mendMon.periodMs);
}

int mendMonitorOn(void) {
  pthread_once(&monOnce, monInit);
  return monOn;
}

static struct mendMonComm* findComm(struct ncclComm* comm) {
  for (struct mendMonComm* mc = mendMon.comms; mc; mc = mc->next)
    if (mc->comm == comm) return mc;
  return NULL;
}

static void freeComm(struct mendMonComm* mc) {
  if (!mc) return;
  for (int i = 0; mc->nic && i < 2 * mc->nNics; i++) mendMonWindowFree(mc->nic + i);
  free(mc->nic);
  free(mc);
}

ncclResult_t mendMonitorCommAdd(struct ncclComm* comm, size_t slotBytes) {
  MENDCHECK(mendRasCommAdd(comm)); /* who is late: the query service (bootstrap_ras.h) */
  if (!mendMonitorOn() || !comm) return ncclSuccess;
  struct mendMonComm* mc;
  ncclResult_t res = ncclSuccess;
  MENDCHECK(MENDCALLOC(mc, 1));
  mc->comm = comm;
  mc->commHash = comm->commHash;
  mc->rank = comm->rank;
  mc->nRanks = comm->nRanks;
  mc->nNics = comm->topo ? comm->topo->nNics : 0;
  if (mc->nNics > 0) {
    MENDCHECKGOTO(MENDCALLOC(mc->nic, (size_t)(2 * mc->nNics)), res, fail);
    for (int i = 0; i < 2 * mc->nNics; i++) {
      /* Sends are judged; receives are posted before their data exists (window.h). */
      MENDCHECKGOTO(mendMonWindowInit(mc->nic + i, mendMon.window, mendMon.permille, i % 2 == MEND_SEND, slotBytes / 2),
                    res, fail);
    }
  }
  pthread_mutex_lock(&mendMon.threadLock);
  pthread_mutex_lock(&mendMon.lock);
  mc->next = mendMon.comms;
  mendMon.comms = mc;
  mendMon.nComms++;
  pthread_mutex_unlock(&mendMon.lock);
  if (mendMon.path[0] && !mendMon.running) {
    mendMon.stop = 0;
    int err = pthread_create(&mendMon.thread, NULL, mendMonThreadMain, NULL);
    if (err) WARN("monitor: cannot start the snapshot thread: %s; snapshots only at destroy", strerror(err));
    else mendMon.running = 1;
  }
  pthread_mutex_unlock(&mendMon.threadLock);
  return ncclSuccess;
fail:
  freeComm(mc);
  return res;
}

void mendMonitorCommRemove(struct ncclComm* comm) {
  mendRasCommRemove(comm);
  if (!comm || !mendMonitorOn()) return;
  pthread_mutex_lock(&mendMon.threadLock);
  pthread_mutex_lock(&mendMon.writeLock);
  pthread_mutex_lock(&mendMon.lock);
  struct mendMonComm* mc = findComm(comm);
  char* text = NULL;
  size_t len = 0;
  int last = 0;
  if (mc) {
    /* The last snapshot with it: what a job moved is on file after it ends. */
    if (mendMon.path[0] && mendMonBuild(mendMon.json, &text, &len) != ncclSuccess) text = NULL;
    struct mendMonComm** pp = &mendMon.comms;
    while (*pp != mc) pp = &(*pp)->next;
    *pp = mc->next;
    for (struct mendMonConn* m = mc->conns; m; m = m->next) m->mc = NULL;
    last = --mendMon.nComms == 0;
    if (last) {
      mendMon.stop = 1;
      pthread_cond_broadcast(&mendMon.cond);
    }
  }
  pthread_mutex_unlock(&mendMon.lock);
  if (text) (void)mendMonWrite(text, len);
  pthread_mutex_unlock(&mendMon.writeLock);
  free(text);
  freeComm(mc);
  if (last && mendMon.running) {
    pthread_join(mendMon.thread, NULL);
    mendMon.running = 0;
  }
  pthread_mutex_unlock(&mendMon.threadLock);
}

ncclResult_t mendMonitorConnAdd(struct ncclComm* comm, const struct mendConnector* conn, int dev,
                                const mendNet_t* net, void* netComm, struct mendMonConn** out) {
  if (!out) {
    WARN("monitor: connection registered with no place for its handle");
    return ncclInvalidArgument;
  }
  *out = NULL;
  if (!mendMonitorOn() || !comm || !conn) return ncclSuccess;
  struct mendMonConn* m;
  MENDCHECK(MENDCALLOC(m, 1));
  ncclResult_t res =
      mendMonWindowInit(&m->win, mendMon.window, mendMon.permille, conn->dir == MEND_SEND, conn->slotBytes / 2);
  if (res != ncclSuccess) {
    free(m);
    return res;
  }
  m->channel = conn->channel;
  m->peer = conn->peer;
  m->dir = conn->dir;
  m->connIndex = conn->connIndex;
  m->dev = dev;
  m->activeDev = dev;
  atomic_store(&m->curDev, dev);
  m->net = net;
  m->netComm = netComm;
  /* A send's size is known at its post (the live judgement of the window needs it, export.c). */
  m->fifoBytes = conn->dir == MEND_SEND && conn->fifo ? (const uint64_t*)conn->fifo->bytes : NULL;
  pthread_mutex_lock(&mendMon.lock);
  struct mendMonComm* mc = findComm(comm);
  if (mc) {
    m->mc = mc;
    m->next = mc->conns;
    mc->conns = m;
  }
  pthread_mutex_unlock(&mendMon.lock);
  if (!mc) { /* a communicator the monitor does not know (created before it was on): not watched */
    mendMonWindowFree(&m->win);
    free(m);
    return ncclSuccess;
  }
  *out = m;
  return ncclSuccess;
}

void mendMonConnRefresh(struct mendMonConn* m) {
  if (m->net != &mendNetResilient || !m->netComm) return;
  struct mendRnetStats st;
  if (mendRnetGetStats(m->netComm, &st) != ncclSuccess) return;
  m->failovers = st.failovers;
  m->failbacks = st.failbacks;
  m->activeDev = st.active >= 0 && st.active < MEND_RNET_MAX_SLOTS ? st.localDev[st.active] : -1;
  /* Later completions count on the NIC that carries them now. */
  if (m->activeDev >= 0) atomic_store_explicit(&m->curDev, m->activeDev, memory_order_relaxed);
}

void mendMonitorConnRemove(struct mendMonConn* m) {
  if (!m) return;
  pthread_mutex_lock(&mendMon.lock);
  struct mendMonComm* mc = m->mc;
  if (mc) {
    mendMonConnRefresh(m);
    mc->goneFailovers += m->failovers;
    mc->goneFailbacks += m->failbacks;
    struct mendMonConn** pp = &mc->conns;
    while (*pp && *pp != m) pp = &(*pp)->next;
    if (*pp) *pp = m->next;
  }
  pthread_mutex_unlock(&mendMon.lock);
  mendMonWindowFree(&m->win);
  free(m);
}

void mendMonPost(struct mendMonConn* m, int slot) {
  int s = slot % MEND_FIFO_SLOTS;
  if (m->fifoBytes) atomic_store_explicit(&m->postBytes[s], m->fifoBytes[s], memory_order_relaxed);
  atomic_store_explicit(&m->post[s], mendTimeNs(), memory_order_relaxed);
  atomic_store_explicit(&m->posted, atomic_load_explicit(&m->posted, memory_order_relaxed) + 1, memory_order_relaxed);
}

void mendMonDone(struct mendMonConn* m, int slot, uint64_t bytes) {
  /* Completions the proxy finds within one microsecond of each other (one poll) completed somewhere
   * before that poll: they share its time, so a window of them spans the poll interval, not the few
   * nanoseconds between two clock reads.  This is the monitor's grain. */
  uint64_t now = mendTimeNs();
  if (now - m->lastNow < MEND_MON_GRAIN_NS) now = m->lastNow;
  else m->lastNow = now;
  uint64_t post = atomic_load_explicit(&m->post[slot % MEND_FIFO_SLOTS], memory_order_relaxed);
  mendMonWindowAdd(&m->win, post, now, bytes);
  struct mendMonComm* mc = m->mc;
  int d = atomic_load_explicit(&m->curDev, memory_order_relaxed);
  if (mc && d >= 0 && d < mc->nNics) mendMonWindowAdd(mc->nic + 2 * d + (m->dir == MEND_RECV), post, now, bytes);
}

ncclResult_t mendMonitorSnapshot(int json, char** text, size_t* len) {
  if (!text || !len) {
    WARN("mendMonitorSnapshot: NULL argument");
    return ncclInvalidArgument;
  }
  (void)mendMonitorOn(); /* parameters read */
  pthread_mutex_lock(&mendMon.lock);
  ncclResult_t res = mendMonBuild(json, text, len);
  pthread_mutex_unlock(&mendMon.lock);
  return res;
}
