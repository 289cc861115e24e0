/*
 * Sockets and interfaces (see socket.h).  Every socket is non-blocking (O_NONBLOCK, CLOEXEC) and has
 * TCP_NODELAY: the blocking helpers below wait with poll() in short slices so that an abort flag is
 * noticed within MEND_SOCKET_SLICE_MS and every wait has a deadline.
 */
#include "misc/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checks.h"
#include "misc/debug.h"
#include "misc/fault.h"
#include "misc/param.h"
#include "misc/utils.h"

#define MEND_SOCKET_SLICE_MS 10     /* longest poll before re-checking the abort flag */
#define MEND_SOCKET_RETRY_MS 20     /* pause between refused connection attempts */
#define MEND_SOCKET_BACKLOG 16384   /* listen backlog: a root may see every rank at once */

/* ---------------------------------------------------------------- addresses */

socklen_t mendSocketAddrLen(const union mendSocketAddr* addr) {
  return addr->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

const char* mendSocketAddrStr(const union mendSocketAddr* addr, char* buf) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr->sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &addr->sin.sin_addr, host, sizeof(host));
    snprintf(buf, MEND_SOCKET_NAME_MAXLEN, "%s:%u", host, ntohs(addr->sin.sin_port));
  } else if (addr->sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &addr->sin6.sin6_addr, host, sizeof(host));
    snprintf(buf, MEND_SOCKET_NAME_MAXLEN, "[%s]:%u", host, ntohs(addr->sin6.sin6_port));
  } else {
    snprintf(buf, MEND_SOCKET_NAME_MAXLEN, "<unset>");
  }
  return buf;
}

static int parsePort(const char* s, int* port) {
  char* end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || errno || *end != '\0' || v < 0 || v > 65535) return 0;
  *port = (int)v;
  return 1;
}

/* Resolve `host` (numeric or a name); AF_INET is preferred for names with both families. */
static ncclResult_t resolveHost(const char* host, int port, int family, union mendSocketAddr* addr) {
  memset(addr, 0, sizeof(*addr));
  if (family != AF_INET6 && inet_pton(AF_INET, host, &addr->sin.sin_addr) == 1) {
    addr->sin.sin_family = AF_INET;
    addr->sin.sin_port = htons((uint16_t)port);
    return ncclSuccess;
  }
  if (family != AF_INET && inet_pton(AF_INET6, host, &addr->sin6.sin6_addr) == 1) {
    addr->sin6.sin6_family = AF_INET6;
    addr->sin6.sin6_port = htons((uint16_t)port);
    return ncclSuccess;
  }
  if (family == AF_INET6) return ncclInvalidArgument;  /* "[name]" must be a numeric IPv6 address */
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  struct addrinfo* res = NULL;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || res == NULL) {
    WARN("Cannot resolve host name '%s': %s", host, gai_strerror(rc));
    return ncclInvalidArgument;
  }
  const struct addrinfo* pick = res;
  for (const struct addrinfo* r = res; r; r = r->ai_next)
    if (r->ai_family == AF_INET) { pick = r; break; }
  memcpy(addr, pick->ai_addr, pick->ai_addrlen < sizeof(*addr) ? pick->ai_addrlen : sizeof(*addr));
  if (addr->sa.sa_family == AF_INET) addr->sin.sin_port = htons((uint16_t)port);
  else addr->sin6.sin6_port = htons((uint16_t)port);
  freeaddrinfo(res);
  return ncclSuccess;
}

