/* Control plane between the processes of one run: barriers, timing reductions, the unique id
 * and the device report. It never uses the library under test, so a broken library cannot hide
 * its own wrong results or hang the bookkeeping.
 *   one process     : nothing to do
 *   MPI (MPI=1)     : MPI_COMM_WORLD, when an MPI launcher (mpirun) started the process
 *   env launch      : a TCP star around process 0 (RANK/WORLD_SIZE set, as by mend-run or
 *                     torchrun), at MEND_PERF_CTRL=host:port, else MASTER_ADDR:MASTER_PORT
 *                     (MASTER_PORT+1 under torchrun, whose store holds MASTER_PORT), else
 *                     the host of NCCL_COMM_ID and its port + 1.
 * Every wait is bounded by the control timeout. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "bench.h"
#ifdef MPI_SUPPORT
#include <mpi.h>
#endif

enum ctrlKind { ctrlLocal, ctrlTcp, ctrlMpi };

static struct {
  enum ctrlKind kind;    /* which transport carries the control plane */
  int nProcs;            /* processes */
  int proc;              /* this process */
  int timeoutMs;         /* bound on any single wait */
  int* fds;              /* process 0: socket of each other process; others: fds[0] to process 0 */
} ctrl = {.kind = ctrlLocal, .nProcs = 1};

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int envInt(const char* name, int dflt, int* out) {
  const char* s = getenv(name);
  if (!s || !*s) { *out = dflt; return 0; }
  char* end = NULL;
  long v = strtol(s, &end, 10);
  if (*end != '\0' || v < 0 || v > 1 << 24) {
    fprintf(stderr, "Invalid %s='%s': want a non-negative integer\n", name, s);
    return -1;
  }
  *out = (int)v;
  return 0;
}

/* host:port, [v6]:port; returns 0 and fills host/port. */
static int splitHostPort(const char* s, char* host, size_t hl, int* port) {
  const char* colon = strrchr(s, ':');
  if (!colon || colon == s) return -1;
  size_t n = (size_t)(colon - s);
  if (s[0] == '[' && n >= 2 && s[n - 1] == ']') { s++; n -= 2; }
  if (n >= hl) return -1;
  memcpy(host, s, n);
  host[n] = '\0';
  char* end = NULL;
  long p = strtol(colon + 1, &end, 10);
  if (*end != '\0' || p <= 0 || p > 65535) return -1;
  *port = (int)p;
  return 0;
}

static int ctrlAddress(char* host, size_t hl, int* port) {
  const char* s = getenv("MEND_PERF_CTRL");
  if (s && *s) {
    if (splitHostPort(s, host, hl, port) == 0) return 0;
    fprintf(stderr, "Invalid MEND_PERF_CTRL='%s': want host:port\n", s);
    return -1;
  }
  const char* ma = getenv("MASTER_ADDR");
  const char* mp = getenv("MASTER_PORT");
  if (ma && *ma && mp && *mp) {
    char* end = NULL;
    long p = strtol(mp, &end, 10) + (getenv("TORCHELASTIC_RUN_ID") ? 1 : 0);
    if (*end != '\0' || p <= 0 || p > 65535 || strlen(ma) >= hl) {
      fprintf(stderr, "Invalid MASTER_ADDR/MASTER_PORT '%s:%s'\n", ma, mp);
      return -1;
    }
    snprintf(host, hl, "%s", ma);
    *port = (int)p;
    return 0;
  }
  const char* id = getenv("NCCL_COMM_ID");
  if (id && *id && splitHostPort(id, host, hl, port) == 0 && *port < 65535) {
    *port += 1;
    return 0;
  }
  fprintf(stderr, "An env launch (RANK/WORLD_SIZE) needs MEND_PERF_CTRL, MASTER_ADDR and "
          "MASTER_PORT, or NCCL_COMM_ID, to find process 0 (use mend-run)\n");
  return -1;
}

static int remainingMs(double deadline) {
  double left = deadline - nowSec();
  return left <= 0 ? 0 : (int)(left * 1000) + 1;
}

static int waitFd(int fd, short ev, double deadline) {
  struct pollfd p = {.fd = fd, .events = ev};
  for (;;) {
    int ms = remainingMs(deadline);
    if (ms == 0) return -1;
    int r = poll(&p, 1, ms);
    if (r > 0) return 0;
    if (r < 0 && errno != EINTR) return -1;
  }
}

