/*
 * The bootstrap peer network: one connection per ordered pair of ranks, opened lazily by the sender;
 * a receiver thread per network accepts connections and buffers every message by (peer, tag), so a
 * send never waits for the matching receive.  Teardown: Close says BYE on each connection and waits
 * (bounded) for the peer to hang up; Abort only flips flags, shuts sockets down and joins the thread.
 * Rendezvous through the root lives in bootstrap_root.c, unique ids in bootstrap_id.c, child networks
 * in bootstrap_split.c, the allgather and barrier built on send/recv in bootstrap_coll.c.
 */
#include "bootstrap_priv.h"
#include "bootstrap_wire.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "checks.h"
#include "comm.h"
#include "misc/debug.h"
#include "misc/fault.h"
#include "misc/param.h"
#include "misc/utils.h"

#define BS_WAIT_SLICE_MS 20   /* longest sleep before re-checking abort flags */
#define BS_POLL_MS 100        /* receiver poll period when nothing happens */
#define BS_ACCEPT_PAUSE_MS 100 /* accept failed for lack of descriptors: try again after this */
#define BS_FULL_PAUSE_MS 10    /* too many young unproven connections: the backlog waits this long */

int mendBsAborted(struct mendBootstrap* bs, _Atomic int* extra) {
  if (atomic_load(&bs->abort)) return 1;
  if (atomic_load(&bs->useCommAbort) && bs->commAbort && atomic_load(bs->commAbort)) return 1;
  return extra && atomic_load(extra);
}

/* The flag handed to socket helpers (they watch one flag; Abort also shuts the sockets down). */
static _Atomic int* sockFlag(struct mendBootstrap* bs) {
  return atomic_load(&bs->useCommAbort) && bs->commAbort ? bs->commAbort : &bs->abort;
}

static void wakeThread(struct mendBootstrap* bs) {
  uint64_t one = 1;
  if (bs->wakeFd >= 0) (void)!write(bs->wakeFd, &one, sizeof(one));
}

static void enterCall(struct mendBootstrap* bs) { atomic_fetch_add(&bs->users, 1); }
static void leaveCall(struct mendBootstrap* bs) { atomic_fetch_sub(&bs->users, 1); }

/* ---------------------------------------------------------------- receiver thread */

static void enqueue(struct mendBootstrap* bs, int peer, struct mendBsMsg* msg) {
  pthread_mutex_lock(&bs->lock);
  struct mendBsPeer* p = &bs->peers[peer];
  msg->next = NULL;
  msg->seq = bs->seq++;
  if (p->qTail) p->qTail->next = msg; else p->qHead = msg;
  p->qTail = msg;
  pthread_cond_broadcast(&bs->cond);
  pthread_mutex_unlock(&bs->lock);
}

/* Receiver thread: the link of `peer` ended (state BYE or LOST); tell the callback once. */
static void peerGone(struct mendBootstrap* bs, int peer, int state) {
  if (peer < 0 || peer >= bs->nRanks || bs->peers[peer].goneSaid || state == MEND_BS_LINK_OPEN) return;
  bs->peers[peer].goneSaid = 1;
  pthread_mutex_lock(&bs->goneLock);
  if (bs->goneFn && !atomic_load(&bs->closing) && !atomic_load(&bs->abort))
    bs->goneFn(bs->goneArg, peer, state == MEND_BS_LINK_LOST); /* not our own close or abort */
  pthread_mutex_unlock(&bs->goneLock);
}

void mendBootstrapSetPeerGone(struct mendBootstrap* bs, mendBsPeerGoneFn fn, void* arg) {
  if (bs == NULL) return;
  pthread_mutex_lock(&bs->goneLock);
  bs->goneFn = fn;
  bs->goneArg = arg;
  pthread_mutex_unlock(&bs->goneLock);
}

static void setRecvState(struct mendBootstrap* bs, int peer, int state) {
  pthread_mutex_lock(&bs->lock);
  int changed = bs->peers[peer].recvState == MEND_BS_LINK_OPEN;
  if (changed) bs->peers[peer].recvState = state;
  pthread_cond_broadcast(&bs->cond);
  pthread_mutex_unlock(&bs->lock);
  if (changed) peerGone(bs, peer, state);
}

/* Count `bytes` against what `peer` may have buffered here; 0 when that would pass the bound. */
static int reserveBuffered(struct mendBootstrap* bs, int peer, size_t bytes, int checked) {
  pthread_mutex_lock(&bs->lock);
  struct mendBsPeer* p = &bs->peers[peer];
  int ok = !checked || (p->buffered <= bs->maxBuffered && bytes <= bs->maxBuffered - p->buffered);
  if (ok) p->buffered += bytes;
  pthread_mutex_unlock(&bs->lock);
  return ok;
}

