/*
 * Socket Net connections: listen, connect and accept without ever blocking, and close.
 *
 * The connector opens 1 + nsocks sockets to the listen address at once (non-blocking connects) and
 * sends a hello on each: (magic, index, nsocks, listenToken, connToken, chunk, inline).  connect
 * returns a NULL comm until every socket is connected and has sent its hello; its progress lives in
 * the caller's handle, as in NCCL.  accept collects accepted sockets and their hellos in the listen
 * comm and returns a comm once every socket of one connToken is there.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "checks.h"
#include "misc/fault.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "transport/net_socket.h"
#include "transport/net_socket_wire.h"

#define RETRY_MS 20  /* pause before retrying a refused connect */

_Static_assert(sizeof(struct mendSocketHandle) <= MEND_NET_HANDLE_MAXSIZE, "socket handle too large");

static void setPort0(union mendSocketAddr* a) {
  if (a->sa.sa_family == AF_INET6) a->sin6.sin6_port = 0;
  else a->sin.sin_port = 0;
}

/* A comm with its sockets closed (-1) and request slots empty. */
static ncclResult_t commAlloc(int isSend, int dev, int nsocks, struct mendSocketComm** out) {
  struct mendSocketComm* comm;
  ncclResult_t res;
  MENDCHECK(MENDCALLOC(comm, 1));
  MENDCHECKGOTO(MENDCALLOC(comm->socks, nsocks), res, fail_free_comm);
  MENDCHECKGOTO(MENDCALLOC(comm->rxBuf, isSend ? 1 : MEND_SOCKET_RXBUF), res, fail_free_socks);
  comm->isSend = isSend;
  comm->dev = dev;
  comm->nsocks = nsocks;
  comm->ctrlFd = -1;
  for (int i = 0; i < nsocks; i++) comm->socks[i].fd = -1, comm->socks[i].owner = -1;
  for (int t = 0; t < MEND_SOCKET_MAX_THREADS; t++) comm->threads[t].efd = -1;
  *out = comm;
  return ncclSuccess;
fail_free_socks:
  free(comm->socks);
fail_free_comm:
  free(comm);
  return res;
}

/* Free a comm whose helpers are stopped (or never started). */
static void commFree(struct mendSocketComm* comm) {
  if (comm->ctrlFd >= 0) close(comm->ctrlFd);
  for (int i = 0; i < comm->nsocks; i++)
    if (comm->socks[i].fd >= 0) close(comm->socks[i].fd);
  if (comm->fds)
    for (int i = 0; i <= comm->nsocks; i++)
      if (comm->fds[i] >= 0) close(comm->fds[i]);
  free(comm->fds);
  free(comm->conn);
  free(comm->rxBuf);
  free(comm->socks);
  free(comm);
}

/* ---- listen ---- */

ncclResult_t mendNetSocketListen(void* ctx, int dev, void* handle, void** listenComm) {
  MENDARGCHECK(handle != NULL && listenComm != NULL, ncclInvalidArgument, "NET/Socket: listen: handle or listenComm is NULL");
  *listenComm = NULL;
  union mendSocketAddr addr, bound;
  MENDCHECK(mendNetSocketDevAddr(dev, &addr, NULL));
  if (mendFaultCheck("net.listen")) {
    WARN("NET/Socket: listen on device %d: injected fault at net.listen", dev);
    return ncclSystemError;
  }
  setPort0(&addr);
  struct mendSocketListenComm* lc;
  ncclResult_t res;
  MENDCHECK(MENDCALLOC(lc, 1));
  for (int i = 0; i < MEND_SOCKET_MAX_PENDING; i++) lc->pend[i].fd = -1;
  MENDCHECKGOTO(mendSocketListen(&addr, &lc->fd, &bound), res, fail_free);
  lc->dev = dev;
  lc->token = mendNetSocketToken();
  /* The handle is the caller's bytes with no alignment promised (NCCL keeps handles in char arrays). */
  struct mendSocketHandle h = { .magic = MEND_SOCKET_HELLO_MAGIC, .listenToken = lc->token, .addr = bound };
  memset(handle, 0, MEND_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof(h));
  *listenComm = lc;
  return ncclSuccess;
fail_free:
  free(lc);
  return res;
}

