/*
 * Child networks (ncclCommSplit, ncclCommShrink) built over the parent's, without a unique id.
 * Every child rank opens a listening socket; child rank 0 (the lowest parent rank of the child)
 * collects the members' addresses through the parent's point-to-point messages and sends everyone
 * the table, a fresh magic and a fresh key (over the parent's network, whose connections proved the
 * parent's key).  Only the child's members talk, so ranks excluded by a shrink (maybe
 * dead) are never contacted.  Messages carry a key (hash of the member list) so that a leftover from
 * an interrupted earlier attempt is recognised and dropped.
 */
#include "bootstrap_priv.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checks.h"
#include "comm.h"
#include "misc/debug.h"
#include "misc/utils.h"

struct splitAsk {
  uint64_t key;               /* identifies this child (member list) */
  union mendSocketAddr addr;  /* the member's child listen address */
};
struct splitAnswer {
  uint64_t key;               /* same key */
  uint64_t magic;             /* the child network's magic */
  uint8_t netKey[MEND_MAC_KEY_BYTES]; /* what the child network's connections prove */
};

static uint64_t childKey(const struct ncclComm* child, const int* parentRanks) {
  uint64_t h = mendHash(parentRanks, (size_t)child->nRanks * sizeof(int));
  return mendHashCombine(h, 0x53504c4954ULL + (uint64_t)child->nRanks);  /* "SPLIT" */
}

/* Child rank 0: collect every member's address, then answer each with the table. */
static ncclResult_t splitLeader(struct mendBootstrap* pbs, struct ncclComm* child, const int* parentRanks,
                                uint64_t key, union mendSocketAddr* table, struct splitAnswer* out) {
  int n = child->nRanks;
  for (int i = 1; i < n; i++) {
    struct splitAsk ask;
    do {
      MENDCHECK(mendBsRecvExtra(pbs, parentRanks[i], MEND_BS_TAG_SPLIT, &ask, sizeof(ask), &child->abortFlag));
      if (ask.key != key) INFO(NCCL_BOOTSTRAP, "Split: dropping a stale request from parent rank %d", parentRanks[i]);
    } while (ask.key != key);
    table[i] = ask.addr;
  }
  struct splitAnswer ans = {.key = key, .magic = mendBsRandom64()};
  (void)mendRandomBytes(ans.netKey, sizeof(ans.netKey));
  *out = ans;
  size_t bytes = sizeof(struct splitAnswer) + (size_t)n * sizeof(*table);
  char* msg = malloc(bytes);
  if (msg == NULL) {
    WARN("Split: out of memory for the %d-rank address table", n);
    return ncclSystemError;
  }
  memcpy(msg, &ans, sizeof(ans));
  memcpy(msg + sizeof(ans), table, (size_t)n * sizeof(*table));
  ncclResult_t res = ncclSuccess;
  for (int i = 1; i < n && res == ncclSuccess; i++)
    res = mendBootstrapSend(pbs, parentRanks[i], MEND_BS_TAG_SPLIT, msg, bytes);
  free(msg);
  return res;
}

/* Other child ranks: send our address to child rank 0, receive the table. */
static ncclResult_t splitMember(struct mendBootstrap* pbs, struct ncclComm* child, const int* parentRanks,
                                uint64_t key, union mendSocketAddr* table, struct splitAnswer* out) {
  int n = child->nRanks;
  struct splitAsk ask = {.key = key, .addr = table[child->rank]};
  MENDCHECK(mendBootstrapSend(pbs, parentRanks[0], MEND_BS_TAG_SPLIT, &ask, sizeof(ask)));
  size_t bytes = sizeof(struct splitAnswer) + (size_t)n * sizeof(*table);
  char* msg = malloc(bytes);
  if (msg == NULL) {
    WARN("Split: out of memory for the %d-rank address table", n);
    return ncclSystemError;
  }
  ncclResult_t res;
  struct splitAnswer ans;
  do {
    res = mendBsRecvExtra(pbs, parentRanks[0], MEND_BS_TAG_SPLIT, msg, bytes, &child->abortFlag);
    if (res != ncclSuccess) break;
    memcpy(&ans, msg, sizeof(ans));
    if (ans.key != key) INFO(NCCL_BOOTSTRAP, "Split: dropping a stale answer from parent rank %d", parentRanks[0]);
  } while (ans.key != key);
  if (res == ncclSuccess) {
    memcpy(table, msg + sizeof(ans), (size_t)n * sizeof(*table));
    *out = ans;
  }
  free(msg);
  return res;
}

ncclResult_t mendBootstrapSplit(struct ncclComm* parent, struct ncclComm* child, const int* parentRanks) {
  if (parent == NULL || parent->bootstrap == NULL || child == NULL || parentRanks == NULL || child->nRanks < 1 ||
      child->rank < 0 || child->rank >= child->nRanks || parentRanks[child->rank] != parent->rank) {
    WARN("mendBootstrapSplit: invalid arguments");
    return ncclInvalidArgument;
  }
  struct mendBootstrap* pbs = parent->bootstrap;
  ncclResult_t res;
  union mendSocketAddr bindAddr = pbs->listenAddr, myAddr;
  if (bindAddr.sa.sa_family == AF_INET) bindAddr.sin.sin_port = 0; else bindAddr.sin6.sin6_port = 0;
  int listenFd = -1;
  MENDCHECK(mendSocketListen(&bindAddr, &listenFd, &myAddr));  /* same interface as the parent's */
  union mendSocketAddr* table = calloc((size_t)child->nRanks, sizeof(*table));
  if (table == NULL) {
    WARN("Split: out of memory for %d addresses", child->nRanks);
    res = ncclSystemError;
    goto fail_close_listen;
  }
  table[child->rank] = myAddr;
  uint64_t key = childKey(child, parentRanks);
  struct splitAnswer ans;
  if (child->rank == 0) MENDCHECKGOTO(splitLeader(pbs, child, parentRanks, key, table, &ans), res, fail_free_table);
  else MENDCHECKGOTO(splitMember(pbs, child, parentRanks, key, table, &ans), res, fail_free_table);
  /* mendBsCreate owns listenFd and table from here. */
  return mendBsCreate(child, ans.magic, ans.netKey, listenFd, &myAddr, table, &child->bootstrap);
fail_free_table:
  free(table);
fail_close_listen:
  close(listenFd);
  return res;
}
