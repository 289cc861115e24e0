/*
 * The query service of "who is late" (bootstrap_ras.h): one listener thread per process, started by
 * the first communicator with MEND_RAS on and stopped by the last one's removal.  It answers one
 * query at a time, each bounded (RAS_QUERY_MS to read it, RAS_REPLY_MS to send the reply), so a
 * silent or slow client delays the next one by at most that; it reads the communicators under
 * its own lock and the data path through relaxed atomic loads only.
 */
#include "bootstrap_ras.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "bootstrap_priv.h" /* the bootstrap's listen address: the service listens on its interface */
#include "checks.h"
#include "comm.h"
#include "misc/debug.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "monitor/monitor.h"
#include "resilience/resil_priv.h" /* the health registry, read under its own lock */

#define RAS_QUERY_MS 500   /* a client has this long to send its query */
#define RAS_REPLY_MS 2000  /* and to take the reply */
#define RAS_POLL_MS 200    /* the thread re-checks its stop flag this often */

struct rasComm {
  struct ncclComm* comm;          /* alive while registered */
  union mendSocketAddr* peers;    /* [nRanks] every rank's service address */
  struct rasComm* next;
};

static struct {
  pthread_mutex_t lock;           /* comms, nComms, addr */
  struct rasComm* comms;          /* registered communicators */
  int nComms;
  int listenFd;                   /* -1: not listening */
  union mendSocketAddr addr;      /* where it listens (family 0: nowhere) */
  pthread_t thread;
  int running;                    /* the thread was started (under lock) */
  _Atomic int stop;               /* the thread must leave */
  int wakeFd;                     /* eventfd: wakes the thread to stop */
} ras = {.lock = PTHREAD_MUTEX_INITIALIZER, .listenFd = -1, .wakeFd = -1};

static pthread_once_t rasOnce = PTHREAD_ONCE_INIT;
static int rasOn;

static void rasInit(void) {
  int64_t on = mendParamRas();
  if (on != 0 && on != 1 && on != -2) {
    WARN("MEND_RAS=%lld is not 0, 1 or -2 (auto); using -2", (long long)on);
    on = -2;
  }
  rasOn = on == 1 || (on == -2 && mendMonitorOn());
}

int mendRasOn(void) {
  pthread_once(&rasOnce, rasInit);
  return rasOn;
}

int mendRasEndpoint(char* buf) {
  pthread_mutex_lock(&ras.lock);
  int have = ras.addr.sa.sa_family != 0;
  if (have) mendSocketAddrStr(&ras.addr, buf);
  pthread_mutex_unlock(&ras.lock);
  return have;
}

/* ---------------------------------------------------------------- the reply */

static void commState(const struct rasComm* rc, struct mendRasComm* c) {
  struct ncclComm* comm = rc->comm;
  memset(c, 0, sizeof(*c));
  c->commHash = comm->commHash;
  c->rank = comm->rank;
  c->nRanks = comm->nRanks;
  /* Written by the thread that issues collectives; an aligned 64-bit load reads it whole. */
  c->issued = __atomic_load_n(&comm->collSeq, __ATOMIC_RELAXED);
  c->inflight = atomic_load_explicit(&comm->inflight, memory_order_relaxed);
  if (c->inflight < 0) c->inflight = 0;
  int err = atomic_load_explicit(&comm->asyncResult, memory_order_relaxed);
  c->error = err >= 0 && err < ncclNumResults ? err : ncclInternalError;
  c->aborted = atomic_load_explicit(&comm->abortFlag, memory_order_relaxed) != 0;
  struct mendResil* r = comm->resil;
  if (r == NULL || r->peerNDevs == NULL) return;
  int n = r->peerNDevs[comm->rank];
  c->nNics = n < MEND_RAS_MAX_NICS ? n : MEND_RAS_MAX_NICS;
  for (int d = 0; d < c->nNics; d++) {
    int s = d < r->health.maxDevs ? mendHealthState(&r->health, comm->rank, d) : MEND_RAS_NIC_UP;
    if (s < MEND_RAS_NIC_UP || s > MEND_RAS_NIC_PROBING) s = MEND_RAS_NIC_DOWN;
    if (s == MEND_RAS_NIC_UP && !mendResilLinkUp(r, d)) s = MEND_RAS_NIC_DOWN;
    c->nic[d] = s;
  }
}

