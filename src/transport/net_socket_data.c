/*
 * Socket Net data path: isend/irecv/test, the control socket, the data sockets and their helpers.
 *
 * Every message sends a header (magic, seq, size) on the control socket, in posting order; a
 * message of at most `inlineMax` bytes follows its header there.  A larger one is cut into chunks
 * dealt round-robin over the data sockets, starting at socket seq % nsocks so that messages of one
 * chunk spread too.  Both ends derive the same cut from (seq, size, chunk, nsocks), so the
 * receiver only needs the header to know which bytes each data socket will bring.  Every stream is
 * FIFO, so messages match posted receives in order.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "checks.h"
#include "misc/fault.h"
#include "misc/utils.h"
#include "transport/net_socket.h"
#include "transport/net_socket_wire.h"

#define TASK_RING MEND_NET_MAX_REQUESTS
#define MAX_IOV 8               /* chunks of one socket moved per syscall */
#define IDLE_POLL_MS 100        /* helpers re-check the stop flag at least this often */
#define JOIN_TIMEOUT_MS 2000    /* bound on joining a helper at close */

ncclResult_t mendNetSocketFail(struct mendSocketComm* comm, ncclResult_t res, const char* cause) {
  int expected = ncclSuccess;
  if (atomic_compare_exchange_strong(&comm->error, &expected, (int)res)) {
    WARN("NET/Socket: connection %s %s failed: %s (the connection stays failed)", comm->isSend ? "to" : "from",
         comm->peer, cause);
    return res;
  }
  return (ncclResult_t)expected;
}

/* A peer that went away is the peer's failure; anything else is a failure of this path. */
static ncclResult_t sockFail(struct mendSocketComm* comm, int err, const char* what) {
  char cause[160];
  ncclResult_t res = (err == ECONNRESET || err == EPIPE) ? ncclRemoteError : ncclSystemError;
  snprintf(cause, sizeof(cause), "%s: %s", what, strerror(err));
  return mendNetSocketFail(comm, res, cause);
}

/* ---- data sockets ---- */

static size_t chunkLen(const struct mendSocketTask* t, size_t off) {
  return t->size - off < t->chunk ? t->size - off : t->chunk;
}

/* Account `n` moved bytes to the task; returns 1 when the task is finished. */
static int taskAdvance(struct mendSocketTask* t, size_t n) {
  while (n > 0) {
    size_t rem = chunkLen(t, t->off) - t->done;
    if (n < rem) {
      t->done += n;
      return 0;
    }
    n -= rem;
    t->off += t->stride;
    t->done = 0;
    if (t->off >= t->size) return 1;
  }
  return t->off >= t->size;
}

/* One sendmsg/recvmsg over up to MAX_IOV of the task's remaining chunks; *asked: bytes offered. */
static ssize_t taskIo(int fd, int isSend, const struct mendSocketTask* t, size_t* asked) {
  struct iovec iov[MAX_IOV];
  int n = 0;
  size_t off = t->off, done = t->done;
  *asked = 0;
  while (n < MAX_IOV && off < t->size) {
    iov[n].iov_base = t->data + off + done;
    iov[n].iov_len = chunkLen(t, off) - done;
    *asked += iov[n].iov_len;
    n++;
    off += t->stride;
    done = 0;
  }
  struct msghdr msg = { .msg_iov = iov, .msg_iovlen = n };
  return isSend ? sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) : recvmsg(fd, &msg, MSG_DONTWAIT);
}

/* Move what the socket takes now.  *progressed: bytes moved; *pending: tasks remain, so the caller
 * waits for the socket's readiness.  A short transfer means the kernel buffer is full (send) or
 * drained (recv): stop there instead of asking again at once, because a syscall that only returns
 * EAGAIN still takes the socket lock and slows the other side down (a 7x loss measured on loopback). */