/* ---- connect ---- */

static ncclResult_t connStart(int dev, const struct mendSocketHandle* h, struct mendSocketComm** out) {
  int nthreads, nsocks;
  size_t chunk, inl;
  mendNetSocketConfig(&nthreads, &nsocks, &chunk, &inl);
  struct mendSocketComm* comm;
  ncclResult_t res;
  MENDCHECK(commAlloc(1, dev, nsocks, &comm));
  comm->nthreads = nthreads;
  comm->chunkSize = chunk;
  comm->inlineMax = inl;
  comm->remote = h->addr;
  mendSocketAddrStr(&h->addr, comm->peer);
  MENDCHECKGOTO(MENDCALLOC(comm->fds, nsocks + 1), res, fail_free);
  MENDCHECKGOTO(MENDCALLOC(comm->conn, nsocks + 1), res, fail_free);
  for (int i = 0; i <= nsocks; i++) comm->fds[i] = -1;
  comm->hello = (struct mendSocketHello){ .magic = MEND_SOCKET_HELLO_MAGIC, .nsocks = (uint16_t)nsocks,
    .listenToken = h->listenToken, .connToken = mendNetSocketToken(), .chunkSize = (uint32_t)chunk,
    .inlineMax = (uint32_t)inl };
  comm->deadlineMs = mendTimeMs() + mendParamConnectTimeout();
  *out = comm;
  return ncclSuccess;
fail_free:
  commFree(comm);
  return res;
}

static int retryable(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH || err == EHOSTUNREACH || err == EAGAIN;
}

static ncclResult_t connFailed(struct mendSocketComm* comm, int err, const char* what) {
  WARN("NET/Socket: connect to %s: %s: %s", comm->peer, what, strerror(err));
  return err == ECONNRESET || err == EPIPE || err == ECONNREFUSED ? ncclRemoteError : ncclSystemError;
}

/* Move socket i of a connecting comm one step: open, connected, hello sent. */
static ncclResult_t connStep(struct mendSocketComm* comm, int i, int64_t now) {
  struct mendSocketConnecting* c = &comm->conn[i];
  int* fd = &comm->fds[i];
  if (c->state == 0) {
    if (now < c->retryAtMs) return ncclSuccess;
    *fd = socket(comm->remote.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*fd < 0) return connFailed(comm, errno, "socket()");
    MENDCHECK(mendNetSocketSetOpts(*fd, i > 0));
    if (connect(*fd, &comm->remote.sa, mendSocketAddrLen(&comm->remote)) == 0) c->state = 2;
    else if (errno == EINPROGRESS || errno == EINTR) c->state = 1;
    else if (retryable(errno)) goto retry;
    else return connFailed(comm, errno, "connect()");
  }
  if (c->state == 1) {
    struct pollfd p = { .fd = *fd, .events = POLLOUT };
    if (poll(&p, 1, 0) <= 0) return ncclSuccess;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(*fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err == 0) c->state = 2;
    else if (retryable(err)) { errno = err; goto retry; }
    else return connFailed(comm, err, "connect()");
  }
  if (c->state == 2) {
    struct mendSocketHello hello = comm->hello;
    hello.index = (uint16_t)i;
    ssize_t n = send(*fd, (char*)&hello + c->helloOff, sizeof(hello) - c->helloOff, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return connFailed(comm, errno, "sending hello");
    if (n > 0) c->helloOff += (size_t)n;
    if (c->helloOff == sizeof(hello)) c->state = 3;
  }
  return ncclSuccess;
retry:
  INFO(NCCL_NET, "NET/Socket: connect to %s: %s; retrying", comm->peer, strerror(errno));
  close(*fd);
  *fd = -1;
  c->state = 0;
  c->retryAtMs = now + RETRY_MS;
  return ncclSuccess;
}

/* Every socket connected and greeted: move them into place and start the helpers. */
static ncclResult_t connFinish(struct mendSocketComm* comm) {
  comm->ctrlFd = comm->fds[0];
  for (int i = 0; i < comm->nsocks; i++) comm->socks[i].fd = comm->fds[i + 1];
  free(comm->fds);
  free(comm->conn);
  comm->fds = NULL;
  comm->conn = NULL;
  INFO(NCCL_NET, "NET/Socket: connected to %s: %d data sockets, %d helper threads, chunk %zu, inline %zu",
       comm->peer, comm->nsocks, comm->nthreads, comm->chunkSize, comm->inlineMax);
  return mendNetSocketStartThreads(comm);
}

/* Comms between connStart and the end of their connect.  Connect progress lives in the caller's
 * handle (as in NCCL), as a pointer; a handle also comes from the network, so that pointer is used
 * only when it is one of these, never because a handle says so. */
static pthread_mutex_t stageLock = PTHREAD_MUTEX_INITIALIZER;
static struct mendSocketComm** stageComms; /* the comms connecting now */
static int nStage, capStage;               /* used / allocated */

static ncclResult_t stageAdd(struct mendSocketComm* comm) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&stageLock);
  if (nStage == capStage) {
    int cap = capStage ? 2 * capStage : 16;
    struct mendSocketComm** n = realloc(stageComms, sizeof(*n) * (size_t)cap);
    if (n == NULL) {
      WARN("NET/Socket: connect: out of memory tracking %d connections in progress", nStage + 1);
      res = ncclSystemError;
    } else {
      stageComms = n;
      capStage = cap;
    }
  }
  if (res == ncclSuccess) stageComms[nStage++] = comm;
  pthread_mutex_unlock(&stageLock);
  return res;
}

