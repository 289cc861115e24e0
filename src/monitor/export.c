/*
 * Monitor snapshots (see monitor.h): every registered communicator's counters gathered into rows
 * (labels + values) under mendMon.lock, then written as Prometheus text exposition format (one
 * HELP and TYPE line per metric family, its samples together) or as JSON lines (one object per
 * row), to a temporary file renamed over MEND_MONITOR_FILE, so a reader never sees half a file.
 * The export thread writes one every MEND_MONITOR_PERIOD_MS; it touches the data path only through
 * relaxed atomic loads (and a resilient connection's lock, for its failover counters).
 */
#include "monitor/monitor_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap_ras.h"
#include "checks.h"
#include "comm.h"
#include "enqueue/planview.h"
#include "graph/graph.h"
#include "misc/utils.h"
#include "resilience/resil_priv.h" /* the health registry, read under its own lock */
#include "transport/transport.h"

enum monKind { ROW_PROC = 0, ROW_COMM, ROW_NIC, ROW_CONN, ROW_HEALTH, ROW_LINK, ROW_NKINDS };
static const char* kindName[ROW_NKINDS] = { "process", "comm", "nic", "conn", "health", "link" };

#define MON_MAX_LABELS 8
#define MON_MAX_VALUES 16

struct monRow {
  int kind;                              /* enum monKind */
  int nLabels;
  const char* key[MON_MAX_LABELS];       /* label names */
  char val[MON_MAX_LABELS][80];          /* label values */
  double v[MON_MAX_VALUES];              /* values, in the order of the kind's families */
};

struct monFamily {
  int kind;            /* rows it is taken from */
  int index;           /* value index in those rows */
  const char* name;    /* metric name */
  const char* type;    /* counter or gauge */
  const char* help;    /* one line */
};

/* Values of a window, in this order, at the start of NIC and connection rows. */
enum { W_BYTES = 0, W_MSGS, W_BPS, W_LAT, W_SPAN, W_MEDIAN, W_ANOM, W_INANOM, W_IDLE, W_SLOW, W_NVALUES };
enum { C_INFLIGHT = W_NVALUES, C_STALLED, C_FAILOVERS, C_FAILBACKS, C_ACTIVE };
enum { M_RANKS = 0, M_OPS, M_EPOCH, M_PENDING, M_FAILOVERS, M_FAILBACKS, M_CONNS, M_HEPOCH };

#define WINDOW_FAMILIES(K, P, WHAT)                                                                                   \
  { K, W_BYTES, P "_bytes_total", "counter", "Bytes " WHAT " moved (completed messages)" },                          \
  { K, W_MSGS, P "_messages_total", "counter", "Messages " WHAT " completed" },                                       \
  { K, W_BPS, P "_throughput_bytes_per_second", "gauge", "Throughput of " WHAT "'s last window of W messages (0 until W completed)" }, \
  { K, W_LAT, P "_window_latency_seconds", "gauge", "Mean post-to-completion time of the messages of " WHAT "'s last window" }, \
  { K, W_SPAN, P "_window_seconds", "gauge", "Busy time of " WHAT "'s last window (its messages' service times, idle gaps left out)" }, \
  { K, W_MEDIAN, P "_median_throughput_bytes_per_second", "gauge", "Median of " WHAT "'s recent window throughputs (one per W messages; 0 until 4)" }, \
  { K, W_ANOM, P "_anomalies_total", "counter", "Times a window of " WHAT " fell below MEND_MONITOR_ANOMALY of the median (sends only)" }, \
  { K, W_INANOM, P "_anomaly", "gauge", "1 while " WHAT "'s last window is below MEND_MONITOR_ANOMALY of the median" }, \
  { K, W_IDLE, P "_idle_seconds", "gauge", "Time since " WHAT "'s last completion (-1: none yet)" }, \
  { K, W_SLOW, P "_inflight_slow", "gauge", "1 while a send of " WHAT " has been in service longer than its size takes at MEND_MONITOR_ANOMALY of the median (bulk sends only)" }

