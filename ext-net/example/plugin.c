/*
 * Example network plugin: plain TCP, one socket per connection, non-blocking progress in test().
 * It exports the v11 table (and, built with -DEXAMPLE_NET_ABI=8, the v8 table instead) so it shows
 * the shape of a plugin and lets Mend's tests check its plugin adapters.  Not tuned for speed.
 *   EXAMPLE_NET_ADDR  IPv4 address to listen on and advertise (default 127.0.0.1)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../nccl_net.h"

#define EX_MAGIC 0x45584e4554504c47ULL /* identifies our handles */
#define EX_MAXREQ NCCL_NET_MAX_REQUESTS

struct exHandle { uint64_t magic; struct sockaddr_in addr; };
struct exListen { int fd; };
struct exComm;
struct exReq {
  struct exComm* comm;    /* owner */
  int used, isSend;       /* slot in use; direction */
  char* data;             /* user buffer */
  uint64_t size;          /* bytes to send, or capacity to receive */
  uint64_t hdr;           /* size header (network order not needed: same host kind both ends) */
  size_t off;             /* bytes moved so far, header included */
  int done;               /* completed */
};
struct exComm {
  int fd;                 /* connected socket */
  int failed;             /* a socket error: every later request fails */
  struct exReq reqs[EX_MAXREQ]; /* ring of requests, served in posting order */
  int head, count;        /* oldest request, requests posted */
};

static ncclDebugLogger_t exLog;
#define EXWARN(...) do { if (exLog) exLog(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__); } while (0)

static ncclResult_t exDevices(int* ndev) { *ndev = 1; return ncclSuccess; }

static void exAddr(struct sockaddr_in* a) {
  memset(a, 0, sizeof(*a));
  a->sin_family = AF_INET;
  const char* s = getenv("EXAMPLE_NET_ADDR");
  inet_pton(AF_INET, s ? s : "127.0.0.1", &a->sin_addr);
}

static ncclResult_t exListen(int dev, void* handle, void** listenComm) {
  struct exHandle* h = handle;
  struct exListen* l = calloc(1, sizeof(*l));
  socklen_t len = sizeof(h->addr);
  if (!l) return ncclSystemError;
  exAddr(&h->addr);
  l->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (l->fd < 0 || bind(l->fd, (struct sockaddr*)&h->addr, sizeof(h->addr)) || listen(l->fd, 64) ||
      getsockname(l->fd, (struct sockaddr*)&h->addr, &len)) {
    EXWARN("example net: listen failed: %s", strerror(errno));
    if (l->fd >= 0) close(l->fd);
    free(l);
    return ncclSystemError;
  }
  h->magic = EX_MAGIC;
  *listenComm = l;
  return ncclSuccess;
}

static struct exComm* exNewComm(int fd) {
  struct exComm* c = calloc(1, sizeof(*c));
  int one = 1;
  if (!c) return NULL;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  c->fd = fd;
  return c;
}

/* The peer already listens, so a connect completes from its backlog without waiting for accept. */
static ncclResult_t exConnectCommon(void* handle, void** sendComm) {
  struct exHandle* h = handle;
  if (h->magic != EX_MAGIC) { EXWARN("example net: bad handle"); return ncclInternalError; }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr*)&h->addr, sizeof(h->addr))) {
    EXWARN("example net: connect failed: %s", strerror(errno));
    if (fd >= 0) close(fd);
    return ncclSystemError;
  }
  *sendComm = exNewComm(fd);
  return *sendComm ? ncclSuccess : ncclSystemError;
}

static ncclResult_t exAcceptCommon(void* listenComm, void** recvComm) {
  struct exListen* l = listenComm;
  int fd = accept(l->fd, NULL, NULL);
  *recvComm = NULL;
  if (fd < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? ncclSuccess : ncclSystemError;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *recvComm = exNewComm(fd);
  return *recvComm ? ncclSuccess : ncclSystemError;
}

static ncclResult_t exRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (type != NCCL_PTR_HOST) return ncclInternalError;
  *mhandle = comm;
  return ncclSuccess;
}
static ncclResult_t exRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** m) {
  return ncclInternalError;
}
static ncclResult_t exDeregMr(void* comm, void* mhandle) { return ncclSuccess; }

