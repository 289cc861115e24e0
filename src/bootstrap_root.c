/*
 * The bootstrap root: a detached thread that collects (rank, listen address) from the ranks that
 * name it, and answers each with the full address table.  With several ids (ncclCommInitRankScalable)
 * rank r reports to root floor(r * nIds / nRanks); when a root has all of its ranks it sends their
 * addresses (a TABLE) to every other root, so each root can answer with the full table.
 *
 * Connections are served concurrently: one poll over the listener and every connection still being
 * read, each with its own deadline (MEND_BOOTSTRAP_HELLO_TIMEOUT), so silent or slow connections cost
 * nobody else time.  A connection must prove the job secret (its hello's MAC over the challenge the
 * root sent on accept) before anything it announces is believed or anything is sent back but a
 * status; lengths it announces are checked against the rendezvous before anything is read or
 * allocated.  Wire formats and statuses: docs/bootstrap.md; the rank side is in bootstrap_id.c.
 */
#include "bootstrap_priv.h"
#include "bootstrap_wire.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checks.h"
#include "misc/debug.h"
#include "misc/param.h"
#include "misc/utils.h"

#define ROOT_REPLY_MS 5000        /* bound on sending one registered rank its reply */
#define ROOT_MAX_CONNS 256        /* connections being read at once; an old unproven one makes room */
#define ROOT_ACCEPT_PAUSE_MS 100  /* accept failed for lack of descriptors: try again after this */
#define ROOT_FULL_PAUSE_MS 10     /* every slot busy with a young connection: the backlog waits this long */
#define ROOT_POLL_MS 100          /* longest poll, so shutdown and the rendezvous bound are seen */

enum rootStage {
  ROOT_READ_HELLO = 0, /* reading the hello: nothing proven yet */
  ROOT_READ_IDS = 1,   /* proven HELLO: reading the unique ids that follow (scalable init) */
  ROOT_READ_TABLE = 2  /* proven TABLE: reading its entries one at a time */
};

/* A connection being read. */
struct rootConn {
  int fd;                              /* accepted socket */
  enum rootStage stage;                /* what is being read */
  int64_t deadline;                    /* closed when its message is not complete by then */
  uint8_t nonce[MEND_BS_NONCE_BYTES];  /* challenge sent on accept */
  struct mendBsRootHello hello;        /* its hello */
  struct mendBsRootEntry entry;        /* ROOT_READ_TABLE: the entry being read */
  ncclUniqueId* ids;                   /* ROOT_READ_IDS: room for hello.count ids */
  size_t off;                          /* bytes of the current item read */
  int left;                            /* ROOT_READ_TABLE: entries still to come */
};

struct bsRoot {
  int listenFd;                        /* the root's listening socket (non-blocking) */
  struct mendBsId id;                  /* our id: magic and secret */
  int nRanks;                          /* -1 until the first proven message */
  int nIds, idIdx;                     /* roots, and which one this is */
  ncclUniqueId* ids;                   /* [nIds] every root's id (nIds > 1) */
  union mendSocketAddr* table;         /* [nRanks] */
  char* have;                          /* [nRanks] entry known */
  int* fds;                            /* [nRanks] connections of our ranks awaiting the reply */
  uint8_t (*nonces)[MEND_BS_NONCE_BYTES]; /* [nRanks] each registered rank's nonce (its reply MAC covers it) */
  int nHave;                           /* entries known */
  int groupCount, groupGot;            /* ranks reporting to this root, and how many did */
  int tablesSent;                      /* our group's table went to the other roots */
  pthread_t sender;                    /* sends it, so this thread keeps answering the other roots'
                                          connections meanwhile (two roots sending to each other at
                                          once would each wait for the other's challenge) */
  int senderStarted;                   /* sender must be joined */
  _Atomic int senderDone;              /* it returned */
  _Atomic int senderOk;                /* and every other root took the table */
  int64_t firstMs;                     /* first proven contact, for the rendezvous bound */
  int64_t timeoutMs;                   /* MEND_BOOTSTRAP_TIMEOUT */
  int64_t helloMs;                     /* MEND_BOOTSTRAP_HELLO_TIMEOUT */
  int64_t acceptPauseUntil;            /* no accept before then (descriptors ran out) */
  struct rootConn conns[ROOT_MAX_CONNS]; /* connections being read */
  int nConns;                          /* used entries of conns */
};

