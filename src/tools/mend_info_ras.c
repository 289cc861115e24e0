/*
 * mend-info --ras: asks one process's query service (bootstrap_ras.h) for its communicators, then
 * every rank each of them names, and prints per communicator each rank's host, pid, ops issued
 * and in flight, NIC states, and its verdict (the op-count method of ICCL, shared/papers/003):
 *   ok         it answered and issued as many collectives as the rank furthest ahead
 *   LATE       it answered and is behind (the others wait in an op it has not called)
 *   failed     its communicator has an error or was aborted (its count is not compared)
 *   NO ANSWER  it accepted the connection (or did not) and said nothing within the timeout:
 *              stopped (SIGSTOP), hung in the kernel, or its host is gone; counted as late
 *   DEAD       its port refuses connections: the process is gone
 *   GONE       it answered but no longer has the communicator (destroyed there)
 * Each communicator ends with "late: <ranks>" and "dead: <ranks>" lines (scripts read those).
 */
#include "mend_info_ras.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap_ras.h"
#include "misc/socket.h"

enum rasVerdict { V_ANSWERED = 0, V_SILENT, V_DEAD };

/* One process asked: its reply, or why there is none. */
struct rasTarget {
  union mendSocketAddr addr;
  int verdict;               /* enum rasVerdict */
  char why[96];              /* V_SILENT / V_DEAD: what happened */
  struct mendRasReply reply; /* V_ANSWERED */
};

static int64_t nowMs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Wait for fd to be ready (events) until deadline; 1 ready, 0 timed out, -1 error. */
static int waitFd(int fd, short events, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - nowMs();
    if (left <= 0) return 0;
    struct pollfd p = {.fd = fd, .events = events};
    int n = poll(&p, 1, (int)left);
    if (n > 0) return 1;
    if (n < 0 && errno != EINTR) return -1;
  }
}

/* Move `size` bytes in or out of fd by deadline; 0 done, else a reason. */
static const char* moveAll(int fd, int out, void* buf, size_t size, int64_t deadline) {
  size_t off = 0;
  while (off < size) {
    int w = waitFd(fd, out ? POLLOUT : POLLIN, deadline);
    if (w == 0) return "no answer within the timeout (stopped, hung, or its host is gone)";
    if (w < 0) return "poll failed";
    ssize_t n = out ? send(fd, (char*)buf + off, size - off, MSG_NOSIGNAL) : recv(fd, (char*)buf + off, size - off, 0);
    if (n == 0) return "the connection closed mid-reply";
    if (n < 0 && errno != EAGAIN && errno != EINTR) return "the connection broke";
    if (n > 0) off += (size_t)n;
  }
  return NULL;
}

/* Connect without retrying: a refusal is an answer (nobody listens there). */
static int connectOnce(struct rasTarget* t, int64_t deadline) {
  int fd = socket(t->addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    t->verdict = V_SILENT;
    snprintf(t->why, sizeof(t->why), "socket: %s", strerror(errno));
    return -1;
  }
  int rc = connect(fd, &t->addr.sa, mendSocketAddrLen(&t->addr));
  int err = rc == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    int w = waitFd(fd, POLLOUT, deadline);
    socklen_t len = sizeof(err);
    if (w <= 0) err = ETIMEDOUT;
    else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  }
  if (err == 0) return fd;
  close(fd);
  t->verdict = err == ECONNREFUSED ? V_DEAD : V_SILENT;
  snprintf(t->why, sizeof(t->why), "%s", err == ECONNREFUSED ? "connection refused (the process is gone)"
                                         : err == ETIMEDOUT ? "no answer within the timeout (stopped, hung, or its host is gone)"
                                                            : strerror(err));
  return -1;
}

/* Ask one process; fills t->verdict (and t->reply when it answered). */
static void ask(struct rasTarget* t, int timeoutMs) {
  int64_t deadline = nowMs() + timeoutMs;
  int fd = connectOnce(t, deadline);
  if (fd < 0) return;
  struct mendRasQuery q = {.magic = MEND_RAS_QUERY_MAGIC, .version = MEND_RAS_VERSION, .flags = 0};
  struct mendRasHeader h;
  uint64_t bytes = 0;
  char* buf = NULL;
  const char* why = moveAll(fd, 1, &q, sizeof(q), deadline);
  if (!why) why = moveAll(fd, 0, &h, sizeof(h), deadline);
  if (!why) (void)mendRasHeaderParse(&h, sizeof(h), &bytes, &why); /* why: NULL when it is a header */
  if (!why && (buf = malloc(bytes)) == NULL) why = "out of memory";
  if (!why) {
    memcpy(buf, &h, sizeof(h));
    why = moveAll(fd, 0, buf + sizeof(h), bytes - sizeof(h), deadline);
  }
  if (!why) (void)mendRasReplyParse(buf, bytes, &t->reply, &why); /* why: NULL when it parsed */
  free(buf);
  close(fd);
  t->verdict = why ? V_SILENT : V_ANSWERED;
  if (why) snprintf(t->why, sizeof(t->why), "%s", why);
}