static const struct monFamily families[] = {
  { ROW_PROC, 0, "mend_monitor_info", "gauge", "The monitor of this process (labels: host, pid, ras: its query service ip:port, window size)" },
  { ROW_PROC, 1, "mend_monitor_snapshot_timestamp_seconds", "gauge", "When this snapshot was taken (Unix time)" },
  { ROW_PROC, 2, "mend_monitor_communicators", "gauge", "Communicators watched by this process" },
  { ROW_COMM, M_RANKS, "mend_comm_ranks", "gauge", "Ranks in the communicator" },
  { ROW_COMM, M_OPS, "mend_comm_ops_total", "counter", "Collective operations issued on the communicator (its op count)" },
  { ROW_COMM, M_EPOCH, "mend_comm_plan_epoch", "gauge", "Epoch of the plan view in force (-1: none yet)" },
  { ROW_COMM, M_PENDING, "mend_comm_plan_epoch_pending", "gauge", "Epoch of the plan view agreed and waiting for its op (-1: none)" },
  { ROW_COMM, M_FAILOVERS, "mend_comm_failovers_total", "counter", "Paths of this rank's net connections that failed (resilient net)" },
  { ROW_COMM, M_FAILBACKS, "mend_comm_failbacks_total", "counter", "Returns of this rank's net connections to a rebuilt preferred path" },
  { ROW_COMM, M_CONNS, "mend_comm_net_connections", "gauge", "Net connectors of this rank (one per direction)" },
  { ROW_COMM, M_HEPOCH, "mend_comm_health_epoch", "gauge", "Highest epoch of the health registry (-1: resilience off)" },
  WINDOW_FAMILIES(ROW_NIC, "mend_nic", "a local NIC"),
  WINDOW_FAMILIES(ROW_CONN, "mend_conn", "a net connector"),
  { ROW_CONN, C_INFLIGHT, "mend_conn_inflight", "gauge", "Messages posted to the Net and not completed" },
  { ROW_CONN, C_STALLED, "mend_conn_stalled_seconds", "gauge", "Sends: time without a completion while messages are in flight (0: none in flight; receives: 0)" },
  { ROW_CONN, C_FAILOVERS, "mend_conn_failovers_total", "counter", "Paths of the connection that failed (resilient net)" },
  { ROW_CONN, C_FAILBACKS, "mend_conn_failbacks_total", "counter", "Returns to a rebuilt preferred path (resilient net)" },
  { ROW_CONN, C_ACTIVE, "mend_conn_active_nic", "gauge", "Local NIC of the path carrying the connection (-1: no path left)" },
  { ROW_HEALTH, 0, "mend_nic_state", "gauge", "Health registry: state of rank peer's NIC (0 up, 1 down, 2 degraded, 3 probing)" },
  { ROW_LINK, 0, "mend_nic_link_up", "gauge", "Link of a local NIC (1 up, 0 down, -1 unknown)" },
};
#define NFAMILIES (int)(sizeof(families) / sizeof(families[0]))

/* ---- rows ---- */

struct monRows {
  struct monRow* r;
  int n, cap;
};

static struct monRow* rowAdd(struct monRows* rows, int kind) {
  if (rows->n == rows->cap) {
    int cap = rows->cap ? 2 * rows->cap : 64;
    struct monRow* r = realloc(rows->r, sizeof(*r) * (size_t)cap);
    if (!r) return NULL;
    rows->r = r;
    rows->cap = cap;
  }
  struct monRow* row = rows->r + rows->n++;
  memset(row, 0, sizeof(*row));
  row->kind = kind;
  return row;
}