static _Atomic int rootShutdown;  /* library unload: root threads exit */
__attribute__((destructor)) static void rootAtExit(void) { atomic_store(&rootShutdown, 1); }

static const char* peerName(int fd, char* buf) {
  union mendSocketAddr a;
  socklen_t len = sizeof(a);
  memset(&a, 0, sizeof(a));
  if (getpeername(fd, &a.sa, &len) != 0) return strcpy(buf, "(unknown)");
  return mendSocketAddrStr(&a, buf);
}

/* ---------------------------------------------------------------- replies */

/* A reply; with MEND_BS_ROOT_OK the table follows, tableMac being its MAC.  nonce NULL: no MAC. */
static void sendReply(const struct bsRoot* rt, int fd, int status, int detail, const uint8_t* nonce, uint64_t tableMac,
                      int64_t ms) {
  struct mendBsRootReply rep = {.status = status, .nRanks = status == MEND_BS_ROOT_OK ? rt->nRanks : 0,
                                .detail = detail};
  rep.mac = nonce ? mendBsReplyMac(rt->id.secret, nonce, &rep, tableMac) : 0;
  if (ms == 0) {  /* a refusal: never wait for the peer to read it */
    (void)!send(fd, &rep, sizeof(rep), MSG_NOSIGNAL | MSG_DONTWAIT);
    return;
  }
  if (mendSocketSendAll(fd, &rep, sizeof(rep), &rootShutdown, ms) == ncclSuccess && status == MEND_BS_ROOT_OK)
    (void)mendSocketSendAll(fd, rt->table, (size_t)rt->nRanks * sizeof(*rt->table), &rootShutdown, ms);
}

/* Answer every registered rank (the table on success) and close their connections. */
static void rootAnswerAll(struct bsRoot* rt, int status, int detail) {
  uint64_t tableMac = status == MEND_BS_ROOT_OK ? mendBsTableMac(rt->id.secret, rt->table, rt->nRanks) : 0;
  for (int r = 0; rt->fds && r < rt->nRanks; r++) {
    if (rt->fds[r] < 0) continue;
    sendReply(rt, rt->fds[r], status, detail, rt->nonces[r], tableMac, ROOT_REPLY_MS);
    close(rt->fds[r]);
    rt->fds[r] = -1;
  }
}

/* ---------------------------------------------------------------- connections */

static void connClose(struct bsRoot* rt, int i) {
  struct rootConn* c = &rt->conns[i];
  if (c->fd >= 0) close(c->fd);
  free(c->ids);
  rt->conns[i] = rt->conns[--rt->nConns];
}

/* Refuse connection i with a status (no table, nothing about the job) and close it.  Only a proven
 * peer gets a MAC: the root is nobody's oracle. */
static void connRefuse(struct bsRoot* rt, int i, int status, int detail, int proven) {
  sendReply(rt, rt->conns[i].fd, status, detail, proven ? rt->conns[i].hello.nonce : NULL, 0, 0);
  connClose(rt, i);
}

/* Room for one more connection: the oldest one that proved nothing is closed, once it had
 * MEND_BS_UNPROVEN_GRACE_MS to do so (a burst of real ranks is never cut short: it waits in the
 * listen backlog instead). */
static int makeRoom(struct bsRoot* rt) {
  if (rt->nConns < ROOT_MAX_CONNS) return 1;
  int oldest = -1;
  for (int i = 0; i < rt->nConns; i++)
    if (rt->conns[i].stage == ROOT_READ_HELLO && (oldest < 0 || rt->conns[i].deadline < rt->conns[oldest].deadline))
      oldest = i;
  if (oldest < 0 || rt->conns[oldest].deadline - rt->helloMs + MEND_BS_UNPROVEN_GRACE_MS > mendTimeMs()) return 0;
  WARN_SPARSE(1000, "Bootstrap root: %d connections pending; closing the oldest, which proved nothing", rt->nConns);
  connClose(rt, oldest);
  return 1;
}

static void rootAccept(struct bsRoot* rt) {
  for (;;) {
    if (!makeRoom(rt)) {
      rt->acceptPauseUntil = mendTimeMs() + ROOT_FULL_PAUSE_MS;
      return;
    }
    int fd = accept4(rt->listenFd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      /* Out of descriptors or memory: the listener stays readable, so wait instead of spinning. */
      WARN_SPARSE(5000, "Bootstrap root: accept failed: %m; pausing %d ms", ROOT_ACCEPT_PAUSE_MS);
      rt->acceptPauseUntil = mendTimeMs() + ROOT_ACCEPT_PAUSE_MS;
      return;
    }
    struct rootConn c = {.fd = fd, .stage = ROOT_READ_HELLO, .deadline = mendTimeMs() + rt->helloMs};
    if (!mendBsSendChallenge(fd, c.nonce)) {
      close(fd);
      continue;
    }
    rt->conns[rt->nConns++] = c;
  }
}

