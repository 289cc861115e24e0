/*
 * Every collective through the public API, one rank per process (fork + exec of this program),
 * for 2, 3, 4 and 8 ranks, over shared memory and over sockets (NCCL_SHM_DISABLE=1, a different
 * NCCL_HOSTID per rank, NCCL_SOCKET_IFNAME=lo), plus the CPU a rank uses while it waits for a late
 * peer.  Each child checks its own results and reports failures on stdout ("# ..." lines); the
 * parent prints one TAP line per configuration and part.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mendtest.h"
#include "nccl.h"

#define MAXR 8

static int fails;
#define CHECK(cond, ...) do { if (!(cond)) { fails++; printf("# rank %d: ", rank); printf(__VA_ARGS__); printf("\n"); fflush(stdout); } } while (0)
#define NCCLOK(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) { fails++; \
    printf("# rank %d: %s failed: %s\n", rank, #call, ncclGetErrorString(r_)); fflush(stdout); } } while (0)

static int rank, nranks;
static ncclComm_t comm;

/* ------------------------------------------------------------ child side */

/* Integer-valued element i of rank r (exact in every type used here). */
static double val(int r, size_t i) { return (double)((r * 3 + i * 7) % 5); }

static size_t tsize(ncclDataType_t t) {
  return t == ncclUint8 ? 1 : (t == ncclInt32 || t == ncclFloat32) ? 4 : 8;
}

/* The buffers are unaligned on purpose: elements move through memcpy, never a typed access. */
static void put(ncclDataType_t t, void* p, size_t i, double v) {
  union { int32_t i32; uint8_t u8; int64_t i64; float f32; double f64; } e;
  switch (t) {
  case ncclInt32: e.i32 = (int32_t)v; break;
  case ncclUint8: e.u8 = (uint8_t)v; break;
  case ncclInt64: e.i64 = (int64_t)v; break;
  case ncclFloat32: e.f32 = (float)v; break;
  case ncclFloat64: e.f64 = v; break;
  default: return;
  }
  memcpy((char*)p + i * tsize(t), &e, tsize(t));
}
static double get(ncclDataType_t t, const void* p, size_t i) {
  union { int32_t i32; uint8_t u8; int64_t i64; float f32; double f64; } e;
  memcpy(&e, (const char*)p + i * tsize(t), tsize(t));
  switch (t) {
  case ncclInt32: return e.i32;
  case ncclUint8: return e.u8;
  case ncclInt64: return (double)e.i64;
  case ncclFloat32: return e.f32;
  case ncclFloat64: return e.f64;
  default: return -1;
  }
}

static double redRef(ncclRedOp_t op, size_t i) {
  double acc = val(0, i);
  for (int r = 1; r < nranks; r++) {
    double v = val(r, i);
    if (op == ncclSum || op == ncclAvg) acc += v;
    else if (op == ncclProd) acc *= v;
    else if (op == ncclMax) acc = v > acc ? v : acc;
    else acc = v < acc ? v : acc;
  }
  return op == ncclAvg ? acc / nranks : acc;
}

static int near(ncclDataType_t t, ncclRedOp_t op, double got, double want) {
  if (op == ncclAvg && (t == ncclFloat32 || t == ncclFloat64)) return got > want - 1e-4 && got < want + 1e-4;
  if (op == ncclAvg) want = (double)(int64_t)want; /* integer average truncates */
  return got == want;
}

/* AllReduce, Reduce, ReduceScatter for a type, op, count, placement. */
static void reductions(ncclDataType_t t, ncclRedOp_t op, size_t count, int inPlace, int root) {
  size_t ts = tsize(t), n = (size_t)nranks;
  char* a = malloc(count * n * ts + 16);
  char* b = malloc(count * n * ts + 16);
  char *send = a + 1, *recv = inPlace ? send : b + 1; /* unaligned on purpose */
  /* AllReduce */
  for (size_t i = 0; i < count; i++) put(t, send, i, val(rank, i));
  NCCLOK(ncclAllReduce(send, recv, count, t, op, comm, NULL));
  for (size_t i = 0; i < count; i++) {
    if (!near(t, op, get(t, recv, i), redRef(op, i))) {
      CHECK(0, "AllReduce type %d op %d count %zu inplace %d: [%zu] = %g, want %g", t, op, count, inPlace, i,
            get(t, recv, i), redRef(op, i));
      break;
    }
  }
  /* Reduce */
  for (size_t i = 0; i < count; i++) put(t, send, i, val(rank, i));
  NCCLOK(ncclReduce(send, recv, count, t, op, root, comm, NULL));
  for (size_t i = 0; rank == root && i < count; i++) {
    if (!near(t, op, get(t, recv, i), redRef(op, i))) {
      CHECK(0, "Reduce root %d type %d op %d count %zu: [%zu] = %g, want %g", root, t, op, count, i,
            get(t, recv, i), redRef(op, i));
      break;
    }
  }
  /* ReduceScatter: recvbuff = sendbuff + rank * count in place */
  for (size_t i = 0; i < count * n; i++) put(t, send, i, val(rank, i));
  char* rsRecv = inPlace ? send + (size_t)rank * count * ts : recv;
  NCCLOK(ncclReduceScatter(send, rsRecv, count, t, op, comm, NULL));
  for (size_t i = 0; i < count; i++) {
    double want = redRef(op, (size_t)rank * count + i);
    if (!near(t, op, get(t, rsRecv, i), want)) {
      CHECK(0, "ReduceScatter type %d op %d count %zu inplace %d: [%zu] = %g, want %g", t, op, count, inPlace, i,
            get(t, rsRecv, i), want);
      break;
    }
  }
  free(a);
  free(b);
}

