/*
 * The built-in socket Net ("Socket"): the ops table, per-caller contexts and memory registration.
 * Devices are in net_socket_dev.c, connections in net_socket_conn.c, the data path in
 * net_socket_data.c; docs/net.md has the design.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "checks.h"
#include "misc/fault.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "transport/net_socket.h"

/* What init hands each caller (a communicator): devices are global, so this only names the caller. */
struct mendSocketCtx {
  uint64_t commId;            /* the caller's communicator id, for log lines */
  mendDebugLogger_t logger;   /* the caller's logger (Mend logs through misc/debug.h) */
};

static ncclResult_t socketInit(void** ctx, uint64_t commId, mendDebugLogger_t logger) {
  MENDARGCHECK(ctx != NULL, ncclInvalidArgument, "NET/Socket: init: ctx is NULL");
  *ctx = NULL;
  int ndev;
  MENDCHECK(mendNetSocketDevices(&ndev));  /* discovery happens once per process */
  struct mendSocketCtx* c;
  MENDCHECK(MENDCALLOC(c, 1));
  c->commId = commId;
  c->logger = logger;
  *ctx = c;
  INFO(NCCL_INIT | NCCL_NET, "NET/Socket: initialised for comm 0x%llx with %d devices", (unsigned long long)commId, ndev);
  return ncclSuccess;
}

static ncclResult_t socketFinalize(void* ctx) {
  free(ctx);
  return ncclSuccess;
}

static ncclResult_t socketRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  MENDARGCHECK(comm != NULL && mhandle != NULL, ncclInvalidArgument, "NET/Socket: regMr: comm or mhandle is NULL");
  *mhandle = NULL;
  MENDARGCHECK(type != MEND_PTR_CUDA, ncclInvalidArgument,
               "NET/Socket: regMr: CUDA memory is not supported by the socket Net yet (host memory only)");
  MENDARGCHECK(type == MEND_PTR_HOST, ncclInvalidArgument, "NET/Socket: regMr: memory type %d is not supported", type);
  MENDARGCHECK(data != NULL || size == 0, ncclInvalidArgument, "NET/Socket: regMr: NULL buffer of %zu bytes", size);
  if (mendFaultCheck("net.regmr")) {
    WARN("NET/Socket: regMr: injected fault at net.regmr");
    return ncclSystemError;
  }
  struct mendSocketMr* mr;
  MENDCHECK(MENDCALLOC(mr, 1));
  *mr = (struct mendSocketMr){ .magic = MEND_SOCKET_MR_MAGIC, .type = type, .data = data, .size = size };
  *mhandle = mr;
  return ncclSuccess;
}

static ncclResult_t socketDeregMr(void* comm, void* mhandle) {
  struct mendSocketMr* mr = mhandle;
  if (mr == NULL) return ncclSuccess;
  MENDARGCHECK(mr->magic == MEND_SOCKET_MR_MAGIC, ncclInvalidArgument,
               "NET/Socket: deregMr: %p is not a live registration", mhandle);
  mr->magic = 0;
  free(mr);
  return ncclSuccess;
}

/* Host memory is coherent once recv() returned: nothing to flush. */
static ncclResult_t socketIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  MENDARGCHECK(request != NULL, ncclInvalidArgument, "NET/Socket: iflush: request is NULL");
  *request = NULL;
  return ncclSuccess;
}

/* ---- accept: pending sockets do not stay forever ----
 * Accepted sockets wait in a fixed table until every socket of their connection has sent its hello.
 * One whose peer hung up, or whose connection is not complete within MEND_SOCKET_ACCEPT_TIMEOUT_MS,
 * is closed, so half-open or silent connections cannot fill the table for good. */

/* Has the peer of a pending socket hung up (EOF or error, with no data left to read)? */
static int peerGone(int fd) {
  char b;
  ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Every socket of slot i's connection has sent its hello: accept builds it, whatever its peer did since. */
static int groupComplete(const struct mendSocketListenComm* lc, int i) {
  const struct mendSocketPending* p = &lc->pend[i];
  if (p->got != sizeof(p->hello)) return 0;
  int n = 0;
  for (int j = 0; j < MEND_SOCKET_MAX_PENDING; j++) {
    const struct mendSocketPending* q = &lc->pend[j];
    n += q->fd >= 0 && q->got == sizeof(q->hello) && q->hello.connToken == p->hello.connToken;
  }
  return n == p->hello.nsocks + 1;
}

static void sweepPending(struct mendSocketListenComm* lc) {
  int64_t now = mendTimeMs(), limit = mendParamSocketAcceptTimeout();
  int gone = 0, late = 0;
  for (int i = 0; i < MEND_SOCKET_MAX_PENDING; i++) {
    struct mendSocketPending* p = &lc->pend[i];
    if (p->fd < 0) continue;
    if (p->sinceMs == 0) p->sinceMs = now;
    int isGone = peerGone(p->fd), isLate = limit > 0 && now - p->sinceMs > limit;
    if ((!isGone && !isLate) || groupComplete(lc, i)) continue;
    close(p->fd);
    *p = (struct mendSocketPending){ .fd = -1 };
    gone += isGone;
    late += !isGone;
  }
  if (gone) INFO(NCCL_NET, "NET/Socket: accept: freed %d pending sockets whose peer hung up", gone);
  if (late)
    WARN_SPARSE(1000, "NET/Socket: accept: closed %d sockets whose connection was not complete within %lld ms "
                "(MEND_SOCKET_ACCEPT_TIMEOUT_MS)", late, (long long)limit);
}

static ncclResult_t socketAccept(void* listenComm, void** recvComm) {
  if (listenComm) sweepPending(listenComm);
  return mendNetSocketAccept(listenComm, recvComm);
}

const mendNet_t mendNetSocket = {
  .name = "Socket",
  .init = socketInit,
  .devices = mendNetSocketDevices,
  .getProperties = mendNetSocketGetProperties,
  .listen = mendNetSocketListen,
  .connect = mendNetSocketConnect,
  .accept = socketAccept,
  .regMr = socketRegMr,
  .deregMr = socketDeregMr,
  .isend = mendNetSocketIsend,
  .irecv = mendNetSocketIrecv,
  .iflush = socketIflush,
  .test = mendNetSocketTest,
  .isendWord = mendNetSocketIsendWord,
  .testWord = mendNetSocketTestWord,
  .closeSend = mendNetSocketCloseSend,
  .closeRecv = mendNetSocketCloseRecv,
  .closeListen = mendNetSocketCloseListen,
  .finalize = socketFinalize,
};
