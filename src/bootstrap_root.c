/*
 * Unique ids and the root rendezvous.
 * A unique id holds a magic and the root's address.  The root is a detached thread that collects
 * (rank, listen address) from the ranks that name it, and answers each with the full address table.
 * With several ids (ncclCommInitRankScalable) rank r reports to root floor(r * nIds / nRanks); when a
 * root has all of its ranks it sends their addresses to every other root, so each root can answer
 * with the full table.  Wire formats and error statuses: docs/bootstrap.md.
 */
#include "bootstrap_priv.h"

#include <errno.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "checks.h"
#include "comm.h"
#include "misc/debug.h"
#include "misc/param.h"
#include "misc/utils.h"

#define ROOT_READ_MS 5000  /* bound on reading one hello once its connection is accepted */

/* The front of ncclUniqueId.internal (the rest is zero). */
struct mendBsId {
  uint64_t magic;              /* network magic (random, or a hash of NCCL_COMM_ID) */
  union mendSocketAddr addr;   /* root address */
  uint8_t fromCommId;          /* 1: NCCL_COMM_ID names the root; rank 0 starts it at init */
};
_Static_assert(sizeof(struct mendBsId) <= NCCL_UNIQUE_ID_BYTES, "unique id too large");

enum rootMsgKind {
  ROOT_HELLO = 1, /* a rank reports its listen address */
  ROOT_TABLE = 2  /* another root forwards the addresses of its ranks */
};
struct rootHello {
  uint64_t magic;             /* magic of the root this is sent to */
  int32_t kind;               /* enum rootMsgKind */
  int32_t rank;               /* HELLO: the rank; TABLE: the sending root's index */
  int32_t nRanks;             /* communicator size as the sender sees it */
  int32_t nIds;               /* number of roots */
  int32_t idIdx;              /* index of the receiving root */
  int32_t count;              /* HELLO: ids that follow (nIds > 1); TABLE: entries that follow */
  union mendSocketAddr addr;  /* HELLO: the rank's listen address */
};
struct rootEntry {
  int32_t rank;               /* rank */
  union mendSocketAddr addr;  /* its listen address */
};
enum rootStatus {
  ROOT_OK = 0,
  ROOT_ERR_MAGIC = 1,   /* the id's magic is not this root's */
  ROOT_ERR_NRANKS = 2,  /* nranks differs from the first rank's (detail: that value) */
  ROOT_ERR_RANK = 3,    /* rank out of range or reporting to the wrong root */
  ROOT_ERR_DUP = 4,     /* rank already registered */
  ROOT_ERR_TIMEOUT = 5, /* not every rank arrived in time (detail: ranks seen) */
  ROOT_ERR_ROOTS = 6    /* could not reach another root (scalable init) */
};
struct rootReply {
  int32_t status;  /* enum rootStatus */
  int32_t nRanks;  /* table entries that follow when ROOT_OK */
  int32_t detail;  /* status-specific number */
  int32_t pad;     /* keeps the table aligned */
};

struct bsRoot {
  int listenFd;                /* the root's listening socket */
  uint64_t magic;              /* accepted magic */
  int nRanks;                  /* -1 until the first message */
  int nIds, idIdx;             /* roots, and which one this is */
  ncclUniqueId* ids;           /* [nIds] every root's id (nIds > 1) */
  union mendSocketAddr* table; /* [nRanks] */
  char* have;                  /* [nRanks] entry known */
  int* fds;                    /* [nRanks] connections of our ranks awaiting the reply */
  int nHave;                   /* entries known */
  int groupCount, groupGot;    /* ranks reporting to this root, and how many did */
  int tablesSent;              /* our group's table went to the other roots */
  int64_t firstMs;             /* first contact, for the rendezvous bound */
  int64_t timeoutMs;           /* MEND_BOOTSTRAP_TIMEOUT */
};

static _Atomic int rootShutdown;  /* library unload: root threads exit */
__attribute__((destructor)) static void rootAtExit(void) { atomic_store(&rootShutdown, 1); }

