/*
 * The query service's wire checks (bootstrap_ras.h): pure functions over (buf, len), called on
 * every byte read before anything is believed, and by tests/fuzz/fuzz_ras.c with hostile bytes.
 */
#include "bootstrap_ras.h"

#include <stdlib.h>
#include <string.h>

int mendRasQueryParse(const void* buf, size_t len) {
  struct mendRasQuery q;
  if (buf == NULL || len != sizeof(q)) return 0;
  memcpy(&q, buf, sizeof(q));
  return q.magic == MEND_RAS_QUERY_MAGIC && q.version == MEND_RAS_VERSION && q.flags == 0;
}

size_t mendRasCommBytes(int nRanks) {
  return sizeof(struct mendRasComm) + (size_t)nRanks * sizeof(struct mendRasPeer);
}

/* A host name: NUL-terminated inside its field, printable, not empty. */
static int hostOk(const char* h) {
  size_t n = strnlen(h, MEND_RAS_HOST_LEN);
  if (n == 0 || n == MEND_RAS_HOST_LEN) return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)h[i] < 0x21 || (unsigned char)h[i] > 0x7e) return 0;
  return 1;
}

int mendRasHeaderParse(const void* buf, size_t len, uint64_t* bytes, const char** why) {
  struct mendRasHeader h;
  *why = "a short header";
  if (buf == NULL || len < sizeof(h)) return 0;
  memcpy(&h, buf, sizeof(h));
  *why = "not a Mend query reply (magic)";
  if (h.magic != MEND_RAS_REPLY_MAGIC) return 0;
  *why = "another version of the query service";
  if (h.version != MEND_RAS_VERSION) return 0;
  *why = "too many communicators";
  if (h.nComms > MEND_RAS_MAX_COMMS) return 0;
  *why = "a length out of bounds";
  if (h.bytes < sizeof(h) || h.bytes > MEND_RAS_MAX_REPLY) return 0;
  *why = "a bad pid or host name";
  if (h.pid <= 0 || h.pad != 0 || !hostOk(h.host)) return 0;
  *bytes = h.bytes;
  *why = NULL;
  return 1;
}

/* A peer's service address: none (family 0, all zero) or an IPv4/IPv6 address with a port. */
static int addrOk(const union mendSocketAddr* a) {
  if (a->sa.sa_family == AF_INET) return a->sin.sin_port != 0;
  if (a->sa.sa_family == AF_INET6) return a->sin6.sin6_port != 0;
  static const union mendSocketAddr zero;
  return memcmp(a, &zero, sizeof(zero)) == 0;
}

static const char* commOk(const struct mendRasComm* c) {
  if (c->nRanks < 1 || c->nRanks > MEND_RAS_MAX_RANKS) return "a communicator size out of bounds";
  if (c->rank < 0 || c->rank >= c->nRanks) return "a rank out of range";
  if (c->issued > (1ull << 62) || c->inflight < 0 || c->inflight > (1ll << 40)) return "an op count out of bounds";
  if (c->error < 0 || c->error >= ncclNumResults || (c->aborted != 0 && c->aborted != 1)) return "a bad state";
  if (c->nNics < 0 || c->nNics > MEND_RAS_MAX_NICS || c->pad != 0) return "a NIC count out of bounds";
  for (int d = 0; d < MEND_RAS_MAX_NICS; d++) {
    if (d >= c->nNics && c->nic[d] != 0) return "a NIC state beyond the NIC count";
    if (c->nic[d] < MEND_RAS_NIC_UP || c->nic[d] > MEND_RAS_NIC_PROBING) return "an unknown NIC state";
  }
  return NULL;
}

static const char* parseComm(const char* p, size_t left, struct mendRasCommView* v, size_t* used) {
  if (left < sizeof(struct mendRasComm)) return "a truncated communicator";
  memcpy(&v->c, p, sizeof(v->c));
  const char* bad = commOk(&v->c);
  if (bad) return bad;
  size_t need = mendRasCommBytes(v->c.nRanks);
  if (left < need) return "a truncated rank table";
  v->peers = calloc((size_t)v->c.nRanks, sizeof(*v->peers));
  if (v->peers == NULL) return "out of memory";
  for (int r = 0; r < v->c.nRanks; r++) {
    memcpy(v->peers + r, p + sizeof(v->c) + (size_t)r * sizeof(struct mendRasPeer), sizeof(*v->peers));
    if (!addrOk(v->peers + r)) return "a bad service address";
  }
  *used = need;
  return NULL;
}

ncclResult_t mendRasReplyParse(const void* buf, size_t len, struct mendRasReply* out, const char** why) {
  memset(out, 0, sizeof(*out));
  uint64_t bytes;
  if (!mendRasHeaderParse(buf, len, &bytes, why)) return ncclSystemError;
  *why = "a length that is not the reply's";
  if (bytes != len) return ncclSystemError;
  struct mendRasHeader h;
  memcpy(&h, buf, sizeof(h));
  out->pid = h.pid;
  memcpy(out->host, h.host, sizeof(out->host));
  *why = "out of memory";
  if (h.nComms > 0 && (out->comms = calloc(h.nComms, sizeof(*out->comms))) == NULL) return ncclSystemError;
  size_t off = sizeof(h);
  for (uint32_t i = 0; i < h.nComms; i++) {
    size_t used = 0;
    out->nComms = (int)i + 1; /* what parseComm allocated is freed on failure */
    const char* bad = parseComm((const char*)buf + off, len - off, out->comms + i, &used);
    if (bad) {
      *why = bad;
      mendRasReplyFree(out);
      return ncclSystemError;
    }
    off += used;
  }
  if (off != len) {
    *why = "bytes after the last communicator";
    mendRasReplyFree(out);
    return ncclSystemError;
  }
  *why = NULL;
  return ncclSuccess;
}

void mendRasReplyFree(struct mendRasReply* r) {
  if (r == NULL) return;
  for (int i = 0; i < r->nComms; i++) free(r->comms[i].peers);
  free(r->comms);
  memset(r, 0, sizeof(*r));
}
