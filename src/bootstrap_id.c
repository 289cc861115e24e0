/*
 * Unique ids, the job secret, and the rank side of the root rendezvous.
 * A unique id holds a magic (which root), the root's address and a secret that every connection to
 * the root, and every connection between ranks, proves it knows (a MAC over a fresh nonce the
 * listener sends first; the secret never travels).  ncclGetUniqueId draws the secret at random;
 * with NCCL_COMM_ID it is derived from MEND_JOB_SECRET, else from a job id the launcher exports, so
 * two jobs on one NCCL_COMM_ID refuse each other instead of mixing.  Wire formats: docs/bootstrap.md.
 */
#include "bootstrap_priv.h"
#include "bootstrap_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checks.h"
#include "comm.h"
#include "misc/debug.h"
#include "misc/param.h"
#include "misc/utils.h"

_Static_assert(sizeof(struct mendBsId) <= NCCL_UNIQUE_ID_BYTES, "unique id too large");
_Static_assert(sizeof(struct mendBsRootHello) == 88, "hello has hidden padding (the MAC covers its bytes)");
_Static_assert(sizeof(struct mendBsRootReply) == 24, "reply has hidden padding");
_Static_assert(sizeof(struct mendBsHandshake) == 24, "handshake has hidden padding");

uint64_t mendBsRandom64(void) {
  uint64_t v = 0;
  (void)mendRandomBytes(&v, sizeof(v));
  return v;
}

/* ---------------------------------------------------------------- challenges (the MACs: bootstrap_wire.c) */

