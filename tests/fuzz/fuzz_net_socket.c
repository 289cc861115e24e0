/*
 * Fuzz target: what the socket Net reads from the network.  An acceptor collects hellos from
 * accepted sockets and groups them into connections (net_socket_conn.c accept), a connector gets a
 * listen handle from its peer, and a receiver reads message headers and inline payloads from the
 * control stream into the receives it posted (net_socket_data.c ctrlRecv).  The checks are the
 * ones those files call (net_socket_wire.c).
 *
 * Input: a flags byte; a count byte and that many hellos; a handle (MEND_NET_HANDLE_MAXSIZE bytes);
 * then (posted size, header, inline payload) triples until the input ends.  Flag 1 gives every hello
 * the right magic and listen token (the grouping behind the first check gets fuzzed).
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "transport/net_socket_wire.h"

#define FUZZ_TOKEN 0x6c697374656e3031ULL  /* our listen comm's token */
#define FUZZ_MAX_POSTED (1u << 16)        /* largest receive the target posts */

struct pending {
  int used;                    /* slot holds a hello */
  struct mendSocketHello h;    /* its hello */
};

/* Group complete connections as accept does; returns the inline threshold of the last one built. */
static size_t groupAll(struct pending* pend, int n) {
  size_t inlineMax = 0;
  for (int i = 0; i < n; i++) {
    if (!pend[i].used || pend[i].h.index != 0) continue;
    struct mendSocketHello m = pend[i].h;
    int byIndex[MEND_SOCKET_MAX_SOCKS + 1];
    for (int k = 0; k <= m.nsocks; k++) byIndex[k] = -1;
    int count = 0;
    for (int j = 0; j < n; j++) {
      if (!pend[j].used || pend[j].h.connToken != m.connToken) continue;
      if (!mendSocketHelloPlace(&pend[j].h, m.nsocks, byIndex, j)) {
        pend[j].used = 0;  /* dropped */
        continue;
      }
      count++;
    }
    if (count != m.nsocks + 1) continue;
    for (int k = 0; k <= m.nsocks; k++) {
      if (byIndex[k] < 0 || !pend[byIndex[k]].used) abort();  /* a connection built with a hole */
      pend[byIndex[k]].used = 0;
    }
    inlineMax = m.inlineMax;
  }
  return inlineMax;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {.p = data, .left = size};
  uint8_t flags = fuzzByte(&in);
  int nHello = fuzzByte(&in) % (MEND_SOCKET_MAX_SOCKS + 2);
  struct pending pend[MEND_SOCKET_MAX_SOCKS + 2];
  memset(pend, 0, sizeof(pend));
  for (int i = 0; i < nHello; i++) {
    const uint8_t* raw = fuzzTake(&in, sizeof(struct mendSocketHello));
    if (raw == NULL) return 0;
    struct mendSocketHello h;
    memcpy(&h, raw, sizeof(h));
    if (flags & 1) {
      h.magic = MEND_SOCKET_HELLO_MAGIC;
      h.listenToken = FUZZ_TOKEN;
    }
    pend[i].used = mendSocketHelloParse(&h, sizeof(h), FUZZ_TOKEN, &pend[i].h);
  }
  size_t inlineMax = groupAll(pend, nHello);

  const uint8_t* hraw = fuzzTake(&in, MEND_NET_HANDLE_MAXSIZE);
  if (hraw == NULL) return 0;
  struct mendSocketHandle handle;
  (void)mendSocketHandleParse(hraw, MEND_NET_HANDLE_MAXSIZE, &handle);

  /* The control stream: each receive is a buffer of exactly its posted size. */
  for (uint32_t seq = 0;; seq++) {
    const uint8_t* p = fuzzTake(&in, 2);
    if (p == NULL) break;
    size_t posted = ((size_t)p[0] << 8 | p[1]) % (FUZZ_MAX_POSTED + 1);
    const uint8_t* raw = fuzzTake(&in, sizeof(struct mendSocketMsgHdr));
    if (raw == NULL) break;
    struct mendSocketMsgHdr hdr;
    char cause[160];
    if (!mendSocketMsgHdrParse(raw, sizeof(hdr), seq, posted, &hdr, cause, sizeof(cause))) break;
    if (hdr.size > posted) abort();
    char* buf = malloc(posted ? posted : 1);
    if (buf == NULL) abort();
    size_t inl = hdr.size <= inlineMax ? (size_t)hdr.size : 0;
    const uint8_t* payload = fuzzTake(&in, inl);
    if (payload) memcpy(buf, payload, inl);
    free(buf);
    if (payload == NULL) break;
  }
  return 0;
}

void fuzzSeeds(struct fuzzSeeds* s) {
  struct fuzzBuf b = {.len = 0};
  fuzzPutByte(&b, 0);
  fuzzPutByte(&b, 3);  /* a connection of two data sockets, its hellos out of order */
  const int order[3] = {2, 0, 1};
  for (int i = 0; i < 3; i++) {
    struct mendSocketHello h = {.magic = MEND_SOCKET_HELLO_MAGIC, .index = (uint16_t)order[i], .nsocks = 2,
                                .listenToken = FUZZ_TOKEN, .connToken = 77, .chunkSize = 1 << 17,
                                .inlineMax = 1024};
    fuzzPut(&b, &h, sizeof(h));
  }
  uint8_t raw[MEND_NET_HANDLE_MAXSIZE];
  memset(raw, 0, sizeof(raw));
  struct mendSocketHandle handle = {.magic = MEND_SOCKET_HELLO_MAGIC, .listenToken = FUZZ_TOKEN};
  handle.addr.sin.sin_family = 2;
  memcpy(raw, &handle, sizeof(handle));
  fuzzPut(&b, raw, sizeof(raw));
  const uint32_t sizes[3] = {5, 0, 4000};  /* inline, empty, on the data sockets */
  for (uint32_t seq = 0; seq < 3; seq++) {
    uint8_t posted[2] = {0x10, 0x00};
    fuzzPut(&b, posted, 2);
    struct mendSocketMsgHdr h = {.magic = MEND_SOCKET_MSG_MAGIC, .seq = seq, .size = sizes[seq]};
    fuzzPut(&b, &h, sizeof(h));
    if (sizes[seq] <= 1024) fuzzPut(&b, "hello", sizes[seq]);
  }
  fuzzSeedWrite(s, b.data, b.len);
}

FUZZ_SEEDS