static ncclResult_t exPost(struct exComm* c, int isSend, void* data, uint64_t size, void** request) {
  *request = NULL;
  if (c->failed) return ncclSystemError;
  if (c->count == EX_MAXREQ) return ncclSuccess; /* back-pressure: the caller retries */
  struct exReq* r = &c->reqs[(c->head + c->count) % EX_MAXREQ];
  *r = (struct exReq){ .comm = c, .used = 1, .isSend = isSend, .data = data, .size = size, .hdr = size };
  c->count++;
  *request = r;
  return ncclSuccess;
}

static ncclResult_t exIsendAny(void* sendComm, void* data, size_t size, void** request) {
  return exPost(sendComm, 1, data, size, request);
}
static ncclResult_t exIrecvAny(void* recvComm, int n, void** data, size_t size, void** request) {
  if (n != 1) return ncclInternalError;
  return exPost(recvComm, 0, data[0], size, request);
}

/* Move bytes for the oldest request; returns -1 on a socket error or a too-large message. */
static int exProgress(struct exComm* c, struct exReq* r) {
  while (!r->done) {
    char* base = r->off < 8 ? (char*)&r->hdr + r->off : r->data + (r->off - 8);
    size_t total = 8 + (r->isSend ? r->size : (r->off >= 8 ? r->hdr : 0));
    size_t left = r->off < 8 ? 8 - r->off : total - r->off;
    if (left == 0) { r->done = 1; break; }
    ssize_t n = r->isSend ? send(c->fd, base, left, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(c->fd, base, left, MSG_DONTWAIT);
    if (n == 0 && !r->isSend) return -1;
    if (n < 0) return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
    r->off += (size_t)n;
    if (!r->isSend && r->off == 8 && r->hdr > r->size) return -1;
  }
  return 0;
}

static ncclResult_t exTest(void* request, int* done, int* sizes) {
  struct exReq* r = request;
  struct exComm* c = r->comm;
  *done = 0;
  /* Requests complete in posting order: progress from the oldest up to this one. */
  while (c->count > 0 && !c->failed) {
    struct exReq* h = &c->reqs[c->head];
    if (exProgress(c, h) < 0) {
      EXWARN("example net: connection failed: %s", errno ? strerror(errno) : "message larger than the receive buffer");
      c->failed = 1;
      break;
    }
    if (!h->done || h == r) break;
    h->used = 0;
    c->head = (c->head + 1) % EX_MAXREQ;
    c->count--;
  }
  if (c->failed) return ncclSystemError;
  if (r->done) {
    if (sizes) sizes[0] = (int)(r->isSend ? r->size : r->hdr);
    *done = 1;
    if (c->count > 0 && &c->reqs[c->head] == r) {
      r->used = 0;
      c->head = (c->head + 1) % EX_MAXREQ;
      c->count--;
    }
  }
  return ncclSuccess;
}

static ncclResult_t exIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  *request = NULL;
  return ncclSuccess;
}

static ncclResult_t exClose(void* comm) {
  struct exComm* c = comm;
  if (c) { close(c->fd); free(c); }
  return ncclSuccess;
}
static ncclResult_t exCloseListen(void* listenComm) {
  struct exListen* l = listenComm;
  if (l) { close(l->fd); free(l); }
  return ncclSuccess;
}
static ncclResult_t exGetDeviceMr(void* comm, void* mhandle, void** dptr) { return ncclInternalError; }
static ncclResult_t exIrecvConsumed(void* recvComm, int n, void* request) { return ncclSuccess; }