/* Is comm connecting (take 0), or was it, now removed (take 1)? */
static int stageFind(const struct mendSocketComm* comm, int take) {
  int found = 0;
  pthread_mutex_lock(&stageLock);
  for (int i = 0; i < nStage && !found; i++) {
    if (stageComms[i] != comm) continue;
    found = 1;
    if (take) stageComms[i] = stageComms[--nStage];
  }
  pthread_mutex_unlock(&stageLock);
  return found;
}

/* connect on an aligned copy of the caller's handle (its progress is kept in h->stage). */
static ncclResult_t connectHandle(int dev, struct mendSocketHandle* h, void** sendComm) {
  MENDARGCHECK(mendSocketHandleParse(h, sizeof(*h), h), ncclInvalidArgument,
               "NET/Socket: connect: the handle was not made by the socket Net's listen");
  ncclResult_t res;
  if (h->stage.state != 0 && (h->stage.state != 1 || !stageFind(h->stage.comm, 0))) {
    WARN("NET/Socket: connect: the handle carries connect progress (state %d) that no connect of this process "
         "started; refused (a handle from the network must come as listen made it)", h->stage.state);
    return ncclInvalidArgument;
  }
  if (h->stage.state == 0) {
    int n;
    MENDCHECK(mendNetSocketDevices(&n));
    MENDARGCHECK(dev >= 0 && dev < n, ncclInvalidArgument, "NET/Socket: connect: device %d out of range (%d devices)", dev, n);
    if (mendFaultCheck("net.connect")) {
      WARN("NET/Socket: connect on device %d: injected fault at net.connect", dev);
      return ncclSystemError;
    }
    MENDCHECK(connStart(dev, h, &h->stage.comm));
    if ((res = stageAdd(h->stage.comm)) != ncclSuccess) {
      commFree(h->stage.comm);
      h->stage = (struct mendSocketConnStage){ 0 };
      return res;
    }
    h->stage.state = 1;
  }
  struct mendSocketComm* comm = h->stage.comm;
  int64_t now = mendTimeMs();
  int done = 1;
  for (int i = 0; i <= comm->nsocks; i++) {
    MENDCHECKGOTO(connStep(comm, i, now), res, fail_free);
    done &= comm->conn[i].state == 3;
  }
  if (!done) {
    if (now <= comm->deadlineMs) return ncclSuccess;
    WARN("NET/Socket: connect to %s timed out after %lld ms", comm->peer, (long long)mendParamConnectTimeout());
    res = ncclRemoteError;
    goto fail_free;
  }
  h->stage = (struct mendSocketConnStage){ 0 };
  stageFind(comm, 1);
  MENDCHECKGOTO(connFinish(comm), res, fail_stop);
  *sendComm = comm;
  return ncclSuccess;
fail_stop:
  if (!mendNetSocketStopThreads(comm)) return res;
  commFree(comm);
  return res;
fail_free:
  h->stage = (struct mendSocketConnStage){ 0 };
  stageFind(comm, 1);
  commFree(comm);
  return res;
}

