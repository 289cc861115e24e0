/*
 * The bootstrap's wire checks and MACs (see bootstrap_wire.h).  Wire formats: docs/bootstrap.md.
 */
#include "bootstrap_wire.h"

#include <stddef.h>
#include <string.h>

#include "misc/debug.h"

/* ---------------------------------------------------------------- authentication */

/* Each MAC starts with its own domain byte, so no answer of one kind passes for another. */
enum { MAC_HELLO = 'H', MAC_REPLY = 'R', MAC_TABLE = 'T', MAC_PEER = 'P' };

static void macStart(struct mendMac* m, const uint8_t key[MEND_MAC_KEY_BYTES], uint8_t domain,
                     const uint8_t nonce[MEND_BS_NONCE_BYTES]) {
  mendMacInit(m, key);
  mendMacUpdate(m, &domain, 1);
  if (nonce) mendMacUpdate(m, nonce, MEND_BS_NONCE_BYTES);
}

uint64_t mendBsHelloMac(const uint8_t secret[MEND_MAC_KEY_BYTES], const uint8_t nonce[MEND_BS_NONCE_BYTES],
                        const struct mendBsRootHello* h) {
  struct mendMac m;
  macStart(&m, secret, MAC_HELLO, nonce);
  mendMacUpdate(&m, h, offsetof(struct mendBsRootHello, mac));
  return mendMacFinal(&m);
}

uint64_t mendBsTableMac(const uint8_t secret[MEND_MAC_KEY_BYTES], const union mendSocketAddr* table, int nRanks) {
  struct mendMac m;
  macStart(&m, secret, MAC_TABLE, NULL);
  mendMacUpdate(&m, table, (size_t)nRanks * sizeof(*table));
  return mendMacFinal(&m);
}

uint64_t mendBsReplyMac(const uint8_t secret[MEND_MAC_KEY_BYTES], const uint8_t nonce[MEND_BS_NONCE_BYTES],
                        const struct mendBsRootReply* rep, uint64_t tableMac) {
  struct mendMac m;
  macStart(&m, secret, MAC_REPLY, nonce);
  mendMacUpdate(&m, rep, offsetof(struct mendBsRootReply, mac));
  mendMacUpdate(&m, &tableMac, sizeof(tableMac));
  return mendMacFinal(&m);
}

uint64_t mendBsHandshakeMac(const uint8_t key[MEND_MAC_KEY_BYTES], const uint8_t nonce[MEND_BS_NONCE_BYTES],
                            const struct mendBsHandshake* hs) {
  struct mendMac m;
  macStart(&m, key, MAC_PEER, nonce);
  mendMacUpdate(&m, hs, offsetof(struct mendBsHandshake, mac));
  return mendMacFinal(&m);
}

/* ---------------------------------------------------------------- listener's challenge */

int mendBsChallengeParse(const void* buf, size_t len, uint8_t nonce[MEND_BS_NONCE_BYTES]) {
  struct mendBsChallenge c;
  if (buf == NULL || len != sizeof(c)) return 0;
  memcpy(&c, buf, sizeof(c));
  if (c.magic != MEND_BS_CHALLENGE_MAGIC) return 0;
  memcpy(nonce, c.nonce, MEND_BS_NONCE_BYTES);
  return 1;
}

/* ---------------------------------------------------------------- the root's side */

int mendBsRootHelloParse(const void* buf, size_t len, const struct mendBsId* id,
                         const uint8_t nonce[MEND_BS_NONCE_BYTES], struct mendBsRootHello* out) {
  if (buf == NULL || len != sizeof(*out)) return MEND_BS_ROOT_ERR_MAGIC;
  memmove(out, buf, sizeof(*out));  /* the caller may parse its own receive buffer in place */
  if (out->magic != id->magic) return MEND_BS_ROOT_ERR_MAGIC;
  if (out->mac != mendBsHelloMac(id->secret, nonce, out)) return MEND_BS_ROOT_ERR_AUTH;
  return MEND_BS_ROOT_OK;
}

/* A HELLO: what it says of itself first (the first one shapes the rendezvous), then against `v`. */
static int helloFits(const struct mendBsRootHello* h, const struct mendBsRootView* v, int* detail) {
  *detail = h->nRanks;
  if (h->nRanks < 1 || h->nIds < 1 || h->nIds > h->nRanks || h->idIdx < 0 || h->idIdx >= h->nIds || h->rank < 0 ||
      h->rank >= h->nRanks || mendBsRootOf(h->rank, h->nRanks, h->nIds) != h->idIdx ||
      h->count != (h->nIds > 1 ? h->nIds : 0))
    return MEND_BS_ROOT_ERR_RANK;
  *detail = v->nRanks;
  if (v->nRanks > 0 && h->nRanks != v->nRanks) return MEND_BS_ROOT_ERR_NRANKS;
  *detail = v->nIds;
  if (v->nRanks > 0 && (h->nIds != v->nIds || h->idIdx != v->idIdx)) return MEND_BS_ROOT_ERR_RANK;
  *detail = 0;
  return MEND_BS_ROOT_OK;
}

/* A TABLE: another root's whole group, its entries counted before anything is read. */
static int tableFits(const struct mendBsRootHello* h, const struct mendBsRootView* v) {
  int fits = h->nIds > 1 && h->nIds <= h->nRanks && h->rank >= 0 && h->rank < h->nIds && h->idIdx >= 0 &&
             h->idIdx < h->nIds && h->rank != h->idIdx && h->count == mendBsGroupSize(h->rank, h->nRanks, h->nIds);
  if (fits && v->nRanks > 0) fits = h->nRanks == v->nRanks && h->nIds == v->nIds && h->idIdx == v->idIdx;
  return fits;
}