/* Read what is there of the current item: 1 complete, 0 not yet, -1 closed or failed. */
static int connRead(struct rootConn* c, void* dst, size_t want) {
  while (c->off < want) {
    ssize_t n = recv(c->fd, (char*)dst + c->off, want - c->off, MSG_DONTWAIT);
    if (n > 0) { c->off += (size_t)n; continue; }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n < 0 && errno == EINTR) continue;
    return -1;
  }
  c->off = 0;
  return 1;
}

/* ---------------------------------------------------------------- the rendezvous */

static int rootAdopt(struct bsRoot* rt, int nRanks, int nIds, int idIdx) {
  if (nRanks < 1 || nIds < 1 || nIds > nRanks || idIdx < 0 || idIdx >= nIds) return 0;
  rt->nRanks = nRanks;
  rt->nIds = nIds;
  rt->idIdx = idIdx;
  rt->groupCount = mendBsGroupSize(idIdx, nRanks, nIds);
  rt->table = calloc((size_t)nRanks, sizeof(*rt->table));
  rt->have = calloc((size_t)nRanks, 1);
  rt->fds = malloc((size_t)nRanks * sizeof(int));
  rt->nonces = calloc((size_t)nRanks, sizeof(*rt->nonces));
  if (!rt->table || !rt->have || !rt->fds || !rt->nonces) {
    WARN("Bootstrap root: out of memory for %d ranks", nRanks);
    free(rt->table);
    free(rt->have);
    free(rt->fds);
    free(rt->nonces);
    rt->table = NULL;
    rt->have = NULL;
    rt->fds = NULL;
    rt->nonces = NULL;
    rt->nRanks = -1;
    return 0;
  }
  for (int r = 0; r < nRanks; r++) rt->fds[r] = -1;
  return 1;
}

/* A proven HELLO (and its ids) is complete: the rank joins the rendezvous. */
static void rootRegister(struct bsRoot* rt, int i) {
  struct rootConn* c = &rt->conns[i];
  int rank = c->hello.rank;
  if (rt->have[rank]) {  /* another connection claimed it while this one read its ids */
    char a[MEND_SOCKET_NAME_MAXLEN];
    WARN("Bootstrap root: rank %d registered twice; refusing the second, from %s", rank, peerName(c->fd, a));
    connRefuse(rt, i, MEND_BS_ROOT_ERR_DUP, rank, 1);
    return;
  }
  if (c->ids && rt->ids == NULL) {
    rt->ids = c->ids;
    c->ids = NULL;
  }
  rt->table[rank] = c->hello.addr;
  rt->have[rank] = 1;
  rt->fds[rank] = c->fd;
  memcpy(rt->nonces[rank], c->hello.nonce, MEND_BS_NONCE_BYTES);
  rt->nHave++;
  rt->groupGot++;
  c->fd = -1;  /* kept in fds until the reply */
  connClose(rt, i);
}

/* Why a proven HELLO does not fit the rendezvous (MEND_BS_ROOT_OK: it fits); *detail for the reply.
 * What the hello says of itself is checked before it shapes the rendezvous (the first one does). */
static int helloStatus(struct bsRoot* rt, const struct rootConn* c, int* detail) {
  const struct mendBsRootHello* h = &c->hello;
  const struct mendBsRootView view = {.nRanks = rt->nRanks, .nIds = rt->nIds, .idIdx = rt->idIdx};
  int status = mendBsRootHelloFits(h, &view, detail);
  if (status != MEND_BS_ROOT_OK) return status;
  if (rt->nRanks < 0 && !rootAdopt(rt, h->nRanks, h->nIds, h->idIdx)) return MEND_BS_ROOT_ERR_RANK;
  *detail = h->rank;
  if (rt->have[h->rank]) {
    char a[MEND_SOCKET_NAME_MAXLEN], b[MEND_SOCKET_NAME_MAXLEN];
    WARN("Bootstrap root: rank %d registered twice: first from %s, again from %s; refusing the second", h->rank,
         rt->fds[h->rank] >= 0 ? peerName(rt->fds[h->rank], a) : "(another root)", peerName(c->fd, b));
    return MEND_BS_ROOT_ERR_DUP;
  }
  return MEND_BS_ROOT_OK;
}