ncclResult_t mendNetSocketConnect(void* ctx, int dev, void* handle, void** sendComm) {
  MENDARGCHECK(handle != NULL && sendComm != NULL, ncclInvalidArgument, "NET/Socket: connect: handle or sendComm is NULL");
  *sendComm = NULL;
  /* The handle may sit at any address (NCCL keeps handles in char arrays): work on an aligned copy. */
  struct mendSocketHandle h;
  memcpy(&h, handle, sizeof(h));
  ncclResult_t res = connectHandle(dev, &h, sendComm);
  memcpy(handle, &h, sizeof(h));
  return res;
}

/* ---- accept ---- */

static void dropPending(struct mendSocketPending* p) {
  close(p->fd);
  p->fd = -1;
  p->got = 0;
}

/* Accept what the kernel has queued and read hellos, never waiting. */
static void acceptPending(struct mendSocketListenComm* lc) {
  for (;;) {
    int fd = accept4(lc->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;  /* EAGAIN, or an error the next call sees again */
    int slot = -1;
    for (int i = 0; i < MEND_SOCKET_MAX_PENDING && slot < 0; i++)
      if (lc->pend[i].fd < 0) slot = i;
    if (slot < 0 || mendNetSocketSetOpts(fd, 1) != ncclSuccess) {
      WARN_SPARSE(1000, "NET/Socket: accept: %s; connection dropped", slot < 0 ? "too many pending sockets" : "socket options");
      close(fd);
      continue;
    }
    lc->pend[slot] = (struct mendSocketPending){ .fd = fd };
  }
  for (int i = 0; i < MEND_SOCKET_MAX_PENDING; i++) {
    struct mendSocketPending* p = &lc->pend[i];
    if (p->fd < 0 || p->got == sizeof(p->hello)) continue;
    ssize_t n = recv(p->fd, (char*)&p->hello + p->got, sizeof(p->hello) - p->got, MSG_DONTWAIT);
    if (n > 0) p->got += (size_t)n;
    else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      INFO(NCCL_NET, "NET/Socket: accept: a socket closed before its hello");
      dropPending(p);
      continue;
    }
    if (p->got < sizeof(p->hello)) continue;
    if (!mendSocketHelloParse(&p->hello, sizeof(p->hello), lc->token, &p->hello)) {
      WARN_SPARSE(1000, "NET/Socket: accept: dropped a connection with a foreign or corrupt hello");
      dropPending(p);
    }
  }
}

/* Pending sockets of connection `token`, by index; returns how many there are. */
static int groupOf(struct mendSocketListenComm* lc, uint64_t token, int* byIndex, int nsocks) {
  int count = 0;
  for (int i = 0; i <= nsocks; i++) byIndex[i] = -1;
  for (int i = 0; i < MEND_SOCKET_MAX_PENDING; i++) {
    struct mendSocketPending* p = &lc->pend[i];
    if (p->fd < 0 || p->got != sizeof(p->hello) || p->hello.connToken != token) continue;
    if (!mendSocketHelloPlace(&p->hello, nsocks, byIndex, i)) {
      WARN_SPARSE(1000, "NET/Socket: accept: dropped a duplicate or inconsistent socket of a connection");
      dropPending(p);
      continue;
    }
    count++;
  }
  return count;
}

