/*
 * What the bootstrap reads from the network, checked by pure functions (no socket, no state beyond
 * their arguments): the code that reads a message hands its bytes here before it believes any of
 * them, and the fuzz targets (tests/fuzz/) call the same functions with hostile bytes.  Every
 * function takes the bytes as (buf, len): a buffer of the wrong length is refused, never read past.
 * The MACs that prove the job secret live here too (they are part of the wire format).
 */
#ifndef MEND_BOOTSTRAP_WIRE_H_
#define MEND_BOOTSTRAP_WIRE_H_

#include <stddef.h>
#include <stdint.h>

#include "bootstrap_priv.h"

/* The rendezvous a root holds so far: nRanks < 0 until the first proven message shaped it. */
struct mendBsRootView {
  int nRanks;  /* ranks of the job, or -1 */
  int nIds;    /* roots (ncclCommInitRankScalable), valid when nRanks > 0 */
  int idIdx;   /* which root this is, valid when nRanks > 0 */
};

/* A listener's challenge, the first bytes every connector reads.  1 and its nonce when it is one. */
int mendBsChallengeParse(const void* buf, size_t len, uint8_t nonce[MEND_BS_NONCE_BYTES]);

/* A complete hello at the root `id`, whose challenge carried `nonce`: into *out, then checked for the
 * root's magic (MEND_BS_ROOT_ERR_MAGIC) and the proof of the secret (MEND_BS_ROOT_ERR_AUTH).
 * MEND_BS_ROOT_OK: proven (its kind and fields still to be checked by mendBsRootHelloFits). */
int mendBsRootHelloParse(const void* buf, size_t len, const struct mendBsId* id,
                         const uint8_t nonce[MEND_BS_NONCE_BYTES], struct mendBsRootHello* out);
/* Whether a proven hello fits itself and the rendezvous `v`: a HELLO (its rank, size and roots), or a
 * TABLE of another root's group.  Returns enum mendBsRootStatus (MEND_BS_ROOT_ERR_RANK for an unknown
 * kind); *detail is the number the root's refusal reports.  Duplicate ranks are the caller's check. */
int mendBsRootHelloFits(const struct mendBsRootHello* h, const struct mendBsRootView* v, int* detail);
/* One TABLE entry from root `fromRoot` of the rendezvous `v` (nRanks > 0): 1 when it names a rank of
 * that root's group. */
int mendBsRootEntryParse(const void* buf, size_t len, const struct mendBsRootView* v, int fromRoot,
                         struct mendBsRootEntry* out);
/* The root's reply to rank `rank` of `nRanks` (root at `root`, for the WARN): ncclSuccess when it
 * says OK for a table of nRanks entries (the table and its MAC follow), else the error, WARNed. */
ncclResult_t mendBsRootReplyParse(const void* buf, size_t len, int rank, int nRanks, const union mendSocketAddr* root,
                                  struct mendBsRootReply* out);

/* The handshake on a peer connection to rank `rank` of a network (magic, key, nRanks), whose
 * challenge carried `nonce`: the connecting rank, or -1 (a connection from another network, or one
 * that cannot prove the key; said at INFO/WARN). */
int mendBsHandshakeParse(const void* buf, size_t len, int rank, uint64_t magic, const uint8_t key[MEND_MAC_KEY_BYTES],
                         int nRanks, const uint8_t nonce[MEND_BS_NONCE_BYTES]);
/* A message header from a proven peer: MEND_BS_DATA with at most maxMsg payload bytes, or
 * MEND_BS_BYE; 0 for anything else (a corrupt stream: the caller drops the link). */
int mendBsHeaderParse(const void* buf, size_t len, size_t maxMsg, struct mendBsHeader* out);

#endif