static ncclResult_t sockProgress(struct mendSocketComm* comm, struct mendSocketData* s, int* progressed,
                                 int* pending) {
  uint32_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
  /* A close (comm->stop) ends the pass between two syscalls: a socket that keeps bringing bytes must
   * not keep the helper writing into receive buffers that close has given back to the caller. */
  while (head != atomic_load_explicit(&s->tail, memory_order_acquire) && !atomic_load(&comm->stop)) {
    struct mendSocketTask* t = &s->tasks[head % TASK_RING];
    size_t asked;
    ssize_t n = taskIo(s->fd, comm->isSend, t, &asked);
    if (n > 0) {
      *progressed = 1;
      if (taskAdvance(t, (size_t)n)) {
        struct mendSocketReq* req = t->req;
        /* Free the ring slot before completing the request: the caller may repost at once. */
        atomic_store_explicit(&s->head, ++head, memory_order_release);
        atomic_fetch_sub_explicit(&req->partsLeft, 1, memory_order_release);
      }
      if ((size_t)n < asked) break;
      continue;
    }
    if (n == 0) return mendNetSocketFail(comm, ncclRemoteError, "peer closed a data socket");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return sockFail(comm, errno, comm->isSend ? "send on a data socket" : "recv on a data socket");
  }
  *pending = head != atomic_load_explicit(&s->tail, memory_order_acquire);
  return ncclSuccess;
}

static void wakeThread(struct mendSocketThread* thr) {
  uint64_t one = 1;
  if (atomic_load(&thr->sleeping) && write(thr->efd, &one, sizeof(one)) < 0) {
    /* eventfd counter saturated: the thread is awake anyway. */
  }
}

static ncclResult_t pushTask(struct mendSocketComm* comm, int sock, const struct mendSocketTask* task) {
  struct mendSocketData* s = &comm->socks[sock];
  uint32_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
  if (tail - atomic_load_explicit(&s->head, memory_order_acquire) >= TASK_RING)
    return mendNetSocketFail(comm, ncclInternalError, "data socket task ring overflow");
  s->tasks[tail % TASK_RING] = *task;
  atomic_store(&s->tail, tail + 1);  /* seq_cst: pairs with the helper's `sleeping` store */
  if (s->owner >= 0) wakeThread(&comm->threads[s->owner]);
  return ncclSuccess;
}

/* Give each data socket its share of a message larger than inlineMax. */
static ncclResult_t postTasks(struct mendSocketComm* comm, struct mendSocketReq* req) {
  size_t n = (size_t)comm->nsocks;
  size_t chunk = n == 1 ? req->size : comm->chunkSize;
  size_t nchunks = (req->size + chunk - 1) / chunk;
  size_t parts = nchunks < n ? nchunks : n;
  atomic_store(&req->partsLeft, (int)parts);
  for (size_t k = 0; k < parts; k++) {
    struct mendSocketTask t = { .req = req, .data = req->data, .size = req->size, .chunk = chunk,
                                .stride = n * chunk, .off = k * chunk, .done = 0 };
    MENDCHECK(pushTask(comm, (int)((req->seq + k) % n), &t));
  }
  return ncclSuccess;
}

/* ---- control socket ---- */

static ncclResult_t ctrlSend(struct mendSocketComm* comm) {
  const size_t hsz = sizeof(struct mendSocketMsgHdr);
  while (comm->fifoCount > 0) {
    struct mendSocketReq* req = &comm->reqs[comm->fifo[comm->fifoHead]];
    size_t inl = req->size <= comm->inlineMax ? req->size : 0;
    if (comm->ctrlOff == 0)
      comm->txHdr = (struct mendSocketMsgHdr){ .magic = MEND_SOCKET_MSG_MAGIC, .seq = req->seq, .size = req->size,
                                               .word = req->word };
    struct iovec iov[2];
    int niov = 0;
    if (comm->ctrlOff < hsz) iov[niov++] = (struct iovec){ (char*)&comm->txHdr + comm->ctrlOff, hsz - comm->ctrlOff };
    size_t dOff = comm->ctrlOff > hsz ? comm->ctrlOff - hsz : 0;
    if (inl > dOff) iov[niov++] = (struct iovec){ req->data + dOff, inl - dOff };
    struct msghdr msg = { .msg_iov = iov, .msg_iovlen = niov };
    ssize_t n = sendmsg(comm->ctrlFd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
      return sockFail(comm, errno, "send on the control socket");
    }
    comm->ctrlOff += (size_t)n;
    if (comm->ctrlOff < hsz + inl) return ncclSuccess;  /* socket full */
    req->ctrlDone = 1;
    comm->ctrlOff = 0;
    comm->fifoHead = (comm->fifoHead + 1) % MEND_NET_MAX_REQUESTS;
    comm->fifoCount--;
  }
  return ncclSuccess;
}

#define POLL_PACE_AFTER_NS 50000ull /* ctrlRead: quiet longer than this, the control socket is read less often */

