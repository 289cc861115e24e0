/*
 * What the socket Net reads from the network, checked by pure functions before anything in it is
 * believed: the connection hellos (and their grouping into connections), the listen handle a peer
 * passes to connect, and the message headers of the control stream.  The code that reads the bytes
 * and the fuzz target (tests/fuzz/fuzz_net_socket.c) call the same functions.  Every function takes
 * the bytes as (buf, len): a buffer of the wrong length is refused, never read past.
 */
#ifndef MEND_TRANSPORT_NET_SOCKET_WIRE_H_
#define MEND_TRANSPORT_NET_SOCKET_WIRE_H_

#include <stddef.h>
#include <stdint.h>

#include "transport/net_socket.h"

/* An accepted socket's hello for the listen comm `listenToken`: 1 when it is a well-formed hello for
 * it (magic, 1..MEND_SOCKET_MAX_SOCKS data sockets, index within them, a chunk size). */
int mendSocketHelloParse(const void* buf, size_t len, uint64_t listenToken, struct mendSocketHello* out);
/* Place a parsed hello, pending in slot `slot`, in the table of its connection (byIndex[0..nsocks],
 * -1 where no socket is known yet).  0 when it contradicts the connection (another socket count) or
 * repeats an index: the caller drops it. */
int mendSocketHelloPlace(const struct mendSocketHello* m, int nsocks, int* byIndex, int slot);
/* A listen handle passed to connect: 1 when the socket Net's listen made it (magic, an IPv4 or IPv6
 * address); *out is an aligned copy. */
int mendSocketHandleParse(const void* buf, size_t len, struct mendSocketHandle* out);
/* The header of message `seq` for a receive of `posted` bytes: 1 when it is that message and fits;
 * else 0 with the cause (for the WARN) in cause[causeLen]. */
int mendSocketMsgHdrParse(const void* buf, size_t len, uint32_t seq, size_t posted, struct mendSocketMsgHdr* out,
                          char* cause, size_t causeLen);

#endif