static int ioAll(int fd, void* buf, size_t len, int send) {
  double deadline = nowSec() + ctrl.timeoutMs / 1000.0;
  char* p = buf;
  while (len > 0) {
    if (waitFd(fd, send ? POLLOUT : POLLIN, deadline) != 0) {
      fprintf(stderr, "control plane: timed out after %d s\n", ctrl.timeoutMs / 1000);
      return -1;
    }
    ssize_t n = send ? write(fd, p, len) : read(fd, p, len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      fprintf(stderr, "control plane: %s\n", n == 0 ? "a process closed its connection (it died?)"
                                                    : strerror(errno));
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int tuneSocket(int fd) {
  int one = 1;
  return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int tcpServe(int port) {
  int lfd = socket(AF_INET6, SOCK_STREAM, 0), zero = 0, one = 1;
  struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                            .sin6_addr = IN6ADDR_ANY_INIT};
  struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (lfd >= 0) {
    setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lfd, (struct sockaddr*)&a6, sizeof(a6)) != 0) { close(lfd); lfd = -1; }
  }
  if (lfd < 0) {  /* no IPv6 in this namespace */
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0) { perror("control plane: socket"); return -1; }
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lfd, (struct sockaddr*)&a4, sizeof(a4)) != 0) {
      fprintf(stderr, "control plane: cannot listen on port %d: %s\n", port, strerror(errno));
      close(lfd);
      return -1;
    }
  }
  if (listen(lfd, 256) != 0) { perror("control plane: listen"); close(lfd); return -1; }
  double deadline = nowSec() + ctrl.timeoutMs / 1000.0;
  for (int got = 1; got < ctrl.nProcs; got++) {
    if (waitFd(lfd, POLLIN, deadline) != 0) {
      fprintf(stderr, "control plane: only %d of %d processes connected to port %d in time\n", got,
              ctrl.nProcs, port);
      close(lfd);
      return -1;
    }
    int fd = accept(lfd, NULL, NULL);
    int32_t who = -1;
    if (fd < 0 || ioAll(fd, &who, sizeof(who), 0) != 0 || who <= 0 || who >= ctrl.nProcs ||
        ctrl.fds[who] >= 0) {
      fprintf(stderr, "control plane: bad connection (process %d)\n", (int)who);
      if (fd >= 0) close(fd);
      close(lfd);
      return -1;
    }
    tuneSocket(fd);
    ctrl.fds[who] = fd;
  }
  close(lfd);
  return 0;
}