/* A proven HELLO: checked against the rendezvous before anything it announces is read. */
static void rootOnHello(struct bsRoot* rt, int i) {
  struct rootConn* c = &rt->conns[i];
  int detail, status = helloStatus(rt, c, &detail);
  if (status != MEND_BS_ROOT_OK) {
    connRefuse(rt, i, status, detail, 1);
  } else if (c->hello.count == 0) {
    rootRegister(rt, i);
  } else if ((c->ids = calloc((size_t)c->hello.count, sizeof(ncclUniqueId))) == NULL) {  /* count == nIds <= nRanks */
    connClose(rt, i);
  } else {
    c->stage = ROOT_READ_IDS;
  }
}

/* A proven TABLE from another root: its group's entries follow, exactly that many. */
static void rootOnTable(struct bsRoot* rt, int i) {
  struct rootConn* c = &rt->conns[i];
  const struct mendBsRootHello* h = &c->hello;
  const struct mendBsRootView view = {.nRanks = rt->nRanks, .nIds = rt->nIds, .idIdx = rt->idIdx};
  int detail;  /* checked before it shapes anything */
  if (mendBsRootHelloFits(h, &view, &detail) != MEND_BS_ROOT_OK) {
    WARN("Bootstrap root: dropping a TABLE that does not fit the rendezvous (from root %d of %d: %d entries of %d ranks)",
         h->rank, h->nIds, h->count, h->nRanks);
    connClose(rt, i);
  } else if (rt->nRanks < 0 && !rootAdopt(rt, h->nRanks, h->nIds, h->idIdx)) {
    connClose(rt, i);
  } else if (h->count == 0) {
    connClose(rt, i);
  } else {
    c->stage = ROOT_READ_TABLE;
    c->left = h->count;
  }
}

/* One TABLE entry arrived: it must belong to the sending root's group. */
static int rootOnEntry(struct bsRoot* rt, struct rootConn* c) {
  const struct mendBsRootEntry* e = &c->entry;
  const struct mendBsRootView view = {.nRanks = rt->nRanks, .nIds = rt->nIds, .idIdx = rt->idIdx};
  if (!mendBsRootEntryParse(&c->entry, sizeof(c->entry), &view, c->hello.rank, &c->entry)) {
    WARN("Bootstrap root %d: TABLE from root %d names rank %d, not one of its ranks; dropped", rt->idIdx,
         c->hello.rank, e->rank);
    return 0;
  }
  if (!rt->have[e->rank]) {
    rt->table[e->rank] = e->addr;
    rt->have[e->rank] = 1;
    rt->nHave++;
  }
  return --c->left > 0;
}

/* The hello is complete: is it for us, and does it prove the secret? */
static void rootCheckHello(struct bsRoot* rt, int i) {
  struct rootConn* c = &rt->conns[i];
  char a[MEND_SOCKET_NAME_MAXLEN];
  int proof = mendBsRootHelloParse(&c->hello, sizeof(c->hello), &rt->id, c->nonce, &c->hello);
  if (proof == MEND_BS_ROOT_ERR_MAGIC) {
    connRefuse(rt, i, MEND_BS_ROOT_ERR_MAGIC, 0, 0);
    return;
  }
  if (proof != MEND_BS_ROOT_OK) {
    WARN_SPARSE(1000, "Bootstrap root: refused %s (claims rank %d of %d): it does not know this job's secret "
                "(another job on the same NCCL_COMM_ID, or a stranger)", peerName(c->fd, a), c->hello.rank,
                c->hello.nRanks);
    connRefuse(rt, i, MEND_BS_ROOT_ERR_AUTH, 0, 0);
    return;
  }
  if (rt->firstMs == 0) rt->firstMs = mendTimeMs();
  if (c->hello.kind == MEND_BS_ROOT_HELLO) rootOnHello(rt, i);
  else if (c->hello.kind == MEND_BS_ROOT_TABLE) rootOnTable(rt, i);
  else connClose(rt, i);
}