/* Read up to `len` control bytes into dst through the read-ahead buffer; *got: bytes read. */
static ncclResult_t ctrlRead(struct mendSocketComm* comm, char* dst, size_t len, size_t* got) {
  size_t have = comm->rxEnd - comm->rxStart;
  *got = 0;
  if (have == 0) {
    /* Paced polling: a control socket that has been quiet for q ns is read on every look while q is
     * under 50 us (the waits of small messages), then again after q/32 (at most pollMaxNs), so a
     * receiver waiting 4 ms for its peer's next chunk reads it about 250 times, not once per look (a
     * look costs a system call: 300,000 a second per rank on a 3x3 testbed at 1 gbit, most of its
     * system time), and an arrival is seen at most 1/32 of its wait late. */
    uint64_t now = 0;
    if (comm->pollQuietSinceNs != 0) {
      now = mendTimeNs();
      if (now < comm->pollNextNs) return ncclSuccess;
    }
    /* Large remainders go straight to the user buffer; small reads fill the read-ahead. */
    int direct = len >= MEND_SOCKET_RXBUF / 2;
    ssize_t n;
    do {
      comm->ctrlReads++;
      n = recv(comm->ctrlFd, direct ? dst : comm->rxBuf, direct ? len : MEND_SOCKET_RXBUF, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    int err = n < 0 ? errno : 0;
    if ((err == EAGAIN || err == EWOULDBLOCK) && comm->pollMaxNs > 0) {
      if (comm->pollQuietSinceNs == 0) comm->pollQuietSinceNs = now = mendTimeNs();
      uint64_t quiet = now - comm->pollQuietSinceNs, gap = quiet < POLL_PACE_AFTER_NS ? 0 : quiet / 32;
      comm->pollNextNs = now + (gap < comm->pollMaxNs ? gap : comm->pollMaxNs);
    } else {
      comm->pollQuietSinceNs = 0;
    }
    if (n == 0) {
      /* An orderly close: what was sent before it is all here (data sockets may still be draining);
       * only receives that needed more control bytes fail (test()). */
      comm->peerClosed = 1;
      return ncclSuccess;
    }
    if (n < 0) {
      if (err == EAGAIN || err == EWOULDBLOCK) return ncclSuccess;
      return sockFail(comm, err, "recv on the control socket");
    }
    if (direct) {
      *got = (size_t)n;
      return ncclSuccess;
    }
    comm->rxStart = 0;
    comm->rxEnd = (size_t)n;
    have = (size_t)n;
  }
  *got = have < len ? have : len;
  memcpy(dst, comm->rxBuf + comm->rxStart, *got);
  comm->rxStart += *got;
  return ncclSuccess;
}

uint64_t mendNetSocketCtrlReadsForTest(void* recvComm) {
  return ((struct mendSocketComm*)recvComm)->ctrlReads;
}

/* The header of the fifo head arrived: check it against the posted receive. */
static ncclResult_t headerArrived(struct mendSocketComm* comm, struct mendSocketReq* req) {
  char cause[160];
  if (!mendSocketMsgHdrParse(&comm->rxHdr, sizeof(comm->rxHdr), req->seq, req->posted, &comm->rxHdr, cause,
                             sizeof(cause)))
    return mendNetSocketFail(comm, ncclInternalError, cause);
  req->size = comm->rxHdr.size;
  req->word = comm->rxHdr.word;
  if (req->size > comm->inlineMax) MENDCHECK(postTasks(comm, req));
  return ncclSuccess;
}

static ncclResult_t ctrlRecv(struct mendSocketComm* comm) {
  const size_t hsz = sizeof(struct mendSocketMsgHdr);
  while (comm->fifoCount > 0) {
    struct mendSocketReq* req = &comm->reqs[comm->fifo[comm->fifoHead]];
    size_t got;
    if (comm->ctrlOff < hsz) {
      while (comm->ctrlOff < hsz) {
        MENDCHECK(ctrlRead(comm, (char*)&comm->rxHdr + comm->ctrlOff, hsz - comm->ctrlOff, &got));
        if (got == 0) return ncclSuccess;
        comm->ctrlOff += got;
      }
      MENDCHECK(headerArrived(comm, req));
    }
    size_t inl = req->size <= comm->inlineMax ? req->size : 0;
    while (comm->ctrlOff < hsz + inl) {
      MENDCHECK(ctrlRead(comm, req->data + (comm->ctrlOff - hsz), hsz + inl - comm->ctrlOff, &got));
      if (got == 0) return ncclSuccess;
      comm->ctrlOff += got;
    }
    req->ctrlDone = 1;
    comm->ctrlOff = 0;
    comm->fifoHead = (comm->fifoHead + 1) % MEND_NET_MAX_REQUESTS;
    comm->fifoCount--;
  }
  return ncclSuccess;
}

/* Without helpers the caller moves the data sockets; it asks poll() which ones are ready first,
 * since poll does not take the socket lock (see sockProgress). */
static ncclResult_t callerMoveData(struct mendSocketComm* comm) {
  struct pollfd pfd[MEND_SOCKET_MAX_SOCKS];
  int idx[MEND_SOCKET_MAX_SOCKS], n = 0;
  for (int i = 0; i < comm->nsocks; i++) {
    struct mendSocketData* s = &comm->socks[i];
    if (atomic_load_explicit(&s->head, memory_order_relaxed) == atomic_load_explicit(&s->tail, memory_order_acquire))
      continue;
    pfd[n] = (struct pollfd){ .fd = s->fd, .events = comm->isSend ? POLLOUT : POLLIN };
    idx[n++] = i;
  }
  if (n == 0 || poll(pfd, n, 0) <= 0) return ncclSuccess;
  for (int k = 0; k < n; k++) {
    if (pfd[k].revents == 0) continue;
    int progressed = 0, pending = 0;
    MENDCHECK(sockProgress(comm, &comm->socks[idx[k]], &progressed, &pending));
  }
  return ncclSuccess;
}

/* Everything the caller's thread moves: the control socket, and the data sockets without helpers. */
static ncclResult_t progress(struct mendSocketComm* comm) {
  MENDCHECK(comm->isSend ? ctrlSend(comm) : ctrlRecv(comm));
  if (comm->nthreads == 0) MENDCHECK(callerMoveData(comm));
  return ncclSuccess;
}

/* ---- requests ---- */

static ncclResult_t postReq(struct mendSocketComm* comm, char* data, size_t size, uint64_t word, void** request) {
  if (comm->fifoCount >= MEND_NET_MAX_REQUESTS) return ncclSuccess;
  int slot = -1;
  for (int i = 0; i < MEND_NET_MAX_REQUESTS && slot < 0; i++)
    if (!comm->reqs[i].used) slot = i;
  if (slot < 0) return ncclSuccess;  /* back-pressure: *request stays NULL, call again */
  struct mendSocketReq* req = &comm->reqs[slot];
  req->comm = comm;
  req->used = 1;
  req->isSend = comm->isSend;
  req->seq = comm->seqPost++;
  req->data = data;
  req->posted = size;
  req->size = comm->isSend ? size : 0;
  req->ctrlDone = 0;
  req->word = word;
  atomic_store(&req->partsLeft, 0);
  comm->fifo[(comm->fifoHead + comm->fifoCount) % MEND_NET_MAX_REQUESTS] = slot;
  comm->fifoCount++;
  if (comm->isSend && size > comm->inlineMax) MENDCHECK(postTasks(comm, req));
  *request = req;
  /* Start moving at once (latency); a failure found here is recorded in the comm and reported by
   * test() on this request, so a posted request is never also an error return. */
  (void)progress(comm);
  return ncclSuccess;
}

static ncclResult_t checkMr(void* mhandle, const char* op) {
  const struct mendSocketMr* mr = mhandle;
  MENDARGCHECK(mr == NULL || mr->magic == MEND_SOCKET_MR_MAGIC, ncclInvalidArgument,
               "NET/Socket: %s: memory handle %p is not a live registration", op, mhandle);
  return ncclSuccess;
}

ncclResult_t mendNetSocketIsendWord(void* sendComm, void* data, size_t size, int tag, void* mhandle, uint64_t word,
                                   void** request) {
  struct mendSocketComm* comm = sendComm;
  MENDARGCHECK(request != NULL, ncclInvalidArgument, "NET/Socket: isend: request is NULL");
  *request = NULL;
  MENDARGCHECK(comm != NULL && comm->isSend, ncclInvalidArgument, "NET/Socket: isend: %p is not a send comm", sendComm);
  MENDARGCHECK(data != NULL || size == 0, ncclInvalidArgument, "NET/Socket: isend: data is NULL for %zu bytes", size);
  MENDARGCHECK(size <= MEND_SOCKET_MAX_SIZE, ncclInvalidArgument, "NET/Socket: isend: %zu bytes exceed the %llu-byte maximum",
               size, (unsigned long long)MEND_SOCKET_MAX_SIZE);
  MENDCHECK(checkMr(mhandle, "isend"));
  int err = atomic_load(&comm->error);
  if (err != ncclSuccess) return (ncclResult_t)err;
  if (mendFaultCheck("net.isend")) return mendNetSocketFail(comm, ncclSystemError, "injected fault at net.isend");
  return postReq(comm, data, size, word, request);
}

ncclResult_t mendNetSocketIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  return mendNetSocketIsendWord(sendComm, data, size, tag, mhandle, 0, request);
}

ncclResult_t mendNetSocketIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                                void** request) {
  struct mendSocketComm* comm = recvComm;
  MENDARGCHECK(request != NULL, ncclInvalidArgument, "NET/Socket: irecv: request is NULL");
  *request = NULL;
  MENDARGCHECK(comm != NULL && !comm->isSend, ncclInvalidArgument, "NET/Socket: irecv: %p is not a recv comm", recvComm);
  MENDARGCHECK(n == 1, ncclInvalidArgument, "NET/Socket: irecv: %d grouped receives, the socket Net takes 1 (maxRecvs)", n);
  MENDARGCHECK(data != NULL && sizes != NULL, ncclInvalidArgument, "NET/Socket: irecv: data or sizes is NULL");
  MENDARGCHECK(data[0] != NULL || sizes[0] == 0, ncclInvalidArgument, "NET/Socket: irecv: buffer is NULL for %zu bytes",
               sizes[0]);
  MENDCHECK(checkMr(mhandles ? mhandles[0] : NULL, "irecv"));
  int err = atomic_load(&comm->error);
  if (err != ncclSuccess) return (ncclResult_t)err;
  if (mendFaultCheck("net.irecv")) return mendNetSocketFail(comm, ncclSystemError, "injected fault at net.irecv");
  return postReq(comm, data[0], sizes[0], 0, request);
}