static int sameAddr(const union mendSocketAddr* a, const union mendSocketAddr* b) {
  return memcmp(a, b, sizeof(*a)) == 0;
}

/* The index of the target at addr, asking it now if nobody did yet; -1 out of memory. */
static int targetOf(struct rasTarget** ts, int* n, const union mendSocketAddr* addr, int timeoutMs) {
  for (int i = 0; i < *n; i++)
    if (sameAddr(&(*ts)[i].addr, addr)) return i;
  struct rasTarget* grown = realloc(*ts, (size_t)(*n + 1) * sizeof(**ts));
  if (grown == NULL) return -1;
  *ts = grown;
  struct rasTarget* t = grown + *n;
  memset(t, 0, sizeof(*t));
  t->addr = *addr;
  ask(t, timeoutMs);
  return (*n)++;
}

/* What one rank of communicator `hash` said, or NULL (t did not answer, or has no such rank). */
static const struct mendRasComm* rankState(const struct rasTarget* t, uint64_t hash, int rank) {
  if (t->verdict != V_ANSWERED) return NULL;
  for (int i = 0; i < t->reply.nComms; i++)
    if (t->reply.comms[i].c.commHash == hash && t->reply.comms[i].c.rank == rank) return &t->reply.comms[i].c;
  return NULL;
}

static void nicText(const struct mendRasComm* c, char* buf, size_t len) {
  static const char* names[] = {"up", "down", "degraded", "probing"};
  size_t off = 0;
  buf[0] = '\0';
  for (int d = 0; d < c->nNics && off < len; d++)
    off += (size_t)snprintf(buf + off, len - off, "%s%s", d ? "," : "", names[c->nic[d]]);
  if (c->nNics == 0) snprintf(buf, len, "-");
}

/* Append " r" to a list line (bounded). */
static void listAdd(char* list, size_t len, int r) {
  size_t n = strlen(list);
  if (n + 12 < len) snprintf(list + n, len - n, " %d", r);
}

/* A rank whose communicator failed or was aborted waits for nobody: its count is not compared. */
static int healthy(const struct mendRasComm* c) { return c && !c->aborted && c->error == ncclSuccess; }

static void stateText(const struct mendRasComm* c, uint64_t most, char* buf, size_t len) {
  if (!healthy(c)) snprintf(buf, len, "failed (%s%s)", c->aborted ? "aborted; " : "", ncclGetErrorString(c->error));
  else if (c->issued < most) snprintf(buf, len, "LATE (%llu collectives behind)", (unsigned long long)(most - c->issued));
  else snprintf(buf, len, "ok");
}

/* One communicator (as the first process described it): ask every rank, print the table. */
static void reportComm(const struct mendRasCommView* v, struct rasTarget** ts, int* nTs, int timeoutMs) {
  int n = v->c.nRanks;
  int* idx = calloc((size_t)n, sizeof(int));
  if (idx == NULL) return;
  uint64_t most = 0;
  for (int r = 0; r < n; r++) {
    idx[r] = v->peers[r].sa.sa_family ? targetOf(ts, nTs, v->peers + r, timeoutMs) : -1;
    const struct mendRasComm* c = idx[r] >= 0 ? rankState(*ts + idx[r], v->c.commHash, r) : NULL;
    if (healthy(c) && c->issued > most) most = c->issued;
  }
  printf("comm %016llx: %d ranks, most collectives issued %llu\n", (unsigned long long)v->c.commHash, n,
         (unsigned long long)most);
  printf("  %5s %-20s %8s %10s %8s %-20s %s\n", "rank", "host", "pid", "issued", "inflight", "nics", "state");
  char late[1024] = "", dead[1024] = "";
  for (int r = 0; r < n; r++) {
    const struct rasTarget* t = idx[r] >= 0 ? *ts + idx[r] : NULL;
    const struct mendRasComm* c = t ? rankState(t, v->c.commHash, r) : NULL;
    if (c) {
      char nics[96], state[160];
      nicText(c, nics, sizeof(nics));
      stateText(c, most, state, sizeof(state));
      printf("  %5d %-20s %8d %10llu %8lld %-20s %s\n", r, t->reply.host, t->reply.pid, (unsigned long long)c->issued,
             (long long)c->inflight, nics, state);
      if (healthy(c) && c->issued < most) listAdd(late, sizeof(late), r);
      continue;
    }
    const char* why = t == NULL ? "it has no query service (MEND_RAS off there)"
                      : t->verdict == V_ANSWERED ? "it no longer has this communicator" : t->why;
    const char* what = t && t->verdict == V_DEAD ? "DEAD" : t && t->verdict == V_ANSWERED ? "GONE" : "NO ANSWER";
    printf("  %5d %-20s %8s %10s %8s %-20s %s: %s\n", r, "-", "-", "-", "-", "-", what, why);
    if (t && t->verdict == V_DEAD) listAdd(dead, sizeof(dead), r);
    else if (!t || t->verdict == V_SILENT) listAdd(late, sizeof(late), r);
  }
  printf("  late:%s\n  dead:%s\n", late, dead);
  free(idx);
}