/* Read what connection i has sent; it may be closed, registered or moved on. */
static void connProgress(struct bsRoot* rt, int i) {
  struct rootConn* c = &rt->conns[i];
  for (;;) {
    int got;
    if (c->stage == ROOT_READ_HELLO) got = connRead(c, &c->hello, sizeof(c->hello));
    else if (c->stage == ROOT_READ_IDS) got = connRead(c, c->ids, (size_t)c->hello.count * sizeof(ncclUniqueId));
    else got = connRead(c, &c->entry, sizeof(c->entry));
    if (got < 0) {
      connClose(rt, i);
      return;
    }
    if (got == 0) return;
    if (c->stage == ROOT_READ_HELLO) {
      int n = rt->nConns;
      rootCheckHello(rt, i);
      if (rt->nConns != n || c->stage == ROOT_READ_HELLO) return;  /* closed or registered: slot i reused */
    } else if (c->stage == ROOT_READ_IDS) {
      rootRegister(rt, i);
      return;
    } else if (!rootOnEntry(rt, c)) {
      connClose(rt, i);
      return;
    }
  }
}

/* One poll over the listener and every connection; expire those past their deadline. */
static void rootPollOnce(struct bsRoot* rt) {
  struct pollfd pfd[ROOT_MAX_CONNS + 1];
  int64_t now = mendTimeMs();
  int n = 0, ms = ROOT_POLL_MS, listening = rt->listenFd >= 0 && now >= rt->acceptPauseUntil;
  for (int i = 0; i < rt->nConns; i++) {
    pfd[n++] = (struct pollfd){.fd = rt->conns[i].fd, .events = POLLIN};
    if (rt->conns[i].deadline - now < ms) ms = (int)(rt->conns[i].deadline - now);
  }
  if (listening) pfd[n++] = (struct pollfd){.fd = rt->listenFd, .events = POLLIN};
  else if (rt->listenFd >= 0 && rt->acceptPauseUntil - now < ms) ms = (int)(rt->acceptPauseUntil - now);
  int rc = poll(pfd, (nfds_t)n, ms > 0 ? ms : 0);
  int nOld = rt->nConns;
  /* Backwards: closing entry i moves the last one (already handled) into its place. */
  for (int i = nOld - 1; rc > 0 && i >= 0; i--)
    if (pfd[i].revents) connProgress(rt, i);
  now = mendTimeMs();
  for (int i = rt->nConns - 1; i >= 0; i--) {
    if (rt->conns[i].deadline > now) continue;
    char a[MEND_SOCKET_NAME_MAXLEN];
    INFO_SPARSE(NCCL_BOOTSTRAP, 1000, "Bootstrap root: closing %s: its message was not complete within %lld ms "
                "(MEND_BOOTSTRAP_HELLO_TIMEOUT)", peerName(rt->conns[i].fd, a), (long long)rt->helloMs);
    connClose(rt, i);
  }
  if (rc > 0 && listening && pfd[n - 1].revents) rootAccept(rt);
}

/* Send our group's addresses to every other root (scalable init), proving each one's secret. */
static int rootSendTables(struct bsRoot* rt) {
  int64_t left = rt->timeoutMs - (mendTimeMs() - rt->firstMs);
  for (int j = 0; j < rt->nIds; j++) {
    if (j == rt->idIdx) continue;
    struct mendBsId id;
    memcpy(&id, rt->ids[j].internal, sizeof(id));
    int fd = -1;
    if (mendSocketConnect(&id.addr, &fd, &rootShutdown, left > 0 ? left : 1) != ncclSuccess) return 0;
    struct mendBsRootHello h;
    memset(&h, 0, sizeof(h));
    h.magic = id.magic;
    h.kind = MEND_BS_ROOT_TABLE;
    h.rank = rt->idIdx;
    h.nRanks = rt->nRanks;
    h.nIds = rt->nIds;
    h.idIdx = j;
    h.count = rt->groupCount;
    uint8_t nonce[MEND_BS_NONCE_BYTES];
    ncclResult_t r = mendBsRecvChallenge(fd, nonce, &rootShutdown, ROOT_REPLY_MS, &id.addr);
    if (r == ncclSuccess) {
      h.mac = mendBsHelloMac(id.secret, nonce, &h);
      r = mendSocketSendAll(fd, &h, sizeof(h), &rootShutdown, ROOT_REPLY_MS);
    }
    for (int rank = 0; rank < rt->nRanks && r == ncclSuccess; rank++) {
      if (mendBsRootOf(rank, rt->nRanks, rt->nIds) != rt->idIdx) continue;
      struct mendBsRootEntry e = {.rank = rank, .addr = rt->table[rank]};
      r = mendSocketSendAll(fd, &e, sizeof(e), &rootShutdown, ROOT_REPLY_MS);
    }
    close(fd);
    if (r != ncclSuccess) return 0;
  }
  return 1;
}