static ncclResult_t acceptBuild(struct mendSocketListenComm* lc, const int* byIndex, const struct mendSocketHello* m,
                                struct mendSocketComm** out) {
  int nthreads, nsocks;
  size_t chunk, inl;
  mendNetSocketConfig(&nthreads, &nsocks, &chunk, &inl);
  struct mendSocketComm* comm;
  MENDCHECK(commAlloc(0, lc->dev, m->nsocks, &comm));
  comm->nthreads = nthreads < m->nsocks ? nthreads : m->nsocks;  /* the receiver's own thread count */
  comm->chunkSize = m->chunkSize;                                   /* the sender's cut */
  comm->inlineMax = m->inlineMax;
  comm->pollMaxNs = mendNetSocketPollMaxNs();
  comm->ctrlFd = lc->pend[byIndex[0]].fd;
  for (int i = 0; i < m->nsocks; i++) comm->socks[i].fd = lc->pend[byIndex[i + 1]].fd;
  for (int i = 0; i <= m->nsocks; i++) lc->pend[byIndex[i]].fd = -1, lc->pend[byIndex[i]].got = 0;
  union mendSocketAddr peer;
  socklen_t len = sizeof(peer);
  if (getpeername(comm->ctrlFd, &peer.sa, &len) == 0) mendSocketAddrStr(&peer, comm->peer);
  else snprintf(comm->peer, sizeof(comm->peer), "(unknown peer)");
  ncclResult_t res = mendNetSocketStartThreads(comm);
  if (res != ncclSuccess) {
    if (mendNetSocketStopThreads(comm)) commFree(comm);
    return res;
  }
  INFO(NCCL_NET, "NET/Socket: accepted from %s: %d data sockets, %d helper threads", comm->peer, comm->nsocks,
       comm->nthreads);
  *out = comm;
  return ncclSuccess;
}

ncclResult_t mendNetSocketAccept(void* listenComm, void** recvComm) {
  struct mendSocketListenComm* lc = listenComm;
  MENDARGCHECK(lc != NULL && recvComm != NULL, ncclInvalidArgument, "NET/Socket: accept: listenComm or recvComm is NULL");
  *recvComm = NULL;
  if (mendFaultCheck("net.accept")) {
    WARN("NET/Socket: accept: injected fault at net.accept");
    return ncclSystemError;
  }
  acceptPending(lc);
  for (int i = 0; i < MEND_SOCKET_MAX_PENDING; i++) {
    struct mendSocketPending* p = &lc->pend[i];
    if (p->fd < 0 || p->got != sizeof(p->hello) || p->hello.index != 0) continue;
    struct mendSocketHello m = p->hello;
    int byIndex[MEND_SOCKET_MAX_SOCKS + 1];
    if (groupOf(lc, m.connToken, byIndex, m.nsocks) == m.nsocks + 1)
      return acceptBuild(lc, byIndex, &m, (struct mendSocketComm**)recvComm);
  }
  return ncclSuccess;
}

/* ---- close ---- */

static ncclResult_t closeComm(struct mendSocketComm* comm, int isSend) {
  if (comm == NULL) return ncclSuccess;
  MENDARGCHECK(comm->isSend == isSend, ncclInvalidArgument, "NET/Socket: close%s on a %s comm", isSend ? "Send" : "Recv",
               comm->isSend ? "send" : "recv");
  /* A helper that does not exit may still touch the comm: keep its memory rather than crash. */
  if (!mendNetSocketStopThreads(comm)) return ncclSystemError;
  commFree(comm);
  return ncclSuccess;
}

ncclResult_t mendNetSocketCloseSend(void* sendComm) { return closeComm(sendComm, 1); }
ncclResult_t mendNetSocketCloseRecv(void* recvComm) { return closeComm(recvComm, 0); }

ncclResult_t mendNetSocketCloseListen(void* listenComm) {
  struct mendSocketListenComm* lc = listenComm;
  if (lc == NULL) return ncclSuccess;
  for (int i = 0; i < MEND_SOCKET_MAX_PENDING; i++)
    if (lc->pend[i].fd >= 0) close(lc->pend[i].fd);
  close(lc->fd);
  free(lc);
  return ncclSuccess;
}