ncclResult_t mendNetSocketTestWord(void* request, int* done, int* sizes, uint64_t* word) {
  struct mendSocketReq* req = request;
  MENDARGCHECK(req != NULL && req->used && req->comm != NULL, ncclInvalidArgument,
               "NET/Socket: test: %p is not an outstanding request", request);
  MENDARGCHECK(done != NULL, ncclInvalidArgument, "NET/Socket: test: done is NULL");
  struct mendSocketComm* comm = req->comm;
  *done = 0;
  int err = atomic_load(&comm->error);
  if (err != ncclSuccess) return (ncclResult_t)err;
  if (mendFaultCheck("net.test")) return mendNetSocketFail(comm, ncclSystemError, "injected fault at net.test");
  /* A receive whose header came waits only for the helper threads: reading the control socket here
   * for later receives' headers cost a recv that found nothing on almost every test while the data
   * flowed (5 M per rank in 17 s on a 3x3 testbed at 1 gbit, most of its system time).  Their own
   * tests read them, in order, since callers test the oldest request first. */
  if (comm->isSend || !req->ctrlDone || comm->nthreads == 0) MENDCHECK(progress(comm));
  if (!req->ctrlDone && comm->peerClosed && comm->rxStart == comm->rxEnd) {
    /* The peer closed before this message's header (or inline bytes) came: it never will. */
    INFO(NCCL_NET, "NET/Socket: connection from %s: the peer closed it; a receive posted after its last message fails",
         comm->peer);
    return ncclRemoteError;
  }
  if (!req->ctrlDone || atomic_load_explicit(&req->partsLeft, memory_order_acquire) != 0) return ncclSuccess;
  *done = 1;
  if (sizes) sizes[0] = (int)req->size;
  if (word) *word = req->isSend ? 0 : req->word;
  req->used = 0;
  return ncclSuccess;
}

