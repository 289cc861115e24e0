/*
 * Grow ids: a bootstrap id plus a tail {tag, old size, MAC} at the end of ncclUniqueId (see
 * bootstrap_grow.h; wire format in docs/bootstrap.md).  The root is the ordinary one
 * (bootstrap_root.c); ranks reach it through mendBootstrapInit like any init.
 */
#include "bootstrap_grow.h"

#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "bootstrap_priv.h"
#include "checks.h"
#include "misc/debug.h"

#define GROW_ID_TAG 0x574f52474d444e45ULL /* tells a grow id from ncclGetUniqueId's */
#define GROW_MAC_DOMAIN 'G'               /* no other bootstrap MAC starts with this byte */

/* The end of a grow id's bytes. */
struct growTail {
  uint64_t tag;      /* GROW_ID_TAG */
  int32_t oldNRanks; /* size of the communicator being grown */
  uint32_t pad;      /* zero */
  uint64_t mac;      /* growMac: the id's secret over the root's identity and this tail */
};
#define GROW_TAIL_OFF (NCCL_UNIQUE_ID_BYTES - sizeof(struct growTail))
_Static_assert(sizeof(struct mendBsId) <= GROW_TAIL_OFF, "the grow tail overlaps the bootstrap id");
_Static_assert(sizeof(struct growTail) == 24, "grow tail has hidden padding (the MAC covers its bytes)");

static uint64_t growMac(const struct mendBsId* id, const struct growTail* t) {
  struct mendMac m;
  uint8_t domain = GROW_MAC_DOMAIN;
  mendMacInit(&m, id->secret);
  mendMacUpdate(&m, &domain, 1);
  mendMacUpdate(&m, id, offsetof(struct mendBsId, secret));
  mendMacUpdate(&m, t, offsetof(struct growTail, mac));
  return mendMacFinal(&m);
}

ncclResult_t mendBsGrowIdCreate(const union mendSocketAddr* near, int oldNRanks, ncclUniqueId* out) {
  struct mendBsId id;
  memset(&id, 0, sizeof(id));
  int fd = -1;
  MENDCHECK(mendBsListenOnOobIface(near, &fd, &id.addr));
  id.magic = mendBsRandom64();
  (void)mendRandomBytes(id.secret, sizeof(id.secret));
  MENDCHECK(mendBsRootStart(fd, &id, -1)); /* owns fd from here */
  struct growTail t = {.tag = GROW_ID_TAG, .oldNRanks = oldNRanks};
  t.mac = growMac(&id, &t);
  memset(out, 0, sizeof(*out));
  memcpy(out->internal, &id, sizeof(id));
  memcpy(out->internal + GROW_TAIL_OFF, &t, sizeof(t));
  return ncclSuccess;
}

int mendBsGrowIdParse(const ncclUniqueId* uid, int* oldNRanks, const char** why) {
  struct mendBsId id;
  struct growTail t;
  memcpy(&id, uid->internal, sizeof(id));
  memcpy(&t, uid->internal + GROW_TAIL_OFF, sizeof(t));
  int zeros = id.fromCommId == 0 && id.pad[0] == 0 && id.pad[1] == 0 && id.pad[2] == 0 && t.pad == 0;
  for (size_t i = sizeof(id); i < GROW_TAIL_OFF; i++) zeros &= uid->internal[i] == 0;
  int family = id.addr.sa.sa_family;
  int port = family == AF_INET ? id.addr.sin.sin_port : family == AF_INET6 ? id.addr.sin6.sin6_port : 0;
  if (t.tag != GROW_ID_TAG) {
    *why = "it is not an id from ncclCommGetUniqueId (an id from ncclGetUniqueId cannot grow a communicator)";
    return 0;
  }
  if (!zeros || port == 0 || t.oldNRanks < 1 || t.mac != growMac(&id, &t)) {
    *why = "it is damaged (its check does not match what it holds)";
    return 0;
  }
  *oldNRanks = t.oldNRanks;
  return 1;
}

/* One connect attempt, no retry and no WARN: the root lives in this process, so a refusal means it
 * is gone (done, or ended at its bound). */
static int connectOnce(const union mendSocketAddr* addr, int64_t timeoutMs) {
  int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct timeval tv = {.tv_sec = timeoutMs / 1000, .tv_usec = (timeoutMs % 1000) * 1000};
  (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)); /* bounds connect() too */
  socklen_t len = addr->sa.sa_family == AF_INET ? sizeof(addr->sin) : sizeof(addr->sin6);
  if (connect(fd, &addr->sa, len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void mendBsGrowIdRetire(const ncclUniqueId* uid, int64_t timeoutMs) {
  struct mendBsId id;
  memcpy(&id, uid->internal, sizeof(id));
  _Atomic int never = 0;
  int fd = connectOnce(&id.addr, timeoutMs);
  if (fd < 0) return;
  uint8_t nonce[MEND_BS_NONCE_BYTES];
  struct mendBsRootHello h;
  memset(&h, 0, sizeof(h));
  h.magic = id.magic;
  h.kind = MEND_BS_ROOT_HELLO;
  h.rank = 0;
  h.nRanks = 1;
  h.nIds = 1;
  h.idIdx = 0;
  h.addr = id.addr; /* nobody will connect to it: the table is thrown away */
  (void)mendRandomBytes(h.nonce, sizeof(h.nonce));
  struct mendBsRootReply rep;
  if (mendBsRecvChallenge(fd, nonce, &never, timeoutMs, &id.addr) == ncclSuccess) {
    h.mac = mendBsHelloMac(id.secret, nonce, &h);
    if (mendSocketSendAll(fd, &h, sizeof(h), &never, timeoutMs) == ncclSuccess &&
        mendSocketRecvAll(fd, &rep, sizeof(rep), &never, timeoutMs) == ncclSuccess)
      TRACE(NCCL_BOOTSTRAP, "Grow: an unused grow root answered its retirement with status %d", rep.status);
  }
  close(fd);
}