uint64_t mendBsRandom64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) v = mendHashCombine(mendTimeNs(), (uint64_t)getpid());
  return v;
}

static int rootOf(int rank, int nRanks, int nIds) { return (int)((int64_t)rank * nIds / nRanks); }

static int groupSize(int idx, int nRanks, int nIds) {
  int n = 0;
  for (int r = 0; r < nRanks; r++) n += rootOf(r, nRanks, nIds) == idx;
  return n;
}

/* ---------------------------------------------------------------- root thread */

static void reply(int fd, int status, int detail, const struct bsRoot* rt) {
  struct rootReply rep = {.status = status, .nRanks = status == ROOT_OK ? rt->nRanks : 0, .detail = detail};
  if (mendSocketSendAll(fd, &rep, sizeof(rep), NULL, ROOT_READ_MS) == ncclSuccess && status == ROOT_OK)
    (void)mendSocketSendAll(fd, rt->table, (size_t)rt->nRanks * sizeof(*rt->table), NULL, ROOT_READ_MS);
}

static void rootFailAll(struct bsRoot* rt, int status, int detail) {
  for (int r = 0; rt->fds && r < rt->nRanks; r++) {
    if (rt->fds[r] < 0) continue;
    reply(rt->fds[r], status, detail, rt);
    close(rt->fds[r]);
    rt->fds[r] = -1;
  }
}

static int rootAdopt(struct bsRoot* rt, const struct rootHello* h) {
  if (h->nRanks < 1 || h->nIds < 1 || h->nIds > h->nRanks || h->idIdx < 0 || h->idIdx >= h->nIds) return 0;
  rt->nRanks = h->nRanks;
  rt->nIds = h->nIds;
  rt->idIdx = h->idIdx;
  rt->groupCount = groupSize(rt->idIdx, rt->nRanks, rt->nIds);
  rt->table = calloc((size_t)rt->nRanks, sizeof(*rt->table));
  rt->have = calloc((size_t)rt->nRanks, 1);
  rt->fds = malloc((size_t)rt->nRanks * sizeof(int));
  if (!rt->table || !rt->have || !rt->fds) return 0;
  for (int r = 0; r < rt->nRanks; r++) rt->fds[r] = -1;
  return 1;
}

/* A rank's HELLO: check it and keep its connection for the reply.  Returns 1 when fd was kept. */
static int rootHello(struct bsRoot* rt, int fd, const struct rootHello* h) {
  if (rt->nRanks > 0 && h->nRanks != rt->nRanks) { reply(fd, ROOT_ERR_NRANKS, rt->nRanks, rt); return 0; }
  if (rt->nRanks > 0 && (h->nIds != rt->nIds || h->idIdx != rt->idIdx)) { reply(fd, ROOT_ERR_RANK, rt->nIds, rt); return 0; }
  if (rt->nRanks < 0 && !rootAdopt(rt, h)) { reply(fd, ROOT_ERR_RANK, 0, rt); return 0; }
  if (h->count > 0 && rt->ids == NULL) {
    if (h->count != rt->nIds || (rt->ids = calloc((size_t)h->count, sizeof(ncclUniqueId))) == NULL) return 0;
    if (mendSocketRecvAll(fd, rt->ids, (size_t)h->count * sizeof(ncclUniqueId), NULL, ROOT_READ_MS) != ncclSuccess) {
      free(rt->ids);
      rt->ids = NULL;
      return 0;
    }
  } else if (h->count > 0) {
    ncclUniqueId skip;
    for (int i = 0; i < h->count; i++)
      if (mendSocketRecvAll(fd, &skip, sizeof(skip), NULL, ROOT_READ_MS) != ncclSuccess) return 0;
  }
  if (h->rank < 0 || h->rank >= rt->nRanks || rootOf(h->rank, rt->nRanks, rt->nIds) != rt->idIdx) {
    reply(fd, ROOT_ERR_RANK, rt->nRanks, rt);
    return 0;
  }
  if (rt->have[h->rank]) { reply(fd, ROOT_ERR_DUP, h->rank, rt); return 0; }
  rt->table[h->rank] = h->addr;
  rt->have[h->rank] = 1;
  rt->fds[h->rank] = fd;
  rt->nHave++;
  rt->groupGot++;
  return 1;
}