ncclResult_t mendNetSocketTest(void* request, int* done, int* sizes) {
  return mendNetSocketTestWord(request, done, sizes, NULL);
}

/* ---- helper threads ---- */

/* One pass over the thread's sockets; fills `pfd` with those still holding tasks. */
static ncclResult_t helperPass(struct mendSocketThread* thr, int* progressed, struct pollfd* pfd, int* npfd) {
  struct mendSocketComm* comm = thr->comm;
  *npfd = 0;
  for (int i = thr->first; i < thr->first + thr->count; i++) {
    int pending = 0;
    MENDCHECK(sockProgress(comm, &comm->socks[i], progressed, &pending));
    if (pending)
      pfd[(*npfd)++] = (struct pollfd){ .fd = comm->socks[i].fd, .events = comm->isSend ? POLLOUT : POLLIN };
  }
  return ncclSuccess;
}

/* Tasks posted since helperPass looked: sockets with work that are not in pfd. */
static int newWork(struct mendSocketThread* thr, int npfd) {
  struct mendSocketComm* comm = thr->comm;
  int busy = 0;
  for (int i = thr->first; i < thr->first + thr->count; i++) {
    struct mendSocketData* s = &comm->socks[i];
    busy += atomic_load_explicit(&s->head, memory_order_relaxed) != atomic_load(&s->tail);
  }
  return busy > npfd;
}

