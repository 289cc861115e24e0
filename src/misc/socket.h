/*
 * Sockets and interfaces, shared by the bootstrap and the socket Net.
 * Interface selection follows NCCL_SOCKET_IFNAME rules: a comma list of name prefixes, a leading
 * '^' excludes, a leading '=' asks for exact names ('^' first when both), NCCL_SOCKET_FAMILY picks
 * AF_INET or AF_INET6.  Every blocking helper is bounded by a timeout and returns early when
 * *abortFlag becomes non-zero (ncclInternalError for abort, ncclRemoteError for a peer that closed,
 * ncclSystemError for local failures, each logged once with its cause).
 */
#ifndef MEND_MISC_SOCKET_H_
#define MEND_MISC_SOCKET_H_

#include <net/if.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "nccl.h"

union mendSocketAddr {
  struct sockaddr sa;        /* family-independent view */
  struct sockaddr_in sin;    /* AF_INET */
  struct sockaddr_in6 sin6;  /* AF_INET6 */
};

struct mendIface {
  char name[IF_NAMESIZE];      /* e.g. "rail0" */
  union mendSocketAddr addr;   /* first address of the wanted family (port 0) */
  int prefixLen;               /* netmask length, for subnet matching */
  int ifIndex;                 /* kernel interface index (netlink events) */
};

#define MEND_SOCKET_NAME_MAXLEN 64  /* fits "[ffff:...:ffff]:65535" */

/* "host:port", "ip:port" or "[ipv6]:port" (a host name is resolved). */
ncclResult_t mendSocketParseAddr(const char* str, union mendSocketAddr* addr);
/* Printable "ip:port" / "[ipv6]:port" into buf (MEND_SOCKET_NAME_MAXLEN); returns buf. */
const char* mendSocketAddrStr(const union mendSocketAddr* addr, char* buf);
socklen_t mendSocketAddrLen(const union mendSocketAddr* addr);

/* Up to maxIfs interfaces matching `spec` (NULL: NCCL's automatic order: ib*, then anything but
 * docker and lo, then docker, then lo).  Returns the count found. */
int mendFindInterfaces(const char* spec, struct mendIface* out, int maxIfs);
/* The local interface whose subnet holds `remote`; returns 1 when found. */
int mendFindInterfaceForRemote(const union mendSocketAddr* remote, struct mendIface* out);
/* Does interface `name` match `spec`?  (Exposed for tests.) */
int mendIfaceMatches(const char* name, const char* spec);

/* Listening socket bound to `bindAddr` (port 0: any); *bound gets the real address. */
ncclResult_t mendSocketListen(const union mendSocketAddr* bindAddr, int* fd, union mendSocketAddr* bound);
/* Connect, retrying refused/unreachable until timeoutMs; TCP_NODELAY set. */
ncclResult_t mendSocketConnect(const union mendSocketAddr* addr, int* fd, _Atomic int* abortFlag, int64_t timeoutMs);
ncclResult_t mendSocketAccept(int listenFd, int* fd, _Atomic int* abortFlag, int64_t timeoutMs);
/* Move all `size` bytes (timeoutMs < 0: no bound but abort). */
ncclResult_t mendSocketSendAll(int fd, const void* data, size_t size, _Atomic int* abortFlag, int64_t timeoutMs);
ncclResult_t mendSocketRecvAll(int fd, void* data, size_t size, _Atomic int* abortFlag, int64_t timeoutMs);
/* One non-blocking step: moves what it can of [*offset, size) and advances *offset.
 * ncclRemoteError when the peer closed, ncclSystemError on socket errors. */
ncclResult_t mendSocketProgress(int fd, int isSend, void* data, size_t size, size_t* offset);
void mendSocketClose(int fd);

#endif
