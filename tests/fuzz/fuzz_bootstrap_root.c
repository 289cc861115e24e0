/*
 * Fuzz target: what a bootstrap root reads from its connections (hellos, the unique ids of scalable
 * init, other roots' TABLE entries) and what a rank reads back (the reply).  It plays a root's
 * rendezvous as bootstrap_root.c does, through the same checks (bootstrap_wire.c).
 *
 * Input: a flags byte, then connections until the input ends; each connection is one hello
 * (sizeof(struct mendBsRootHello) bytes) and what its kind makes the root read next (ids or entries),
 * then one reply.  Flag 1 signs every hello with the job's secret (a member of the job, or a bug in
 * one: the checks after the MAC get fuzzed too); flag 2 starts the rendezvous shaped by NCCL_COMM_ID
 * (the root knows nRanks from rank 0).
 */
#include <stdlib.h>
#include <string.h>

#include "bootstrap_wire.h"
#include "fuzz.h"

#define FUZZ_MAX_RANKS 4096  /* rendezvous larger than this are checked but not tracked per rank */

static const struct mendBsId fuzzId = {.magic = 0x6d656e6466757a7aULL, .secret = "fuzz-job-secret"};
static const uint8_t fuzzNonce[MEND_BS_NONCE_BYTES] = "root-challenge!";

struct root {
  struct mendBsRootView v;  /* the rendezvous so far */
  char* have;               /* [v.nRanks] when v.nRanks <= FUZZ_MAX_RANKS */
  int nHave;                /* ranks known */
};

static void adopt(struct root* rt, const struct mendBsRootHello* h) {
  rt->v = (struct mendBsRootView){.nRanks = h->nRanks, .nIds = h->nIds, .idIdx = h->idIdx};
  if (rt->v.nRanks <= FUZZ_MAX_RANKS) rt->have = calloc((size_t)rt->v.nRanks, 1);
}

static void registerRank(struct root* rt, int rank) {
  if (rank < 0 || rank >= rt->v.nRanks) abort();  /* a check let a rank outside the rendezvous through */
  if (rt->have == NULL || rt->have[rank]) return;
  rt->have[rank] = 1;
  rt->nHave++;
}

/* One connection: its hello, then the ids or entries it announces. */
static int connection(struct root* rt, struct fuzzIn* in, int sign) {
  const uint8_t* raw = fuzzTake(in, sizeof(struct mendBsRootHello));
  if (raw == NULL) return 0;
  struct mendBsRootHello h;
  memcpy(&h, raw, sizeof(h));
  if (sign) h.mac = mendBsHelloMac(fuzzId.secret, fuzzNonce, &h);
  if (mendBsRootHelloParse(&h, sizeof(h), &fuzzId, fuzzNonce, &h) != MEND_BS_ROOT_OK) return 1;
  int detail;
  if (mendBsRootHelloFits(&h, &rt->v, &detail) != MEND_BS_ROOT_OK) return 1;
  if (rt->v.nRanks < 0) adopt(rt, &h);
  if (h.kind == MEND_BS_ROOT_HELLO) {
    if (h.count > 0) {  /* the ids of scalable init: exactly nIds of them */
      if (h.count != h.nIds) abort();
      if (fuzzTake(in, (size_t)h.count * sizeof(ncclUniqueId)) == NULL) return 0;
    }
    registerRank(rt, h.rank);
    return 1;
  }
  for (int left = h.count; left > 0; left--) {  /* a TABLE: its group's entries */
    const uint8_t* e = fuzzTake(in, sizeof(struct mendBsRootEntry));
    if (e == NULL) return 0;
    struct mendBsRootEntry entry;
    if (!mendBsRootEntryParse(e, sizeof(entry), &rt->v, h.rank, &entry)) return 1;
    registerRank(rt, entry.rank);
  }
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {.p = data, .left = size};
  uint8_t flags = fuzzByte(&in);
  struct root rt = {.v = {.nRanks = -1}};
  if (flags & 2) {
    struct mendBsRootHello shape = {.nRanks = 1 + fuzzByte(&in), .nIds = 1, .idIdx = 0};
    adopt(&rt, &shape);
  }
  int nConns = 0;
  while (nConns++ < 64 && connection(&rt, &in, flags & 1)) {
  }
  /* The rank's side: the root's reply. */
  const uint8_t* rep = fuzzTake(&in, sizeof(struct mendBsRootReply));
  if (rep) {
    union mendSocketAddr root;
    memset(&root, 0, sizeof(root));
    struct mendBsRootReply out;
    (void)mendBsRootReplyParse(rep, sizeof(out), 0, rt.v.nRanks > 0 ? rt.v.nRanks : 1, &root, &out);
  }
  free(rt.have);
  return 0;
}

/* A proven HELLO of rank r of n through root idx of nIds, with the ids it carries. */
static void putHello(struct fuzzBuf* b, int kind, int r, int n, int nIds, int idx, int count) {
  struct mendBsRootHello h;
  memset(&h, 0, sizeof(h));
  h.magic = fuzzId.magic;
  h.kind = kind;
  h.rank = r;
  h.nRanks = n;
  h.nIds = nIds;
  h.idIdx = idx;
  h.count = count;
  h.addr.sin.sin_family = 2;
  h.mac = mendBsHelloMac(fuzzId.secret, fuzzNonce, &h);
  fuzzPut(b, &h, sizeof(h));
}

void fuzzSeeds(struct fuzzSeeds* s) {
  struct fuzzBuf b = {.len = 0};
  /* Four ranks, one root, then an OK reply. */
  fuzzPutByte(&b, 0);
  for (int r = 0; r < 4; r++) putHello(&b, MEND_BS_ROOT_HELLO, r, 4, 1, 0, 0);
  struct mendBsRootReply rep = {.status = MEND_BS_ROOT_OK, .nRanks = 4};
  fuzzPut(&b, &rep, sizeof(rep));
  fuzzSeedWrite(s, b.data, b.len);
  /* Scalable init: 4 ranks, 2 roots; this is root 0: two HELLOs with 2 ids each, root 1's TABLE. */
  b.len = 0;
  fuzzPutByte(&b, 0);
  ncclUniqueId ids[2];
  memset(ids, 0, sizeof(ids));
  for (int r = 0; r < 2; r++) {
    putHello(&b, MEND_BS_ROOT_HELLO, r, 4, 2, 0, 2);
    fuzzPut(&b, ids, sizeof(ids));
  }
  putHello(&b, MEND_BS_ROOT_TABLE, 1, 4, 2, 0, 2);
  for (int r = 2; r < 4; r++) {
    struct mendBsRootEntry e = {.rank = r};
    fuzzPut(&b, &e, sizeof(e));
  }
  rep.status = MEND_BS_ROOT_ERR_DUP;
  fuzzPut(&b, &rep, sizeof(rep));
  fuzzSeedWrite(s, b.data, b.len);
  /* Unsigned (a stranger), NCCL_COMM_ID-shaped rendezvous, duplicate rank. */
  b.len = 0;
  fuzzPutByte(&b, 3);
  fuzzPutByte(&b, 7);
  putHello(&b, MEND_BS_ROOT_HELLO, 3, 8, 1, 0, 0);
  putHello(&b, MEND_BS_ROOT_HELLO, 3, 8, 1, 0, 0);
  fuzzSeedWrite(s, b.data, b.len);
}

FUZZ_SEEDS