/* Accepted forms: "1.2.3.4:p", "[v6]:p", "[v6]" (port 0), "name:p", "1.2.3.4" (port 0), "v6" (port 0). */
ncclResult_t mendSocketParseAddr(const char* str, union mendSocketAddr* addr) {
  char host[256];
  int port = 0, family = AF_UNSPEC;
  if (str == NULL || addr == NULL || *str == '\0' || strlen(str) >= sizeof(host)) {
    WARN("Invalid socket address '%s': empty or too long", str ? str : "(null)");
    return ncclInvalidArgument;
  }
  if (str[0] == '[') {
    const char* close = strchr(str, ']');
    if (close == NULL || close == str + 1 || (close[1] != '\0' && (close[1] != ':' || !parsePort(close + 2, &port)))) {
      WARN("Invalid socket address '%s': expected [ipv6]:port", str);
      return ncclInvalidArgument;
    }
    memcpy(host, str + 1, (size_t)(close - str - 1));
    host[close - str - 1] = '\0';
    family = AF_INET6;
  } else {
    const char* colon = strrchr(str, ':');
    if (colon && strchr(str, ':') != colon) colon = NULL;  /* bare IPv6 address: no port */
    snprintf(host, sizeof(host), "%s", str);
    if (colon) {
      host[colon - str] = '\0';
      if (host[0] == '\0' || !parsePort(colon + 1, &port)) {
        WARN("Invalid socket address '%s': expected host:port", str);
        return ncclInvalidArgument;
      }
    }
  }
  if (resolveHost(host, port, family, addr) != ncclSuccess) {
    WARN("Invalid socket address '%s': '%s' is not an address", str, host);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* ---------------------------------------------------------------- interfaces */

/* One list element ("eth", "=eth0") against an interface name. */
static int matchOne(const char* name, const char* elem, size_t len, int exact) {
  if (len == 0) return 0;
  if (exact) return strlen(name) == len && strncmp(name, elem, len) == 0;
  return strncmp(name, elem, len) == 0;
}

int mendIfaceMatches(const char* name, const char* spec) {
  if (name == NULL) return 0;
  if (spec == NULL || *spec == '\0') return 1;
  int exclude = 0, exact = 0;
  if (*spec == '^') { exclude = 1; spec++; }
  if (*spec == '=') { exact = 1; spec++; }
  int hit = 0;
  for (const char* p = spec; *p && !hit;) {
    const char* end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    hit = matchOne(name, p, len, exact);
    p += len + (end ? 1 : 0);
  }
  return exclude ? !hit : hit;
}

static int wantedFamily(void) {
  const char* fam = mendParamSocketFamily();
  if (fam == NULL || *fam == '\0') return AF_UNSPEC;
  if (strcasecmp(fam, "AF_INET") == 0) return AF_INET;
  if (strcasecmp(fam, "AF_INET6") == 0) return AF_INET6;
  WARN_ONCE("NCCL_SOCKET_FAMILY=%s is not AF_INET or AF_INET6; using any family", fam);
  return AF_UNSPEC;
}

static int prefixLenOf(const struct sockaddr* mask) {
  if (mask == NULL) return 0;
  const unsigned char* b;
  int n;
  if (mask->sa_family == AF_INET) { b = (const unsigned char*)&((const struct sockaddr_in*)mask)->sin_addr; n = 4; }
  else if (mask->sa_family == AF_INET6) { b = (const unsigned char*)&((const struct sockaddr_in6*)mask)->sin6_addr; n = 16; }
  else return 0;
  int len = 0;
  for (int i = 0; i < n; i++) len += __builtin_popcount(b[i]);
  return len;
}

/* Usable address of a wanted family (link-local IPv6 needs a scope, so it is skipped). */
static int usableAddr(const struct ifaddrs* ifa, int family) {
  if (ifa->ifa_addr == NULL || ifa->ifa_name == NULL) return 0;
  int f = ifa->ifa_addr->sa_family;
  if (f != AF_INET && f != AF_INET6) return 0;
  if (family != AF_UNSPEC && f != family) return 0;
  if (f == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6*)ifa->ifa_addr)->sin6_addr)) return 0;
  return 1;
}

static void fillIface(const struct ifaddrs* ifa, struct mendIface* out) {
  memset(out, 0, sizeof(*out));
  snprintf(out->name, sizeof(out->name), "%s", ifa->ifa_name);
  memcpy(&out->addr, ifa->ifa_addr, ifa->ifa_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                                          : sizeof(struct sockaddr_in));
  out->prefixLen = prefixLenOf(ifa->ifa_netmask);
  out->ifIndex = (int)if_nametoindex(ifa->ifa_name);
}