static void* senderMain(void* arg) {
  struct bsRoot* rt = arg;
  atomic_store(&rt->senderOk, rootSendTables(rt));
  atomic_store(&rt->senderDone, 1);
  return NULL;
}

/* Forward our complete group to the other roots from a helper thread: 1 when done, 0 while it
 * runs, -1 when it failed. */
static int rootForward(struct bsRoot* rt) {
  if (rt->ids == NULL) return -1;
  if (!rt->senderStarted) {
    if (pthread_create(&rt->sender, NULL, senderMain, rt) != 0) return -1;
    rt->senderStarted = 1;
    return 0;
  }
  if (!atomic_load(&rt->senderDone)) return 0;
  return atomic_load(&rt->senderOk) ? 1 : -1;
}

/* After each poll: forward our group when it is complete, answer everyone when all arrived.
 * Returns 1 when the root is done. */
static int rootStep(struct bsRoot* rt) {
  if (rt->firstMs && mendTimeMs() - rt->firstMs > rt->timeoutMs) {
    WARN("Bootstrap root: only %d of %d ranks arrived within %lld ms (MEND_BOOTSTRAP_TIMEOUT)", rt->nHave, rt->nRanks,
         (long long)rt->timeoutMs);
    rootAnswerAll(rt, MEND_BS_ROOT_ERR_TIMEOUT, rt->nHave);
    return 1;
  }
  if (rt->nRanks < 0 || rt->groupGot < rt->groupCount) return 0;
  if (rt->nIds > 1 && !rt->tablesSent) {
    int fw = rootForward(rt);
    if (fw < 0) {
      WARN("Bootstrap root %d: cannot forward its ranks to the other %d roots", rt->idIdx, rt->nIds - 1);
      rootAnswerAll(rt, MEND_BS_ROOT_ERR_ROOTS, rt->idIdx);
      return 1;
    }
    if (fw == 0) return 0;
    rt->tablesSent = 1;
  }
  if (rt->nHave < rt->nRanks) return 0;
  close(rt->listenFd);  /* no late connection can queue behind a finished rendezvous */
  rt->listenFd = -1;
  rootAnswerAll(rt, MEND_BS_ROOT_OK, 0);
  TRACE(NCCL_BOOTSTRAP, "Bootstrap root %d: rendezvous of %d ranks done", rt->idIdx, rt->nRanks);
  return 1;
}

static void rootFree(struct bsRoot* rt) {
  while (rt->nConns > 0) connClose(rt, rt->nConns - 1);
  for (int r = 0; rt->fds && r < rt->nRanks; r++) if (rt->fds[r] >= 0) close(rt->fds[r]);
  if (rt->listenFd >= 0) close(rt->listenFd);
  free(rt->ids);
  free(rt->table);
  free(rt->have);
  free(rt->fds);
  free(rt->nonces);
  free(rt);
}

static void* rootThread(void* arg) {
  struct bsRoot* rt = arg;
  while (!atomic_load(&rootShutdown)) {
    rootPollOnce(rt);
    if (rootStep(rt)) break;
  }
  if (rt->senderStarted) pthread_join(rt->sender, NULL); /* bounded: its sends stop at rootShutdown or time out */
  rootFree(rt);
  return NULL;
}

ncclResult_t mendBsRootStart(int listenFd, const struct mendBsId* id, int nRanks) {
  struct bsRoot* rt = calloc(1, sizeof(*rt));
  if (rt == NULL) {
    close(listenFd);
    WARN("Bootstrap root: out of memory");
    return ncclSystemError;
  }
  rt->listenFd = listenFd;
  rt->id = *id;
  rt->nRanks = -1;
  rt->timeoutMs = mendParamBootstrapTimeout();
  rt->helloMs = mendParamBootstrapHelloTimeout();
  /* NCCL_COMM_ID: rank 0's view is the reference, whoever arrives first. */
  if (nRanks > 0 && !rootAdopt(rt, nRanks, 1, 0)) {
    rootFree(rt);
    return ncclSystemError;
  }
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);  /* never blocks process exit */
  int err = pthread_create(&t, &attr, rootThread, rt);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    errno = err;
    WARN("Cannot start the bootstrap root thread: %m");
    rootFree(rt);
    return ncclSystemError;
  }
  return ncclSuccess;
}