static void label(struct monRow* row, const char* key, const char* fmt, ...) {
  if (row->nLabels >= MON_MAX_LABELS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(row->val[row->nLabels], sizeof(row->val[0]), fmt, ap);
  va_end(ap);
  row->key[row->nLabels++] = key;
}

static void commLabels(struct monRow* row, const struct mendMonComm* mc) {
  label(row, "comm", "%016llx", (unsigned long long)mc->commHash);
  label(row, "rank", "%d", mc->rank);
}

static double seconds(uint64_t ns) { return (double)ns / 1e9; }

static void windowValues(struct monRow* row, struct mendMonWindow* w, uint64_t now) {
  row->v[W_BYTES] = (double)atomic_load_explicit(&w->bytes, memory_order_relaxed);
  row->v[W_MSGS] = (double)atomic_load_explicit(&w->msgs, memory_order_relaxed);
  row->v[W_BPS] = (double)atomic_load_explicit(&w->bps, memory_order_relaxed);
  row->v[W_LAT] = seconds(atomic_load_explicit(&w->latNs, memory_order_relaxed));
  row->v[W_SPAN] = seconds(atomic_load_explicit(&w->spanNs, memory_order_relaxed));
  row->v[W_MEDIAN] = (double)atomic_load_explicit(&w->medianBps, memory_order_relaxed);
  row->v[W_ANOM] = (double)atomic_load_explicit(&w->anomalies, memory_order_relaxed);
  row->v[W_INANOM] = atomic_load_explicit(&w->inAnomaly, memory_order_relaxed);
  uint64_t last = atomic_load_explicit(&w->lastDoneNs, memory_order_relaxed);
  row->v[W_IDLE] = last == 0 ? -1.0 : seconds(now > last ? now - last : 0);
}

static const char* nicName(const struct mendMonComm* mc, int d) {
  const struct mendTopo* topo = mc->comm->topo;
  return topo && d < topo->nNics ? topo->nics[d].name : "";
}

static ncclResult_t gatherConn(struct monRows* rows, struct mendMonComm* mc, struct mendMonConn* m, uint64_t now,
                               uint64_t* failovers, uint64_t* failbacks) {
  mendMonConnRefresh(m);
  *failovers += m->failovers;
  *failbacks += m->failbacks;
  struct monRow* row = rowAdd(rows, ROW_CONN);
  if (!row) return ncclSystemError;
  commLabels(row, mc);
  label(row, "peer", "%d", m->peer);
  label(row, "channel", "%d", m->channel);
  label(row, "dir", "%s", m->dir == MEND_SEND ? "send" : "recv");
  label(row, "use", "%s", m->connIndex == MEND_CONN_P2P ? "p2p" : "coll");
  label(row, "nic", "%d", m->dev);
  windowValues(row, &m->win, now);
  uint64_t posted = atomic_load_explicit(&m->posted, memory_order_relaxed);
  uint64_t done = atomic_load_explicit(&m->win.msgs, memory_order_relaxed);
  uint64_t inflight = posted > done ? posted - done : 0;
  row->v[C_INFLIGHT] = (double)inflight;
  row->v[C_STALLED] = 0;
  if (inflight > 0 && m->dir == MEND_SEND) { /* receives wait for their data by design */
    /* Since the later of the last completion and the oldest outstanding post. */
    uint64_t since = atomic_load_explicit(&m->win.lastDoneNs, memory_order_relaxed);
    uint64_t oldest = atomic_load_explicit(&m->post[done % MEND_FIFO_SLOTS], memory_order_relaxed);
    if (oldest > since) since = oldest;
    row->v[C_STALLED] = since && now > since ? seconds(now - since) : 0;
    /* The window judged live: the oldest send in flight already runs below the threshold. */
    uint64_t bytes = atomic_load_explicit(&m->postBytes[done % MEND_FIFO_SLOTS], memory_order_relaxed);
    row->v[W_SLOW] = mendMonWindowSlow(&m->win, oldest, bytes, now);
  }
  row->v[C_FAILOVERS] = (double)m->failovers;
  row->v[C_FAILBACKS] = (double)m->failbacks;
  row->v[C_ACTIVE] = m->activeDev;
  return ncclSuccess;
}

static ncclResult_t gatherHealth(struct monRows* rows, struct mendMonComm* mc, double* epoch) {
  struct mendResil* r = mc->comm->resil;
  *epoch = -1;
  if (!r) return ncclSuccess;
  *epoch = mendHealthEpoch(&r->health);
  for (int p = 0; p < r->nRanks; p++) {
    int nDevs = r->peerNDevs ? r->peerNDevs[p] : 0;
    for (int d = 0; d < nDevs && d < r->health.maxDevs; d++) {
      struct monRow* row = rowAdd(rows, ROW_HEALTH);
      if (!row) return ncclSystemError;
      commLabels(row, mc);
      label(row, "peer", "%d", p);
      label(row, "nic", "%d", d);
      row->v[0] = mendHealthState(&r->health, p, d);
    }
  }
  for (int d = 0; d < mc->nNics; d++) {
    struct monRow* row = rowAdd(rows, ROW_LINK);
    if (!row) return ncclSystemError;
    commLabels(row, mc);
    label(row, "nic", "%d", d);
    label(row, "nic_name", "%s", nicName(mc, d));
    row->v[0] = mendResilLinkUp(r, d);
  }
  return ncclSuccess;
}

static ncclResult_t gatherComm(struct monRows* rows, struct mendMonComm* mc, uint64_t now) {
  struct monRow* crow = rowAdd(rows, ROW_COMM);
  if (!crow) return ncclSystemError;
  int ci = rows->n - 1; /* rows may move: keep the index */
  commLabels(crow, mc);
  for (int d = 0; d < mc->nNics; d++) {
    for (int dir = 0; dir < 2; dir++) {
      struct monRow* row = rowAdd(rows, ROW_NIC);
      if (!row) return ncclSystemError;
      commLabels(row, mc);
      label(row, "nic", "%d", d);
      label(row, "nic_name", "%s", nicName(mc, d));
      label(row, "dir", "%s", dir == MEND_SEND ? "tx" : "rx");
      windowValues(row, mc->nic + 2 * d + dir, now);
    }
  }
  uint64_t failovers = mc->goneFailovers, failbacks = mc->goneFailbacks;
  int nConns = 0;
  for (struct mendMonConn* m = mc->conns; m; m = m->next, nConns++) {
    MENDCHECK(gatherConn(rows, mc, m, now, &failovers, &failbacks));
    /* A NIC's sends are slow while a connector it carries has a slow send in flight. */
    int d = atomic_load_explicit(&m->curDev, memory_order_relaxed);
    if (m->dir == MEND_SEND && d >= 0 && d < mc->nNics && rows->r[rows->n - 1].v[W_SLOW] > 0)
      rows->r[ci + 1 + 2 * d + MEND_SEND].v[W_SLOW] = 1;
  }
  double hEpoch;
  MENDCHECK(gatherHealth(rows, mc, &hEpoch));
  int64_t epoch, pending;
  mendPlannerEpochs(mc->comm, &epoch, &pending);
  crow = rows->r + ci;
  crow->v[M_RANKS] = mc->nRanks;
  /* Written by the thread that issues collectives; an aligned 64-bit load reads it whole. */
  crow->v[M_OPS] = (double)__atomic_load_n(&mc->comm->collSeq, __ATOMIC_RELAXED);
  crow->v[M_EPOCH] = (double)epoch;
  crow->v[M_PENDING] = (double)pending;
  crow->v[M_FAILOVERS] = (double)failovers;
  crow->v[M_FAILBACKS] = (double)failbacks;
  crow->v[M_CONNS] = nConns;
  crow->v[M_HEPOCH] = hEpoch;
  return ncclSuccess;
}

/* ---- text ---- */

struct monText {
  char* s;
  size_t n, cap;
  int failed;
};

static void put(struct monText* t, const char* fmt, ...) {
  if (t->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
      t->failed = 1;
      return;
    }
    if (t->s && t->n + (size_t)k < t->cap) {
      t->n += (size_t)k;
      return;
    }
    size_t cap = t->cap ? t->cap : 16384;
    while (cap <= t->n + (size_t)k) cap *= 2;
    char* s = realloc(t->s, cap);
    if (!s) {
      t->failed = 1;
      return;
    }
    t->s = s;
    t->cap = cap;
  }
}