/* Append interfaces matching `spec` (and not yet listed); IPv4 addresses are taken before IPv6 ones. */
static int collect(struct ifaddrs* all, const char* spec, int family, struct mendIface* out, int n, int maxIfs) {
  for (int pass = 0; pass < 2; pass++) {
    int passFamily = pass == 0 ? AF_INET : AF_INET6;
    for (struct ifaddrs* ifa = all; ifa && n < maxIfs; ifa = ifa->ifa_next) {
      if (!usableAddr(ifa, family) || ifa->ifa_addr->sa_family != passFamily) continue;
      if (!mendIfaceMatches(ifa->ifa_name, spec)) continue;
      int dup = 0;
      for (int i = 0; i < n && !dup; i++) dup = strcmp(out[i].name, ifa->ifa_name) == 0;
      if (!dup) fillIface(ifa, &out[n++]);
    }
  }
  return n;
}

int mendFindInterfaces(const char* spec, struct mendIface* out, int maxIfs) {
  struct ifaddrs* all = NULL;
  if (maxIfs <= 0 || out == NULL) return 0;
  if (getifaddrs(&all) != 0) {
    WARN("getifaddrs failed: %m");
    return 0;
  }
  int family = wantedFamily(), n = 0;
  if (spec && *spec) {
    n = collect(all, spec, family, out, 0, maxIfs);
  } else {
    /* NCCL's automatic order: InfiniBand first, then anything but docker and loopback. */
    n = collect(all, "ib", family, out, 0, maxIfs);
    if (n == 0) n = collect(all, "^docker,lo", family, out, 0, maxIfs);
    if (n == 0) n = collect(all, "docker", family, out, 0, maxIfs);
    if (n == 0) n = collect(all, "lo", family, out, 0, maxIfs);
  }
  freeifaddrs(all);
  return n;
}

static int sameSubnet(const union mendSocketAddr* a, const struct sockaddr* b, int prefixLen) {
  const unsigned char *x, *y;
  int bytes;
  if (a->sa.sa_family != b->sa_family) return 0;
  if (b->sa_family == AF_INET) {
    x = (const unsigned char*)&a->sin.sin_addr; y = (const unsigned char*)&((const struct sockaddr_in*)b)->sin_addr; bytes = 4;
  } else {
    x = (const unsigned char*)&a->sin6.sin6_addr; y = (const unsigned char*)&((const struct sockaddr_in6*)b)->sin6_addr; bytes = 16;
  }
  for (int bit = 0; bit < prefixLen && bit < bytes * 8; bit++) {
    int mask = 0x80 >> (bit % 8);
    if ((x[bit / 8] & mask) != (y[bit / 8] & mask)) return 0;
  }
  return 1;
}

int mendFindInterfaceForRemote(const union mendSocketAddr* remote, struct mendIface* out) {
  struct ifaddrs* all = NULL;
  int found = 0;
  if (remote == NULL || out == NULL || getifaddrs(&all) != 0) return 0;
  for (struct ifaddrs* ifa = all; ifa && !found; ifa = ifa->ifa_next) {
    if (!usableAddr(ifa, AF_UNSPEC) || ifa->ifa_netmask == NULL) continue;
    if (sameSubnet(remote, ifa->ifa_addr, prefixLenOf(ifa->ifa_netmask))) {
      fillIface(ifa, out);
      found = 1;
    }
  }
  freeifaddrs(all);
  return found;
}

/* ---------------------------------------------------------------- connections */

static int aborted(_Atomic int* abortFlag) {
  return abortFlag && atomic_load_explicit(abortFlag, memory_order_acquire);
}

/* Milliseconds left before `deadline` (deadline < 0: unbounded -> one slice). */
static int sliceMs(int64_t deadline) {
  if (deadline < 0) return MEND_SOCKET_SLICE_MS;
  int64_t left = deadline - mendTimeMs();
  if (left <= 0) return 0;
  return left < MEND_SOCKET_SLICE_MS ? (int)left : MEND_SOCKET_SLICE_MS;
}

static int64_t deadlineOf(int64_t timeoutMs) { return timeoutMs < 0 ? -1 : mendTimeMs() + timeoutMs; }

static int expired(int64_t deadline) { return deadline >= 0 && mendTimeMs() >= deadline; }