/* Another root's TABLE: the addresses of its ranks. */
static void rootTable(struct bsRoot* rt, int fd, const struct rootHello* h) {
  if (rt->nRanks < 0) {
    struct rootHello self = *h;  /* h->idIdx is our index as the sender knows it */
    if (!rootAdopt(rt, &self)) return;
  }
  for (int i = 0; i < h->count; i++) {
    struct rootEntry e;
    if (mendSocketRecvAll(fd, &e, sizeof(e), NULL, ROOT_READ_MS) != ncclSuccess) return;
    if (e.rank < 0 || e.rank >= rt->nRanks || rt->have[e.rank]) continue;
    rt->table[e.rank] = e.addr;
    rt->have[e.rank] = 1;
    rt->nHave++;
  }
}

/* Send our group's addresses to every other root (scalable init). */
static int rootSendTables(struct bsRoot* rt) {
  int64_t left = rt->timeoutMs - (mendTimeMs() - rt->firstMs);
  for (int j = 0; j < rt->nIds; j++) {
    if (j == rt->idIdx) continue;
    struct mendBsId id;
    memcpy(&id, rt->ids[j].internal, sizeof(id));
    int fd = -1;
    if (mendSocketConnect(&id.addr, &fd, &rootShutdown, left > 0 ? left : 1) != ncclSuccess) return 0;
    struct rootHello h = {.magic = id.magic, .kind = ROOT_TABLE, .rank = rt->idIdx, .nRanks = rt->nRanks,
                          .nIds = rt->nIds, .idIdx = j, .count = rt->groupCount};
    ncclResult_t r = mendSocketSendAll(fd, &h, sizeof(h), &rootShutdown, ROOT_READ_MS);
    for (int rank = 0; rank < rt->nRanks && r == ncclSuccess; rank++) {
      if (rootOf(rank, rt->nRanks, rt->nIds) != rt->idIdx) continue;
      struct rootEntry e = {.rank = rank, .addr = rt->table[rank]};
      r = mendSocketSendAll(fd, &e, sizeof(e), &rootShutdown, ROOT_READ_MS);
    }
    close(fd);
    if (r != ncclSuccess) return 0;
  }
  return 1;
}

static void rootHandle(struct bsRoot* rt, int fd) {
  struct rootHello h;
  if (mendSocketRecvAll(fd, &h, sizeof(h), &rootShutdown, ROOT_READ_MS) != ncclSuccess) { close(fd); return; }
  if (h.magic != rt->magic) {
    reply(fd, ROOT_ERR_MAGIC, 0, rt);
    close(fd);
    return;
  }
  if (rt->firstMs == 0) rt->firstMs = mendTimeMs();
  if (h.kind == ROOT_HELLO) {
    if (!rootHello(rt, fd, &h)) close(fd);
  } else {
    if (h.kind == ROOT_TABLE) rootTable(rt, fd, &h);
    close(fd);
  }
}

static void rootFree(struct bsRoot* rt) {
  for (int r = 0; rt->fds && r < rt->nRanks; r++) if (rt->fds[r] >= 0) close(rt->fds[r]);
  if (rt->listenFd >= 0) close(rt->listenFd);
  free(rt->ids);
  free(rt->table);
  free(rt->have);
  free(rt->fds);
  free(rt);
}

