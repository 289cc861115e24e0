/*
 * The socket Net's wire checks (see net_socket_wire.h; formats: docs/net.md).
 */
#include "transport/net_socket_wire.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

int mendSocketHelloParse(const void* buf, size_t len, uint64_t listenToken, struct mendSocketHello* out) {
  if (buf == NULL || len != sizeof(*out)) return 0;
  memmove(out, buf, sizeof(*out));  /* the caller may parse its receive buffer in place */
  return out->magic == MEND_SOCKET_HELLO_MAGIC && out->listenToken == listenToken && out->nsocks >= 1 &&
         out->nsocks <= MEND_SOCKET_MAX_SOCKS && out->index <= out->nsocks && out->chunkSize != 0;
}

int mendSocketHelloPlace(const struct mendSocketHello* m, int nsocks, int* byIndex, int slot) {
  if (m->nsocks != nsocks || m->index > nsocks || byIndex[m->index] >= 0) return 0;
  byIndex[m->index] = slot;
  return 1;
}

int mendSocketHandleParse(const void* buf, size_t len, struct mendSocketHandle* out) {
  if (buf == NULL || len < sizeof(*out)) return 0;
  memmove(out, buf, sizeof(*out));
  int family = out->addr.sa.sa_family;
  return out->magic == MEND_SOCKET_HELLO_MAGIC && (family == AF_INET || family == AF_INET6);
}

int mendSocketMsgHdrParse(const void* buf, size_t len, uint32_t seq, size_t posted, struct mendSocketMsgHdr* out,
                          char* cause, size_t causeLen) {
  if (buf == NULL || len != sizeof(*out)) {
    snprintf(cause, causeLen, "a %zu-byte message header (expected %zu)", len, sizeof(*out));
    return 0;
  }
  memmove(out, buf, sizeof(*out));
  if (out->magic != MEND_SOCKET_MSG_MAGIC || out->seq != seq) {
    snprintf(cause, causeLen, "bad message header (magic 0x%x, seq %u, expected seq %u)", out->magic, out->seq, seq);
    return 0;
  }
  if (out->size > posted) {
    snprintf(cause, causeLen, "message truncated: peer sent %llu bytes, the receive posted %zu",
             (unsigned long long)out->size, posted);
    return 0;
  }
  return 1;
}