static int tcpJoin(const char* host, int port) {
  char ps[16];
  snprintf(ps, sizeof(ps), "%d", port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  double deadline = nowSec() + ctrl.timeoutMs / 1000.0;
  int rc = getaddrinfo(host, ps, &hints, &res);
  if (rc != 0) {
    fprintf(stderr, "control plane: cannot resolve '%s': %s\n", host, gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  while (fd < 0 && nowSec() < deadline) {
    fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
      usleep(50 * 1000);  /* process 0 may not listen yet */
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    fprintf(stderr, "control plane: cannot reach process 0 at %s:%d\n", host, port);
    return -1;
  }
  tuneSocket(fd);
  int32_t me = ctrl.proc;
  ctrl.fds[0] = fd;
  return ioAll(fd, &me, sizeof(me), 1);
}

static int initEnv(struct benchWorld* w) {
  int rank, size, local;
  if (envInt("RANK", 0, &rank) || envInt("WORLD_SIZE", 1, &size) || envInt("LOCAL_RANK", 0, &local))
    return -1;
  if (size < 1 || rank >= size) {
    fprintf(stderr, "Invalid RANK=%d for WORLD_SIZE=%d\n", rank, size);
    return -1;
  }
  w->nProcs = ctrl.nProcs = size;
  w->proc = ctrl.proc = rank;
  w->localRank = local;
  if (size == 1) return 0;
  char host[256];
  int port;
  if (ctrlAddress(host, sizeof(host), &port) != 0) return -1;
  ctrl.kind = ctrlTcp;
  ctrl.fds = malloc((size_t)size * sizeof(int));
  if (!ctrl.fds) return -1;
  for (int i = 0; i < size; i++) ctrl.fds[i] = -1;
  return rank == 0 ? tcpServe(port) : tcpJoin(host, port);
}

#ifdef MPI_SUPPORT
/* An MPI build still runs alone or under an env launch (mend-run, torchrun); MPI carries the
 * control plane only when an MPI launcher started this process. */
static int launchedByMpi(void) {
  static const char* const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

static int initMpi(struct benchWorld* w, int* argc, char*** argv) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited && MPI_Init(argc, argv) != MPI_SUCCESS) {
    fprintf(stderr, "control plane: MPI_Init failed\n");
    return -1;
  }
  MPI_Comm_size(MPI_COMM_WORLD, &w->nProcs);
  MPI_Comm_rank(MPI_COMM_WORLD, &w->proc);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->proc, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &w->localRank);
  MPI_Comm_free(&local);
  ctrl.kind = ctrlMpi;
  ctrl.nProcs = w->nProcs;
  ctrl.proc = w->proc;
  w->mpi = 1;
  return 0;
}
#endif

int benchCtrlInit(struct benchWorld* w, int* argc, char*** argv, int timeoutSec) {
  memset(w, 0, sizeof(*w));
  w->nProcs = 1;
  const char* hid = getenv("NCCL_HOSTID");
  if (hid && *hid) snprintf(w->host, sizeof(w->host), "%s", hid);
  else if (gethostname(w->host, sizeof(w->host)) != 0) snprintf(w->host, sizeof(w->host), "?");
  w->host[sizeof(w->host) - 1] = '\0';
  int envTimeout;
  if (envInt("MEND_PERF_CTRL_TIMEOUT", 0, &envTimeout) != 0) return -1;
  int sec = envTimeout > 0 ? envTimeout : (timeoutSec > 0 ? 2 * timeoutSec + 30 : 900);
  ctrl.timeoutMs = sec * 1000;
#ifdef MPI_SUPPORT
  if (launchedByMpi()) return initMpi(w, argc, argv);
#endif
  (void)argc;
  (void)argv;
  return initEnv(w);
}

static void combine(double* acc, const double* v, int n, int op) {
  for (int i = 0; i < n; i++) {
    if (op == benchCtrlSum) acc[i] += v[i];
    else if (op == benchCtrlMin) acc[i] = v[i] < acc[i] ? v[i] : acc[i];
    else if (op == benchCtrlMax) acc[i] = v[i] > acc[i] ? v[i] : acc[i];
  }
}

int benchCtrlAllreduce(double* v, int n, int op) {
  if (ctrl.kind == ctrlLocal) return 0;
#ifdef MPI_SUPPORT
  if (ctrl.kind == ctrlMpi) {
    if (n == 0) return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
    if (op == benchCtrlFirst) return MPI_Bcast(v, n, MPI_DOUBLE, 0, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
    MPI_Op mop = op == benchCtrlSum ? MPI_SUM : op == benchCtrlMin ? MPI_MIN : MPI_MAX;
    return MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, mop, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
  }
#endif
  double token = 0;
  double* buf = n > 0 ? v : &token;
  size_t len = (size_t)(n > 0 ? n : 1) * sizeof(double);
  if (ctrl.proc != 0) {
    if (ioAll(ctrl.fds[0], buf, len, 1) != 0) return -1;
    return ioAll(ctrl.fds[0], buf, len, 0);
  }
  double* tmp = malloc(len);
  if (!tmp) return -1;
  int rc = 0;
  for (int p = 1; p < ctrl.nProcs && rc == 0; p++) {
    rc = ioAll(ctrl.fds[p], tmp, len, 0);
    if (rc == 0 && n > 0) combine(buf, tmp, n, op);
  }
  for (int p = 1; p < ctrl.nProcs && rc == 0; p++) rc = ioAll(ctrl.fds[p], buf, len, 1);
  free(tmp);
  return rc;
}

int benchCtrlBcast(void* buf, size_t len) {
  if (ctrl.kind == ctrlLocal) return 0;
#ifdef MPI_SUPPORT
  if (ctrl.kind == ctrlMpi) return MPI_Bcast(buf, (int)len, MPI_BYTE, 0, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
#endif
  if (ctrl.proc != 0) return ioAll(ctrl.fds[0], buf, len, 0);
  for (int p = 1; p < ctrl.nProcs; p++)
    if (ioAll(ctrl.fds[p], buf, len, 1) != 0) return -1;
  return 0;
}

int benchCtrlGather(const void* mine, size_t len, void* all) {
  if (ctrl.proc == 0) memcpy(all, mine, len);
  if (ctrl.kind == ctrlLocal) return 0;
#ifdef MPI_SUPPORT
  if (ctrl.kind == ctrlMpi)
    return MPI_Gather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, 0, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
#endif
  if (ctrl.proc != 0) return ioAll(ctrl.fds[0], (void*)mine, len, 1);
  for (int p = 1; p < ctrl.nProcs; p++)
    if (ioAll(ctrl.fds[p], (char*)all + (size_t)p * len, len, 0) != 0) return -1;
  return 0;
}

void benchCtrlFinalize(int failed) {
  if (ctrl.kind == ctrlTcp) {
    for (int p = 0; p < ctrl.nProcs; p++)
      if (ctrl.fds[p] >= 0) close(ctrl.fds[p]);
    free(ctrl.fds);
    ctrl.fds = NULL;
  }
#ifdef MPI_SUPPORT
  if (ctrl.kind == ctrlMpi) {
    if (failed) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
  }
#endif
  (void)failed;
  ctrl.kind = ctrlLocal;
}