static void* rootThread(void* arg) {
  struct bsRoot* rt = arg;
  while (!atomic_load(&rootShutdown)) {
    if (rt->firstMs && mendTimeMs() - rt->firstMs > rt->timeoutMs) {
      WARN("Bootstrap root: only %d of %d ranks arrived within %lld ms (MEND_BOOTSTRAP_TIMEOUT)", rt->nHave,
           rt->nRanks, (long long)rt->timeoutMs);
      rootFailAll(rt, ROOT_ERR_TIMEOUT, rt->nHave);
      break;
    }
    struct pollfd p = {.fd = rt->listenFd, .events = POLLIN};
    if (poll(&p, 1, 100) <= 0) continue;
    int fd = -1;
    if (mendSocketAccept(rt->listenFd, &fd, &rootShutdown, 0) != ncclSuccess) continue;
    rootHandle(rt, fd);
    if (rt->nRanks < 0 || rt->groupGot < rt->groupCount) continue;
    if (rt->nIds > 1 && !rt->tablesSent) {
      if (rt->ids == NULL || !rootSendTables(rt)) {
        WARN("Bootstrap root %d: cannot forward its ranks to the other %d roots", rt->idIdx, rt->nIds - 1);
        rootFailAll(rt, ROOT_ERR_ROOTS, rt->idIdx);
        break;
      }
      rt->tablesSent = 1;
    }
    if (rt->nHave == rt->nRanks) {
      close(rt->listenFd);  /* no late connection can queue behind a finished rendezvous */
      rt->listenFd = -1;
      rootFailAll(rt, ROOT_OK, 0);
      TRACE(NCCL_BOOTSTRAP, "Bootstrap root %d: rendezvous of %d ranks done", rt->idIdx, rt->nRanks);
      break;
    }
  }
  rootFree(rt);
  return NULL;
}