#if EXAMPLE_NET_ABI == 8
static ncclResult_t exInit8(ncclDebugLogger_t logger) { exLog = logger; return ncclSuccess; }
static ncclResult_t exProps8(int dev, ncclNetProperties_v8_t* p) {
  memset(p, 0, sizeof(*p));
  p->name = "example0"; p->ptrSupport = NCCL_PTR_HOST; p->speed = 10000; p->maxComms = 65536; p->maxRecvs = 1;
  return ncclSuccess;
}
static ncclResult_t exConnect8(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t** devComm) {
  return exConnectCommon(handle, sendComm);
}
static ncclResult_t exAccept8(void* l, void** recvComm, ncclNetDeviceHandle_v8_t** devComm) {
  return exAcceptCommon(l, recvComm);
}
static ncclResult_t exIsend8(void* c, void* data, int size, int tag, void* m, void** req) {
  return exIsendAny(c, data, (size_t)size, req);
}
static ncclResult_t exIrecv8(void* c, int n, void** data, int* sizes, int* tags, void** m, void** req) {
  return exIrecvAny(c, n, data, (size_t)sizes[0], req);
}
__attribute__((visibility("default"))) const ncclNet_v8_t ncclNetPlugin_v8 = {
  .name = "Example", .init = exInit8, .devices = exDevices, .getProperties = exProps8, .listen = exListen,
  .connect = exConnect8, .accept = exAccept8, .regMr = exRegMr, .regMrDmaBuf = exRegMrDmaBuf,
  .deregMr = exDeregMr, .isend = exIsend8, .irecv = exIrecv8, .iflush = exIflush, .test = exTest,
  .closeSend = exClose, .closeRecv = exClose, .closeListen = exCloseListen, .getDeviceMr = exGetDeviceMr,
  .irecvConsumed = exIrecvConsumed,
};
#else
static ncclResult_t exInit11(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t logger,
                             ncclProfilerCallback_t prof) {
  exLog = logger;
  *ctx = NULL;
  return ncclSuccess;
}
static ncclResult_t exProps11(int dev, ncclNetProperties_v11_t* p) {
  memset(p, 0, sizeof(*p));
  p->name = "example0"; p->ptrSupport = NCCL_PTR_HOST; p->speed = 10000; p->maxComms = 65536; p->maxRecvs = 1;
  p->maxP2pBytes = p->maxCollBytes = MAX_NET_SIZE; p->maxMultiRequestSize = 1;
  return ncclSuccess;
}
static ncclResult_t exListen11(void* ctx, int dev, void* handle, void** listenComm) {
  return exListen(dev, handle, listenComm);
}
static ncclResult_t exConnect11(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t** d) {
  return exConnectCommon(handle, sendComm);
}
static ncclResult_t exAccept11(void* l, void** recvComm, ncclNetDeviceHandle_v11_t** d) {
  return exAcceptCommon(l, recvComm);
}
static ncclResult_t exIsend11(void* c, void* data, size_t size, int tag, void* m, void* ph, void** req) {
  return exIsendAny(c, data, size, req);
}
static ncclResult_t exIrecv11(void* c, int n, void** data, size_t* sizes, int* tags, void** m, void** ph, void** req) {
  return exIrecvAny(c, n, data, sizes[0], req);
}
static ncclResult_t exMakeVDevice(int* d, ncclNetVDeviceProps_v11_t* props) { return ncclInvalidUsage; }
static ncclResult_t exFinalize(void* ctx) { return ncclSuccess; }
static ncclResult_t exSetNetAttr(void* ctx, ncclNetAttr_v11_t* attr) { return ncclSuccess; }
__attribute__((visibility("default"))) const ncclNet_v11_t ncclNetPlugin_v11 = {
  .name = "Example", .init = exInit11, .devices = exDevices, .getProperties = exProps11, .listen = exListen11,
  .connect = exConnect11, .accept = exAccept11, .regMr = exRegMr, .regMrDmaBuf = exRegMrDmaBuf,
  .deregMr = exDeregMr, .isend = exIsend11, .irecv = exIrecv11, .iflush = exIflush, .test = exTest,
  .closeSend = exClose, .closeRecv = exClose, .closeListen = exCloseListen, .getDeviceMr = exGetDeviceMr,
  .irecvConsumed = exIrecvConsumed, .makeVDevice = exMakeVDevice, .finalize = exFinalize,
  .setNetAttr = exSetNetAttr,
};
#endif