static void* helperMain(void* arg) {
  struct mendSocketThread* thr = arg;
  struct mendSocketComm* comm = thr->comm;
  struct pollfd pfd[MEND_SOCKET_MAX_SOCKS + 1];
  while (!atomic_load(&comm->stop)) {
    int progressed = 0, npfd = 0;
    /* A failed comm moves nothing more: it only waits for close, asleep (its queues stay full). */
    int failed = atomic_load(&comm->error) != ncclSuccess;
    if (!failed && helperPass(thr, &progressed, pfd, &npfd) != ncclSuccess) continue;
    /* Announce the sleep, then look at the queues once more: a producer either sees `sleeping`
     * and rings the eventfd, or we see its task here. */
    atomic_store(&thr->sleeping, 1);
    if (failed || !newWork(thr, npfd)) {
      pfd[npfd] = (struct pollfd){ .fd = thr->efd, .events = POLLIN };
      if (poll(pfd, npfd + 1, IDLE_POLL_MS) > 0 && (pfd[npfd].revents & POLLIN)) {
        uint64_t v;
        if (read(thr->efd, &v, sizeof(v)) < 0) { /* already drained */ }
      }
    }
    atomic_store(&thr->sleeping, 0);
  }
  return NULL;
}

ncclResult_t mendNetSocketStartThreads(struct mendSocketComm* comm) {
  for (int i = 0; i < comm->nsocks; i++) comm->socks[i].owner = -1;
  for (int t = 0; t < comm->nthreads; t++) {
    struct mendSocketThread* thr = &comm->threads[t];
    thr->comm = comm;
    thr->first = t * comm->nsocks / comm->nthreads;
    thr->count = (t + 1) * comm->nsocks / comm->nthreads - thr->first;
    for (int i = thr->first; i < thr->first + thr->count; i++) comm->socks[i].owner = t;
    SYSCHECK(thr->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), "eventfd");
    int err = pthread_create(&thr->thread, NULL, helperMain, thr);
    if (err != 0) {
      errno = err;
      WARN("NET/Socket: cannot start a helper thread: %m");
      return ncclSystemError;
    }
    thr->started = 1;
  }
  return ncclSuccess;
}

/* Join helper `thr` (bounded); 0: it did not exit, so it is detached and may still use its comm. */
static int joinHelper(struct mendSocketComm* comm, struct mendSocketThread* thr) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += JOIN_TIMEOUT_MS / 1000;
  deadline.tv_nsec += (JOIN_TIMEOUT_MS % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) { deadline.tv_sec++; deadline.tv_nsec -= 1000000000L; }
  thr->started = 0;
  if (pthread_timedjoin_np(thr->thread, NULL, &deadline) == 0) return 1;
  WARN("NET/Socket: a helper thread of the connection with %s did not exit within %d ms; its memory is kept",
       comm->peer, JOIN_TIMEOUT_MS);
  pthread_detach(thr->thread);
  return 0;
}

int mendNetSocketStopThreads(struct mendSocketComm* comm) {
  int allJoined = 1;
  atomic_store(&comm->stop, 1);
  for (int t = 0; t < comm->nthreads; t++) {
    struct mendSocketThread* thr = &comm->threads[t];
    uint64_t one = 1;
    if (thr->started && write(thr->efd, &one, sizeof(one)) < 0) { /* it polls with a timeout anyway */ }
  }
  for (int t = 0; t < comm->nthreads; t++) {
    struct mendSocketThread* thr = &comm->threads[t];
    /* A helper still running keeps polling its eventfd: leave the descriptor (and the field) alone. */
    if (thr->started && !joinHelper(comm, thr)) {
      allJoined = 0;
      continue;
    }
    if (thr->efd >= 0) close(thr->efd);
    thr->efd = -1;
  }
  return allJoined;
}