static unsigned char pat(int r, size_t i) { return (unsigned char)(r * 29 + i * 13 + 1); }

static int checkBytes(const unsigned char* p, int r, size_t off, size_t bytes, const char* what) {
  for (size_t i = 0; i < bytes; i++) {
    if (p[i] != pat(r, off + i)) {
      CHECK(0, "%s: byte %zu from rank %d is %u, want %u", what, i, r, p[i], pat(r, off + i));
      return 0;
    }
  }
  return 1;
}

/* AllGather, Broadcast, AlltoAll, Gather, Scatter on bytes, with NCCL's in-place layouts. */
static void copies(size_t bytes, int inPlace, int root) {
  size_t n = (size_t)nranks, total = bytes * n;
  unsigned char* a = malloc(total + 8);
  unsigned char* b = malloc(total + 8);
  unsigned char *big = b, *mine;
  /* AllGather: sendbuff = recvbuff + rank * bytes in place */
  mine = inPlace ? big + (size_t)rank * bytes : a;
  for (size_t i = 0; i < bytes; i++) mine[i] = pat(rank, i);
  NCCLOK(ncclAllGather(mine, big, bytes, ncclUint8, comm, NULL));
  for (int r = 0; r < nranks; r++) checkBytes(big + (size_t)r * bytes, r, 0, bytes, "AllGather");
  /* Broadcast */
  unsigned char* bsend = a;
  unsigned char* brecv = inPlace ? a : b;
  for (size_t i = 0; i < bytes; i++) bsend[i] = rank == root ? pat(root, i) : 0;
  NCCLOK(ncclBroadcast(bsend, brecv, bytes, ncclUint8, root, comm, NULL));
  checkBytes(brecv, root, 0, bytes, "Broadcast");
  /* Bcast (in place by definition) */
  for (size_t i = 0; i < bytes; i++) a[i] = rank == root ? pat(root, i) ^ 0x5a : 0;
  NCCLOK(ncclBcast(a, bytes, ncclUint8, root, comm, NULL));
  for (size_t i = 0; i < bytes; i++) {
    if (a[i] != (unsigned char)(pat(root, i) ^ 0x5a)) {
      CHECK(0, "Bcast: byte %zu is %u, want %u", i, a[i], (unsigned char)(pat(root, i) ^ 0x5a));
      break;
    }
  }
  /* AlltoAll: block p of my send goes to rank p */
  for (size_t i = 0; i < total; i++) a[i] = pat(rank, i);
  unsigned char* arecv = inPlace ? a : b;
  NCCLOK(ncclAlltoAll(a, arecv, bytes, ncclUint8, comm, NULL));
  for (int r = 0; r < nranks; r++) checkBytes(arecv + (size_t)r * bytes, r, (size_t)rank * bytes, bytes, "AlltoAll");
  /* Gather: sendbuff = recvbuff + rank * bytes in place */
  mine = inPlace ? big + (size_t)rank * bytes : a;
  for (size_t i = 0; i < bytes; i++) mine[i] = pat(rank, i);
  NCCLOK(ncclGather(mine, big, bytes, ncclUint8, root, comm, NULL));
  for (int r = 0; rank == root && r < nranks; r++) checkBytes(big + (size_t)r * bytes, r, 0, bytes, "Gather");
  /* Scatter: recvbuff = sendbuff + rank * bytes in place */
  for (size_t i = 0; i < total; i++) big[i] = rank == root ? pat(root, i) : 0;
  unsigned char* srecv = inPlace ? big + (size_t)rank * bytes : a;
  NCCLOK(ncclScatter(big, srecv, bytes, ncclUint8, root, comm, NULL));
  checkBytes(srecv, root, (size_t)rank * bytes, bytes, "Scatter");
  free(a);
  free(b);
}