int mendBsSendChallenge(int fd, uint8_t nonce[MEND_BS_NONCE_BYTES]) {
  struct mendBsChallenge c = {.magic = MEND_BS_CHALLENGE_MAGIC};
  (void)mendRandomBytes(c.nonce, sizeof(c.nonce));
  memcpy(nonce, c.nonce, sizeof(c.nonce));
  return send(fd, &c, sizeof(c), MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(c);
}

ncclResult_t mendBsRecvChallenge(int fd, uint8_t nonce[MEND_BS_NONCE_BYTES], _Atomic int* abortFlag,
                                 int64_t timeoutMs, const union mendSocketAddr* from) {
  struct mendBsChallenge c;
  MENDCHECK(mendSocketRecvAll(fd, &c, sizeof(c), abortFlag, timeoutMs));
  if (!mendBsChallengeParse(&c, sizeof(c), nonce)) {
    char name[MEND_SOCKET_NAME_MAXLEN];
    WARN("Bootstrap: %s is not a Mend bootstrap listener (it sent 0x%016llx first)", mendSocketAddrStr(from, name),
         (unsigned long long)c.magic);
    return ncclRemoteError;
  }
  return ncclSuccess;
}

/* The key every connection of the network built on these ids proves: derived from all their secrets. */
static void networkKey(const ncclUniqueId* ids, int nIds, uint8_t key[MEND_MAC_KEY_BYTES]) {
  struct mendBsId id;
  memcpy(&id, ids[0].internal, sizeof(id));
  mendMacDeriveKey(id.secret, "mend-net", 8, key);
  for (int i = 1; i < nIds; i++) {
    uint8_t next[MEND_MAC_KEY_BYTES];
    memcpy(&id, ids[i].internal, sizeof(id));
    mendMacDeriveKey(key, id.secret, sizeof(id.secret), next);
    memcpy(key, next, sizeof(next));
  }
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

/* Job ids launchers export, alike on every rank of one job (first found wins). */
static const char* const jobIdVars[] = {"SLURM_JOB_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                                        "TORCHELASTIC_RUN_ID"};

/* The secret of an NCCL_COMM_ID job: MEND_JOB_SECRET, else the launcher's job id, else none (then
 * only the address names the job: anyone who can reach it can join). */
static void commIdSecret(const union mendSocketAddr* addr, uint8_t secret[MEND_MAC_KEY_BYTES]) {
  const char *from = "MEND_JOB_SECRET", *value = mendParamJobSecret();
  for (size_t i = 0; (!value || !*value) && i < sizeof(jobIdVars) / sizeof(jobIdVars[0]); i++) {
    from = jobIdVars[i];
    value = mendGetEnv(from);
    if (value && strcmp(value, "none") == 0) value = NULL;  /* torchrun's default run id */
  }
  if (!value || !*value) {
    from = NULL;
    value = "";
  }
  const char* step = from && strcmp(from, "SLURM_JOB_ID") == 0 ? mendGetEnv("SLURM_STEP_ID") : NULL;
  char name[MEND_SOCKET_NAME_MAXLEN];
  mendSocketAddrStr(addr, name);
  size_t len = strlen(value) + strlen(name) + (step ? strlen(step) : 0) + 64;
  char* ctx = malloc(len);
  if (ctx) {
    int n = snprintf(ctx, len, "mend-job|%s=%s|%s|%s", from ? from : "", value, step ? step : "", name);
    mendMacDeriveKey(NULL, ctx, (size_t)n, secret);
    memset(ctx, 0, len);
    free(ctx);
  } else {
    mendMacDeriveKey(NULL, name, strlen(name), secret);
  }
  if (from) INFO(NCCL_BOOTSTRAP, "Bootstrap: NCCL_COMM_ID=%s, job secret from %s", name, from);
  else INFO_ONCE(NCCL_BOOTSTRAP | NCCL_INIT, "Bootstrap: NCCL_COMM_ID=%s without MEND_JOB_SECRET or a launcher job id: "
                 "any process that reaches it can join, and two jobs on it cannot be told apart", name);
}


/* A fresh id for the root listening on fd: random magic and secret; the root thread starts. */
static ncclResult_t startRoot(int fd, struct mendBsId* id, ncclUniqueId* uid) {
  id->magic = mendBsRandom64();
  (void)mendRandomBytes(id->secret, sizeof(id->secret));
  MENDCHECK(mendBsRootStart(fd, id, -1));
  memset(uid, 0, sizeof(*uid));
  memcpy(uid->internal, id, sizeof(*id));
  return ncclSuccess;
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
    commIdSecret(&id.addr, id.secret);
  } else {
    int fd = -1;
    MENDCHECK(mendBsListenOnOobIface(NULL, &fd, &id.addr));
    return startRoot(fd, &id, uid);
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
  return startRoot(fd, &id, uid);
}

/* ---------------------------------------------------------------- rank side */

/* The root's answer: status, then (when OK) the table, whose MAC proves the root knows the secret. */
static ncclResult_t readReply(struct ncclComm* comm, int fd, const struct mendBsId* rootId,
                              const struct mendBsRootHello* h, union mendSocketAddr* table, int64_t timeout) {
  char name[MEND_SOCKET_NAME_MAXLEN];
  struct mendBsRootReply rep;
  MENDCHECK(mendSocketRecvAll(fd, &rep, sizeof(rep), &comm->abortFlag, timeout));
  MENDCHECK(mendBsRootReplyParse(&rep, sizeof(rep), comm->rank, comm->nRanks, &rootId->addr, &rep));
  MENDCHECK(mendSocketRecvAll(fd, table, (size_t)comm->nRanks * sizeof(*table), &comm->abortFlag, timeout));
  uint64_t tableMac = mendBsTableMac(rootId->secret, table, comm->nRanks);
  if (rep.mac != mendBsReplyMac(rootId->secret, h->nonce, &rep, tableMac)) {
    WARN("Bootstrap: the root at %s could not prove it knows this job's secret; its table is ignored",
         mendSocketAddrStr(&rootId->addr, name));
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

/* Report to our root (proving the secret) and receive the address table. */
static ncclResult_t rendezvous(struct ncclComm* comm, int nIds, const ncclUniqueId* ids, const struct mendBsId* rootId,
                               int rootIdx, const union mendSocketAddr* myAddr, union mendSocketAddr* table) {
  int64_t timeout = mendParamBootstrapTimeout();
  int fd = -1;
  ncclResult_t res;
  MENDCHECK(mendSocketConnect(&rootId->addr, &fd, &comm->abortFlag, timeout));
  uint8_t nonce[MEND_BS_NONCE_BYTES];
  MENDCHECKGOTO(mendBsRecvChallenge(fd, nonce, &comm->abortFlag, timeout, &rootId->addr), res, fail_close);
  struct mendBsRootHello h;
  memset(&h, 0, sizeof(h));
  h.magic = rootId->magic;
  h.kind = MEND_BS_ROOT_HELLO;
  h.rank = comm->rank;
  h.nRanks = comm->nRanks;
  h.nIds = nIds;
  h.idIdx = rootIdx;
  h.count = nIds > 1 ? nIds : 0;
  h.addr = *myAddr;
  (void)mendRandomBytes(h.nonce, sizeof(h.nonce));
  h.mac = mendBsHelloMac(rootId->secret, nonce, &h);
  MENDCHECKGOTO(mendSocketSendAll(fd, &h, sizeof(h), &comm->abortFlag, timeout), res, fail_close);
  if (nIds > 1)
    MENDCHECKGOTO(mendSocketSendAll(fd, ids, (size_t)nIds * sizeof(*ids), &comm->abortFlag, timeout), res, fail_close);
  MENDCHECKGOTO(readReply(comm, fd, rootId, &h, table, timeout), res, fail_close);
  close(fd);
  return ncclSuccess;
fail_close:
  close(fd);
  return res;
}

/* NCCL_COMM_ID: rank 0 starts the root on the named (local) address. */
static ncclResult_t startCommIdRoot(struct ncclComm* comm, const struct mendBsId* rootId) {
  int rfd = -1;
  char name[MEND_SOCKET_NAME_MAXLEN];
  if (mendSocketListen(&rootId->addr, &rfd, NULL) != ncclSuccess) {
    WARN("Cannot start the bootstrap root at NCCL_COMM_ID=%s (the address must be local to rank 0, and free: "
         "is another job using it?)", mendSocketAddrStr(&rootId->addr, name));
    return ncclSystemError;
  }
  return mendBsRootStart(rfd, rootId, comm->nRanks);
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
  int rootIdx = mendBsRootOf(comm->rank, comm->nRanks, nIds);
  struct mendBsId rootId;
  memcpy(&rootId, ids[rootIdx].internal, sizeof(rootId));
  uint64_t magic = rootId.magic;
  for (int i = 0; nIds > 1 && i < nIds; i++) {
    struct mendBsId id;
    memcpy(&id, ids[i].internal, sizeof(id));
    magic = mendHashCombine(i ? magic : 0x4d454e44ULL, id.magic);
  }
  uint8_t key[MEND_MAC_KEY_BYTES];
  networkKey(ids, nIds, key);
  if (rootId.fromCommId && comm->rank == 0) MENDCHECK(startCommIdRoot(comm, &rootId));
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
  MENDCHECK(mendBsCreate(comm, magic, key, listenFd, &myAddr, table, &comm->bootstrap));
  INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d of %d connected through %d root(s)", comm->rank, comm->nRanks, nIds);
  return ncclSuccess;
fail_free_table:
  free(table);
fail_close_listen:
  close(listenFd);
  return res;
}
