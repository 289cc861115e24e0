/*
 * Fuzz target: what a mend-info --ras client and the query service read from the network
 * (bootstrap_ras_wire.c): a query, and a reply from a process that may lie.  A reply is accepted
 * only when every field is in bounds: then each communicator's rank is inside its size, its NIC
 * states are known, every service address is IPv4/IPv6 with a port or empty, and the host name is
 * printable; the bytes it spans add up to exactly the input.
 *
 * Input: one byte (bit 0: parse as a query), then the bytes to parse.
 */
#include <stdlib.h>
#include <string.h>

#include "bootstrap_ras.h"
#include "fuzz.h"

static void checkReply(const struct mendRasReply* r, size_t len) {
  if (r->pid <= 0 || r->nComms < 0 || r->nComms > MEND_RAS_MAX_COMMS) abort();
  if (strnlen(r->host, MEND_RAS_HOST_LEN) == MEND_RAS_HOST_LEN || r->host[0] == '\0') abort();
  size_t bytes = sizeof(struct mendRasHeader);
  for (int i = 0; i < r->nComms; i++) {
    const struct mendRasComm* c = &r->comms[i].c;
    if (c->rank < 0 || c->rank >= c->nRanks || c->nRanks > MEND_RAS_MAX_RANKS) abort();
    if (c->nNics < 0 || c->nNics > MEND_RAS_MAX_NICS || c->inflight < 0) abort();
    for (int d = 0; d < c->nNics; d++)
      if (c->nic[d] < MEND_RAS_NIC_UP || c->nic[d] > MEND_RAS_NIC_PROBING) abort();
    for (int p = 0; p < c->nRanks; p++) {
      const union mendSocketAddr* a = r->comms[i].peers + p;
      if (a->sa.sa_family != 0 && a->sa.sa_family != AF_INET && a->sa.sa_family != AF_INET6) abort();
    }
    bytes += mendRasCommBytes(c->nRanks);
  }
  if (bytes != len) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {.p = data, .left = size};
  uint8_t how = fuzzByte(&in);
  if (how & 1) {
    int ok = mendRasQueryParse(in.p, in.left);
    if (ok && in.left != sizeof(struct mendRasQuery)) abort();
    return 0;
  }
  uint64_t bytes;
  const char* why = NULL;
  if (mendRasHeaderParse(in.p, in.left, &bytes, &why) && (bytes < sizeof(struct mendRasHeader) || bytes > MEND_RAS_MAX_REPLY))
    abort();
  struct mendRasReply r;
  if (mendRasReplyParse(in.p, in.left, &r, &why) == ncclSuccess) {
    checkReply(&r, in.left);
    mendRasReplyFree(&r);
  } else if (why == NULL || r.comms != NULL) {
    abort(); /* a refusal says why and leaves nothing allocated */
  }
  return 0;
}

/* A reply of one communicator of nRanks ranks, rank 1, two NICs. */
static void seedReply(struct fuzzSeeds* s, int nRanks) {
  struct fuzzBuf b = {.len = 0};
  struct mendRasHeader h = {.magic = MEND_RAS_REPLY_MAGIC, .version = MEND_RAS_VERSION, .nComms = 1, .pid = 4242};
  strcpy(h.host, "node-a");
  h.bytes = sizeof(h) + mendRasCommBytes(nRanks);
  fuzzPutByte(&b, 0);
  fuzzPut(&b, &h, sizeof(h));
  struct mendRasComm c = {.commHash = 0x1234, .rank = 1, .nRanks = nRanks, .issued = 77, .inflight = 1, .nNics = 2};
  c.nic[1] = MEND_RAS_NIC_DOWN;
  fuzzPut(&b, &c, sizeof(c));
  for (int r = 0; r < nRanks; r++) {
    struct mendRasPeer p;
    memset(&p, 0, sizeof(p));
    if (r != 2) {
      p.addr.sin.sin_family = AF_INET;
      p.addr.sin.sin_port = htons((uint16_t)(40000 + r));
      p.addr.sin.sin_addr.s_addr = htonl(0x0a000001u + (uint32_t)r);
    }
    fuzzPut(&b, &p, sizeof(p));
  }
  fuzzSeedWrite(s, b.data, b.len);
}

void fuzzSeeds(struct fuzzSeeds* s) {
  struct fuzzBuf b = {.len = 0};
  struct mendRasQuery q = {.magic = MEND_RAS_QUERY_MAGIC, .version = MEND_RAS_VERSION};
  fuzzPutByte(&b, 1);
  fuzzPut(&b, &q, sizeof(q));
  fuzzSeedWrite(s, b.data, b.len);
  seedReply(s, 2);
  seedReply(s, 4);
}

FUZZ_SEEDS