/* A label value or JSON string: backslash, double quote and newline escaped (both formats agree). */
static void putEscaped(struct monText* t, const char* s) {
  for (; *s; s++) {
    if (*s == '\\') put(t, "\\\\");
    else if (*s == '"') put(t, "\\\"");
    else if (*s == '\n') put(t, "\\n");
    else if ((unsigned char)*s < 0x20) put(t, "\\u%04x", (unsigned char)*s);
    else put(t, "%c", *s);
  }
}

static void putValue(struct monText* t, double v) {
  if (v == (double)(int64_t)v && v > -9e15 && v < 9e15) put(t, "%lld", (long long)v);
  else put(t, "%.15g", v);
}

static void formatProm(struct monText* t, const struct monRows* rows) {
  for (int f = 0; f < NFAMILIES; f++) {
    const struct monFamily* fam = families + f;
    put(t, "# HELP %s %s\n# TYPE %s %s\n", fam->name, fam->help, fam->name, fam->type);
    for (int i = 0; i < rows->n; i++) {
      const struct monRow* row = rows->r + i;
      if (row->kind != fam->kind) continue;
      put(t, "%s", fam->name);
      /* The process's labels name it once, on mend_monitor_info (the file is the process's own). */
      int nLabels = row->kind == ROW_PROC && fam->index != 0 ? 0 : row->nLabels;
      for (int l = 0; l < nLabels; l++) {
        put(t, "%s%s=\"", l ? "," : "{", row->key[l]);
        putEscaped(t, row->val[l]);
        put(t, "\"");
      }
      put(t, "%s ", nLabels ? "}" : "");
      putValue(t, row->v[fam->index]);
      put(t, "\n");
    }
  }
}