/* One group: an AllReduce, a ring exchange with send/recv, an AllGather; then a PreMulSum. */
static void mixedGroup(size_t count) {
  int n = nranks, next = (rank + 1) % n, prev = (rank + n - 1) % n;
  float* in = malloc(count * sizeof(float));
  float* ar = malloc(count * sizeof(float));
  float* sr = malloc(count * sizeof(float));
  float* ag = malloc(count * n * sizeof(float));
  for (size_t i = 0; i < count; i++) in[i] = (float)(rank * 10 + i % 7);
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclAllReduce(in, ar, count, ncclFloat, ncclSum, comm, NULL));
  NCCLOK(ncclSend(in, count, ncclFloat, next, comm, NULL));
  NCCLOK(ncclRecv(sr, count, ncclFloat, prev, comm, NULL));
  NCCLOK(ncclAllGather(in, ag, count, ncclFloat, comm, NULL));
  NCCLOK(ncclGroupEnd());
  for (size_t i = 0; i < count; i++) {
    float sum = 0;
    for (int r = 0; r < n; r++) sum += (float)(r * 10 + i % 7);
    if (ar[i] != sum || sr[i] != (float)(prev * 10 + i % 7)) {
      CHECK(0, "mixed group [%zu]: allreduce %g want %g, recv %g want %g", i, ar[i], sum, sr[i],
            (float)(prev * 10 + i % 7));
      break;
    }
    for (int r = 0; r < n; r++) {
      if (ag[(size_t)r * count + i] != (float)(r * 10 + i % 7)) {
        CHECK(0, "mixed group allgather block %d [%zu] wrong", r, i);
        i = count;
        break;
      }
    }
  }
  ncclRedOp_t op;
  float scalar = 0.5f;
  NCCLOK(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, comm));
  NCCLOK(ncclAllReduce(in, ar, count, ncclFloat, op, comm, NULL));
  NCCLOK(ncclRedOpDestroy(op, comm));
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int r = 0; r < n; r++) want += (float)(r * 10 + i % 7) * 0.5f;
    if (ar[i] != want) {
      CHECK(0, "PreMulSum [%zu] = %g, want %g", i, ar[i], want);
      break;
    }
  }
  free(in);
  free(ar);
  free(sr);
  free(ag);
}

static double cpuSeconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec * 1e-6;
}

/* Waiting does not burn CPU: the last rank comes 1 s late to an AllReduce; the others, blocked in it,
 * must use a small fraction of one core (whole process: engine, proxy and bootstrap threads). */
static void idleWait(void) {
  float x[256];
  for (int i = 0; i < 256; i++) x[i] = 1;
  NCCLOK(ncclAllReduce(x, x, 256, ncclFloat, ncclSum, comm, NULL)); /* connections are up */
  if (rank == nranks - 1) usleep(1000 * 1000);
  double c0 = cpuSeconds(), t0 = mtNow();
  for (int i = 0; i < 256; i++) x[i] = 1;
  NCCLOK(ncclAllReduce(x, x, 256, ncclFloat, ncclSum, comm, NULL));
  double cpu = cpuSeconds() - c0, wall = mtNow() - t0;
  CHECK(x[0] == (float)nranks && x[255] == (float)nranks, "AllReduce after the wait: %g", x[0]);
  if (rank != nranks - 1) {
    CHECK(wall > 0.8, "the AllReduce returned after %.3f s, before the late rank came", wall);
    CHECK(cpu < 0.12 * wall, "%.3f s of CPU while blocked for %.3f s", cpu, wall);
    printf("# rank %d: %.3f s CPU while blocked for %.3f s\n", rank, cpu, wall);
  }
}

static int child(int argc, char** argv) {
  rank = atoi(argv[2]);
  nranks = atoi(argv[3]);
  const char* part = argv[5];
  ncclUniqueId id;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) sscanf(argv[4] + 2 * i, "%2hhx", (unsigned char*)&id.internal[i]);
  ncclResult_t res = ncclCommInitRank(&comm, nranks, id, rank);
  if (res != ncclSuccess) {
    printf("# rank %d: ncclCommInitRank failed: %s\n", rank, ncclGetErrorString(res));
    return 1;
  }
  static const size_t counts[] = {0, 1, 17, 1031, 300007};
  if (strcmp(part, "reduce") == 0) {
    const ncclDataType_t types[] = {ncclInt32, ncclFloat32, ncclFloat64, ncclUint8, ncclInt64};
    const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
    for (int c = 0; c < 5; c++) {
      for (int k = 0; k < 5; k++) {
        ncclDataType_t t = types[k];
        ncclRedOp_t op = ops[(k + c) % 5];
        if (op == ncclProd && t == ncclUint8) op = ncclMax; /* 4^8 overflows */
        reductions(t, op, counts[c], c % 2, (c + k) % nranks);
      }
    }
  } else if (strcmp(part, "copy") == 0) {
    for (int c = 0; c < 5; c++) copies(counts[c] + 3, c % 2, c % nranks);
  } else if (strcmp(part, "idle") == 0) {
    idleWait();
  } else {
    mixedGroup(1000);
    mixedGroup(200003);
  }
  /* Out-of-band barrier through the parent before destroy: every rank has received everything,
   * so how a transport closes its connections cannot disturb a result we check. */
  char byte = (char)(fails ? 1 : 0);
  int toParent = atoi(argv[6]), fromParent = atoi(argv[7]);
  if (write(toParent, &byte, 1) != 1 || read(fromParent, &byte, 1) != 1) printf("# rank %d: barrier failed\n", rank);
  NCCLOK(ncclCommDestroy(comm));
  return fails ? 1 : 0;
}