static void releaseBuffered(struct mendBootstrap* bs, int peer, size_t bytes) {
  pthread_mutex_lock(&bs->lock);
  bs->peers[peer].buffered -= bytes;
  pthread_mutex_unlock(&bs->lock);
}

/* What a buffered message counts (its header too: empty messages are not free). */
static size_t msgCost(size_t size) { return sizeof(struct mendBsMsg) + size; }

static void dropRx(struct mendBootstrap* bs, int i) {
  if (bs->rx[i].msg) releaseBuffered(bs, bs->rx[i].peer, msgCost(bs->rx[i].msg->size));  /* half read */
  free(bs->rx[i].msg);
  close(bs->rx[i].fd);
  bs->rx[i] = bs->rx[--bs->nRx];
}

/* Tell a peer on its connection to us that we close in order (the only bytes ever sent that way). */
static void sayByeBack(int fd) {
  struct mendBsHeader h = {.type = MEND_BS_BYE};
  (void)!send(fd, &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* A connection's handshake is complete: check it, its proof of the key, and bind it to its rank. */
static int acceptHandshake(struct mendBootstrap* bs, struct mendBsRx* c) {
  int peer = mendBsHandshakeParse(&c->u.hs, sizeof(c->u.hs), bs->rank, bs->magic, bs->key, bs->nRanks, c->nonce);
  if (peer < 0) return 0;
  for (int i = 0; i < bs->nRx; i++) {
    if (bs->rx[i].peer == peer && &bs->rx[i] != c) {
      INFO(NCCL_BOOTSTRAP, "Bootstrap rank %d: rank %d reconnected", bs->rank, peer);
    }
  }
  c->peer = peer;
  c->off = 0;
  if (bs->rxByeSent) sayByeBack(c->fd);
  return 1;
}

/* Read what is available on incoming connection i.  Returns 0 when the connection was dropped. */
static int readRx(struct mendBootstrap* bs, int i) {
  struct mendBsRx* c = &bs->rx[i];
  for (;;) {
    char* dst;
    size_t want;
    if (c->peer < 0) { dst = (char*)&c->u.hs; want = sizeof(c->u.hs); }
    else if (c->msg == NULL) { dst = (char*)&c->u.hdr; want = sizeof(c->u.hdr); }
    else { dst = c->msg->data; want = c->msg->size; }
    if (c->off < want) {
      ssize_t n = recv(c->fd, dst + c->off, want - c->off, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 1;
      if (n <= 0) {
        if (c->peer >= 0) {
          INFO(NCCL_BOOTSTRAP, "Bootstrap rank %d: connection from rank %d lost (%s)", bs->rank, c->peer,
               n == 0 ? "closed without BYE" : strerror(errno));
          setRecvState(bs, c->peer, MEND_BS_LINK_LOST);
        }
        dropRx(bs, i);
        return 0;
      }
      c->off += (size_t)n;
      if (c->off < want) continue;
    }
    c->off = 0;
    if (c->peer < 0) {
      if (!acceptHandshake(bs, c)) { dropRx(bs, i); return 0; }
      continue;
    }
    if (c->msg != NULL) {  /* payload complete */
      enqueue(bs, c->peer, c->msg);
      c->msg = NULL;
      continue;
    }
    int kind = mendBsHeaderParse(&c->u.hdr, sizeof(c->u.hdr), bs->maxMsg, &c->u.hdr);
    if (kind == MEND_BS_BYE) {
      TRACE(NCCL_BOOTSTRAP, "Bootstrap rank %d: BYE from rank %d", bs->rank, c->peer);
      setRecvState(bs, c->peer, MEND_BS_LINK_BYE);
      dropRx(bs, i);  /* hanging up tells the peer we saw its BYE */
      return 0;
    }
    if (kind != MEND_BS_DATA) {
      WARN("Bootstrap rank %d: corrupt message header from rank %d (type %u, %llu bytes; a message has at most %zu); "
           "dropping its link", bs->rank, c->peer, c->u.hdr.type, (unsigned long long)c->u.hdr.size, bs->maxMsg);
      setRecvState(bs, c->peer, MEND_BS_LINK_LOST);
      dropRx(bs, i);
      return 0;
    }
    if (!reserveBuffered(bs, c->peer, msgCost(c->u.hdr.size), 1)) {
      WARN("Bootstrap rank %d: rank %d sent more than MEND_BOOTSTRAP_MAX_BUFFERED=%zu bytes nobody received; "
           "dropping its link", bs->rank, c->peer, bs->maxBuffered);
      setRecvState(bs, c->peer, MEND_BS_LINK_LOST);
      dropRx(bs, i);
      return 0;
    }
    struct mendBsMsg* m = malloc(sizeof(*m) + c->u.hdr.size);
    if (m == NULL) {
      releaseBuffered(bs, c->peer, msgCost(c->u.hdr.size));
      WARN("Bootstrap rank %d: out of memory for a %llu-byte message", bs->rank, (unsigned long long)c->u.hdr.size);
      setRecvState(bs, c->peer, MEND_BS_LINK_LOST);
      dropRx(bs, i);
      return 0;
    }
    m->tag = c->u.hdr.tag;
    m->size = c->u.hdr.size;
    if (m->size == 0) enqueue(bs, c->peer, m);  /* no payload to wait for */
    else c->msg = m;
  }
}

/* At most MEND_BS_MAX_UNPROVEN connections wait for their handshake: the oldest makes room once it
 * had MEND_BS_UNPROVEN_GRACE_MS to prove itself.  Returns 0 when there is no room yet (a burst of real
 * peers then waits in the listen backlog rather than being cut short). */
static int roomForUnproven(struct mendBootstrap* bs) {
  int n = 0, oldest = -1;
  for (int i = 0; i < bs->nRx; i++) {
    if (bs->rx[i].peer >= 0) continue;
    n++;
    if (oldest < 0 || bs->rx[i].deadline < bs->rx[oldest].deadline) oldest = i;
  }
  if (n < MEND_BS_MAX_UNPROVEN) return 1;
  if (bs->rx[oldest].deadline - bs->helloMs + MEND_BS_UNPROVEN_GRACE_MS > mendTimeMs()) return 0;
  WARN_SPARSE(1000, "Bootstrap rank %d: %d connections have not proven the key; closing the oldest", bs->rank, n);
  dropRx(bs, oldest);
  return 1;
}

static void acceptNew(struct mendBootstrap* bs) {
  for (;;) {
    if (!roomForUnproven(bs)) {
      bs->acceptPauseUntil = mendTimeMs() + BS_FULL_PAUSE_MS;
      return;
    }
    int fd = accept4(bs->listenFd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      /* Out of descriptors or memory: the listener stays readable, so wait instead of spinning. */
      WARN_SPARSE(5000, "Bootstrap rank %d: accept failed: %m; pausing %d ms", bs->rank, BS_ACCEPT_PAUSE_MS);
      bs->acceptPauseUntil = mendTimeMs() + BS_ACCEPT_PAUSE_MS;
      return;
    }
    struct mendBsRx c = {.fd = fd, .peer = -1, .deadline = mendTimeMs() + bs->helloMs};
    if (!mendBsSendChallenge(fd, c.nonce)) { close(fd); continue; }
    if (bs->nRx == bs->maxRx) {
      int n = bs->maxRx ? 2 * bs->maxRx : 16;
      struct mendBsRx* r = realloc(bs->rx, (size_t)n * sizeof(*r));
      if (r == NULL) { close(fd); return; }
      bs->rx = r;
      bs->maxRx = n;
    }
    bs->rx[bs->nRx++] = c;
  }
}

/* Close connections that did not prove the key in time. */
static void expireUnproven(struct mendBootstrap* bs) {
  int64_t now = mendTimeMs();
  for (int i = bs->nRx - 1; i >= 0; i--) {
    if (bs->rx[i].peer >= 0 || bs->rx[i].deadline > now) continue;
    INFO_SPARSE(NCCL_BOOTSTRAP, 1000, "Bootstrap rank %d: closing a connection with no handshake after %lld ms "
                "(MEND_BOOTSTRAP_HELLO_TIMEOUT)", bs->rank, (long long)bs->helloMs);
    dropRx(bs, i);
  }
}

/* Our outgoing connection became readable: the peer only writes a BYE there before hanging up, so
 * EOF after its BYE there, after ours (it hangs up once it has read it), or once its own link to us
 * closed with a BYE (it is closing in order; a reset can overtake the BYE written back) is an
 * orderly close; EOF otherwise is a lost peer. */
static void checkSendFd(struct mendBootstrap* bs, int peer, int fd) {
  struct mendBsPeer* p = &bs->peers[peer];
  char* dst = (char*)&p->back;
  ssize_t n = p->backOff < sizeof(p->back) ? recv(fd, dst + p->backOff, sizeof(p->back) - p->backOff, MSG_DONTWAIT)
                                           : recv(fd, (char[16]){0}, 16, MSG_DONTWAIT);
  if (n > 0) {
    if (p->backOff < sizeof(p->back)) p->backOff += (size_t)n;
    return;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  pthread_mutex_lock(&bs->lock);
  int peerSaidBye = p->recvState == MEND_BS_LINK_BYE; /* its own link to us closed in order */
  pthread_mutex_unlock(&bs->lock);
  int bye = (p->backOff == sizeof(p->back) && p->back.type == MEND_BS_BYE) || atomic_load(&p->byeSaid) || peerSaidBye;
  int prev = MEND_BS_LINK_OPEN;
  int changed = atomic_compare_exchange_strong(&p->sendState, &prev, bye ? MEND_BS_LINK_BYE : MEND_BS_LINK_LOST);
  if (bye) TRACE(NCCL_BOOTSTRAP, "Bootstrap rank %d: rank %d closed", bs->rank, peer);
  else INFO(NCCL_BOOTSTRAP, "Bootstrap rank %d: connection to rank %d lost", bs->rank, peer);
  pthread_mutex_lock(&bs->lock);
  pthread_cond_broadcast(&bs->cond);
  pthread_mutex_unlock(&bs->lock);
  if (changed) peerGone(bs, peer, bye ? MEND_BS_LINK_BYE : MEND_BS_LINK_LOST);
}

static void* rxThread(void* arg) {
  struct mendBootstrap* bs = arg;
  int cap = 2 + bs->nRanks + 16;
  struct pollfd* pfd = malloc((size_t)cap * sizeof(*pfd));
  int* who = malloc((size_t)cap * sizeof(*who));  /* >= 0: rx index; <= -2: -(peer)-2 of a send fd */
  while (pfd && who && !atomic_load(&bs->stop)) {
    expireUnproven(bs);  /* here, while no pollfd refers to an rx entry by index */
    int need = 2 + bs->nRx + bs->nRanks;
    if (need > cap) {
      cap = 2 * need;
      struct pollfd* p2 = realloc(pfd, (size_t)cap * sizeof(*pfd));
      int* w2 = realloc(who, (size_t)cap * sizeof(*who));
      if (p2) pfd = p2;
      if (w2) who = w2;
      if (!p2 || !w2) break;
    }
    int n = 0;
    pfd[n++] = (struct pollfd){.fd = bs->wakeFd, .events = POLLIN};
    int listening = mendTimeMs() >= bs->acceptPauseUntil;  /* a negative fd is not polled */
    pfd[n++] = (struct pollfd){.fd = listening ? bs->listenFd : -1, .events = POLLIN};
    for (int i = 0; i < bs->nRx; i++) { who[n] = i; pfd[n++] = (struct pollfd){.fd = bs->rx[i].fd, .events = POLLIN}; }
    for (int p = 0; p < bs->nRanks; p++) {
      int fd = atomic_load(&bs->peers[p].sendFd);
      if (fd < 0 || atomic_load(&bs->peers[p].sendState) != MEND_BS_LINK_OPEN) continue;
      who[n] = -p - 2;
      pfd[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
    }
    if (atomic_load(&bs->closing) && !bs->rxByeSent) {
      for (int i = 0; i < bs->nRx; i++)
        if (bs->rx[i].peer >= 0) sayByeBack(bs->rx[i].fd);
      pthread_mutex_lock(&bs->lock);
      atomic_store(&bs->rxByeSent, 1);
      pthread_cond_broadcast(&bs->cond); /* Close waits for it before the sockets close */
      pthread_mutex_unlock(&bs->lock);
    }
    int64_t pause = listening ? BS_POLL_MS : bs->acceptPauseUntil - mendTimeMs();
    int rc = poll(pfd, (nfds_t)n, pause < 1 ? 1 : pause < BS_POLL_MS ? (int)pause : BS_POLL_MS);
    if (rc <= 0) continue;
    if (pfd[0].revents) { uint64_t v; (void)!read(bs->wakeFd, &v, sizeof(v)); }
    /* Incoming connections first, so a peer's BYE is seen before the hang-up of our link to it.
     * Walk backwards: readRx may swap the last rx entry into a dropped one's place. */
    for (int k = n - 1; k >= 2; k--)
      if (pfd[k].revents && who[k] >= 0 && who[k] < bs->nRx) readRx(bs, who[k]);
    for (int k = n - 1; k >= 2; k--)
      if (pfd[k].revents && who[k] < 0) checkSendFd(bs, -who[k] - 2, pfd[k].fd);
    if (pfd[1].revents) acceptNew(bs);
  }
  free(pfd);
  free(who);
  return NULL;
}

/* ---------------------------------------------------------------- create / teardown */

ncclResult_t mendBsCreate(struct ncclComm* comm, uint64_t magic, const uint8_t key[MEND_MAC_KEY_BYTES], int listenFd,
                          const union mendSocketAddr* listenAddr, union mendSocketAddr* peerAddrs,
                          struct mendBootstrap** out) {
  ncclResult_t res = ncclSuccess;
  struct mendBootstrap* bs = NULL;
  MENDCHECKGOTO(MENDCALLOC(bs, 1), res, fail_close_listen);
  MENDCHECKGOTO(MENDCALLOC(bs->peers, comm->nRanks), res, fail_free_bs);
  bs->rank = comm->rank;
  bs->nRanks = comm->nRanks;
  bs->magic = magic;
  memcpy(bs->key, key, sizeof(bs->key));
  bs->maxMsg = MEND_BS_MSG_BASE + (size_t)bs->nRanks * 64;
  int64_t maxBuf = mendParamBootstrapMaxBuffered();
  bs->maxBuffered = maxBuf > 0 ? (size_t)maxBuf : 0;
  bs->helloMs = mendParamBootstrapHelloTimeout();
  bs->commAbort = &comm->abortFlag;
  atomic_store(&bs->useCommAbort, 1);
  bs->timeoutMs = mendParamBootstrapTimeout();
  bs->listenFd = listenFd;
  bs->listenAddr = *listenAddr;
  bs->peerAddrs = peerAddrs;
  for (int p = 0; p < bs->nRanks; p++) {
    pthread_mutex_init(&bs->peers[p].sendLock, NULL);
    atomic_store(&bs->peers[p].sendFd, -1);
  }
  pthread_mutex_init(&bs->lock, NULL);
  pthread_mutex_init(&bs->goneLock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&bs->cond, &ca);
  pthread_condattr_destroy(&ca);
  bs->wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (bs->wakeFd < 0) {
    WARN("eventfd failed: %m");
    res = ncclSystemError;
    goto fail_free_peers;
  }
  int err = pthread_create(&bs->thread, NULL, rxThread, bs);
  if (err != 0) {
    errno = err;
    WARN("Cannot start the bootstrap receiver thread: %m");
    res = ncclSystemError;
    goto fail_close_wake;
  }
  bs->threadRunning = 1;
  *out = bs;
  return ncclSuccess;
fail_close_wake:
  close(bs->wakeFd);
fail_free_peers:
  free(bs->peers);
fail_free_bs:
  free(bs);
fail_close_listen:
  close(listenFd);
  free(peerAddrs);
  return res;
}

/* Join the receiver thread within `ms`; a thread that does not stop is left detached (never freed under it). */
static int joinThread(struct mendBootstrap* bs, int64_t ms) {
  if (!bs->threadRunning) return 1;
  atomic_store(&bs->stop, 1);
  wakeThread(bs);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
  if (pthread_timedjoin_np(bs->thread, NULL, &ts) != 0) {
    WARN("Bootstrap rank %d: receiver thread did not stop within %lld ms; leaving it", bs->rank, (long long)ms);
    pthread_detach(bs->thread);
    return 0;
  }
  bs->threadRunning = 0;
  return 1;
}

/* Wait (bounded) until no other thread is inside a bootstrap call. */
static int waitUsers(struct mendBootstrap* bs, int64_t ms) {
  int64_t until = mendTimeMs() + ms;
  while (atomic_load(&bs->users) > 0) {
    if (mendTimeMs() > until) return 0;
    pthread_mutex_lock(&bs->lock);
    pthread_cond_broadcast(&bs->cond);
    pthread_mutex_unlock(&bs->lock);
    usleep(1000);
  }
  return 1;
}

static void freeAll(struct mendBootstrap* bs) {
  for (int i = 0; i < bs->nRx; i++) { free(bs->rx[i].msg); close(bs->rx[i].fd); }
  free(bs->rx);
  for (int p = 0; p < bs->nRanks; p++) {
    int fd = atomic_load(&bs->peers[p].sendFd);
    if (fd >= 0) close(fd);
    for (struct mendBsMsg* m = bs->peers[p].qHead; m;) {
      struct mendBsMsg* next = m->next;
      free(m);
      m = next;
    }
    pthread_mutex_destroy(&bs->peers[p].sendLock);
  }
  if (bs->listenFd >= 0) close(bs->listenFd);
  if (bs->wakeFd >= 0) close(bs->wakeFd);
  pthread_cond_destroy(&bs->cond);
  pthread_mutex_destroy(&bs->lock);
  pthread_mutex_destroy(&bs->goneLock);
  free(bs->peers);
  free(bs->peerAddrs);
  free(bs);
}

ncclResult_t mendBootstrapAbort(struct mendBootstrap* bs) {
  if (bs == NULL) return ncclSuccess;
  atomic_store(&bs->abort, 1);
  /* Shut every socket down so a sender stuck on a full buffer (peer stopped) returns at once. */
  for (int p = 0; p < bs->nRanks; p++) {
    int fd = atomic_load(&bs->peers[p].sendFd);
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
  }
  int64_t bound = mendParamAbortTimeout();
  int joined = joinThread(bs, bound);
  int idle = waitUsers(bs, bound);
  if (!joined || !idle) {
    WARN("Bootstrap rank %d: abort left %d threads inside the bootstrap; its memory is not freed", bs->rank,
         atomic_load(&bs->users));
    return ncclSuccess;
  }
  freeAll(bs);
  return ncclSuccess;
}

void mendBootstrapDetachAbort(struct mendBootstrap* bs) {
  if (bs) atomic_store(&bs->useCommAbort, 0);
}

int mendBootstrapPeerState(struct mendBootstrap* bs, int peer) {
  if (bs == NULL || peer < 0 || peer >= bs->nRanks) return MEND_BS_LINK_LOST;
  pthread_mutex_lock(&bs->lock);
  int s = bs->peers[peer].recvState;
  pthread_mutex_unlock(&bs->lock);
  int t = atomic_load(&bs->peers[peer].sendState);
  return s > t ? s : t;
}

/* ---------------------------------------------------------------- send */

/* Write all bytes on a non-blocking socket; bounded by deadline and the abort flags. */
static ncclResult_t writeAll(struct mendBootstrap* bs, int fd, int peer, const void* data, size_t size,
                             int64_t deadline) {
  size_t off = 0;
  for (;;) {
    if (mendFaultCheck("bootstrap.send")) {
      WARN("Bootstrap rank %d: send to rank %d failed: injected fault (bootstrap.send)", bs->rank, peer);
      return ncclSystemError;
    }
    ncclResult_t r = mendSocketProgress(fd, 1, (void*)data, size, &off);
    if (r != ncclSuccess) {
      WARN("Bootstrap rank %d: send to rank %d failed", bs->rank, peer);
      return r;
    }
    if (off == size) return ncclSuccess;
    if (mendBsAborted(bs, NULL)) return ncclInternalError;
    if (mendTimeMs() > deadline) {
      WARN("Bootstrap rank %d: send to rank %d timed out after %lld ms (%zu of %zu bytes; peer stopped?)", bs->rank,
           peer, (long long)bs->timeoutMs, off, size);
      return ncclRemoteError;
    }
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    (void)poll(&p, 1, BS_WAIT_SLICE_MS);
  }
}

static ncclResult_t connectPeer(struct mendBootstrap* bs, int peer) {
  int fd = -1;
  char name[MEND_SOCKET_NAME_MAXLEN];
  ncclResult_t r = mendSocketConnect(&bs->peerAddrs[peer], &fd, sockFlag(bs), bs->timeoutMs);
  if (r != ncclSuccess) {
    if (!mendBsAborted(bs, NULL))
      WARN("Bootstrap rank %d: cannot connect to rank %d at %s", bs->rank, peer,
           mendSocketAddrStr(&bs->peerAddrs[peer], name));
    return mendBsAborted(bs, NULL) ? ncclInternalError : r;
  }
  uint8_t nonce[MEND_BS_NONCE_BYTES];
  r = mendBsRecvChallenge(fd, nonce, sockFlag(bs), bs->timeoutMs, &bs->peerAddrs[peer]);
  if (r != ncclSuccess) {
    if (!mendBsAborted(bs, NULL)) WARN("Bootstrap rank %d: rank %d did not send its challenge", bs->rank, peer);
    close(fd);
    return mendBsAborted(bs, NULL) ? ncclInternalError : r;
  }
  struct mendBsHandshake hs = {.magic = bs->magic ^ MEND_BS_HANDSHAKE_MAGIC, .rank = bs->rank, .nRanks = bs->nRanks};
  hs.mac = mendBsHandshakeMac(bs->key, nonce, &hs);
  r = writeAll(bs, fd, peer, &hs, sizeof(hs), mendTimeMs() + bs->timeoutMs);
  if (r != ncclSuccess) {
    close(fd);
    return r;
  }
  atomic_store(&bs->peers[peer].sendFd, fd);
  wakeThread(bs);  /* so the receiver watches the new connection for the peer's hang-up */
  return ncclSuccess;
}

static ncclResult_t sendToSelf(struct mendBootstrap* bs, int tag, const void* data, size_t size) {
  struct mendBsMsg* m = malloc(sizeof(*m) + size);
  if (m == NULL) {
    WARN("Bootstrap: out of memory for a %zu-byte message", size);
    return ncclSystemError;
  }
  m->tag = tag;
  m->size = size;
  if (size) memcpy(m->data, data, size);
  reserveBuffered(bs, bs->rank, msgCost(size), 0);
  enqueue(bs, bs->rank, m);
  return ncclSuccess;
}

static ncclResult_t sendLocked(struct mendBootstrap* bs, int peer, int tag, const void* data, size_t size) {
  struct mendBsPeer* p = &bs->peers[peer];
  int state = atomic_load(&p->sendState);
  if (state != MEND_BS_LINK_OPEN) {
    WARN("Bootstrap rank %d: cannot send to rank %d: %s", bs->rank, peer,
         state == MEND_BS_LINK_BYE ? "it closed its communicator" : "connection lost");
    return ncclRemoteError;
  }
  if (atomic_load(&p->sendFd) < 0) MENDCHECK(connectPeer(bs, peer));
  struct mendBsHeader h = {.type = MEND_BS_DATA, .tag = tag, .size = size};
  int64_t deadline = mendTimeMs() + bs->timeoutMs;
  ncclResult_t r = writeAll(bs, atomic_load(&p->sendFd), peer, &h, sizeof(h), deadline);
  if (r == ncclSuccess && size) r = writeAll(bs, atomic_load(&p->sendFd), peer, data, size, deadline);
  if (r != ncclSuccess && r != ncclInternalError) {
    int open = MEND_BS_LINK_OPEN;  /* a half-written message: the stream is unusable */
    atomic_compare_exchange_strong(&p->sendState, &open, MEND_BS_LINK_LOST);
  }
  return r;
}

ncclResult_t mendBootstrapSend(struct mendBootstrap* bs, int peer, int tag, const void* data, size_t size) {
  if (bs == NULL || peer < 0 || peer >= bs->nRanks || (data == NULL && size > 0) || size > bs->maxMsg) {
    WARN("mendBootstrapSend: invalid argument (bootstrap %p, peer %d of %d, data %p, size %zu; at most %zu)",
         (void*)bs, peer, bs ? bs->nRanks : 0, data, size, bs ? bs->maxMsg : 0);
    return ncclInvalidArgument;
  }
  enterCall(bs);
  ncclResult_t r;
  if (mendBsAborted(bs, NULL)) {
    r = ncclInternalError;
  } else if (peer == bs->rank) {
    r = sendToSelf(bs, tag, data, size);
  } else {
    pthread_mutex_lock(&bs->peers[peer].sendLock);
    r = sendLocked(bs, peer, tag, data, size);
    pthread_mutex_unlock(&bs->peers[peer].sendLock);
  }
  leaveCall(bs);
  return r;
}

/* ---------------------------------------------------------------- receive */

static struct mendBsMsg* takeMsg(struct mendBsPeer* p, int tag) {
  struct mendBsMsg* prev = NULL;
  for (struct mendBsMsg* m = p->qHead; m; prev = m, m = m->next) {
    if (m->tag != tag) continue;
    if (prev) prev->next = m->next; else p->qHead = m->next;
    if (p->qTail == m) p->qTail = prev;
    p->buffered -= msgCost(m->size);
    return m;
  }
  return NULL;
}

static void condWaitMs(struct mendBootstrap* bs, int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_nsec += (long)ms * 1000000;
  if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
  pthread_cond_timedwait(&bs->cond, &bs->lock, &ts);
}

static ncclResult_t deliver(struct mendBootstrap* bs, int peer, int tag, struct mendBsMsg* m, void* data, size_t size) {
  ncclResult_t r = ncclSuccess;
  if (m->size != size) {
    WARN("Bootstrap rank %d: message from rank %d (tag %d) has %zu bytes, the receiver expected %zu", bs->rank, peer,
         tag, m->size, size);
    r = ncclInternalError;
  } else if (size) {
    memcpy(data, m->data, size);
  }
  free(m);
  return r;
}

ncclResult_t mendBsRecvExtra(struct mendBootstrap* bs, int peer, int tag, void* data, size_t size,
                             _Atomic int* extra) {
  if (bs == NULL || peer < 0 || peer >= bs->nRanks || (data == NULL && size > 0)) {
    WARN("mendBootstrapRecv: invalid argument (bootstrap %p, peer %d of %d, data %p, size %zu)", (void*)bs, peer,
         bs ? bs->nRanks : 0, data, size);
    return ncclInvalidArgument;
  }
  if (mendFaultCheck("bootstrap.recv")) {
    WARN("Bootstrap rank %d: recv from rank %d failed: injected fault (bootstrap.recv)", bs->rank, peer);
    return ncclSystemError;
  }
  enterCall(bs);
  ncclResult_t r = ncclSuccess;
  int64_t deadline = mendTimeMs() + bs->timeoutMs;
  struct mendBsMsg* m = NULL;
  pthread_mutex_lock(&bs->lock);
  for (;;) {
    struct mendBsPeer* p = &bs->peers[peer];
    if ((m = takeMsg(p, tag)) != NULL) break;
    if (mendBsAborted(bs, extra)) { r = ncclInternalError; break; }
    if (p->recvState != MEND_BS_LINK_OPEN) {
      WARN("Bootstrap rank %d: rank %d %s before sending the message with tag %d", bs->rank, peer,
           p->recvState == MEND_BS_LINK_BYE ? "closed its communicator" : "was lost (connection broken)", tag);
      r = ncclRemoteError;
      break;
    }
    if (mendTimeMs() > deadline) {
      WARN("Bootstrap rank %d: no message from rank %d (tag %d) within %lld ms (MEND_BOOTSTRAP_TIMEOUT)", bs->rank,
           peer, tag, (long long)bs->timeoutMs);
      r = ncclRemoteError;
      break;
    }
    condWaitMs(bs, BS_WAIT_SLICE_MS);
  }
  pthread_mutex_unlock(&bs->lock);
  if (m) r = deliver(bs, peer, tag, m, data, size);
  leaveCall(bs);
  return r;
}

ncclResult_t mendBootstrapRecv(struct mendBootstrap* bs, int peer, int tag, void* data, size_t size) {
  return mendBsRecvExtra(bs, peer, tag, data, size, NULL);
}

ncclResult_t mendBootstrapRecvAny(struct mendBootstrap* bs, int tag, int* peer, void* data, size_t size,
                                  int64_t timeoutMs) {
  if (bs == NULL || peer == NULL || (data == NULL && size > 0)) {
    WARN("mendBootstrapRecvAny: invalid argument");
    return ncclInvalidArgument;
  }
  enterCall(bs);
  ncclResult_t r = ncclSuccess;
  int64_t deadline = timeoutMs < 0 ? -1 : mendTimeMs() + timeoutMs;
  struct mendBsMsg* m = NULL;
  int from = -1;
  pthread_mutex_lock(&bs->lock);
  for (;;) {
    uint64_t best = UINT64_MAX;
    for (int p = 0; p < bs->nRanks; p++)
      for (struct mendBsMsg* q = bs->peers[p].qHead; q; q = q->next)
        if (q->tag == tag && q->seq < best) { best = q->seq; from = p; break; }
    if (from >= 0) { m = takeMsg(&bs->peers[from], tag); break; }
    if (mendBsAborted(bs, NULL)) { r = ncclInternalError; break; }
    if (deadline >= 0 && mendTimeMs() >= deadline) { r = ncclInProgress; break; }
    int ms = BS_WAIT_SLICE_MS;
    if (deadline >= 0 && deadline - mendTimeMs() < ms) ms = (int)(deadline - mendTimeMs());
    condWaitMs(bs, ms > 0 ? ms : 1);
  }
  pthread_mutex_unlock(&bs->lock);
  if (m) {
    *peer = from;
    r = deliver(bs, from, tag, m, data, size);
  }
  leaveCall(bs);
  return r;
}

/* ---------------------------------------------------------------- orderly close */

/* Say BYE on our connection to `peer` and stop writing; the peer hangs up when it has read it. */
static int sayBye(struct mendBootstrap* bs, int peer, int64_t deadline) {
  struct mendBsPeer* p = &bs->peers[peer];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 50 * 1000000L;
  if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
  if (pthread_mutex_timedlock(&p->sendLock, &ts) != 0) return 0;
  int fd = atomic_load(&p->sendFd);
  int said = 0;
  if (fd >= 0 && atomic_load(&p->sendState) == MEND_BS_LINK_OPEN) {
    struct mendBsHeader h = {.type = MEND_BS_BYE};
    atomic_store(&p->byeSaid, 1); /* before it leaves: the peer's hang-up can race our own receiver */
    size_t off = 0;
    while (off < sizeof(h) && mendTimeMs() < deadline) {
      ssize_t n = send(fd, (char*)&h + off, sizeof(h) - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) { off += (size_t)n; continue; }
      if (n < 0 && errno != EAGAIN && errno != EINTR) break;
      struct pollfd q = {.fd = fd, .events = POLLOUT};
      (void)poll(&q, 1, 5);
    }
    shutdown(fd, SHUT_WR);
    said = off == sizeof(h);
  }
  pthread_mutex_unlock(&p->sendLock);
  return said;
}

ncclResult_t mendBootstrapClose(struct mendBootstrap* bs) {
  if (bs == NULL) return ncclSuccess;
  int64_t deadline = mendTimeMs() + mendParamBootstrapCloseTimeout();
  int n = bs->nRanks, pending = 0;
  char* waitFor = calloc((size_t)n, 1);
  atomic_store(&bs->closing, 1);
  wakeThread(bs);
  for (int p = 0; p < n; p++) {
    if (p == bs->rank || mendBsAborted(bs, NULL)) continue;
    if (sayBye(bs, p, deadline) && waitFor) { waitFor[p] = 1; pending++; }
  }
  /* Wait until every peer we said BYE to has hung up (a stopped peer costs the close timeout), and
   * until the receiver said BYE back on every incoming connection: closing those before it did
   * would read as a lost peer to a rank that only ever sent to us. */
  pthread_mutex_lock(&bs->lock);
  while (!atomic_load(&bs->rxByeSent) && mendTimeMs() < deadline && !mendBsAborted(bs, NULL))
    condWaitMs(bs, BS_WAIT_SLICE_MS);
  while (pending > 0 && mendTimeMs() < deadline && !mendBsAborted(bs, NULL)) {
    pending = 0;
    for (int p = 0; p < n; p++)
      if (waitFor[p] && atomic_load(&bs->peers[p].sendState) == MEND_BS_LINK_OPEN) pending++;
    if (pending) condWaitMs(bs, BS_WAIT_SLICE_MS);
  }
  pthread_mutex_unlock(&bs->lock);
  if (pending > 0)
    INFO(NCCL_BOOTSTRAP, "Bootstrap rank %d: %d peers did not answer BYE within %lld ms", bs->rank, pending,
         (long long)mendParamBootstrapCloseTimeout());
  free(waitFor);
  atomic_store(&bs->abort, 1);  /* wakes any caller still waiting, then tear down as abort does */
  return mendBootstrapAbort(bs);
}
