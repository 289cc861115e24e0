/*
 * Socket Net devices: one per interface chosen by NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY, found
 * once per process (every communicator shares them), sorted by name so every host numbers its rails
 * alike.  Also the connection shape read from the parameters, and socket options.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "checks.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "transport/net_socket.h"

#define DEFAULT_NTHREADS 1   /* measured on 2 cores: see docs/net.md */
#define DEFAULT_NSOCKS 2     /* data sockets per thread */
#define UNKNOWN_SPEED 10000  /* Mbps, as NCCL reports a NIC whose speed sysfs cannot tell */

static pthread_mutex_t devLock = PTHREAD_MUTEX_INITIALIZER;
static int devDone;                                  /* discovery ran */
static int devCount;                                 /* devices found */
static struct mendSocketDev devs[MEND_SOCKET_MAX_DEVS];

static int readSpeed(const char* ifname) {
  char path[128], buf[32];
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
  FILE* f = fopen(path, "r");
  if (!f) return UNKNOWN_SPEED;
  int speed = -1;
  if (fgets(buf, sizeof(buf), f)) speed = atoi(buf);
  fclose(f);
  return speed > 0 ? speed : UNKNOWN_SPEED;  /* lo and some virtual NICs: error or -1 */
}

static char* readPciPath(const char* ifname) {
  char path[128];
  snprintf(path, sizeof(path), "/sys/class/net/%s/device", ifname);
  return realpath(path, NULL);  /* NULL for veth, bridges, lo: no backing device */
}

static int byName(const void* a, const void* b) {
  return strcmp(((const struct mendSocketDev*)a)->iface.name, ((const struct mendSocketDev*)b)->iface.name);
}

static void discover(void) {
  struct mendIface found[MEND_SOCKET_MAX_DEVS];
  int n = mendFindInterfaces(mendParamSocketIfname(), found, MEND_SOCKET_MAX_DEVS);
  devCount = 0;
  for (int i = 0; i < n; i++) {
    struct mendSocketDev* d = &devs[devCount++];
    memset(d, 0, sizeof(*d));
    d->iface = found[i];
    d->speed = readSpeed(d->iface.name);
    d->pciPath = readPciPath(d->iface.name);
    uint64_t h = mendHash(d->iface.name, strlen(d->iface.name));
    d->guid = mendHashCombine(h, mendHash(&d->iface.addr, mendSocketAddrLen(&d->iface.addr)));
  }
  qsort(devs, devCount, sizeof(devs[0]), byName);
  for (int i = 0; i < devCount; i++) {
    char addr[MEND_SOCKET_NAME_MAXLEN];
    INFO(NCCL_INIT | NCCL_NET, "NET/Socket: dev %d: %s %s speed %d Mbps%s", i, devs[i].iface.name,
         mendSocketAddrStr(&devs[i].iface.addr, addr), devs[i].speed, devs[i].pciPath ? "" : " (virtual)");
  }
  if (devCount == 0)
    WARN("NET/Socket: no interface matches NCCL_SOCKET_IFNAME=%s NCCL_SOCKET_FAMILY=%s",
         mendParamSocketIfname() ? mendParamSocketIfname() : "(auto)",
         mendParamSocketFamily() ? mendParamSocketFamily() : "(any)");
}

ncclResult_t mendNetSocketDevices(int* ndev) {
  MENDARGCHECK(ndev != NULL, ncclInvalidArgument, "NET/Socket: devices: ndev is NULL");
  pthread_mutex_lock(&devLock);
  if (!devDone) {
    discover();
    devDone = 1;
  }
  *ndev = devCount;
  pthread_mutex_unlock(&devLock);
  return ncclSuccess;
}

static ncclResult_t checkDev(int dev) {
  int n;
  MENDCHECK(mendNetSocketDevices(&n));
  MENDARGCHECK(dev >= 0 && dev < n, ncclInvalidArgument, "NET/Socket: device %d out of range (%d devices)", dev, n);
  return ncclSuccess;
}

ncclResult_t mendNetSocketGetProperties(int dev, struct mendNetProperties* props) {
  MENDCHECK(checkDev(dev));
  MENDARGCHECK(props != NULL, ncclInvalidArgument, "NET/Socket: getProperties: props is NULL");
  const struct mendSocketDev* d = &devs[dev];
  *props = (struct mendNetProperties){
    .name = (char*)d->iface.name, .pciPath = d->pciPath, .guid = d->guid, .ptrSupport = MEND_PTR_HOST,
    .regIsGlobal = 0, .forceFlush = 0, .speed = d->speed, .port = 0, .latency = 0,
    .maxComms = 65536, .maxRecvs = 1, .maxP2pBytes = MEND_SOCKET_MAX_SIZE, .maxCollBytes = MEND_SOCKET_MAX_SIZE,
  };
  return ncclSuccess;
}