/* ------------------------------------------------------------ parent side */

static void runConfig(const char* self, int n, int net, const char* part) {
  ncclUniqueId id;
  char name[128], hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
  snprintf(name, sizeof name, "collectives_%s_%dranks_%s", net ? "sockets" : "shm", n, part);
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    mtResult(0, name, "ncclGetUniqueId failed");
    return;
  }
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) sprintf(hex + 2 * i, "%02x", (unsigned char)id.internal[i]);
  pid_t pids[MAXR];
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) {
    mtResult(0, name, "pipe failed");
    return;
  }
  fcntl(up[0], F_SETFD, FD_CLOEXEC); /* children keep only their ends */
  fcntl(down[1], F_SETFD, FD_CLOEXEC);
  char ups[16], downs[16];
  snprintf(ups, sizeof ups, "%d", up[1]);
  snprintf(downs, sizeof downs, "%d", down[0]);
  double t0 = mtNow();
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      char rs[16], ns[16], host[32];
      snprintf(rs, sizeof rs, "%d", r);
      snprintf(ns, sizeof ns, "%d", n);
      if (net) {
        snprintf(host, sizeof host, "mend-test-host-%d", r);
        setenv("NCCL_HOSTID", host, 1);
        setenv("NCCL_SHM_DISABLE", "1", 1);
        setenv("NCCL_SOCKET_IFNAME", "lo", 1);
      }
      execl(self, self, "--child", rs, ns, hex, part, ups, downs, (char*)NULL);
      _exit(127);
    }
  }
  /* Release the children from the pre-destroy barrier once all arrived (or some exited). */
  close(up[1]);
  close(down[0]);
  int arrived = 0, exited = 0, ok = 1, codes[MAXR], done[MAXR] = {0};
  while (arrived + exited < n) {
    struct pollfd pf = {.fd = up[0], .events = POLLIN};
    char byte;
    if (poll(&pf, 1, 100) > 0 && read(up[0], &byte, 1) == 1) arrived++;
    for (int r = 0; r < n; r++) {
      int st = 0;
      if (!done[r] && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        done[r] = 1;
        codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        exited++;
      }
    }
  }
  for (int r = 0; r < n; r++) (void)!write(down[1], "g", 1);
  close(up[0]);
  close(down[1]);
  for (int r = 0; r < n; r++) {
    int st = 0;
    while (!done[r] && waitpid(pids[r], &st, 0) < 0 && errno == EINTR) {}
    if (!done[r]) codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (codes[r] != 0) ok = 0;
  }
  mtResult(ok, name, "child exit codes %d %d %d %d ... (%.1f s)", codes[0], codes[1], n > 2 ? codes[2] : 0,
           n > 3 ? codes[3] : 0, mtNow() - t0);
}

int main(int argc, char** argv) {
  if (argc >= 8 && strcmp(argv[1], "--child") == 0) {
    alarm(240); /* a hung child dies and fails its configuration */
    return child(argc, argv);
  }
  if (!mtStart("collectives", 540)) return mtExitCode();
  const char* parts[] = {"reduce", "copy", "mixed"};
  const int sizes[] = {2, 3, 4, 8};
  for (int net = 0; net < 2; net++) {
    for (int s = 0; s < 4; s++) {
      for (int p = 0; p < 3; p++) runConfig("/proc/self/exe", sizes[s], net, parts[p]);
    }
    /* A blocked host engine sleeps; the kernel-cpu executor is a GPU kernel's code and spins as one. */
    const char* ex = getenv("MEND_EXECUTOR");
    if (!ex || strcmp(ex, "kernel-cpu") != 0) runConfig("/proc/self/exe", 4, net, "idle");
  }
  return mtExitCode();
}