static void tuneSocket(int fd) {
  int one = 1;
  /* Bootstrap and socket-Net traffic is made of small request/reply messages: never delay them. */
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

ncclResult_t mendSocketListen(const union mendSocketAddr* bindAddr, int* fd, union mendSocketAddr* bound) {
  char name[MEND_SOCKET_NAME_MAXLEN];
  ncclResult_t res = ncclSuccess;
  if (bindAddr == NULL || fd == NULL) return ncclInvalidArgument;
  int s = socket(bindAddr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) {
    WARN("socket() for listening on %s failed: %m", mendSocketAddrStr(bindAddr, name));
    return ncclSystemError;
  }
  int one = 1;
  /* A fixed port (NCCL_COMM_ID) must be reusable while old connections linger in TIME_WAIT. */
  SYSCHECKGOTO(setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), "setsockopt(SO_REUSEADDR)", res, fail_close);
  if (bind(s, &bindAddr->sa, mendSocketAddrLen(bindAddr)) != 0) {
    WARN("bind to %s failed: %m", mendSocketAddrStr(bindAddr, name));
    res = ncclSystemError;
    goto fail_close;
  }
  SYSCHECKGOTO(listen(s, MEND_SOCKET_BACKLOG), "listen", res, fail_close);
  if (bound) {
    socklen_t len = sizeof(*bound);
    memset(bound, 0, sizeof(*bound));
    SYSCHECKGOTO(getsockname(s, &bound->sa, &len), "getsockname", res, fail_close);
  }
  *fd = s;
  return ncclSuccess;
fail_close:
  close(s);
  return res;
}

/* Wait until fd is ready for `events`: 1 ready, 0 timed out/aborted (checked by the caller), -1 error. */
static int waitFd(int fd, short events, _Atomic int* abortFlag, int64_t deadline, short* revents) {
  for (;;) {
    if (aborted(abortFlag)) return 0;
    int ms = sliceMs(deadline);
    if (ms == 0) return 0;
    struct pollfd p = {.fd = fd, .events = events};
    int rc = poll(&p, 1, ms);
    if (rc < 0 && errno != EINTR) return -1;
    if (rc > 0) {
      if (revents) *revents = p.revents;
      return 1;
    }
  }
}

/* Connection attempts that may succeed later (the listener is not up yet, or briefly overloaded). */
static int retryable(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH || err == EHOSTUNREACH ||
         err == ECONNRESET || err == EAGAIN || err == ECONNABORTED;
}

/* One attempt: 0 connected, else the errno (EINPROGRESS never escapes; abort/deadline -> ETIME). */
static int connectOnce(const union mendSocketAddr* addr, int s, _Atomic int* abortFlag, int64_t deadline) {
  if (connect(s, &addr->sa, mendSocketAddrLen(addr)) == 0) return 0;
  if (errno != EINPROGRESS) return errno;
  short rev = 0;
  int w = waitFd(s, POLLOUT, abortFlag, deadline, &rev);
  if (w < 0) return errno;
  if (w == 0) return ETIME;
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

ncclResult_t mendSocketConnect(const union mendSocketAddr* addr, int* fd, _Atomic int* abortFlag, int64_t timeoutMs) {
  char name[MEND_SOCKET_NAME_MAXLEN];
  if (addr == NULL || fd == NULL) return ncclInvalidArgument;
  int64_t deadline = deadlineOf(timeoutMs);
  for (int attempt = 0;; attempt++) {
    if (aborted(abortFlag)) return ncclInternalError;
    if (mendFaultCheck("socket.connect")) {
      WARN("Connect to %s failed: injected fault (socket.connect)", mendSocketAddrStr(addr, name));
      return ncclSystemError;
    }
    int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) {
      WARN("socket() to connect to %s failed: %m", mendSocketAddrStr(addr, name));
      return ncclSystemError;
    }
    tuneSocket(s);
    int err = connectOnce(addr, s, abortFlag, deadline);
    if (err == 0) {
      *fd = s;
      return ncclSuccess;
    }
    close(s);
    if (aborted(abortFlag)) return ncclInternalError;
    if (err != ETIME && !retryable(err)) {
      errno = err;
      WARN("Connect to %s failed: %m", mendSocketAddrStr(addr, name));
      return ncclSystemError;
    }
    if (err == ETIME || expired(deadline)) {
      errno = err == ETIME ? ETIMEDOUT : err;
      WARN("Connect to %s timed out after %lld ms (%d attempts, last: %m)", mendSocketAddrStr(addr, name),
           (long long)timeoutMs, attempt + 1);
      return ncclRemoteError;
    }
    /* The listener may not be up yet: retry after a short pause, still watching abort and deadline. */
    for (int64_t until = mendTimeMs() + MEND_SOCKET_RETRY_MS; mendTimeMs() < until;) {
      if (aborted(abortFlag)) return ncclInternalError;
      usleep(2000);
    }
  }
}