/* The reply to a query, under ras.lock; free() it. */
static ncclResult_t buildReply(char** out, size_t* len) {
  struct mendRasHeader h;
  memset(&h, 0, sizeof(h));
  h.magic = MEND_RAS_REPLY_MAGIC;
  h.version = MEND_RAS_VERSION;
  h.pid = (int32_t)getpid();
  mendHostName(h.host, sizeof(h.host));
  for (char* p = h.host; *p; p++)
    if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e) *p = '?';
  if (h.host[0] == '\0') strcpy(h.host, "?");
  size_t bytes = sizeof(h);
  for (struct rasComm* rc = ras.comms; rc && h.nComms < MEND_RAS_MAX_COMMS; rc = rc->next, h.nComms++)
    bytes += mendRasCommBytes(rc->comm->nRanks);
  h.bytes = bytes;
  char* buf = malloc(bytes);
  if (buf == NULL) return ncclSystemError;
  memcpy(buf, &h, sizeof(h));
  size_t off = sizeof(h);
  struct rasComm* rc = ras.comms;
  for (uint32_t i = 0; i < h.nComms; i++, rc = rc->next) {
    struct mendRasComm c;
    commState(rc, &c);
    memcpy(buf + off, &c, sizeof(c));
    memcpy(buf + off + sizeof(c), rc->peers, (size_t)c.nRanks * sizeof(struct mendRasPeer));
    off += mendRasCommBytes(c.nRanks);
  }
  *out = buf;
  *len = bytes;
  return ncclSuccess;
}

/* One client: its query within RAS_QUERY_MS, our reply within RAS_REPLY_MS; anything else is dropped. */
static void serveOne(int fd) {
  struct mendRasQuery q;
  if (mendSocketRecvAll(fd, &q, sizeof(q), &ras.stop, RAS_QUERY_MS) != ncclSuccess) return;
  if (!mendRasQueryParse(&q, sizeof(q))) {
    INFO(NCCL_INIT, "RAS: a connection sent something that is not a query; closed");
    return;
  }
  char* reply = NULL;
  size_t len = 0;
  pthread_mutex_lock(&ras.lock);
  ncclResult_t res = buildReply(&reply, &len);
  pthread_mutex_unlock(&ras.lock);
  if (res == ncclSuccess) (void)mendSocketSendAll(fd, reply, len, &ras.stop, RAS_REPLY_MS);
  free(reply);
}

static void* rasThread(void* arg) {
  (void)arg;
  while (!atomic_load(&ras.stop)) {
    struct pollfd pfd[2] = {{.fd = ras.listenFd, .events = POLLIN}, {.fd = ras.wakeFd, .events = POLLIN}};
    int n = poll(pfd, 2, RAS_POLL_MS);
    if (n <= 0 || !(pfd[0].revents & POLLIN)) continue;
    int fd;
    if (mendSocketAccept(ras.listenFd, &fd, &ras.stop, 0) != ncclSuccess) continue;
    serveOne(fd);
    mendSocketClose(fd);
  }
  return NULL;
}

/* ---------------------------------------------------------------- start, stop, registry */

/* Listen on the bootstrap's interface (ras.lock held); a failure leaves the process without the
 * service (its peers see family 0 for it), never fails the communicator. */