/* The "ras" label of mend_monitor_info in a snapshot file (either format): "ip:port" into out. */
static int endpointFromFile(const char* path, char* out, size_t len) {
  FILE* f = fopen(path, "r");
  if (f == NULL) {
    fprintf(stderr, "mend-info --ras: cannot open %s: %s\n", path, strerror(errno));
    return 0;
  }
  char line[4096];
  int found = 0;
  while (!found && fgets(line, sizeof(line), f)) {
    const char* p = strstr(line, "ras\":\"");
    if (p == NULL && strncmp(line, "mend_monitor_info{", 18) == 0) p = strstr(line, "ras=\"");
    if (p == NULL) continue;
    p = strchr(p, '"') + 1;
    if (*p == ':') p += 2; /* JSON: ras":"value */
    size_t n = strcspn(p, "\"");
    if (n > 0 && n < len) {
      memcpy(out, p, n);
      out[n] = '\0';
      found = 1;
    }
  }
  fclose(f);
  if (!found) fprintf(stderr, "mend-info --ras: %s names no query service (MEND_RAS off, or not a snapshot)\n", path);
  return found;
}

void mendInfoRasUsage(void* file) {
  fprintf((FILE*)file,
          "  --ras [--host H --port P | --file SNAPSHOT] [--timeout MS]\n"
          "             who is late: ask a process of a running job (its query service: the \"ras\" label of\n"
          "             its monitor snapshot) for its communicators, then every rank of them; prints each\n"
          "             rank's host, pid, collectives issued and in flight, NIC states, and LATE / NO ANSWER\n"
          "             / DEAD (a rank silent for MS, default 1000, is stopped or hung)\n");
}

static int parseArgs(int argc, char** argv, char* target, size_t len, int* timeoutMs) {
  const char *host = NULL, *port = NULL, *file = NULL;
  int ok = argc % 2 == 0;
  for (int i = 0; ok && i + 1 < argc; i += 2) {
    const char* v = argv[i + 1];
    if (strcmp(argv[i], "--host") == 0) host = v;
    else if (strcmp(argv[i], "--port") == 0) port = v;
    else if (strcmp(argv[i], "--file") == 0) file = v;
    else if (strcmp(argv[i], "--timeout") == 0) *timeoutMs = atoi(v);
    else ok = 0;
  }
  if (!ok || *timeoutMs < 1 || *timeoutMs > 600000 || (file != NULL) == (port != NULL) || (host && !port)) {
    fprintf(stderr, "mend-info --ras: give --file SNAPSHOT or --port P [--host H] (and --timeout 1..600000 ms)\n");
    return -1;
  }
  if (file) return endpointFromFile(file, target, len) ? 0 : -1;
  snprintf(target, len, "%s:%s", host ? host : "127.0.0.1", port);
  return 0;
}

int mendInfoRas(int argc, char** argv) {
  char target[256];
  int timeoutMs = 1000;
  if (parseArgs(argc, argv, target, sizeof(target), &timeoutMs) != 0) return 2;
  union mendSocketAddr addr;
  if (mendSocketParseAddr(target, &addr) != ncclSuccess) {
    fprintf(stderr, "mend-info --ras: '%s' is not host:port\n", target);
    return 2;
  }
  struct rasTarget* ts = NULL;
  int nTs = 0;
  if (targetOf(&ts, &nTs, &addr, timeoutMs) != 0 || ts[0].verdict != V_ANSWERED) {
    fprintf(stderr, "mend-info --ras: %s: %s\n", target, ts ? ts[0].why : "out of memory");
    free(ts);
    return 1;
  }
  struct mendRasReply first = ts[0].reply; /* its arrays stay put while ts grows */
  printf("asked %s (pid %d on %s): %d communicator%s\n", target, first.pid, first.host, first.nComms,
         first.nComms == 1 ? "" : "s");
  for (int i = 0; i < first.nComms; i++) reportComm(first.comms + i, &ts, &nTs, timeoutMs);
  for (int i = 0; i < nTs; i++) mendRasReplyFree(&ts[i].reply);
  free(ts);
  return 0;
}