ncclResult_t mendSocketAccept(int listenFd, int* fd, _Atomic int* abortFlag, int64_t timeoutMs) {
  if (fd == NULL || listenFd < 0) return ncclInvalidArgument;
  int64_t deadline = deadlineOf(timeoutMs);
  for (;;) {
    if (aborted(abortFlag)) return ncclInternalError;
    int s = accept4(listenFd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (s >= 0) {
      tuneSocket(s);
      *fd = s;
      return ncclSuccess;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      WARN("accept failed: %m");
      return ncclSystemError;
    }
    if (timeoutMs == 0) return ncclInProgress;  /* a single quiet attempt: nothing pending */
    int w = waitFd(listenFd, POLLIN, abortFlag, deadline, NULL);
    if (w < 0) {
      WARN("poll on listening socket failed: %m");
      return ncclSystemError;
    }
    if (w == 0 && aborted(abortFlag)) return ncclInternalError;
    if (w == 0 && expired(deadline)) {
      WARN("Accept timed out after %lld ms", (long long)timeoutMs);
      return ncclRemoteError;
    }
  }
}

/* ---------------------------------------------------------------- data */

ncclResult_t mendSocketProgress(int fd, int isSend, void* data, size_t size, size_t* offset) {
  while (*offset < size) {
    if (mendFaultCheck(isSend ? "socket.send" : "socket.recv")) {
      WARN("Socket %s failed: injected fault (socket.%s)", isSend ? "send" : "recv", isSend ? "send" : "recv");
      return ncclSystemError;
    }
    char* p = (char*)data + *offset;
    ssize_t n = isSend ? send(fd, p, size - *offset, MSG_NOSIGNAL | MSG_DONTWAIT)
                       : recv(fd, p, size - *offset, MSG_DONTWAIT);
    if (n > 0) {
      *offset += (size_t)n;
      continue;
    }
    if (n == 0 && !isSend) {
      WARN("Connection closed by peer (received %zu of %zu bytes)", *offset, size);
      return ncclRemoteError;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN)) {
      WARN("Connection to peer lost during %s: %m", isSend ? "send" : "recv");
      return ncclRemoteError;
    }
    WARN("Socket %s failed: %m", isSend ? "send" : "recv");
    return ncclSystemError;
  }
  return ncclSuccess;
}

static ncclResult_t moveAll(int fd, int isSend, void* data, size_t size, _Atomic int* abortFlag, int64_t timeoutMs) {
  size_t offset = 0;
  int64_t deadline = deadlineOf(timeoutMs);
  if (fd < 0 || (data == NULL && size > 0)) return ncclInvalidArgument;
  for (;;) {
    MENDCHECK(mendSocketProgress(fd, isSend, data, size, &offset));
    if (offset == size) return ncclSuccess;
    if (aborted(abortFlag)) return ncclInternalError;
    int w = waitFd(fd, isSend ? POLLOUT : POLLIN, abortFlag, deadline, NULL);
    if (w < 0) {
      WARN("poll on socket failed: %m");
      return ncclSystemError;
    }
    if (w == 0 && aborted(abortFlag)) return ncclInternalError;
    if (w == 0 && expired(deadline)) {
      WARN("Socket %s timed out after %lld ms (%zu of %zu bytes)", isSend ? "send" : "recv", (long long)timeoutMs,
           offset, size);
      return ncclRemoteError;
    }
  }
}

ncclResult_t mendSocketSendAll(int fd, const void* data, size_t size, _Atomic int* abortFlag, int64_t timeoutMs) {
  return moveAll(fd, 1, (void*)data, size, abortFlag, timeoutMs);
}

ncclResult_t mendSocketRecvAll(int fd, void* data, size_t size, _Atomic int* abortFlag, int64_t timeoutMs) {
  return moveAll(fd, 0, data, size, abortFlag, timeoutMs);
}

void mendSocketClose(int fd) {
  if (fd >= 0) close(fd);
}