static void startService(struct ncclComm* comm) {
  if (ras.running || comm->bootstrap == NULL) return;
  union mendSocketAddr bind = comm->bootstrap->listenAddr, bound;
  int64_t port = mendParamRasPort();
  if (port < 0 || port > 65535) {
    WARN("MEND_RAS_PORT=%lld is outside 0..65535; using any free port", (long long)port);
    port = 0;
  }
  if (bind.sa.sa_family == AF_INET) bind.sin.sin_port = htons((uint16_t)port);
  else bind.sin6.sin6_port = htons((uint16_t)port);
  if (mendSocketListen(&bind, &ras.listenFd, &bound) != ncclSuccess) {
    WARN("RAS: cannot listen on port %lld of the bootstrap's interface; this process answers no queries", (long long)port);
    ras.listenFd = -1;
    return;
  }
  ras.wakeFd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  atomic_store(&ras.stop, 0);
  if (ras.wakeFd < 0 || pthread_create(&ras.thread, NULL, rasThread, NULL) != 0) {
    WARN("RAS: cannot start the query thread: %s", strerror(errno));
    if (ras.wakeFd >= 0) close(ras.wakeFd);
    mendSocketClose(ras.listenFd);
    ras.listenFd = ras.wakeFd = -1;
    return;
  }
  ras.running = 1;
  ras.addr = bound;
  char name[MEND_SOCKET_NAME_MAXLEN];
  INFO(NCCL_INIT, "RAS: answering queries on %s (mend-info --ras)", mendSocketAddrStr(&bound, name));
}

/* The last communicator left: stop the thread and close the listener (ras.lock NOT held). */
static void stopService(void) {
  atomic_store(&ras.stop, 1);
  uint64_t one = 1;
  (void)!write(ras.wakeFd, &one, sizeof(one));
  pthread_join(ras.thread, NULL);
  pthread_mutex_lock(&ras.lock);
  mendSocketClose(ras.listenFd);
  close(ras.wakeFd);
  ras.listenFd = ras.wakeFd = -1;
  memset(&ras.addr, 0, sizeof(ras.addr));
  pthread_mutex_unlock(&ras.lock);
}

/* A peer's address from the allgather: a family the service uses, else none. */
static void checkPeer(union mendSocketAddr* a) {
  int ok = (a->sa.sa_family == AF_INET && a->sin.sin_port != 0) || (a->sa.sa_family == AF_INET6 && a->sin6.sin6_port != 0);
  if (!ok) memset(a, 0, sizeof(*a));
}

ncclResult_t mendRasCommAdd(struct ncclComm* comm) {
  if (!mendRasOn() || comm == NULL || comm->bootstrap == NULL) return ncclSuccess;
  struct rasComm* rc;
  MENDCHECK(MENDCALLOC(rc, 1));
  ncclResult_t res = ncclSuccess;
  MENDCHECKGOTO(MENDCALLOC(rc->peers, (size_t)comm->nRanks), res, fail_free);
  rc->comm = comm;
  pthread_mutex_lock(&ras.lock);
  startService(comm);
  rc->peers[comm->rank] = ras.addr;
  pthread_mutex_unlock(&ras.lock);
  /* Every rank takes part, with or without a service of its own, so the allgather always matches. */
  MENDCHECKGOTO(mendBootstrapAllGather(comm->bootstrap, rc->peers, sizeof(*rc->peers)), res, fail_free);
  for (int r = 0; r < comm->nRanks; r++) checkPeer(rc->peers + r);
  pthread_mutex_lock(&ras.lock);
  rc->next = ras.comms;
  ras.comms = rc;
  ras.nComms++;
  pthread_mutex_unlock(&ras.lock);
  return ncclSuccess;
fail_free:
  free(rc->peers);
  free(rc);
  pthread_mutex_lock(&ras.lock);
  int stop = ras.running && ras.nComms == 0;
  if (stop) ras.running = 0;
  pthread_mutex_unlock(&ras.lock);
  if (stop) stopService();
  return res;
}

void mendRasCommRemove(struct ncclComm* comm) {
  if (!mendRasOn() || comm == NULL) return;
  pthread_mutex_lock(&ras.lock);
  struct rasComm** pp = &ras.comms;
  while (*pp && (*pp)->comm != comm) pp = &(*pp)->next;
  struct rasComm* rc = *pp;
  if (rc) {
    *pp = rc->next;
    ras.nComms--;
  }
  int stop = rc && ras.running && ras.nComms == 0;
  if (stop) ras.running = 0;
  pthread_mutex_unlock(&ras.lock);
  if (stop) stopService();
  if (rc) free(rc->peers);
  free(rc);
}