/* One object per row: its kind, its labels, and its values under the family names less "mend_". */
static void formatJson(struct monText* t, const struct monRows* rows) {
  for (int i = 0; i < rows->n; i++) {
    const struct monRow* row = rows->r + i;
    put(t, "{\"kind\":\"%s\"", kindName[row->kind]);
    for (int l = 0; l < row->nLabels; l++) {
      put(t, ",\"%s\":\"", row->key[l]);
      putEscaped(t, row->val[l]);
      put(t, "\"");
    }
    for (int f = 0; f < NFAMILIES; f++) {
      if (families[f].kind != row->kind) continue;
      put(t, ",\"%s\":", families[f].name + 5);
      putValue(t, row->v[families[f].index]);
    }
    put(t, "}\n");
  }
}

ncclResult_t mendMonBuild(int json, char** text, size_t* len) {
  struct monRows rows = { 0 };
  struct monText t = { 0 };
  ncclResult_t res = ncclSuccess;
  uint64_t now = mendTimeNs();
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  struct monRow* proc = rowAdd(&rows, ROW_PROC);
  if (!proc) goto fail_alloc;
  char host[64];
  mendHostName(host, sizeof(host));
  label(proc, "host", "%s", host);
  label(proc, "pid", "%d", (int)getpid());
  char rasAt[MEND_SOCKET_NAME_MAXLEN];
  label(proc, "ras", "%s", mendRasEndpoint(rasAt) ? rasAt : ""); /* where mend-info --ras asks */
  label(proc, "window", "%d", mendMon.window);
  proc->v[0] = 1;
  proc->v[1] = (double)wall.tv_sec + (double)wall.tv_nsec / 1e9;
  proc->v[2] = mendMon.nComms;
  for (struct mendMonComm* mc = mendMon.comms; mc; mc = mc->next) MENDCHECKGOTO(gatherComm(&rows, mc, now), res, fail);
  if (json) formatJson(&t, &rows);
  else formatProm(&t, &rows);
  if (t.failed) goto fail_alloc;
  free(rows.r);
  *text = t.s;
  *len = t.n;
  return ncclSuccess;
fail_alloc:
  WARN("monitor: out of memory building a snapshot");
  res = ncclSystemError;
fail:
  free(rows.r);
  free(t.s);
  *text = NULL;
  *len = 0;
  return res;
}

ncclResult_t mendMonWrite(const char* text, size_t len) {
  char tmp[sizeof(mendMon.path) + 32];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", mendMon.path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    WARN_SPARSE(60000, "monitor: cannot write the snapshot %s: %s", tmp, strerror(errno));
    return ncclSystemError;
  }
  size_t off = 0;
  while (off < len) {
    ssize_t k = write(fd, text + off, len - off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      WARN_SPARSE(60000, "monitor: writing the snapshot %s failed: %s", tmp, k < 0 ? strerror(errno) : "no space");
      close(fd);
      unlink(tmp);
      return ncclSystemError;
    }
    off += (size_t)k;
  }
  close(fd);
  if (rename(tmp, mendMon.path) != 0) {
    WARN_SPARSE(60000, "monitor: cannot rename %s to %s: %s", tmp, mendMon.path, strerror(errno));
    unlink(tmp);
    return ncclSystemError;
  }
  mendMon.writes++;
  return ncclSuccess;
}

static void snapshotNow(void) {
  char* text = NULL;
  size_t len = 0;
  pthread_mutex_lock(&mendMon.writeLock);
  pthread_mutex_lock(&mendMon.lock);
  ncclResult_t res = mendMon.nComms > 0 ? mendMonBuild(mendMon.json, &text, &len) : ncclInternalError;
  pthread_mutex_unlock(&mendMon.lock);
  if (res == ncclSuccess) (void)mendMonWrite(text, len);
  pthread_mutex_unlock(&mendMon.writeLock);
  free(text);
}

void* mendMonThreadMain(void* arg) {
  (void)arg;
  pthread_mutex_lock(&mendMon.lock);
  while (!mendMon.stop) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until); /* the condition's clock (monInit) */
    int64_t ns = until.tv_nsec + (mendMon.periodMs % 1000) * 1000000;
    until.tv_sec += (time_t)(mendMon.periodMs / 1000 + ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    int err = 0;
    while (!mendMon.stop && err != ETIMEDOUT) err = pthread_cond_timedwait(&mendMon.cond, &mendMon.lock, &until);
    if (mendMon.stop) break;
    pthread_mutex_unlock(&mendMon.lock);
    snapshotNow();
    pthread_mutex_lock(&mendMon.lock);
  }
  pthread_mutex_unlock(&mendMon.lock);
  return NULL;
}