/* Start a root on an open listening socket; nRanks < 0 when the first rank will tell. */
static ncclResult_t rootStart(int listenFd, uint64_t magic, int nRanks) {
  struct bsRoot* rt = calloc(1, sizeof(*rt));
  if (rt == NULL) {
    close(listenFd);
    WARN("Bootstrap root: out of memory");
    return ncclSystemError;
  }
  rt->listenFd = listenFd;
  rt->magic = magic;
  rt->nRanks = -1;
  rt->timeoutMs = mendParamBootstrapTimeout();
  if (nRanks > 0) {  /* NCCL_COMM_ID: rank 0's view is the reference, whoever arrives first */
    struct rootHello self = {.nRanks = nRanks, .nIds = 1, .idIdx = 0};
    if (!rootAdopt(rt, &self)) {
      WARN("Bootstrap root: out of memory for %d ranks", nRanks);
      rootFree(rt);
      return ncclSystemError;
    }
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

/* ---------------------------------------------------------------- unique id */

ncclResult_t mendBsListenOnOobIface(const union mendSocketAddr* near, int* fd, union mendSocketAddr* bound) {
  struct mendIface iface;
  const char* oob = mendParamOobIfname();
  const char* spec = mendParamSocketIfname();
  int found;
  if (oob && *oob) {
    found = mendFindInterfaces(oob, &iface, 1);
    if (!found) {
      WARN("MEND_OOB_IFNAME=%s matches no usable interface", oob);
      return ncclSystemError;
    }
  } else {
    found = near && mendFindInterfaceForRemote(near, &iface);
    if (!found) found = mendFindInterfaces(spec, &iface, 1);
    if (!found) {
      WARN("No usable network interface for the bootstrap (NCCL_SOCKET_IFNAME=%s)", spec ? spec : "<unset>");
      return ncclSystemError;
    }
  }
  union mendSocketAddr addr = iface.addr;
  if (addr.sa.sa_family == AF_INET) addr.sin.sin_port = 0; else addr.sin6.sin6_port = 0;
  MENDCHECK(mendSocketListen(&addr, fd, bound));
  char name[MEND_SOCKET_NAME_MAXLEN];
  INFO(NCCL_BOOTSTRAP, "Bootstrap: listening on %s (%s)", mendSocketAddrStr(bound, name), iface.name);
  return ncclSuccess;
}

static uint64_t commIdMagic(const union mendSocketAddr* addr) {
  char name[MEND_SOCKET_NAME_MAXLEN];
  mendSocketAddrStr(addr, name);
  return mendHash(name, strlen(name)) ^ 0x4e43434c434f4d4dULL;  /* identical on every rank */
}

ncclResult_t mendBootstrapGetUniqueId(ncclUniqueId* uid) {
  struct mendBsId id;
  memset(&id, 0, sizeof(id));
  const char* env = mendParamCommId();
  if (env && *env) {
    if (mendSocketParseAddr(env, &id.addr) != ncclSuccess) {
      WARN("Invalid NCCL_COMM_ID='%s': expected <ipv4>:<port>, [<ipv6>]:<port> or <host>:<port>", env);
      return ncclInvalidArgument;
    }
    id.magic = commIdMagic(&id.addr);
    id.fromCommId = 1;
  } else {
    int fd = -1;
    MENDCHECK(mendBsListenOnOobIface(NULL, &fd, &id.addr));
    id.magic = mendBsRandom64();
    MENDCHECK(rootStart(fd, id.magic, -1));
  }
  memset(uid, 0, sizeof(*uid));
  memcpy(uid->internal, &id, sizeof(id));
  return ncclSuccess;
}

ncclResult_t mendBsGetLoopbackId(ncclUniqueId* uid) {
  struct mendBsId id;
  memset(&id, 0, sizeof(id));
  union mendSocketAddr lo;
  memset(&lo, 0, sizeof(lo));
  lo.sin.sin_family = AF_INET;
  lo.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = -1;
  MENDCHECK(mendSocketListen(&lo, &fd, &id.addr));
  id.magic = mendBsRandom64();
  MENDCHECK(rootStart(fd, id.magic, -1));
  memset(uid, 0, sizeof(*uid));
  memcpy(uid->internal, &id, sizeof(id));
  return ncclSuccess;
}

/* ---------------------------------------------------------------- rank side */

static void warnStatus(const struct rootReply* rep, int rank, int nRanks, const union mendSocketAddr* root) {
  char name[MEND_SOCKET_NAME_MAXLEN];
  mendSocketAddrStr(root, name);
  switch (rep->status) {
  case ROOT_ERR_MAGIC: WARN("Bootstrap: root %s rejected rank %d: the unique id does not belong to it (magic mismatch)", name, rank); break;
  case ROOT_ERR_NRANKS: WARN("Bootstrap: rank %d called init with nranks=%d but other ranks use nranks=%d", rank, nRanks, rep->detail); break;
  case ROOT_ERR_RANK: WARN("Bootstrap: root %s rejected rank %d of %d (out of range or wrong root for ncclCommInitRankScalable)", name, rank, nRanks); break;
  case ROOT_ERR_DUP: WARN("Bootstrap: rank %d was already registered at root %s by another caller (duplicate rank)", rank, name); break;
  case ROOT_ERR_TIMEOUT: WARN("Bootstrap: root %s gave up: only %d of %d ranks arrived (MEND_BOOTSTRAP_TIMEOUT)", name, rep->detail, nRanks); break;
  case ROOT_ERR_ROOTS: WARN("Bootstrap: root %d could not reach the other roots", rep->detail); break;
  default: WARN("Bootstrap: root %s answered with unknown status %d", name, rep->status); break;
  }
}

/* Report to our root and receive the address table. */
static ncclResult_t rendezvous(struct ncclComm* comm, int nIds, const ncclUniqueId* ids, const struct mendBsId* rootId,
                               int rootIdx, const union mendSocketAddr* myAddr, union mendSocketAddr* table) {
  int64_t timeout = mendParamBootstrapTimeout();
  int fd = -1;
  ncclResult_t res;
  char name[MEND_SOCKET_NAME_MAXLEN];
  MENDCHECK(mendSocketConnect(&rootId->addr, &fd, &comm->abortFlag, timeout));
  struct rootHello h = {.magic = rootId->magic, .kind = ROOT_HELLO, .rank = comm->rank, .nRanks = comm->nRanks,
                        .nIds = nIds, .idIdx = rootIdx, .count = nIds > 1 ? nIds : 0, .addr = *myAddr};
  MENDCHECKGOTO(mendSocketSendAll(fd, &h, sizeof(h), &comm->abortFlag, timeout), res, fail_close);
  if (nIds > 1)
    MENDCHECKGOTO(mendSocketSendAll(fd, ids, (size_t)nIds * sizeof(*ids), &comm->abortFlag, timeout), res, fail_close);
  struct rootReply rep;
  MENDCHECKGOTO(mendSocketRecvAll(fd, &rep, sizeof(rep), &comm->abortFlag, timeout), res, fail_close);
  if (rep.status != ROOT_OK) {
    warnStatus(&rep, comm->rank, comm->nRanks, &rootId->addr);
    res = rep.status == ROOT_ERR_TIMEOUT || rep.status == ROOT_ERR_ROOTS ? ncclRemoteError : ncclInvalidUsage;
    goto fail_close;
  }
  if (rep.nRanks != comm->nRanks) {
    WARN("Bootstrap: root %s sent a table of %d ranks, expected %d", mendSocketAddrStr(&rootId->addr, name),
         rep.nRanks, comm->nRanks);
    res = ncclInternalError;
    goto fail_close;
  }
  MENDCHECKGOTO(mendSocketRecvAll(fd, table, (size_t)comm->nRanks * sizeof(*table), &comm->abortFlag, timeout), res,
                fail_close);
  close(fd);
  return ncclSuccess;
fail_close:
  close(fd);
  return res;
}

ncclResult_t mendBootstrapInit(struct ncclComm* comm, int nIds, const ncclUniqueId* ids) {
  ncclResult_t res;
  if (comm == NULL || ids == NULL || nIds < 1 || comm->nRanks < 1 || nIds > comm->nRanks) {
    WARN("mendBootstrapInit: invalid arguments (nIds %d, nRanks %d)", nIds, comm ? comm->nRanks : 0);
    return ncclInvalidArgument;
  }
  /* Identical ids (NCCL_COMM_ID on every rank) mean a single root. */
  int same = 1;
  for (int i = 1; i < nIds && same; i++) same = memcmp(&ids[i], &ids[0], sizeof(ids[0])) == 0;
  if (same) nIds = 1;
  int rootIdx = rootOf(comm->rank, comm->nRanks, nIds);
  struct mendBsId rootId;
  memcpy(&rootId, ids[rootIdx].internal, sizeof(rootId));
  uint64_t magic = rootId.magic;
  for (int i = 0; nIds > 1 && i < nIds; i++) {
    struct mendBsId id;
    memcpy(&id, ids[i].internal, sizeof(id));
    magic = mendHashCombine(i ? magic : 0x4d454e44ULL, id.magic);
  }
  if (rootId.fromCommId && comm->rank == 0) {
    int rfd = -1;
    char name[MEND_SOCKET_NAME_MAXLEN];
    if (mendSocketListen(&rootId.addr, &rfd, NULL) != ncclSuccess) {
      WARN("Cannot start the bootstrap root at NCCL_COMM_ID=%s (the address must be local to rank 0)",
           mendSocketAddrStr(&rootId.addr, name));
      return ncclSystemError;
    }
    MENDCHECK(rootStart(rfd, rootId.magic, comm->nRanks));
  }
  int listenFd = -1;
  union mendSocketAddr myAddr;
  MENDCHECK(mendBsListenOnOobIface(&rootId.addr, &listenFd, &myAddr));
  union mendSocketAddr* table = calloc((size_t)comm->nRanks, sizeof(*table));
  if (table == NULL) {
    WARN("Bootstrap: out of memory for %d addresses", comm->nRanks);
    res = ncclSystemError;
    goto fail_close_listen;
  }
  MENDCHECKGOTO(rendezvous(comm, nIds, ids, &rootId, rootIdx, &myAddr, table), res, fail_free_table);
  /* mendBsCreate owns listenFd and table from here, on success and failure alike. */
  MENDCHECK(mendBsCreate(comm, magic, listenFd, &myAddr, table, &comm->bootstrap));
  INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d of %d connected through %d root(s)", comm->rank, comm->nRanks, nIds);
  return ncclSuccess;
fail_free_table:
  free(table);
fail_close_listen:
  close(listenFd);
  return res;
}