ncclResult_t mendNetSocketDevAddr(int dev, union mendSocketAddr* addr, const char** name) {
  MENDCHECK(checkDev(dev));
  *addr = devs[dev].iface.addr;
  if (name) *name = devs[dev].iface.name;
  return ncclSuccess;
}

void mendNetSocketResetForTest(void) {
  pthread_mutex_lock(&devLock);
  for (int i = 0; i < devCount; i++) free(devs[i].pciPath);
  devCount = 0;
  devDone = 0;
  pthread_mutex_unlock(&devLock);
}

static int64_t clampParam(int64_t v, int64_t lo, int64_t hi, const char* name) {
  if (v >= lo && v <= hi) return v;
  int64_t c = v < lo ? lo : hi;
  WARN_ONCE("NET/Socket: %s=%lld out of range [%lld, %lld]; using %lld", name, (long long)v, (long long)lo,
            (long long)hi, (long long)c);
  return c;
}

void mendNetSocketConfig(int* nthreads, int* nsocks, size_t* chunk, size_t* inlineMax) {
  int64_t t = mendParamSocketNthreads(), s = mendParamNsocksPerthread();
  t = t == -2 ? DEFAULT_NTHREADS : clampParam(t, 0, MEND_SOCKET_MAX_THREADS, "NCCL_SOCKET_NTHREADS");
  s = s == -2 ? DEFAULT_NSOCKS : clampParam(s, 1, MEND_SOCKET_MAX_SOCKS, "NCCL_NSOCKS_PERTHREAD");
  if (t * s > MEND_SOCKET_MAX_SOCKS) {
    WARN_ONCE("NET/Socket: NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = %lld exceeds %d; using %lld sockets per thread",
              (long long)(t * s), MEND_SOCKET_MAX_SOCKS, (long long)(MEND_SOCKET_MAX_SOCKS / t));
    s = MEND_SOCKET_MAX_SOCKS / t;
  }
  *nthreads = (int)t;
  *nsocks = (int)(t > 0 ? t * s : s);
  *chunk = (size_t)clampParam(mendParamSocketChunksize(), 4096, 64 << 20, "MEND_SOCKET_CHUNKSIZE");
  *inlineMax = (size_t)clampParam(mendParamSocketInline(), 0, 1 << 20, "MEND_SOCKET_INLINE");
}

uint64_t mendNetSocketPollMaxNs(void) {
  return (uint64_t)clampParam(mendParamSocketPollMaxUs(), 0, 1000000, "MEND_SOCKET_POLL_MAX_US") * 1000u;
}

ncclResult_t mendNetSocketSetOpts(int fd, int isData) {
  int flags, one = 1;
  SYSCHECK(flags = fcntl(fd, F_GETFL), "fcntl(F_GETFL)");
  SYSCHECK(fcntl(fd, F_SETFL, flags | O_NONBLOCK), "fcntl(O_NONBLOCK)");
  /* Small headers must leave at once (PERF_NOTES: Nagle + delayed ACK stalls of 40 ms). */
  SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), "setsockopt(TCP_NODELAY)");
  int64_t buf = mendParamSocketBufsize();
  if (isData && buf > 0) {
    int b = buf > INT_MAX / 2 ? INT_MAX / 2 : (int)buf;
    SYSCHECK(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b)), "setsockopt(SO_SNDBUF)");
    SYSCHECK(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b)), "setsockopt(SO_RCVBUF)");
  }
  int64_t ut = mendParamSocketUserTimeout();
  if (ut > 0) {
    unsigned int t = ut > UINT_MAX ? UINT_MAX : (unsigned int)ut;
    SYSCHECK(setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &t, sizeof(t)), "setsockopt(TCP_USER_TIMEOUT)");
  }
  return ncclSuccess;
}

uint64_t mendNetSocketToken(void) {
  static _Atomic uint64_t counter;
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
    uint64_t c = atomic_fetch_add(&counter, 1);
    v = mendHashCombine(mendHashCombine(mendTimeNs(), (uint64_t)getpid()), c);
  }
  return v ? v : 1;
}