int mendBsRootHelloFits(const struct mendBsRootHello* h, const struct mendBsRootView* v, int* detail) {
  *detail = 0;
  if (h->kind == MEND_BS_ROOT_HELLO) return helloFits(h, v, detail);
  if (h->kind == MEND_BS_ROOT_TABLE) return tableFits(h, v) ? MEND_BS_ROOT_OK : MEND_BS_ROOT_ERR_RANK;
  return MEND_BS_ROOT_ERR_RANK;
}

int mendBsRootEntryParse(const void* buf, size_t len, const struct mendBsRootView* v, int fromRoot,
                         struct mendBsRootEntry* out) {
  if (buf == NULL || len != sizeof(*out) || v->nRanks < 1 || v->nIds < 1) return 0;
  memmove(out, buf, sizeof(*out));
  return out->rank >= 0 && out->rank < v->nRanks && mendBsRootOf(out->rank, v->nRanks, v->nIds) == fromRoot;
}

/* ---------------------------------------------------------------- the rank's side */

static void warnStatus(const struct mendBsRootReply* rep, int rank, int nRanks, const union mendSocketAddr* root) {
  char name[MEND_SOCKET_NAME_MAXLEN];
  mendSocketAddrStr(root, name);
  switch (rep->status) {
  case MEND_BS_ROOT_ERR_MAGIC: WARN("Bootstrap: root %s rejected rank %d: the unique id does not belong to it (magic mismatch)", name, rank); break;
  case MEND_BS_ROOT_ERR_NRANKS: WARN("Bootstrap: rank %d called init with nranks=%d but other ranks use nranks=%d", rank, nRanks, rep->detail); break;
  case MEND_BS_ROOT_ERR_RANK: WARN("Bootstrap: root %s rejected rank %d of %d (out of range or wrong root for ncclCommInitRankScalable)", name, rank, nRanks); break;
  case MEND_BS_ROOT_ERR_DUP: WARN("Bootstrap: rank %d was already registered at root %s by another caller (duplicate rank)", rank, name); break;
  case MEND_BS_ROOT_ERR_TIMEOUT: WARN("Bootstrap: root %s gave up: only %d of %d ranks arrived (MEND_BOOTSTRAP_TIMEOUT)", name, rep->detail, nRanks); break;
  case MEND_BS_ROOT_ERR_ROOTS: WARN("Bootstrap: root %d could not reach the other roots", rep->detail); break;
  case MEND_BS_ROOT_ERR_AUTH: WARN("Bootstrap: root %s refused rank %d: it serves another job (its secret differs: check MEND_JOB_SECRET and the launcher's job id, or two jobs share NCCL_COMM_ID)", name, rank); break;
  default: WARN("Bootstrap: root %s answered with unknown status %d", name, rep->status); break;
  }
}

ncclResult_t mendBsRootReplyParse(const void* buf, size_t len, int rank, int nRanks, const union mendSocketAddr* root,
                                  struct mendBsRootReply* out) {
  char name[MEND_SOCKET_NAME_MAXLEN];
  if (buf == NULL || len != sizeof(*out)) {
    WARN("Bootstrap: the root at %s sent a %zu-byte reply (expected %zu)", mendSocketAddrStr(root, name), len,
         sizeof(*out));
    return ncclInternalError;
  }
  memmove(out, buf, sizeof(*out));
  if (out->status != MEND_BS_ROOT_OK) {
    warnStatus(out, rank, nRanks, root);
    return out->status == MEND_BS_ROOT_ERR_TIMEOUT || out->status == MEND_BS_ROOT_ERR_ROOTS ? ncclRemoteError
                                                                                            : ncclInvalidUsage;
  }
  if (out->nRanks != nRanks) {
    WARN("Bootstrap: root %s sent a table of %d ranks, expected %d", mendSocketAddrStr(root, name), out->nRanks, nRanks);
    return ncclInternalError;
  }
  return ncclSuccess;
}

int mendBsHandshakeParse(const void* buf, size_t len, int rank, uint64_t magic, const uint8_t key[MEND_MAC_KEY_BYTES],
                         int nRanks, const uint8_t nonce[MEND_BS_NONCE_BYTES]) {
  struct mendBsHandshake hs;
  if (buf == NULL || len != sizeof(hs)) return -1;
  memcpy(&hs, buf, sizeof(hs));
  if (hs.magic != (magic ^ MEND_BS_HANDSHAKE_MAGIC) || hs.rank < 0 || hs.rank >= nRanks || hs.nRanks != nRanks) {
    INFO(NCCL_BOOTSTRAP, "Bootstrap rank %d: dropping a connection from another network (rank %d of %d)", rank,
         hs.rank, hs.nRanks);
    return -1;
  }
  if (hs.mac != mendBsHandshakeMac(key, nonce, &hs)) {
    WARN_SPARSE(1000, "Bootstrap rank %d: dropping a connection that claims rank %d but cannot prove this "
                "communicator's key (a stranger, or another job)", rank, hs.rank);
    return -1;
  }
  return hs.rank;
}

int mendBsHeaderParse(const void* buf, size_t len, size_t maxMsg, struct mendBsHeader* out) {
  if (buf == NULL || len != sizeof(*out)) return 0;
  memmove(out, buf, sizeof(*out));
  if (out->type == MEND_BS_BYE) return MEND_BS_BYE;
  if (out->type == MEND_BS_DATA && out->size <= maxMsg) return MEND_BS_DATA;
  return 0;
}
